//! `xferlab usb net`: the host side of xferlab's own USB network link. A
//! TAP device (Ethernet frames) is bridged to a device's bulk pipes: frames
//! read from the TAP are packed by the core's [`Coalescer`] (ECM, EEM or
//! NCM framing, up to N frames a transfer, a coalescing timeout) and sent
//! with `-Q` OUT transfers in flight; `-Q` IN transfers stay queued, and
//! each completed one is split by the core's decoder into frames written to
//! the TAP (TCP segments merged into super-frames first, core
//! `usb::net::gro`). Malformed transfers are counted and dropped. The TAP
//! is not persistent: the kernel removes it when the process ends, SIGKILL
//! too.
//!
//! The steps, each in its own module: check the request and size the
//! link ([`plan`]), run its two threads ([`link`]) as the driver loop's
//! [`workload`], and give the device back and report ([`outcome`]).
//!
//! [`Coalescer`]: xferlab_core::usb::net::Coalescer

mod link;
mod outcome;
mod plan;
mod workload;

use std::process::ExitCode;
use std::sync::atomic::AtomicU32;
use std::sync::{mpsc, Arc};
use std::time::SystemTime;

use xferlab_core::interval::IntervalClock;
use xferlab_core::units::RateUnit;
use xferlab_core::usb::descriptor::PipeRequest;
use xferlab_core::usb::net::Encap;

use self::link::{LinkSetup, Shared};
use self::outcome::LinkShape;
use self::workload::{NetWorkload, Running};
use super::alone::{self, Shown};
use super::tap::open_tap;
use super::usbfs::Urbs;
use super::{device, Fail, ReportTo};
use crate::output::{self, Format};
use crate::sys::clock;

/// `usb net` as asked for.
#[derive(Debug, Clone)]
pub struct NetRequest {
    /// VID:PID or BUS.ADDR.
    pub device: String,
    pub encap: Encap,
    /// Transfers in flight per direction; None sizes them from usbnet's queue.
    pub depth: Option<usize>,
    pub link: LinkRequest,
    /// Seconds to run; None is until interrupted.
    pub time: Option<f64>,
    /// Seconds between interval reports (0 = none).
    pub interval: f64,
    pub report: ReportTo,
}

/// The settings both ends of xferlab's own USB network link share (`usb
/// net` on the host, `usb gadget --function net` on the device).
#[derive(Debug, Clone)]
pub struct LinkRequest {
    /// Ethernet frames per transfer this end sends, at most.
    pub frames_per_transfer: usize,
    /// How long the first frame of a transfer waits for more.
    pub coalesce_us: u64,
    /// Bytes per transfer this end sends, at most; None is the framing's default.
    pub max_transfer: Option<u64>,
    /// EEM: a real CRC-32 instead of the sentinel.
    pub crc: bool,
    /// The TAP device to create.
    pub tap: String,
}

/// A link setting out of range: the one line printed.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("--frames-per-transfer must be 1 to 256 (got {0})")]
    FramesPerTransfer(usize),
    #[error("--max-transfer must be 64 to 65535 bytes")]
    MaxTransfer,
}

impl LinkRequest {
    pub fn check(&self) -> Result<(), LinkError> {
        if self.frames_per_transfer == 0 || self.frames_per_transfer > 256 {
            return Err(LinkError::FramesPerTransfer(self.frames_per_transfer));
        }
        if self
            .max_transfer
            .is_some_and(|m| !(64..=65535).contains(&m))
        {
            return Err(LinkError::MaxTransfer);
        }
        Ok(())
    }
}

pub fn run(a: &NetRequest, interrupts: &AtomicU32) -> ExitCode {
    net(a, interrupts).unwrap_or_else(|f| {
        eprintln!("xferlab: {}", f.msg);
        ExitCode::from(f.code)
    })
}

