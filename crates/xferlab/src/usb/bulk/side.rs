//! What a bulk run comes to: the endpoints' reports assembled into this
//! side's report ([`side`]), which [`crate::usb::outcome`] turns into the
//! result.

use xferlab_core::result::{CpuUsage, SideTransportReport};
use xferlab_core::usb::stats::UsbReport;

use super::pipe::PipeEnd;
use crate::driver::Finished;

/// The host's side of a run on the device of `usb` (its pipes are filled
/// in from `ends`, one per endpoint, Err for an endpoint whose thread
/// died), and what went wrong on the endpoints.
pub fn side(
    mut usb: UsbReport,
    ends: Vec<anyhow::Result<PipeEnd>>,
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
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    let duration_s = flows.iter().map(|f| f.total.end_s).fold(0.0, f64::max);
    let transport = Some(SideTransportReport::UsbBulk(usb));
    let report = crate::usb::alone::side(flows, duration_s, cpu, warnings, transport);
    Finished { report, errors }
}
