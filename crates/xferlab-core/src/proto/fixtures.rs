//! Minimal messages for driving the control machines without a network:
//! the protocol tests and the fuzz drivers answer with these.

use std::time::Duration;

use super::wire::VERSION;
use super::{ServerPolicy, Welcome};
use crate::result::{CpuUsage, Endpoint, HostInfo, KernelCounters, SideReport, Software};

/// The server's limits: tests of at most `max_duration`.
pub fn policy(max_duration: Duration) -> ServerPolicy {
    ServerPolicy { max_duration }
}

/// xferlab as a peer, at `version`, speaking this protocol.
pub fn software(version: &str) -> Software {
    Software {
        name: "xferlab".into(),
        version: version.into(),
        protocol: VERSION,
    }
}

/// A side's report of a stream test with no flows.
pub fn report(endpoint: Endpoint) -> SideReport {
    SideReport {
        endpoint,
        host: HostInfo::default(),
        embedded: false,
        duration_s: 1.0,
        flows: vec![],
        sums: vec![],
        cpu: CpuUsage::default(),
        counters: KernelCounters::default(),
        warnings: vec![],
        pattern: crate::result::PatternReport::Stream,
        transport: None,
    }
}

/// A server's welcome for tests of at most `max_duration`.
pub fn welcome(software: Software, max_duration: Duration) -> Welcome {
    Welcome {
        session: "00".repeat(16),
        software,
        host: HostInfo::default(),
        max_duration_s: max_duration.as_secs_f64(),
        udp_ports: vec![],
        rr_port: None,
    }
}
