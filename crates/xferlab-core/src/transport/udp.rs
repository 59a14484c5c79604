//! UDP's model: datagrams at a rate, each with a sequence number and a
//! send time; its result section is the datagram counters (`udp`).

use super::{Carrier, Iperf3Name, TransportModel};
use crate::spec::limits::{MAX_BATCH, MAX_DATAGRAM, MIN_DATAGRAM};
use crate::spec::{Knobs, RecvMode};

pub struct Udp;

impl TransportModel for Udp {
    fn label(&self) -> &'static str {
        "UDP"
    }

    fn carrier(&self) -> Carrier {
        Carrier::Datagrams
    }

    fn check_knobs(&self, k: &Knobs) -> Result<(), String> {
        if !(MIN_DATAGRAM..=MAX_DATAGRAM).contains(&k.size) {
            return Err(format!(
                "-l/--length: a UDP datagram must be between {MIN_DATAGRAM} and {MAX_DATAGRAM} bytes (got {})",
                k.size
            ));
        }
        if k.batch == 0 || k.batch > MAX_BATCH {
            return Err(format!(
                "--batch must be between 1 and {MAX_BATCH} datagrams (got {})",
                k.batch
            ));
        }
        if k.recv_mode == RecvMode::Discard {
            return Err("--skip-rx-copy is for TCP: every UDP datagram's header is read".into());
        }
        if k.congestion.is_some() || k.mss.is_some() || k.nodelay || k.max_pacing_rate.is_some() {
            return Err("-C, -M, -N and --fq-rate are TCP options; pace UDP with -b".into());
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
