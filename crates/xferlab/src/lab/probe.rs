//! A ping through the emulator before the test: small UDP probes from the
//! client namespace echoed in the server namespace, one at a time.

use anyhow::{anyhow, Context};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xferlab_core::link::report::RttProbe;

use super::netns;

pub const PROBE_PORT: u16 = 5299;

/// Sends `count` probes to `server`, each after the previous reply (or a
/// 1 s timeout), spaced `gap` apart.
pub fn measure(
    client_ns: &str,
    server_ns: &str,
    server: SocketAddr,
    count: u32,
    gap: Duration,
    expected_us: f64,
) -> anyhow::Result<RttProbe> {
    let stop = Arc::new(AtomicBool::new(false));
    let echo_stop = stop.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let echo = netns::spawn_in(netns::open(server_ns)?, "xl-echo", move || {
        let s = UdpSocket::bind(server).with_context(|| format!("probe echo bind {server}"))?;
        s.set_read_timeout(Some(Duration::from_millis(50))).ok();
        let _ = ready_tx.send(());
        let mut buf = [0u8; 64];
        while !echo_stop.load(Ordering::Relaxed) {
            if let Ok((n, from)) = s.recv_from(&mut buf) {
                let _ = s.send_to(&buf[..n], from);
            }
        }
        Ok(())
    })?;
    if ready_rx.recv_timeout(Duration::from_secs(5)).is_err() {
        stop.store(true, Ordering::Relaxed);
        return Err(echo
            .join()
            .map_err(|_| anyhow!("probe echo panicked"))?
            .err()
            .unwrap_or_else(|| anyhow!("probe echo did not start")));
    }
    let rtts = netns::run_in(client_ns, move || {
        let s = UdpSocket::bind("0.0.0.0:0").context("probe socket")?;
        s.connect(server).context("probe connect")?;
        s.set_read_timeout(Some(Duration::from_secs(1))).ok();
        let mut rtts = Vec::new();
        let mut buf = [0u8; 64];
        for seq in 0..count {
            let t0 = Instant::now();
            if s.send(&seq.to_be_bytes()).is_err() {
                continue;
            }
            // Skip late replies to earlier probes.
            while let Ok(n) = s.recv(&mut buf) {
                if n == 4 && buf[..4] == seq.to_be_bytes() {
                    rtts.push(t0.elapsed().as_secs_f64() * 1e6);
                    break;
                }
            }
            std::thread::sleep(gap);
        }
        Ok(rtts)
    });
    stop.store(true, Ordering::Relaxed);
    let _ = echo.join();
    let mut rtts = rtts?;
    rtts.sort_by(f64::total_cmp);
    let received = rtts.len() as u32;
    let pick = |i: usize| rtts.get(i).copied().unwrap_or(0.0);
    Ok(RttProbe {
        sent: count,
        received,
        min_us: pick(0),
        median_us: pick(rtts.len() / 2),
        max_us: rtts.last().copied().unwrap_or(0.0),
        expected_us,
    })
}
