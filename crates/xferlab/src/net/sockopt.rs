//! Applying the knobs to data sockets and reading back what the kernel made
//! of them (it doubles buffer sizes, caps them at rmem_max/wmem_max, may
//! refuse a congestion control): results report the read-back values.

use std::io;
use std::os::fd::AsFd;

use socket2::Socket;
use xferlab_core::result::{FlowRole, SocketSettings};
use xferlab_core::spec::Knobs;
use xferlab_sys::sockopt;

/// Which end of the data connection this socket is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketEnd {
    /// Client socket, before connect(): may set TCP_MAXSEG.
    Connecting,
    /// Socket accepted by the server.
    Accepted,
}

/// Why a knob could not be applied to a socket: one line naming the flag
/// and, where there is one, the fix.
#[derive(Debug, thiserror::Error)]
pub enum SockoptError {
    #[error("cannot set MSS {mss} (-M): {err}")]
    Mss { mss: u32, err: io::Error },
    #[error("congestion control '{0}' is not allowed for this user: run as root or add it to net.ipv4.tcp_allowed_congestion_control")]
    CongestionNotAllowed(String),
    #[error("congestion control '{cc}' is not available (have: {available}); load it with `modprobe tcp_{cc}` or pick another with -C")]
    CongestionMissing { cc: String, available: String },
    #[error("cannot open a socket to probe congestion control '{cc}': {err}")]
    CongestionProbe { cc: String, err: io::Error },
    #[error("cannot set TCP_NODELAY (-N): {0}")]
    Nodelay(io::Error),
    #[error("cannot set TOS 0x{tos:02x} (-S/--dscp): {err}")]
    Tos { tos: u8, err: io::Error },
    #[error("cannot set don't-fragment (--dont-fragment): {0}")]
    DontFragment(io::Error),
    #[error("cannot set SO_MAX_PACING_RATE (--fq-rate): {0}")]
    PacingRate(io::Error),
    #[error("cannot set {which} buffer to {size} (-w): {err}")]
    Buffer {
        which: &'static str,
        size: usize,
        err: io::Error,
    },
}

/// Applies the knobs that must be in place before connect() (buffers shape
/// the window scale; MSS goes into the SYN) or right after accept().
pub fn apply(sock: &Socket, knobs: &Knobs, end: SocketEnd) -> Result<(), SockoptError> {
    if let Some(size) = knobs.buffer {
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        set_buffer(sock, size)?;
    }
    if end == SocketEnd::Connecting {
        if let Some(mss) = knobs.mss {
            sock.set_tcp_mss(mss)
                .map_err(|err| SockoptError::Mss { mss, err })?;
        }
    }
    if let Some(cc) = &knobs.congestion {
        sock.set_tcp_congestion(cc.as_bytes())
            .map_err(|e| congestion_error(cc, &e))?;
    }
    if knobs.nodelay {
        sock.set_tcp_nodelay(true).map_err(SockoptError::Nodelay)?;
    }
    if let Some(tos) = knobs.tos {
        let res = match sock.domain() {
            Ok(d) if d == socket2::Domain::IPV6 => sock.set_tclass_v6(u32::from(tos)),
            _ => sock.set_tos_v4(u32::from(tos)),
        };
        res.map_err(|err| SockoptError::Tos { tos, err })?;
    }
    Ok(())
}

/// Sets don't-fragment on a UDP socket: datagrams larger than the path MTU
/// fail with EMSGSIZE instead of being fragmented.
pub fn forbid_fragmentation(sock: &Socket, ipv6: bool) -> Result<(), SockoptError> {
    let (level, opt, val) = if ipv6 {
        (
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )
    } else {
        (
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )
    };
    sockopt::set_int(sock, level, opt, val).map_err(SockoptError::DontFragment)
}

/// Sets SO_MAX_PACING_RATE (bytes/s) on a sending socket.
pub fn set_max_pacing_rate(fd: impl AsFd, bytes_per_second: u64) -> Result<(), SockoptError> {
    sockopt::set_max_pacing_rate(fd, bytes_per_second).map_err(SockoptError::PacingRate)
}

/// With CAP_NET_ADMIN the *FORCE variants go past net.core.[rw]mem_max, so
/// `-w 64M` means 64M; without it the kernel silently caps the request,
/// which the read-back in the result then shows.
fn set_buffer(sock: &Socket, size: usize) -> Result<(), SockoptError> {
    let forced = force_buffer(sock, libc::SO_SNDBUFFORCE, size)
        && force_buffer(sock, libc::SO_RCVBUFFORCE, size);
    if !forced {
        let failed = |which| move |err| SockoptError::Buffer { which, size, err };
        sock.set_send_buffer_size(size).map_err(failed("send"))?;
        sock.set_recv_buffer_size(size).map_err(failed("receive"))?;
    }
    Ok(())
}

fn force_buffer(sock: &Socket, opt: libc::c_int, size: usize) -> bool {
    let v = libc::c_int::try_from(size).unwrap_or(libc::c_int::MAX);
    sockopt::set_int(sock, libc::SOL_SOCKET, opt, v).is_ok()
}

fn congestion_error(cc: &str, e: &io::Error) -> SockoptError {
    match e.raw_os_error() {
        Some(libc::EPERM) => SockoptError::CongestionNotAllowed(cc.to_string()),
        _ => SockoptError::CongestionMissing {
            cc: cc.to_string(),
            available: available_congestion_controls().join(" "),
        },
    }
}

/// Congestion controls this kernel offers, from /proc.
pub fn available_congestion_controls() -> Vec<String> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Checks a requested congestion control before any connection is made, so
/// the user hears about a typo at once.
pub fn check_congestion(cc: &str) -> Result<(), SockoptError> {
    let available = available_congestion_controls();
    if available.is_empty() || available.iter().any(|a| a == cc) {
        return Ok(());
    }
    // Not loaded yet is fine if the kernel can autoload it; a probe socket
    // tells for sure.
    let probe = Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).map_err(|err| {
        SockoptError::CongestionProbe {
            cc: cc.to_string(),
            err,
        }
    })?;
    probe
        .set_tcp_congestion(cc.as_bytes())
        .map_err(|e| congestion_error(cc, &e))
}

/// The settings as the kernel holds them now.
pub fn read_back(sock: &Socket, knobs: &Knobs, role: FlowRole) -> SocketSettings {
    let congestion = sock.tcp_congestion().ok().map(|b| {
        String::from_utf8_lossy(&b)
            .trim_end_matches('\0')
            .to_string()
    });
    let tos = match sock.domain() {
        Ok(d) if d == socket2::Domain::IPV6 => sock.tclass_v6().ok(),
        _ => sock.tos_v4().ok(),
    };
    SocketSettings {
        sndbuf: sock.send_buffer_size().unwrap_or(0) as u64,
        rcvbuf: sock.recv_buffer_size().unwrap_or(0) as u64,
        congestion,
        mss: sock.tcp_mss().ok(),
        nodelay: sock.tcp_nodelay().unwrap_or(false),
        tos: tos
            .map(|t| t as u8)
            .filter(|&t| t != 0 || knobs.tos.is_some()),
        max_pacing_rate: if role == FlowRole::Sender {
            knobs.max_pacing_rate
        } else {
            None
        },
        recv_mode: knobs.recv_mode,
        ..SocketSettings::default()
    }
}
