//! Host-wide kernel counters around a test: reads the /proc/net files that
//! `xferlab_core::counters` parses, and finds which interface carries a
//! test's traffic.
//!
//! Counters are a bonus, never a reason to fail a test: anything missing
//! becomes a one-line warning in the report.

use std::io;
use std::net::IpAddr;

use xferlab_core::counters::{parse_dev, parse_snmp, parse_snmp6, CounterError, CounterSnapshot};

/// Reads every counter source, plus the /proc/net/dev line of `iface`.
/// Returns what could be read and one warning per source that could not.
pub fn snapshot(iface: Option<&str>) -> (CounterSnapshot, Vec<String>) {
    let mut snap = CounterSnapshot::default();
    let mut warnings = Vec::new();
    let mut read = |path: &str, optional: bool| match std::fs::read_to_string(path) {
        Ok(text) => Some(text),
        // snmp6 is absent when IPv6 is disabled; nothing is missing then.
        Err(e) if optional && e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            warnings.push(format!("kernel counters: cannot read {path}: {e}"));
            None
        }
    };
    let snmp = read("/proc/net/snmp", false);
    let netstat = read("/proc/net/netstat", false);
    let snmp6 = read("/proc/net/snmp6", true);
    let dev = iface.and_then(|_| read("/proc/net/dev", false));

    let mut note = |path: &str, result: Result<(), CounterError>| {
        if let Err(e) = result {
            warnings.push(format!("kernel counters: {path} partly unreadable: {e}"));
        }
    };
    if let Some(text) = snmp {
        note("/proc/net/snmp", parse_snmp(&text, &mut snap));
    }
    if let Some(text) = netstat {
        note("/proc/net/netstat", parse_snmp(&text, &mut snap));
    }
    if let Some(text) = snmp6 {
        note("/proc/net/snmp6", parse_snmp6(&text, &mut snap));
    }
    if let (Some(name), Some(text)) = (iface, dev) {
        match parse_dev(&text, name, &mut snap) {
            Ok(true) => {}
            Ok(false) => warnings.push(format!(
                "kernel counters: interface {name} not in /proc/net/dev, no dev.* counters"
            )),
            Err(e) => warnings.push(format!("kernel counters: /proc/net/dev: {e}")),
        }
    }
    (snap, warnings)
}

/// (name, address, loopback?) of every local interface address.
fn interface_addresses() -> Option<Vec<(String, Option<IpAddr>, bool)>> {
    let list = xferlab_sys::ifaddrs::interface_addresses().ok()?;
    Some(
        list.into_iter()
            .map(|a| (a.name, a.ip, a.loopback))
            .collect(),
    )
}

/// The local interface that owns `addr`: `lo` for 127.0.0.1 and ::1, and
/// the IPv4 answer for an IPv4-mapped IPv6 address (`::ffff:10.0.0.1`, as
/// a dual-stack socket reports an IPv4 peer). Any loopback address
/// (127.0.0.2 too) maps to the loopback interface, since that is where its
/// traffic is counted even though only 127.0.0.1 is assigned.
pub fn interface_for(addr: IpAddr) -> Option<String> {
    let addr = addr.to_canonical();
    let list = interface_addresses()?;
    let owner = list.iter().find(|(_, a, _)| *a == Some(addr)).or_else(|| {
        addr.is_loopback()
            .then(|| list.iter().find(|(_, _, loopback)| *loopback))
            .flatten()
    });
    owner.map(|(name, _, _)| name.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, Ipv6Addr, TcpListener, TcpStream, UdpSocket};

    #[test]
    fn loopback_addresses_belong_to_lo() {
        assert_eq!(
            interface_for(Ipv4Addr::LOCALHOST.into()).as_deref(),
            Some("lo")
        );
        assert_eq!(
            interface_for(Ipv4Addr::new(127, 0, 0, 2).into()).as_deref(),
            Some("lo")
        );
        assert_eq!(
            interface_for(Ipv6Addr::LOCALHOST.into()).as_deref(),
            Some("lo")
        );
        let mapped = Ipv4Addr::LOCALHOST.to_ipv6_mapped();
        assert_eq!(interface_for(mapped.into()).as_deref(), Some("lo"));
    }

    #[test]
    fn foreign_and_unspecified_addresses_have_no_interface() {
        // Documentation ranges (RFC 5737) are not routed, but test VMs do
        // assign them, so use the first one this host cannot bind to.
        let foreign = ["198.51.100.77", "203.0.113.77", "192.0.2.77"]
            .iter()
            .filter_map(|a| a.parse::<Ipv4Addr>().ok())
            .find(|&a| UdpSocket::bind((a, 0)).is_err())
            .expect("all candidate addresses are local");
        assert_eq!(interface_for(foreign.into()), None);
        assert_eq!(interface_for(Ipv4Addr::UNSPECIFIED.into()), None);
    }

    #[test]
    fn loopback_transfer_moves_dev_and_tcp_counters() {
        let (before, warnings) = snapshot(Some("lo"));
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(before.values.contains_key("TcpExt.TCPTimeouts"));

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut rx, _) = listener.accept().unwrap();
        let drain = std::thread::spawn(move || {
            let mut sink = Vec::new();
            rx.read_to_end(&mut sink).unwrap();
            sink.len()
        });
        tx.write_all(&vec![1u8; 1 << 20]).unwrap();
        drop(tx);
        assert_eq!(drain.join().unwrap(), 1 << 20);

        let (after, warnings) = snapshot(Some("lo"));
        assert!(warnings.is_empty(), "{warnings:?}");
        let d = after.delta(&before);
        assert!(
            d.get("dev.rx_bytes").is_some_and(|&v| v >= 1 << 20),
            "{d:?}"
        );
        assert!(d.get("Tcp.OutSegs").is_some_and(|&v| v > 0), "{d:?}");
    }

    #[test]
    fn missing_interface_is_a_warning_not_an_error() {
        let (snap, warnings) = snapshot(Some("nosuchif0"));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("nosuchif0"));
        assert!(snap.values.contains_key("Tcp.OutSegs"));
        assert!(!snap.values.keys().any(|k| k.starts_with("dev.")));
    }
}
