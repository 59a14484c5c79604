//! Finding, opening and claiming a USB device through usbfs (nusb), with
//! errors that say what to do.

use anyhow::{anyhow, bail, Context};
use nusb::{DeviceInfo, MaybeFuture};
use xferlab_core::usb::descriptor::{self, BulkPipes, ConfigDesc, PipeRequest};
use xferlab_core::usb::errors;
use xferlab_core::usb::stats::UsbDeviceInfo;

/// VID:PID in hex.
pub fn parse_vid_pid(s: &str) -> Option<(u16, u16)> {
    let (v, p) = s.split_once(':')?;
    Some((
        u16::from_str_radix(v, 16).ok()?,
        u16::from_str_radix(p, 16).ok()?,
    ))
}

/// Which device and interface a host-side verb (bulk, cbr) claims.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// `-d`: VID:PID or BUS.ADDR; None is the one vendor-specific device.
    pub device: Option<String>,
    pub serial: Option<String>,
    /// None is the first interface with bulk endpoints.
    pub interface: Option<u8>,
    /// Detach a kernel driver holding the interface (reattached at exit).
    pub detach_kernel_driver: bool,
}

/// How the user named the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    VidPid(u16, u16),
    BusAddr(u8, u8),
    /// No -d: the one device with a vendor-specific bulk interface.
    Auto,
}

pub fn parse_selector(s: Option<&str>) -> anyhow::Result<Selector> {
    let Some(s) = s else {
        return Ok(Selector::Auto);
    };
    if s.contains(':') {
        return parse_vid_pid(s)
            .map(|(v, p)| Selector::VidPid(v, p))
            .with_context(|| format!("-d {s}: VID:PID must be two hex numbers, e.g. 0525:a4a0"));
    }
    if let Some((b, a)) = s.split_once(['.', '/', '-']) {
        if let (Ok(b), Ok(a)) = (b.parse(), a.parse()) {
            return Ok(Selector::BusAddr(b, a));
        }
    }
    bail!(
        "-d {s}: name the device as VID:PID (0525:a4a0) or BUS.ADDR (1.2); `xferlab usb list` shows both"
    )
}

pub fn speed_label(s: Option<nusb::Speed>) -> Option<&'static str> {
    use nusb::Speed::*;
    s.map(|s| match s {
        Low => "low",
        Full => "full",
        High => "high",
        Super => "super",
        SuperPlus => "super_plus",
        _ => "unknown",
    })
}

pub fn describe(d: &DeviceInfo) -> String {
    format!(
        "{}.{} {:04x}:{:04x}",
        d.busnum(),
        d.device_address(),
        d.vendor_id(),
        d.product_id()
    )
}

pub fn info_of(d: &DeviceInfo) -> UsbDeviceInfo {
    UsbDeviceInfo {
        bus: d.busnum(),
        address: d.device_address(),
        vendor_id: d.vendor_id(),
        product_id: d.product_id(),
        speed: speed_label(d.speed()).map(str::to_string),
        manufacturer: d.manufacturer_string().map(str::to_string),
        product: d.product_string().map(str::to_string),
        serial: d.serial_number().map(str::to_string),
    }
}

pub fn list_devices() -> anyhow::Result<Vec<DeviceInfo>> {
    nusb::list_devices()
        .wait()
        .map(|it| it.collect())
        .map_err(|e| {
            if !std::path::Path::new("/sys/bus/usb/devices").exists() {
                anyhow!(
                    "this machine has no USB host controller (/sys/bus/usb is missing); run on a \
                     host with USB, or in the lab VM (lab/vm/run, dummy_hcd)"
                )
            } else {
                anyhow::Error::new(e).context("cannot list USB devices")
            }
        })
}

