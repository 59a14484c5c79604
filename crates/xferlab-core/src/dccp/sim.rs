//! Virtual-time test bench: two DCCP connections joined by an in-memory
//! link with one-way delay, a bottleneck rate with a drop-tail buffer,
//! deterministic random loss and ECN CE marks, and a receiving socket that
//! drops (and counts, as SO_RXQ_OVFL does); more connection pairs may
//! share the link (and its bottleneck queue); and the end-to-end transfer
//! tests on it.

use std::collections::BinaryHeap;
use std::time::Duration;

use crate::time::Time;

use super::conn::{Connection, Event};

/// One direction of the link.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Path {
    pub delay: Duration,
    /// Bottleneck in bytes per second (0: unlimited).
    pub rate: u64,
    /// Packets the bottleneck buffers before dropping.
    pub buffer: usize,
    /// Random loss in parts per million.
    pub loss_ppm: u64,
}

impl Path {
    pub fn ideal(delay_ms: u64) -> Self {
        Path {
            delay: Duration::from_millis(delay_ms),
            rate: 0,
            buffer: usize::MAX,
            loss_ppm: 0,
        }
    }
}

struct Flight {
    at: Time,
    n: u64,
    /// 0 for (a, b), k for `others[k - 1]`.
    flow: usize,
    to_b: bool,
    bytes: Vec<u8>,
}

impl PartialEq for Flight {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.n) == (o.at, o.n)
    }
}
impl Eq for Flight {}
impl PartialOrd for Flight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Flight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.n).cmp(&(self.at, self.n)) // min-heap
    }
}

/// A receiving driver that loses the CPU right after reading its clock,
/// as a thread on a busy host does: every `every`, the first turn that
/// will write feedback reads its clock and is descheduled for `length`;
/// what arrives meanwhile waits in a socket of `socket` datagrams (more
/// are host drops), and is then handled with the stale reading, as the
/// lab's driver does (it reads its clock once per turn).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RxStalls {
    pub every: Duration,
    pub length: Duration,
    pub socket: usize,
}

struct Stalled {
    clock: Time,
    until: Time,
    queue: Vec<(Flight, bool)>,
}

/// Counts of what the link did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LinkStats {
    pub random_drops: u64,
    pub queue_drops: u64,
    /// Drops (of either kind) of packets carrying application data.
    pub data_drops: u64,
    pub delivered: u64,
}

pub(crate) struct Net {
    pub a: Connection,
    pub b: Connection,
    pub now: Time,
    pub ab: Path,
    pub ba: Path,
    heap: BinaryHeap<Flight>,
    n: u64,
    rng: u64,
    /// When each direction's bottleneck is free again, and its backlog.
    busy_until: [Time; 2],
    pub stats: LinkStats,
    /// Drop the next k packets from a to b / b to a (scripted loss).
    pub drop_next: [u32; 2],
    pub events_a: Vec<Event>,
    pub events_b: Vec<Event>,
    /// Per direction (to b, to a): the receiving socket drops this many
    /// parts per million on arrival and reports its running count to its
    /// connection; the link marks this many CE.
    pub host_drop_ppm: [u64; 2],
    pub host_drops: [u64; 2],
    pub ce_ppm: [u64; 2],
    /// More (client, server) pairs on the same link: flows 1, 2, ...
    pub others: Vec<(Connection, Connection)>,
    /// The drivers' timer granularity: a connection's deadline is met at
    /// the next multiple of this (a driver asleep in ppoll wakes late, and
    /// a real one pays a wakeup per deadline); zero meets it exactly.
    /// Arrivals still wake both ends at once.
    pub wake_gran: Duration,
    /// Which connections (flow * 2 + on b) run at this instant.
    awake: Vec<bool>,
    /// Flow 0's receiving drivers that stall, indexed as `host_drop_ppm`
    /// (0: b, receiving from a), their stall in progress, the next stall's
    /// earliest start, and how many began.
    pub rx_stalls: [Option<RxStalls>; 2],
    stalled: [Option<Stalled>; 2],
    next_stall: [Time; 2],
    pub stalls_begun: [u64; 2],
    /// When set: flow 0's data packets as they reach b's socket (arrival
    /// time, bytes), and every packet b puts on the link (time, bytes).
    pub arrivals_log: Option<Vec<(Time, usize)>>,
    pub sent_log: Option<Vec<(Time, Vec<u8>)>>,
}

