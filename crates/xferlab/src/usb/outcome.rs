//! What a USB run comes to: this side's report turned into the
//! [`TestResult`] every transport writes, with its status ([`result`]), and
//! the exit code ([`exit_code`]). Shared by the verbs that run on the
//! driver loop.

use std::time::SystemTime;

use xferlab_core::result::{CpuUsage, Status, Summary, TestResult, SCHEMA};
use xferlab_core::spec::{Limit, TestSpec};

use crate::driver::Finished;

/// CPU the process used since `start` (user, system seconds), over `wall` seconds.
pub fn cpu_since(start: (f64, f64), wall: f64) -> CpuUsage {
    let (user, system) = crate::usb::process_cpu();
    CpuUsage::new(user - start.0, system - start.1, wall)
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
        usbmon: None,
    }
}

/// Whether a Ctrl-C (`pressed`: it stopped the run) cut the run short: a
/// run without an end of its own (`Limit::Open`) ends that way by design,
/// and keeps status ok (D2 of issue 33; its exit code is still 130).
pub fn cut_short(spec: &TestSpec, pressed: bool) -> bool {
    pressed && spec.limit != Limit::Open
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
