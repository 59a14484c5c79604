//! The device's side over ep0: xferlab's vendor requests to the
//! fixed-rate device (INFO, START, STOP), and the bulk endpoints the
//! trials stream on.

use std::time::Duration;

use nusb::transfer::{Bulk, ControlIn, ControlOut, ControlType, In, Out, Recipient, TransferError};
use nusb::{Endpoint, Interface, MaybeFuture};
use xferlab_core::usb::cbr::wire::{self, StartParams};

use crate::usb::bulk::claim::Claimed;
use crate::usb::Fail;

const CONTROL_TIMEOUT: Duration = Duration::from_secs(5);

/// The claimed interface's ep0, owned: a trial's workload sends STOP
/// from the loop's thread, after the borrow of the device has ended.
#[derive(Clone)]
pub struct Ep0 {
    interface: Interface,
    number: u8,
    /// `BUS.ADDR VID:PID`, for messages.
    pub name: String,
}

impl Ep0 {
    pub fn of(dev: &Claimed) -> Ep0 {
        Ep0 {
            interface: dev.interface().clone(),
            number: dev.pipes.interface,
            name: dev.name.clone(),
        }
    }

    pub fn control_out(&self, request: u8, data: &[u8]) -> Result<(), TransferError> {
        self.interface
            .control_out(
                ControlOut {
                    control_type: ControlType::Vendor,
                    recipient: Recipient::Interface,
                    request,
                    value: 0,
                    index: u16::from(self.number),
                    data,
                },
                CONTROL_TIMEOUT,
            )
            .wait()
    }

    pub fn control_in(&self, request: u8, length: usize) -> Result<Vec<u8>, TransferError> {
        self.interface
            .control_in(
                ControlIn {
                    control_type: ControlType::Vendor,
                    recipient: Recipient::Interface,
                    request,
                    value: 0,
                    index: u16::from(self.number),
                    length: length as u16,
                },
                CONTROL_TIMEOUT,
            )
            .wait()
    }

    /// The device must be xferlab's fixed-rate device.
    pub fn check_device(&self) -> Result<(), Fail> {
        let hint = "run `xferlab usb gadget --function cbr` on the device side";
        let info = self
            .control_in(wire::REQ_INFO, wire::INFO_LEN)
            .map_err(|e| {
                Fail::run(format!(
                    "{}: it refused xferlab's fixed-rate INFO request ({e}); {hint}",
                    self.name
                ))
            })?;
        wire::check_info(&info).map_err(|m| Fail::run(format!("{}: {m}; {hint}", self.name)))
    }
}

/// The bulk endpoints the trials stream on, opened once for the whole
/// run: each trial's threads take them and give them back. (Opened per trial, the next trial could
/// find an endpoint still held: nusb lets go of it from its event thread
/// a moment after the last transfer was seen complete, and a ladder of 40
/// trials once failed with "endpoint already in use".)
pub struct Endpoints {
    pub rx: Option<Endpoint<Bulk, In>>,
    pub tx: Option<Endpoint<Bulk, Out>>,
}

impl Endpoints {
    pub fn open(dev: &Claimed, params: &StartParams) -> Result<Endpoints, Fail> {
        let intf = dev.interface();
        let fail =
            |addr: u8, e: nusb::Error| Fail::run(format!("cannot open endpoint 0x{addr:02x}: {e}"));
        let rx = match dev.pipes.bulk_in.filter(|_| params.rx) {
            Some(ep) => Some(
                intf.endpoint::<Bulk, In>(ep.address)
                    .map_err(|e| fail(ep.address, e))?,
            ),
            None => None,
        };
        let tx = match dev.pipes.bulk_out.filter(|_| params.tx) {
            Some(ep) => Some(
                intf.endpoint::<Bulk, Out>(ep.address)
                    .map_err(|e| fail(ep.address, e))?,
            ),
            None => None,
        };
        Ok(Endpoints { rx, tx })
    }
}
