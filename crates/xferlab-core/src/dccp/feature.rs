//! Feature negotiation (RFC 4340 sec. 6): the features xferlab uses, their
//! current values at both ends, outstanding Change options, Confirms owed
//! to the peer, and server-priority / non-negotiable reconciliation.

use super::options::{FeatOp, Opt};
use super::packet::{PacketWriter, ResetCode};
use super::DccpError;

/// Features of sec. 6.4 (and their numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feature {
    Ccid = 1,
    AllowShortSeqnos = 2,
    SequenceWindow = 3,
    EcnIncapable = 4,
    AckRatio = 5,
    SendAckVector = 6,
    SendNdpCount = 7,
    MinCsCov = 8,
    CheckDataChecksum = 9,
    /// CCID3's Send Loss Event Rate (RFC 4342 sec. 8.4): whether the
    /// receiver sends the Loss Event Rate option. Linux's CCID3 asks for it
    /// Mandatory (its CCID3 reads no Loss Intervals option), so without it
    /// a kernel peer's handshake ended in Mandatory Error; xferlab's CCID3
    /// receiver always sends that option, so 1 is what it does anyway.
    SendLossEventRate = 192,
}

/// How many features [`Negotiator`] keeps.
const COUNT: usize = 10;

const ALL: [Feature; COUNT] = [
    Feature::Ccid,
    Feature::AllowShortSeqnos,
    Feature::SequenceWindow,
    Feature::EcnIncapable,
    Feature::AckRatio,
    Feature::SendAckVector,
    Feature::SendNdpCount,
    Feature::MinCsCov,
    Feature::CheckDataChecksum,
    Feature::SendLossEventRate,
];

impl Feature {
    pub fn from_num(n: u8) -> Option<Self> {
        match n {
            1..=9 => ALL.get(usize::from(n) - 1).copied(),
            192 => Some(Feature::SendLossEventRate),
            _ => None,
        }
    }
    /// Non-negotiable (sec. 6.3.2) rather than server-priority (6.3.1).
    pub fn is_nn(self) -> bool {
        matches!(self, Feature::SequenceWindow | Feature::AckRatio)
    }
    /// Initial value (sec. 6.4).
    pub fn default_value(self) -> u64 {
        match self {
            Feature::Ccid | Feature::AckRatio => 2,
            Feature::SequenceWindow => 100,
            _ => 0,
        }
    }
    fn nn_len(self) -> usize {
        if self == Feature::SequenceWindow {
            6
        } else {
            2
        }
    }
    /// Whether `v` is a value this feature may take (sec. 6.4, 7.5.2, 11.3).
    pub fn valid(self, v: u64) -> bool {
        match self {
            Feature::Ccid => u8::try_from(v).is_ok_and(|c| super::ccid::IMPLEMENTED.contains(&c)),
            Feature::SequenceWindow => (32..1 << 46).contains(&v),
            Feature::AckRatio => (1..=0xFFFF).contains(&v),
            Feature::MinCsCov => v <= 15,
            _ => v <= 1,
        }
    }
}

/// Where a feature lives, seen from this endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loc {
    Local = 0,
    Remote = 1,
}

/// A short list of one-byte values (a preference list) without allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct List {
    v: [u8; 8],
    n: u8,
}

impl List {
    pub fn of(vals: &[u8]) -> Self {
        let mut l = List::default();
        let n = vals.len().min(8);
        l.v[..n].copy_from_slice(&vals[..n]);
        l.n = n as u8;
        l
    }
    pub fn as_slice(&self) -> &[u8] {
        &self.v[..usize::from(self.n)]
    }
}

/// Server-priority reconciliation: the first value of the server's list
/// that the client's list also holds.
pub fn reconcile(server: &[u8], client: &[u8]) -> Option<u8> {
    server.iter().copied().find(|v| client.contains(v))
}

#[derive(Clone, Copy, Debug)]
struct Change {
    /// SP: our preference list; NN: the value in `nn`.
    list: List,
    nn: u64,
    mandatory: bool,
}

#[derive(Clone, Copy, Debug)]
enum Confirm {
    Empty,
    Sp { chosen: u8, list: List },
    Nn(u64),
}

/// Negotiation state of one endpoint.
#[derive(Clone, Debug)]
pub struct Negotiator {
    server: bool,
    values: [[u64; 2]; COUNT],
    prefs: [[List; 2]; COUNT],
    changes: [[Option<Change>; 2]; COUNT],
    confirms: [[Option<Confirm>; 2]; COUNT],
}

fn idx(f: Feature) -> usize {
    match f {
        Feature::SendLossEventRate => COUNT - 1,
        f => f as usize - 1,
    }
}

