//! What a bulk run comes to: the endpoints' reports assembled into this
//! side's report ([`side`]), then into the [`TestResult`] every transport
//! writes, with its status ([`result`]), and the exit code.

use std::time::SystemTime;

use xferlab_core::result::{
    sum_intervals, CpuUsage, Endpoint, KernelCounters, PatternReport, SideReport,
    SideTransportReport, Status, Summary, TestResult, SCHEMA,
};
use xferlab_core::spec::TestSpec;
use xferlab_core::usb::stats::UsbReport;

use super::pipe::PipeEnd;
use crate::driver::Finished;

/// CPU the process used since `start` (user, system seconds), over `wall` seconds.
pub fn cpu_since(start: (f64, f64), wall: f64) -> CpuUsage {
    let (user, system) = crate::usb::process_cpu();
    CpuUsage::new(user - start.0, system - start.1, wall)
}

/// The host's side of a run on the device of `usb` (its pipes are filled
/// in from `ends`, one per endpoint, Err for an endpoint whose thread
/// died), and what went wrong on the endpoints.
pub fn side(
    mut usb: UsbReport,
    ends: Vec<Result<PipeEnd, String>>,
    cpu: CpuUsage,
    warnings: Vec<String>,
) -> Finished {
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
    let report = SideReport {
        endpoint: Endpoint::Client,
        host: crate::sys::host::host_info(),
        embedded: false,
        duration_s: flows.iter().map(|f| f.total.end_s).fold(0.0, f64::max),
        sums: sum_intervals(&flows),
        flows,
        cpu,
        counters: KernelCounters::default(),
        warnings,
        pattern: PatternReport::Stream,
        transport: Some(SideTransportReport::UsbBulk(usb)),
    };
    Finished { report, errors }
}

/// The result of `spec` on the device at `server_address`, from the
/// host's side and the run's errors.
pub fn result(
    spec: TestSpec,
    server_address: String,
    Finished { report, errors }: Finished,
    started_at: SystemTime,
    interrupted: bool,
) -> TestResult {
    let moved = report.flows.iter().any(|f| f.total.bytes_all > 0);
    let status = if errors.is_empty() && !interrupted {
        Status::Ok
    } else if moved {
        Status::Partial
    } else {
        Status::Failed
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
        summary: Summary::from_sides(&report, None),
        client: report,
        server: None,
        status,
        errors,
        server_output: None,
        lab: None,
    }
}

/// 130 after Ctrl-C; 1 for a run that is not clean (errors, among them
/// data that broke the pattern); else 0.
pub fn exit_code(r: &TestResult, interrupted: bool) -> std::process::ExitCode {
    if interrupted {
        std::process::ExitCode::from(130)
    } else if r.status != Status::Ok {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    }
}
