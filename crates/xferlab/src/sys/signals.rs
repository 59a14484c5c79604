//! The signals that ask xferlab to stop (Ctrl-C, SIGTERM, a closed
//! terminal), counted so a loop can tell the first (stop gracefully,
//! still exchange results) from the second (abort now).

use std::io::{self, Read};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU32, Ordering};

pub use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// From now on every delivery of one of `signals` adds 1 to `counter`.
///
/// signal-hook's handler writes one byte per delivery to a socket pair
/// and a background thread adds what it reads, so two signals in quick
/// succession count as two (its iterator would merge them).
pub fn count_into(counter: &'static AtomicU32, signals: &[i32]) -> io::Result<()> {
    let (mut rx, tx) = UnixStream::pair()?;
    for &s in signals {
        signal_hook::low_level::pipe::register(s, tx.try_clone()?)?;
    }
    std::thread::Builder::new()
        .name("xfer-signals".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            loop {
                match rx.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        counter.fetch_add(n as u32, Ordering::Relaxed);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return,
                }
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn each_delivery_counts_once_even_in_quick_succession() {
        static COUNT: AtomicU32 = AtomicU32::new(0);
        // SIGUSR2 is no one's in the test harness.
        count_into(&COUNT, &[signal_hook::consts::SIGUSR2]).unwrap();
        for _ in 0..3 {
            signal_hook::low_level::raise(signal_hook::consts::SIGUSR2).unwrap();
        }
        let t = Instant::now();
        while COUNT.load(Ordering::Relaxed) < 3 {
            assert!(t.elapsed() < Duration::from_secs(5), "counted {COUNT:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(COUNT.load(Ordering::Relaxed), 3);
    }
}
