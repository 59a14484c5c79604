//! The request/response pattern (`xferlab rr`), sans-IO: what a test asks
//! for ([`RrSpec`], defined in [`crate::spec::rr`]), the per-flow transaction bookkeeping ([`tracker`]),
//! per-interval transaction counts ([`meter`]), the result types
//! ([`report`]) and the few bytes on the wire ([`wire`]). Latency
//! histograms are [`crate::latency`]'s. The server's rate budget for
//! its answers is [`budget`]. The drivers in the `xferlab` crate
//! own the sockets.

pub mod budget;
pub mod meter;
pub mod report;
pub mod tracker;
pub mod wire;

// What an rr test asks for sits with the other test settings, below
// the pattern.
pub use crate::spec::rr::{limits, RrMode, RrSpec, RrSpecError, RrWait};

impl RrSpec {
    /// Bytes of one request on the wire.
    pub fn request_wire(&self) -> usize {
        match self.mode {
            RrMode::UdpRr => (self.request_size as usize).max(wire::UDP_HEADER_LEN),
            _ => self.request_size as usize,
        }
    }

    /// Bytes of one response on the wire.
    pub fn response_wire(&self) -> usize {
        match self.mode {
            RrMode::UdpRr => (self.response_size as usize).max(wire::UDP_HEADER_LEN),
            _ => self.response_size as usize,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Affinity, Pattern, TestSpec};

    #[test]
    fn defaults_are_valid_and_bad_values_name_their_flag() {
        for mode in [
            RrMode::TcpRr,
            RrMode::TcpCrr,
            RrMode::UdpRr,
            RrMode::QuicRr,
            RrMode::QuicCrr,
        ] {
            TestSpec::default_rr(mode).validate().unwrap();
        }
        // QUIC's modes run over QUIC, and quic-crr, a connection per
        // transaction, has one outstanding, as tcp-crr.
        assert_eq!(RrMode::QuicRr.transport(), crate::spec::Transport::Quic);
        let mut crr = TestSpec::default_rr(RrMode::QuicCrr);
        if let Pattern::Rr(r) = &mut crr.pattern {
            r.depth = 2;
        }
        assert!(crr.validate().unwrap_err().to_string().contains("quic-crr"));
        let mut wrong = TestSpec::default_rr(RrMode::QuicRr);
        wrong.transport = crate::spec::Transport::Tcp;
        assert!(wrong.validate().is_err());
        let bad = |f: &dyn Fn(&mut RrSpec)| {
            let mut s = TestSpec::default_rr(RrMode::TcpRr);
            if let Pattern::Rr(rr) = &mut s.pattern {
                f(rr);
            }
            s.validate().unwrap_err().to_string()
        };
        assert!(bad(&|r| r.flows = 0).contains("-F/--flows"));
        assert!(bad(&|r| r.depth = 0).contains("--depth"));
        assert!(bad(&|r| r.request_size = 0).contains("-r/--request-size"));
        assert!(bad(&|r| r.response_size = 1 << 30).contains("-s/--response-size"));
        assert!(bad(&|r| r.timeout_s = 0.0).contains("--timeout"));
        assert!(bad(&|r| r.drop_request = Some(3)).contains("--drop-request"));
        let mut s = TestSpec::default_rr(RrMode::TcpRr);
        s.parallel = 20;
        s.validate().unwrap();
        assert_eq!(s.flows().len(), 20);
        assert_eq!(TestSpec::default_rr(RrMode::TcpRr).flows().len(), 0);
    }

    #[test]
    fn udp_sizes_leave_room_for_the_header() {
        let r = RrSpec::new(RrMode::UdpRr);
        assert_eq!(r.request_wire(), wire::UDP_HEADER_LEN);
        assert_eq!(RrSpec::new(RrMode::TcpRr).request_wire(), 1);
    }

    #[test]
    fn auto_wait_reads_only_when_both_ends_share_a_cpu_over_loopback() {
        let pin = |c: Option<u32>, s: Option<u32>| Affinity {
            client: c,
            server: s,
            ..Affinity::default()
        };
        let same = pin(Some(1), Some(1));
        assert_eq!(RrWait::Auto.resolve(&same, true), RrWait::Read);
        assert_eq!(RrWait::Auto.resolve(&same, false), RrWait::Epoll);
        assert_eq!(
            RrWait::Auto.resolve(&pin(Some(0), Some(1)), true),
            RrWait::Epoll
        );
        assert_eq!(RrWait::Auto.resolve(&pin(None, None), true), RrWait::Epoll);
        assert_eq!(
            RrWait::Auto.resolve(&pin(Some(0), None), true),
            RrWait::Epoll
        );
        for w in [RrWait::Epoll, RrWait::Read, RrWait::Spin] {
            assert_eq!(w.resolve(&same, true), w);
        }
    }
}
