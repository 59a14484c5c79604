//! USB bulk's model: transfers through usbfs, run by `xferlab usb` with
//! its own report section (`usb`), outside the socket patterns.

use super::{check_stream_knobs, Carrier, TransportModel};
use crate::knobs::{KnobError, Knobs};

pub struct UsbBulk;

impl TransportModel for UsbBulk {
    fn label(&self) -> &'static str {
        "USB bulk"
    }

    fn carrier(&self) -> Carrier {
        Carrier::UsbBulk
    }

    fn check_knobs(&self, knobs: &Knobs) -> Result<(), KnobError> {
        check_stream_knobs(knobs)
    }
}
