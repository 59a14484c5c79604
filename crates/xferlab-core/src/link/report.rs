//! The `lab` section of a result: the topology, the link configuration
//! and the emulator's accuracy self-report with its verdict.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::config::{EcnMarking, LinkConfig, LossModel};
use super::stats::DirectionReport;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LabReport {
    pub topology: Topology,
    /// Client to server.
    pub c2s: LinkConfig,
    /// Server to client.
    pub s2c: LinkConfig,
    /// With `--chain`: the hops after the bottleneck (hop 2 first), each
    /// emulated on its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hops: Vec<HopLink>,
    pub accuracy: Accuracy,
}

/// One hop's two directions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HopLink {
    pub c2s: LinkConfig,
    pub s2c: LinkConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Topology {
    /// Host namespaces joined by the emulator: the client hosts, a router
    /// with `--router`, the server hosts.
    pub hosts: Vec<LabHost>,
    /// TSO/checksum offload on the TUN devices (GSO superpackets pass the
    /// emulator whole; rates still count per wire segment).
    pub offload: bool,
    /// With `offload`, UDP segmentation offload took too (Linux 6.2 on):
    /// UDP GSO sends (`--gso` of a datagram transport) pass whole as well.
    /// False where the kernel refused it, and in results from before it
    /// was recorded.
    #[serde(default)]
    pub udp_offload: bool,
    /// The forwarding threads ran under SCHED_FIFO.
    pub realtime: bool,
    /// Microseconds busy-waited before each departure instead of sleeping.
    pub spin_us: u64,
    /// The spin was derived from `timer_wakeup` (`--spin-us auto`).
    #[serde(default)]
    pub spin_auto: bool,
    /// How late this machine's timer wake-ups came at lab start, under the
    /// forwarders' scheduling; absent in results from before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timer_wakeup: Option<TimerWakeup>,
    /// Packet buffers per direction.
    pub buffers: u64,
    /// Where the forwarded packets were captured, if asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcap: Option<String>,
}

