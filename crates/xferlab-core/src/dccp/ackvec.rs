//! Ack Vectors (RFC 4340 sec. 11.4): the receiver's history of which
//! packets arrived (and which were ECN-marked), its run-length encoding
//! into Ack Vector cells, and decoding cells back into runs.

use std::collections::VecDeque;

use super::seq::Seq;

/// The state of one packet in an Ack Vector (sec. 11.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Received = 0,
    ReceivedEcnMarked = 1,
    /// State 2 is reserved; decoders treat it as not received.
    NotReceived = 3,
}

impl State {
    fn from_bits(b: u8) -> Self {
        match b & 3 {
            0 => State::Received,
            1 => State::ReceivedEcnMarked,
            _ => State::NotReceived,
        }
    }
}

/// Most packets one cell describes (a 6-bit run length of 63 means 64).
const MAX_RUN: usize = 64;

/// One decoded run: `len` packets ending at `last` (counting down from
/// `last`, so the run is `last - len + 1 ..= last`), all in `state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub last: Seq,
    pub len: u64,
    pub state: State,
}

impl Run {
    pub fn first(&self) -> Seq {
        self.last.sub(self.len - 1)
    }
    pub fn contains(&self, s: Seq) -> bool {
        s.within(self.first(), self.last)
    }
}

/// Decodes the cells of an Ack Vector acknowledging `ack` (the packet's
/// acknowledgement number is the newest packet the first cell describes).
#[derive(Clone, Debug)]
pub struct Runs<'a> {
    next: Seq,
    cells: std::slice::Iter<'a, u8>,
}

impl<'a> Runs<'a> {
    pub fn new(ack: Seq, cells: &'a [u8]) -> Self {
        Runs {
            next: ack,
            cells: cells.iter(),
        }
    }
}

impl Iterator for Runs<'_> {
    type Item = Run;
    fn next(&mut self) -> Option<Run> {
        let &c = self.cells.next()?;
        let len = u64::from(c & 0x3F) + 1;
        let run = Run {
            last: self.next,
            len,
            state: State::from_bits(c >> 6),
        };
        self.next = self.next.sub(len);
        Some(run)
    }
}

/// What a receiver keeps to build Ack Vectors: runs of packet states from
/// the newest received packet (`head`) back, bounded to `capacity`
/// packets. Kept run-length encoded like the cells themselves, so an
/// in-order arrival is O(1) and an Ack Vector is a copy of at most 253
/// runs, however long the history (a per-state list cost one pass over
/// ~cwnd entries per acknowledgement).
#[derive(Clone, Debug)]
pub struct RecvHistory {
    head: Option<Seq>,
    /// (state, packets 1..=64), newest first; the first run ends at head.
    runs: VecDeque<(State, u8)>,
    /// Packets the runs cover.
    total: u64,
    capacity: u64,
}

impl RecvHistory {
    pub fn new(capacity: usize) -> Self {
        RecvHistory {
            head: None,
            runs: VecDeque::new(),
            total: 0,
            capacity: capacity.max(1) as u64,
        }
    }

    /// The newest sequence number received.
    pub fn head(&self) -> Option<Seq> {
        self.head
    }

