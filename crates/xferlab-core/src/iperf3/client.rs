//! Client side of an iperf3 control connection.

use crate::time::Time;

use super::io::{be_i32, Expect, Inbox, Msg};
use super::params::Params;
use super::results::Results;
use super::wire::{encode_json_frame, is_cookie, Cookie, State, MAX_PARAMS_JSON, MAX_RESULTS_JSON};
use super::{Iperf3Error, PAUSED_INPUT_LIMIT, RESULTS_TIMEOUT, SETUP_TIMEOUT};
use crate::outbox::{Machine, Outbox};

#[derive(Debug, Clone, PartialEq)]
pub enum ClientEvent {
    /// CREATE_STREAMS: open `count` data connections one after another
    /// (TCP: connect, send the cookie; UDP: connect, send
    /// [`UDP_CONNECT_MSG`](super::wire::UDP_CONNECT_MSG) and wait for the
    /// reply), see [`Params::streams`]; then call
    /// [`Iperf3Client::streams_open`].
    OpenStreams {
        count: usize,
    },
    /// TEST_START: start the test clock (`omit` + `time` of the params).
    Started,
    /// TEST_RUNNING: start sending. End the test with
    /// [`Iperf3Client::end_test`].
    Running,
    /// EXCHANGE_RESULTS arrived before our results: call
    /// [`Iperf3Client::send_results`].
    ResultsRequested,
    /// The server's totals.
    PeerResults(Box<Results>),
    /// DISPLAY_RESULTS arrived and IPERF_DONE is queued: flush, close.
    Done,
    /// ACCESS_DENIED: the server is running another test.
    ServerBusy,
    /// SERVER_ERROR with iperf3's `i_errno` (see [`super::i_errno`]) and
    /// the server's `errno`, which 3.12 may leave out.
    ServerError {
        i_errno: i32,
        errno: Option<i32>,
    },
    /// SERVER_TERMINATE: the server was interrupted.
    ServerTerminated,
    Failed(Iperf3Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    AwaitParamExchange,
    AwaitCreateStreams,
    OpeningStreams,
    AwaitTestStart,
    AwaitTestRunning,
    Running,
    AwaitExchangeResults,
    ProvidingResults,
    AwaitPeerResults,
    AwaitDisplayResults,
    Done,
    Closed,
}

impl St {
    fn expect(self) -> Expect {
        match self {
            St::OpeningStreams | St::ProvidingResults | St::Done | St::Closed => Expect::Paused,
            St::AwaitPeerResults => Expect::Json {
                max: MAX_RESULTS_JSON,
            },
            _ => Expect::State,
        }
    }

    fn during(self) -> &'static str {
        match self {
            St::AwaitParamExchange => "while waiting for PARAM_EXCHANGE",
            St::AwaitCreateStreams => "while waiting for CREATE_STREAMS",
            St::OpeningStreams => "while opening the data streams",
            St::AwaitTestStart => "while waiting for TEST_START",
            St::AwaitTestRunning => "while waiting for TEST_RUNNING",
            St::Running => "while the test was running",
            St::AwaitExchangeResults => "while waiting for EXCHANGE_RESULTS",
            St::ProvidingResults => "while our results were being prepared",
            St::AwaitPeerResults => "while waiting for the server's results",
            St::AwaitDisplayResults => "while waiting for DISPLAY_RESULTS",
            St::Done => "after the test",
            St::Closed => "after the session ended",
        }
    }
}

/// State bytes a server may send at any point.
const SIGNALS: [u8; 3] = [0x0b, 0xfe, 0xff];

#[derive(Debug)]
pub struct Iperf3Client {
    state: St,
    params: Params,
    params_frame: Vec<u8>,
    results_frame: Option<Vec<u8>>,
    inbox: Inbox,
    io: Outbox<ClientEvent>,
}

