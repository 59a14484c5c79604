//! An emulated USB network link (`xferlab lab --usb-link hs:eem:6`): each
//! Ethernet frame is timed as a USB 2.0 bulk link of a CDC class would
//! carry it. ECM puts one frame in each transfer; EEM and NCM pack up to
//! `batch` frames that are waiting into one. A transfer of L bytes costs
//! the bus time the USB bus model ([`crate::usb::model`]) predicts for a
//! queued stream of L-byte transfers on the controller profile, and the
//! two directions reserve time on one shared bus.
//!
//! Framing overheads are the CDC specifications' (constants below); the
//! codecs themselves are not here.
//!
//! Approximation (the link emulator decides a frame's departure when it
//! arrives): a frame that joins a transfer still waiting for the bus
//! leaves when the transfer's bytes up to and including it are carried,
//! not when the whole transfer completes; the transfer's bus time is the
//! whole transfer's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::config::LinkError;
use crate::usb::model::{self, Profiles, Window, Workload};

/// IEEE 802.3 MAC header (destination, source, EtherType) the TUN device's
/// IP packets lack.
pub const ETH_HEADER: u64 = 14;
/// IEEE 802.3 frame check sequence.
pub const ETH_FCS: u64 = 4;
/// CDC EEM 1.0 section 5.1: a 2-byte EEM header before each packet, and
/// section 5.1.2.1: the Ethernet frame is carried with its CRC (4 bytes,
/// possibly the 0xdeadbeef sentinel).
pub const EEM_HEADER: u64 = 2;
/// CDC NCM 1.0 section 3.2.1: the 16-bit NTB header (NTH16), one per
/// transfer.
pub const NCM_NTH16: u64 = 12;
/// CDC NCM 1.0 section 3.3.1: the NDP16 header (signature, length, next
/// index), one per transfer.
pub const NCM_NDP16_HEADER: u64 = 8;
/// CDC NCM 1.0 section 3.3.1: each datagram's (index, length) entry, and
/// the zero entry that ends the list.
pub const NCM_NDP16_ENTRY: u64 = 4;
/// CDC NCM 1.0 section 3.3.4 (wNdpOutDivisor / wNdpInDivisor): datagrams
/// start on this alignment; Linux's f_ncm and cdc_ncm use 4.
pub const NCM_DATAGRAM_ALIGN: u64 = 4;
/// CDC NCM 1.0 table 6-3 dwNtbInMaxSize: Linux's f_ncm announces 16384.
pub const NCM_NTB_MAX: u64 = 16_384;
/// Largest transfer the timing table covers (packets of 512 bytes).
const MAX_PACKETS: usize = 96;

/// The CDC class on the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum UsbClass {
    /// One Ethernet frame (no CRC) per transfer.
    Ecm,
    /// EEM packets (header, frame, CRC), several per transfer.
    Eem,
    /// An NTB16 of datagrams, several per transfer.
    Ncm,
}

/// The bus both directions share: when it is next free, in the lab
/// clock's nanoseconds. Not part of the configuration's value (equality
/// and the result ignore it).
#[derive(Debug, Clone, Default)]
pub struct SharedBus(pub Arc<AtomicU64>);

impl PartialEq for SharedBus {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// One direction of an emulated USB network link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsbLinkConfig {
    pub class: UsbClass,
    /// Most frames per transfer (1 for ECM).
    pub batch: u32,
    /// Bus model profile (`xferlab model usb --list`).
    pub profile: String,
    /// Device to host (bulk IN; the server-to-client direction: the client
    /// side is the USB host).
    pub bulk_in: bool,
    #[serde(skip)]
    #[schemars(skip)]
    pub bus: SharedBus,
}

