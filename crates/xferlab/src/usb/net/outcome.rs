//! What a `usb net` run comes to: the device given back to its class
//! driver ([`rebind`]) and this side's `usb_net` section ([`section`]).

use std::sync::atomic::Ordering::Relaxed;

use xferlab_core::usb::net::report::{NetDepth, NetRx, NetThreads, NetTx, UsbNetReport};
use xferlab_core::usb::stats::UsbDeviceInfo;

use super::link::{RxEnd, Shared};
use super::LinkRequest;
use xferlab_core::usb::net::report::ThreadUse;
use xferlab_core::usb::net::Encap;

/// Gives the device back to its class driver. usbfs reattaches the driver
/// of the interface it took, but cdc_ether and cdc_ncm bind through the
/// control interface and let go of both: ask the kernel to probe every
/// interface left without a driver.
pub fn rebind(info: &nusb::DeviceInfo) {
    for i in info.interfaces() {
        let n = i.interface_number();
        if crate::usb::device::interface_driver(info, n).is_none() {
            if let Some(name) = crate::usb::device::sysfs_interface(info, n) {
                let _ = std::fs::write("/sys/bus/usb/drivers_probe", name);
            }
        }
    }
}

/// How the link was set up: the section's fixed part.
#[derive(Debug, Clone)]
pub struct LinkShape {
    pub device: UsbDeviceInfo,
    pub encap: Encap,
    pub depth: NetDepth,
    pub link: LinkRequest,
}

/// The `usb_net` section: the setup, what each thread cost, and what the
/// threads counted (each into its own counters; the sums are here).
pub fn section(
    shape: LinkShape,
    buffers: &str,
    s: &Shared,
    tx: ThreadUse,
    rx: Option<RxEnd>,
) -> UsbNetReport {
    let (rx_use, decode, gro) = rx.map_or_else(Default::default, |r| (r.cpu, r.decode, r.gro));
    let (t, r) = (&s.tx, &s.rx);
    UsbNetReport {
        device: shape.device,
        encap: shape.encap,
        frames_per_transfer_max: shape.link.frames_per_transfer as u64,
        coalesce_us: shape.link.coalesce_us,
        depth: shape.depth,
        buffers: buffers.to_string(),
        polls: tx.polls + rx_use.polls,
        threads: NetThreads { tx, rx: rx_use },
        tx: NetTx {
            transfers: t.transfers.load(Relaxed),
            frames: t.frames.load(Relaxed),
            bytes: t.bytes.load(Relaxed),
            // Failed submissions (counted by the sender) and failed
            // completions (reaped by the receiver).
            errors: t.errors.load(Relaxed) + r.out_errors.load(Relaxed),
            too_large: t.too_large.load(Relaxed),
            malformed: t.malformed.load(Relaxed),
        },
        rx: NetRx {
            transfers: r.transfers.load(Relaxed),
            bytes: r.bytes.load(Relaxed),
            errors: r.errors.load(Relaxed),
            decode,
            gro,
            tap_drops: r.tap_drops.load(Relaxed),
        },
    }
}
