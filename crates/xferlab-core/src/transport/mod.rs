//! What carries the data: the registry of transports a test can name, and
//! what each one means to the model (its [`TransportModel`]).
//!
//! A transport is three small pieces, in the spirit of iperf3's `struct
//! protocol`:
//!
//! * **its model here, in the core** — a module implementing
//!   [`TransportModel`]: the label results print, its [`Carrier`] (which
//!   decides the data path and the handshake every pattern already has
//!   for that carrier), the knobs it accepts, how iperf3's parameters name
//!   it, and, if it reads per-interval state of its own beyond TCP_INFO
//!   and the datagram counters, the state's type and the section of the
//!   result it becomes, and the experiment metrics read from that section
//!   ([`TransportModel::metrics`]);
//! * **its driver in the binary** — a module implementing
//!   `xferlab::transport::TransportIo`: the command-line flag that picks
//!   it, socket setup (client socket, server listener, options after
//!   accept, a datagram flow's preparation), the data path (by default
//!   the carrier's) and the reading of its per-interval state;
//! * **the registration** — a variant of [`Transport`] with its arm in
//!   [`Transport::model`] here (for own state, a variant of
//!   [`TransportCounters`] and [`TransportSection`], and of
//!   [`TrialSection`] for what a cbr trial keeps; for knobs of its own, a
//!   field of [`OwnKnobs`] and a variant of [`KnobError`], both in
//!   [`crate::knobs`], and its line in [`check_owner`]), and its entry in
//!   the binary's registry (its flags' field of `OwnArgs`, its flow
//!   threads' slot of `OwnShared`).
//!
//! [`mptcp`] is a complete example of a transport with state of its own.
//!
//! Nothing else changes: the command line, the control protocols (xferlab's
//! and iperf3's), the server's listeners, every pattern that runs over the
//! carrier and every exporter find the transport through these registries.
//!
//! TCP and UDP keep their result sections of schema 1 (`tcp` and `udp` in
//! every interval and total); a transport added later puts its own under
//! its name, next to them (see [`TransportSection`]).

pub mod attach;
pub mod dccp;
pub mod mptcp;
pub mod quic;
pub mod tcp;
pub mod udp;
mod usb_bulk;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::jsondoc::MetricInfo;
use crate::knobs::{KnobError, Knobs, OwnKnobs};

/// What carries the data (the `transport` of a test spec).
///
/// Add a variant for a new transport, and its arm in [`Transport::model`];
/// the serde name is the one results and the control protocol use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    Tcp,
    /// Datagrams, each carrying a sequence number and a send time.
    Udp,
    /// USB bulk endpoints through usbfs (`xferlab usb`).
    UsbBulk,
    /// Multipath TCP: a byte stream over TCP subflows (iperf3's `-m`).
    Mptcp,
    /// DCCP (RFC 4340) with CCID2 or CCID3: xferlab's own stack, over UDP
    /// (RFC 6773).
    Dccp,
    /// QUIC (RFC 9000): streams, or DATAGRAM frames (RFC 9221) with -b.
    Quic,
}

impl Transport {
    /// Every registered transport.
    pub const ALL: &'static [Transport] = &[
        Transport::Tcp,
        Transport::Udp,
        Transport::UsbBulk,
        Transport::Mptcp,
        Transport::Dccp,
        Transport::Quic,
    ];

    /// What this transport means to the model.
    pub fn model(self) -> &'static dyn TransportModel {
        match self {
            Transport::Tcp => &tcp::Tcp,
            Transport::Udp => &udp::Udp,
            Transport::UsbBulk => &usb_bulk::UsbBulk,
            Transport::Mptcp => &mptcp::Mptcp,
            Transport::Dccp => &dccp::Dccp,
            Transport::Quic => &quic::Quic,
        }
    }

    /// The name people read: `TCP`, `UDP`.
    pub fn label(self) -> &'static str {
        self.model().label()
    }

    /// The data path this transport runs on.
    pub fn carrier(self) -> Carrier {
        self.model().carrier()
    }

    /// The transport iperf3's parameters ask for, if one is registered.
    pub fn for_iperf3(name: Iperf3Name) -> Option<Transport> {
        Transport::ALL
            .iter()
            .copied()
            .find(|t| t.model().iperf3() == Some(name))
    }
}