/// `hs:ecm`, `hs:eem:6`, `hs:ncm:16`, optionally `:PROFILE` at the end:
/// the two directions (client to server = OUT, server to client = IN)
/// on one shared bus.
pub fn parse_usb_link(s: &str) -> Result<(UsbLinkConfig, UsbLinkConfig), LinkError> {
    let bad = |why: &str| LinkError::NotUsbLink(format!("{s}: {why}"));
    let mut parts = s.split(':');
    match parts.next() {
        Some("hs") => {}
        _ => return Err(bad("starts with the speed, hs (USB 2.0 high speed)")),
    }
    let class = match parts.next() {
        Some("ecm") => UsbClass::Ecm,
        Some("eem") => UsbClass::Eem,
        Some("ncm") => UsbClass::Ncm,
        _ => return Err(bad("the class is ecm, eem or ncm")),
    };
    let mut batch = 1;
    let mut profile = "study4".to_string();
    let rest: Vec<&str> = parts.collect();
    let mut rest = rest.as_slice();
    if let Some(first) = rest.first() {
        if let Ok(n) = first.parse::<u32>() {
            if n == 0 || n > 64 || (class == UsbClass::Ecm && n != 1) {
                return Err(bad("frames per transfer: 1 to 64 (ECM carries exactly 1)"));
            }
            batch = n;
            rest = &rest[1..];
        }
    }
    match rest {
        [] => {}
        [p] => profile = p.to_string(),
        _ => return Err(bad("too many parts")),
    }
    Profiles::builtin()
        .resolve(&profile)
        .map_err(|e| bad(&e.to_string()))?;
    let bus = SharedBus::default();
    let dir = |bulk_in| UsbLinkConfig {
        class,
        batch,
        profile: profile.clone(),
        bulk_in,
        bus: bus.clone(),
    };
    Ok((dir(false), dir(true)))
}

impl UsbLinkConfig {
    /// Bytes one frame of `ip_bytes` adds to a transfer.
    pub fn frame_bytes(&self, ip_bytes: u64) -> u64 {
        let frame = ip_bytes + ETH_HEADER;
        match self.class {
            UsbClass::Ecm => frame,
            UsbClass::Eem => EEM_HEADER + frame + ETH_FCS,
            UsbClass::Ncm => frame.next_multiple_of(NCM_DATAGRAM_ALIGN) + NCM_NDP16_ENTRY,
        }
    }

    /// Bytes a transfer carries besides its frames.
    pub fn transfer_bytes(&self) -> u64 {
        match self.class {
            UsbClass::Ecm | UsbClass::Eem => 0,
            UsbClass::Ncm => NCM_NTH16 + NCM_NDP16_HEADER + NCM_NDP16_ENTRY,
        }
    }

    /// Most bytes in one transfer.
    fn max_transfer(&self) -> u64 {
        match self.class {
            UsbClass::Ncm => NCM_NTB_MAX,
            _ => u64::MAX,
        }
    }
}

/// What a transfer costs, by its number of packets, from the model.
#[derive(Debug, Clone)]
pub struct TransferTimes {
    /// At index n - 1, for a transfer of n packets: (ns from one
    /// transfer's end to the next one's end in a steady one-way stream,
    /// ns of that the bus is this direction's alone). The rest (device
    /// latency, the host's turnaround) is this direction's own time, in
    /// which the other direction's transactions may use the bus.
    ns: Vec<(u64, u64)>,
}

impl TransferTimes {
    /// Runs the bus model ([`crate::usb::model`], which schedules both
    /// directions' transactions on one bus as a host controller does) for
    /// transfers of 1 to MAX_PACKETS full packets, queued (8 in flight):
    /// one way, for the cycle; both ways at once, for the exclusive part.
    /// With both directions saturated each ends a transfer every
    /// `both_cycle`, so each holds the bus for half of that; never less
    /// than its wire time (payload, tokens, handshakes, CRCs, SOFs) and
    /// never more than its one-way cycle. The serializer then reproduces
    /// the model one way and both ways (study 4's profile, 1536-byte
    /// transfers: 10,286 OUT or 11,077 IN transfers/s one way, 8,000 each
    /// both ways), and lies between them when one direction is light.
    pub fn from_model(cfg: &UsbLinkConfig) -> TransferTimes {
        let p = Profiles::builtin()
            .resolve(&cfg.profile)
            .expect("checked when parsed");
        let mp = p.phy.max_packet;
        let win = Window {
            warmup_us: 5_000.0,
            window_us: 100_000.0,
        };
        let ns_of = |tps: f64| (1e9 / tps.max(1.0)).round() as u64;
        let ns = (1..=MAX_PACKETS as u32)
            .map(|n| {
                let w = Workload {
                    size: n * mp,
                    depth: 8,
                    bulk_in: cfg.bulk_in,
                    bulk_out: !cfg.bulk_in,
                    device_depth: None,
                    periodic: None,
                };
                let one = model::predict(&p, &w, win);
                let cycle = ns_of(one.transfers_per_s);
                let b = &one.breakdown;
                let wire = ((b.wire_payload.us_per_transfer + b.wire_overhead.us_per_transfer)
                    * 1e3)
                    .round() as u64;
                let both = Workload {
                    bulk_in: true,
                    bulk_out: true,
                    ..w
                };
                let dir = if cfg.bulk_in { "in" } else { "out" };
                let both_cycle = model::predict(&p, &both, win)
                    .pipes
                    .iter()
                    .find(|x| x.dir == dir)
                    .map_or(2 * cycle, |x| ns_of(x.transfers_per_s));
                let exclusive = (both_cycle / 2).max(wire).min(cycle).max(1);
                (cycle, exclusive)
            })
            .collect();
        TransferTimes { ns }
    }

