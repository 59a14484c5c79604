//! TCP_INFO of one socket: the kernel's own view of a connection (RTT,
//! congestion window, delivery rate, and why the sender was limited).
//!
//! Called once per interval per flow from the sampler thread, so it reads
//! into a stack buffer and never allocates.

use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::BorrowedFd;

use xferlab_core::result::TcpCounters;
use xferlab_sys::sockopt::Get;

/// Mirror of `struct tcp_info` from linux/tcp.h up to `tcpi_rcv_wnd`
/// (Linux 6.2), for its offsets. Later kernels append fields; earlier ones
/// return a shorter prefix, which is why [`decode`] checks every field
/// against the length the kernel actually wrote. Fields xferlab does not
/// report stay because they fix the offsets of the ones it does.
#[repr(C)]
#[allow(dead_code)]
#[derive(Debug, Default, Clone, Copy)]
struct TcpInfo {
    tcpi_state: u8,
    tcpi_ca_state: u8,
    tcpi_retransmits: u8,
    tcpi_probes: u8,
    tcpi_backoff: u8,
    tcpi_options: u8,
    /// C bitfields `tcpi_snd_wscale:4, tcpi_rcv_wscale:4`.
    tcpi_wscale: u8,
    /// C bitfields `tcpi_delivery_rate_app_limited:1,
    /// tcpi_fastopen_client_fail:2`.
    tcpi_app_limited_fastopen: u8,

    tcpi_rto: u32,
    tcpi_ato: u32,
    tcpi_snd_mss: u32,
    tcpi_rcv_mss: u32,

    tcpi_unacked: u32,
    tcpi_sacked: u32,
    tcpi_lost: u32,
    tcpi_retrans: u32,
    tcpi_fackets: u32,

    tcpi_last_data_sent: u32,
    tcpi_last_ack_sent: u32,
    tcpi_last_data_recv: u32,
    tcpi_last_ack_recv: u32,

    tcpi_pmtu: u32,
    tcpi_rcv_ssthresh: u32,
    tcpi_rtt: u32,
    tcpi_rttvar: u32,
    tcpi_snd_ssthresh: u32,
    tcpi_snd_cwnd: u32,
    tcpi_advmss: u32,
    tcpi_reordering: u32,

    tcpi_rcv_rtt: u32,
    tcpi_rcv_space: u32,

    tcpi_total_retrans: u32,

    tcpi_pacing_rate: u64,
    tcpi_max_pacing_rate: u64,
    tcpi_bytes_acked: u64,
    tcpi_bytes_received: u64,
    tcpi_segs_out: u32,
    tcpi_segs_in: u32,

    tcpi_notsent_bytes: u32,
    tcpi_min_rtt: u32,
    tcpi_data_segs_in: u32,
    tcpi_data_segs_out: u32,

    tcpi_delivery_rate: u64,

    tcpi_busy_time: u64,
    tcpi_rwnd_limited: u64,
    tcpi_sndbuf_limited: u64,

    tcpi_delivered: u32,
    tcpi_delivered_ce: u32,

    tcpi_bytes_sent: u64,
    tcpi_bytes_retrans: u64,
    tcpi_dsack_dups: u32,
    tcpi_reord_seen: u32,

    tcpi_rcv_ooopack: u32,

    tcpi_snd_wnd: u32,
    tcpi_rcv_wnd: u32,
}

/// Bytes of `struct tcp_info` as this build knows it (the kernel may
/// write fewer or, when asked for more, more).
pub const TCP_INFO_LEN: usize = size_of::<TcpInfo>();

/// Reads TCP_INFO of the TCP socket `fd`.
///
/// Fields the running kernel does not provide read as 0 (busy/limited
/// times need Linux >= 4.10, `delivered_ce` >= 4.18).
///
/// A plain getsockopt (xferlab-sys): neither rustix nor nix reads
/// TCP_INFO, and this struct carries fields (delivered_ce, busy times)
/// libc's lacks.
pub fn read(fd: BorrowedFd<'_>) -> io::Result<TcpCounters> {
    let mut raw = [0u8; TCP_INFO_LEN];
    let len = xferlab_sys::sockopt::get_bytes(fd, Get::TcpInfo, &mut raw)?;
    Ok(decode(&raw[..len]))
}

