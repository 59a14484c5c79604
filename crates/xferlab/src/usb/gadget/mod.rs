//! `xferlab usb gadget`: the device half of a USB bulk test on a machine
//! with a USB device controller (UDC). A configfs gadget carries either
//! xferlab's own source/sink over FunctionFS (IN: writes the pattern, OUT:
//! reads and checks it; synchronous or Linux AIO with a queue of
//! requests), xferlab's fixed-rate device over FunctionFS (`usb cbr`'s
//! peer), the device side of xferlab's own network link over FunctionFS
//! (`usb net`'s peer), the kernel's SourceSink function, or its network
//! functions. Everything it creates
//! (configfs directories, the FunctionFS mount) is removed on exit, also
//! after an error or Ctrl-C; `--cleanup` removes what a killed run left.

mod cbr_io;
mod configfs;
mod ffs_io;
mod net_io;
mod raw;

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use clap::ValueEnum;
use rustix::mount::{mount, MountFlags};
use xferlab_core::usb::ffs;
use xferlab_core::usb::net::Encap;
use xferlab_core::usb::Pattern;

use super::{LinkRequest, ReportTo};
use crate::usb::tap::open_tap;
use cbr_io::{cbr_loop, CbrControl};
pub use configfs::cleanup;
use configfs::{check_configfs, mkdir, mount_point, pick_udc, write_attr, Gadget, CONFIGFS};
use ffs_io::{aio_loop, ep0_loop, sync_loop, DirCounters, Shared};
use net_io::NetCounters;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GadgetFunction {
    /// xferlab's own source/sink over FunctionFS (ep1 IN, ep2 OUT).
    Ffs,
    /// xferlab's fixed-rate device over FunctionFS: produces (IN) or
    /// consumes (OUT) samples at the rate, buffer and request size that
    /// `xferlab usb cbr` sets per trial, counting overruns and underruns.
    Cbr,
    /// The kernel's SourceSink function (usb_f_ss_lb), as g_zero: 0525:a4a0.
    Sourcesink,
    /// The kernel's CDC-ECM network function (usb_f_ecm; host: cdc_ether).
    Ecm,
    /// The kernel's CDC-EEM network function (usb_f_eem; host: cdc_eem).
    Eem,
    /// The kernel's CDC-NCM network function (usb_f_ncm; host: cdc_ncm).
    Ncm,
    /// xferlab's own network link over FunctionFS: a TAP device bridged to
    /// bulk IN/OUT in --encap framing (EEM: a CDC-EEM interface the host's
    /// cdc_eem binds; ECM and NCM: vendor-specific, for `xferlab usb net`).
    Net,
}

impl GadgetFunction {
    /// The kernel network functions: (configfs function type, module).
    pub fn net_kind(self) -> Option<(&'static str, &'static str)> {
        match self {
            GadgetFunction::Ecm => Some(("ecm", "usb_f_ecm")),
            GadgetFunction::Eem => Some(("eem", "usb_f_eem")),
            GadgetFunction::Ncm => Some(("ncm", "usb_f_ncm")),
            GadgetFunction::Ffs
            | GadgetFunction::Cbr
            | GadgetFunction::Sourcesink
            | GadgetFunction::Net => None,
        }
    }
}

/// How `--function net` makes its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GadgetVia {
    /// A FunctionFS function of a configfs gadget, with AIO.
    Functionfs,
    /// A whole device through /dev/raw-gadget, announcing real CDC
    /// interfaces (one transfer in flight per direction).
    RawGadget,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GadgetIo {
    /// One blocking read()/write() at a time per endpoint.
    Sync,
    /// Linux AIO (io_submit) with --queue requests in flight per endpoint.
    Aio,
}