    /// (cycle, exclusive) ns of a transfer of `bytes`: its packets of
    /// 512 bytes and a short (or zero-length) one that ends it.
    pub fn of(&self, bytes: u64) -> (u64, u64) {
        let packets = (bytes / 512 + 1) as usize;
        let last = self.ns.len();
        if packets <= last {
            self.ns[packets - 1]
        } else {
            // Beyond the table: one more packet costs what the table's
            // last one did, all of it the bus's.
            let per = self.ns[last - 1].0 - self.ns[last - 2].0;
            let more = per * (packets - last) as u64;
            (self.ns[last - 1].0 + more, self.ns[last - 1].1 + more)
        }
    }

    /// The direction's own time before a transfer of `bytes` can take the
    /// bus after its previous one: cycle minus exclusive.
    fn gap(&self, bytes: u64) -> u64 {
        let (cycle, held) = self.of(bytes);
        cycle - held
    }
}

/// A transfer still waiting for the bus that frames may join.
#[derive(Debug, Clone, Copy)]
struct Open {
    start: u64,
    end: u64,
    frames: u32,
    bytes: u64,
}

/// One direction's transfers on the shared bus.
///
/// The bus is shared as a host controller shares it: a transfer holds it
/// for its exclusive part ([`TransferTimes`]), and either direction may
/// take it whenever it is free. Between its transfers a direction waits
/// out its own latency (the device NAKing while it readies the next
/// buffer, the host's turnaround), and that leaves the bus to the other
/// direction. One way, a transfer ends a cycle after the previous one;
/// both ways, the directions overlap their latencies.
#[derive(Debug, Clone)]
pub struct UsbSerializer {
    cfg: UsbLinkConfig,
    times: TransferTimes,
    open: Option<Open>,
    /// End of this direction's last transfer.
    free_at: u64,
    /// When this direction may next take the bus (its last transfer's end
    /// plus its latency).
    ready_at: u64,
    busy_period: u64,
}

impl UsbSerializer {
    pub fn new(cfg: &UsbLinkConfig) -> UsbSerializer {
        Self::with_times(cfg, TransferTimes::from_model(cfg))
    }

    fn with_times(cfg: &UsbLinkConfig, times: TransferTimes) -> UsbSerializer {
        UsbSerializer {
            cfg: cfg.clone(),
            times,
            open: None,
            free_at: 0,
            ready_at: 0,
            busy_period: 0,
        }
    }

    pub fn free_at(&self) -> u64 {
        self.free_at
    }

