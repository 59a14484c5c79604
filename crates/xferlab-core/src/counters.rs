//! Parsing the kernel's network counter files into one flat map.
//!
//! The driver reads /proc/net/snmp, /proc/net/netstat, /proc/net/snmp6 and
//! /proc/net/dev before and after a test and hands the text here; the
//! difference of the two snapshots becomes
//! [`KernelCounters`](crate::result::KernelCounters). Keeping the parsing
//! free of I/O lets it be tested against captured text.
//!
//! Every value is stored as `i64`: some counters are signed (`Tcp.MaxConn`
//! is -1), most are unsigned. An unsigned value above `i64::MAX` is stored
//! bit-for-bit (two's complement), which keeps wrapping subtraction in
//! [`CounterSnapshot::delta`] exact.

use std::collections::BTreeMap;

/// Counter values at one moment, keyed `Group.Name` (`Tcp.RetransSegs`,
/// `Ip6.InReceives`) or `dev.<field>` (`dev.rx_bytes`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CounterSnapshot {
    pub values: BTreeMap<String, i64>,
}

impl CounterSnapshot {
    /// `self` minus `before`, for keys present in both; unchanged counters
    /// are left out so the result lists only what the test moved.
    pub fn delta(&self, before: &CounterSnapshot) -> BTreeMap<String, i64> {
        self.values
            .iter()
            .filter_map(|(key, &after)| {
                let d = after.wrapping_sub(*before.values.get(key)?);
                (d != 0).then(|| (key.clone(), d))
            })
            .collect()
    }
}

/// Parses one counter value, accepting the full unsigned 64-bit range as
/// well as negative numbers (see the module comment).
fn parse_value(s: &str) -> Option<i64> {
    s.parse::<i64>()
        .ok()
        .or_else(|| s.parse::<u64>().ok().map(|v| v as i64))
}

/// Parses /proc/net/snmp or /proc/net/netstat: for each group a line of
/// names and a line of values, both starting with `Group:`.
///
/// Groups that parse are stored even when others do not; the error then
/// names every group that was skipped, on one line.
pub fn parse_snmp(text: &str, snap: &mut CounterSnapshot) -> Result<(), CounterError> {
    let mut problems = Vec::new();
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .peekable();
    while let Some(header) = lines.next() {
        let Some((group, names)) = header.split_once(':') else {
            problems.push(CounterError::NoGroup(shorten(header)));
            continue;
        };
        // The value line must carry the same prefix. If it does not, the
        // group's values are missing: report it and treat that line as the
        // next header, so one damaged group does not shift all later ones.
        let values = match lines.peek().and_then(|l| l.split_once(':')) {
            Some((g, values)) if g == group => {
                lines.next();
                values
            }
            _ => {
                problems.push(CounterError::NoValueLine(group.to_owned()));
                continue;
            }
        };
        match parse_group(group, names, values) {
            Ok(pairs) => snap.values.extend(pairs),
            Err(e) => problems.push(e),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CounterError::Groups(problems))
    }
}

/// Pairs the names and values of one snmp group into `Group.Name` keys.
fn parse_group(group: &str, names: &str, values: &str) -> Result<Vec<(String, i64)>, CounterError> {
    let names: Vec<&str> = names.split_whitespace().collect();
    let values: Vec<&str> = values.split_whitespace().collect();
    if names.len() != values.len() {
        return Err(CounterError::CountMismatch {
            group: group.to_owned(),
            names: names.len(),
            values: values.len(),
        });
    }
    names
        .iter()
        .zip(&values)
        .map(|(name, value)| match parse_value(value) {
            Some(v) => Ok((format!("{group}.{name}"), v)),
            None => Err(CounterError::GroupValue {
                group: group.to_owned(),
                name: (*name).to_owned(),
                value: shorten(value),
            }),
        })
        .collect()
}

/// Parses /proc/net/snmp6: one `Ip6InReceives  123` per line. The group is
/// the name up to its first `6` (`Ip6`, `Icmp6`, `Udp6`, `UdpLite6`), which
/// also covers per-type lines such as `Icmp6InType133`.
///
/// Lines that parse are stored even when others do not; the error lists the
/// first few bad lines.
pub fn parse_snmp6(text: &str, snap: &mut CounterSnapshot) -> Result<(), CounterError> {
    let mut bad = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match parse_snmp6_line(line) {
            Some((key, v)) => {
                snap.values.insert(key, v);
            }
            None => bad.push(shorten(line)),
        }
    }
    match bad.len() {
        0 => Ok(()),
        count => {
            bad.truncate(3);
            Err(CounterError::Snmp6Lines { count, first: bad })
        }
    }
}

