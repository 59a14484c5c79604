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
pub mod plan;
mod probe;
mod report;
mod tun;
mod wakeup;

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
use xferlab_core::link::report::{LabHost, RttProbe};
use xferlab_core::link::LinkConfig;

use crate::output::Format;
use crate::sys;
use crate::sys::process::Signal;
use forward::{ForwardReport, Forwarder};
pub use plan::{HostSpec, HostTest, Plan, Program, Spin, Sysctls};

/// The router's side of the emulated link (`--router`) and the gateway
/// every host routes the lab's prefix through (a TUN device is
/// point-to-point: the peer address need not exist).
const ROUTER_A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 254);
const ROUTER_B: Ipv4Addr = Ipv4Addr::new(10, 77, 1, 254);
const ROUTER_A6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0xfe);
const IFACE: &str = "xlab0";
/// The router's interface towards the server.
const IFACE_B: &str = "xlab1";
const SERVER_PORT: u16 = 5290;

/// Host ids: client host i is 2i+1, server host j is 2j+2 (so the first
/// client is .1 and the first server .2, and ids never collide).
fn client_id(i: usize) -> u8 {
    (2 * i + 1) as u8
}

fn server_id(j: usize) -> u8 {
    (2 * j + 2) as u8
}

/// A host's addresses: 10.77.SEG.ID and fd77:0:0:SEG::ID (SEG 1 behind
/// the router, else 0).
fn addrs(seg: u8, id: u8) -> (Ipv4Addr, Ipv6Addr) {
    (
        Ipv4Addr::new(10, 77, seg, id),
        Ipv6Addr::new(0xfd77, 0, 0, u16::from(seg), 0, 0, 0, u16::from(id)),
    )
}

static INTERRUPTS: AtomicU32 = AtomicU32::new(0);

fn install_interrupt_handler() {
    use crate::sys::signals::{count_into, SIGHUP, SIGINT, SIGTERM};
    if let Err(e) = count_into(&INTERRUPTS, &[SIGINT, SIGTERM, SIGHUP]) {
        tracing::warn!("cannot catch Ctrl-C ({e}); it stops the lab without cleaning up");
    }
}

fn fail(msg: &str, code: u8) -> ExitCode {
    eprintln!("xferlab: {msg}");
    ExitCode::from(code)
}