fn net(a: &NetRequest, interrupts: &AtomicU32) -> Result<ExitCode, Fail> {
    // Bad settings are one line before any device is touched (exit 1, as
    // before the verb ran on the loop).
    plan::check(a).map_err(Fail::run)?;
    if a.report.format == Format::Iperf3Json {
        return Err(Fail::usage(
            "--format iperf3-json has no shape for USB results; use json, jsonl or csv",
        ));
    }
    let out = output::open(a.report.output.as_deref()).map_err(Fail::usage)?;
    let mut reporter = output::reporter(a.report.format, RateUnit::AutoBits, out);
    let spec = alone::spec(a.time, a.interval, &a.report);
    let (tx, rx) = mpsc::channel();
    let cpu_start = super::process_cpu();
    let wall_start = SystemTime::now();
    let (running, line) = open(a, crate::control::flow_done_notifier(&tx)).map_err(Fail::run)?;
    let start = clock::now();
    let address = running.remote.clone();
    let workload = NetWorkload::new(
        running,
        IntervalClock::new(a.interval, 0.0),
        start,
        cpu_start,
    );
    let flows = workload.flow_starts();
    let shown = Shown {
        spec,
        address,
        line: &line,
        session: format!("usbnet-{}", a.link.tap),
        wall_start,
    };
    let (result, pressed) = alone::run(
        shown,
        Box::new(workload),
        (start, &flows),
        &rx,
        &mut *reporter,
        interrupts,
    );
    alone::finish(reporter, &result, pressed)
}

/// Opens the device and the TAP and starts the link's threads (each
/// wakes the loop through `done` when it ends); also the line that says
/// what runs.
fn open(a: &NetRequest, done: Arc<dyn Fn(u32) + Send + Sync>) -> anyhow::Result<(Running, String)> {
    let sel = device::parse_selector(Some(&a.device))?;
    let info = device::select(&sel, None)?;
    // nusb finds the device and reads its descriptors; the transfers run
    // on a usbfs descriptor of our own (xferlab-sys/src/usbfs.rs), polled
    // with the TAP.
    let (dev, _cfg, pipes) = device::open(&info, PipeRequest::default())?;
    drop(dev);
    let (Some(ep_in), Some(ep_out)) = (pipes.bulk_in, pipes.bulk_out) else {
        anyhow::bail!(
            "{} has no interface with a bulk IN and a bulk OUT endpoint",
            device::describe(&info)
        );
    };
    // The class driver (cdc_ether, cdc_eem, cdc_ncm) holds the interface:
    // usbfs detaches it for the run, and we rebind it at exit.
    let node = device::open_node(&info, &pipes)?;
    let max_packet = usize::from(ep_out.max_packet.max(1));
    // TSO and checksum offload: TCP's super-frames are cut here, one
    // read() for up to 64 KB (gso.rs).
    let tap = open_tap(&a.link.tap, true)?;
    let limits = plan::limits(a);
    let rx_size = plan::rx_size(a.encap, max_packet);
    let depth = plan::depth(a, info.speed(), limits.max_transfer, rx_size);
    let (out_n, in_n) = (depth.out as usize, depth.inn as usize);
    // Slots 0..depth.out are OUT URBs, the rest IN URBs.
    let slots: Vec<(u8, usize)> = std::iter::repeat_n((ep_out.address, limits.max_transfer), out_n)
        .chain(std::iter::repeat_n((ep_in.address, rx_size), in_n))
        .collect();
    let urbs = Urbs::new(node, &slots);
    let line = format!(
        "{} {}: TAP {} <-> bulk 0x{:02x}/0x{:02x}, {} x{} frames per transfer, {} us coalescing, {} OUT and {} IN transfers in flight{}",
        device::describe(&info),
        device::speed_label(info.speed()).unwrap_or("?"),
        a.link.tap,
        ep_out.address,
        ep_in.address,
        a.encap.label(),
        limits.max_frames,
        a.link.coalesce_us,
        out_n,
        in_n,
        match depth.from {
            xferlab_core::usb::net::report::DepthFrom::Flag => " (-Q)",
            xferlab_core::usb::net::report::DepthFrom::TwiceUsbnetQueueMemory =>
                " (twice usbnet's queue at this speed)",
        },
    );
    let shared = Arc::new(Shared::new(urbs, tap, out_n)?);
    let setup = LinkSetup {
        encap: a.encap,
        limits,
        max_packet,
        crc: a.link.crc,
        rx_size,
    };
    let threads = shared.start(setup, done)?;
    let running = Running {
        shared,
        threads,
        shape: LinkShape {
            device: device::info_of(&info),
            encap: a.encap,
            depth,
            link: a.link.clone(),
        },
        local: format!("tap {}", a.link.tap),
        remote: format!("usb {}.{}", info.busnum(), info.device_address()),
        info,
    };
    Ok((running, line))
}