fn parse_snmp6_line(line: &str) -> Option<(String, i64)> {
    let mut fields = line.split_whitespace();
    let (name, value) = (fields.next()?, fields.next()?);
    if fields.next().is_some() {
        return None;
    }
    let split = name.find('6')? + 1;
    let (group, counter) = name.split_at(split);
    if counter.is_empty() {
        return None;
    }
    Some((format!("{group}.{counter}"), parse_value(value)?))
}

/// The 16 per-interface fields of /proc/net/dev, in file order.
const DEV_FIELDS: [&str; 16] = [
    "rx_bytes",
    "rx_packets",
    "rx_errs",
    "rx_drop",
    "rx_fifo",
    "rx_frame",
    "rx_compressed",
    "rx_multicast",
    "tx_bytes",
    "tx_packets",
    "tx_errs",
    "tx_drop",
    "tx_fifo",
    "tx_colls",
    "tx_carrier",
    "tx_compressed",
];

/// Finds `iface` in /proc/net/dev and stores its fields as `dev.<field>`.
/// Returns `Ok(false)` when the interface is not listed.
///
/// The name ends at the first `:` (Linux forbids `:` in interface names);
/// large counters can run straight into it (`eth0:123456789`).
pub fn parse_dev(
    text: &str,
    iface: &str,
    snap: &mut CounterSnapshot,
) -> Result<bool, CounterError> {
    let Some(fields) = text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim() == iface)
        .map(|(_, fields)| fields)
    else {
        return Ok(false);
    };
    let values: Vec<&str> = fields.split_whitespace().collect();
    if values.len() < DEV_FIELDS.len() {
        return Err(CounterError::DevFields {
            iface: iface.to_owned(),
            got: values.len(),
            expected: DEV_FIELDS.len(),
        });
    }
    let mut parsed = [0i64; DEV_FIELDS.len()];
    for ((slot, value), name) in parsed.iter_mut().zip(&values).zip(DEV_FIELDS) {
        *slot = parse_value(value).ok_or_else(|| CounterError::DevValue {
            iface: iface.to_owned(),
            name,
            value: shorten(value),
        })?;
    }
    for (name, v) in DEV_FIELDS.iter().zip(parsed) {
        snap.values.insert(format!("dev.{name}"), v);
    }
    Ok(true)
}

/// A /proc/net counter file that does not read as the kernel writes it.
/// Values quoted from the file are cut to 40 characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CounterError {
    #[error("line '{0}' has no 'Group:' prefix")]
    NoGroup(String),
    #[error("group {0}: no value line")]
    NoValueLine(String),
    #[error("group {group}: {names} names but {values} values")]
    CountMismatch {
        group: String,
        names: usize,
        values: usize,
    },
    #[error("group {group}: {name} has value '{value}', not a number")]
    GroupValue {
        group: String,
        name: String,
        value: String,
    },
    /// Every group of an snmp file that was skipped, on one line.
    #[error("{}", join(.0, "; ", |e| e.to_string()))]
    Groups(Vec<CounterError>),
    /// How many snmp6 lines did not parse, and the first three.
    #[error("{count} unreadable snmp6 line(s): {}", join(.first, ", ", |l| format!("'{l}'")))]
    Snmp6Lines { count: usize, first: Vec<String> },
    #[error("interface {iface}: {got} fields in /proc/net/dev, expected {expected}")]
    DevFields {
        iface: String,
        got: usize,
        expected: usize,
    },
    #[error("interface {iface}: {name} is '{value}', not a number")]
    DevValue {
        iface: String,
        name: &'static str,
        value: String,
    },
}

fn join<T>(items: &[T], sep: &str, show: impl Fn(&T) -> String) -> String {
    items.iter().map(show).collect::<Vec<_>>().join(sep)
}

