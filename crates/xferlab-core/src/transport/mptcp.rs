//! MPTCP's model (RFC 8684, Linux's IPPROTO_MPTCP, iperf3's `-m`): a byte
//! stream over one or more TCP subflows, whose state per interval is the
//! connection's MPTCP_INFO and every subflow's addresses and TCP_INFO.
//!
//! A flow's `tcp` fields are the kernel's TCP_INFO of the MPTCP socket
//! (what iperf3 `-m` reports too); its `mptcp` section adds the
//! connection-level counters and one entry per subflow. A connection the
//! peer (or a middlebox) did not take as MPTCP falls back to plain TCP:
//! the section then says `fallback` and has no subflows.

use serde::{Deserialize, Serialize};

use super::tcp::{TcpCounters, TcpSample};
use super::{check_stream_knobs, Carrier, Iperf3Name, TransportModel};
use crate::knobs::{KnobError, Knobs};
use crate::units::{format_bytes, Micros};

pub struct Mptcp;

impl TransportModel for Mptcp {
    fn label(&self) -> &'static str {
        "MPTCP"
    }

    fn carrier(&self) -> Carrier {
        Carrier::Bytes
    }

    fn tcp_info(&self) -> bool {
        true
    }

    fn check_knobs(&self, knobs: &Knobs) -> Result<(), KnobError> {
        check_stream_knobs(knobs)?;
        // Linux answers EOPNOTSUPP for SO_MAX_PACING_RATE on an MPTCP
        // socket (6.18): the cap would not reach the subflows.
        if knobs.max_pacing_rate.is_some() {
            return Err(KnobError::PacingOnMptcp);
        }
        Ok(())
    }

    fn iperf3(&self) -> Option<Iperf3Name> {
        Some(Iperf3Name {
            udp: false,
            mptcp: true,
        })
    }
}

/// What the driver reads of an MPTCP socket at a boundary. `info` is
/// None on a connection that fell back to TCP (the kernel then answers
/// EOPNOTSUPP) or on a kernel without MPTCP_INFO.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MptcpCounters {
    pub fallback: bool,
    pub info: Option<MptcpInfo>,
    /// The subflows open now, as MPTCP_TCPINFO and MPTCP_SUBFLOW_ADDRS
    /// list them (Linux >= 5.16).
    pub subflows: Vec<SubflowCounters>,
}

/// The fields of `struct mptcp_info` xferlab reports. The byte and
/// retransmit counters are cumulative and need Linux >= 6.5; an older
/// kernel leaves them 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MptcpInfo {
    /// Addresses this end announced (ADD_ADDR sent) / accepted from the
    /// peer.
    pub add_addr_signal: u8,
    pub add_addr_accepted: u8,
    /// Data-level retransmissions: data sent again, possibly on another
    /// subflow.
    pub retransmits: u32,
    pub bytes_retrans: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub bytes_acked: u64,
}

/// One subflow as read: its addresses and its TCP_INFO.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SubflowCounters {
    pub local: String,
    pub remote: String,
    pub tcp: TcpCounters,
}

/// MPTCP's section of an interval (or, in a total, of the measured
/// window): counts are deltas, the subflow list is the one at the end.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MptcpSample {
    /// The connection fell back to plain TCP: one path, no subflows.
    pub fallback: bool,
    /// ADD_ADDR announced by this end / accepted from the peer, so far.
    pub add_addr_signal: u8,
    pub add_addr_accepted: u8,
    /// Data-level retransmissions and their bytes (Linux >= 6.5).
    pub retransmits: u64,
    pub bytes_retrans: u64,
    /// Data-level bytes sent, received and acknowledged by the peer.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub bytes_acked: u64,
    pub subflows: Vec<SubflowSample>,
}

/// One subflow over the interval. Its TCP figures count from the previous
/// reading of the same subflow (same addresses), or from its start when
/// it is new.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SubflowSample {
    pub local: String,
    pub remote: String,
    pub tcp: TcpSample,
}

