//! What a `usb net` run will be, before any device is touched or once
//! its descriptors are read: the request's checks, the coalescer's limits,
//! the IN transfer size and the transfers in flight per direction.

use std::time::Duration;

use xferlab_core::usb::net::report::{DepthFrom, NetDepth};
use xferlab_core::usb::net::{default_depth, BusSpeed, Encap, Limits, NtbParams, MAX_DEPTH};

use super::{LinkError, NetRequest};
use crate::usb::tap::FRAME_MAX;

/// A request that cannot run: the one line printed (exit 1, as before
/// the split).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error("-Q must be 1 to {MAX_DEPTH} transfers in flight (got {0})")]
    Depth(usize),
    #[error("-t/--time must be a positive duration (got {0})")]
    Time(f64),
}

pub fn check(a: &NetRequest) -> Result<(), PlanError> {
    a.link.check()?;
    if let Some(q) = a.depth.filter(|&q| q == 0 || q > MAX_DEPTH) {
        return Err(PlanError::Depth(q));
    }
    if let Some(t) = a.time.filter(|t| !(t.is_finite() && *t > 0.0)) {
        return Err(PlanError::Time(t));
    }
    Ok(())
}

/// The OUT direction's coalescing limits.
pub fn limits(a: &NetRequest) -> Limits {
    Limits {
        max_frames: if a.encap == Encap::Ecm {
            1
        } else {
            a.link.frames_per_transfer
        },
        max_transfer: match (a.encap, a.link.max_transfer) {
            (Encap::Ecm, _) => FRAME_MAX,
            (_, Some(m)) => m as usize,
            // f_eem's OUT requests are sized for one frame (u_ether: MTU +
            // header + 20, rounded up to packets: 1536 B at MTU 1500); a
            // longer transfer is split across requests and f_eem drops the
            // pieces (seen: TCP at 0.04 MB/s with 9 KB transfers). Frames
            // that fit together (ACKs) still share a transfer.
            (Encap::Eem, None) => 1536,
            // f_ncm's dwNtbOutMaxSize (GET_NTB_PARAMETERS is not asked).
            (Encap::Ncm, None) => NtbParams::LINUX_GADGET.max_size,
        },
        timeout: Duration::from_micros(a.link.coalesce_us),
    }
}

/// IN transfers: whole packets, room for the largest the device sends.
pub fn rx_size(encap: Encap, max_packet: usize) -> usize {
    match encap {
        Encap::Ecm => FRAME_MAX.div_ceil(max_packet) * max_packet,
        Encap::Eem | Encap::Ncm => 16384,
    }
}

/// Transfers in flight per direction: `-Q` for both, or by the device's
/// speed and each direction's transfer size (the core's `default_depth`).
pub fn depth(
    a: &NetRequest,
    speed: Option<nusb::Speed>,
    out_bytes: usize,
    rx_size: usize,
) -> NetDepth {
    if let Some(q) = a.depth {
        return NetDepth {
            out: q as u64,
            inn: q as u64,
            from: DepthFrom::Flag,
        };
    }
    // IN transfers are sized for the largest the device may send, but the
    // kernel's f_ecm and f_eem send one frame each: the IN depth counts
    // frames for them, as usbnet's rx_qlen counts its hard_mtu URBs.
    let in_bytes = match a.encap {
        Encap::Ecm | Encap::Eem => FRAME_MAX,
        Encap::Ncm => rx_size,
    };
    let speed = match speed {
        Some(nusb::Speed::Low | nusb::Speed::Full) => BusSpeed::LowFull,
        Some(nusb::Speed::High) | None => BusSpeed::High,
        Some(_) => BusSpeed::Super,
    };
    NetDepth {
        out: default_depth(speed, out_bytes) as u64,
        inn: default_depth(speed, in_bytes) as u64,
        from: DepthFrom::TwiceUsbnetQueueMemory,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::Format;
    use crate::usb::net::LinkRequest;
    use crate::usb::ReportTo;

    fn request(encap: Encap, depth: Option<usize>) -> NetRequest {
        NetRequest {
            device: "1.2".into(),
            encap,
            depth,
            link: LinkRequest {
                frames_per_transfer: 1,
                coalesce_us: 100,
                max_transfer: None,
                crc: false,
                tap: "xl0".into(),
            },
            time: None,
            interval: 1.0,
            report: ReportTo {
                format: Format::Human,
                output: None,
                title: None,
            },
        }
    }

    /// The depths the lab VM checks at high speed (twice usbnet's queue
    /// memory, by each direction's transfer size), and -Q for both.
    #[test]
    fn depth_is_twice_usbnets_queue_or_the_flag() {
        for (encap, want) in [
            (Encap::Ecm, (120, 120)),
            (Encap::Eem, (118, 120)),
            (Encap::Ncm, (11, 11)),
        ] {
            let a = request(encap, None);
            let rx = rx_size(encap, 512);
            let d = depth(&a, Some(nusb::Speed::High), limits(&a).max_transfer, rx);
            assert_eq!((d.out, d.inn), want, "{encap:?}");
            assert_eq!(d.from, DepthFrom::TwiceUsbnetQueueMemory);
        }
        let a = request(Encap::Ecm, Some(8));
        let d = depth(&a, Some(nusb::Speed::High), 1518, 1536);
        assert_eq!((d.out, d.inn, d.from), (8, 8, DepthFrom::Flag));
    }

    #[test]
    fn out_of_range_settings_are_refused() {
        assert!(matches!(
            check(&request(Encap::Ecm, Some(0))),
            Err(PlanError::Depth(0))
        ));
        let mut a = request(Encap::Ecm, None);
        a.time = Some(-1.0);
        assert!(matches!(check(&a), Err(PlanError::Time(_))));
        assert!(check(&request(Encap::Ncm, Some(MAX_DEPTH))).is_ok());
    }
}