impl Net {
    pub fn new(now: Time, a: Connection, b: Connection, ab: Path, ba: Path) -> Self {
        Net {
            a,
            b,
            now,
            ab,
            ba,
            heap: BinaryHeap::new(),
            n: 0,
            rng: 0x2545_F491_4F6C_DD1D,
            busy_until: [now; 2],
            stats: LinkStats::default(),
            drop_next: [0; 2],
            events_a: Vec::new(),
            events_b: Vec::new(),
            host_drop_ppm: [0; 2],
            host_drops: [0; 2],
            ce_ppm: [0; 2],
            others: Vec::new(),
            wake_gran: Duration::ZERO,
            awake: Vec::new(),
            rx_stalls: [None; 2],
            stalled: [None, None],
            next_stall: [now; 2],
            stalls_begun: [0; 2],
            arrivals_log: None,
            sent_log: None,
        }
    }

    /// Flow `flow`'s connection on side b (`to_b`) or a.
    pub fn conn(&mut self, flow: usize, to_b: bool) -> &mut Connection {
        match (flow, to_b) {
            (0, true) => &mut self.b,
            (0, false) => &mut self.a,
            (k, true) => &mut self.others[k - 1].1,
            (k, false) => &mut self.others[k - 1].0,
        }
    }

    fn rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    fn put(&mut self, flow: usize, to_b: bool, bytes: &[u8]) {
        if flow == 0 && !to_b {
            if let Some(log) = self.sent_log.as_mut() {
                log.push((self.now, bytes.to_vec()));
            }
        }
        let data = is_data(bytes);
        let before = self.stats.random_drops + self.stats.queue_drops;
        self.put_inner(flow, to_b, bytes);
        if data && self.stats.random_drops + self.stats.queue_drops > before {
            self.stats.data_drops += 1;
        }
    }

    fn put_inner(&mut self, flow: usize, to_b: bool, bytes: &[u8]) {
        let d = usize::from(!to_b);
        let path = if to_b { self.ab } else { self.ba };
        if self.drop_next[d] > 0 {
            self.drop_next[d] -= 1;
            self.stats.random_drops += 1;
            return;
        }
        if path.loss_ppm > 0 && self.rand() % 1_000_000 < path.loss_ppm {
            self.stats.random_drops += 1;
            return;
        }
        let mut at = self.now;
        if path.rate > 0 {
            let start = self.busy_until[d].max(self.now);
            let tx = Duration::from_secs_f64(bytes.len() as f64 / path.rate as f64);
            let backlog = start.duration_since(self.now).as_secs_f64() * path.rate as f64
                / bytes.len().max(1) as f64;
            if backlog as usize >= path.buffer {
                self.stats.queue_drops += 1;
                return;
            }
            self.busy_until[d] = start + tx;
            at = start + tx;
        }
        self.n += 1;
        self.heap.push(Flight {
            at: at + path.delay,
            n: self.n,
            flow,
            to_b,
            bytes: bytes.to_vec(),
        });
    }

    /// Sends everything both ends want to send now.
    pub fn flush(&mut self) {
        self.flush_where(&mut |_, _| true);
    }

    /// Sends what the connections `awake(flow, on_b)` want to send now.
    fn flush_where(&mut self, awake: &mut dyn FnMut(usize, bool) -> bool) {
        let mut buf = [0u8; 2048];
        loop {
            let mut any = false;
            for flow in 0..=self.others.len() {
                for to_b in [true, false] {
                    if !awake(flow, !to_b) {
                        continue;
                    }
                    let now = self.now;
                    while let Some(n) = self.conn(flow, !to_b).poll_transmit(now, &mut buf) {
                        self.put(flow, to_b, &buf[..n]);
                        any = true;
                    }
                }
            }
            while let Some(e) = self.a.poll_event() {
                self.events_a.push(e);
            }
            while let Some(e) = self.b.poll_event() {
                self.events_b.push(e);
            }
            if !any {
                break;
            }
        }
    }

    /// With a [`Net::wake_gran`], only the connections a datagram or
    /// their own deadline woke at this instant run (each end is its own
    /// driver); without, every connection is polled at every instant.
    fn flush_awake(&mut self) {
        if self.wake_gran.is_zero() {
            return self.flush();
        }
        let awake = std::mem::take(&mut self.awake);
        self.flush_where(&mut |flow, on_b| awake[2 * flow + usize::from(on_b)]);
        self.awake = awake;
    }

