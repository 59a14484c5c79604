//! Server side of one iperf3 control connection.

use std::time::Duration;

use crate::time::Time;

use super::i_errno;
use super::io::{Expect, Inbox, Msg};
use super::json::JsonError;
use super::params::{Params, StreamInfo};
use super::results::Results;
use super::wire::{
    encode_json_frame, is_cookie, max_client_results_json, server_error, Cookie, State, COOKIE_LEN,
    MAX_PARAMS_JSON,
};
use super::{Iperf3Error, PAUSED_INPUT_LIMIT, RESULTS_TIMEOUT, SETUP_TIMEOUT};
use crate::outbox::{Machine, Outbox};

#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    /// The client's parameters, parsed: check them against the server's
    /// policy and answer with [`Iperf3Server::accept`] or
    /// [`Iperf3Server::refuse`].
    ParamsReceived(Box<Params>),
    /// Every data stream is attached and TEST_START + TEST_RUNNING are
    /// queued: start the flows.
    Running,
    /// TEST_END: stop the flows (receivers stamp `end_time` now) and
    /// provide our totals with [`Iperf3Server::send_results`].
    /// EXCHANGE_RESULTS is already queued.
    Stop,
    /// The client's totals.
    PeerResults(Box<Results>),
    /// IPERF_DONE: the exchange is complete.
    Done,
    /// CLIENT_TERMINATE: the client was interrupted.
    Aborted,
    /// The session is over because of this error (already reported to the
    /// client with SERVER_ERROR where that makes sense).
    Failed(Iperf3Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    AwaitParams,
    Deciding,
    AwaitStreams,
    Running,
    AwaitClientResults,
    ProvidingResults,
    AwaitIperfDone,
    Done,
    Closed,
}

impl St {
    /// What this state reads; `streams` is the test's stream count.
    fn expect(self, streams: usize) -> Expect {
        match self {
            St::AwaitParams => Expect::Json {
                max: MAX_PARAMS_JSON,
            },
            St::AwaitClientResults => Expect::Json {
                max: max_client_results_json(streams),
            },
            St::Deciding | St::ProvidingResults | St::Done | St::Closed => Expect::Paused,
            St::AwaitStreams | St::Running | St::AwaitIperfDone => Expect::State,
        }
    }

    fn during(self) -> &'static str {
        match self {
            St::AwaitParams => "while waiting for the parameters",
            St::Deciding => "while the request was being decided",
            St::AwaitStreams => "while waiting for the data streams",
            St::Running => "while the test was running",
            St::AwaitClientResults => "while waiting for the client's results",
            St::ProvidingResults => "while our results were being prepared",
            St::AwaitIperfDone => "while waiting for IPERF_DONE",
            St::Done => "after the test",
            St::Closed => "after the session ended",
        }
    }

    /// The iperf3 error code for a failure in this state.
    fn i_errno(self) -> i32 {
        match self {
            St::AwaitParams | St::Deciding => i_errno::IERECVPARAMS,
            St::AwaitStreams => i_errno::IESTREAMACCEPT,
            St::Running => i_errno::IESERVERTERM,
            St::AwaitClientResults | St::ProvidingResults => i_errno::IERECVRESULTS,
            St::AwaitIperfDone | St::Done | St::Closed => i_errno::IEMESSAGE,
        }
    }
}

/// State bytes a client may send at any point.
const SIGNALS: [u8; 1] = [0x0c];

#[derive(Debug)]
pub struct Iperf3Server {
    state: St,
    cookie: Cookie,
    params: Option<Params>,
    expected: usize,
    attached: usize,
    watchdog: Duration,
    results_frame: Option<Vec<u8>>,
    inbox: Inbox,
    io: Outbox<ServerEvent>,
}

impl Iperf3Server {
    /// A control connection whose first 37 bytes (`cookie`) the dispatcher
    /// has already read. Queues PARAM_EXCHANGE. A malformed cookie fails
    /// the session at once, sending nothing.
    pub fn new(now: Time, cookie: &[u8]) -> Self {
        let mut s = Iperf3Server {
            state: St::AwaitParams,
            cookie: [0; COOKIE_LEN],
            params: None,
            expected: 0,
            attached: 0,
            watchdog: Duration::ZERO,
            results_frame: None,
            inbox: Inbox::default(),
            io: Outbox::new(),
        };
        if is_cookie(cookie) {
            s.cookie.copy_from_slice(cookie);
            s.io.send(&[State::ParamExchange.byte()]);
            s.io.wait(now, SETUP_TIMEOUT, "waiting for the client's parameters");
        } else {
            s.fail(Iperf3Error::BadCookie, false);
        }
        s
    }

