//! `xferlab lab`: client and server hosts as network namespaces, joined by
//! xferlab's own userspace link emulator (two TUN devices, one forwarding
//! thread per direction), with a real xferlab server and client inside.
//!
//! Everything the lab creates is named `xferlab-<owner pid>-<role>`; the
//! TUN devices vanish with the runner's file descriptors, child processes
//! die with it (PR_SET_PDEATHSIG), and `xferlab lab clean` removes
//! namespaces whose owner is gone (also after SIGKILL).

mod forward;
mod netns;
mod pcap;
mod probe;
mod report;
mod tun;

use anyhow::{anyhow, bail, Context};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use xferlab_core::counters::{parse_dev, parse_snmp, parse_snmp6, CounterSnapshot};
use xferlab_core::link::report::LabHost;
use xferlab_core::link::LinkConfig;

use crate::cli::lab::{CheckedLab, LabArgs, LabArgsError};
use crate::output::Format;
use crate::sys;
use crate::sys::process::Signal;
use forward::{ForwardReport, Forwarder};

const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const CLIENT_ADDR6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 1);
const SERVER_ADDR6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 2);
/// With `--router`: the router's side of the emulated link, its side of
/// the server's hop, and the server behind it.
const ROUTER_A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 254);
const ROUTER_B: Ipv4Addr = Ipv4Addr::new(10, 77, 1, 254);
const ROUTED_SERVER: Ipv4Addr = Ipv4Addr::new(10, 77, 1, 2);
const ROUTER_A6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0xfe);
const ROUTER_B6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 1, 0, 0, 0, 0xfe);
const ROUTED_SERVER6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 1, 0, 0, 0, 2);
const IFACE: &str = "xlab0";
/// The router's interface towards the server.
const IFACE_B: &str = "xlab1";
const SERVER_PORT: u16 = 5290;

static INTERRUPTS: AtomicU32 = AtomicU32::new(0);

fn install_interrupt_handler() {
    use crate::sys::signals::{count_into, SIGHUP, SIGINT, SIGTERM};
    if let Err(e) = count_into(&INTERRUPTS, &[SIGINT, SIGTERM, SIGHUP]) {
        eprintln!(
            "xferlab: warning: cannot catch Ctrl-C ({e}); it stops the lab without cleaning up"
        );
    }
}

fn fail(msg: &str, code: u8) -> ExitCode {
    eprintln!("xferlab: {msg}");
    ExitCode::from(code)
}

pub fn run(a: &LabArgs) -> ExitCode {
    if a.command.first().map(String::as_str) == Some("clean") {
        if a.command.len() > 1 {
            return fail("`xferlab lab clean` takes no arguments", 2);
        }
        return clean();
    }
    if a.command.is_empty() {
        return fail(
            "lab needs a test to run (e.g. `xferlab lab --rate 100M --delay 10ms stream -t 5`) or `clean`",
            2,
        );
    }
    let plan = match Plan::new(a) {
        Ok(p) => p,
        // `xferlab lab stream --help`: the test's own help.
        Err(LabArgsError {
            help: Some(help), ..
        }) => {
            help.print().ok();
            return ExitCode::SUCCESS;
        }
        Err(e) => return fail(&e.message, 2),
    };
    if !crate::sys::process::is_root() {
        return fail(
            "lab needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create network namespaces and TUN devices; run it with sudo",
            1,
        );
    }
    remove_dead_leftovers();
    install_interrupt_handler();
    let mut lab = Lab::new();
    let outcome = lab.run(&plan);
    let exit = match outcome {
        Ok(code) => code,
        Err(e) => {
            lab.teardown();
            let code = if INTERRUPTS.load(Ordering::Relaxed) > 0 {
                130
            } else {
                1
            };
            return fail(&format!("{e:#}"), code);
        }
    };
    lab.teardown();
    exit
}