/// Keeps error messages to one readable line when the input is garbage.
fn shorten(s: &str) -> String {
    const MAX: usize = 40;
    match s.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &s[..cut]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Excerpts captured from a Linux 6.18 host.
    const SNMP: &str = "\
Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos InDiscards InDelivers OutRequests OutDiscards OutNoRoutes ReasmTimeout ReasmReqds ReasmOKs ReasmFails FragOKs FragFails FragCreates OutTransmits
Ip: 2 64 4527 0 0 0 0 0 4527 2772 0 0 0 0 0 0 0 0 0 2772
IcmpMsg: InType3
IcmpMsg: 1
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 21 2 0 9 0 4485 2740 0 0 11 0
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 41 0 0 42 0 0 0 0 0
";

    // The TcpExt header line really ends in a space on this kernel.
    const NETSTAT: &str = "\
TcpExt: SyncookiesSent SyncookiesRecv TW DelayedACKs TCPSackRecovery TCPSACKReorder TCPTimeouts 
TcpExt: 0 0 10 46 3 0 2
IpExt: InNoRoutes InTruncatedPkts InOctets OutOctets InNoECTPkts InECT1Pkts InECT0Pkts InCEPkts
IpExt: 0 0 79749011 213156 4527 0 0 5
";

    const SNMP6: &str = "\
Ip6InReceives                   \t1
Ip6InDelivers                   \t1
Ip6OutRequests                  \t10
Ip6InCEPkts                     \t0
Icmp6InMsgs                     \t1
Icmp6OutType135                 \t4
Udp6InDatagrams                 \t7
UdpLite6RcvbufErrors            \t0
";

    const DEV: &str = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    3193      29    0    0    0     0          0         0     3193      29    0    0    0     0       0          0
  eth0: 79809016    4501    0    0    0     0          0         0   249375    2754    0    0    0     0       0          0
";

    fn get(snap: &CounterSnapshot, key: &str) -> Option<i64> {
        snap.values.get(key).copied()
    }

    #[test]
    fn snmp_keys_are_group_dot_name_and_keep_signs() {
        let mut s = CounterSnapshot::default();
        parse_snmp(SNMP, &mut s).unwrap();
        assert_eq!(get(&s, "Tcp.MaxConn"), Some(-1));
        assert_eq!(get(&s, "Tcp.OutSegs"), Some(2740));
        assert_eq!(get(&s, "Tcp.RetransSegs"), Some(0));
        assert_eq!(get(&s, "Ip.OutTransmits"), Some(2772));
        assert_eq!(get(&s, "IcmpMsg.InType3"), Some(1));
        assert_eq!(get(&s, "Udp.RcvbufErrors"), Some(0));
        assert_eq!(s.values.len(), 20 + 1 + 15 + 9);
    }

    #[test]
    fn netstat_parses_with_trailing_space_in_header() {
        let mut s = CounterSnapshot::default();
        parse_snmp(NETSTAT, &mut s).unwrap();
        assert_eq!(get(&s, "TcpExt.TCPSackRecovery"), Some(3));
        assert_eq!(get(&s, "TcpExt.TCPTimeouts"), Some(2));
        assert_eq!(get(&s, "IpExt.InCEPkts"), Some(5));
        assert_eq!(get(&s, "IpExt.InOctets"), Some(79_749_011));
    }

    #[test]
    fn snmp_count_mismatch_names_the_group_and_keeps_the_others() {
        let text = "Tcp: A B C\nTcp: 1 2\nUdp: X\nUdp: 9\n";
        let mut s = CounterSnapshot::default();
        let err = parse_snmp(text, &mut s).unwrap_err().to_string();
        assert!(
            err.contains("Tcp") && err.contains("3 names but 2 values"),
            "{err}"
        );
        assert_eq!(get(&s, "Tcp.A"), None);
        assert_eq!(get(&s, "Udp.X"), Some(9));
    }

    #[test]
    fn snmp_missing_value_line_does_not_shift_later_groups() {
        let text = "Ip: A B\nTcp: C D\nTcp: 3 4\n";
        let mut s = CounterSnapshot::default();
        let err = parse_snmp(text, &mut s).unwrap_err().to_string();
        assert!(err.contains("group Ip: no value line"), "{err}");
        assert_eq!(get(&s, "Tcp.D"), Some(4));
        assert!(!s.values.keys().any(|k| k.starts_with("Ip.")));
    }

    #[test]
    fn snmp_problems_of_several_groups_share_one_line() {
        let mut s = CounterSnapshot::default();
        let err = parse_snmp("Ip: A B\nTcp: C\nTcp: x\n", &mut s).unwrap_err();
        assert_eq!(
            err.to_string(),
            "group Ip: no value line; group Tcp: C has value 'x', not a number"
        );
    }

    #[test]
    fn snmp_rejects_non_numbers_and_lone_headers() {
        let mut s = CounterSnapshot::default();
        let err = parse_snmp("Tcp: A B\nTcp: 1 x\n", &mut s)
            .unwrap_err()
            .to_string();
        assert!(err.contains("Tcp") && err.contains("'x'"), "{err}");
        let err = parse_snmp("Udp: A\n", &mut s).unwrap_err().to_string();
        assert!(err.contains("Udp"), "{err}");
        assert!(s.values.is_empty());
    }

    #[test]
    fn values_above_i64_max_are_kept_bit_for_bit() {
        let mut s = CounterSnapshot::default();
        parse_snmp("IpExt: InOctets\nIpExt: 18446744073709551615\n", &mut s).unwrap();
        assert_eq!(get(&s, "IpExt.InOctets"), Some(-1));
    }

    #[test]
    fn snmp6_splits_group_at_the_six() {
        let mut s = CounterSnapshot::default();
        parse_snmp6(SNMP6, &mut s).unwrap();
        assert_eq!(get(&s, "Ip6.InReceives"), Some(1));
        assert_eq!(get(&s, "Ip6.OutRequests"), Some(10));
        assert_eq!(get(&s, "Ip6.InCEPkts"), Some(0));
        assert_eq!(get(&s, "Icmp6.InMsgs"), Some(1));
        assert_eq!(get(&s, "Icmp6.OutType135"), Some(4));
        assert_eq!(get(&s, "Udp6.InDatagrams"), Some(7));
        assert_eq!(get(&s, "UdpLite6.RcvbufErrors"), Some(0));
        assert_eq!(s.values.len(), 8);
    }

    #[test]
    fn snmp6_reports_bad_lines_and_keeps_good_ones() {
        let mut s = CounterSnapshot::default();
        let err =
            parse_snmp6("Ip6InReceives 5\nGarbage 1\nIp6 2\nUdp6InErrors\n", &mut s).unwrap_err();
        assert_eq!(
            err.to_string(),
            "3 unreadable snmp6 line(s): 'Garbage 1', 'Ip6 2', 'Udp6InErrors'"
        );
        assert_eq!(s.values.len(), 1);
    }

    #[test]
    fn dev_finds_the_interface_and_names_all_fields() {
        let mut s = CounterSnapshot::default();
        assert_eq!(parse_dev(DEV, "eth0", &mut s), Ok(true));
        assert_eq!(s.values.len(), 16);
        assert_eq!(get(&s, "dev.rx_bytes"), Some(79_809_016));
        assert_eq!(get(&s, "dev.rx_packets"), Some(4501));
        assert_eq!(get(&s, "dev.tx_bytes"), Some(249_375));
        assert_eq!(get(&s, "dev.tx_packets"), Some(2754));
        assert_eq!(get(&s, "dev.tx_compressed"), Some(0));
    }

    #[test]
    fn dev_name_may_touch_the_first_number() {
        let text = "  eth1:123456789012 5 0 0 0 0 0 0 7 8 0 0 0 0 0 9\n";
        let mut s = CounterSnapshot::default();
        assert_eq!(parse_dev(text, "eth1", &mut s), Ok(true));
        assert_eq!(get(&s, "dev.rx_bytes"), Some(123_456_789_012));
        assert_eq!(get(&s, "dev.tx_compressed"), Some(9));
    }

    #[test]
    fn dev_absent_or_prefix_only_interface_is_not_found() {
        let mut s = CounterSnapshot::default();
        assert_eq!(parse_dev(DEV, "eth", &mut s), Ok(false));
        assert_eq!(parse_dev(DEV, "wlan0", &mut s), Ok(false));
        assert!(s.values.is_empty());
    }

    #[test]
    fn dev_short_or_bad_line_is_an_error_and_stores_nothing() {
        let mut s = CounterSnapshot::default();
        assert!(parse_dev("lo: 1 2 3\n", "lo", &mut s)
            .unwrap_err()
            .to_string()
            .contains("3 fields"));
        let bad = "lo: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 z\n";
        assert!(parse_dev(bad, "lo", &mut s)
            .unwrap_err()
            .to_string()
            .contains("tx_compressed"));
        assert!(s.values.is_empty());
    }

    #[test]
    fn delta_keeps_changed_keys_present_in_both() {
        let snap = |pairs: &[(&str, i64)]| CounterSnapshot {
            values: pairs.iter().map(|&(k, v)| (k.to_string(), v)).collect(),
        };
        let before = snap(&[("a", 10), ("b", 5), ("gone", 1), ("gauge", 3)]);
        let after = snap(&[("a", 25), ("b", 5), ("new", 7), ("gauge", 1)]);
        let d = after.delta(&before);
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(d.get("a"), Some(&15));
        assert_eq!(d.get("gauge"), Some(&-2));
    }

    #[test]
    fn delta_across_unsigned_wrap_is_exact_and_does_not_panic() {
        let mut before = CounterSnapshot::default();
        let mut after = CounterSnapshot::default();
        // u64::MAX - 1 stored bit-for-bit, then the counter wraps to 3.
        parse_snmp("G: c\nG: 18446744073709551614\n", &mut before).unwrap();
        parse_snmp("G: c\nG: 3\n", &mut after).unwrap();
        assert_eq!(after.delta(&before).get("G.c"), Some(&5));
        let extreme = CounterSnapshot {
            values: [("x".to_string(), i64::MIN)].into(),
        };
        let other = CounterSnapshot {
            values: [("x".to_string(), i64::MAX)].into(),
        };
        assert_eq!(extreme.delta(&other).get("x"), Some(&1));
    }
}
