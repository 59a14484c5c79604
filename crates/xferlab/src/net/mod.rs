//! Addresses and connections: resolving `HOST[:PORT]`, connecting with a
//! deadline and turning socket errors into sentences a person can act on.

mod flow_socket;
pub mod sockopt;

pub use flow_socket::FlowSocket;

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Default port of `xferlab server` (iperf3 uses 5201; this is distinct so
/// both can run on one host).
pub const DEFAULT_PORT: u16 = 5290;

/// Restricts name resolution to one address family (`-4` / `-6`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Family {
    #[default]
    Any,
    V4,
    V6,
}

/// IPv4 peers of the dual-stack listener appear as `::ffff:a.b.c.d`;
/// logs and results show them as the IPv4 addresses they are.
pub fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
            None => addr,
        },
        v4 => v4,
    }
}

/// Every local address of `peer`'s family with an ephemeral port: where a
/// socket that will talk to `peer` binds.
pub fn any_port(peer: SocketAddr) -> SocketAddr {
    let any = if peer.is_ipv6() {
        IpAddr::from([0u16; 8])
    } else {
        IpAddr::from([0u8; 4])
    };
    SocketAddr::new(any, 0)
}

/// Which kind of server a connection goes to: a refused connection's
/// message says what to start there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    Xferlab,
    Iperf3,
}

/// Why an address could not be resolved or connected: one line naming the
/// address and what to check.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("cannot resolve '{host}': {err}")]
    Resolve { host: String, err: io::Error },
    #[error("'{host}' has no {family} address")]
    NoAddress { host: String, family: &'static str },
    #[error("cannot connect to {addr}: {}", connect_reason(err, *server))]
    Connect {
        addr: SocketAddr,
        err: io::Error,
        server: Server,
    },
    #[error("no address to connect to")]
    NothingToConnect,
}

impl NetError {
    /// A failed connect to an xferlab server's port.
    pub fn connect(addr: SocketAddr, err: io::Error) -> Self {
        Self::Connect {
            addr,
            err,
            server: Server::Xferlab,
        }
    }
}

fn connect_reason(e: &io::Error, server: Server) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => format!(
            "connection refused; {}",
            match server {
                Server::Xferlab => XFERLAB_SERVER_HINT,
                Server::Iperf3 => IPERF3_SERVER_HINT,
            }
        ),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
            "no answer (timed out); check the address, routes and firewalls".to_string()
        }
        _ => e.to_string(),
    }
}

/// Resolves `host`, `host:port`, `[v6]:port` or a bare IPv6 address.
pub fn resolve(host: &str, default_port: u16, family: Family) -> Result<Vec<SocketAddr>, NetError> {
    let with_port = if let Ok(ip) = host.parse::<IpAddr>() {
        SocketAddr::new(ip, default_port).to_string()
    } else if host.starts_with('[') && host.ends_with(']') || !host.contains(':') {
        format!("{host}:{default_port}")
    } else {
        host.to_string()
    };
    let addrs: Vec<SocketAddr> = with_port
        .to_socket_addrs()
        .map_err(|err| NetError::Resolve {
            host: host.to_string(),
            err,
        })?
        .filter(|a| match family {
            Family::Any => true,
            Family::V4 => a.is_ipv4(),
            Family::V6 => a.is_ipv6(),
        })
        .collect();
    if addrs.is_empty() {
        return Err(NetError::NoAddress {
            host: host.to_string(),
            family: if family == Family::V6 { "IPv6" } else { "IPv4" },
        });
    }
    Ok(addrs)
}

/// Connects the control connection to a `server`, trying each resolved
/// address; the error is the last address's.
pub fn connect_control(
    addrs: &[SocketAddr],
    timeout: Duration,
    server: Server,
) -> Result<TcpStream, NetError> {
    let mut last = NetError::NothingToConnect;
    for &addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                tracing::debug!(%addr, "control connection established");
                s.set_nodelay(true).ok();
                keepalive(&s);
                return Ok(s);
            }
            Err(e) => {
                tracing::debug!(%addr, error = %e, "control connection failed");
                last = NetError::Connect {
                    addr,
                    err: e,
                    server,
                };
            }
        }
    }
    Err(last)
}

/// TCP keepalive on control connections, so a peer that vanished without a
/// FIN (power loss, cable, network namespace deleted) is noticed in ~55 s
/// even in a long byte-limited test. Nine probes, not three: a control
/// connection is idle for the whole test, and on a path that loses 20 %
/// of one direction (the ECN study's 1/5 marker) a probe exchange fails
/// one time in five, so three in a row end about 5 % of idle minutes on
/// each side: the ECN study's 60 s rr tests at 1/5 lost their control
/// connection in 4 of 15 completed runs ("the peer closed the control
/// connection in the middle of the test";
/// docs/examples/ecn-sack-transactions-full/runs.csv). Nine in a row at
/// 20 %: 5e-7.
pub fn keepalive(s: &TcpStream) {
    let sock = socket2::SockRef::from(s);
    let ka = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(9);
    sock.set_tcp_keepalive(&ka).ok();
}

/// The end of a "connection refused" message: what to check.
const XFERLAB_SERVER_HINT: &str = "is `xferlab server` running there (default port 5290, see -p)?";
const IPERF3_SERVER_HINT: &str =
    "is an iperf3 server (`iperf3 -s`) running there (default port 5201, see -p)?";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_forms() {
        assert_eq!(
            resolve("127.0.0.1", 9, Family::Any).unwrap(),
            vec!["127.0.0.1:9".parse().unwrap()]
        );
        assert_eq!(
            resolve("127.0.0.1:7", 9, Family::Any).unwrap(),
            vec!["127.0.0.1:7".parse().unwrap()]
        );
        assert_eq!(
            resolve("::1", 9, Family::Any).unwrap(),
            vec!["[::1]:9".parse().unwrap()]
        );
        assert_eq!(
            resolve("[::1]:7", 9, Family::Any).unwrap(),
            vec!["[::1]:7".parse().unwrap()]
        );
        assert!(resolve("::1", 9, Family::V4).is_err());
    }

    #[test]
    fn mapped_ipv4_is_shown_as_ipv4() {
        let a: SocketAddr = "[::ffff:127.0.0.1]:5".parse().unwrap();
        assert_eq!(canonical(a).to_string(), "127.0.0.1:5");
        let b: SocketAddr = "[::1]:5".parse().unwrap();
        assert_eq!(canonical(b), b);
    }
}