/// Overshoot of short timed sleeps (ppoll with no descriptors), measured
/// on a thread tuned as the forwarders are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimerWakeup {
    pub samples: u32,
    /// The sleep asked for each sample.
    pub sleep_us: u64,
    pub p50_us: f64,
    pub p99_us: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LabHost {
    /// `client`, `server` or `router`: the host's side of the bottleneck.
    pub role: String,
    /// The host's name (`client` and `server` unless named with --client,
    /// --server or a topology file; empty in results from before hosts
    /// had names).
    #[serde(default)]
    pub name: String,
    pub namespace: String,
    pub interface: String,
    pub address: String,
    /// The host's IPv6 address on the link (tests run over it with -6).
    pub address6: String,
    pub mtu: u32,
    /// Sysctls set in this namespace (`net.ipv4.tcp_sack` = `0`).
    pub sysctls: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Accuracy {
    pub c2s: DirectionAccuracy,
    pub s2c: DirectionAccuracy,
    /// With `--router`: the router's plain (unshaped) hop to the server;
    /// only unintended drops are judged there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_hop: Option<HopAccuracy>,
    /// With `--chain`: each hop after the bottleneck (hop 2 first). Its
    /// unintended drops are the bottleneck's (the hops share the devices);
    /// the receiver's CE count is on the bottleneck and covers every hop.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hops: Vec<HopAccuracy>,
    /// Round trip of small UDP probes through the emulator before the test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_probe: Option<RttProbe>,
    /// Share of all CPU time the hypervisor took (/proc/stat steal)
    /// while the forwarders ran, in percent; named in the violations when
    /// a timing target was missed ([`crate::steal`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_steal_percent: Option<f64>,
    /// False when any target below was missed: do not trust the run.
    pub valid: bool,
    /// True when every violation is a timing miss (departures late, the
    /// rate or the probe's RTT off target: what a loaded or stealing host
    /// causes) or the host's share of the blame for one; false when any
    /// is a fault of the emulation (drops nobody asked for, CE marks
    /// miscounted, losses outside their interval, probes lost, packets
    /// abandoned, an incomplete capture). True for a valid run; false in
    /// documents from before it was recorded.
    #[serde(default)]
    pub timing_only: bool,
    /// Each missed target, with numbers.
    pub violations: Vec<String>,
}

/// The self-check's misses as they are found: each one's line, and
/// whether it was a timing miss or a fault ([`Accuracy::timing_only`]).
#[derive(Debug, Default)]
pub struct Misses {
    lines: Vec<String>,
    timing: bool,
    fault: bool,
}

impl Misses {
    /// A timing target missed.
    pub fn timing(&mut self, line: String) {
        self.timing = true;
        self.lines.push(line);
    }

    /// Anything else missed.
    pub fn fault(&mut self, line: String) {
        self.fault = true;
        self.lines.push(line);
    }

    #[cfg(test)]
    fn lines(&self) -> &[String] {
        &self.lines
    }

    /// The verdict, with the host's share of the blame when a timing
    /// target was missed while the hypervisor took notable time
    /// ([`crate::steal::blame`]): (valid, timing_only, violations).
    pub fn verdict(mut self, host_steal_percent: Option<f64>) -> (bool, bool, Vec<String>) {
        self.lines
            .extend(crate::steal::blame(host_steal_percent, self.timing));
        (self.lines.is_empty(), !self.fault, self.lines)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HopAccuracy {
    pub c2s: DirectionAccuracy,
    pub s2c: DirectionAccuracy,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DirectionAccuracy {
    #[serde(flatten)]
    pub emulator: DirectionReport,
    /// Drops nobody asked for: the outgoing TUN device's TX drops (its
    /// queue overflowed) and packets the emulator could not take because
    /// its buffers were all in use.
    pub unintended_drops: UnintendedDrops,
    /// The receiving namespace's IpExtInCEPkts + Ip6InCEPkts delta over
    /// the lab run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver_in_ce_pkts: Option<i64>,
    /// Packets for no host of the receiving side (IPv6 multicast
    /// housekeeping, say) that were not forwarded. Not a fault.
    #[serde(default)]
    pub unroutable_packets: u64,
    /// The departure-lateness p99 this direction was judged against: 250
    /// us, or more where the path's packet time and round trip leave room
    /// ([`Targets::for_path`]). Absent for the router's plain hop and in
    /// results from before the budget fitted the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lateness_target_us: Option<f64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UnintendedDrops {
    /// The sending host's TUN device could not queue a packet for the
    /// emulator (its ring was full).
    pub tun_tx_dropped: u64,
    /// The receiving host's TUN device dropped a packet the emulator wrote.
    pub tun_rx_dropped: u64,
    pub buffer_exhausted: u64,
    pub write_errors: u64,
}

impl UnintendedDrops {
    pub fn total(&self) -> u64 {
        self.tun_tx_dropped + self.tun_rx_dropped + self.buffer_exhausted + self.write_errors
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RttProbe {
    pub sent: u32,
    pub received: u32,
    pub min_us: f64,
    pub median_us: f64,
    pub max_us: f64,
    /// Twice the configured one-way delays plus serialization of the probe.
    pub expected_us: f64,
}

/// What a run must hold to be valid.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Targets {
    /// Largest |achieved / configured - 1| over >= 1 s busy windows.
    pub rate_error: f64,
    pub lateness_p99_us: f64,
    /// Where `lateness_p99_us` came from, for the violation's text.
    pub lateness_basis: LatenessBasis,
}

/// The departure-lateness budget where the link leaves no room for more:
/// unshaped, USB-timed or trace-driven links, and shaped ones whose
/// packets take less than this to serialize or whose round trip is under
/// 12.5 ms. At 1 Gbit/s it is about 20 packet times.
pub const STRICT_LATENESS_P99_US: f64 = 250.0;

/// Share of the path's configured round trip a departure may add.
/// Lateness adds to that one packet's delay only (the schedule does not
/// slip: `Pipeline::pop_due` measures against each packet's own due time),
/// so with p99 under 2 % of the round trip, 99 % of the packets see the
/// round trip within 2 %, below the spread between repeats of any study in
/// scenarios/ (the ECN study's transactions/s vary by 10-40 % between
/// repeats of one cell).
const RTT_SHARE: f64 = 0.02;

/// Why a run's lateness budget is what it is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LatenessBasis {
    /// [`STRICT_LATENESS_P99_US`]: the link gives no room for more.
    Strict,
    /// One full-size packet's serialization time at the direction's
    /// slowest hop: a departure later than that can send two packets
    /// closer than the bottleneck would.
    PacketTime { bytes: u32, rate_bps: u64 },
    /// [`RTT_SHARE`] of the configured round trip, where that is below one
    /// packet time.
    RoundTrip { rtt_us: f64 },
}

impl Default for Targets {
    fn default() -> Self {
        Targets {
            rate_error: 0.005,
            lateness_p99_us: STRICT_LATENESS_P99_US,
            lateness_basis: LatenessBasis::Strict,
        }
    }
}

impl Targets {
    /// The targets that fit a path: `direction` is the hops one direction
    /// crosses (bottleneck first), `path` every hop of both directions
    /// (for the round trip), `mtu` the hosts' largest packet. The lateness
    /// budget is one full-size packet's time at the direction's slowest
    /// hop or 2 % of the round trip, whichever is smaller, and never below
    /// [`STRICT_LATENESS_P99_US`]: at 20 Mbit/s with 20 ms of round trip,
    /// 400 us; at 100 Mbit/s or on a back-to-back link, 250 us.
    pub fn for_path(direction: &[&LinkConfig], path: &[&LinkConfig], mtu: u32) -> Targets {
        let strict = Targets::default();
        // A hop timed by USB frames or by a trace has no one packet time.
        if direction
            .iter()
            .any(|c| c.usb.is_some() || c.trace.is_some())
        {
            return strict;
        }
        let Some(slowest) = direction.iter().filter_map(|c| c.rate_bps).min() else {
            return strict;
        };
        let overhead = direction
            .iter()
            .map(|c| c.overhead_bytes)
            .max()
            .unwrap_or(0);
        let bytes = mtu + overhead;
        let packet_us = f64::from(bytes) * 8.0 / slowest as f64 * 1e6;
        let rtt_us = path.iter().map(|c| c.delay_ns as f64 / 1e3).sum::<f64>();
        let (us, basis) = if packet_us <= rtt_us * RTT_SHARE {
            (
                packet_us,
                LatenessBasis::PacketTime {
                    bytes,
                    rate_bps: slowest,
                },
            )
        } else {
            (rtt_us * RTT_SHARE, LatenessBasis::RoundTrip { rtt_us })
        };
        if us <= STRICT_LATENESS_P99_US {
            return strict;
        }
        Targets {
            lateness_p99_us: us,
            lateness_basis: basis,
            ..strict
        }
    }

    /// The lateness target as a violation names it.
    pub fn lateness_target(&self) -> String {
        let us = self.lateness_p99_us;
        match self.lateness_basis {
            LatenessBasis::Strict => format!("target <= {us:.0} us"),
            LatenessBasis::PacketTime { bytes, rate_bps } => format!(
                "target <= {us:.0} us, one {bytes} B packet at {}",
                crate::units::RateUnit::AutoBits.format_rate(rate_bps as f64)
            ),
            LatenessBasis::RoundTrip { rtt_us } => format!(
                "target <= {us:.0} us, 2 % of the {:.1} ms round trip",
                rtt_us / 1e3
            ),
        }
    }
}

/// z for a two-sided 99 % interval.
const Z99: f64 = 2.576;

/// Checks one direction against the targets; adds each miss, the rate
/// and departure lateness as timing misses, the rest as faults.
pub fn judge_direction(
    name: &str,
    cfg: &LinkConfig,
    acc: &DirectionAccuracy,
    targets: &Targets,
    out: &mut Misses,
) {
    let r = &acc.emulator;
    let k = &r.counters;
    if let (Some(lo), Some(hi)) = (r.rate_ratio_min, r.rate_ratio_max) {
        let worst = (lo - 1.0).abs().max((hi - 1.0).abs());
        if worst > targets.rate_error {
            out.timing(format!(
                "{name}: achieved rate off by up to {:.2} % over 1 s windows (target +-{:.1} %; ratio {lo:.4}..{hi:.4})",
                worst * 100.0,
                targets.rate_error * 100.0
            ));
        }
    }
    if let Some(p99) = r.lateness_p99_us {
        if p99 > targets.lateness_p99_us {
            out.timing(format!(
                "{name}: departure lateness p99 {p99:.0} us ({})",
                targets.lateness_target()
            ));
        }
    }
    let u = acc.unintended_drops;
    if u.total() > 0 {
        out.fault(format!(
            "{name}: {} unintended drops (TUN TX {}, TUN RX {}, buffers exhausted {}, write errors {})",
            u.total(),
            u.tun_tx_dropped,
            u.tun_rx_dropped,
            u.buffer_exhausted,
            u.write_errors
        ));
    }
    if let (EcnMarking::Fixed { .. } | EcnMarking::Red { .. }, Some(seen)) =
        (cfg.ecn, acc.receiver_in_ce_pkts)
    {
        // The receiver counts a GSO superpacket written to its TUN device
        // as one packet (gso_segs is not set yet), so packets compare.
        if seen != k.marked_packets as i64 {
            out.fault(format!(
                "{name}: {} CE marks applied but the receiver counted {seen} (IpExtInCEPkts + Ip6InCEPkts)",
                k.marked_packets
            ));
        }
    }
    let n = k.arrived_packets as f64;
    if let (true, Some((lo, hi))) = (n >= 1000.0, gilbert_elliott_interval(n, &cfg.loss)) {
        let lost = k.dropped_loss_packets as f64;
        if lost < lo || lost > hi {
            out.fault(format!(
                "{name}: {lost} of {n} packets lost by the Gilbert-Elliott model, outside the 99 % interval [{lo:.0}, {hi:.0}] (mean {:.4})",
                cfg.loss.mean_loss()
            ));
        }
    }
    if let LossModel::Bernoulli { p } = cfg.loss {
        if n >= 100.0 {
            let (lo, hi) = binomial_interval(n, p);
            let lost = k.dropped_loss_packets as f64;
            if lost < lo || lost > hi {
                out.fault(format!(
                    "{name}: {lost} of {n} packets lost by the model, outside the 99 % interval [{lo:.0}, {hi:.0}] for p = {p}"
                ));
            }
        }
    }
}

/// 99 % interval of the loss count of a Gilbert-Elliott chain over `n`
/// packets: the binomial one widened by the chain's correlation
/// (variance x (1 + l) / (1 - l), l = 1 - p - r).
pub fn gilbert_elliott_interval(n: f64, model: &LossModel) -> Option<(f64, f64)> {
    let LossModel::GilbertElliott { p, r, .. } = *model else {
        return None;
    };
    let mean = model.mean_loss();
    let l = 1.0 - p - r;
    if !(p > 0.0 && r > 0.0 && l < 1.0) {
        return None;
    }
    let sd = (n * mean * (1.0 - mean) * (1.0 + l) / (1.0 - l)).sqrt();
    Some((
        (n * mean - Z99 * sd - 0.5).max(0.0),
        n * mean + Z99 * sd + 0.5,
    ))
}

/// Two-sided 99 % interval of a binomial count (normal approximation with
/// continuity correction).
pub fn binomial_interval(n: f64, p: f64) -> (f64, f64) {
    let sd = (n * p * (1.0 - p)).sqrt();
    ((n * p - Z99 * sd - 0.5).max(0.0), n * p + Z99 * sd + 0.5)
}

#[cfg(test)]
mod tests {
    use super::super::stats::LinkCounters;
    use super::*;

    fn acc() -> DirectionAccuracy {
        DirectionAccuracy {
            emulator: DirectionReport {
                counters: LinkCounters::default(),
                lateness_samples: 10,
                lateness_p50_us: Some(10.0),
                lateness_p99_us: Some(80.0),
                lateness_p999_us: Some(200.0),
                lateness_max_us: Some(900.0),
                rate_bps: Some(100_000_000),
                rate_windows: 3,
                rate_ratio_min: Some(0.998),
                rate_ratio_max: Some(1.001),
                rate_ratio_mean: Some(0.999),
                sojourn_samples: 0,
                sojourn_mean_us: None,
                sojourn_p99_us: None,
                fq_flows: None,
            },
            unintended_drops: UnintendedDrops::default(),
            receiver_in_ce_pkts: Some(0),
            unroutable_packets: 0,
            lateness_target_us: None,
        }
    }

    #[test]
    fn a_clean_run_passes_and_each_miss_is_named() {
        let cfg = LinkConfig::default();
        let mut v = Misses::default();
        judge_direction("c2s", &cfg, &acc(), &Targets::default(), &mut v);
        assert!(v.lines().is_empty(), "{v:?}");
        let mut bad = acc();
        bad.emulator.rate_ratio_max = Some(1.01);
        bad.emulator.lateness_p99_us = Some(400.0);
        bad.unintended_drops.tun_tx_dropped = 3;
        let cfg = LinkConfig {
            ecn: EcnMarking::Fixed {
                p: 0.05,
                drop_not_ect: false,
            },
            ..LinkConfig::default()
        };
        bad.emulator.counters.marked_packets = 5;
        judge_direction("c2s", &cfg, &bad, &Targets::default(), &mut v);
        let l = v.lines();
        assert_eq!(l.len(), 4, "{v:?}");
        assert!(
            l[0].contains("rate")
                && l[1].contains("lateness")
                && l[2].contains("unintended")
                && l[3].contains("CE")
        );
        let (valid, timing_only, lines) = v.verdict(Some(20.0));
        assert!(!valid && !timing_only, "drops and CE counts are faults");
        assert!(lines[4].starts_with("host:"), "{lines:?}");
    }

    #[test]
    fn timing_misses_alone_are_timing_only_and_blame_a_stealing_host() {
        let mut late = acc();
        late.emulator.lateness_p99_us = Some(900.0);
        let judged = |steal| {
            let mut v = Misses::default();
            judge_direction(
                "c2s",
                &LinkConfig::default(),
                &late,
                &Targets::default(),
                &mut v,
            );
            v.verdict(steal)
        };
        let (valid, timing_only, lines) = judged(Some(0.2));
        assert!(!valid && timing_only, "{lines:?}");
        assert_eq!(lines.len(), 1, "no blame below the notable steal");
        let (_, timing_only, lines) = judged(Some(12.0));
        assert!(timing_only && lines[1].starts_with("host:"), "{lines:?}");
        assert_eq!(Misses::default().verdict(Some(50.0)), (true, true, vec![]));
    }

    fn link(rate: Option<u64>, delay_ms: u64) -> LinkConfig {
        LinkConfig {
            rate_bps: rate,
            delay_ns: delay_ms * 1_000_000,
            ..LinkConfig::default()
        }
    }

    #[test]
    fn the_lateness_budget_fits_the_path() {
        // The ECN study: 20M/6 ms then two 100M/2 ms hops, both ways: a
        // 1500 B packet takes 600 us at 20M, 2 % of the 20 ms round trip is
        // 400 us; the smaller wins.
        let (a, b, c) = (
            link(Some(20_000_000), 6),
            link(Some(100_000_000), 2),
            link(Some(100_000_000), 2),
        );
        let dir = [&a, &b, &c];
        let path = [&a, &b, &c, &a, &b, &c];
        let t = Targets::for_path(&dir, &path, 1500);
        assert!((t.lateness_p99_us - 400.0).abs() < 1e-9, "{t:?}");
        assert_eq!(
            t.lateness_basis,
            LatenessBasis::RoundTrip { rtt_us: 20_000.0 }
        );
        assert_eq!(t.rate_error, Targets::default().rate_error);
        assert!(t.lateness_target().contains("20.0 ms round trip"));
        // A long path at 20M: the packet time (600 us) is the smaller.
        let slow = link(Some(20_000_000), 20);
        let t = Targets::for_path(&[&slow], &[&slow, &slow], 1500);
        assert!((t.lateness_p99_us - 600.0).abs() < 1e-9, "{t:?}");
        assert!(t
            .lateness_target()
            .contains("one 1500 B packet at 20.0 Mbits/sec"));
        // Strict where the link gives no room: 100M/40 ms (a packet is
        // 120 us), 20M back to back, unshaped, USB-timed.
        for (d, p) in [
            (link(Some(100_000_000), 20), 1500),
            (link(Some(20_000_000), 0), 1500),
            (link(None, 50), 1500),
        ] {
            let t = Targets::for_path(&[&d], &[&d, &d], p);
            assert_eq!(t, Targets::default(), "{d:?}");
        }
        let usb = LinkConfig {
            usb: Some(super::super::usb::parse_usb_link("hs:ecm").unwrap().0),
            ..link(Some(1_000_000), 50)
        };
        assert_eq!(
            Targets::for_path(&[&usb], &[&usb], 1500),
            Targets::default()
        );
        // A late departure inside the budget passes, one past it is named
        // with the budget's reason.
        let t = Targets::for_path(&dir, &path, 1500);
        let mut late = acc();
        late.emulator.lateness_p99_us = Some(380.0);
        let mut v = Misses::default();
        judge_direction("c2s", &a, &late, &t, &mut v);
        assert!(v.lines().is_empty(), "{v:?}");
        late.emulator.lateness_p99_us = Some(420.0);
        judge_direction("c2s", &a, &late, &t, &mut v);
        assert!(
            v.lines()[0].contains("(target <= 400 us, 2 % of the 20.0 ms round trip)"),
            "{v:?}"
        );
    }

    #[test]
    fn loss_outside_the_interval_is_flagged() {
        let cfg = LinkConfig {
            loss: LossModel::Bernoulli { p: 0.01 },
            ..LinkConfig::default()
        };
        let mut a = acc();
        a.emulator.counters.arrived_packets = 10_000;
        a.emulator.counters.dropped_loss_packets = 100;
        let mut v = Misses::default();
        judge_direction("c2s", &cfg, &a, &Targets::default(), &mut v);
        assert!(v.lines().is_empty(), "{v:?}");
        a.emulator.counters.dropped_loss_packets = 140;
        judge_direction("c2s", &cfg, &a, &Targets::default(), &mut v);
        assert_eq!(v.lines().len(), 1);
        assert!(
            !v.verdict(None).1,
            "a loss count off its interval is a fault"
        );
    }
}