impl Iperf3Client {
    /// Starts on a freshly connected control connection: queues the cookie
    /// (which the data connections repeat). Fails at once if the cookie is
    /// malformed or the parameters JSON exceeds the 8 KiB that 3.18+
    /// servers accept.
    pub fn new(now: Time, cookie: Cookie, params: Params) -> Self {
        let params_frame = encode_json_frame(&params);
        let mut c = Iperf3Client {
            state: St::AwaitParamExchange,
            params,
            params_frame,
            results_frame: None,
            inbox: Inbox::default(),
            io: Outbox::new(),
        };
        let json_len = c.params_frame.len() - 4;
        if !is_cookie(&cookie) {
            c.fail(Iperf3Error::BadCookie, false);
        } else if json_len > MAX_PARAMS_JSON as usize {
            c.fail(
                Iperf3Error::ParamsTooLarge {
                    len: json_len,
                    max: MAX_PARAMS_JSON,
                },
                false,
            );
        } else {
            c.io.send(&cookie);
            c.io.wait(
                now,
                SETUP_TIMEOUT,
                "waiting for the server's PARAM_EXCHANGE",
            );
        }
        c
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    fn process(&mut self, now: Time) {
        while !self.is_closed() {
            match self.inbox.next(self.state.expect(), &SIGNALS, true) {
                Ok(Some(msg)) => self.on_message(now, msg),
                Ok(None) => break,
                Err(e) => self.fail(e, true),
            }
        }
        if self.state.expect() == Expect::Paused
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
            Msg::ServerError { i_errno, errno } => {
                return self.peer_ended(ClientEvent::ServerError {
                    i_errno,
                    errno: Some(errno),
                })
            }
            Msg::Json(json) => return self.on_peer_results(now, &json),
            Msg::Byte(b) => b,
        };
        match (self.state, State::from_byte(b)) {
            (_, Some(State::AccessDenied)) => self.peer_ended(ClientEvent::ServerBusy),
            (_, Some(State::ServerTerminate)) => self.peer_ended(ClientEvent::ServerTerminated),
            (St::AwaitParamExchange, Some(State::ParamExchange)) => {
                let frame = std::mem::take(&mut self.params_frame);
                self.io.send(&frame);
                self.state = St::AwaitCreateStreams;
                self.io.wait(
                    now,
                    SETUP_TIMEOUT,
                    "waiting for the server's CREATE_STREAMS",
                );
            }
            (St::AwaitCreateStreams, Some(State::CreateStreams)) => {
                self.state = St::OpeningStreams;
                self.io.no_deadline();
                self.io.emit(ClientEvent::OpenStreams {
                    count: self.params.stream_count(),
                });
            }
            (St::AwaitTestStart, Some(State::TestStart)) => {
                self.state = St::AwaitTestRunning;
                self.io
                    .wait(now, SETUP_TIMEOUT, "waiting for the server's TEST_RUNNING");
                self.io.emit(ClientEvent::Started);
            }
            (St::AwaitTestRunning, Some(State::TestRunning)) => {
                self.state = St::Running;
                self.io.no_deadline();
                self.io.emit(ClientEvent::Running);
            }
            // A repeated TEST_RUNNING changes nothing (iperf3 tolerates it).
            (St::Running, Some(State::TestRunning)) => {}
            (St::AwaitExchangeResults, Some(State::ExchangeResults)) => {
                match self.results_frame.take() {
                    Some(frame) => self.send_results_frame(now, &frame),
                    None => {
                        self.state = St::ProvidingResults;
                        self.io.no_deadline();
                        self.io.emit(ClientEvent::ResultsRequested);
                    }
                }
            }
            (St::AwaitDisplayResults, Some(State::DisplayResults)) => {
                self.io.send(&[State::IperfDone.byte()]);
                self.state = St::Done;
                self.io.no_deadline();
                self.inbox.clear();
                self.io.emit(ClientEvent::Done);
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

    fn on_peer_results(&mut self, now: Time, json: &[u8]) {
        match Results::from_json(json) {
            Ok(r) => {
                self.state = St::AwaitDisplayResults;
                self.io.wait(
                    now,
                    SETUP_TIMEOUT,
                    "waiting for the server's DISPLAY_RESULTS",
                );
                self.io.emit(ClientEvent::PeerResults(Box::new(r)));
            }
            Err(m) => self.fail(Iperf3Error::Malformed(m), true),
        }
    }

    fn send_results_frame(&mut self, now: Time, frame: &[u8]) {
        self.io.send(frame);
        self.state = St::AwaitPeerResults;
        self.io
            .wait(now, RESULTS_TIMEOUT, "waiting for the server's results");
    }

    /// 3.12 can send SERVER_ERROR with only its first int32 and close:
    /// report what arrived. Fewer than 4 bytes of it is a failure.
    fn cut_short_server_error(&mut self) -> Option<ClientEvent> {
        let b = self.inbox.bytes();
        (b.len() >= 5 && b[0] == State::ServerError.byte()).then(|| ClientEvent::ServerError {
            i_errno: be_i32(&b[1..5]),
            errno: None,
        })
    }

    /// The data connections are open (UDP: handshakes answered): wait for
    /// the server to start the test.
    pub fn streams_open(&mut self, now: Time) {
        if self.state != St::OpeningStreams {
            return;
        }
        self.state = St::AwaitTestStart;
        self.io
            .wait(now, SETUP_TIMEOUT, "waiting for the server's TEST_START");
        self.process(now);
    }

    /// The time, byte or block limit is reached: send TEST_END. In reverse
    /// mode keep draining the data connections until the results arrive.
    /// Before the test runs this aborts instead.
    pub fn end_test(&mut self, now: Time) {
        match self.state {
            St::Running => {
                self.io.send(&[State::TestEnd.byte()]);
                self.state = St::AwaitExchangeResults;
                self.io.wait(
                    now,
                    RESULTS_TIMEOUT,
                    "waiting for the server's EXCHANGE_RESULTS",
                );
            }
            St::Done | St::Closed => {}
            St::AwaitExchangeResults
            | St::ProvidingResults
            | St::AwaitPeerResults
            | St::AwaitDisplayResults => {}
            _ => self.abort(),
        }
    }

    /// Our totals: sent when EXCHANGE_RESULTS arrives (at once if it
    /// already has). Results given before that are kept until then.
    pub fn send_results(&mut self, now: Time, results: &Results) {
        if self.is_closed() {
            return;
        }
        let frame = encode_json_frame(results);
        if self.state == St::ProvidingResults {
            self.send_results_frame(now, &frame);
            self.process(now);
        } else if matches!(self.state, St::AwaitPeerResults | St::AwaitDisplayResults) {
            // Already sent.
        } else {
            self.results_frame = Some(frame);
        }
    }

    /// Gives up (e.g. the user interrupted): sends CLIENT_TERMINATE.
    pub fn abort(&mut self) {
        if self.is_closed() {
            return;
        }
        self.io.send(&[State::ClientTerminate.byte()]);
        self.close();
    }

    fn peer_ended(&mut self, e: ClientEvent) {
        self.close();
        self.io.emit(e);
    }

    fn fail(&mut self, e: Iperf3Error, tell_peer: bool) {
        if self.is_closed() {
            return;
        }
        if tell_peer {
            self.io.send(&[State::ClientTerminate.byte()]);
        }
        self.close();
        self.io.emit(ClientEvent::Failed(e));
    }

    fn close(&mut self) {
        self.state = St::Closed;
        self.io.no_deadline();
        self.inbox.clear();
    }

    /// Whether the exchange completed (IPERF_DONE queued).
    pub fn is_done(&self) -> bool {
        self.state == St::Done
    }

    pub fn is_running(&self) -> bool {
        self.state == St::Running
    }
}

impl Machine for Iperf3Client {
    type Event = ClientEvent;

    fn outbox(&mut self) -> &mut Outbox<ClientEvent> {
        &mut self.io
    }

    fn outbox_ref(&self) -> &Outbox<ClientEvent> {
        &self.io
    }

    fn handle_input(&mut self, now: Time, data: &[u8]) {
        if self.is_closed() {
            return;
        }
        self.inbox.push(data);
        self.process(now);
    }

    /// The peer closed its end (or the connection broke).
    fn handle_eof(&mut self) {
        if self.is_closed() {
            return;
        }
        if let Some(e) = self.cut_short_server_error() {
            return self.peer_ended(e);
        }
        let when = match self.state {
            St::AwaitParamExchange => "before answering the cookie",
            St::AwaitCreateStreams | St::OpeningStreams | St::AwaitTestStart => {
                "while the test was being set up"
            }
            St::AwaitTestRunning | St::Running => "in the middle of the test",
            _ => "before the results exchange finished",
        };
        self.fail(Iperf3Error::Closed(when), false);
    }

    fn handle_timeout(&mut self, now: Time) {
        if self.is_closed() {
            return;
        }
        if let Some(what) = self.io.expired(now) {
            match self.cut_short_server_error() {
                Some(e) => self.peer_ended(e),
                None => self.fail(Iperf3Error::Timeout(what), true),
            }
        }
    }

    /// Done, failed or ended by the peer: nothing more will be read; flush
    /// and close.
    fn is_closed(&self) -> bool {
        matches!(self.state, St::Done | St::Closed)
    }
}
