//! `xferlab stream --iperf3`: the stream pattern against a stock iperf3
//! server. The event loop has the shape of [`crate::stream::client`]'s;
//! the differences are iperf3's: only the client ends the test (TEST_END),
//! the server closes the data connections, results are totals exchanged
//! after the test, and UDP streams are opened with a 4-byte handshake.

use crate::sys::clock;
use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::{mpsc, Arc};
use std::time::{Duration, SystemTime};
use xferlab_core::time::Time;

use xferlab_core::iperf3::convert::{params_from_spec, results_from_side, side_from_results};
use xferlab_core::iperf3::wire::{is_udp_connect_reply, UDP_CONNECT_MSG};
use xferlab_core::iperf3::{
    i_errno, make_cookie, ClientEvent, Cookie, Iperf3Client, Results, UdpHeader,
};
use xferlab_core::result::{Endpoint, FlowRole, SideReport};
use xferlab_core::run::{Policy, Role, TestRun};
use xferlab_core::spec::Limit;

use super::{Iperf3Error, RESULTS_DRAIN, UDP_HANDSHAKE_TIMEOUT};
use crate::control::{ControlIo, Wake};
use crate::driver::client::{drive, interruption, ClientRole, Cx};
use crate::driver::Interrupts;
use crate::driver::{Finished, Workload, DRAIN};
use crate::net::FlowSocket;
use crate::net::{self, sockopt};
use crate::output::{Reporter, StartInfo};
use crate::session::client::{assemble, ClientConfig, Outcome};
use crate::stream::{ConnectedFlow, Side};
use crate::sys::cpu::CpuTally;
use crate::transport::datagram::DatagramWire;
use crate::transport::{self, Carrier};

/// Longest wait, after the senders stop, for their data to be
/// acknowledged before TEST_END goes out; and how often to look.
const END_DRAIN: Duration = Duration::from_secs(1);
const END_DRAIN_POLL: Duration = Duration::from_millis(1);

/// Runs one test against an iperf3 server. `Err` means nothing was
/// measured; once flows have started, problems end up in
/// [`Outcome::error`] next to the partial result.
pub fn run(
    cfg: &ClientConfig,
    get_server_output: bool,
    reporter: &mut dyn Reporter,
    interrupts: &Interrupts,
) -> Result<Outcome, Iperf3Error> {
    let spec = &cfg.spec;
    let params = params_from_spec(spec, get_server_output)?;
    if let Some(cc) = &spec.knobs.congestion {
        sockopt::check_congestion(cc)?;
    }
    let mut random = [0u8; 36];
    getrandom::fill(&mut random).map_err(Iperf3Error::Randomness)?;
    let cookie = make_cookie(&random);
    let stream = net::connect_control(&cfg.addrs, cfg.connect_timeout, net::Server::Iperf3)?;
    let server = stream.peer_addr().map_err(Iperf3Error::Control)?;
    let (tx, rx) = mpsc::channel();
    let mut io = ControlIo::new(stream, tx.clone()).map_err(Iperf3Error::Control)?;
    let tally = Arc::new(CpuTally::default());
    let cpu_guard = tally.track();
    let wall_start = SystemTime::now();
    let wire = DatagramWire::Iperf3(UdpHeader {
        counters_64bit: params.udp_counters_64bit,
    });
    let mut role = Iperf3Role {
        ctl: Iperf3Client::new(clock::now(), cookie, params),
        cfg,
        server,
        cookie,
        wire,
        tx: &tx,
        tally: &tally,
        session: String::from_utf8_lossy(&cookie[..cookie.len() - 1]).into_owned(),
        prepared: None,
        report: None,
        results_due: None,
        peer: None,
        done: false,
    };
    // Only the client ends an iperf3 test, and an iperf3 server stops
    // counting at TEST_END: it goes out once what our senders wrote has
    // arrived (bounded by END_DRAIN), so both ends' totals agree.
    let policy = Policy {
        role: Role::Client,
        max_duration: None,
        drain: DRAIN,
        quiesce: END_DRAIN,
    };
    let control = Some((&mut io, server));
    let driven = drive(&mut role, control, &rx, reporter, interrupts, policy);
    drop(io);
    let mut error = driven.error;
    let client = match (role.report.take(), driven.workload) {
        (Some(r), _) => r,
        (None, Some(mut w)) if driven.run.started() => {
            w.abort("the test ended early");
            w.finish().into_report(&mut error)
        }
        _ => {
            return Err(Iperf3Error::NotStarted(
                error.unwrap_or_else(|| "the test ended before it started".into()),
            ));
        }
    };
    drop(cpu_guard);
    if !role.done && error.is_none() {
        error = Some(format!(
            "the iperf3 server at {server} ended the session before the results exchange finished"
        ));
    }
    let interrupted = driven.run.interrupted();
    if interrupted {
        error.get_or_insert_with(|| interruption(client.duration_s));
    }
    let peer = role.peer.take();
    let server_output = peer.as_ref().and_then(|r| {
        r.server_output_text.clone().or_else(|| {
            r.server_output_json
                .as_ref()
                .and_then(|j| serde_json::to_string_pretty(j).ok())
        })
    });
    let peer_side = peer.map(|r| side_from_results(&r, &client, &format!("iperf3 at {server}")));
    let session = std::mem::take(&mut role.session);
    let mut result = assemble(cfg, session, wall_start, client, peer_side, error.clone());
    result.server_output = server_output;
    Ok(Outcome {
        result,
        error,
        interrupted,
    })
}

