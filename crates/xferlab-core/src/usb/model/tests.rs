//! The model against hand-computed cases and the analyzer facts of study 4
//! it is calibrated on.

use super::*;

fn run(profile: &str, size: u32, depth: u32, dir: &str) -> Prediction {
    let p = Profiles::builtin().resolve(profile).unwrap();
    let w = Workload {
        size,
        depth,
        bulk_in: dir != "out",
        bulk_out: dir != "in",
        device_depth: None,
        periodic: None,
    };
    predict(&p, &w, Window::default())
}

/// `profile` with a periodic endpoint, beside bulk IN of `bulk` bytes per
/// transfer (2 in flight) or alone.
fn run_periodic(profile: &str, per: Periodic, bulk: Option<u32>) -> Prediction {
    let p = Profiles::builtin().resolve(profile).unwrap();
    per.check(p.phy.speed).unwrap();
    let w = Workload {
        size: bulk.unwrap_or(0),
        depth: 2,
        bulk_in: bulk.is_some(),
        bulk_out: false,
        device_depth: None,
        periodic: Some(per),
    };
    predict(&p, &w, Window::default())
}

fn iso_in(size: u32, mult: u32, interval: u32) -> Periodic {
    Periodic {
        kind: PeriodicKind::Isochronous,
        out: false,
        size,
        mult,
        interval,
    }
}

#[test]
fn a_high_bandwidth_isochronous_endpoint_moves_three_packets_per_microframe() {
    // 3 x 1024 bytes every 125 us: 24.576 MB/s, the most one high-speed
    // periodic endpoint can move (USB 2.0 section 5.6.3).
    let r = run_periodic("wire", iso_in(1024, 3, 1), None);
    let per = r.periodic.as_ref().unwrap();
    assert_eq!(per.throughput_bps, 3.0 * 1024.0 * 8000.0 * 8.0);
    assert_eq!(per.transactions_per_s, 24_000.0);
    assert_eq!(r.throughput_bps, per.throughput_bps);
    // Token and data, no handshake: (153 + 8409) bit times each, 3 of them
    // in 60000: 42.8 %.
    assert!((per.frame_percent - 42.81).abs() < 0.01, "{per:?}");
    // Every other microframe halves it.
    let half = run_periodic("wire", iso_in(1024, 3, 2), None);
    assert_eq!(half.throughput_bps, per.throughput_bps / 2.0);
}

#[test]
fn bulk_beside_an_isochronous_stream_gets_what_is_left_of_each_microframe() {
    // 60000 bit times - 185 SOF - 3 x 8562 isochronous = 34129, room for
    // 7 bulk transactions of 4571 (13 without the stream).
    let r = run_periodic("wire", iso_in(1024, 3, 1), Some(65536));
    assert_eq!(pipe(&r, "in").throughput_bps, 7.0 * 512.0 * 8000.0 * 8.0);
    assert_eq!(r.transactions_per_frame, 10.0);
    let sum = percent_sum(&r.breakdown);
    assert!((sum - 100.0).abs() < 1e-9, "{sum}");
}

#[test]
fn a_full_speed_interrupt_endpoint_polled_every_8_frames() {
    // 64 bytes every 8 ms: 64 kbit/s, on the OHCI profile's host gaps.
    let per = Periodic {
        kind: PeriodicKind::Interrupt,
        out: true,
        size: 64,
        mult: 1,
        interval: 8,
    };
    let r = run_periodic("mcu-fs", per, None);
    let p = r.periodic.as_ref().unwrap();
    assert_eq!((p.dir, p.throughput_bps), ("out", 64_000.0));
    assert_eq!(p.transactions_per_s, 125.0);
}

#[test]
fn periodic_endpoints_outside_the_spec_are_refused_with_the_limit() {
    let hs = Speed::High;
    let fs = Speed::Full;
    let int = |size, mult, interval| Periodic {
        kind: PeriodicKind::Interrupt,
        ..iso_in(size, mult, interval)
    };
    for (per, speed, says) in [
        (iso_in(1025, 1, 1), hs, "1 to 1024 bytes"),
        (iso_in(1024, 4, 1), hs, "1 to 3 transactions"),
        (iso_in(512, 2, 1), hs, "513-1024 bytes"),
        (iso_in(682, 3, 1), hs, "683-1024 bytes"),
        (iso_in(1024, 1, 3), hs, "2^(bInterval-1)"),
        (iso_in(1024, 1, 1), fs, "1 to 1023 bytes"),
        (iso_in(1023, 2, 1), fs, "one transaction per frame"),
        (int(65, 1, 1), fs, "1 to 64 bytes"),
        (int(64, 1, 256), fs, "every 1 to 255 frames"),
    ] {
        let err = per.check(speed).unwrap_err().to_string();
        assert!(err.contains(says), "{per:?}: {err}");
    }
    for (per, speed) in [
        (iso_in(1024, 3, 1), hs),
        (iso_in(683, 3, 8), hs),
        (int(1024, 1, 32_768), hs),
        (iso_in(1023, 1, 1), fs),
        (int(64, 1, 10), fs),
    ] {
        assert_eq!(per.check(speed), Ok(()), "{per:?}");
    }
}

/// The shares of the window, which must add up to 100 %.
fn percent_sum(b: &Breakdown) -> f64 {
    b.wire_payload.percent
        + b.wire_overhead.percent
        + b.device_latency.percent
        + b.host_gap.percent
        + b.host_turnaround.percent
        + b.idle.percent
}

