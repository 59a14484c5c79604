//! Making the device: a configfs gadget with its function (attributes,
//! the FunctionFS mount, ep0's descriptors, the data threads) bound to the
//! UDC ([`configfs`]), or a raw-gadget device ([`raw`]). A setup that fails
//! half-way stops and unbinds what it started, joins its threads and
//! removes what it created before reporting the error.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use rustix::mount::{mount, MountFlags};
use xferlab_core::usb::ffs;

use super::cbr_io::{cbr_loop, CbrControl};
use super::configfs::{check_configfs, mkdir, mount_point, pick_udc, write_attr, Gadget, CONFIGFS};
use super::ffs_io::{aio_loop, ep0_loop, sync_loop, Shared};
use super::net_io::{self, NetCounters};
use super::plan::Plan;
use super::raw::{self, RawRun};
use super::{GadgetFunction, GadgetIo, GadgetRequest};
use crate::usb::tap::open_tap;
use crate::usb::Fail;

/// A configfs gadget bound to its UDC, with the threads of its function
/// (none for the kernel's functions).
pub struct Running {
    pub g: Gadget,
    pub threads: Vec<JoinHandle<()>>,
    pub shared: Arc<Shared>,
    pub net: Arc<NetCounters>,
    pub udc: String,
    /// The kernel network functions' gadget-side interface.
    pub ifname: Option<String>,
}

impl Running {
    /// Ends the function's work: the flag for its threads, and the unbind,
    /// which ends every transfer in flight.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Relaxed);
        self.g.unbind();
    }

    /// Joins the threads that end by `deadline`; one still blocked then
    /// is left behind (the process exits soon after).
    pub fn join(&mut self, deadline: Instant) {
        for t in std::mem::take(&mut self.threads) {
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }

    /// Unmounts and removes the gadget; true if something of it is left.
    pub fn remove(self, name: &str) -> bool {
        let dir = self.g.dir.clone();
        drop(self.g);
        dir.exists() || mount_point(name).exists()
    }
}