/// How a transport moves data, which decides its data path and how a
/// flow's socket is set up and attached to its test. A new transport
/// picks the carrier it behaves like; a carrier of its own means a data
/// path and handshakes of its own in every pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    /// A connected byte stream (SOCK_STREAM: TCP, MPTCP): write as fast as
    /// the socket takes it; a data connection is attached to its test by
    /// the bytes it opens with.
    Bytes,
    /// Datagrams with a sequence number and a send time, at a rate.
    Datagrams,
    /// USB bulk transfers (`xferlab usb`), outside the socket patterns.
    UsbBulk,
}

/// How iperf3's parameters name a transport: `"udp": true` or `"tcp":
/// true`, and `"mptcp": true` for iperf3's `-m` (3.19+).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Iperf3Name {
    pub udp: bool,
    pub mptcp: bool,
}

/// What a transport means to the model, independent of any I/O. One unit
/// struct per transport implements it (see the module docs for the rest
/// of a transport).
pub trait TransportModel: Sync {
    /// The name people read in results and logs: `TCP`.
    fn label(&self) -> &'static str;

    /// Its data path (see [`Carrier`]).
    fn carrier(&self) -> Carrier;

    /// Whether a sending flow's intervals carry TCP_INFO (`tcp`): the
    /// retransmits, window and RTT columns, iperf3's retransmit counts.
    fn tcp_info(&self) -> bool {
        false
    }

    /// The transport's checks of a stream test's knobs, after the checks
    /// every test gets: which knobs apply, and their ranges. Messages name
    /// the flag and what to do instead.
    fn check_knobs(&self, knobs: &Knobs) -> Result<(), KnobError>;

    /// How iperf3's parameters name this transport; None where iperf3 has
    /// no such transport (the iperf3 client then refuses the test, and
    /// the server cannot be asked for it).
    fn iperf3(&self) -> Option<Iperf3Name> {
        None
    }

    /// Whether the transport's own congestion control decides the rate,
    /// so `-b` is only the application's offer and is unlimited unless
    /// given (DCCP), rather than defaulting to UDP's 1 Mbit/s.
    fn congestion_controlled(&self) -> bool {
        false
    }

    /// Whether a test's flows count datagrams (the `udp` section, and the
    /// jitter and loss columns of the human output): by default, whether
    /// the transport's carrier is datagrams; QUIC's only with `-b`
    /// (DATAGRAM frames), not when it moves streams.
    fn counts_datagrams(&self, _knobs: &Knobs) -> bool {
        self.carrier() == Carrier::Datagrams
    }

    /// How the test's data moves, in a few words for the human output's
    /// description of the test (after its flows and limit); None: as its
    /// carrier moves it (datagrams of `-l` bytes at `-b`, or writes).
    fn describe_data(&self, _knobs: &Knobs) -> Option<String> {
        None
    }

    /// Whether `-C` names the transport's own congestion controller (a
    /// userspace stack's: QUIC's), which the transport's model checks,
    /// rather than the kernel's TCP_CONGESTION, which the sessions check
    /// against the host's and set on every data socket.
    fn own_congestion(&self) -> bool {
        false
    }