/// The validated request.
struct Plan {
    c2s: LinkConfig,
    s2c: LinkConfig,
    client_sysctls: Vec<(String, String)>,
    server_sysctls: Vec<(String, String)>,
    mtu: u32,
    offload: bool,
    pcap: Option<std::path::PathBuf>,
    pcap_snaplen: u32,
    buffers: usize,
    /// TUN transmit queue: the ring between a host's kernel and the
    /// emulator (the kernel default 500 silently dropped bursts).
    txqueuelen: u32,
    realtime: bool,
    spin_us: u64,
    probe: bool,
    allow_invalid: bool,
    /// A router namespace between the emulated link and the server.
    router: bool,
    server_addr: Ipv4Addr,
    /// The client's command line after the binary name, server inserted.
    client_args: Vec<String>,
    format: Format,
    output: Option<std::path::PathBuf>,
}

impl Plan {
    fn new(a: &LabArgs) -> Result<Self, LabArgsError> {
        let CheckedLab {
            c2s,
            s2c,
            client_sysctls,
            server_sysctls,
            test,
        } = a.check()?;
        let offload = a.offload.resolve([&c2s, &s2c]);
        let buffers = a.buffers.unwrap_or_else(|| default_buffers(&c2s, &s2c));
        let stream = test.stream();
        let (server_addr, server_addr6) = if a.router {
            (ROUTED_SERVER, ROUTED_SERVER6)
        } else {
            (SERVER_ADDR, SERVER_ADDR6)
        };
        let server = match stream.family() {
            crate::net::Family::V6 => server_addr6.to_string(),
            _ => server_addr.to_string(),
        };
        let mut client_args = vec![test.verb().to_string(), server];
        client_args.extend(test.words[1..].iter().cloned());
        client_args.extend(["-p".to_string(), SERVER_PORT.to_string()]);
        Ok(Plan {
            c2s,
            s2c,
            client_sysctls,
            server_sysctls,
            mtu: a.mtu,
            offload,
            pcap: a.pcap.clone(),
            pcap_snaplen: a.pcap_snaplen,
            buffers,
            txqueuelen: a.txqueuelen,
            realtime: !a.no_realtime,
            spin_us: a.spin_us,
            probe: !a.no_probe,
            allow_invalid: a.allow_invalid,
            router: a.router,
            server_addr,
            client_args,
            format: stream.format(),
            output: stream.output.clone(),
        })
    }
}

/// Buffers per direction: room for what one direction can hold (a full
/// queue plus a delay line at the link rate, twice over), at least 4096.
fn default_buffers(c2s: &LinkConfig, s2c: &LinkConfig) -> usize {
    use xferlab_core::link::config::QueueLimit;
    let need = |c: &LinkConfig| -> u64 {
        let queue = match c.queue {
            QueueLimit::Packets(n) => n,
            QueueLimit::Bytes(b) => b / 500,
        };
        let line = c.rate_bps.map_or(0, |r| {
            (r as u128 * u128::from(c.delay_ns + c.jitter.map_or(0, |j| 4 * j.amount_ns))
                / 8
                / 1_000_000_000
                / 1500) as u64
        });
        2 * (queue + line)
    };
    need(c2s).max(need(s2c)).clamp(4096, 1 << 16) as usize
}

/// What exists of one lab; `teardown` removes it in reverse.
struct Lab {
    pid: u32,
    namespaces: Vec<String>,
    children: Vec<Child>,
    stop: Arc<AtomicBool>,
    forwarders: Vec<std::thread::JoinHandle<ForwardReport>>,
    tuns: Vec<File>,
    /// (namespace, interface) of each TUN device, parallel to `tuns`.
    ports: Vec<(String, &'static str)>,
}

/// One TUN interface of a host.
#[derive(Debug, Clone, Copy)]
struct Iface {
    name: &'static str,
    local: Ipv4Addr,
    peer: Ipv4Addr,
    /// The prefix routed through this interface (peer & mask).
    mask: Ipv4Addr,
    local6: Ipv6Addr,
    prefix6: u32,
}

impl Lab {
    fn new() -> Self {
        Lab {
            pid: std::process::id(),
            namespaces: Vec::new(),
            children: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
            forwarders: Vec::new(),
            tuns: Vec::new(),
            ports: Vec::new(),
        }
    }