fn pipe<'a>(r: &'a Prediction, dir: &str) -> &'a PipePrediction {
    r.pipes.iter().find(|p| p.dir == dir).unwrap()
}

#[test]
fn thirteen_512_byte_transactions_fit_a_microframe_on_an_ideal_host() {
    // Only the wire: 13 x 512 bytes per 125 us microframe (USB 2.0 table
    // 5-10) = 53.248 MB/s = 425.984 Mbit/s, in every microframe.
    let r = run("wire", 65536, 2, "in");
    assert_eq!(r.transactions_per_frame, 13.0);
    assert_eq!(r.throughput_bps, 13.0 * 512.0 * 8000.0 * 8.0);
    // What is left of each microframe after SOF and 13 transactions
    // (60000 bit times - 185 SOF - 13 x 4571) is frame-end idle: 392 bit
    // times, 0.65 %.
    assert!((r.breakdown.idle.percent - 0.653).abs() < 0.001, "{r:?}");
}

#[test]
fn the_breakdown_accounts_for_every_microsecond() {
    for (profile, dir, q) in [
        ("study4", "in", 32),
        ("study4", "both", 1),
        ("musb", "out", 32),
        ("mcu-fs-hub", "in", 4),
    ] {
        let sum = percent_sum(&run(profile, 16384, q, dir).breakdown);
        assert!((sum - 100.0).abs() < 1e-9, "{profile} {dir}: {sum}");
    }
}

#[test]
fn reproduces_the_study_4_capture_it_is_calibrated_on() {
    // Queued host (libusb async, 32 transfers), gadget with blocking I/O:
    // the configuration of the analyzer capture.
    let r = run("study4", 65536, 32, "in");
    let p = pipe(&r, "in");
    // "~5 us between ACK and the next host request".
    assert_eq!(p.first_token_after_transfer_us, Some(5.0));
    // "~6.6 us lost between transactions" within a transfer: the mean is a
    // little more, as some transactions wait out a microframe's end.
    let within = p.gap_in_transfer_us.unwrap();
    assert!((6.6..7.3).contains(&within), "{within}");
    // "NAKs for ~41 us after each transfer": the last NAK poll lands up to
    // one poll (0.6 us on the wire + 6.6 us gap) after the device is ready.
    let naks = p.nak_span_us.unwrap();
    assert!((41.0..41.0 + 7.3).contains(&naks), "{naks}");
    // "~39.4 us lost between transfers, versus ~6.6 within".
    let lost = p.gap_between_transfers_us.unwrap() - within;
    assert!((lost - 39.4).abs() < 3.0, "{lost}");
}

#[test]
fn synchronous_small_transfers_manage_one_per_microframe() {
    // The study's question: a few Mbit/s instead of hundreds. A
    // synchronous host sees each completion at the next microframe's
    // interrupt, so 64-byte transfers run at 8000/s = 4.1 Mbit/s.
    let r = run("study4", 64, 1, "out");
    assert_eq!(r.transfers_per_s, 8000.0);
    assert_eq!(r.throughput_bps, 64.0 * 8.0 * 8000.0);
    // Queueing 32 and large transfers are the levers.
    let queued = run("study4-aio", 65536, 32, "in").throughput_bps;
    assert!(queued > 50.0 * r.throughput_bps, "{queued}");
    assert!(run("study4", 65536, 1, "in").throughput_bps > 200e6);
}

#[test]
fn musb_out_gains_nothing_from_large_transfers() {
    // One DMA per OUT packet (study 4): OUT is capped per transaction, so
    // 64 KiB moves no faster than 4 KiB, while IN keeps gaining.
    let out4k = run("musb", 4096, 32, "out").throughput_bps;
    let out64k = run("musb", 65536, 32, "out").throughput_bps;
    assert!((out64k / out4k - 1.0).abs() < 0.03, "{out4k} {out64k}");
    let in64k = run("musb", 65536, 32, "in").throughput_bps;
    assert!(in64k > 2.0 * out64k, "{in64k} {out64k}");
}

#[test]
fn full_speed_moves_about_a_megabyte_a_second() {
    // 64-byte packets, 1 ms frames: at most 19 a frame on the wire, 17
    // with the host's 6.6 us between transactions (51.3 + 6.6 us each).
    let direct = run("mcu-fs", 65536, 4, "in");
    assert_eq!(direct.max_packet, 64);
    assert!((16.5..=17.0).contains(&direct.transactions_per_frame));
    // Behind a hub's TT with two buffers the split transactions overlap
    // the full-speed segment, so the hub costs no throughput here.
    let hub = run("mcu-fs-hub", 65536, 4, "in");
    assert!(hub.hub_tt && !direct.hub_tt);
    assert!((hub.throughput_bps / direct.throughput_bps - 1.0).abs() < 0.02);
}

#[test]
fn both_directions_share_one_bus() {
    let one = run("fifo", 65536, 32, "in").throughput_bps;
    let both = run("fifo", 65536, 32, "both");
    assert!(
        both.throughput_bps < 1.05 * one,
        "{} {one}",
        both.throughput_bps
    );
    let (i, o) = (
        pipe(&both, "in").throughput_bps,
        pipe(&both, "out").throughput_bps,
    );
    assert!(
        (i / o - 1.0).abs() < 0.02,
        "round-robin shares evenly: {i} {o}"
    );
}

#[test]
fn the_model_is_deterministic() {
    assert_eq!(
        run("study4", 4096, 8, "both"),
        run("study4", 4096, 8, "both")
    );
}