    /// The test's cookie: data connections must open with it.
    pub fn cookie(&self) -> &Cookie {
        &self.cookie
    }

    /// The client's parameters, once received.
    pub fn params(&self) -> Option<&Params> {
        self.params.as_ref()
    }

    fn process(&mut self, now: Time) {
        while !self.is_closed() {
            match self
                .inbox
                .next(self.state.expect(self.expected), &SIGNALS, false)
            {
                Ok(Some(msg)) => self.on_message(now, msg),
                Ok(None) => break,
                Err(e) => self.fail(e, true),
            }
        }
        if self.state.expect(self.expected) == Expect::Paused
            && !self.is_closed()
            && self.inbox.len() > PAUSED_INPUT_LIMIT
        {
            let e = Iperf3Error::Flooded {
                len: self.inbox.len(),
                during: self.state.during(),
            };
            self.fail(e, true);
        }
    }

    fn on_message(&mut self, now: Time, msg: Msg) {
        let b = match msg {
            Msg::Json(json) => return self.on_json(now, &json),
            // Never produced on this side (SERVER_ERROR is not parsed).
            Msg::ServerError { .. } => State::ServerError.byte(),
            Msg::Byte(b) => b,
        };
        match (self.state, State::from_byte(b)) {
            (_, Some(State::ClientTerminate)) => {
                self.close();
                self.io.emit(ServerEvent::Aborted);
            }
            (St::Running, Some(State::TestEnd)) => {
                self.io.send(&[State::ExchangeResults.byte()]);
                self.state = St::AwaitClientResults;
                self.io
                    .wait(now, RESULTS_TIMEOUT, "waiting for the client's results");
                self.io.emit(ServerEvent::Stop);
            }
            (St::AwaitIperfDone, Some(State::IperfDone)) => {
                self.state = St::Done;
                self.io.no_deadline();
                self.inbox.clear();
                self.io.emit(ServerEvent::Done);
            }
            (state, _) => self.fail(
                Iperf3Error::Unexpected {
                    got: b,
                    during: state.during(),
                },
                true,
            ),
        }
    }

    fn on_json(&mut self, now: Time, json: &[u8]) {
        match self.state {
            St::AwaitParams => match Params::from_json(json) {
                Ok(p) => {
                    self.expected = p.stream_count();
                    self.params = Some(p.clone());
                    self.state = St::Deciding;
                    self.io.no_deadline();
                    self.io.emit(ServerEvent::ParamsReceived(Box::new(p)));
                }
                Err(m) => self.fail(Iperf3Error::Malformed(m), true),
            },
            St::AwaitClientResults => match Results::from_json(json) {
                Ok(r) => {
                    self.io.emit(ServerEvent::PeerResults(Box::new(r)));
                    match self.results_frame.take() {
                        Some(frame) => self.send_results_frame(now, &frame),
                        None => {
                            self.state = St::ProvidingResults;
                            self.io.no_deadline();
                        }
                    }
                }
                Err(m) => self.fail(Iperf3Error::Malformed(m), true),
            },
            // Only JSON states read JSON.
            state => self.fail(
                Iperf3Error::Malformed(JsonError::Unexpected {
                    during: state.during(),
                }),
                true,
            ),
        }
    }

    fn send_results_frame(&mut self, now: Time, frame: &[u8]) {
        self.io.send(frame);
        self.io.send(&[State::DisplayResults.byte()]);
        self.state = St::AwaitIperfDone;
        self.io
            .wait(now, SETUP_TIMEOUT, "waiting for the client's IPERF_DONE");
    }

    /// Accept the parameters: queue CREATE_STREAMS and wait for the data
    /// streams. `watchdog` bounds the running test (see
    /// [`Params::watchdog`]); only the client ends a test.
    pub fn accept(&mut self, now: Time, watchdog: Duration) {
        if self.state != St::Deciding {
            return;
        }
        self.watchdog = watchdog;
        self.io.send(&[State::CreateStreams.byte()]);
        self.state = St::AwaitStreams;
        if self.expected == 0 {
            self.start(now);
        } else {
            self.io
                .wait(now, SETUP_TIMEOUT, "waiting for the client's data streams");
        }
        self.process(now);
    }

    /// Refuse the parameters as a busy server does (ACCESS_DENIED: every
    /// iperf3 client says "the server is busy running a test").
    pub fn deny(&mut self) {
        if self.is_closed() {
            return;
        }
        self.io.send(&super::wire::access_denied());
        self.close();
    }