impl Negotiator {
    pub fn new(server: bool) -> Self {
        let mut prefs = [[List::default(); 2]; COUNT];
        for f in ALL {
            let p = match f {
                Feature::Ccid => List::of(&[2, 3]),
                Feature::MinCsCov => List::of(&[0]),
                Feature::AllowShortSeqnos | Feature::CheckDataChecksum => List::of(&[0]),
                Feature::SendLossEventRate => List::of(&[1, 0]),
                _ => List::of(&[0, 1]),
            };
            prefs[idx(f)] = [p, p];
        }
        Negotiator {
            server,
            values: ALL.map(|f| [f.default_value(); 2]),
            prefs,
            changes: [[None; 2]; COUNT],
            confirms: [[None; 2]; COUNT],
        }
    }

    /// The values this endpoint accepts for an SP feature, best first (as
    /// server, the order decides).
    pub fn set_prefs(&mut self, f: Feature, loc: Loc, list: &[u8]) {
        self.prefs[idx(f)][loc as usize] = List::of(list);
    }

    /// Starts negotiating an SP feature towards `list` (ours, best first).
    pub fn change_sp(&mut self, f: Feature, loc: Loc, list: &[u8], mandatory: bool) {
        self.prefs[idx(f)][loc as usize] = List::of(list);
        self.changes[idx(f)][loc as usize] = Some(Change {
            list: List::of(list),
            nn: 0,
            mandatory,
        });
    }

    /// Announces a new value for a non-negotiable feature located here.
    pub fn change_nn(&mut self, f: Feature, value: u64) {
        debug_assert!(f.is_nn() && f.valid(value));
        self.changes[idx(f)][Loc::Local as usize] = Some(Change {
            list: List::default(),
            nn: value,
            mandatory: false,
        });
    }

    pub fn value(&self, f: Feature, loc: Loc) -> u64 {
        self.values[idx(f)][loc as usize]
    }

    /// Whether a Change of ours still waits for its Confirm.
    pub fn changing(&self) -> bool {
        self.changes.iter().flatten().any(Option::is_some)
    }

    /// Bytes the pending options take (to keep room in a packet).
    pub fn wants_to_write(&self) -> bool {
        self.changing() || self.confirms.iter().flatten().any(Option::is_some)
    }

    /// Writes the outstanding Changes (kept until confirmed) and the owed
    /// Confirms (sent once; a lost one is re-earned by the peer's
    /// retransmitted Change).
    pub fn write(&mut self, w: &mut PacketWriter<'_>) -> Result<(), DccpError> {
        for f in ALL {
            for loc in [Loc::Local, Loc::Remote] {
                if let Some(c) = self.changes[idx(f)][loc as usize] {
                    let op = if loc == Loc::Local {
                        FeatOp::ChangeL
                    } else {
                        FeatOp::ChangeR
                    };
                    let nn = c.nn.to_be_bytes();
                    let value = if f.is_nn() {
                        &nn[8 - f.nn_len()..]
                    } else {
                        c.list.as_slice()
                    };
                    if c.mandatory {
                        w.option(&Opt::Mandatory)?;
                    }
                    w.option(&Opt::Feature {
                        op,
                        feature: f as u8,
                        value,
                    })?;
                }
                if let Some(c) = self.confirms[idx(f)][loc as usize].take() {
                    let op = if loc == Loc::Local {
                        FeatOp::ConfirmL
                    } else {
                        FeatOp::ConfirmR
                    };
                    let mut buf = [0u8; 9];
                    let value: &[u8] = match c {
                        Confirm::Empty => &[],
                        Confirm::Sp { chosen, list } => {
                            let l = list.as_slice();
                            buf[0] = chosen;
                            buf[1..=l.len()].copy_from_slice(l);
                            &buf[..=l.len()]
                        }
                        Confirm::Nn(v) => {
                            buf[1..].copy_from_slice(&v.to_be_bytes());
                            &buf[9 - f.nn_len()..]
                        }
                    };
                    w.option(&Opt::Feature {
                        op,
                        feature: f as u8,
                        value,
                    })?;
                }
            }
        }
        Ok(())
    }

    /// Handles one Change or Confirm from the peer; an error is the Reset
    /// code the connection must close with.
    pub fn handle(
        &mut self,
        op: FeatOp,
        feature: u8,
        value: &[u8],
        mandatory: bool,
    ) -> Result<(), ResetCode> {
        match op {
            // The peer's Change L is about a feature located at the peer.
            FeatOp::ChangeL => self.on_change(feature, Loc::Remote, value, mandatory),
            FeatOp::ChangeR => self.on_change(feature, Loc::Local, value, mandatory),
            FeatOp::ConfirmL => self.on_confirm(feature, Loc::Remote, value, mandatory),
            FeatOp::ConfirmR => self.on_confirm(feature, Loc::Local, value, mandatory),
        }
    }