    /// Whether flow 0's end that receives on direction `d` (0: b) is in a
    /// stall.
    fn is_stalled(&self, flow: usize, to_b: bool) -> bool {
        flow == 0 && self.stalled[usize::from(!to_b)].is_some()
    }

    /// Hands a datagram to its connection at `now` (arrived at `f.at`),
    /// logging flow 0's data packets to b.
    fn deliver(
        &mut self,
        now: Time,
        f: &Flight,
        ce: bool,
        on_data: &mut dyn FnMut(usize, bool, &[u8]),
    ) {
        self.stats.delivered += 1;
        if let Some(p) = self
            .conn(f.flow, f.to_b)
            .handle_arrival(now, f.at, &f.bytes, ce)
        {
            on_data(f.flow, f.to_b, p);
        }
    }

    /// Starts a stall of flow 0's end `d` if one is due: its turn reads
    /// the clock and will write feedback.
    fn maybe_stall(&mut self, d: usize) {
        let Some(st) = self.rx_stalls[d] else {
            return;
        };
        assert!(self.others.is_empty(), "stalls are for flow 0 alone");
        // Without a granularity every connection is polled at every
        // instant, the stalled one too.
        assert!(!self.wake_gran.is_zero(), "stalls need a wake_gran");
        let now = self.now;
        if self.stalled[d].is_none()
            && now >= self.next_stall[d]
            && self.conn(0, d == 0).feedback_due(now)
        {
            self.stalled[d] = Some(Stalled {
                clock: now,
                until: now + st.length,
                queue: Vec::new(),
            });
            self.next_stall[d] = now + st.every;
            self.stalls_begun[d] += 1;
        }
    }

    /// Ends a stall whose time is up: the driver handles what queued
    /// with its stale clock reading, runs a timer that was due then, and
    /// sends (the packets leave now; the connection thinks it is then).
    fn maybe_resume(&mut self, d: usize, on_data: &mut dyn FnMut(usize, bool, &[u8])) {
        if self.stalled[d].as_ref().is_none_or(|s| self.now < s.until) {
            return;
        }
        let Some(st) = self.stalled[d].take() else {
            return;
        };
        let clock = st.clock;
        let on_b = d == 0;
        let total = self.host_drops[d];
        self.conn(0, on_b).set_host_drops(total);
        for (f, ce) in st.queue {
            self.deliver(clock, &f, ce, on_data);
        }
        let c = self.conn(0, on_b);
        if c.poll_timeout().is_some_and(|t| t <= clock) {
            c.handle_timeout(clock);
        }
        let mut buf = [0u8; 2048];
        while let Some(n) = self.conn(0, on_b).poll_transmit(clock, &mut buf) {
            self.put(0, !on_b, &buf[..n]);
        }
        self.awake[usize::from(on_b)] = true;
    }

    /// Advances to the next arrival or deadline and handles it; calls
    /// `on_data(to_b, payload)` for payloads delivered. False when nothing
    /// is left to happen before `limit`.
    pub fn step(&mut self, limit: Time, on_data: &mut dyn FnMut(bool, &[u8])) -> bool {
        self.step_flows(limit, &mut |_, to_b, p| on_data(to_b, p))
    }