    /// Refuse the parameters (or abort the test at any point) with an
    /// iperf3 error code for the client to print (see [`super::i_errno`]).
    pub fn refuse(&mut self, i_errno: i32) {
        if self.is_closed() {
            return;
        }
        self.io.send(&server_error(i_errno, 0));
        self.close();
    }

    /// A data connection opened with our cookie (UDP: its handshake was
    /// answered). Returns which stream it is; `None` if no stream is due
    /// (close that connection). When the last one is in, queues TEST_START
    /// and TEST_RUNNING and emits [`ServerEvent::Running`].
    pub fn stream_attached(&mut self, now: Time) -> Option<StreamInfo> {
        if self.state != St::AwaitStreams || self.attached >= self.expected {
            return None;
        }
        let info = self.params.as_ref()?.stream_info(self.attached);
        self.attached += 1;
        // Otherwise the deadline set at CREATE_STREAMS stands: it bounds
        // the whole setup, so a client trickling streams cannot hold the
        // session (and its sockets) open indefinitely.
        if self.attached == self.expected {
            self.start(now);
        }
        Some(info)
    }

    fn start(&mut self, now: Time) {
        self.io.send(&[State::TestStart.byte()]);
        self.io.send(&[State::TestRunning.byte()]);
        self.state = St::Running;
        self.io
            .wait(now, self.watchdog, "waiting for the client to end the test");
        self.io.emit(ServerEvent::Running);
    }

    /// Our totals. Sent right after the client's (which iperf3 sends
    /// first), then DISPLAY_RESULTS; may be given any time after
    /// [`ServerEvent::Stop`].
    pub fn send_results(&mut self, now: Time, results: &Results) {
        if self.is_closed() {
            return;
        }
        let frame = encode_json_frame(results);
        match self.state {
            St::ProvidingResults => {
                self.send_results_frame(now, &frame);
                self.process(now);
            }
            St::AwaitIperfDone => {}
            _ => self.results_frame = Some(frame),
        }
    }

    /// Ends the session (e.g. the server is shutting down): sends
    /// SERVER_TERMINATE.
    pub fn terminate(&mut self) {
        if self.is_closed() {
            return;
        }
        self.io.send(&[State::ServerTerminate.byte()]);
        self.close();
    }

    fn fail(&mut self, e: Iperf3Error, tell_peer: bool) {
        if self.is_closed() {
            return;
        }
        if tell_peer {
            self.io.send(&server_error(self.state.i_errno(), 0));
        }
        self.close();
        self.io.emit(ServerEvent::Failed(e));
    }

    fn close(&mut self) {
        self.state = St::Closed;
        self.io.no_deadline();
        self.inbox.clear();
    }

    /// Whether the exchange completed.
    pub fn is_done(&self) -> bool {
        self.state == St::Done
    }

    pub fn is_running(&self) -> bool {
        self.state == St::Running
    }
}

impl Machine for Iperf3Server {
    type Event = ServerEvent;

    fn outbox(&mut self) -> &mut Outbox<ServerEvent> {
        &mut self.io
    }

    fn outbox_ref(&self) -> &Outbox<ServerEvent> {
        &self.io
    }

    fn handle_input(&mut self, now: Time, data: &[u8]) {
        if self.is_closed() {
            return;
        }
        self.inbox.push(data);
        self.process(now);
    }

    /// The client closed its end (or the connection broke). After
    /// DISPLAY_RESULTS that completes the exchange (both sides have the
    /// results) even without IPERF_DONE.
    fn handle_eof(&mut self) {
        let when = match self.state {
            St::Done | St::Closed => return,
            St::AwaitIperfDone => {
                self.state = St::Done;
                self.io.no_deadline();
                self.inbox.clear();
                self.io.emit(ServerEvent::Done);
                return;
            }
            St::AwaitParams => "before sending its parameters",
            St::Deciding | St::AwaitStreams => "while the test was being set up",
            St::Running => "in the middle of the test",
            St::AwaitClientResults | St::ProvidingResults => "before the results exchange finished",
        };
        self.fail(Iperf3Error::Closed(when), false);
    }

    /// Fails the current step if its deadline passed (with SERVER_ERROR to
    /// the client, as 3.15+ servers do).
    fn handle_timeout(&mut self, now: Time) {
        if self.is_closed() {
            return;
        }
        if let Some(what) = self.io.expired(now) {
            self.fail(Iperf3Error::Timeout(what), true);
        }
    }

    /// Done or failed: nothing more will be read; flush and close.
    fn is_closed(&self) -> bool {
        matches!(self.state, St::Done | St::Closed)
    }
}
