//! An endpoint's sequence-number variables (ISS, ISR, GSS, GSR, GAR) and
//! the sequence and acknowledgement validity windows built on them (RFC
//! 4340 sec. 7.5).

use super::packet::PacketType;
use super::seq::Seq;

/// Default Sequence Window (sec. 7.5.2).
pub const DEFAULT_WINDOW: u64 = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqState {
    /// Initial and greatest sequence number sent.
    pub iss: Seq,
    pub gss: Seq,
    /// Initial and greatest sequence number received (valid only once a
    /// packet arrived).
    pub isr: Seq,
    pub gsr: Seq,
    /// Greatest acknowledgement number received.
    pub gar: Seq,
    /// Our Sequence Window (feature located here: bounds what we accept).
    pub w_local: u64,
    /// The peer's Sequence Window (bounds acknowledgements we accept).
    pub w_remote: u64,
}

impl SeqState {
    pub fn new(iss: Seq) -> Self {
        SeqState {
            iss,
            gss: iss,
            isr: Seq::default(),
            gsr: Seq::default(),
            gar: iss,
            w_local: DEFAULT_WINDOW,
            w_remote: DEFAULT_WINDOW,
        }
    }

    /// The first packet from the peer sets ISR and GSR.
    pub fn set_isr(&mut self, isr: Seq) {
        self.isr = isr;
        self.gsr = isr;
    }

    /// The next sequence number to send.
    pub fn next_seq(&mut self) -> Seq {
        self.gss = self.gss.add(1);
        self.gss
    }

    pub fn swl(&self) -> Seq {
        let lo = self.gsr.add(1).sub(self.w_local / 4);
        // max(lo, ISR), circularly: before ISR is never valid.
        if lo.before(self.isr) {
            self.isr
        } else {
            lo
        }
    }
    pub fn swh(&self) -> Seq {
        self.gsr.add(1).add(self.w_local * 3 / 4)
    }
    pub fn awl(&self) -> Seq {
        let lo = self.gss.add(1).sub(self.w_remote);
        if lo.before(self.iss) {
            self.iss
        } else {
            lo
        }
    }
    pub fn awh(&self) -> Seq {
        self.gss
    }

    /// The table of sec. 7.5.3: whether a packet of type `t` with these
    /// numbers is sequence- and acknowledgement-valid.
    pub fn valid(&self, t: PacketType, seq: Seq, ack: Option<Seq>) -> bool {
        use PacketType::*;
        let ack_ok = |lo: Seq| ack.is_none_or(|a| a.within(lo, self.awh()));
        match t {
            Data | Ack | DataAck => seq.within(self.swl(), self.swh()) && ack_ok(self.awl()),
            CloseReq | Close | Reset => {
                seq.after(self.gsr) && seq.within(self.swl(), self.swh()) && ack_ok(self.gar)
            }
            Request | Response | Sync | SyncAck => {
                // "SWL <= seqno": no upper bound (half the number space).
                seq.dist(self.swl()) >= 0 && ack_ok(self.awl())
            }
        }
    }

    /// Accounts a valid packet: GSR and GAR move forward only.
    pub fn on_valid(&mut self, seq: Seq, ack: Option<Seq>) {
        self.gsr = self.gsr.max(seq);
        if let Some(a) = ack {
            self.gar = self.gar.max(a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> SeqState {
        let mut s = SeqState::new(Seq::new(1000));
        s.set_isr(Seq::new(5000));
        s.gsr = Seq::new(5400);
        s.gss = Seq::new(1300);
        s.gar = Seq::new(1250);
        s
    }

    #[test]
    fn windows_follow_sec_7_5_1() {
        let s = state();
        assert_eq!(s.swl(), Seq::new(5401 - 25));
        assert_eq!(s.swh(), Seq::new(5401 + 75));
        assert_eq!(s.awl(), Seq::new(1301 - 100));
        assert_eq!(s.awh(), Seq::new(1300));
        let mut young = state();
        young.gsr = Seq::new(5003);
        young.gss = Seq::new(1010);
        assert_eq!(young.swl(), Seq::new(5000), "never below ISR");
        assert_eq!(young.awl(), Seq::new(1000), "never below ISS");
    }

    #[test]
    fn validity_per_packet_type() {
        let s = state();
        use PacketType::*;
        let ok_ack = Some(Seq::new(1290));
        assert!(s.valid(Data, Seq::new(5376), None));
        assert!(!s.valid(Data, Seq::new(5375), None));
        assert!(s.valid(DataAck, Seq::new(5476), ok_ack));
        assert!(!s.valid(DataAck, Seq::new(5477), ok_ack));
        assert!(
            !s.valid(Ack, Seq::new(5401), Some(Seq::new(1301))),
            "acks unsent"
        );
        assert!(!s.valid(Ack, Seq::new(5401), Some(Seq::new(1200))));
        // Close needs seq > GSR and ack >= GAR.
        assert!(!s.valid(Close, Seq::new(5400), ok_ack));
        assert!(s.valid(Close, Seq::new(5401), ok_ack));
        assert!(!s.valid(Reset, Seq::new(5401), Some(Seq::new(1249))));
        // Sync has no upper sequence bound.
        assert!(s.valid(Sync, Seq::new(9_000_000), ok_ack));
        assert!(!s.valid(Sync, Seq::new(5000), ok_ack));
    }

    #[test]
    fn windows_wrap() {
        let mut s = SeqState::new(Seq::new((1 << 48) - 10));
        s.set_isr(Seq::new((1 << 48) - 5));
        s.gss = Seq::new(20);
        assert!(s.valid(PacketType::Ack, Seq::new(3), Some(Seq::new(2))));
        assert!(s.valid(PacketType::Ack, Seq::new((1 << 48) - 4), Some(Seq::new(20))));
    }
}