    /// Packets the history describes.
    pub fn len(&self) -> u64 {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Whether `s` was already recorded as received (a duplicate).
    pub fn received(&self, s: Seq) -> bool {
        self.get(s).is_some_and(|st| st != State::NotReceived)
    }

    /// The run holding offset `i` back from head, and the run's first
    /// (newest) offset.
    fn find(&self, i: u64) -> Option<(usize, u64)> {
        let mut start = 0;
        for (k, &(_, len)) in self.runs.iter().enumerate() {
            if i < start + u64::from(len) {
                return Some((k, start));
            }
            start += u64::from(len);
        }
        None
    }

    pub fn get(&self, s: Seq) -> Option<State> {
        let i = u64::try_from(self.head?.dist(s)).ok()?;
        self.find(i).map(|(k, _)| self.runs[k].0)
    }

    fn push_newest(&mut self, st: State, mut n: u64) {
        self.total += n;
        while n > 0 {
            match self.runs.front_mut() {
                Some((s, len)) if *s == st && usize::from(*len) < MAX_RUN => {
                    let k = n.min((MAX_RUN - usize::from(*len)) as u64);
                    *len += k as u8;
                    n -= k;
                }
                _ => {
                    let k = n.min(MAX_RUN as u64);
                    self.runs.push_front((st, k as u8));
                    n -= k;
                }
            }
        }
    }

    fn trim_to(&mut self, keep: u64) {
        while self.total > keep {
            let excess = self.total - keep;
            let Some(back) = self.runs.back_mut() else {
                break;
            };
            if u64::from(back.1) <= excess {
                self.total -= u64::from(back.1);
                self.runs.pop_back();
            } else {
                back.1 -= excess as u8;
                self.total -= excess;
            }
        }
    }

    /// Records the arrival of packet `s`.
    pub fn record(&mut self, s: Seq, ecn_marked: bool) {
        let st = if ecn_marked {
            State::ReceivedEcnMarked
        } else {
            State::Received
        };
        let Some(head) = self.head else {
            self.head = Some(s);
            self.push_newest(st, 1);
            return;
        };
        let d = s.dist(head);
        if d > 0 {
            let gap = (d as u64 - 1).min(self.capacity);
            self.push_newest(State::NotReceived, gap);
            self.push_newest(st, 1);
            self.head = Some(s);
            self.trim_to(self.capacity);
            return;
        }
        // A late packet: split the not-received run that holds it.
        let i = d.unsigned_abs();
        let Some((k, start)) = self.find(i) else {
            return;
        };
        let (old, len) = self.runs[k];
        if old != State::NotReceived {
            return;
        }
        let newer = (i - start) as u8;
        let older = len - newer - 1;
        self.runs.remove(k);
        for (state, n) in [
            (State::NotReceived, older),
            (st, 1),
            (State::NotReceived, newer),
        ] {
            if n > 0 {
                self.runs.insert(k, (state, n));
            }
        }
    }

    /// Forgets everything at or before `s` (the peer acknowledged an Ack
    /// Vector reaching back that far: sec. 11.4.2's acknowledgement of
    /// acknowledgements).
    pub fn forget_through(&mut self, s: Seq) {
        if let Some(head) = self.head {
            let keep = head.dist(s);
            if keep >= 0 {
                self.trim_to(keep as u64);
            }
        }
    }

    /// Encodes the history as Ack Vector cells into `out`, newest first,
    /// and returns how many cells were written (at most `out.len()`).
    pub fn encode(&self, out: &mut [u8]) -> usize {
        let mut n = 0;
        for (cell, &(st, len)) in out.iter_mut().zip(&self.runs) {
            *cell = (st as u8) << 6 | (len - 1);
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_decode_per_the_rfc_example() {
        // Sec. 11.4's shape: ack 10, "0,2" then "3,1" then "0,4".
        let cells = [0x02, 0xC1, 0x04];
        let runs: Vec<Run> = Runs::new(Seq::new(10), &cells).collect();
        assert_eq!(runs[0].first(), Seq::new(8));
        assert_eq!(runs[0].state, State::Received);
        assert_eq!((runs[1].first(), runs[1].last), (Seq::new(6), Seq::new(7)));
        assert_eq!(runs[1].state, State::NotReceived);
        assert_eq!((runs[2].first(), runs[2].last), (Seq::new(1), Seq::new(5)));
    }

    #[test]
    fn history_round_trips_through_cells() {
        let mut h = RecvHistory::new(10_000);
        let mut s = 0x1234_5678u64;
        let mut truth = std::collections::BTreeMap::new();
        // Start near the wrap to cover it too.
        let base = (1u64 << 48) - 300;
        for i in 0..1000u64 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let seq = Seq::new(base + i);
            if !s.is_multiple_of(7) {
                let ecn = s.is_multiple_of(11);
                h.record(seq, ecn);
                truth.insert(i, ecn);
            }
        }
        // A late arrival fills a hole.
        if let Some(i) = (0..1000u64).find(|i| !truth.contains_key(i)) {
            h.record(Seq::new(base + i), false);
            truth.insert(i, false);
        }
        let mut cells = [0u8; 2048];
        let n = h.encode(&mut cells);
        let head = h.head().unwrap();
        let mut seen = 0;
        for run in Runs::new(head, &cells[..n]) {
            for k in 0..run.len {
                let seq = run.last.sub(k);
                let i = seq.dist(Seq::new(base)) as u64;
                let want = match truth.get(&i) {
                    None => State::NotReceived,
                    Some(true) => State::ReceivedEcnMarked,
                    Some(false) => State::Received,
                };
                assert_eq!(run.state, want, "seq {seq}");
                seen += 1;
            }
        }
        assert_eq!(seen, h.len());
        assert!(n < 1000, "runs compress");
    }

    #[test]
    fn runs_split_at_64_and_history_is_bounded() {
        let mut h = RecvHistory::new(100);
        for i in 0..130 {
            h.record(Seq::new(i), false);
        }
        let mut cells = [0u8; 8];
        let n = h.encode(&mut cells);
        // Newest 2, then a full 64, then the 34 the bound leaves.
        assert_eq!(&cells[..n], &[0x01, 0x3F, 0x21]);
        assert_eq!(h.len(), 100);
        h.record(Seq::new(1000), false);
        assert_eq!(h.len(), 100);
        assert_eq!(h.get(Seq::new(999)), Some(State::NotReceived));
        assert!(h.received(Seq::new(1000)));
        h.record(Seq::new(995), true);
        assert_eq!(h.get(Seq::new(995)), Some(State::ReceivedEcnMarked));
        assert_eq!(h.get(Seq::new(996)), Some(State::NotReceived));
        assert_eq!(h.get(Seq::new(994)), Some(State::NotReceived));
        h.forget_through(Seq::new(990));
        assert_eq!(h.len(), 10);
        assert_eq!(h.get(Seq::new(990)), None);
        let n = h.encode(&mut cells);
        // 1000, 996..999 lost, 995 marked, 991..994 lost.
        assert_eq!(&cells[..n], &[0x00, 0xC3, 0x40, 0xC3]);
    }
}