/// `usb gadget` as asked for (`--cleanup` is [`super::UsbRequest::GadgetCleanup`]).
#[derive(Debug, Clone)]
pub struct GadgetRequest {
    pub function: GadgetFunction,
    pub io: GadgetIo,
    /// Requests in flight per endpoint.
    pub queue: u32,
    pub qmult: Option<u32>,
    /// Bytes per request.
    pub size: u64,
    pub pattern: Pattern,
    /// None is the only UDC in /sys/class/udc.
    pub udc: Option<String>,
    /// The gadget's name under configfs.
    pub name: String,
    /// VID:PID to announce, checked by the verb; None is the function's default.
    pub id: Option<String>,
    pub serial: String,
    /// Seconds to serve; None is until interrupted.
    pub time: Option<f64>,
    /// `--function net`'s framing.
    pub encap: Option<Encap>,
    pub via: GadgetVia,
    pub link: LinkRequest,
    pub report: ReportTo,
}

fn fail(msg: &str, code: u8) -> ExitCode {
    eprintln!("xferlab: {msg}");
    ExitCode::from(code)
}

pub fn run(a: &GadgetRequest, interrupts: &AtomicU32) -> ExitCode {
    if a.size == 0 || a.size > 1 << 20 {
        return fail(
            &format!(
                "-l/--size must be 1 byte to 1M per request (got {})",
                a.size
            ),
            2,
        );
    }
    if a.queue == 0 || a.queue > 256 {
        return fail(
            &format!("--queue must be 1 to 256 requests (got {})", a.queue),
            2,
        );
    }
    if a.name.is_empty() || a.name.contains(['/', '.', ' ']) {
        return fail("--name must be a plain name (no '/', '.' or spaces)", 2);
    }
    let default_id = match a.function {
        GadgetFunction::Ffs | GadgetFunction::Cbr | GadgetFunction::Net => (0x1d6b, 0x0104),
        GadgetFunction::Sourcesink => (0x0525, 0xa4a0),
        // g_ether's NetChip ID: the host binds its class driver by class anyway.
        GadgetFunction::Ecm | GadgetFunction::Eem | GadgetFunction::Ncm => (0x0525, 0xa4a1),
    };
    if a.qmult.is_some() && a.function.net_kind().is_none() {
        return fail("--qmult is for --function ecm|eem|ncm", 2);
    }
    match (a.function, a.encap) {
        (GadgetFunction::Net, None) => {
            return fail("--function net needs --encap ecm|eem|ncm", 2);
        }
        (GadgetFunction::Net, Some(_)) => {
            if let Err(e) = a.link.check() {
                return fail(&e.to_string(), 2);
            }
        }
        (_, Some(_)) => return fail("--encap is for --function net", 2),
        (_, None) => {}
    }
    if a.via == GadgetVia::RawGadget && a.function != GadgetFunction::Net {
        return fail(
            "--via raw-gadget is for --function net (xferlab's own network link)",
            2,
        );
    }
    let (vid, pid) = match &a.id {
        None => default_id,
        Some(s) => match super::device::parse_vid_pid(s) {
            Some(x) => x,
            None => {
                return fail(
                    &format!("--id {s}: VID:PID must be two hex numbers, e.g. 1d6b:0104"),
                    2,
                )
            }
        },
    };
    if !crate::sys::process::is_root() {
        return fail(
            "setting up a gadget needs root (configfs, mount); run it with sudo",
            1,
        );
    }
    if a.via == GadgetVia::RawGadget {
        return run_raw(a, (vid, pid), interrupts);
    }
    if let Err(e) = check_configfs() {
        return fail(&format!("{e:#}"), 1);
    }
    let udc = match pick_udc(a.udc.as_deref()) {
        Ok(u) => u,
        Err(e) => return fail(&format!("{e:#}"), 1),
    };
    let dir = Path::new(CONFIGFS).join(&a.name);
    if dir.exists() {
        return fail(
            &format!(
                "a gadget `{}` already exists ({}): another xferlab gadget runs, or a killed run left it; \
                 remove it with `xferlab usb gadget --cleanup --name {}`",
                a.name,
                dir.display(),
                a.name
            ),
            1,
        );
    }
    let function = match a.function {
        GadgetFunction::Ffs | GadgetFunction::Cbr | GadgetFunction::Net => {
            format!("ffs.{}", a.name)
        }
        GadgetFunction::Sourcesink => "SourceSink.0".to_string(),
        GadgetFunction::Ecm | GadgetFunction::Eem | GadgetFunction::Ncm => {
            format!("{}.{}", a.function.net_kind().unwrap_or_default().0, a.name)
        }
    };
    let mut g = Gadget {
        dir: dir.clone(),
        function,
        mount: None,
        bound: false,
    };
    let shared = Arc::new(Shared::default());
    let net = Arc::new(NetCounters::default());
    let mut threads = Vec::new();
    let setup = (|| -> anyhow::Result<()> {
        mkdir(&dir)
            .map_err(|e| anyhow!("{e:#}; is libcomposite loaded (`modprobe libcomposite`)?"))?;
        write_attr(&dir.join("idVendor"), &format!("0x{vid:04x}"))?;
        write_attr(&dir.join("idProduct"), &format!("0x{pid:04x}"))?;
        write_attr(&dir.join("bcdUSB"), "0x0200")?;
        mkdir(&dir.join("strings/0x409"))?;
        write_attr(&dir.join("strings/0x409/serialnumber"), &a.serial)?;
        write_attr(&dir.join("strings/0x409/manufacturer"), "xferlab")?;
        let product = match a.function {
            GadgetFunction::Ffs => "xferlab source/sink (FunctionFS)",
            GadgetFunction::Cbr => "xferlab fixed-rate device (FunctionFS)",
            GadgetFunction::Sourcesink => "xferlab Gadget Zero (SourceSink)",
            GadgetFunction::Ecm => "xferlab CDC-ECM link",
            GadgetFunction::Eem => "xferlab CDC-EEM link",
            GadgetFunction::Ncm => "xferlab CDC-NCM link",
            GadgetFunction::Net => "xferlab network link (FunctionFS)",
        };
        write_attr(&dir.join("strings/0x409/product"), product)?;
        mkdir(&g.func_dir()).map_err(|e| match a.function {
            GadgetFunction::Ffs | GadgetFunction::Cbr | GadgetFunction::Net => anyhow!(
                "{e:#}; is FunctionFS available (CONFIG_USB_CONFIGFS_F_FS, `modprobe usb_f_fs`)?"
            ),
            GadgetFunction::Sourcesink => {
                anyhow!("{e:#}; load the SourceSink function: `modprobe usb_f_ss_lb`")
            }
            GadgetFunction::Ecm | GadgetFunction::Eem | GadgetFunction::Ncm => {
                let module = a.function.net_kind().unwrap_or_default().1;
                anyhow!("{e:#}; load the network function: `modprobe {module}`")
            }
        })?;
        mkdir(&dir.join("configs/c.1"))?;
        mkdir(&dir.join("configs/c.1/strings/0x409"))?;
        write_attr(
            &dir.join("configs/c.1/strings/0x409/configuration"),
            "xferlab",
        )?;
        write_attr(&dir.join("configs/c.1/MaxPower"), "100")?;
        match a.function {
            GadgetFunction::Sourcesink => {
                let f = g.func_dir();
                write_attr(
                    &f.join("pattern"),
                    &a.pattern.sourcesink_number().to_string(),
                )?;
                write_attr(&f.join("bulk_buflen"), &a.size.to_string())?;
                write_attr(&f.join("bulk_qlen"), &a.queue.to_string())?;
            }
            GadgetFunction::Ecm | GadgetFunction::Eem | GadgetFunction::Ncm => {
                if let Some(q) = a.qmult {
                    write_attr(&g.func_dir().join("qmult"), &q.to_string())?;
                }
            }
            GadgetFunction::Ffs | GadgetFunction::Cbr | GadgetFunction::Net => {
                // The TAP first: a taken name fails before the host sees a device.
                let tap = match a.encap {
                    Some(_) if a.function == GadgetFunction::Net => {
                        Some(open_tap(&a.link.tap, false)?)
                    }
                    _ => None,
                };
                let mp = mount_point(&a.name);
                let _ = fs::create_dir_all(&mp);
                let mounted = mount(
                    a.name.as_str(),
                    &mp,
                    "functionfs",
                    MountFlags::empty(),
                    None,
                );
                if let Err(e) = mounted {
                    let _ = fs::remove_dir(&mp);
                    return Err(io::Error::from(e)).with_context(|| {
                        format!("cannot mount FunctionFS `{}` on {}", a.name, mp.display())
                    });
                }
                g.mount = Some(mp.clone());
                let mut ep0 = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(mp.join("ep0"))
                    .with_context(|| format!("cannot open {}/ep0", mp.display()))?;
                let (class, label) = match a.encap {
                    Some(e) if tap.is_some() => {
                        (net_io::interface_class(e), "xferlab network link")
                    }
                    _ => (ffs::VENDOR_SPECIFIC, "xferlab source/sink"),
                };
                ep0.write_all(&ffs::descriptors_for(class, 0))
                    .context("FunctionFS refused the descriptors")?;
                ep0.write_all(&ffs::strings(label))
                    .context("FunctionFS refused the strings")?;
                let open_ep = |n: u32| {
                    OpenOptions::new()
                        .read(true)
                        .write(true)
                        .custom_flags(libc::O_NONBLOCK)
                        .open(mp.join(format!("ep{n}")))
                        .with_context(|| format!("cannot open {}/ep{n}", mp.display()))
                };
                let ep_in = open_ep(1)?;
                let ep_out = open_ep(2)?;
                let (s0, u0) = (shared.clone(), udc.clone());
                let cbr = (a.function == GadgetFunction::Cbr).then(Arc::<CbrControl>::default);
                let c0 = cbr.clone();
                threads.push(spawn("ffs-ep0", move || {
                    ep0_loop(ep0, &s0, &u0, c0.as_deref())
                })?);
                if let (Some(tap), Some(encap)) = (tap, a.encap) {
                    let tap_rx = tap
                        .try_clone()
                        .context("cannot duplicate the TAP descriptor")?;
                    let link = net_io::Link {
                        encap,
                        limits: net_io::limits(encap, &a.link),
                        crc: a.link.crc,
                        depth: a.queue as usize,
                        rx_size: a.size as usize,
                    };
                    let (s1, n1, s2, n2) =
                        (shared.clone(), net.clone(), shared.clone(), net.clone());
                    threads.push(spawn("net-tx", move || {
                        net_io::tx_loop(ep_in, tap, link, &s1, &n1)
                    })?);
                    threads.push(spawn("net-rx", move || {
                        net_io::rx_loop(ep_out, tap_rx, link, &s2, &n2)
                    })?);
                    return link_and_bind(&mut g, &dir, &udc);
                }
                for (file, is_in) in [(ep_in, true), (ep_out, false)] {
                    let s = shared.clone();
                    let (size, queue, pattern, io) =
                        (a.size as usize, a.queue as usize, a.pattern, a.io);
                    let name = if is_in { "ffs-in" } else { "ffs-out" };
                    let c = cbr.clone();
                    threads.push(spawn(name, move || match (c, io) {
                        (Some(c), _) => cbr_loop(file, is_in, &s, &c),
                        (None, GadgetIo::Sync) => sync_loop(file, is_in, size, pattern, &s),
                        (None, GadgetIo::Aio) => aio_loop(file, is_in, size, queue, pattern, &s),
                    })?);
                }
            }
        }
        link_and_bind(&mut g, &dir, &udc)
    })();
    if let Err(e) = setup {
        shared.stop.store(true, Relaxed);
        g.unbind();
        for t in threads {
            let _ = t.join();
        }
        drop(g);
        return fail(&format!("{e:#}"), 1);
    }
    // The network functions name their gadget-side interface at bind time.
    let ifname = a
        .function
        .net_kind()
        .and_then(|_| fs::read_to_string(g.func_dir().join("ifname")).ok())
        .map(|s| s.trim().to_string());
    let t0 = Instant::now();
    let cpu0 = super::process_cpu();
    // With -J stdout carries only the JSON document.
    let say = |msg: String| {
        if a.report.json() {
            eprintln!("{msg}");
        } else {
            outln!("{msg}");
        }
    };
    say(format!(
        "gadget `{}` {vid:04x}:{pid:04x} on UDC {udc}: {} {}{}{}",
        a.name,
        match a.function {
            GadgetFunction::Ffs => "FunctionFS source/sink".to_string(),
            GadgetFunction::Cbr =>
                "FunctionFS fixed-rate device (rate and buffer set by `xferlab usb cbr`)"
                    .to_string(),
            GadgetFunction::Sourcesink => "kernel SourceSink".to_string(),
            GadgetFunction::Ecm | GadgetFunction::Eem | GadgetFunction::Ncm => format!(
                "kernel {} network function, interface {}",
                a.function.net_kind().unwrap_or_default().0.to_uppercase(),
                ifname.as_deref().unwrap_or("?")
            ),
            GadgetFunction::Net => {
                let encap = a.encap.unwrap_or(Encap::Eem);
                let l = net_io::limits(encap, &a.link);
                format!(
                    "FunctionFS network link, TAP {} <-> bulk IN/OUT, {} x{} frames per IN transfer \
                     (at most {} B), {} us coalescing,",
                    a.link.tap,
                    encap.label(),
                    l.max_frames,
                    l.max_transfer,
                    a.link.coalesce_us
                )
            }
        },
        match (a.function, a.io) {
            (GadgetFunction::Sourcesink, _) => "(in kernel)",
            (GadgetFunction::Ecm | GadgetFunction::Eem | GadgetFunction::Ncm, _) => "(in kernel)",
            (GadgetFunction::Cbr | GadgetFunction::Net, _) => "AIO",
            (_, GadgetIo::Sync) => "sync I/O",
            (_, GadgetIo::Aio) => "AIO",
        },
        if a.function == GadgetFunction::Cbr {
            String::new()
        } else if a.function == GadgetFunction::Net {
            format!(", {} B OUT requests, queue {}", a.size, a.queue)
        } else {
            format!(
                ", {} B requests, queue {}, pattern {}",
                a.size, a.queue, a.pattern
            )
        },
        a.time
            .map(|t| format!(", for {t} s"))
            .unwrap_or_else(|| ", until Ctrl-C".into())
    ));
    let _ = io::stdout().flush();
    let limit = a.time.map(Duration::from_secs_f64);
    while interrupts.load(Relaxed) == 0 && limit.is_none_or(|l| t0.elapsed() < l) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let secs = t0.elapsed().as_secs_f64();
    // Teardown: stop, unbind (ends every transfer in flight), join, unmount, remove.
    shared.stop.store(true, Relaxed);
    g.unbind();
    let deadline = Instant::now() + Duration::from_secs(5);
    for t in threads {
        while !t.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if t.is_finished() {
            let _ = t.join();
        }
    }
    drop(g);
    let leftover = dir.exists() || mount_point(&a.name).exists();
    let cpu1 = super::process_cpu();
    report(
        a,
        &shared,
        &net,
        secs,
        (cpu1.0 - cpu0.0, cpu1.1 - cpu0.1),
        ifname.as_deref(),
        None,
    );
    if leftover {
        return fail(&format!("could not remove everything of gadget `{}`; run `xferlab usb gadget --cleanup --name {}`", a.name, a.name), 1);
    }
    if interrupts.load(Relaxed) > 0 {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    }
}