    fn ns_name(&self, role: &str) -> String {
        format!("{}{}-{role}", netns::PREFIX, self.pid)
    }

    fn check_interrupt(&self) -> anyhow::Result<()> {
        if INTERRUPTS.load(Ordering::Relaxed) > 0 {
            bail!("interrupted while setting up the lab; everything it made is removed");
        }
        Ok(())
    }

    /// Creates a host: namespace, its TUN devices (one port each),
    /// addresses, sysctls.
    fn host(
        &mut self,
        role: &str,
        ifaces: &[Iface],
        plan: &Plan,
        sysctls: &[(String, String)],
    ) -> anyhow::Result<LabHost> {
        let ns = self.ns_name(role);
        netns::create(&ns).map_err(|e| {
            if netns::errno(&e) == Some(libc::EPERM) {
                anyhow!("cannot create a network namespace ({e:#}); lab needs CAP_SYS_ADMIN and CAP_NET_ADMIN")
            } else {
                e.context(format!("cannot create network namespace {ns}"))
            }
        })?;
        self.namespaces.push(ns.clone());
        let (mtu, offload, txqueuelen) = (plan.mtu, plan.offload, plan.txqueuelen);
        let settings = sysctls.to_vec();
        let specs = ifaces.to_vec();
        let tuns = netns::run_in(&ns, move || {
            let mut files = Vec::new();
            for i in &specs {
                let f = tun::open(i.name, offload)?;
                // No router solicitations: the emulated link has no
                // router advertising; addresses are static.
                let _ = std::fs::write(
                    format!("/proc/sys/net/ipv6/conf/{}/router_solicitations", i.name),
                    "0",
                );
                tun::configure(i.name, i.local, i.peer, i.mask, mtu, txqueuelen)?;
                if let Err(e) = tun::add_ipv6(i.name, i.local6, i.prefix6) {
                    // A kernel without IPv6: the lab still runs over IPv4.
                    if netns::errno(&e) != Some(libc::EAFNOSUPPORT) {
                        return Err(e);
                    }
                }
                files.push(f);
            }
            for (k, v) in &settings {
                netns::write_sysctl(k, v)?;
            }
            Ok(files)
        })?;
        for (f, i) in tuns.into_iter().zip(ifaces) {
            self.tuns.push(f);
            self.ports.push((ns.clone(), i.name));
        }
        let join =
            |f: &dyn Fn(&Iface) -> String| ifaces.iter().map(f).collect::<Vec<_>>().join(",");
        Ok(LabHost {
            role: role.into(),
            namespace: ns.clone(),
            interface: join(&|i| i.name.to_string()),
            address: join(&|i| i.local.to_string()),
            address6: join(&|i| i.local6.to_string()),
            mtu,
            sysctls: sysctls.iter().cloned().collect(),
        })
    }