/// Runs a checked lab: needs root; tears everything down however it ends.
pub fn run(plan: &Plan) -> ExitCode {
    if !sys::process::is_root() {
        return fail(
            "lab needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create network namespaces and TUN devices; run it with sudo",
            1,
        );
    }
    remove_dead_leftovers();
    install_interrupt_handler();
    let mut lab = Lab::new();
    let outcome = lab.run(plan);
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

impl Plan {
    fn c2s(&self) -> &LinkConfig {
        &self.hops[0].0
    }

    fn s2c(&self) -> &LinkConfig {
        &self.hops[0].1
    }

    /// The server side's segment: 1 behind the router, else 0.
    fn server_seg(&self) -> u8 {
        u8::from(self.router)
    }

    fn host_addrs(&self, name: &str) -> Option<(Ipv4Addr, Ipv6Addr)> {
        if let Some(i) = self.clients.iter().position(|h| h.name == name) {
            return Some(addrs(0, client_id(i)));
        }
        let j = self.servers.iter().position(|h| h.name == name)?;
        Some(addrs(self.server_seg(), server_id(j)))
    }

    /// A test's command line after the binary name: its server's address
    /// and the lab server's port inserted, or a named lab host replaced by
    /// its address.
    fn client_args(&self, t: &HostTest) -> Vec<String> {
        let v6 = matches!(t.family, crate::net::Family::V6);
        let pick = |(a4, a6): (Ipv4Addr, Ipv6Addr)| {
            if v6 {
                a6.to_string()
            } else {
                a4.to_string()
            }
        };
        let words = &t.words;
        match (&t.target, t.host.as_deref()) {
            (Some(name), Some(given)) => {
                let addr = self.host_addrs(name).map(pick).unwrap_or_default();
                let addr = if addr.contains(':') && given.contains(&format!("{name}:")) {
                    format!("[{addr}]")
                } else {
                    addr
                };
                let replaced = given.replacen(name.as_str(), &addr, 1);
                words
                    .iter()
                    .map(|w| {
                        if w == given {
                            replaced.clone()
                        } else {
                            w.clone()
                        }
                    })
                    .collect()
            }
            _ => {
                let server = self.host_addrs(&t.server).map(pick).unwrap_or_default();
                let mut args = vec![t.verb().to_string(), server];
                args.extend(words[1..].iter().cloned());
                args.extend(["-p".to_string(), SERVER_PORT.to_string()]);
                args
            }
        }
    }
}

/// Buffers per direction: room for what the hops can hold (their queues
/// plus their delay lines at the link rate, twice over), at least 4096.
pub fn default_buffers(hops: &[(LinkConfig, LinkConfig)]) -> usize {
    use xferlab_core::link::config::QueueLimit;
    let need = |c: &LinkConfig| -> u64 {
        let queue = match c.queue {
            QueueLimit::Packets(n) => n,
            QueueLimit::Bytes(b) => b / 500,
        };
        let rate = c.rate_bps.or(c.trace.as_ref().map(|t| {
            (u128::from(t.opportunities) * 12_000 * 1_000_000_000 / u128::from(t.period_ns.max(1)))
                as u64
        }));
        let line = rate.map_or(0, |r| {
            (r as u128 * u128::from(c.delay_ns + c.jitter.map_or(0, |j| 4 * j.amount_ns))
                / 8
                / 1_000_000_000
                / 1500) as u64
        });
        2 * (queue + line)
    };
    let c2s: u64 = hops.iter().map(|h| need(&h.0)).sum();
    let s2c: u64 = hops.iter().map(|h| need(&h.1)).sum();
    c2s.max(s2c).clamp(4096, 1 << 16) as usize
}

/// One forwarding thread's part: from which devices to which, through
/// which hops.
struct Leg {
    name: &'static str,
    inputs: Vec<usize>,
    outputs: Vec<usize>,
    route: [u8; 256],
    hops: Vec<LinkConfig>,
    pcap: Option<pcap::PcapWriter>,
}

/// Which TUN devices (ports, in `Lab::tuns` order) sit where.
#[derive(Debug, Default)]
struct Wiring {
    /// The client hosts' devices, in host order.
    clients: Vec<usize>,
    /// The far end of the emulated link: the server hosts' devices, or
    /// the router's.
    far: Vec<usize>,
    /// The server hosts' devices (where c2s CE marks are counted).
    servers: Vec<usize>,
    /// With `--router`: (router's device towards the server, server's).
    router_hop: Option<(usize, usize)>,
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
    /// Every TUN device took UDP segmentation offload (with offload on).
    udp_offload: bool,
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
            udp_offload: true,
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
        name: &str,
        ifaces: &[Iface],
        plan: &Plan,
        mtu: u32,
        sysctls: &[(String, String)],
    ) -> anyhow::Result<LabHost> {
        let ns = self.ns_name(name);
        netns::create(&ns).map_err(|e| {
            if netns::errno(&e) == Some(libc::EPERM) {
                anyhow!("cannot create a network namespace ({e:#}); lab needs CAP_SYS_ADMIN and CAP_NET_ADMIN")
            } else {
                e.context(format!("cannot create network namespace {ns}"))
            }
        })?;
        self.namespaces.push(ns.clone());
        let (offload, txqueuelen) = (plan.offload, plan.txqueuelen);
        let settings = sysctls.to_vec();
        let specs = ifaces.to_vec();
        let (tuns, udp_offload) = netns::run_in(&ns, move || {
            let mut files = Vec::new();
            let mut udp_offload = true;
            for i in &specs {
                let (f, uso) = tun::open(i.name, offload)?;
                udp_offload &= uso;
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
            Ok((files, udp_offload))
        })?;
        self.udp_offload &= udp_offload;
        for (f, i) in tuns.into_iter().zip(ifaces) {
            self.tuns.push(f);
            self.ports.push((ns.clone(), i.name));
        }
        let join =
            |f: &dyn Fn(&Iface) -> String| ifaces.iter().map(f).collect::<Vec<_>>().join(",");
        Ok(LabHost {
            role: role.into(),
            name: name.into(),
            namespace: ns.clone(),
            interface: join(&|i| i.name.to_string()),
            address: join(&|i| i.local.to_string()),
            address6: join(&|i| i.local6.to_string()),
            mtu,
            sysctls: sysctls.iter().cloned().collect(),
        })
    }

    /// Starts xferlab itself inside namespace `ns`.
    fn spawn_in(&self, ns: &str, args: &[String], stdout: Stdio) -> anyhow::Result<Child> {
        let exe = std::env::current_exe().context("cannot find my own binary")?;
        self.spawn_program(ns, exe.as_os_str(), args, stdout)
    }

    /// Starts any program inside namespace `ns`; it dies with the runner.
    fn spawn_program(
        &self,
        ns: &str,
        program: &std::ffi::OsStr,
        args: &[String],
        stdout: Stdio,
    ) -> anyhow::Result<Child> {
        let nsf = netns::open(ns)?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdout(stdout)
            .stdin(Stdio::null())
            // Own process group: a terminal's Ctrl-C reaches only the
            // runner, which forwards it to the client (the server must
            // stay up to send its report).
            .process_group(0);
        // Die with the runner, even when it is SIGKILLed.
        sys::process::die_with_parent(&mut cmd, Signal::KILL);
        // Enter the namespace before exec.
        xferlab_sys::process::enter_network_namespace(&mut cmd, nsf.into());
        cmd.spawn().with_context(|| {
            format!(
                "cannot start {} in {ns}",
                std::path::Path::new(program).display()
            )
        })
    }

    /// Creates every host namespace with its devices; returns the hosts
    /// (clients, router, servers) and where their devices sit.
    fn build(&mut self, plan: &Plan) -> anyhow::Result<(Vec<LabHost>, Wiring)> {
        let iface = |name, local: Ipv4Addr, peer: Ipv4Addr, prefix: u32, local6, prefix6| Iface {
            name,
            local,
            peer,
            mask: Ipv4Addr::from(u32::MAX << (32 - prefix)),
            local6,
            prefix6,
        };
        let mut hosts = Vec::new();
        let mut w = Wiring::default();
        // Every host routes the whole lab prefix through its one device.
        for (i, h) in plan.clients.iter().enumerate() {
            let (a4, a6) = addrs(0, client_id(i));
            let c = iface(IFACE, a4, ROUTER_A, 16, a6, 48);
            w.clients.push(self.tuns.len());
            let mtu = h.mtu.unwrap_or(plan.mtu);
            hosts.push(self.host("client", &h.name, &[c], plan, mtu, &h.sysctls)?);
            self.check_interrupt()?;
        }
        if plan.router {
            // Its link side routes the clients' /24, its other side the
            // one server (/32, /127 for IPv6 around the server's id).
            let (s4, s6) = addrs(1, server_id(0));
            let ra = iface(IFACE, ROUTER_A, addrs(0, client_id(0)).0, 24, ROUTER_A6, 64);
            let r6 = Ipv6Addr::from(u128::from(s6) | 1);
            let rb = iface(IFACE_B, ROUTER_B, s4, 32, r6, 127);
            let forwarding = [
                ("net.ipv4.ip_forward".to_string(), "1".to_string()),
                ("net.ipv6.conf.all.forwarding".to_string(), "1".to_string()),
            ];
            w.far.push(self.tuns.len());
            let rb_port = self.tuns.len() + 1;
            hosts.push(self.host("router", "router", &[ra, rb], plan, plan.mtu, &forwarding)?);
            self.check_interrupt()?;
            w.router_hop = Some((rb_port, self.tuns.len()));
        }
        let seg = plan.server_seg();
        let gateway = if plan.router { ROUTER_B } else { ROUTER_A };
        for (j, h) in plan.servers.iter().enumerate() {
            let (a4, a6) = addrs(seg, server_id(j));
            let sv = iface(IFACE, a4, gateway, 16, a6, 48);
            if !plan.router {
                w.far.push(self.tuns.len());
            }
            w.servers.push(self.tuns.len());
            let mtu = h.mtu.unwrap_or(plan.mtu);
            hosts.push(self.host("server", &h.name, &[sv], plan, mtu, &h.sysctls)?);
            self.check_interrupt()?;
        }
        Ok((hosts, w))
    }

    fn start_forwarder(
        &mut self,
        leg: Leg,
        plan: &Plan,
        epoch: (Instant, u64),
        spin_ns: u64,
    ) -> anyhow::Result<()> {
        let Leg {
            name,
            inputs,
            outputs,
            route,
            hops,
            pcap,
        } = leg;
        let dup = |i: &usize| {
            self.tuns[*i]
                .try_clone()
                .context("cannot duplicate the TUN handle")
        };
        let fwd = Forwarder {
            inputs: inputs.iter().map(dup).collect::<Result<_, _>>()?,
            outputs: outputs.iter().map(dup).collect::<Result<_, _>>()?,
            route,
            hops,
            slots: plan.buffers,
            slot_size: if plan.offload {
                forward::SUPERPACKET_SLOT
            } else {
                plan.mtu.max(
                    plan.clients
                        .iter()
                        .chain(&plan.servers)
                        .filter_map(|h| h.mtu)
                        .max()
                        .unwrap_or(0),
                ) as usize
                    + 64
            },
            pcap,
            realtime: plan.realtime,
            spin_ns,
            epoch: epoch.0,
            epoch_unix_ns: epoch.1,
            stop: self.stop.clone(),
        };
        let h = std::thread::Builder::new()
            .name(format!("xl-fwd-{name}"))
            .spawn(move || fwd.run())
            .context("cannot start the forwarder")?;
        self.forwarders.push(h);
        Ok(())
    }

    fn run(&mut self, plan: &Plan) -> anyhow::Result<ExitCode> {
        let (hosts, wiring) = self.build(plan)?;
        let ns_of = |name: &str| {
            hosts
                .iter()
                .find(|h| h.name == name)
                .map(|h| h.namespace.clone())
                .unwrap_or_default()
        };
        if !plan.single {
            print_hosts(&hosts, plan);
        }
        let before = self.snapshots()?;
        let ticks_before = sys::cpu::cpu_ticks();
        let spin = spin_choice(plan);
        self.start_forwarders(plan, &wiring, &spin)?;
        self.start_servers(plan, &ns_of)?;
        self.check_interrupt()?;

        let probe = if plan.probe {
            Some(probe_path(plan, &ns_of)?)
        } else {
            None
        };
        self.check_interrupt()?;

        // Programs: exec'd ones first (a test may need their server), then
        // the tests, all at once.
        let tests: Vec<&HostTest> = plan
            .programs
            .iter()
            .filter_map(|p| match p {
                Program::Test(t) => Some(t),
                Program::Exec { .. } => None,
            })
            .collect();
        let (statuses, texts) = self.run_programs(plan, &tests, &hosts, &ns_of)?;

        // Deliver what is still in flight, then stop the forwarders.
        self.stop.store(true, Ordering::Relaxed);
        let reports: Vec<ForwardReport> = self
            .forwarders
            .drain(..)
            .map(|h| h.join().map_err(|_| anyhow!("a forwarder thread panicked")))
            .collect::<Result<_, _>>()?;
        let after = self.snapshots()?;
        let host_steal_percent = ticks_before
            .zip(sys::cpu::cpu_ticks())
            .and_then(|(b, a)| xferlab_core::steal::steal_percent(b, a));
        stop_children(&mut self.children);

        let report = report::assemble(
            plan,
            hosts,
            &reports,
            &wiring,
            (&before, &after),
            probe,
            report::Setup {
                spin,
                udp_offload: self.udp_offload,
                host_steal_percent,
            },
        );
        let invalid = !report.accuracy.valid;
        if plan.single {
            report::emit(plan, &report, &texts[0])?;
        } else if !tests.is_empty() {
            report::emit_many(plan, &report, &tests, &texts, &statuses)?;
        }
        if invalid {
            eprintln!(
                "xferlab: LAB RUN INVALID: {}",
                report.accuracy.violations.join("; ")
            );
        }
        let failed = statuses.iter().find_map(|s| match s {
            Some(0) => None,
            Some(c) => Some(*c as u8),
            None => Some(1),
        });
        let code = match failed {
            Some(c) => c,
            _ if INTERRUPTS.load(Ordering::Relaxed) > 0 => 130,
            _ if invalid && !plan.allow_invalid && !tests.is_empty() => 1,
            _ => 0,
        };
        Ok(ExitCode::from(code))
    }

    /// Forwarders: c2s reads the client hosts' devices and writes the far
    /// end's, s2c the reverse; each carries every hop in series. With a
    /// router, its plain hop to the server too.
    fn start_forwarders(
        &mut self,
        plan: &Plan,
        wiring: &Wiring,
        spin: &report::SpinChoice,
    ) -> anyhow::Result<()> {
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
        let mut to_far = [forward::NO_ROUTE; 256];
        if !plan.router {
            for j in 0..plan.servers.len() {
                to_far[usize::from(server_id(j))] = j as u8;
            }
        }
        let mut to_clients = [forward::NO_ROUTE; 256];
        for i in 0..plan.clients.len() {
            to_clients[usize::from(client_id(i))] = i as u8;
        }
        let c2s_hops: Vec<LinkConfig> = plan.hops.iter().map(|h| h.0.clone()).collect();
        let s2c_hops: Vec<LinkConfig> = plan.hops.iter().map(|h| h.1.clone()).collect();
        let (clients, far) = (wiring.clients.clone(), wiring.far.clone());
        for (name, inputs, outputs, route, hops) in [
            ("c2s", clients.clone(), far.clone(), to_far, c2s_hops),
            ("s2c", far, clients, to_clients, s2c_hops),
        ] {
            let pcap = match pcap_path(name) {
                Some(p) => Some(pcap::PcapWriter::create(&p, plan.pcap_snaplen)?),
                None => None,
            };
            let leg = Leg {
                name,
                inputs,
                outputs,
                route,
                hops,
                pcap,
            };
            self.start_forwarder(leg, plan, (epoch, epoch_unix_ns), spin.us * 1000)?;
        }
        if let Some((r, sv)) = wiring.router_hop {
            // The router's plain hop to the server.
            for (name, from, to) in [("router-c2s", r, sv), ("router-s2c", sv, r)] {
                let leg = Leg {
                    name,
                    inputs: vec![from],
                    outputs: vec![to],
                    route: [forward::NO_ROUTE; 256],
                    hops: vec![LinkConfig::default()],
                    pcap: None,
                };
                self.start_forwarder(leg, plan, (epoch, epoch_unix_ns), spin.us * 1000)?;
            }
        }
        Ok(())
    }

    /// A server in every server host, on every address there (IPv4 and
    /// IPv6 on one dual-stack socket), listening when this returns.
    fn start_servers(&mut self, plan: &Plan, ns_of: &dyn Fn(&str) -> String) -> anyhow::Result<()> {
        let mut pending = Vec::new();
        for h in &plan.servers {
            // Room for every test aimed at it (the server's default limit
            // is 16 concurrent tests).
            let tests = plan
                .programs
                .iter()
                .filter(|p| matches!(p, Program::Test(t) if t.server == h.name))
                .count();
            let server_args: Vec<String> = vec![
                "server".into(),
                "-p".into(),
                SERVER_PORT.to_string(),
                "--max-sessions".into(),
                (tests + 16).to_string(),
                // The lab's server faces only the lab's own hosts, over a
                // link that may drop what it is told to: a data
                // connection's first segment can need retransmissions
                // (1 s, then 2 s, 4 s, ... apart) longer than the 5 s an
                // Internet-facing server allows.
                "--preamble-timeout".into(),
                "60".into(),
            ];
            let mut srv = self.spawn_in(&ns_of(&h.name), &server_args, Stdio::piped())?;
            pending.push((h.name.clone(), srv.stdout.take()));
            self.children.push(srv);
        }
        for (name, out) in pending {
            wait_listening(out, &name)?;
        }
        Ok(())
    }

    /// Runs the exec'd programs, then the tests; the tests' exit statuses
    /// and captured outputs (the exec'd programs' when there is no test).
    fn run_programs(
        &mut self,
        plan: &Plan,
        tests: &[&HostTest],
        hosts: &[LabHost],
        ns_of: &dyn Fn(&str) -> String,
    ) -> anyhow::Result<(Vec<Option<i32>>, Vec<String>)> {
        let mut execs = Vec::new();
        for p in &plan.programs {
            if let Program::Exec { host, argv } = p {
                // With tests running, an exec'd program's output goes to
                // stderr: stdout carries the result.
                let stdout = if tests.is_empty() {
                    Stdio::inherit()
                } else {
                    std::io::stderr()
                        .as_fd()
                        .try_clone_to_owned()
                        .map(Stdio::from)
                        .unwrap_or_else(|_| Stdio::null())
                };
                let child =
                    self.spawn_program(&ns_of(host), argv[0].as_ref(), &argv[1..], stdout)?;
                execs.push(child);
            }
        }
        if !tests.is_empty() && !execs.is_empty() {
            // A server an exec started must listen before a test connects.
            wait_exec_listening(&execs, hosts, plan);
        }
        let capture = !plan.single || (plan.format == Format::Json && plan.output.is_none());
        let mut running = Vec::new();
        let mut outputs = Vec::new();
        for t in tests {
            let stdout = if capture {
                Stdio::piped()
            } else {
                Stdio::inherit()
            };
            let mut cli = self.spawn_in(&ns_of(&t.client), &plan.client_args(t), stdout)?;
            outputs.push(cli.stdout.take().map(|mut o| {
                std::thread::spawn(move || {
                    let mut s = String::new();
                    let _ = o.read_to_string(&mut s);
                    s
                })
            }));
            running.push(cli);
        }
        let statuses = if running.is_empty() {
            wait_clients(&mut execs)
        } else {
            wait_clients(&mut running)
        };
        let texts: Vec<String> = outputs
            .into_iter()
            .map(|h| h.and_then(|h| h.join().ok()).unwrap_or_default())
            .collect();
        self.children.extend(execs);
        Ok((statuses, texts))
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
            // What an exec'd program left running (a daemon it forked).
            for p in netns::pids_in(&ns) {
                sys::process::signal_pid(p, Signal::KILL).ok();
            }
            if let Err(e) = netns::delete(&ns) {
                tracing::warn!("{e:#}; run `xferlab lab clean`");
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

fn wait_listening(out: Option<std::process::ChildStdout>, host: &str) -> anyhow::Result<()> {
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
        _ => bail!("the xferlab server in lab host {host} did not start"),
    }
}

/// The forwarders' busy-wait: given, or from this machine's timer.
fn spin_choice(plan: &Plan) -> report::SpinChoice {
    let timer = wakeup::calibrate(plan.realtime);
    match plan.spin {
        Spin::Us(us) => report::SpinChoice {
            us,
            auto: false,
            timer,
        },
        Spin::Auto => report::SpinChoice {
            us: wakeup::auto_spin_us(&timer),
            auto: true,
            timer,
        },
    }
}

/// The probe's round trip through every hop, with what the hops' delays
/// and serialization add up to.
fn probe_path(plan: &Plan, ns_of: &dyn Fn(&str) -> String) -> anyhow::Result<RttProbe> {
    let one_way = |c: &LinkConfig| {
        c.delay_ns as f64 / 1e3 + c.rate_bps.map_or(0.0, |r| 48.0 * 8.0 * 1e6 / r as f64)
    };
    let expected: f64 = plan.hops.iter().map(|(a, b)| one_way(a) + one_way(b)).sum();
    let target = SocketAddr::from((addrs(plan.server_seg(), server_id(0)).0, probe::PROBE_PORT));
    probe::measure(
        &ns_of(&plan.clients[0].name),
        &ns_of(&plan.servers[0].name),
        target,
        10,
        Duration::from_millis(5),
        expected,
    )
}

/// Waits for the tests (or, without tests, the exec'd programs): Ctrl-C
/// once forwards SIGINT (a test stops early and still reports), twice
/// kills them. None: killed by a signal.
fn wait_clients(cs: &mut [Child]) -> Vec<Option<i32>> {
    let mut forwarded = 0;
    let mut done: Vec<Option<Option<i32>>> = vec![None; cs.len()];
    loop {
        for (c, d) in cs.iter_mut().zip(done.iter_mut()) {
            if d.is_none() {
                match c.try_wait() {
                    Ok(Some(s)) => *d = Some(s.code()),
                    Ok(None) => {}
                    Err(_) => *d = Some(None),
                }
            }
        }
        if done.iter().all(Option::is_some) {
            return done.into_iter().map(Option::flatten).collect();
        }
        let n = INTERRUPTS.load(Ordering::Relaxed);
        if n > forwarded {
            forwarded = n;
            let sig = if n == 1 { Signal::INT } else { Signal::KILL };
            for c in cs.iter() {
                sys::process::signal_child(c, sig).ok();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Gives programs exec'd in server hosts a moment to listen: waits (up
/// to 5 s) until a TCP socket listens in each such namespace, or the
/// program exits.
fn wait_exec_listening(execs: &[Child], hosts: &[LabHost], plan: &Plan) {
    // Only hosts a test names as its server wait.
    let server_ns: Vec<String> = plan
        .programs
        .iter()
        .filter_map(|p| match p {
            Program::Exec { host, .. } => Some(host),
            Program::Test(_) => None,
        })
        .filter(|host| {
            plan.programs
                .iter()
                .any(|p| matches!(p, Program::Test(t) if t.target.as_ref() == Some(*host)))
        })
        .filter_map(|host| hosts.iter().find(|h| &h.name == host))
        .map(|h| h.namespace.clone())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    let listening = |ns: &str| {
        netns::run_in(ns, || {
            let count = |f| {
                netns::read_net_file(f)
                    .map(|t| {
                        // State 0A: LISTEN; the xferlab server's own
                        // socket is on 5290 (0x14AA).
                        t.lines()
                            .filter(|l| {
                                let cols: Vec<&str> = l.split_whitespace().collect();
                                cols.get(3) == Some(&"0A")
                                    && !cols.get(1).is_some_and(|a| a.ends_with(":14AA"))
                            })
                            .count()
                    })
                    .unwrap_or(0)
            };
            Ok(count("tcp") + count("tcp6"))
        })
        .unwrap_or(0)
            > 0
    };
    let _ = execs;
    while Instant::now() < deadline {
        if server_ns.iter().all(|ns| listening(ns)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Prints where every host is, before the programs start.
fn print_hosts(hosts: &[LabHost], plan: &Plan) {
    let mut s = String::from("lab hosts:");
    for h in hosts {
        s += &format!(
            "\n  {:<12} {:<6} {:<12} {:<16} netns {}",
            h.name, h.role, h.address, h.address6, h.namespace
        );
    }
    // JSON: the document has them. Exec'd programs alone own stdout.
    let has_tests = plan.programs.iter().any(|p| matches!(p, Program::Test(_)));
    match (has_tests, plan.format) {
        (true, Format::Human) => outln!("{s}"),
        (false, _) => eprintln!("{s}"),
        _ => {}
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

pub fn clean() -> ExitCode {
    if !sys::process::is_root() {
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
        outln!("lab clean: nothing left over");
    } else {
        outln!("lab clean: removed {}", removed.join(", "));
    }
    if !running.is_empty() {
        outln!(
            "lab clean: kept {} (its lab is still running)",
            running.join(", ")
        );
    }
    let _ = std::io::stdout().flush();
    ExitCode::SUCCESS
}