    fn on_change(
        &mut self,
        num: u8,
        loc: Loc,
        value: &[u8],
        mandatory: bool,
    ) -> Result<(), ResetCode> {
        let refuse = |me: &mut Self, f: Option<Feature>| {
            if mandatory {
                return Err(ResetCode::MandatoryError);
            }
            // An unknown feature or value: an empty Confirm (sec. 6.6.7).
            if let Some(f) = f {
                me.confirms[idx(f)][loc as usize] = Some(Confirm::Empty);
            }
            Ok(())
        };
        let Some(f) = Feature::from_num(num) else {
            // Unknown features cannot be confirmed by us without an index;
            // non-mandatory ones are ignored.
            return if mandatory {
                Err(ResetCode::MandatoryError)
            } else {
                Ok(())
            };
        };
        let i = idx(f);
        if f.is_nn() {
            // Only the feature's location may change an NN feature.
            let v = value.iter().fold(0u64, |a, &b| a << 8 | u64::from(b));
            if loc != Loc::Remote || value.is_empty() || value.len() > 6 || !f.valid(v) {
                return refuse(self, Some(f));
            }
            self.values[i][loc as usize] = v;
            self.confirms[i][loc as usize] = Some(Confirm::Nn(v));
            return Ok(());
        }
        let ours = self.prefs[i][loc as usize];
        let peer: &[u8] = value;
        let chosen = if self.server {
            reconcile(ours.as_slice(), peer)
        } else {
            reconcile(peer, ours.as_slice())
        };
        match chosen.filter(|&v| f.valid(u64::from(v))) {
            Some(v) => {
                self.values[i][loc as usize] = u64::from(v);
                self.changes[i][loc as usize] = None;
                self.confirms[i][loc as usize] = Some(Confirm::Sp {
                    chosen: v,
                    list: ours,
                });
                Ok(())
            }
            None if mandatory => Err(ResetCode::MandatoryError),
            None => {
                let default = f.default_value() as u8;
                if ours.as_slice().contains(&default) {
                    // Keep the default and say so with an empty Confirm.
                    self.confirms[i][loc as usize] = Some(Confirm::Empty);
                    Ok(())
                } else {
                    Err(ResetCode::OptionError)
                }
            }
        }
    }