fn report(
    a: &GadgetRequest,
    s: &Shared,
    net: &NetCounters,
    secs: f64,
    cpu: (f64, f64),
    ifname: Option<&str>,
    raw: Option<&raw::RawReport>,
) {
    let cpu_percent = 100.0 * (cpu.0 + cpu.1) / secs.max(1e-9);
    let dir = |c: &DirCounters| {
        serde_json::json!({
            "transfers": c.transfers.load(Relaxed),
            "bytes": c.bytes.load(Relaxed),
            "errors": c.errors.load(Relaxed),
            "pattern_errors": c.pattern_errors.load(Relaxed),
            "mbytes_per_second": c.bytes.load(Relaxed) as f64 / secs.max(1e-9) / 1e6,
        })
    };
    if a.report.json() {
        let v = serde_json::json!({
            "schema": "xferlab.usb-gadget/1",
            "function": format!("{:?}", a.function).to_lowercase(),
            // raw-gadget's calls block: one transfer at a time.
            "io": match a.via {
                GadgetVia::Functionfs => format!("{:?}", a.io).to_lowercase(),
                GadgetVia::RawGadget => "sync".into(),
            },
            "queue": if raw.is_some() { 1 } else { a.queue },
            "qmult": a.qmult,
            "ifname": ifname,
            "size": a.size,
            "pattern": a.pattern,
            "seconds": secs,
            "enabled_times": s.enables.load(Relaxed),
            "cpu": { "user_s": cpu.0, "system_s": cpu.1, "percent": cpu_percent },
            "in": dir(&s.input),
            "out": dir(&s.output),
            "net": (a.function == GadgetFunction::Net).then(|| serde_json::json!({
                "encap": a.encap.map(|e| e.label()),
                "tap": a.link.tap,
                "frames_per_transfer_max": a.link.frames_per_transfer,
                "coalesce_us": a.link.coalesce_us,
                "tx_frames": net.tx_frames.load(Relaxed),
                "tx_too_large": net.tx_too_large.load(Relaxed),
                "rx_decode": *net.decode.lock().unwrap_or_else(|e| e.into_inner()),
                "tap_drops": net.tap_drops.load(Relaxed),
                "via": match a.via {
                    GadgetVia::Functionfs => "functionfs",
                    GadgetVia::RawGadget => "raw_gadget",
                },
                // The device raw-gadget made: what the host asked of it.
                "raw_gadget": raw.map(|r| serde_json::json!({
                    "udc": r.udc,
                    "endpoints": {
                        "bulk_in": format!("0x{:02x}", r.endpoints.0 | 0x80),
                        "bulk_out": format!("0x{:02x}", r.endpoints.1),
                        "notify": format!("0x{:02x}", r.endpoints.2 | 0x80),
                    },
                    "host_mac": r.host_mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":"),
                    "control_requests": r.control_requests,
                    "stalled": r.stalled,
                    "control_errors": r.control_errors,
                    "notifications": r.notifications,
                    "packet_filter": r.packet_filter,
                    "ntb_in_max": r.ntb_in_max,
                })),
            })),
        });
        outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else if matches!(
        a.function,
        GadgetFunction::Ffs | GadgetFunction::Cbr | GadgetFunction::Net
    ) {
        for (label, c) in [("IN  (to host)", &s.input), ("OUT (from host)", &s.output)] {
            outln!(
                "{label}: {} transfers, {} bytes ({:.2} MB/s over {secs:.1} s), errors {}, pattern errors {}",
                c.transfers.load(Relaxed),
                c.bytes.load(Relaxed),
                c.bytes.load(Relaxed) as f64 / secs.max(1e-9) / 1e6,
                c.errors.load(Relaxed),
                c.pattern_errors.load(Relaxed)
            );
        }
    }
    if !a.report.json() {
        outln!(
            "CPU gadget {cpu_percent:.1}% (user {:.2} s, sys {:.2} s)",
            cpu.0,
            cpu.1
        );
    }
    let gone = match raw {
        Some(r) => format!("raw-gadget device on UDC {} released", r.udc),
        None => format!("gadget `{}` removed", a.name),
    };
    if a.report.json() {
        eprintln!("{gone}");
    } else {
        outln!("{gone}");
    }
}