    fn spawn_in(&self, ns: &str, args: &[String], stdout: Stdio) -> anyhow::Result<Child> {
        let exe = std::env::current_exe().context("cannot find my own binary")?;
        let nsf = netns::open(ns)?;
        let mut cmd = Command::new(exe);
        cmd.args(args)
            .stdout(stdout)
            .stdin(Stdio::null())
            // Own process group: a terminal's Ctrl-C reaches only the
            // runner, which forwards it to the client (the server must
            // stay up to send its report).
            .process_group(0);
        // Die with the runner, even when it is SIGKILLed.
        sys::process::die_with_parent(&mut cmd, sys::process::Signal::KILL);
        // SAFETY: the hook runs between fork and exec and makes one system
        // call (setns), which is async-signal-safe and allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};
                move_into_link_name_space(nsf.as_fd(), Some(LinkNameSpaceType::Network))?;
                Ok(())
            });
        }
        cmd.spawn()
            .with_context(|| format!("cannot start xferlab in {ns}"))
    }

    fn run(&mut self, plan: &Plan) -> anyhow::Result<ExitCode> {
        let v4 = |local, peer, prefix: u32| (local, peer, u32::MAX << (32 - prefix));
        let iface = |name, (local, peer, mask): (Ipv4Addr, Ipv4Addr, u32), local6, prefix6| Iface {
            name,
            local,
            peer,
            mask: Ipv4Addr::from(mask),
            local6,
            prefix6,
        };
        let mut hosts = Vec::new();
        // Ports (TUN devices) in order: the emulated link's two ends, then
        // with a router its hop to the server.
        if plan.router {
            // Client and server reach the whole lab prefix through their
            // link; the router forwards between its two.
            let c = iface(IFACE, v4(CLIENT_ADDR, ROUTER_A, 16), CLIENT_ADDR6, 48);
            hosts.push(self.host("client", &[c], plan, &plan.client_sysctls)?);
            self.check_interrupt()?;
            let ra = iface(IFACE, v4(ROUTER_A, CLIENT_ADDR, 32), ROUTER_A6, 64);
            let rb = iface(IFACE_B, v4(ROUTER_B, ROUTED_SERVER, 32), ROUTER_B6, 64);
            let forwarding = [
                ("net.ipv4.ip_forward".to_string(), "1".to_string()),
                ("net.ipv6.conf.all.forwarding".to_string(), "1".to_string()),
            ];
            hosts.push(self.host("router", &[ra, rb], plan, &forwarding)?);
            self.check_interrupt()?;
            let sv = iface(IFACE, v4(ROUTED_SERVER, ROUTER_B, 16), ROUTED_SERVER6, 48);
            hosts.push(self.host("server", &[sv], plan, &plan.server_sysctls)?);
        } else {
            let c = iface(IFACE, v4(CLIENT_ADDR, SERVER_ADDR, 32), CLIENT_ADDR6, 64);
            hosts.push(self.host("client", &[c], plan, &plan.client_sysctls)?);
            self.check_interrupt()?;
            let sv = iface(IFACE, v4(SERVER_ADDR, CLIENT_ADDR, 32), SERVER_ADDR6, 64);
            hosts.push(self.host("server", &[sv], plan, &plan.server_sysctls)?);
        }
        self.check_interrupt()?;
        let client_ns = hosts[0].namespace.clone();
        let server_ns = hosts[hosts.len() - 1].namespace.clone();
        let before = self.snapshots()?;
        // (port a, port b, a->b config, b->a config, name): the emulated
        // link, then the router's plain hop to the server.
        let plain = LinkConfig::default();
        let mut hops = vec![(0, 1, plan.c2s.clone(), plan.s2c.clone(), "")];
        if plan.router {
            hops.push((2, 3, plain.clone(), plain, "router-"));
        }

        // Forwarders: c2s reads the client's device and writes the server's.
        let epoch = Instant::now();
        let epoch_unix_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let pcap_path = |dir: &str| {
            plan.pcap.as_ref().map(|p| {
                let base = p.to_string_lossy();
                let base = base.strip_suffix(".pcap").unwrap_or(&base).to_string();
                std::path::PathBuf::from(format!("{base}.{dir}.pcap"))
            })
        };
        let legs: Vec<(String, usize, usize, LinkConfig)> = hops
            .iter()
            .flat_map(|(a, b, ab, ba, prefix)| {
                [
                    (format!("{prefix}c2s"), *a, *b, ab.clone()),
                    (format!("{prefix}s2c"), *b, *a, ba.clone()),
                ]
            })
            .collect();
        for (name, from, to, cfg) in legs {
            let cfg = &cfg;
            let name = name.as_str();
            let dup = |i: usize| {
                self.tuns[i]
                    .try_clone()
                    .context("cannot duplicate the TUN handle")
            };
            // Only the emulated link is captured.
            let pcap = match pcap_path(name).filter(|_| !name.starts_with("router")) {
                Some(p) => Some(pcap::PcapWriter::create(&p, plan.pcap_snaplen)?),
                None => None,
            };
            let fwd = Forwarder {
                input: dup(from)?,
                output: dup(to)?,
                config: cfg.clone(),
                slots: plan.buffers,
                slot_size: if plan.offload {
                    forward::SUPERPACKET_SLOT
                } else {
                    plan.mtu as usize + 64
                },
                pcap,
                realtime: plan.realtime,
                spin_ns: plan.spin_us * 1000,
                epoch,
                epoch_unix_ns,
                stop: self.stop.clone(),
            };
            let h = std::thread::Builder::new()
                .name(format!("xl-fwd-{name}"))
                .spawn(move || fwd.run())
                .context("cannot start the forwarder")?;
            self.forwarders.push(h);
        }

        // The server, inside its namespace, on every address there (IPv4
        // and IPv6 on one dual-stack socket): only the lab link and
        // loopback exist in it.
        let server_args: Vec<String> = vec!["server".into(), "-p".into(), SERVER_PORT.to_string()];
        let mut srv = self.spawn_in(&server_ns, &server_args, Stdio::piped())?;
        let out = srv.stdout.take();
        self.children.push(srv);
        wait_listening(out)?;
        self.check_interrupt()?;

        let probe = if plan.probe {
            let one_way = |c: &LinkConfig| {
                c.delay_ns as f64 / 1e3 + c.rate_bps.map_or(0.0, |r| 48.0 * 8.0 * 1e6 / r as f64)
            };
            let expected = one_way(&plan.c2s) + one_way(&plan.s2c);
            let target = SocketAddr::from((plan.server_addr, probe::PROBE_PORT));
            Some(probe::measure(
                &client_ns,
                &server_ns,
                target,
                10,
                Duration::from_millis(5),
                expected,
            )?)
        } else {
            None
        };
        self.check_interrupt()?;

        // The test, inside the client namespace.
        let capture = plan.format == Format::Json && plan.output.is_none();
        let stdout = if capture {
            Stdio::piped()
        } else {
            Stdio::inherit()
        };
        let mut cli = self.spawn_in(&client_ns, &plan.client_args, stdout)?;
        let captured = cli.stdout.take().map(|mut o| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = o.read_to_string(&mut s);
                s
            })
        });
        let status = wait_client(&mut cli);
        let client_text = captured.and_then(|h| h.join().ok()).unwrap_or_default();

        // Deliver what is still in flight, then stop the forwarders.
        self.stop.store(true, Ordering::Relaxed);
        let reports: Vec<ForwardReport> = self
            .forwarders
            .drain(..)
            .map(|h| h.join().map_err(|_| anyhow!("a forwarder thread panicked")))
            .collect::<Result<_, _>>()?;
        let after = self.snapshots()?;
        stop_children(&mut self.children);

        let port_pairs: Vec<(usize, usize)> = hops.iter().map(|h| (h.0, h.1)).collect();
        let report = report::assemble(plan, hosts, &reports, &port_pairs, (&before, &after), probe);
        let invalid = !report.accuracy.valid;
        report::emit(plan, &report, &client_text)?;
        if invalid {
            eprintln!(
                "xferlab: LAB RUN INVALID: {}",
                report.accuracy.violations.join("; ")
            );
        }
        let code = match status {
            Some(c) if c != 0 => c as u8,
            None => 1,
            _ if INTERRUPTS.load(Ordering::Relaxed) > 0 => 130,
            _ if invalid && !plan.allow_invalid => 1,
            _ => 0,
        };
        Ok(ExitCode::from(code))
    }

    fn teardown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        stop_children(&mut self.children);
        for h in self.forwarders.drain(..) {
            let _ = h.join();
        }
        self.tuns.clear();
        self.ports.clear();
        for ns in self.namespaces.drain(..).rev() {
            if let Err(e) = netns::delete(&ns) {
                eprintln!("xferlab: {e:#}; run `xferlab lab clean`");
            }
        }
    }
}