/// The device the selector names: exactly one, or an error listing the candidates.
pub fn select(sel: &Selector, serial: Option<&str>) -> anyhow::Result<DeviceInfo> {
    let all = list_devices()?;
    let matches: Vec<&DeviceInfo> = all
        .iter()
        .filter(|d| match sel {
            Selector::VidPid(v, p) => d.vendor_id() == *v && d.product_id() == *p,
            Selector::BusAddr(b, a) => d.busnum() == *b && d.device_address() == *a,
            Selector::Auto => d.interfaces().any(|i| i.class() == 0xff) && d.class() != 9,
        })
        .filter(|d| serial.is_none_or(|s| d.serial_number() == Some(s)))
        .collect();
    match matches.as_slice() {
        [one] => Ok((*one).clone()),
        [] => {
            let seen: Vec<String> = all
                .iter()
                .filter(|d| d.class() != 9)
                .map(describe)
                .collect();
            let what = match sel {
                Selector::VidPid(v, p) => format!("{v:04x}:{p:04x}"),
                Selector::BusAddr(b, a) => format!("at bus {b} address {a}"),
                Selector::Auto => "with a vendor-specific interface".into(),
            };
            let serial = serial
                .map(|s| format!(" and serial {s}"))
                .unwrap_or_default();
            Err(anyhow!(
                "no USB device {what}{serial} (present: {}); is it plugged in and enumerated (`xferlab usb list`, dmesg)?",
                if seen.is_empty() { "none".into() } else { seen.join(", ") }
            ))
        }
        many => Err(anyhow!(
            "{} devices match ({}); pick one with -d BUS.ADDR or --serial",
            many.len(),
            many.iter()
                .map(|d| describe(d))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn usbfs_path(d: &DeviceInfo) -> String {
    format!("/dev/bus/usb/{:03}/{:03}", d.busnum(), d.device_address())
}

/// Opens the device, reads its active configuration and picks the pipes.
pub fn open(
    d: &DeviceInfo,
    req: PipeRequest,
) -> anyhow::Result<(nusb::Device, ConfigDesc, BulkPipes)> {
    let dev = d.open().wait().map_err(|e| match e.kind() {
        nusb::ErrorKind::PermissionDenied => anyhow!(errors::permission_denied(
            &usbfs_path(d),
            d.vendor_id(),
            d.product_id()
        )),
        nusb::ErrorKind::Disconnected | nusb::ErrorKind::NotFound => {
            went_away(d, "opening it; check the cable and dmesg")
        }
        _ => anyhow::Error::new(e).context(format!(
            "cannot open {} ({})",
            usbfs_path(d),
            describe(d)
        )),
    })?;
    let cfg = dev.active_configuration().map_err(|_| {
        anyhow!(
            "{} is not configured (no active configuration); is a driver or the gadget side still setting it up?",
            describe(d)
        )
    })?;
    let cfg = descriptor::parse_config(cfg.as_bytes())
        .with_context(|| format!("{}: bad configuration descriptor", describe(d)))?;
    let pipes = descriptor::find_bulk_pipes(&cfg, req).with_context(|| describe(d))?;
    Ok((dev, cfg, pipes))
}

/// The kernel driver bound to interface `n`, from sysfs.
pub fn interface_driver(d: &DeviceInfo, n: u8) -> Option<String> {
    let dir = sysfs_interface(d, n)?;
    std::fs::read_link(format!("/sys/bus/usb/devices/{dir}/driver"))
        .ok()
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
}

/// sysfs name of interface `n` of the active configuration (`1-1:1.0`).
pub fn sysfs_interface(d: &DeviceInfo, n: u8) -> Option<String> {
    let base = d.sysfs_path().file_name()?.to_string_lossy().into_owned();
    let cfg = std::fs::read_to_string(d.sysfs_path().join("bConfigurationValue")).ok()?;
    Some(format!("{base}:{}.{n}", cfg.trim()))
}

/// Claims the interface (detaching a kernel driver only when asked) and
/// selects the alternate setting.
pub fn claim(
    d: &DeviceInfo,
    dev: &nusb::Device,
    pipes: &BulkPipes,
    detach: bool,
) -> anyhow::Result<nusb::Interface> {
    let n = pipes.interface;
    let res = if detach {
        dev.detach_and_claim_interface(n).wait()
    } else {
        dev.claim_interface(n).wait()
    };
    let intf = res.map_err(|e| match e.kind() {
        nusb::ErrorKind::Busy => busy(d, n),
        nusb::ErrorKind::Disconnected => went_away(d, "claiming it"),
        _ => {
            anyhow::Error::new(e).context(format!("cannot claim interface {n} of {}", describe(d)))
        }
    })?;
    if pipes.alt != 0 {
        intf.set_alt_setting(pipes.alt).wait().with_context(|| {
            format!(
                "cannot select alternate setting {} of interface {n}",
                pipes.alt
            )
        })?;
    }
    Ok(intf)
}

/// Opens the device's usbfs node for URBs of our own and claims the
/// pipes' interface, detaching its kernel driver, with the alternate
/// setting selected; the same errors as [`open`] and [`claim`].
pub fn open_node(d: &DeviceInfo, pipes: &BulkPipes) -> anyhow::Result<super::usbfs::Node> {
    let path = usbfs_path(d);
    let mut node = super::usbfs::Node::open(&path).map_err(|e| match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => anyhow!(errors::permission_denied(
            &path,
            d.vendor_id(),
            d.product_id()
        )),
        Some(libc::ENOENT | libc::ENODEV) => went_away(d, "opening it; check the cable and dmesg"),
        _ => anyhow!("cannot open {path} ({}): {e}", describe(d)),
    })?;
    let n = pipes.interface;
    node.detach_and_claim(n)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EBUSY) => busy(d, n),
            Some(libc::ENODEV) => went_away(d, "claiming it"),
            _ => anyhow!("cannot claim interface {n} of {}: {e}", describe(d)),
        })?;
    if pipes.alt != 0 {
        node.set_interface(n, pipes.alt).map_err(|e| {
            anyhow!(
                "cannot select alternate setting {} of interface {n} of {}: {e}",
                pipes.alt,
                describe(d)
            )
        })?;
    }
    Ok(node)
}

/// The device vanished while we were `doing` something with it.
fn went_away(d: &DeviceInfo, doing: &str) -> anyhow::Error {
    anyhow!("{} went away while {doing}", describe(d))
}

/// Interface `n` is held by another driver or program: which, and how to free it.
fn busy(d: &DeviceInfo, n: u8) -> anyhow::Error {
    let intf_name = sysfs_interface(d, n).unwrap_or_else(|| format!("<interface {n}>"));
    anyhow!(errors::interface_busy(
        n,
        interface_driver(d, n).as_deref(),
        &intf_name
    ))
}