    /// One frame of `ip_bytes` arriving at `now`: (transfer start, when
    /// the frame is carried, busy period).
    pub fn frame(&mut self, now: u64, ip_bytes: u64) -> (u64, u64, u64) {
        let add = self.cfg.frame_bytes(ip_bytes);
        let bus = &self.cfg.bus.0;
        if let Some(o) = self.open.as_mut() {
            let bytes = o.bytes + add;
            if o.start > now && o.frames < self.cfg.batch && bytes <= self.cfg.max_transfer() {
                let end = o.start + self.times.of(bytes).1;
                // Only while no transfer of the other direction was booked
                // after this one.
                if bus
                    .compare_exchange(o.end, end, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    o.end = end;
                    o.frames += 1;
                    o.bytes = bytes;
                    self.free_at = end;
                    self.ready_at = end + self.times.gap(bytes);
                    return (o.start, end, self.busy_period);
                }
            }
        }
        let bytes = self.cfg.transfer_bytes() + add;
        let held = self.times.of(bytes).1;
        let earliest = now.max(self.ready_at);
        let mut cur = bus.load(Ordering::Acquire);
        let (start, end) = loop {
            let start = earliest.max(cur);
            match bus.compare_exchange(cur, start + held, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break (start, start + held),
                Err(seen) => cur = seen,
            }
        };
        if start != self.ready_at {
            // Idle, or the other direction had the bus when this one was
            // ready: the rate meter starts over.
            self.busy_period += 1;
        }
        self.open = Some(Open {
            start,
            end,
            frames: 1,
            bytes,
        });
        self.free_at = end;
        self.ready_at = end + self.times.gap(bytes);
        (start, end, self.busy_period)
    }

