//! The kernel's floor for one UDP flow over loopback: a bare sendmmsg loop
//! (32 datagrams per call, one connected socket, nothing written into the
//! datagrams) on one CPU, and a bare recvmmsg loop (32 per call, 4 MiB
//! receive buffer, no time stamps, a 100 us sleep when the queue is
//! empty) on another. No program that sends through the socket API one
//! flow at a time can do much better on this machine, so
//! `bench/udp-vs-iperf3` runs it beside the tools and prints how close
//! xferlab comes and what ratio against iperf3 the machine allows at all.
//!
//! `udp_floor SIZE SECONDS [stamps] [rxq-ovfl]` prints `sent_pps`,
//! `received_pps` and `pinned` (`yes` when sender and receiver each had a
//! CPU of their own). `stamps` has the receiver ask for SO_TIMESTAMPNS and
//! `rxq-ovfl` for SO_RXQ_OVFL, the two options whose per-datagram cost
//! made xferlab's UDP receiver stop asking for them by default (see
//! `transport/datagram.rs`).

use std::mem::{size_of, zeroed};
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PER_CALL: usize = 32;
/// Control bytes per datagram: a timespec and a drop count, each with its
/// cmsghdr, fit.
const CTRL_LEN: usize = 64;

fn usage() -> ! {
    eprintln!(
        "usage: udp_floor SIZE SECONDS [stamps] [rxq-ovfl] (SIZE 1-65507 bytes, SECONDS 0.1-60)"
    );
    std::process::exit(2)
}

/// Sets an int socket option, or says which one the kernel refused.
fn set_opt(sock: &UdpSocket, opt: libc::c_int, value: libc::c_int) -> bool {
    // SAFETY: plain int option on an open socket.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// Pins the calling thread to `cpu`; false if the kernel refuses.
fn pin(cpu: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET writes within it.
    unsafe {
        let mut set: libc::cpu_set_t = zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// The CPUs this process may run on.
fn usable_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills the zeroed set it is given.
    unsafe {
        let mut set: libc::cpu_set_t = zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// One mmsghdr per buffer of `size` bytes in `bufs`.
fn headers(bufs: &mut [u8], size: usize, iovs: &mut Vec<libc::iovec>) -> Vec<libc::mmsghdr> {
    iovs.clear();
    for chunk in bufs.chunks_mut(size) {
        iovs.push(libc::iovec {
            iov_base: chunk.as_mut_ptr().cast(),
            iov_len: size,
        });
    }
    iovs.iter_mut()
        .map(|iov| {
            // SAFETY: an all-zero mmsghdr is valid (no name, no control).
            let mut m: libc::mmsghdr = unsafe { zeroed() };
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (size, seconds, extra) = match args.as_slice() {
        [s, t, extra @ ..] => match (s.parse::<usize>(), t.parse::<f64>()) {
            (Ok(s), Ok(t)) if (1..=65_507).contains(&s) && (0.1..=60.0).contains(&t) => {
                (s, t, extra)
            }
            _ => usage(),
        },
        _ => usage(),
    };
    let rx = UdpSocket::bind("127.0.0.1:0").expect("bind a loopback UDP socket");
    if !set_opt(&rx, libc::SO_RCVBUFFORCE, 4 << 20) {
        set_opt(&rx, libc::SO_RCVBUF, 4 << 20);
    }
    for opt in extra {
        let (name, o) = match opt.as_str() {
            "stamps" => ("SO_TIMESTAMPNS", libc::SO_TIMESTAMPNS),
            "rxq-ovfl" => ("SO_RXQ_OVFL", libc::SO_RXQ_OVFL),
            _ => usage(),
        };
        if !set_opt(&rx, o, 1) {
            eprintln!("udp_floor: the kernel refused {name}");
            std::process::exit(1);
        }
    }
    rx.set_nonblocking(true).expect("non-blocking receiver");
    let tx = UdpSocket::bind("127.0.0.1:0").expect("bind a loopback UDP socket");
    tx.connect(rx.local_addr().unwrap()).expect("connect");

    let cpus = usable_cpus();
    let pinned = cpus.len() >= 2;
    let done = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let receiver = {
        let (done, received) = (done.clone(), received.clone());
        let cpu = cpus.get(1).copied();
        std::thread::spawn(move || {
            if let (true, Some(c)) = (pinned, cpu) {
                pin(c);
            }
            let mut bufs = vec![0u8; size * PER_CALL];
            let mut iovs = Vec::with_capacity(PER_CALL);
            let mut msgs = headers(&mut bufs, size, &mut iovs);
            // Room for the control messages the options ask for, as
            // xferlab's receiver has (without it the kernel skips them).
            let mut ctrl = vec![0u8; CTRL_LEN * PER_CALL];
            for (m, c) in msgs.iter_mut().zip(ctrl.chunks_mut(CTRL_LEN)) {
                m.msg_hdr.msg_control = c.as_mut_ptr().cast();
            }
            let mut n = 0u64;
            // Drains until the sender stopped and the queue is empty.
            loop {
                for m in msgs.iter_mut() {
                    m.msg_hdr.msg_controllen = CTRL_LEN as _;
                }
                // SAFETY: msgs point at live iovecs and buffers.
                let r = unsafe {
                    libc::recvmmsg(
                        rx.as_raw_fd(),
                        msgs.as_mut_ptr(),
                        PER_CALL as libc::c_uint,
                        libc::MSG_DONTWAIT,
                        std::ptr::null_mut(),
                    )
                };
                if r > 0 {
                    n += r as u64;
                } else if done.load(Ordering::Relaxed) {
                    break;
                } else {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            received.store(n, Ordering::Relaxed);
        })
    };
    if pinned {
        pin(cpus[0]);
    }
    let mut bufs: Vec<u8> = (0..size * PER_CALL).map(|i| (i % 251) as u8).collect();
    let mut iovs = Vec::with_capacity(PER_CALL);
    let mut msgs = headers(&mut bufs, size, &mut iovs);
    let run = Duration::from_secs_f64(seconds);
    let t0 = Instant::now();
    let mut sent = 0u64;
    let elapsed = loop {
        let e = t0.elapsed();
        if e >= run {
            break e;
        }
        // SAFETY: msgs point at live iovecs and buffers.
        let r = unsafe {
            libc::sendmmsg(
                tx.as_raw_fd(),
                msgs.as_mut_ptr(),
                PER_CALL as libc::c_uint,
                0,
            )
        };
        if r > 0 {
            sent += r as u64;
        }
    };
    // Let the receiver drain what is queued, then stop it.
    std::thread::sleep(Duration::from_millis(50));
    done.store(true, Ordering::Relaxed);
    receiver.join().expect("receiver thread");
    let secs = elapsed.as_secs_f64();
    println!("sent_pps {:.0}", sent as f64 / secs);
    println!(
        "received_pps {:.0}",
        received.load(Ordering::Relaxed) as f64 / secs
    );
    println!("pinned {}", if pinned { "yes" } else { "no" });
}