    /// As [`Net::step`], naming the flow of each payload delivered.
    pub fn step_flows(&mut self, limit: Time, on_data: &mut dyn FnMut(usize, bool, &[u8])) -> bool {
        let n = 2 * (self.others.len() + 1);
        if self.awake.len() != n {
            // Everyone runs at the start.
            self.awake = vec![true; n];
        }
        // Those that ran last time run again: their applications may have
        // queued more since.
        self.flush_awake();
        let gran = self.wake_gran.as_nanos() as u64;
        let wake = |t: Time| match gran {
            0 => t,
            g => Time::from_nanos(t.as_nanos().div_ceil(g) * g),
        };
        // A stalled end's next event is the end of its stall.
        let stall_ends = self.stalled.each_ref().map(|s| s.as_ref().map(|s| s.until));
        let timeout_of = |c: &Connection, d: usize| match stall_ends[d] {
            Some(until) => Some(until),
            None => c.poll_timeout().map(wake),
        };
        let next = self
            .others
            .iter()
            .flat_map(|(x, y)| [x.poll_timeout(), y.poll_timeout()])
            .flatten()
            .map(wake)
            .chain(timeout_of(&self.a, 1))
            .chain(timeout_of(&self.b, 0))
            .chain(self.heap.peek().map(|f| f.at))
            .min();
        let Some(next) = next.filter(|&t| t <= limit) else {
            return false;
        };
        self.now = self.now.max(next);
        self.awake.fill(false);
        for d in 0..2 {
            self.maybe_resume(d, on_data);
            self.maybe_stall(d);
        }
        while self.heap.peek().is_some_and(|f| f.at <= self.now) {
            let f = self.heap.pop().unwrap();
            let d = usize::from(!f.to_b);
            if !self.is_stalled(f.flow, f.to_b) {
                self.awake[2 * f.flow + usize::from(f.to_b)] = true;
            }
            if self.host_drop_ppm[d] > 0 && self.rand() % 1_000_000 < self.host_drop_ppm[d] {
                self.host_drops[d] += 1;
                let total = self.host_drops[d];
                self.conn(f.flow, f.to_b).set_host_drops(total);
                continue;
            }
            let ce = self.ce_ppm[d] > 0 && self.rand() % 1_000_000 < self.ce_ppm[d];
            if let Some(queued) = self.stalled[d]
                .as_ref()
                .filter(|_| f.flow == 0)
                .map(|st| st.queue.len())
            {
                let room = self.rx_stalls[d].map_or(usize::MAX, |s| s.socket);
                if queued >= room {
                    // The socket is full: SO_RXQ_OVFL counts it, and the
                    // connection hears of it when its driver runs again.
                    self.host_drops[d] += 1;
                } else {
                    self.log_arrival(&f);
                    if let Some(st) = self.stalled[d].as_mut() {
                        st.queue.push((f, ce));
                    }
                }
                continue;
            }
            self.log_arrival(&f);
            let now = self.now;
            self.deliver(now, &f, ce, on_data);
        }
        let now = self.now;
        for flow in 0..=self.others.len() {
            for side in [false, true] {
                if self.is_stalled(flow, side) {
                    continue;
                }
                let c = self.conn(flow, side);
                if c.poll_timeout().is_some_and(|t| wake(t) <= now) {
                    c.handle_timeout(now);
                    self.awake[2 * flow + usize::from(side)] = true;
                }
            }
        }
        self.flush_awake();
        true
    }
}

impl Net {
    fn log_arrival(&mut self, f: &Flight) {
        if self.arrivals_log.is_some() && f.flow == 0 && f.to_b && is_data(&f.bytes) {
            if let Some(log) = self.arrivals_log.as_mut() {
                log.push((f.at, f.bytes.len()));
            }
        }
    }
}