    /// The headline metrics an experiment reads from this transport's own
    /// result sections, as `experiment::metrics::METRICS` lists the
    /// shared ones (the model's docs hold their table).
    fn metrics(&self) -> &'static [MetricInfo] {
        &[]
    }

    /// Reads [`TransportModel::metrics`] out of a result document (any
    /// transport's: a section that is not there gives nothing), each one
    /// found as (name, value).
    fn measure(&self, _doc: &Value, _out: &mut dyn FnMut(&'static str, f64)) {}

    /// The same metrics out of one trial of a cbr document, from its
    /// [`TrialSection`].
    fn measure_trial(&self, _trial: &Value, _out: &mut dyn FnMut(&'static str, f64)) {}

    /// What a series trial (cbr, sweep) keeps of a finished test over
    /// this transport, beyond the datagram figures every trial has, from
    /// its result document; None where the knobs give nothing to keep.
    fn trial_section(&self, _knobs: &Knobs, _doc: &Value) -> Option<TrialSection> {
        None
    }
}

/// A transport's own part of a series trial, from
/// [`TransportModel::trial_section`]: a variant per transport that keeps
/// one (its registration), flattened into the trial as `"name": {...}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum TrialSection {
    #[serde(rename = "safeudp")]
    SafeUdp(dccp::SafeUdpTrial),
}

impl TrialSection {
    /// One line for people, under the trial's row.
    pub fn describe(&self) -> String {
        match self {
            Self::SafeUdp(t) => t.describe(),
        }
    }
}

/// Knobs of a transport other than the test's are refused, with that
/// transport's line.
pub fn check_owner(own: &OwnKnobs, transport: Transport) -> Result<(), KnobError> {
    if own.dccp.is_some() && transport != Transport::Dccp {
        return Err(dccp::KnobError::WithoutDccp.into());
    }
    if own.quic.is_some() && transport != Transport::Quic {
        return Err(quic::KnobError::WithoutQuic.into());
    }
    Ok(())
}

/// The knob checks of a byte-stream transport: no datagram knobs, and a
/// TCP stream is paced with `--fq-rate`, not `-b`.
pub(crate) fn check_stream_knobs(k: &Knobs) -> Result<(), KnobError> {
    if k.rate.is_some() {
        return Err(KnobError::BitrateOnTcp);
    }
    if k.gso || k.batch != 1 || k.dont_fragment || k.rx_stamps.is_some() {
        return Err(KnobError::UdpOptionsOnTcp);
    }
    Ok(())
}

/// Per-interval state a transport reads of its own, beyond TCP_INFO and
/// the datagram counters of [`crate::interval::Reading`]: cumulative
/// values as the driver reads them at a boundary. Add a variant for a
/// transport that has such state, and its arm in
/// [`TransportCounters::sample`].
// Read once per interval boundary and moved a few times: a Box would be
// an allocation per reading to save ~200 bytes of copies.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum TransportCounters {
    Mptcp(mptcp::MptcpCounters),
    Dccp(dccp::DccpCounters),
    Quic(quic::QuicCounters),
}

impl TransportCounters {
    /// The reading of this transport before anything happened, for a
    /// flow whose first reading comes after its start (rr over QUIC: the
    /// connection opens with the test); None where a transport's first
    /// reading is always taken at the start.
    pub fn zero(&self) -> Option<TransportCounters> {
        match self {
            Self::Quic(q) => Some(Self::Quic(quic::QuicCounters {
                cc: q.cc,
                ..quic::QuicCounters::default()
            })),
            Self::Mptcp(_) | Self::Dccp(_) => None,
        }
    }

    /// The interval from `prev` to `self`, as the result shows it; None
    /// when the two readings cannot be compared.
    pub fn sample(&self, prev: &TransportCounters) -> Option<TransportSection> {
        match (self, prev) {
            (Self::Mptcp(now), Self::Mptcp(before)) => {
                Some(TransportSection::Mptcp(now.sample(before)))
            }
            (Self::Dccp(now), Self::Dccp(before)) => {
                Some(TransportSection::Dccp(now.sample(before)))
            }
            (Self::Quic(now), Self::Quic(before)) => {
                Some(TransportSection::Quic(now.sample(before)))
            }
            _ => None,
        }
    }
}

/// A transport's own section of an interval or a total, from
/// [`TransportCounters::sample`]. It is flattened into the interval: a
/// variant `Foo(FooSample)` appears as `"foo": {...}` next to `bytes`,
/// `tcp` and `udp`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TransportSection {
    Mptcp(mptcp::MptcpSample),
    Dccp(dccp::DccpSample),
    Quic(quic::QuicSample),
}

