//! UDP's model: datagrams at a rate, each with a sequence number and a
//! send time; its result section is the datagram counters (`udp`).

use super::{Carrier, Iperf3Name, TransportModel};
use crate::knobs::limits::{MAX_BATCH, MAX_DATAGRAM, MIN_DATAGRAM};
use crate::knobs::{KnobError, Knobs, RecvMode, RxStamps, SendMode};

pub struct Udp;

impl TransportModel for Udp {
    fn label(&self) -> &'static str {
        "UDP"
    }

    fn carrier(&self) -> Carrier {
        Carrier::Datagrams
    }

    fn check_knobs(&self, k: &Knobs) -> Result<(), KnobError> {
        if !(MIN_DATAGRAM..=MAX_DATAGRAM).contains(&k.size) {
            return Err(KnobError::DatagramLength(k.size));
        }
        if k.batch == 0 || k.batch > MAX_BATCH {
            return Err(KnobError::Batch(k.batch));
        }
        if k.recv_mode == RecvMode::Discard {
            return Err(KnobError::SkipRxCopyOnUdp);
        }
        if k.congestion.is_some()
            || k.mss.is_some()
            || k.nodelay
            || k.max_pacing_rate.is_some()
            || k.send_mode != SendMode::Copy
            || k.recv_mode == RecvMode::Zerocopy
            || k.read_size.is_some()
            || k.write_size.is_some()
            || k.rcvlowat.is_some()
            || k.read_fill.is_some()
        {
            return Err(KnobError::TcpOptionsOnUdp);
        }
        Ok(())
    }

    fn iperf3(&self) -> Option<Iperf3Name> {
        Some(Iperf3Name {
            udp: true,
            mptcp: false,
        })
    }
}

/// Where a UDP receiver with these knobs takes arrival times from:
/// `--rx-stamps` if given, else the kernel's stamp on a paced flow and
/// the receive call's clock on an unpaced one (`-b 0`).
///
/// A receiver that napped (it sleeps when its queue runs dry, see the
/// binary's `transport::datagram`) would see a paced flow's datagrams
/// arrive in clumps up to a nap long; the kernel's stamp keeps its jitter
/// and delay figures to the path. An unpaced flow keeps the queue full
/// most of the time, and the receiver's naps are then about as long as
/// one call's worth of datagrams takes to arrive (32 at 64 B: about 30
/// us at 1.1M/s), so the clock read per call is off by about that: the
/// app-level arrival iperf3 reports. The stamp is not
/// free: once any socket asks for it the kernel stamps every packet the
/// host receives, on the CPU of the receive path, which on loopback is
/// the sender's. Measured on an Intel Xeon (family 6 model 167, 2 vCPUs,
/// Linux 6.18, 2026-11-28), 64-byte datagrams, five interleaved runs of
/// each: the bare loops of `crates/xferlab/examples/udp_floor.rs` (`64
/// 1.5` against `64 1.5 stamps`) did 1.15-1.26M datagrams/s without the
/// stamp and 1.07-1.14M with it; `stream -u -b 0 -l 64 -t 2` did
/// 1.20-1.27M (median 1.23M) with `read` and 1.04-1.16M (median 1.12M)
/// with `--rx-stamps kernel`.
pub fn rx_stamps(k: &Knobs) -> RxStamps {
    match (k.rx_stamps, k.rate) {
        (Some(s), _) => s,
        (None, Some(_)) => RxStamps::Kernel,
        (None, None) => RxStamps::Read,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paced_flows_take_the_kernels_stamp_and_unpaced_ones_the_calls_clock() {
        let mut k = Knobs {
            size: 64,
            batch: 32,
            ..Knobs::default()
        };
        assert_eq!(rx_stamps(&k), RxStamps::Read, "unpaced");
        k.rate = Some(1_000_000);
        assert_eq!(rx_stamps(&k), RxStamps::Kernel, "paced");
        k.rx_stamps = Some(RxStamps::Read);
        assert_eq!(rx_stamps(&k), RxStamps::Read, "asked for, paced");
        k.rate = None;
        k.rx_stamps = Some(RxStamps::Kernel);
        assert_eq!(rx_stamps(&k), RxStamps::Kernel, "asked for, unpaced");
        assert_eq!(Udp.check_knobs(&k), Ok(()));
    }

    #[test]
    fn only_udp_takes_rx_stamps() {
        use crate::spec::{TestSpec, Transport};
        for t in [Transport::Tcp, Transport::Mptcp, Transport::Dccp] {
            let mut spec = TestSpec::default_stream();
            spec.transport = t;
            if t == Transport::Dccp {
                spec.knobs.size = 1000;
            }
            assert_eq!(spec.validate(), Ok(()), "{t:?} without it");
            spec.knobs.rx_stamps = Some(RxStamps::Kernel);
            let e = spec.validate().unwrap_err().to_string();
            assert!(e.contains("--rx-stamps"), "{t:?}: {e}");
        }
        let mut rr = TestSpec::default_rr(crate::rr::RrMode::TcpRr);
        rr.knobs.rx_stamps = Some(RxStamps::Read);
        assert!(rr
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--rx-stamps"));
    }
}