    /// Bus nanoseconds per bit of link capacity, for the rate meter: the
    /// link "carries" 1 bit per ns of its own cycle time.
    pub fn bus_ns(&self, ip_bytes: u64) -> u64 {
        self.times
            .of(self.cfg.transfer_bytes() + self.cfg.frame_bytes(ip_bytes))
            .0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(s: &str) -> (UsbSerializer, UsbSerializer) {
        let (a, b) = parse_usb_link(s).unwrap();
        (UsbSerializer::new(&a), UsbSerializer::new(&b))
    }

    #[test]
    fn parses_the_classes_and_refuses_nonsense() {
        let (o, i) = parse_usb_link("hs:eem:6").unwrap();
        assert_eq!(
            (o.class, o.batch, o.bulk_in, i.bulk_in),
            (UsbClass::Eem, 6, false, true)
        );
        assert_eq!(parse_usb_link("hs:ecm").unwrap().0.batch, 1);
        assert_eq!(
            parse_usb_link("hs:ncm:16:study4-aio").unwrap().0.profile,
            "study4-aio"
        );
        for bad in [
            "fs:ecm",
            "hs:rndis",
            "hs:ecm:6",
            "hs:eem:0",
            "hs:eem:6:nope",
            "hs:eem:6:a:b",
        ] {
            assert!(parse_usb_link(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn framing_follows_the_cdc_specs() {
        let (ecm, _) = parse_usb_link("hs:ecm").unwrap();
        let (eem, _) = parse_usb_link("hs:eem:6").unwrap();
        let (ncm, _) = parse_usb_link("hs:ncm:16").unwrap();
        // A 1500-byte IP packet: a 1514-byte frame.
        assert_eq!(ecm.frame_bytes(1500), 1514);
        assert_eq!(eem.frame_bytes(1500), 2 + 1514 + 4);
        assert_eq!(ncm.frame_bytes(1500), 1516 + 4);
        assert_eq!(ncm.transfer_bytes(), 12 + 8 + 4);
    }

    #[test]
    fn eem_packs_waiting_frames_into_one_transfer_and_ecm_does_not() {
        // Six 1500-byte packets arriving together behind a busy bus.
        let run = |s: &str| {
            let (mut out, _) = link(s);
            out.frame(0, 1500);
            (0..6).map(|_| out.frame(0, 1500).1).last().unwrap()
        };
        let ecm = run("hs:ecm");
        let eem = run("hs:eem:6");
        // ECM: 7 transfers of 3 packets. EEM: the first alone, then one
        // transfer of 6 x 1520 bytes = 18 packets (+ a short one); the
        // per-transfer device latency (46 us, study 4) is paid twice, not 7
        // times.
        assert!(eem < ecm * 3 / 4, "eem {eem} ns, ecm {ecm} ns");
    }

    #[test]
    fn the_directions_share_one_bus() {
        let (mut out, mut inn) = link("hs:ecm");
        let (_, a_end, _) = out.frame(0, 1500);
        let (b_start, _, _) = inn.frame(0, 40);
        assert_eq!(
            b_start, a_end,
            "the IN transfer waits for the OUT one's exclusive part"
        );
    }

    /// Two directions of a link whose every transfer (any size) takes
    /// `cycle` ns one way, `held` of it the bus's alone.
    fn fixed(cycle: u64, held: u64) -> (UsbSerializer, UsbSerializer) {
        let (a, b) = parse_usb_link("hs:ecm").unwrap();
        let times = || TransferTimes {
            ns: vec![(cycle, held); MAX_PACKETS],
        };
        (
            UsbSerializer::with_times(&a, times()),
            UsbSerializer::with_times(&b, times()),
        )
    }

    /// Both directions always have a frame waiting: the end of each
    /// direction's `n`-th transfer.
    fn saturate(out: &mut UsbSerializer, inn: &mut UsbSerializer, n: usize) -> (u64, u64) {
        let (mut a, mut b) = (0, 0);
        for _ in 0..n {
            a = out.frame(0, 1500).1;
            b = inn.frame(0, 1500).1;
        }
        (a, b)
    }

    #[test]
    fn latency_bound_directions_overlap_and_the_bus_bounds_them_together() {
        // Hand-computed. A transfer's cycle is 100 us, 30 us of it the
        // bus's alone. One way: a transfer ends every 100 us (as the
        // model's one-way prediction says), so the 10th at 30 + 9 x 100 =
        // 930 us.
        let (mut out, _) = fixed(100_000, 30_000);
        let ends: Vec<u64> = (0..10).map(|_| out.frame(0, 1500).1).collect();
        assert_eq!(ends[0], 30_000);
        assert_eq!(ends[9], 930_000);
        // Both ways: OUT holds the bus 0-30, IN 30-60; OUT is ready again
        // at 30 + 70 = 100, IN at 60 + 70 = 130: each direction still ends
        // a transfer every 100 us (IN 30 us behind), so together they move
        // twice what one direction does alone.
        let (mut out, mut inn) = fixed(100_000, 30_000);
        let (a, b) = saturate(&mut out, &mut inn, 10);
        assert_eq!((a, b), (930_000, 960_000));
        // When the bus is the limit (60 us of 100): OUT 0-60, IN 60-120,
        // OUT ready at 100 but the bus is busy until 120: 120-180, IN
        // ready at 160, bus free at 180: 180-240 ... each direction ends
        // one every 120 us (two exclusive parts), the 10th OUT at 60 + 9 x
        // 120 = 1140 us, the 10th IN at 1200 us: 1.67 x one direction
        // alone in total, not 2.
        let (mut out, mut inn) = fixed(100_000, 60_000);
        let (a, b) = saturate(&mut out, &mut inn, 10);
        assert_eq!((a, b), (1_140_000, 1_200_000));
    }

    #[test]
    fn the_ecm_link_follows_the_bus_model_one_way_and_both_ways() {
        // Study 4's profile, 1514-byte frames (3 packets): the model
        // predicts 10,286 OUT transfers/s one way (`xferlab model usb -l
        // 1536 --dir out`) and 8,000 each way both ways (`--dir both`):
        // 1.56 x the one-way total, where serialized directions gave 1.
        let per_s = |ns: u64, n: u64| n as f64 * 1e9 / ns as f64;
        let n = 400;
        let (mut out, _) = link("hs:ecm");
        let one = (0..n).map(|_| out.frame(0, 1500).1).last().unwrap();
        let (mut out, mut inn) = link("hs:ecm");
        let (a, b) = saturate(&mut out, &mut inn, n as usize);
        let (one, a, b) = (per_s(one, n), per_s(a, n), per_s(b, n));
        assert!((one - 10_286.0).abs() < 300.0, "one way {one:.0}/s");
        for (dir, x) in [("out", a), ("in", b)] {
            assert!((x - 8_000.0).abs() < 300.0, "{dir} both ways {x:.0}/s");
        }
        assert!((a + b) / one > 1.4, "{a:.0} + {b:.0} against {one:.0}");
    }
}
