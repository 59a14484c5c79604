//! `xferlab stream --quic --quic-perf HOST`: the stream pattern against a
//! QUIC performance protocol server. There is no control connection
//! (the server is a foreign program, as an iperf3 server is, but one
//! whose protocol has no results exchange): each flow is one QUIC
//! connection to the server, its thread the QUIC transport's flow in
//! perf mode (`transport::quic::perf`: forward flows upload on request
//! streams that ask for 0 bytes back, reverse flows ask for their bytes
//! and read them), and the test runs on the driver loop without a peer
//! ([`drive_alone`]): `-t` or Ctrl-C stops the flows, `-n` ends them
//! when their bytes moved. The result is an ordinary one with this side
//! only; the server's side is not reported.

use std::net::SocketAddr;
use std::sync::{mpsc, Arc};
use std::time::{Duration, SystemTime};

use xferlab_core::result::{Endpoint, FlowEnd, Status};

use super::QuicPerfError;
use crate::driver::client::{drive_alone, interruption};
use crate::driver::{Interrupts, DRAIN};
use crate::net::{self, FlowSocket};
use crate::output::{Reporter, StartInfo};
use crate::session::client::{assemble, ClientConfig, Outcome};
use crate::stream::{ConnectedFlow, Side};
use crate::sys::cpu::CpuTally;
use crate::transport;

/// What every result of a perf test says about its missing half.
pub const NOT_REPORTED: &str =
    "the QUIC perf server's side is not reported: the protocol has no results exchange";

/// Runs one test against a perf server. `Err` means nothing was measured.
pub fn run(
    cfg: &ClientConfig,
    reporter: &mut dyn Reporter,
    interrupts: &Interrupts,
) -> Result<Outcome, QuicPerfError> {
    let spec = &cfg.spec;
    let server = *cfg.addrs.first().ok_or(QuicPerfError::NoHost)?;
    transport::io(spec.transport)?.check(&spec.knobs)?;
    let flows = spec
        .flows()
        .into_iter()
        .map(|plan| {
            let sock = open(cfg, server)?;
            Ok(ConnectedFlow::new(
                plan,
                FlowSocket::Datagram(sock),
                Endpoint::Client,
                spec,
            )?)
        })
        .collect::<Result<Vec<_>, QuicPerfError>>()?;
    let (tx, rx) = mpsc::channel();
    let tally = Arc::new(CpuTally::default());
    let cpu_guard = tally.track();
    let wall_start = SystemTime::now();
    let mut side = Side::prepare(
        Endpoint::Client,
        false,
        spec,
        flows,
        tally.clone(),
        crate::control::flow_done_notifier(&tx),
    );
    side.start()?;
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).ok();
    let session: String = random.iter().map(|b| format!("{b:02x}")).collect();
    reporter
        .start(&StartInfo {
            spec,
            server: &cfg.server,
            embedded: false,
            session: &session,
            flows: &side.flow_starts(),
        })
        .ok();
    let at = side.started_at();
    let planned = spec.planned_seconds().map(Duration::from_secs_f64);
    let driven = drive_alone(
        Box::new(side),
        (at, planned),
        DRAIN,
        &rx,
        reporter,
        interrupts,
    );
    let interrupted = driven.run.interrupted();
    let mut error = driven.error;
    let finished = driven
        .workload
        .expect("drive_alone starts the workload on its first pass")
        .finish();
    let mut client = finished.into_report(&mut error);
    drop(cpu_guard);
    client.warnings.push(NOT_REPORTED.into());
    if interrupted {
        error.get_or_insert_with(|| interruption(client.duration_s));
    }
    // A flow that ended with an error (the handshake, the server's
    // close) names the test's one error line.
    if error.is_none() {
        error = client.flows.iter().find_map(|f| match &f.end {
            FlowEnd::Aborted(why) => Some(why.clone()),
            _ => None,
        });
    }
    let completed = client.flows.iter().all(|f| f.end == FlowEnd::Completed);
    let mut result = assemble(cfg, session, wall_start, client, None, error.clone());
    // `assemble` wants the server's report for an ok test; this protocol
    // has none to give, so this side's flows decide.
    if error.is_none() && completed {
        result.status = Status::Ok;
    }
    Ok(Outcome {
        result,
        error,
        interrupted,
    })
}

/// A flow's UDP socket, connected to the server (the QUIC connection is
/// made on it by the flow's thread).
fn open(cfg: &ClientConfig, server: SocketAddr) -> Result<std::net::UdpSocket, QuicPerfError> {
    let sock = transport::bind(
        cfg.spec.transport,
        net::any_port(server),
        &cfg.spec.knobs,
        false,
    )?;
    sock.connect(server)
        .map_err(|err| QuicPerfError::Reach { server, err })?;
    Ok(sock)
}
