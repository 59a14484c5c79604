//! UDP's model: datagrams at a rate, each with a sequence number and a
//! send time; its result section is the datagram counters (`udp`).

use super::{Carrier, Iperf3Name, TransportModel};
use crate::spec::limits::{MAX_BATCH, MAX_DATAGRAM, MIN_DATAGRAM};
use crate::spec::{Knobs, RecvMode, SendMode, SpecError};

pub struct Udp;

impl TransportModel for Udp {
    fn label(&self) -> &'static str {
        "UDP"
    }

    fn carrier(&self) -> Carrier {
        Carrier::Datagrams
    }

    fn check_knobs(&self, k: &Knobs) -> Result<(), SpecError> {
        if !(MIN_DATAGRAM..=MAX_DATAGRAM).contains(&k.size) {
            return Err(SpecError::DatagramLength(k.size));
        }
        if k.batch == 0 || k.batch > MAX_BATCH {
            return Err(SpecError::Batch(k.batch));
        }
        if k.recv_mode == RecvMode::Discard {
            return Err(SpecError::SkipRxCopyOnUdp);
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
            return Err(SpecError::TcpOptionsOnUdp);
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
