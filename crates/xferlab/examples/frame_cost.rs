//! What the own USB link's per-frame user-space work costs: one copy of a
//! 1514-byte Ethernet frame and the Internet checksum of its 1480 bytes
//! of IP payload (`xferlab_core::csum`, the segmenter's). Run natively and
//! under QEMU's TCG (`qemu-x86_64`, as the lab VM executes guest code) by
//! `bench/frame-cost`; docs/usb-net.md compares it with the ~70 us per
//! frame by which the own ECM link costs more guest CPU than the kernel's.

use std::hint::black_box;
use std::time::Instant;

use xferlab_core::csum;

/// Repetitions per figure: ~0.1 s natively, ~0.2 s under TCG.
const ROUNDS: u32 = 200_000;

fn per_call_ns(mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..ROUNDS {
        f();
    }
    t.elapsed().as_nanos() as f64 / f64::from(ROUNDS)
}

fn main() {
    let frame: Vec<u8> = (0..1514u32).map(|i| (i * 7919 % 251) as u8).collect();
    let mut dst = vec![0u8; frame.len()];
    let copy = per_call_ns(|| {
        dst.copy_from_slice(black_box(&frame));
        black_box(&dst);
    });
    let sum = per_call_ns(|| {
        black_box(csum::fold(csum::sum(0, black_box(&frame[34..]))));
    });
    println!("copy_1514_ns {copy:.0}");
    println!("checksum_1480_ns {sum:.0}");
}
