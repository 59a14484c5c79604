//! USB bulk's model: transfers through usbfs, run by `xferlab usb` with
//! its own report section (`usb`), outside the socket patterns.

use super::{check_stream_knobs, Carrier, TransportModel};
use crate::spec::{Knobs, SpecError};

pub struct UsbBulk;

impl TransportModel for UsbBulk {
    fn label(&self) -> &'static str {
        "USB bulk"
    }

    fn carrier(&self) -> Carrier {
        Carrier::UsbBulk
    }

    fn check_knobs(&self, knobs: &Knobs) -> Result<(), SpecError> {
        check_stream_knobs(knobs)
    }
}
