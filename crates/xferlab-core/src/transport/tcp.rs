//! TCP's model: a byte stream whose senders read TCP_INFO every interval.

use super::{check_stream_knobs, Carrier, Iperf3Name, TransportModel};
use crate::spec::{Knobs, SpecError};

pub struct Tcp;

impl TransportModel for Tcp {
    fn label(&self) -> &'static str {
        "TCP"
    }

    fn carrier(&self) -> Carrier {
        Carrier::Bytes
    }

    fn tcp_info(&self) -> bool {
        true
    }

    fn check_knobs(&self, knobs: &Knobs) -> Result<(), SpecError> {
        check_stream_knobs(knobs)
    }

    fn iperf3(&self) -> Option<Iperf3Name> {
        Some(Iperf3Name::default())
    }
}