/// The client's side of iperf3's control protocol: streams opened when
/// the server asks, results handed over when it asks, TEST_END after the
/// senders drained.
struct Iperf3Role<'a> {
    ctl: Iperf3Client,
    cfg: &'a ClientConfig,
    server: SocketAddr,
    cookie: Cookie,
    wire: DatagramWire,
    tx: &'a mpsc::Sender<Wake>,
    tally: &'a Arc<CpuTally>,
    session: String,
    /// The streams, opened and not yet started.
    prepared: Option<Side>,
    report: Option<SideReport>,
    results_due: Option<Time>,
    peer: Option<Box<Results>>,
    done: bool,
}

impl ClientRole for Iperf3Role<'_> {
    type Ctl = Iperf3Client;

    fn ctl(&mut self) -> &mut Iperf3Client {
        &mut self.ctl
    }

    fn on_event(&mut self, ev: ClientEvent, cx: &mut Cx<'_>) {
        let server = self.server;
        match ev {
            ClientEvent::OpenStreams { count } => {
                match open_streams(self.cfg, server, &self.cookie, count) {
                    Ok(flows) => {
                        let mut s = Side::prepare(
                            Endpoint::Client,
                            false,
                            &self.cfg.spec,
                            flows,
                            self.tally.clone(),
                            crate::control::flow_done_notifier(self.tx),
                        );
                        s.set_datagram_wire(self.wire);
                        self.prepared = Some(s);
                        self.ctl.streams_open(clock::now());
                    }
                    Err(e) => {
                        self.ctl.abort();
                        cx.fail(e.to_string());
                    }
                }
            }
            ClientEvent::Started => {}
            ClientEvent::Running => {
                let Some(mut s) = self.prepared.take() else {
                    return;
                };
                if let Err(e) = s.start() {
                    self.ctl.abort();
                    cx.fail(e.to_string());
                    self.prepared = Some(s);
                    return;
                }
                cx.reporter
                    .start(&StartInfo {
                        spec: &self.cfg.spec,
                        server: &self.cfg.server,
                        embedded: false,
                        session: &self.session,
                        flows: &s.flow_starts(),
                    })
                    .ok();
                let at = s.started_at();
                let planned = self.cfg.spec.planned_seconds().map(Duration::from_secs_f64);
                let streams = Iperf3Streams {
                    side: s,
                    limit: self.cfg.spec.limit,
                };
                cx.started(Box::new(streams), at, planned);
            }
            ClientEvent::ResultsRequested => {
                self.results_due.get_or_insert(cx.now);
            }
            ClientEvent::PeerResults(r) => self.peer = Some(r),
            ClientEvent::Done => self.done = true,
            ClientEvent::ServerBusy => cx.fail(format!(
                "the iperf3 server at {server} is busy running another test: try again later"
            )),
            ClientEvent::ServerError { i_errno, errno } => {
                let what = i_errno::describe(i_errno).unwrap_or("unknown error");
                let os = errno
                    .filter(|e| *e != 0)
                    .map(|e| format!(", {}", std::io::Error::from_raw_os_error(e)))
                    .unwrap_or_default();
                cx.fail(format!(
                    "the iperf3 server at {server} reported: {what} (i_errno {i_errno}{os})"
                ));
            }
            ClientEvent::ServerTerminated => cx.fail(format!(
                "the iperf3 server at {server} was stopped during the test"
            )),
            ClientEvent::Failed(e) => cx.fail(format!("iperf3 server at {server}: {e}")),
        }
    }

    fn end_peer(&mut self, now: Time) {
        self.ctl.end_test(now);
    }

    fn abort_peer(&mut self, _why: &str) {
        self.ctl.abort();
    }

    fn peer_done(&self) -> bool {
        self.done
    }

    /// Once the server asked for results: receivers that have not seen
    /// the end of their streams within RESULTS_DRAIN are cut, and this
    /// side's results go out when every flow has ended.
    fn step(&mut self, cx: &mut Cx<'_>) {
        let Some(since) = self.results_due else {
            return;
        };
        if let Some(w) = cx.workload.as_mut() {
            if !w.all_done() && cx.now >= since + RESULTS_DRAIN {
                w.cut(cx.now);
            }
        }
        if self.report.is_some() {
            return;
        }
        let r = match cx.workload.take_if(|w| w.all_done()) {
            Some(w) => w.finish().into_report(cx.error),
            None if cx.workload.is_none() => match self.prepared.take() {
                Some(s) => s.finish(),
                None => return,
            },
            None => return,
        };
        self.ctl.send_results(
            clock::now(),
            &results_from_side(&r, self.cfg.spec.transport),
        );
        self.report = Some(r);
    }

    fn deadline(&self, run: &TestRun) -> Option<Time> {
        let quiescing = run.quiescing().then(|| clock::now() + END_DRAIN_POLL);
        let due = self.results_due.map(|t| t + RESULTS_DRAIN);
        quiescing.into_iter().chain(due).min()
    }
}