/// The configfs gadget `a.name` on the UDC asked for, bound and serving.
pub fn configfs(a: &GadgetRequest, plan: &Plan) -> Result<Running, Fail> {
    check_configfs().map_err(Fail::run)?;
    let udc = pick_udc(a.udc.as_deref()).map_err(Fail::run)?;
    let dir = Path::new(CONFIGFS).join(&a.name);
    if dir.exists() {
        return Err(Fail::run(format!(
            "a gadget `{}` already exists ({}): another xferlab gadget runs, or a killed run left it; \
             remove it with `xferlab usb gadget --cleanup --name {}`",
            a.name,
            dir.display(),
            a.name
        )));
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
    let mut r = Running {
        g: Gadget {
            dir,
            function,
            mount: None,
            bound: false,
        },
        threads: Vec::new(),
        shared: Arc::new(Shared::default()),
        net: Arc::new(NetCounters::default()),
        udc,
        ifname: None,
    };
    if let Err(e) = build(a, plan, &mut r) {
        r.stop();
        for t in std::mem::take(&mut r.threads) {
            let _ = t.join();
        }
        drop(r);
        return Err(Fail::run(e));
    }
    // The network functions name their gadget-side interface at bind time.
    r.ifname = a
        .function
        .net_kind()
        .and_then(|_| fs::read_to_string(r.g.func_dir().join("ifname")).ok())
        .map(|s| s.trim().to_string());
    Ok(r)
}

/// `--via raw-gadget`: the link as a device of its own ([`raw`]).
pub fn raw(
    a: &GadgetRequest,
    plan: &Plan,
) -> Result<(RawRun, Arc<Shared>, Arc<NetCounters>), Fail> {
    let Some(encap) = a.encap else {
        return Err(Fail::usage("--function net needs --encap ecm|eem|ncm"));
    };
    let udc = pick_udc(a.udc.as_deref()).map_err(Fail::run)?;
    let tap = open_tap(&a.link.tap, false).map_err(Fail::run)?;
    let link = net_io::Link {
        encap,
        limits: net_io::limits(encap, &a.link),
        crc: a.link.crc,
        depth: 1,
        rx_size: a.size as usize,
    };
    let shared = Arc::new(Shared::default());
    let net = Arc::new(NetCounters::default());
    let device = raw::Device {
        udc,
        id: plan.id,
        serial: a.serial.clone(),
    };
    let run = raw::start(device, tap, link, &shared, &net).map_err(Fail::run)?;
    Ok((run, shared, net))
}

/// Every step of a configfs setup; on an error the caller undoes them.
fn build(a: &GadgetRequest, plan: &Plan, r: &mut Running) -> anyhow::Result<()> {
    let (vid, pid) = plan.id;
    let dir = r.g.dir.clone();
    mkdir(&dir).map_err(|e| anyhow!("{e:#}; is libcomposite loaded (`modprobe libcomposite`)?"))?;
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
    mkdir(&r.g.func_dir()).map_err(|e| match a.function {
        GadgetFunction::Ffs | GadgetFunction::Cbr | GadgetFunction::Net => {
            anyhow!(
                "{e:#}; is FunctionFS available (CONFIG_USB_CONFIGFS_F_FS, `modprobe usb_f_fs`)?"
            )
        }
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
            let f = r.g.func_dir();
            write_attr(
                &f.join("pattern"),
                &a.pattern.sourcesink_number().to_string(),
            )?;
            write_attr(&f.join("bulk_buflen"), &a.size.to_string())?;
            write_attr(&f.join("bulk_qlen"), &a.queue.to_string())?;
        }
        GadgetFunction::Ecm | GadgetFunction::Eem | GadgetFunction::Ncm => {
            if let Some(q) = a.qmult {
                write_attr(&r.g.func_dir().join("qmult"), &q.to_string())?;
            }
        }
        GadgetFunction::Ffs | GadgetFunction::Cbr | GadgetFunction::Net => functionfs(a, r)?,
    }
    link_and_bind(r)
}

/// The FunctionFS function: mount, descriptors, and its threads (ep0, and
/// the source/sink, fixed-rate or network data path).
fn functionfs(a: &GadgetRequest, r: &mut Running) -> anyhow::Result<()> {
    // The TAP first: a taken name fails before the host sees a device.
    let tap = match a.encap {
        Some(_) if a.function == GadgetFunction::Net => Some(open_tap(&a.link.tap, false)?),
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
        return Err(io::Error::from(e))
            .with_context(|| format!("cannot mount FunctionFS `{}` on {}", a.name, mp.display()));
    }
    r.g.mount = Some(mp.clone());
    let mut ep0 = OpenOptions::new()
        .read(true)
        .write(true)
        .open(mp.join("ep0"))
        .with_context(|| format!("cannot open {}/ep0", mp.display()))?;
    let (class, label) = match a.encap {
        Some(e) if tap.is_some() => (net_io::interface_class(e), "xferlab network link"),
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
    let (s0, u0) = (r.shared.clone(), r.udc.clone());
    let cbr = (a.function == GadgetFunction::Cbr).then(Arc::<CbrControl>::default);
    let c0 = cbr.clone();
    r.threads.push(spawn("ffs-ep0", move || {
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
        let (s1, n1, s2, n2) = (
            r.shared.clone(),
            r.net.clone(),
            r.shared.clone(),
            r.net.clone(),
        );
        r.threads.push(spawn("net-tx", move || {
            net_io::tx_loop(ep_in, tap, link, &s1, &n1)
        })?);
        r.threads.push(spawn("net-rx", move || {
            net_io::rx_loop(ep_out, tap_rx, link, &s2, &n2)
        })?);
        return Ok(());
    }
    for (file, is_in) in [(ep_in, true), (ep_out, false)] {
        let s = r.shared.clone();
        let (size, queue, pattern, io) = (a.size as usize, a.queue as usize, a.pattern, a.io);
        let name = if is_in { "ffs-in" } else { "ffs-out" };
        let c = cbr.clone();
        r.threads.push(spawn(name, move || match (c, io) {
            (Some(c), _) => cbr_loop(file, is_in, &s, &c),
            (None, GadgetIo::Sync) => sync_loop(file, is_in, size, pattern, &s),
            (None, GadgetIo::Aio) => aio_loop(file, is_in, size, queue, pattern, &s),
        })?);
    }
    Ok(())
}

/// The last steps of a setup: the function into the configuration, the
/// gadget onto the UDC (the host sees the device from here on).
fn link_and_bind(r: &mut Running) -> anyhow::Result<()> {
    let (g, udc) = (&mut r.g, r.udc.as_str());
    std::os::unix::fs::symlink(g.func_dir(), g.link())
        .context("cannot link the function into the configuration")?;
    write_attr(&g.dir.join("UDC"), udc)
        .map_err(|e| anyhow!("{e:#}; is the UDC `{udc}` used by another gadget?"))?;
    g.bound = true;
    Ok(())
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> anyhow::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .context("cannot start a thread")
}