impl MptcpCounters {
    /// The interval from `prev` to `self`.
    pub fn sample(&self, prev: &MptcpCounters) -> MptcpSample {
        let now = self.info.unwrap_or_default();
        let before = prev.info.unwrap_or_default();
        let subflows = self
            .subflows
            .iter()
            .map(|s| {
                let start = prev
                    .subflows
                    .iter()
                    .find(|p| p.local == s.local && p.remote == s.remote)
                    .map_or_else(TcpCounters::default, |p| p.tcp);
                SubflowSample {
                    local: s.local.clone(),
                    remote: s.remote.clone(),
                    tcp: s.tcp.sample(&start),
                }
            })
            .collect();
        MptcpSample {
            fallback: self.fallback,
            add_addr_signal: now.add_addr_signal,
            add_addr_accepted: now.add_addr_accepted,
            retransmits: u64::from(now.retransmits.wrapping_sub(before.retransmits)),
            bytes_retrans: now.bytes_retrans.saturating_sub(before.bytes_retrans),
            bytes_sent: now.bytes_sent.saturating_sub(before.bytes_sent),
            bytes_received: now.bytes_received.saturating_sub(before.bytes_received),
            bytes_acked: now.bytes_acked.saturating_sub(before.bytes_acked),
            subflows,
        }
    }
}

impl MptcpSample {
    /// `MPTCP: 2 subflows: 10.0.0.1:40000 -> 10.0.0.2:5290 rtt 61 us cwnd
    /// 1.50 MBytes retr 0; ...`, or that it fell back to TCP.
    pub fn describe(&self) -> String {
        if self.fallback {
            return "MPTCP: fell back to plain TCP (the peer did not take MPTCP)".into();
        }
        let n = self.subflows.len();
        let mut out = format!("MPTCP: {n} subflow{}", if n == 1 { "" } else { "s" });
        for (i, s) in self.subflows.iter().enumerate() {
            out.push_str(if i == 0 { ": " } else { "; " });
            out.push_str(&format!(
                "{} -> {} rtt {} cwnd {} retr {}",
                s.local,
                s.remote,
                Micros(u64::from(s.tcp.rtt_us)),
                format_bytes(s.tcp.cwnd_bytes),
                s.tcp.retransmits
            ));
        }
        if self.retransmits > 0 {
            out.push_str(&format!(", {} data-level retransmits", self.retransmits));
        }
        out
    }
}

/// MPTCP's cells in `--format csv` (`output/csv.rs`), on the rows of the
/// flows that carry its section; `None` is an empty cell.
#[derive(Debug, Default, Serialize)]
pub struct MptcpCells {
    /// Subflows at the end of the interval.
    mptcp_subflows: Option<usize>,
    /// `true` when the connection fell back to plain TCP.
    mptcp_fallback: Option<bool>,
    /// Data-level retransmissions in the span and their bytes (Linux >=
    /// 6.5).
    mptcp_retransmits: Option<u64>,
    mptcp_bytes_retrans: Option<u64>,
}