fn is_data(bytes: &[u8]) -> bool {
    super::packet::parse(bytes).is_ok_and(|p| p.header.body.packet_type().has_data())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dccp::ccid::CcidState;
    use crate::dccp::conn::{CloseReason, Config, State};

    const SERVICE: u32 = u32::from_be_bytes(*b"xfer");

    struct Outcome {
        delivered: u64,
        sent: u64,
        elapsed: Duration,
        net: Net,
        max_state: Option<CcidState>,
    }

    /// Client sends `n` datagrams of `size` bytes (each starts with its
    /// index) to the server, then closes.
    fn transfer(ccid: u8, n: u64, size: usize, ab: Path, ba: Path) -> Outcome {
        transfer_with(ccid, n, size, ab, ba, 20_000)
    }

    fn transfer_with(ccid: u8, n: u64, size: usize, ab: Path, ba: Path, window: u64) -> Outcome {
        let t0 = Time::ZERO;
        let mut cc = Config::client(40000, 5001, SERVICE, ccid);
        cc.seq_window = window;
        cc.mss = size + 40;
        cc.iss = crate::dccp::Seq::new((1 << 48) - 500);
        let mut sc = Config::server(5001, vec![SERVICE]);
        sc.seq_window = window;
        sc.iss = crate::dccp::Seq::new(77);
        let client = Connection::connect(t0, cc);
        let server = Connection::listen(sc);
        let mut net = Net::new(t0, client, server, ab, ba);
        let mut next = 0u64;
        let mut got = 0u64;
        let mut last_index: Option<u64> = None;
        let mut payload = vec![0u8; size];
        let limit = t0 + Duration::from_secs(600);
        let mut max_state = None;
        let mut closed_at = None;
        let (mut got_before, mut last_rx) = (0, t0);
        loop {
            // The application keeps the queue topped up.
            while next < n && net.a.can_queue(size) && net.a.state() != State::Request {
                payload[..8].copy_from_slice(&next.to_be_bytes());
                assert!(net.a.send(&payload));
                next += 1;
            }
            if next == n && closed_at.is_none() {
                net.a.close(net.now);
                closed_at = Some(net.now);
            }
            if let Some(s) = net.a.ccid_state() {
                max_state = Some(s);
            }
            let progressed = net.step(limit, &mut |to_b, p| {
                assert!(to_b, "data flows client to server only");
                let i = u64::from_be_bytes(p[..8].try_into().unwrap());
                assert!(last_index.is_none_or(|l| i > l), "in order on this link");
                assert!(p[8..].iter().all(|&b| b == 0));
                last_index = Some(i);
                got += 1;
            });
            if got > 0 && got != got_before {
                got_before = got;
                last_rx = net.now;
            }
            if !progressed {
                break;
            }
        }
        Outcome {
            delivered: got,
            sent: next,
            // From the start to the last delivery.
            elapsed: last_rx.duration_since(t0),
            net,
            max_state,
        }
    }

    fn bottleneck(rate_mbit: u64, delay_ms: u64, buffer: usize, loss_ppm: u64) -> Path {
        Path {
            delay: Duration::from_millis(delay_ms),
            rate: rate_mbit * 1_000_000 / 8,
            buffer,
            loss_ppm,
        }
    }

    fn check_clean_close(o: &Outcome) {
        assert!(
            o.net.events_a.contains(&Event::Closed(CloseReason::Closed)),
            "{:?}",
            o.net.events_a
        );
        assert!(
            o.net.events_b.contains(&Event::Closed(CloseReason::Closed)),
            "{:?}",
            o.net.events_b
        );
        assert_eq!(o.net.a.state(), State::Closed, "TIMEWAIT ran out");
        assert_eq!(o.net.b.state(), State::Closed);
    }

    #[test]
    fn ccid2_transfer_fills_a_10_mbit_link_and_closes() {
        let n = 5000;
        let o = transfer(2, n, 1000, bottleneck(10, 20, 50, 0), Path::ideal(20));
        assert_eq!(o.sent, n);
        let lost = o.net.stats.data_drops;
        assert_eq!(
            o.delivered + lost,
            n,
            "every datagram arrives or is counted lost"
        );
        // 5000 * 1056 B over 10 Mbit/s is 4.2 s at line rate.
        let rate = (o.delivered * 1056 * 8) as f64 / o.elapsed.as_secs_f64();
        assert!(
            rate > 6e6 && rate <= 10.5e6,
            "{rate} bit/s in {:?}",
            o.elapsed
        );
        assert!(lost > 0, "the window probes past the 50-packet buffer");
        let Some(CcidState::Ccid2 { cwnd, rtt, .. }) = o.max_state else {
            panic!()
        };
        assert!((2..200).contains(&cwnd), "{cwnd}");
        assert!(rtt.unwrap() >= Duration::from_millis(40));
        assert_eq!(o.net.a.stats().data_sent, n);
        assert_eq!(o.net.b.stats().data_received, o.delivered);
        check_clean_close(&o);
    }

    #[test]
    fn ccid2_with_random_loss_delivers_the_rest() {
        let n = 3000;
        let o = transfer(2, n, 500, bottleneck(20, 10, 200, 10_000), Path::ideal(10));
        let lost = o.net.stats.data_drops;
        assert!(
            lost > 0 && o.delivered + lost == n,
            "{} of {n}",
            o.delivered
        );
        check_clean_close(&o);
    }

    #[test]
    fn ccid3_transfer_follows_the_link_rate_and_closes() {
        let n = 4000;
        let o = transfer(3, n, 1000, bottleneck(10, 20, 50, 0), Path::ideal(20));
        let lost = o.net.stats.data_drops;
        assert_eq!(o.delivered + lost, n);
        let rate = (o.delivered * 1056 * 8) as f64 / o.elapsed.as_secs_f64();
        assert!(
            rate > 3e6 && rate <= 10.5e6,
            "{rate} bit/s in {:?}",
            o.elapsed
        );
        let Some(CcidState::Ccid3 { x, rtt, .. }) = o.max_state else {
            panic!()
        };
        assert!(x > 0.0 && rtt.unwrap() >= Duration::from_millis(40));
        check_clean_close(&o);
    }

    #[test]
    fn ccid3_with_random_loss_settles_on_the_equation() {
        let n = 3000;
        let o = transfer(
            3,
            n,
            1000,
            bottleneck(100, 25, 1000, 20_000),
            Path::ideal(25),
        );
        let lost = o.net.stats.data_drops;
        assert_eq!(o.delivered + lost, n);
        let Some(CcidState::Ccid3 { x, p, rtt, .. }) = o.max_state else {
            panic!()
        };
        // 2% random loss, each its own loss event mostly: p near 0.02 and
        // X within a factor of the equation's value at that p.
        assert!(p > 0.005 && p < 0.05, "p {p}");
        let eq = crate::dccp::ccid::tfrc::x_calc(1040.0, rtt.unwrap(), p);
        assert!(x > eq / 3.0 && x < eq * 3.0, "x {x} eq {eq}");
        check_clean_close(&o);
    }

    /// The long fat path: 1 Gbit/s, 94 ms RTT, a BDP of buffer.
    /// Reports the goodput CCID2 reaches in virtual time and the wall
    /// time the two machines and the bench take per packet. Run with
    /// `cargo test -p xferlab-core --release --lib dccp::sim -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement (prints numbers), slow in debug builds"]
    #[allow(clippy::disallowed_methods)]
    fn ccid2_on_a_1_gbit_94_ms_path() {
        let n = 1_000_000;
        let wall = std::time::Instant::now();
        let o = transfer_with(
            2,
            n,
            1400,
            bottleneck(1000, 47, 8400, 0),
            Path::ideal(47),
            100_000,
        );
        let took = wall.elapsed();
        let rate = (o.delivered * 1456 * 8) as f64 / o.elapsed.as_secs_f64();
        println!(
            "CCID2 1 Gbit/s 94 ms: {} of {n} delivered in {:.2} s virtual: {:.0} Mbit/s on the wire; \
             wall {:.2} s, {:.0} ns per data packet (both machines and the bench)",
            o.delivered,
            o.elapsed.as_secs_f64(),
            rate / 1e6,
            took.as_secs_f64(),
            took.as_nanos() as f64 / n as f64
        );
        assert!(rate > 900e6, "{rate}");
        check_clean_close(&o);
    }

    /// A CCID3 flow from a (client) to b (server) over `ab` for `secs` of
    /// virtual time, its drivers waking at multiples of `gran`, the
    /// application always ready: the goodput (Mbit/s on the wire) and the
    /// sender's state every quarter second.
    fn ccid3_trace(ab: Path, gran: Duration, secs: u64) -> Vec<(f64, CcidState)> {
        ccid3_run(ab, gran, secs, None).0
    }

    /// As [`ccid3_trace`], with the receiving driver's stalls (and the
    /// logs that judge its reports) when given; also returns the bench.
    fn ccid3_run(
        ab: Path,
        gran: Duration,
        secs: u64,
        stalls: Option<RxStalls>,
    ) -> (Vec<(f64, CcidState)>, Net) {
        let t0 = Time::ZERO;
        let size = 1400;
        let mut cc = Config::client(40000, 5001, SERVICE, 3);
        cc.seq_window = 100_000;
        cc.mss = size + 40;
        let mut sc = Config::server(5001, vec![SERVICE]);
        sc.seq_window = 100_000;
        let back = Path::ideal(ab.delay.as_millis() as u64);
        let client = Connection::connect(t0, cc);
        let mut net = Net::new(t0, client, Connection::listen(sc), ab, back);
        net.wake_gran = gran;
        if stalls.is_some() {
            net.rx_stalls[0] = stalls;
            net.arrivals_log = Some(Vec::new());
            net.sent_log = Some(Vec::new());
        }
        let payload = vec![0u8; size];
        let tick = Duration::from_millis(250);
        let (mut next, mut got, mut last) = (t0 + tick, 0u64, 0u64);
        let mut trace = Vec::new();
        let limit = t0 + Duration::from_secs(secs);
        loop {
            while net.a.can_queue(size) && net.a.state() != State::Request {
                assert!(net.a.send(&payload));
            }
            if net.now >= next {
                let mbit = ((got - last) * 1456 * 8) as f64 / tick.as_secs_f64() / 1e6;
                trace.push((mbit, net.a.ccid_state().unwrap()));
                (last, next) = (got, next + tick);
            }
            if !net.step(limit, &mut |_, _| got += 1) {
                return (trace, net);
            }
        }
    }

    /// Each report b sent after `from` (its X_recv) against what reached
    /// b's socket between the moments the report and the one before it
    /// left (at least 10 ms apart): (when, X_recv, reference), bytes/s.
    fn judge_reports(net: &Net, from: Time) -> Vec<(Time, f64, f64)> {
        use crate::dccp::options::{Opt, Options};
        let reports: Vec<(Time, u32)> = net
            .sent_log
            .as_ref()
            .unwrap()
            .iter()
            .filter_map(|(t, b)| {
                let p = crate::dccp::packet::parse(b).ok()?;
                Options::new(p.options)
                    .flatten()
                    .find_map(|(o, _)| match o {
                        Opt::ReceiveRate(r) => Some((*t, r)),
                        _ => None,
                    })
            })
            .collect();
        let arrivals = net.arrivals_log.as_ref().unwrap();
        // Bytes that arrived up to each entry, for a sum per report.
        let cum: Vec<u64> = arrivals
            .iter()
            .scan(0u64, |c, a| {
                *c += a.1 as u64;
                Some(*c)
            })
            .collect();
        let upto = |t: Time| match arrivals.partition_point(|a| a.0 <= t) {
            0 => 0,
            i => cum[i - 1],
        };
        reports
            .windows(2)
            .filter(|w| {
                w[0].0 >= from && w[1].0.duration_since(w[0].0) >= Duration::from_millis(10)
            })
            .map(|w| {
                let span = w[1].0.duration_since(w[0].0).as_secs_f64();
                let reference = (upto(w[1].0) - upto(w[0].0)) as f64 / span;
                (w[1].0, f64::from(w[1].1), reference)
            })
            .collect()
    }

    fn check_reports(judged: &[(Time, f64, f64)], tolerance: f64) {
        let bad = judged
            .iter()
            .filter(|(_, x, r)| (x / r - 1.0).abs() >= tolerance)
            .count();
        if bad > 0 {
            for (t, x, r) in judged {
                println!(
                    "{:8.3} s X_recv {:7.2} Mbit/s arrived {:7.2} Mbit/s ratio {:.3}",
                    t.as_secs_f64(),
                    x * 8e-6,
                    r * 8e-6,
                    x / r
                );
            }
        }
        assert_eq!(
            bad,
            0,
            "{bad} of {} reports off by {tolerance} or more",
            judged.len()
        );
    }

    /// The lab's CCID3 reports swung from 0 to 1.35 times the link rate
    /// (docs/dccp.md) because the receiving driver reads its clock once
    /// per turn: a turn that lost the CPU after reading it handled what
    /// arrived meanwhile, and wrote its report, with the old reading. Here
    /// b's driver stalls 15 ms in a feedback turn every 500 ms on a 100
    /// Mbit/s, 40 ms path: every report must still say what arrived
    /// between it and the one before, within 10 %. Counting bytes over
    /// handling time gave the stalled reports ~1.3 and the next ~0.7.
    #[test]
    fn ccid3_x_recv_follows_arrivals_when_the_receiver_stalls() {
        let stalls = RxStalls {
            every: Duration::from_millis(500),
            length: Duration::from_millis(15),
            socket: 1000,
        };
        let (trace, net) = ccid3_run(
            bottleneck(100, 20, 350, 0),
            Duration::from_micros(500),
            8,
            Some(stalls),
        );
        assert!(net.stalls_begun[0] >= 12, "{}", net.stalls_begun[0]);
        assert_eq!(net.host_drops[0], 0, "a 15 ms stall fits the socket");
        let judged = judge_reports(&net, Time::ZERO + Duration::from_secs(3));
        assert!(judged.len() >= 50, "{} reports judged", judged.len());
        check_reports(&judged, 0.10);
        // And the flow still fills the link.
        let tail = trace[trace.len() - 8..].iter().map(|t| t.0).sum::<f64>() / 8.0;
        assert!(tail > 85.0, "{tail} Mbit/s over the last 2 s");
    }

    /// The lab's path (1 Gbit/s, 94 ms, a BDP of queue, 50 us wakes) with
    /// a 40 ms receiver stall every 2 s for 120 s: prints the rate and the
    /// sender's state every second, and checks the reports as the fast
    /// test does. Measured (release, 2026-11-29): every one of 1217
    /// reports within 0.05 % of what arrived (before arrival stamps: off by
    /// up to 42 %), no host drops, and no loss event after slow start: p
    /// stays at 2.6e-8 and the sender at 945 Mbit/s (847-854 while Elapsed
    /// Time still counted stalls as the receiver's hold, p 3.2e-8). The
    /// stalls alone do not make the lab's late loss events. Run with
    /// `cargo test -p xferlab-core --release --lib dccp::sim -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement (prints numbers), slow in debug builds"]
    fn ccid3_on_a_1_gbit_94_ms_path_with_receiver_stalls() {
        let secs = 120;
        let stalls = RxStalls {
            every: Duration::from_secs(2),
            length: Duration::from_millis(40),
            socket: 11_000,
        };
        let (trace, net) = ccid3_run(
            bottleneck(1000, 47, 8400, 0),
            Duration::from_micros(50),
            secs,
            Some(stalls),
        );
        for (i, (mbit, state)) in trace.iter().enumerate().filter(|(i, _)| i % 4 == 3) {
            println!("{:6.2} s {mbit:7.1} Mbit/s {state:?}", (i + 1) as f64 / 4.0);
        }
        let judged = judge_reports(&net, Time::ZERO + Duration::from_secs(5));
        let worst = judged
            .iter()
            .map(|(_, x, r)| (x / r - 1.0).abs())
            .fold(0.0, f64::max);
        let tail = trace[trace.len() - 240..].iter().map(|t| t.0).sum::<f64>() / 240.0;
        println!(
            "CCID3 1 Gbit/s 94 ms, receiver stalls: {tail:.0} Mbit/s over the last 60 s; \
             {} stalls, {} host drops, {} reports judged, worst off by {:.1} %",
            net.stalls_begun[0],
            net.host_drops[0],
            judged.len(),
            worst * 100.0
        );
        check_reports(&judged, 0.10);
        // After slow start's loss events the receiver sees none: p stays,
        // and the sender holds the equation's rate for it (on the wire:
        // s = 1440-byte packets of 1456 bytes). The 40 ms stalls fit the
        // socket and cost nothing.
        let p_at = |i: usize| match trace[i].1 {
            CcidState::Ccid3 { p, .. } => p,
            _ => unreachable!(),
        };
        assert_eq!(p_at(40), p_at(trace.len() - 1), "p stepped after 10 s");
        let CcidState::Ccid3 { x, .. } = trace[trace.len() - 1].1 else {
            panic!()
        };
        let want = x / 1440.0 * 1456.0 * 8e-6;
        assert!(
            (tail / want - 1.0).abs() < 0.02,
            "{tail} Mbit/s, X allows {want}"
        );
    }

    /// A sender whose driver wakes only every 500 us (t_ipi is 112 us at
    /// 100 Mbit/s) still fills the link: the missed t_nom slots go as a
    /// burst at the next wakeup (RFC 5348 sec. 4.6). Before, it sent one
    /// packet per wakeup, 22 Mbit/s, and with no loss X sat at 2 X_recv.
    #[test]
    fn ccid3_fills_the_link_when_the_driver_wakes_late() {
        let trace = ccid3_trace(bottleneck(100, 10, 200, 0), Duration::from_micros(500), 4);
        let tail = &trace[trace.len() - 4..];
        let mean = tail.iter().map(|t| t.0).sum::<f64>() / 4.0;
        assert!(mean > 85.0, "{mean} Mbit/s in the last second: {trace:?}");
        let CcidState::Ccid3 { x, .. } = tail[3].1 else {
            panic!()
        };
        assert!(x * 8.0 > 85e6, "X {x} B/s");
    }

    /// CCID3 on the path with the lab driver's wakeups (about
    /// every 50 us, measured: one packet per wakeup gave 28 MB/s), for
    /// comparison with CCID2 (TFRC is meant to be smoother, not faster).
    /// Prints the goodput every quarter second.
    #[test]
    #[ignore = "a measurement (prints numbers), slow in debug builds"]
    fn ccid3_on_a_1_gbit_94_ms_path() {
        let secs = 20;
        let trace = ccid3_trace(
            bottleneck(1000, 47, 8400, 0),
            Duration::from_micros(50),
            secs,
        );
        for (i, (mbit, state)) in trace.iter().enumerate() {
            println!("{:6.2} s {mbit:7.1} Mbit/s {state:?}", (i + 1) as f64 / 4.0);
        }
        let mean = trace.iter().map(|t| t.0).sum::<f64>() / trace.len() as f64;
        let tail = &trace[trace.len() - 20..];
        let tail = tail.iter().map(|t| t.0).sum::<f64>() / 20.0;
        println!("CCID3 1 Gbit/s 94 ms: {mean:.0} Mbit/s over {secs} s, {tail:.0} Mbit/s over the last 5 s");
        assert!(tail > 800.0, "{tail}");
    }
}
