//! `usb gadget`'s checks, before anything is created: the arguments
//! (exit 2, each message names its flag), the VID:PID to announce, and
//! root (exit 1). What needs the system (configfs, the UDC, a free name)
//! is checked by [`super::setup`], which is the first to touch it.

use super::{GadgetFunction, GadgetRequest, GadgetVia};
use crate::usb::Fail;

/// What the checks settled.
pub struct Plan {
    /// VID, PID.
    pub id: (u16, u16),
}

pub fn check(a: &GadgetRequest) -> Result<Plan, Fail> {
    if a.size == 0 || a.size > 1 << 20 {
        return Err(Fail::usage(format!(
            "-l/--size must be 1 byte to 1M per request (got {})",
            a.size
        )));
    }
    if a.queue == 0 || a.queue > 256 {
        return Err(Fail::usage(format!(
            "--queue must be 1 to 256 requests (got {})",
            a.queue
        )));
    }
    if a.name.is_empty() || a.name.contains(['/', '.', ' ']) {
        return Err(Fail::usage(
            "--name must be a plain name (no '/', '.' or spaces)",
        ));
    }
    if a.qmult.is_some() && a.function.net_kind().is_none() {
        return Err(Fail::usage("--qmult is for --function ecm|eem|ncm"));
    }
    match (a.function, a.encap) {
        (GadgetFunction::Net, None) => {
            return Err(Fail::usage("--function net needs --encap ecm|eem|ncm"));
        }
        (GadgetFunction::Net, Some(_)) => a.link.check().map_err(Fail::usage)?,
        (_, Some(_)) => return Err(Fail::usage("--encap is for --function net")),
        (_, None) => {}
    }
    if a.via == GadgetVia::RawGadget && a.function != GadgetFunction::Net {
        return Err(Fail::usage(
            "--via raw-gadget is for --function net (xferlab's own network link)",
        ));
    }
    let id = match &a.id {
        None => default_id(a.function),
        Some(s) => crate::usb::device::parse_vid_pid(s).ok_or_else(|| {
            Fail::usage(format!(
                "--id {s}: VID:PID must be two hex numbers, e.g. 1d6b:0104"
            ))
        })?,
    };
    if !crate::sys::process::is_root() {
        return Err(Fail::run(
            "setting up a gadget needs root (configfs, mount); run it with sudo",
        ));
    }
    Ok(Plan { id })
}

fn default_id(f: GadgetFunction) -> (u16, u16) {
    match f {
        GadgetFunction::Ffs | GadgetFunction::Cbr | GadgetFunction::Net => (0x1d6b, 0x0104),
        GadgetFunction::Sourcesink => (0x0525, 0xa4a0),
        // g_ether's NetChip ID: the host binds its class driver by class anyway.
        GadgetFunction::Ecm | GadgetFunction::Eem | GadgetFunction::Ncm => (0x0525, 0xa4a1),
    }
}
