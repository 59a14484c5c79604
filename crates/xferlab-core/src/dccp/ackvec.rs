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

/// What a receiver keeps to build Ack Vectors: the state of every packet
/// from the newest received one (`head`) back, bounded to `capacity`
/// packets so a long connection holds constant memory.
#[derive(Clone, Debug)]
pub struct RecvHistory {
    head: Option<Seq>,
    /// `states[i]` is the state of `head - i`.
    states: VecDeque<State>,
    capacity: usize,
}

impl RecvHistory {
    pub fn new(capacity: usize) -> Self {
        RecvHistory {
            head: None,
            states: VecDeque::with_capacity(capacity),
            capacity: capacity.max(1),
        }
    }

    /// The newest sequence number received.
    pub fn head(&self) -> Option<Seq> {
        self.head
    }

    /// Whether `s` was already recorded as received (a duplicate).
    pub fn received(&self, s: Seq) -> bool {
        self.get(s).is_some_and(|st| st != State::NotReceived)
    }

    pub fn get(&self, s: Seq) -> Option<State> {
        let d = self.head?.dist(s);
        usize::try_from(d)
            .ok()
            .and_then(|i| self.states.get(i).copied())
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
            self.states.push_front(st);
            return;
        };
        let d = s.dist(head);
        if d > 0 {
            let gap = (d as usize - 1).min(self.capacity);
            for _ in 0..gap {
                self.states.push_front(State::NotReceived);
            }
            self.states.push_front(st);
            self.states.truncate(self.capacity);
            self.head = Some(s);
        } else if let Some(slot) = usize::try_from(-d)
            .ok()
            .and_then(|i| self.states.get_mut(i))
        {
            if *slot == State::NotReceived {
                *slot = st;
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
                self.states.truncate(keep as usize);
            }
        }
    }

    /// Encodes the history as Ack Vector cells into `out`, newest first,
    /// and returns how many cells were written (at most `out.len()`).
    pub fn encode(&self, out: &mut [u8]) -> usize {
        let mut n = 0;
        let mut it = self.states.iter().copied().peekable();
        while let Some(st) = it.next() {
            if n == out.len() {
                break;
            }
            let mut run = 1;
            while run < MAX_RUN && it.peek() == Some(&st) {
                it.next();
                run += 1;
            }
            out[n] = (st as u8) << 6 | (run - 1) as u8;
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
        assert_eq!(seen, h.states.len() as u64);
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
        assert_eq!(&cells[..n], &[0x3F, 0x23]);
        h.record(Seq::new(1000), false);
        assert_eq!(h.states.len(), 100);
        assert_eq!(h.get(Seq::new(999)), Some(State::NotReceived));
        assert!(h.received(Seq::new(1000)));
        h.forget_through(Seq::new(990));
        assert_eq!(h.states.len(), 10);
        assert_eq!(h.get(Seq::new(990)), None);
    }
}