impl TransportSection {
    /// One line for people, under the flow's interval row.
    pub fn describe(&self) -> String {
        match self {
            Self::Mptcp(s) => s.describe(),
            Self::Dccp(s) => s.describe(),
            Self::Quic(s) => s.describe(),
        }
    }

    /// Whether the sender's section over the whole test goes into the
    /// human summary (a CCID's final state: DCCP); per-interval sections
    /// print under each row either way.
    pub fn in_summary(&self) -> bool {
        matches!(self, Self::Dccp(_))
    }

    /// The CSV cells of every transport with a section, this one's
    /// filled, the others' empty (`output/csv.rs` writes them after the
    /// shared cells, under [`SECTION_COLUMNS`]).
    pub fn cells(section: Option<&Self>) -> SectionCells {
        let mut c = SectionCells::default();
        match section {
            None => {}
            Some(Self::Mptcp(s)) => c.0 = mptcp::MptcpCells::of(s),
            Some(Self::Dccp(s)) => c.1 = dccp::DccpCells::of(s),
            Some(Self::Quic(s)) => c.2 = quic::QuicCells::of(s),
        }
        c
    }
}

/// The CSV cells of the transports with a section, one per
/// [`TransportSection`] variant in its order: a transport that adds a
/// section adds its cells type here and its columns to
/// [`SECTION_COLUMNS`].
pub type SectionCells = (mptcp::MptcpCells, dccp::DccpCells, quic::QuicCells);

/// The column names of [`SectionCells`], in order.
pub const SECTION_COLUMNS: &[&[&str]] = &[
    mptcp::MptcpCells::COLUMNS,
    dccp::DccpCells::COLUMNS,
    quic::QuicCells::COLUMNS,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Each transport's CSV column names are its cells' field names, in
    /// order, and every section has its cells.
    #[test]
    fn section_columns_name_the_cells() {
        let names = |columns: &[&str]| {
            let fields: Vec<String> = columns.iter().map(|c| format!("\"{c}\":null")).collect();
            format!("{{{}}}", fields.join(","))
        };
        let cells = SectionCells::default();
        let written = [
            serde_json::to_string(&cells.0).unwrap(),
            serde_json::to_string(&cells.1).unwrap(),
            serde_json::to_string(&cells.2).unwrap(),
        ];
        assert_eq!(written.len(), SECTION_COLUMNS.len());
        for (w, columns) in written.iter().zip(SECTION_COLUMNS) {
            assert_eq!(*w, names(columns));
        }
    }

    #[test]
    fn every_transport_is_registered_once_and_named_in_iperf3_at_most_once() {
        for (i, t) in Transport::ALL.iter().enumerate() {
            assert!(!Transport::ALL[..i].contains(t), "{t:?} listed twice");
            if let Some(name) = t.model().iperf3() {
                assert_eq!(Transport::for_iperf3(name), Some(*t));
            }
        }
        assert_eq!(
            Transport::for_iperf3(Iperf3Name::default()),
            Some(Transport::Tcp)
        );
        assert_eq!(
            Transport::for_iperf3(Iperf3Name {
                udp: true,
                mptcp: false
            }),
            Some(Transport::Udp)
        );
    }

    #[test]
    fn names_in_specs_are_the_schema_1_names() {
        for (t, name) in [
            (Transport::Tcp, "\"tcp\""),
            (Transport::Udp, "\"udp\""),
            (Transport::UsbBulk, "\"usb_bulk\""),
            (Transport::Mptcp, "\"mptcp\""),
            (Transport::Dccp, "\"dccp\""),
            (Transport::Quic, "\"quic\""),
        ] {
            assert_eq!(serde_json::to_string(&t).unwrap(), name);
        }
    }
}