/// The streams of a test against an iperf3 server: a [`Side`] that ends
/// and drains by iperf3's rules.
struct Iperf3Streams {
    side: Side,
    limit: Limit,
}

impl Workload for Iperf3Streams {
    fn tick(&mut self, now: Time, out: Option<&mut dyn Reporter>) {
        Workload::tick(&mut self.side, now, out);
    }

    fn next_tick(&self) -> Option<Time> {
        self.side.next_tick()
    }

    /// Receivers keep draining until the server closes the data
    /// connections.
    fn stop(&mut self, now: Time) {
        self.side.stop(now);
    }

    fn abort(&mut self, why: &str) {
        self.side.abort(why);
    }

    fn cut(&mut self, now: Time) {
        self.side.cut(now);
    }

    fn all_done(&self) -> bool {
        self.side.all_done()
    }

    /// Counted as iperf3 counts: every local sender reached its quota, or
    /// the bytes received reached the limit (a reverse test ends when the
    /// server's data has arrived).
    fn limit_reached(&self) -> bool {
        let Limit::Bytes { bytes } = self.limit else {
            return false;
        };
        self.side.all_of_role_done(FlowRole::Sender)
            || self.side.bytes_of_role(FlowRole::Receiver) >= bytes
    }

    /// What our senders wrote has been acknowledged.
    fn quiesced(&self) -> bool {
        !self.side.any_of_role(FlowRole::Sender)
            || (self.side.all_of_role_done(FlowRole::Sender) && self.side.unacked_bytes() == 0)
    }

    fn finish(self: Box<Self>) -> Finished {
        self.side.finish().into()
    }
}

/// Opens the `count` data streams the server asked for, one after
/// another as iperf3 does, in the order of [`TestSpec::flows`] (see
/// [`xferlab_core::iperf3::convert::plan_for_stream`]).
fn open_streams(
    cfg: &ClientConfig,
    server: SocketAddr,
    cookie: &Cookie,
    count: usize,
) -> Result<Vec<ConnectedFlow>, Iperf3Error> {
    let plans = cfg.spec.flows();
    if plans.len() != count {
        return Err(Iperf3Error::Streams {
            asked: count,
            planned: plans.len(),
        });
    }
    let mut out = Vec::with_capacity(count);
    for plan in plans {
        let socket = match cfg.spec.transport.carrier() {
            Carrier::Bytes => FlowSocket::Stream(open_stream(cfg, server, cookie, plan.id)?),
            Carrier::Datagrams => FlowSocket::Datagram(open_datagram(cfg, server, plan.id)?),
            Carrier::UsbBulk => return Err(Iperf3Error::NotTcpUdp),
        };
        out.push(ConnectedFlow::new(
            plan,
            socket,
            Endpoint::Client,
            &cfg.spec,
        )?);
    }
    Ok(out)
}

fn open_stream(
    cfg: &ClientConfig,
    server: SocketAddr,
    cookie: &Cookie,
    id: u32,
) -> Result<TcpStream, Iperf3Error> {
    let mut stream = transport::connect(&cfg.spec, server, cfg.connect_timeout)?;
    stream
        .write_all(cookie)
        .map_err(|err| Iperf3Error::OpenStream { id, err })?;
    stream.set_nodelay(cfg.spec.knobs.nodelay).ok();
    Ok(stream)
}

/// Connects a datagram socket to the server's port, sends the 4-byte
/// hello and waits for the answer. In reverse mode the server may already
/// send data on the stream before its answer arrives; that is skipped.
fn open_datagram(
    cfg: &ClientConfig,
    server: SocketAddr,
    id: u32,
) -> Result<UdpSocket, Iperf3Error> {
    let udp = |what| move |err| Iperf3Error::Udp { what, server, err };
    let sock = transport::bind(
        cfg.spec.transport,
        net::any_port(server),
        &cfg.spec.knobs,
        false,
    )?;
    sock.connect(server).map_err(udp("reach"))?;
    sock.send(&UDP_CONNECT_MSG).map_err(udp("send to"))?;
    let deadline = clock::now() + UDP_HANDSHAKE_TIMEOUT;
    let mut buf = vec![0u8; 65_536];
    loop {
        let left = deadline.duration_since(clock::now());
        if left.is_zero() {
            return Err(Iperf3Error::NoUdpAnswer {
                id,
                server,
                seconds: UDP_HANDSHAKE_TIMEOUT.as_secs(),
            });
        }
        sock.set_read_timeout(Some(left)).ok();
        match sock.recv(&mut buf) {
            Ok(n) if is_udp_connect_reply(&buf[..n]) => {
                sock.set_read_timeout(None).ok();
                return Ok(sock);
            }
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                return Err(Iperf3Error::UdpPortClosed {
                    port: server.port(),
                    id,
                })
            }
            Err(_) => {}
        }
    }
}