    fn on_confirm(
        &mut self,
        num: u8,
        loc: Loc,
        value: &[u8],
        mandatory: bool,
    ) -> Result<(), ResetCode> {
        let Some(f) = Feature::from_num(num) else {
            return Ok(());
        };
        let i = idx(f);
        // A Confirm for a feature we are not changing is ignored (6.6.2).
        let Some(c) = self.changes[i][loc as usize] else {
            return Ok(());
        };
        if value.is_empty() {
            // The peer did not understand: the value stays as it was.
            self.changes[i][loc as usize] = None;
            return if c.mandatory || mandatory {
                Err(ResetCode::MandatoryError)
            } else {
                Ok(())
            };
        }
        if f.is_nn() {
            let v = value.iter().fold(0u64, |a, &b| a << 8 | u64::from(b));
            if v != c.nn {
                return Err(ResetCode::OptionError);
            }
            self.values[i][loc as usize] = v;
            self.changes[i][loc as usize] = None;
            return Ok(());
        }
        let chosen = value[0];
        let peer = if value.len() > 1 { &value[1..] } else { value };
        let ours = c.list.as_slice();
        let expect = if self.server {
            reconcile(ours, peer)
        } else {
            reconcile(peer, ours)
        };
        if expect != Some(chosen) || !f.valid(u64::from(chosen)) {
            return Err(ResetCode::OptionError);
        }
        self.values[i][loc as usize] = u64::from(chosen);
        self.changes[i][loc as usize] = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dccp::checksum::Pseudo;
    use crate::dccp::options::Options;
    use crate::dccp::packet::{parse, Body, Header};
    use crate::dccp::Seq;

    /// Carries `from`'s options to `to` through a real packet.
    fn exchange(from: &mut Negotiator, to: &mut Negotiator) -> Result<(), ResetCode> {
        let h = Header {
            src_port: 1,
            dst_port: 2,
            ccval: 0,
            cscov: 0,
            long: true,
            seq: Seq::new(1),
            body: Body::Ack { ack: Seq::new(1) },
        };
        let mut buf = [0u8; 1500];
        let mut w = PacketWriter::new(&mut buf, &h).unwrap();
        from.write(&mut w).unwrap();
        let n = w.finish(&[], &Pseudo::None).unwrap();
        let p = parse(&buf[..n]).unwrap();
        for o in Options::new(p.options) {
            if let (Opt::Feature { op, feature, value }, m) = o.unwrap() {
                to.handle(op, feature, value, m)?;
            }
        }
        Ok(())
    }

    #[test]
    fn server_priority_picks_the_servers_first_shared_value() {
        assert_eq!(reconcile(&[3, 2], &[2, 3]), Some(3));
        assert_eq!(reconcile(&[2], &[3]), None);
        let mut c = Negotiator::new(false);
        let mut s = Negotiator::new(true);
        s.set_prefs(Feature::Ccid, Loc::Remote, &[3, 2]);
        c.change_sp(Feature::Ccid, Loc::Local, &[2, 3], false);
        c.change_sp(Feature::SendAckVector, Loc::Remote, &[1], false);
        c.change_nn(Feature::SequenceWindow, 5000);
        exchange(&mut c, &mut s).unwrap();
        assert_eq!(s.value(Feature::Ccid, Loc::Remote), 3);
        assert_eq!(s.value(Feature::SendAckVector, Loc::Local), 1);
        assert_eq!(s.value(Feature::SequenceWindow, Loc::Remote), 5000);
        assert!(c.changing());
        exchange(&mut s, &mut c).unwrap();
        assert!(!c.changing(), "all confirmed");
        assert_eq!(c.value(Feature::Ccid, Loc::Local), 3);
        assert_eq!(c.value(Feature::SendAckVector, Loc::Remote), 1);
        assert_eq!(c.value(Feature::SequenceWindow, Loc::Local), 5000);
    }

    /// What Linux's CCID3 server sends (net/dccp/feat.c,
    /// ccid3_dependencies): Send Loss Event Rate on, Mandatory, for both
    /// half-connections.
    #[test]
    fn linux_ccid3s_mandatory_send_loss_event_rate_is_agreed() {
        let mut c = Negotiator::new(false);
        for op in [FeatOp::ChangeL, FeatOp::ChangeR] {
            assert_eq!(c.handle(op, 192, &[1], true), Ok(()), "{op:?}");
        }
        assert_eq!(c.value(Feature::SendLossEventRate, Loc::Local), 1);
        assert_eq!(c.value(Feature::SendLossEventRate, Loc::Remote), 1);
        // Another CCID-specific feature stays unknown: Mandatory resets.
        assert_eq!(
            c.handle(FeatOp::ChangeL, 193, &[1], true),
            Err(ResetCode::MandatoryError)
        );
    }

    #[test]
    fn a_refused_mandatory_ccid_is_a_mandatory_error() {
        let mut c = Negotiator::new(false);
        let mut s = Negotiator::new(true);
        s.set_prefs(Feature::Ccid, Loc::Remote, &[2]);
        c.change_sp(Feature::Ccid, Loc::Local, &[3], true);
        assert_eq!(exchange(&mut c, &mut s), Err(ResetCode::MandatoryError));
    }

    #[test]
    fn a_refused_optional_ccid_falls_back_or_is_an_option_error() {
        // Default CCID 2 acceptable: empty Confirm, value stays 2.
        let mut c = Negotiator::new(false);
        let mut s = Negotiator::new(true);
        s.set_prefs(Feature::Ccid, Loc::Remote, &[2]);
        c.change_sp(Feature::Ccid, Loc::Local, &[3], false);
        exchange(&mut c, &mut s).unwrap();
        exchange(&mut s, &mut c).unwrap();
        assert_eq!(c.value(Feature::Ccid, Loc::Local), 2);
        assert!(!c.changing());
        // Server accepts only 3, client only 2: nothing to fall back to.
        let mut c = Negotiator::new(false);
        let mut s = Negotiator::new(true);
        s.set_prefs(Feature::Ccid, Loc::Remote, &[3]);
        c.change_sp(Feature::Ccid, Loc::Local, &[2], false);
        assert_eq!(exchange(&mut c, &mut s), Err(ResetCode::OptionError));
    }

    #[test]
    fn bad_confirms_and_nn_rules() {
        let mut c = Negotiator::new(false);
        c.change_sp(Feature::Ccid, Loc::Local, &[2, 3], false);
        // Server claims to pick 3 while its own list prefers 2.
        assert_eq!(
            c.handle(FeatOp::ConfirmR, 1, &[3, 2, 3], false),
            Err(ResetCode::OptionError)
        );
        // NN features cannot be changed by the other side (Change R).
        let mut s = Negotiator::new(true);
        s.handle(FeatOp::ChangeR, 3, &[0, 0, 0, 0, 1, 0], false)
            .unwrap();
        assert_eq!(s.value(Feature::SequenceWindow, Loc::Local), 100);
        // An out-of-range Ack Ratio is refused.
        assert_eq!(
            s.handle(FeatOp::ChangeL, 5, &[0, 0], true),
            Err(ResetCode::MandatoryError)
        );
        // Unknown mandatory feature.
        assert_eq!(
            s.handle(FeatOp::ChangeL, 77, &[1], true),
            Err(ResetCode::MandatoryError)
        );
        s.handle(FeatOp::ChangeL, 77, &[1], false).unwrap();
    }
}
