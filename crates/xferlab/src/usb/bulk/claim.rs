//! The device a bulk run holds: found by the user's selector, opened, its
//! bulk endpoints checked against the direction asked for, the interface
//! claimed. Dropping it releases the interface and gives it back to the
//! kernel driver it was taken from, on every path out of a run.

use nusb::{Device, DeviceInfo, Interface};
use xferlab_core::usb::descriptor::{BulkPipes, EndpointDesc, PipeRequest};
use xferlab_core::usb::errors;
use xferlab_core::usb::stats::{UsbPipeReport, UsbReport};

use super::BulkRequest;
use crate::usb::device::{self, Selection};
use crate::usb::Fail;
use crate::usb::UsbDir;

/// Which device, interface and endpoints a run wants.
pub struct Want<'a> {
    pub select: &'a Selection,
    pub ep_in: Option<u8>,
    pub ep_out: Option<u8>,
    pub dir: UsbDir,
    /// Bytes per transfer.
    pub size: u64,
}

pub struct Claimed {
    pub info: DeviceInfo,
    pub pipes: BulkPipes,
    /// `high`, `super`, ... as `xferlab usb list` shows it.
    pub speed: &'static str,
    /// `BUS.ADDR VID:PID`, for messages.
    pub name: String,
    /// Some until dropped: released before the kernel driver is reattached.
    interface: Option<Interface>,
    device: Device,
    /// A kernel driver was detached (--detach-kernel-driver) and is owed the interface back.
    reattach: bool,
}

impl Claimed {
    /// Selects, opens and claims the device `a` names, with the endpoints
    /// its `--dir` needs.
    pub fn open(a: &BulkRequest) -> Result<Claimed, Fail> {
        Claimed::open_for(&Want {
            select: &a.select,
            ep_in: a.ep_in,
            ep_out: a.ep_out,
            dir: a.dir,
            size: a.size,
        })
    }

    /// Selects, opens and claims the device `a` names, with the endpoints
    /// `a.dir` needs (IN transfers of `a.size` must be whole packets).
    pub fn open_for(a: &Want<'_>) -> Result<Claimed, Fail> {
        let sel = device::parse_selector(a.select.device.as_deref()).map_err(Fail::usage)?;
        let info = device::select(&sel, a.select.serial.as_deref()).map_err(Fail::run)?;
        let req = PipeRequest {
            interface: a.select.interface,
            ep_in: a.ep_in,
            ep_out: a.ep_out,
        };
        let (device, _cfg, pipes) = device::open(&info, req).map_err(Fail::run)?;
        let speed = device::speed_label(info.speed()).unwrap_or("unknown");
        let name = device::describe(&info);
        let want_in = a.dir != UsbDir::Out;
        if want_in && pipes.bulk_in.is_none() {
            return Err(Fail::run(format!(
                "{name} interface {} has no bulk IN endpoint; use --dir out or name one with --ep-in",
                pipes.interface
            )));
        }
        if a.dir != UsbDir::In && pipes.bulk_out.is_none() {
            return Err(Fail::run(format!(
                "{name} interface {} has no bulk OUT endpoint; use --dir in or name one with --ep-out",
                pipes.interface
            )));
        }
        if let Some(ep) = pipes.bulk_in.filter(|_| want_in) {
            let max_packet = usize::from(ep.max_packet.max(1));
            // -l is at most 64M (plan::validate): it fits.
            let size = a.size as usize;
            if !size.is_multiple_of(max_packet) {
                return Err(Fail::usage(errors::in_size_not_whole_packets(
                    size, ep.address, max_packet, speed,
                )));
            }
        }
        let interface = device::claim(&info, &device, &pipes, a.select.detach_kernel_driver)
            .map_err(Fail::run)?;
        Ok(Claimed {
            info,
            pipes,
            speed,
            name,
            interface: Some(interface),
            device,
            reattach: a.select.detach_kernel_driver,
        })
    }

    pub fn interface(&self) -> &Interface {
        self.interface.as_ref().expect("claimed until dropped")
    }

    /// The endpoints `dir` moves data through, OUT first (flow 0), then IN.
    pub fn endpoints(&self, dir: UsbDir) -> Vec<EndpointDesc> {
        let out = self.pipes.bulk_out.filter(|_| dir != UsbDir::In);
        let inn = self.pipes.bulk_in.filter(|_| dir != UsbDir::Out);
        out.into_iter().chain(inn).collect()
    }

    /// The device as the flows' far end: `VID:PID (product)`.
    pub fn remote(&self) -> String {
        let i = &self.info;
        format!(
            "{:04x}:{:04x}{}",
            i.vendor_id(),
            i.product_id(),
            i.product_string()
                .map(|p| format!(" ({p})"))
                .unwrap_or_default()
        )
    }

    /// The device as the result's server address: `usb BUS.ADDR VID:PID`.
    pub fn address(&self) -> String {
        let i = &self.info;
        format!(
            "usb {}.{} {:04x}:{:04x}",
            i.busnum(),
            i.device_address(),
            i.vendor_id(),
            i.product_id()
        )
    }

    /// An endpoint as a flow's local end: `usb BUS.ADDR ep 0x81`.
    pub fn local(&self, ep: &EndpointDesc) -> String {
        format!(
            "usb {}.{} ep 0x{:02x}",
            self.info.busnum(),
            self.info.device_address(),
            ep.address
        )
    }

    /// The `usb` section of the result with these endpoints' reports.
    pub fn report(&self, pipes: Vec<UsbPipeReport>) -> UsbReport {
        UsbReport {
            device: device::info_of(&self.info),
            interface: self.pipes.interface,
            alt_setting: self.pipes.alt,
            pipes,
        }
    }
}

impl Drop for Claimed {
    fn drop(&mut self) {
        // The driver can only bind a released interface (nusb ignores
        // errors of a device that is gone).
        drop(self.interface.take());
        if self.reattach {
            let _ = self.device.attach_kernel_driver(self.pipes.interface);
        }
    }
}
