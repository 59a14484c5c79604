//! What a gadget run comes to: the `usb_gadget` section as the run starts
//! ([`section`]), filled from the threads' counters at the end ([`side`]),
//! the test as a spec ([`spec`]), and the exit code ([`exit_code`]).

use std::process::ExitCode;
use std::sync::atomic::Ordering::Relaxed;

use xferlab_core::result::{
    CpuUsage, Endpoint, FlowReport, SideTransportReport, Status, TestResult,
};
use xferlab_core::spec::TestSpec;
use xferlab_core::usb::gadget::{
    GadgetDir, GadgetNet, RawEndpoints, RawGadgetReport, UsbGadgetReport,
};

use super::ffs_io::{DirCounters, Shared};
use super::net_io::NetCounters;
use super::plan::Plan;
use super::raw::RawReport;
use super::{GadgetFunction, GadgetRequest, GadgetVia};
use crate::driver::Finished;
use crate::usb::alone;

/// The section before any transfer: what was set up, counts at zero.
pub fn section(
    a: &GadgetRequest,
    plan: &Plan,
    udc: &str,
    ifname: Option<String>,
) -> UsbGadgetReport {
    let raw = a.via == GadgetVia::RawGadget;
    UsbGadgetReport {
        function: format!("{:?}", a.function).to_lowercase(),
        // raw-gadget's calls block: one transfer at a time.
        io: if raw {
            "sync".into()
        } else {
            format!("{:?}", a.io).to_lowercase()
        },
        via: if raw { "raw_gadget" } else { "functionfs" }.into(),
        queue: if raw { 1 } else { a.queue },
        qmult: a.qmult,
        ifname,
        size: a.size,
        pattern: a.pattern,
        name: a.name.clone(),
        udc: udc.to_string(),
        id: format!("{:04x}:{:04x}", plan.id.0, plan.id.1),
        enabled_times: 0,
        input: GadgetDir::default(),
        output: GadgetDir::default(),
        net: match (a.function, a.encap) {
            (GadgetFunction::Net, Some(encap)) => Some(GadgetNet {
                encap,
                tap: a.link.tap.clone(),
                frames_per_transfer_max: a.link.frames_per_transfer as u64,
                coalesce_us: a.link.coalesce_us,
                tx_frames: 0,
                tx_too_large: 0,
                rx_decode: Default::default(),
                tap_drops: 0,
                raw_gadget: None,
            }),
            _ => None,
        },
    }
}

/// The device's end of the run, as the teardown left it.
pub enum Teardown {
    /// Something of the configfs gadget could not be removed.
    Configfs {
        leftover: bool,
    },
    Raw(RawReport),
}

/// What the workload hands over at its end.
pub struct Ended<'a> {
    pub section: UsbGadgetReport,
    pub shared: &'a Shared,
    pub net: &'a NetCounters,
    pub flows: Vec<FlowReport>,
    pub wall: f64,
    pub cpu: CpuUsage,
    pub warnings: Vec<String>,
    pub teardown: Teardown,
}

/// The line in `errors` when the teardown left something behind.
pub fn leftover_line(name: &str) -> String {
    format!(
        "could not remove everything of gadget `{name}`; run `xferlab usb gadget --cleanup --name {name}`"
    )
}

/// This process's side: the device end, so `endpoint: "server"` in the
/// result's `client` slot (a result always has one).
pub fn side(e: Ended<'_>) -> Finished {
    let mut g = e.section;
    let dir = |c: &DirCounters| GadgetDir {
        transfers: c.transfers.load(Relaxed),
        bytes: c.bytes.load(Relaxed),
        errors: c.errors.load(Relaxed),
        pattern_errors: c.pattern_errors.load(Relaxed),
    };
    g.input = dir(&e.shared.input);
    g.output = dir(&e.shared.output);
    g.enabled_times = e.shared.enables.load(Relaxed);
    let mut errors = Vec::new();
    match e.teardown {
        Teardown::Configfs { leftover: true } => errors.push(leftover_line(&g.name)),
        Teardown::Configfs { leftover: false } => {}
        Teardown::Raw(r) => {
            if let Some(n) = g.net.as_mut() {
                n.raw_gadget = Some(RawGadgetReport {
                    udc: r.udc.clone(),
                    endpoints: RawEndpoints {
                        bulk_in: format!("0x{:02x}", r.endpoints.0 | 0x80),
                        bulk_out: format!("0x{:02x}", r.endpoints.1),
                        notify: format!("0x{:02x}", r.endpoints.2 | 0x80),
                    },
                    host_mac: r
                        .host_mac
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<Vec<_>>()
                        .join(":"),
                    control_requests: r.control_requests,
                    stalled: r.stalled,
                    control_errors: r.control_errors,
                    notifications: r.notifications,
                    packet_filter: r.packet_filter,
                    ntb_in_max: r.ntb_in_max as u64,
                });
            }
        }
    }
    if let Some(n) = g.net.as_mut() {
        n.tx_frames = e.net.tx_frames.load(Relaxed);
        n.tx_too_large = e.net.tx_too_large.load(Relaxed);
        n.rx_decode = *e.net.decode.lock().unwrap_or_else(|p| p.into_inner());
        n.tap_drops = e.net.tap_drops.load(Relaxed);
    }
    let mut report = alone::side(
        e.flows,
        e.wall,
        e.cpu,
        e.warnings,
        Some(SideTransportReport::UsbGadget(g)),
    );
    report.endpoint = Endpoint::Server;
    Finished { report, errors }
}

/// The run as a stream test over the `usb_bulk` transport, both ways (the
/// host decides what moves); without `-t` it is open (until Ctrl-C).
pub fn spec(a: &GadgetRequest) -> TestSpec {
    let mut spec = alone::spec(a.time, a.interval, &a.report);
    spec.knobs.size = a.size;
    spec
}

/// 1 when the teardown left something behind; 130 after Ctrl-C or
/// SIGTERM; 1 for a run that is not clean; else 0.
pub fn exit_code(r: &TestResult, interrupted: bool) -> ExitCode {
    let leftover = match &r.client.transport {
        Some(SideTransportReport::UsbGadget(g)) => r.errors.contains(&leftover_line(&g.name)),
        _ => false,
    };
    if leftover {
        ExitCode::from(1)
    } else if interrupted {
        ExitCode::from(130)
    } else if r.status != Status::Ok {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