/// The fields xferlab reports from a `struct tcp_info` as the kernel
/// wrote it into `raw` (by TCP_INFO, or as one element of another call's
/// array, such as an MPTCP socket's subflows): any field that does not lie
/// entirely within `raw` reads as 0.
pub fn decode(raw: &[u8]) -> TcpCounters {
    macro_rules! field {
        ($name:ident: $t:ty) => {{
            let at = offset_of!(TcpInfo, $name);
            raw.get(at..at + size_of::<$t>())
                .and_then(|b| b.try_into().ok())
                .map_or(0, <$t>::from_ne_bytes)
        }};
    }
    TcpCounters {
        rtt_us: field!(tcpi_rtt: u32),
        rttvar_us: field!(tcpi_rttvar: u32),
        min_rtt_us: field!(tcpi_min_rtt: u32),
        snd_cwnd: field!(tcpi_snd_cwnd: u32),
        snd_mss: field!(tcpi_snd_mss: u32),
        total_retrans: field!(tcpi_total_retrans: u32),
        delivery_rate: field!(tcpi_delivery_rate: u64),
        pacing_rate: field!(tcpi_pacing_rate: u64),
        busy_time_us: field!(tcpi_busy_time: u64),
        rwnd_limited_us: field!(tcpi_rwnd_limited: u64),
        sndbuf_limited_us: field!(tcpi_sndbuf_limited: u64),
        delivered_ce: field!(tcpi_delivered_ce: u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream, UdpSocket};
    use std::os::fd::AsFd;
    use std::time::Duration;

    #[test]
    fn layout_matches_linux_tcp_h() {
        // Offsets printed by a C program including Debian 12's
        // linux/tcp.h (offsetof); rcv_wnd follows snd_wnd in Linux >= 6.2.
        assert_eq!(offset_of!(TcpInfo, tcpi_rto), 8);
        assert_eq!(offset_of!(TcpInfo, tcpi_snd_mss), 16);
        assert_eq!(offset_of!(TcpInfo, tcpi_rtt), 68);
        assert_eq!(offset_of!(TcpInfo, tcpi_snd_cwnd), 80);
        assert_eq!(offset_of!(TcpInfo, tcpi_total_retrans), 100);
        assert_eq!(offset_of!(TcpInfo, tcpi_pacing_rate), 104);
        assert_eq!(offset_of!(TcpInfo, tcpi_min_rtt), 148);
        assert_eq!(offset_of!(TcpInfo, tcpi_delivery_rate), 160);
        assert_eq!(offset_of!(TcpInfo, tcpi_busy_time), 168);
        assert_eq!(offset_of!(TcpInfo, tcpi_sndbuf_limited), 184);
        assert_eq!(offset_of!(TcpInfo, tcpi_delivered_ce), 196);
        assert_eq!(offset_of!(TcpInfo, tcpi_bytes_retrans), 208);
        assert_eq!(offset_of!(TcpInfo, tcpi_snd_wnd), 228);
        assert_eq!(offset_of!(TcpInfo, tcpi_rcv_wnd), 232);
        assert_eq!(size_of::<TcpInfo>(), 240);
    }

    /// `struct tcp_info` bytes with the given fields set.
    fn raw(fields: &[(usize, u64, usize)]) -> Vec<u8> {
        let mut raw = vec![0u8; TCP_INFO_LEN];
        for &(at, v, size) in fields {
            raw[at..at + size].copy_from_slice(&v.to_ne_bytes()[..size]);
        }
        raw
    }

    #[test]
    fn fields_beyond_the_returned_length_read_as_zero() {
        macro_rules! set {
            ($name:ident: $t:ty = $v:expr) => {
                (offset_of!(TcpInfo, $name), $v as u64, size_of::<$t>())
            };
        }
        let info = raw(&[
            set!(tcpi_snd_mss: u32 = 1448),
            set!(tcpi_rtt: u32 = 30),
            set!(tcpi_total_retrans: u32 = 4),
            set!(tcpi_pacing_rate: u64 = 1000),
            set!(tcpi_min_rtt: u32 = 20),
            set!(tcpi_delivery_rate: u64 = 500),
            set!(tcpi_busy_time: u64 = 9),
            set!(tcpi_delivered_ce: u32 = 3),
        ]);
        let counters_from = |raw: &[u8], len: usize| decode(&raw[..len]);
        // A kernel older than 4.9 (no delivery_rate) stops before it.
        let old = counters_from(&info, offset_of!(TcpInfo, tcpi_delivery_rate));
        assert_eq!((old.snd_mss, old.rtt_us, old.min_rtt_us), (1448, 30, 20));
        assert_eq!(
            (old.delivery_rate, old.busy_time_us, old.delivered_ce),
            (0, 0, 0)
        );
        // A length cutting through a field must not expose half of it.
        let cut = counters_from(&info, offset_of!(TcpInfo, tcpi_pacing_rate) + 4);
        assert_eq!((cut.total_retrans, cut.pacing_rate), (4, 0));
        let full = counters_from(&info, TCP_INFO_LEN);
        assert_eq!(
            (full.delivery_rate, full.busy_time_us, full.delivered_ce),
            (500, 9, 3)
        );
    }

    #[test]
    fn sender_of_a_loopback_transfer_reports_rtt_mss_and_busy_time() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        // A small receive buffer (inherited by the accepted socket) plus a
        // receiver that starts late keeps the sender limited for tens of
        // milliseconds: busy_time is counted in jiffies, so a transfer that
        // finishes within one tick would legitimately report 0.
        socket2::SockRef::from(&listener)
            .set_recv_buffer_size(16 * 1024)
            .unwrap();
        let mut sender = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut receiver, _) = listener.accept().unwrap();
        const TOTAL: usize = 1 << 20;
        let drain = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let mut buf = vec![0u8; TOTAL];
            receiver.read_exact(&mut buf).unwrap();
        });
        sender.write_all(&vec![7u8; TOTAL]).unwrap();
        drain.join().unwrap();

        let c = read(sender.as_fd()).unwrap();
        assert!(c.snd_mss > 0, "{c:?}");
        assert!(c.rtt_us > 0, "{c:?}");
        assert!(c.busy_time_us > 0, "{c:?}");
        assert!(c.delivery_rate > 0, "{c:?}");
    }

    /// (An invalid descriptor cannot be passed: `read` takes a borrowed
    /// one.)
    #[test]
    fn non_tcp_descriptors_are_errors() {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(read(udp.as_fd()).is_err());
    }
}