impl MptcpCells {
    /// The column names, as the fields (a test in the registry checks).
    pub const COLUMNS: &'static [&'static str] = &[
        "mptcp_subflows",
        "mptcp_fallback",
        "mptcp_retransmits",
        "mptcp_bytes_retrans",
    ];

    pub fn of(m: &MptcpSample) -> Self {
        MptcpCells {
            mptcp_subflows: Some(m.subflows.len()),
            mptcp_fallback: Some(m.fallback),
            mptcp_retransmits: Some(m.retransmits),
            mptcp_bytes_retrans: Some(m.bytes_retrans),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::TestSpec;
    use crate::transport::{Transport, TransportCounters, TransportSection};

    fn subflow(local: &str, retrans: u32, rtt: u32) -> SubflowCounters {
        SubflowCounters {
            local: local.into(),
            remote: "10.0.0.2:5290".into(),
            tcp: TcpCounters {
                total_retrans: retrans,
                rtt_us: rtt,
                snd_cwnd: 10,
                snd_mss: 1000,
                ..TcpCounters::default()
            },
        }
    }

    #[test]
    fn subflows_are_matched_by_address_and_new_ones_count_from_their_start() {
        let info = |sent, retransmits| MptcpInfo {
            bytes_sent: sent,
            retransmits,
            add_addr_accepted: 1,
            ..MptcpInfo::default()
        };
        let before = MptcpCounters {
            fallback: false,
            info: Some(info(1000, 1)),
            subflows: vec![subflow("10.0.0.1:1", 5, 100)],
        };
        let now = MptcpCounters {
            fallback: false,
            info: Some(info(4000, 3)),
            subflows: vec![subflow("10.0.1.1:2", 2, 300), subflow("10.0.0.1:1", 7, 90)],
        };
        let s = now.sample(&before);
        assert_eq!(
            (s.bytes_sent, s.retransmits, s.add_addr_accepted),
            (3000, 2, 1)
        );
        assert_eq!(s.subflows.len(), 2);
        assert_eq!(
            (s.subflows[0].local.as_str(), s.subflows[0].tcp.retransmits),
            ("10.0.1.1:2", 2)
        );
        assert_eq!(
            (s.subflows[1].tcp.retransmits, s.subflows[1].tcp.rtt_us),
            (2, 90)
        );
        assert_eq!(s.subflows[1].tcp.cwnd_bytes, 10_000);
        let line = s.describe();
        assert!(line.starts_with("MPTCP: 2 subflows: 10.0.1.1:2 -> 10.0.0.2:5290 rtt 300"));
        assert!(line.ends_with("2 data-level retransmits"), "{line}");
    }

    #[test]
    fn a_fallen_back_connection_says_so() {
        let fb = MptcpCounters {
            fallback: true,
            ..MptcpCounters::default()
        };
        let s = fb.sample(&fb);
        assert!(s.fallback && s.subflows.is_empty());
        assert!(s.describe().contains("fell back"));
    }

    #[test]
    fn the_section_is_flattened_into_the_interval_under_its_name() {
        let c = TransportCounters::Mptcp(MptcpCounters {
            subflows: vec![subflow("10.0.0.1:1", 0, 50)],
            ..MptcpCounters::default()
        });
        let section = c.sample(&c).unwrap();
        let TransportSection::Mptcp(s) = &section else {
            panic!("not MPTCP")
        };
        assert_eq!(s.subflows.len(), 1);
        let iv = crate::result::FlowInterval {
            start_s: 0.0,
            end_s: 1.0,
            omitted: false,
            bytes: 1,
            bits_per_second: 8.0,
            tcp: None,
            udp: None,
            transport: Some(section),
        };
        let json = serde_json::to_value(&iv).unwrap();
        assert_eq!(json["mptcp"]["subflows"][0]["local"], "10.0.0.1:1");
        let back: crate::result::FlowInterval = serde_json::from_value(json).unwrap();
        assert_eq!(back, iv);
        let mut plain = iv.clone();
        plain.transport = None;
        let json = serde_json::to_value(&plain).unwrap();
        assert!(json.get("mptcp").is_none());
        let back: crate::result::FlowInterval = serde_json::from_value(json).unwrap();
        assert_eq!(back.transport, None);
    }

    #[test]
    fn knobs_mptcp_cannot_apply_are_refused_and_iperf3_names_it_with_m() {
        let mut s = TestSpec::default_stream();
        s.transport = Transport::Mptcp;
        s.validate().unwrap();
        s.knobs.max_pacing_rate = Some(1000);
        assert!(s.validate().unwrap_err().to_string().contains("--fq-rate"));
        assert_eq!(
            Transport::for_iperf3(Iperf3Name {
                udp: false,
                mptcp: true
            }),
            Some(Transport::Mptcp)
        );
        assert_eq!(serde_json::to_string(&s.transport).unwrap(), "\"mptcp\"");
    }
}