/// `--via raw-gadget`: the link as a device of its own (gadget/raw.rs).
fn run_raw(a: &GadgetRequest, id: (u16, u16), interrupts: &AtomicU32) -> ExitCode {
    let Some(encap) = a.encap else {
        return fail("--function net needs --encap ecm|eem|ncm", 2);
    };
    let udc = match pick_udc(a.udc.as_deref()) {
        Ok(u) => u,
        Err(e) => return fail(&format!("{e:#}"), 1),
    };
    let tap = match open_tap(&a.link.tap, false) {
        Ok(t) => t,
        Err(e) => return fail(&format!("{e:#}"), 1),
    };
    let link = net_io::Link {
        encap,
        limits: net_io::limits(encap, &a.link),
        crc: a.link.crc,
        depth: 1,
        rx_size: a.size as usize,
    };
    let shared = Arc::new(Shared::default());
    let net = Arc::new(NetCounters::default());
    let t0 = Instant::now();
    let cpu0 = super::process_cpu();
    let limit = a.time.map(Duration::from_secs_f64);
    let stop = || interrupts.load(Relaxed) > 0 || limit.is_some_and(|l| t0.elapsed() >= l);
    let started = |r: &raw::RawReport| {
        let l = link.limits;
        let msg = format!(
            "raw-gadget device {:04x}:{:04x} on UDC {}: CDC-{} link, TAP {} <-> bulk IN 0x{:02x}/OUT 0x{:02x}, \
             x{} frames per IN transfer (at most {} B), {} us coalescing, {} B OUT reads, one transfer in flight \
             per direction{}",
            id.0,
            id.1,
            r.udc,
            encap.label().to_uppercase(),
            a.link.tap,
            r.endpoints.0 | 0x80,
            r.endpoints.1,
            l.max_frames,
            l.max_transfer,
            a.link.coalesce_us,
            a.size,
            a.time
                .map(|t| format!(", for {t} s"))
                .unwrap_or_else(|| ", until Ctrl-C".into())
        );
        if a.report.json() {
            eprintln!("{msg}");
        } else {
            outln!("{msg}");
            let _ = io::stdout().flush();
        }
    };
    let device = raw::Device {
        udc: &udc,
        id,
        serial: &a.serial,
    };
    let served = raw::serve(device, tap, link, &shared, &net, &stop, &started);
    let secs = t0.elapsed().as_secs_f64();
    let cpu1 = super::process_cpu();
    match served {
        Ok(r) => {
            report(
                a,
                &shared,
                &net,
                secs,
                (cpu1.0 - cpu0.0, cpu1.1 - cpu0.1),
                None,
                Some(&r),
            );
            if interrupts.load(Relaxed) > 0 {
                ExitCode::from(130)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => fail(&format!("{e:#}"), 1),
    }
}

/// The last steps of a setup: the function into the configuration, the
/// gadget onto the UDC (the host sees the device from here on).
fn link_and_bind(g: &mut Gadget, dir: &Path, udc: &str) -> anyhow::Result<()> {
    std::os::unix::fs::symlink(g.func_dir(), g.link())
        .context("cannot link the function into the configuration")?;
    write_attr(&dir.join("UDC"), udc)
        .map_err(|e| anyhow!("{e:#}; is the UDC `{udc}` used by another gadget?"))?;
    g.bound = true;
    Ok(())
}

fn spawn(
    name: &str,
    f: impl FnOnce() + Send + 'static,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .context("cannot start a thread")
}
