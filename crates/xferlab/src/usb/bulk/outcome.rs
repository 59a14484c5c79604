//! What a bulk run comes to: the endpoints' reports assembled into the
//! [`TestResult`] every transport writes, its status, and the exit code.

use std::time::SystemTime;

use xferlab_core::result::{
    sum_intervals, CpuUsage, Endpoint, KernelCounters, PatternReport, SideReport,
    SideTransportReport, Status, Summary, TestResult, SCHEMA,
};
use xferlab_core::spec::TestSpec;
use xferlab_core::usb::stats::UsbReport;

use super::pipe::PipeEnd;

/// CPU the process used since `start` (user, system seconds), over `wall` seconds.
pub fn cpu_since(start: (f64, f64), wall: f64) -> CpuUsage {
    let (user, system) = crate::usb::process_cpu();
    CpuUsage::new(user - start.0, system - start.1, wall)
}

/// The result of `spec` on the device of `usb` (its pipes are filled in
/// from `ends`, one per endpoint, Err for an endpoint whose thread died).
pub fn result(
    spec: TestSpec,
    mut usb: UsbReport,
    ends: Vec<Result<PipeEnd, String>>,
    cpu: CpuUsage,
    started_at: SystemTime,
    interrupted: bool,
) -> TestResult {
    let mut flows = Vec::new();
    let mut errors = Vec::new();
    for end in ends {
        match end {
            Ok(e) => {
                flows.push(e.flow);
                usb.pipes.push(e.usb);
                errors.extend(e.errors);
            }
            Err(e) => errors.push(e),
        }
    }
    let moved = flows.iter().any(|f| f.total.bytes_all > 0);
    let status = if errors.is_empty() && !interrupted {
        Status::Ok
    } else if moved {
        Status::Partial
    } else {
        Status::Failed
    };
    let d = &usb.device;
    let server_address = format!(
        "usb {}.{} {:04x}:{:04x}",
        d.bus, d.address, d.vendor_id, d.product_id
    );
    let side = SideReport {
        endpoint: Endpoint::Client,
        host: crate::sys::host::host_info(),
        embedded: false,
        duration_s: flows.iter().map(|f| f.total.end_s).fold(0.0, f64::max),
        sums: sum_intervals(&flows),
        flows,
        cpu,
        counters: KernelCounters::default(),
        warnings: Vec::new(),
        pattern: PatternReport::Stream,
        transport: Some(SideTransportReport::UsbBulk(usb)),
    };
    let mut id = [0u8; 16];
    let _ = getrandom::fill(&mut id);
    TestResult {
        schema: SCHEMA.into(),
        id: id.iter().map(|b| format!("{b:02x}")).collect(),
        started_at: humantime::format_rfc3339_millis(started_at).to_string(),
        software: crate::software(),
        spec,
        server_address,
        summary: Summary::from_sides(&side, None),
        client: side,
        server: None,
        status,
        errors,
        server_output: None,
        lab: None,
    }
}

/// 130 after Ctrl-C; 1 for a run that is not clean (errors, or data that
/// broke the pattern); else 0.
pub fn exit_code(r: &TestResult, interrupted: bool) -> std::process::ExitCode {
    let pattern_failed = r
        .client
        .usb()
        .is_some_and(|u| u.pipes.iter().any(|p| p.total.pattern_errors > 0));
    if interrupted {
        std::process::ExitCode::from(130)
    } else if r.status != Status::Ok || pattern_failed {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    }
}