/// Counters of one namespace: netstat/snmp/snmp6 and one link device.
fn snapshot(ns: &str, iface: &'static str) -> anyhow::Result<CounterSnapshot> {
    netns::run_in(ns, move || {
        let mut s = CounterSnapshot::default();
        for f in ["snmp", "netstat"] {
            let text = netns::read_net_file(f)?;
            let _ = parse_snmp(&text, &mut s);
        }
        if let Ok(text) = netns::read_net_file("snmp6") {
            let _ = parse_snmp6(&text, &mut s);
        }
        let dev = netns::read_net_file("dev")?;
        let _ = parse_dev(&dev, iface, &mut s);
        Ok(s)
    })
}

impl Lab {
    /// One snapshot per port (TUN device), in port order.
    fn snapshots(&self) -> anyhow::Result<Vec<CounterSnapshot>> {
        self.ports.iter().map(|(ns, i)| snapshot(ns, i)).collect()
    }
}

fn wait_listening(out: Option<std::process::ChildStdout>) -> anyhow::Result<()> {
    let out = out.context("the lab server has no output")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(out);
        let mut line = String::new();
        let ok =
            r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) && line.contains("listening");
        let _ = tx.send(ok);
        // Keep draining the server's log so it never blocks on a full pipe.
        let mut sink = [0u8; 4096];
        while matches!(r.read(&mut sink), Ok(n) if n > 0) {}
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(true) => Ok(()),
        _ => bail!("the xferlab server in the lab's server namespace did not start"),
    }
}

/// Waits for the client: Ctrl-C once forwards SIGINT (the test stops early
/// and still reports), twice kills it. None: killed by a signal.
fn wait_client(c: &mut Child) -> Option<i32> {
    let mut forwarded = 0;
    loop {
        match c.try_wait() {
            Ok(Some(s)) => return s.code(),
            Ok(None) => {}
            Err(_) => return None,
        }
        let n = INTERRUPTS.load(Ordering::Relaxed);
        if n > forwarded {
            forwarded = n;
            let sig = if n == 1 { Signal::INT } else { Signal::KILL };
            sys::process::signal_child(c, sig).ok();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stop_children(children: &mut Vec<Child>) {
    for c in children.iter() {
        sys::process::signal_child(c, Signal::TERM).ok();
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    for mut c in children.drain(..) {
        loop {
            if matches!(c.try_wait(), Ok(Some(_)) | Err(_)) {
                break;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Removes namespaces of labs whose owner is no longer running, with any
/// process still inside. Returns what it removed.
fn remove_dead_leftovers() -> Vec<String> {
    let mut removed = Vec::new();
    for (name, pid) in netns::list_owned() {
        if pid == std::process::id() || netns::owner_alive(pid) {
            continue;
        }
        for p in netns::pids_in(&name) {
            sys::process::signal_pid(p, Signal::KILL).ok();
        }
        if netns::delete(&name).is_ok() {
            removed.push(name);
        }
    }
    removed
}

fn clean() -> ExitCode {
    if !crate::sys::process::is_root() {
        return fail(
            "lab clean needs root to remove network namespaces; run it with sudo",
            1,
        );
    }
    let removed = remove_dead_leftovers();
    let running: Vec<String> = netns::list_owned()
        .into_iter()
        .filter(|(_, pid)| netns::owner_alive(*pid))
        .map(|(n, _)| n)
        .collect();
    if removed.is_empty() {
        println!("lab clean: nothing left over");
    } else {
        println!("lab clean: removed {}", removed.join(", "));
    }
    if !running.is_empty() {
        println!(
            "lab clean: kept {} (its lab is still running)",
            running.join(", ")
        );
    }
    let _ = std::io::stdout().flush();
    ExitCode::SUCCESS
}
