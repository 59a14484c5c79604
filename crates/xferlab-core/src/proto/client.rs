//! Client side of the control connection.

use crate::time::Time;

use super::auth::{answer, hex, unhex};
use super::message::{ClientMsg, ErrorCode, ServerMsg, Welcome};
use super::wire::{
    decode_json, encode_frame, ConnKind, FrameDecoder, Preamble, QueueFrame, PREAMBLE_LEN, VERSION,
};
use super::{
    results_frame_limit, ProtoError, FRAMING, HANDSHAKE_TIMEOUT, MAX_SMALL_FRAME, RESULTS_TIMEOUT,
};
use crate::outbox::{Machine, Outbox};
use crate::result::{SideReport, Software};
use crate::spec::TestSpec;

#[derive(Debug)]
pub enum ClientEvent {
    /// The server accepted the test: attach the data connections.
    Welcome(Box<Welcome>),
    /// All flows attached: start the clock and the flows.
    Started,
    /// The server's measurements; answer with
    /// [`ClientControl::send_results`].
    PeerResults(Box<SideReport>),
    Failed(ProtoError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitPreamble,
    AwaitWelcome,
    AwaitStart,
    Running,
    AwaitResults,
    HaveResults,
    Done,
    Failed,
}

#[derive(Debug)]
pub struct ClientControl {
    state: State,
    preamble: Vec<u8>,
    decoder: FrameDecoder,
    spec: TestSpec,
    /// The key that answers a server's challenge, and the hello payload
    /// the answer covers.
    auth_key: Option<Vec<u8>>,
    hello: Vec<u8>,
    /// The test's results frame limit, once the server said how long its
    /// tests may last (both ways).
    results_max: u32,
    /// How long to wait for `start` after the welcome: the time the flows
    /// may take to attach.
    attach_wait: std::time::Duration,
    ch: Outbox<ClientEvent>,
}

impl ClientControl {
    /// Starts the handshake on a freshly connected control connection.
    /// `attach_wait`: how long the flows may take to attach (None: the
    /// handshake timeout); the server is asked to wait as long.
    pub fn new(
        now: Time,
        software: Software,
        spec: TestSpec,
        attach_wait: Option<std::time::Duration>,
    ) -> Self {
        let attach_wait_s = attach_wait.map(|d| d.as_secs_f64());
        let mut c = ClientControl {
            state: State::AwaitPreamble,
            preamble: Vec::with_capacity(PREAMBLE_LEN),
            decoder: FrameDecoder::new(MAX_SMALL_FRAME),
            spec: spec.clone(),
            auth_key: None,
            hello: Vec::new(),
            results_max: MAX_SMALL_FRAME,
            attach_wait: super::attach_wait(attach_wait_s),
            ch: Outbox::starting_with(&Preamble::new(ConnKind::Control).encode()),
        };
        c.ch.wait(
            now,
            HANDSHAKE_TIMEOUT,
            "waiting for the server to accept the test",
        );
        let hello = encode_frame(&ClientMsg::Hello {
            software,
            spec,
            attach_wait_s,
        });
        c.ch.send(&hello);
        c.hello = hello[4..].to_vec();
        c
    }

    /// Answers a server's challenge with `key` (`--auth-key`).
    pub fn with_auth_key(mut self, key: Option<Vec<u8>>) -> Self {
        self.auth_key = key;
        self
    }

    fn handle_frame(&mut self, now: Time, frame: &[u8]) -> Result<(), ProtoError> {
        let msg: ServerMsg = decode_json(frame)?;
        match (self.state, msg) {
            (_, ServerMsg::Error { code, message }) => {
                self.fail(ProtoError::Peer { code, message }, false)
            }
            (State::AwaitWelcome, ServerMsg::Challenge { nonce }) => {
                let Some(key) = self.auth_key.take() else {
                    self.fail(ProtoError::AuthRequired, true);
                    return Ok(());
                };
                let nonce = unhex(&nonce).ok_or_else(|| {
                    ProtoError::Malformed("the server's challenge is not hex".into())
                })?;
                let mac = answer(&key, &nonce, &self.hello);
                self.ch.queue_frame(&ClientMsg::Auth { mac: hex(&mac) });
            }
            (State::AwaitWelcome, ServerMsg::Welcome(w)) => {
                let max = std::time::Duration::try_from_secs_f64(w.max_duration_s)
                    .unwrap_or(std::time::Duration::MAX);
                self.results_max = results_frame_limit(&self.spec, max);
                self.state = State::AwaitStart;
                self.ch.wait(
                    now,
                    self.attach_wait,
                    "waiting for the server to start the test",
                );
                self.ch.emit(ClientEvent::Welcome(Box::new(w)));
            }
            (State::AwaitStart, ServerMsg::Start) => {
                self.state = State::Running;
                self.ch.no_deadline();
                self.ch.emit(ClientEvent::Started);
            }
            (State::AwaitResults, ServerMsg::Results { report }) => {
                self.state = State::HaveResults;
                self.ch.no_deadline();
                self.ch.emit(ClientEvent::PeerResults(report));
            }
            (_, msg) => {
                return Err(ProtoError::Malformed(format!(
                    "unexpected {} message from the server",
                    match msg {
                        ServerMsg::Welcome(_) => "welcome",
                        ServerMsg::Challenge { .. } => "challenge",
                        ServerMsg::Start => "start",
                        ServerMsg::Results { .. } => "results",
                        ServerMsg::Error { .. } => "error",
                    }
                )))
            }
        }
        Ok(())
    }

    /// End the test (time is up, every local flow finished, or the user
    /// interrupted). Valid once started; before that it aborts.
    pub fn stop(&mut self, now: Time) {
        match self.state {
            State::Running => {
                self.ch.queue_frame(&ClientMsg::Stop);
                self.state = State::AwaitResults;
                self.decoder.set_max_len(self.results_max);
                self.ch
                    .wait(now, RESULTS_TIMEOUT, "waiting for the server's results");
            }
            State::Done | State::Failed | State::AwaitResults | State::HaveResults => {}
            _ => self.abort(
                ErrorCode::Aborted,
                "the client stopped before the test started",
            ),
        }
    }

    /// Sends our measurements after the server's arrived; the exchange is
    /// then complete.
    pub fn send_results(&mut self, report: &SideReport) {
        if self.state == State::HaveResults {
            self.ch.queue_frame(&ClientMsg::Results {
                report: super::fit_report(report, self.results_max as usize - FRAMING),
            });
            self.state = State::Done;
        }
    }

    /// Gives up, telling the server why.
    pub fn abort(&mut self, code: ErrorCode, message: &str) {
        if self.is_closed() {
            return;
        }
        self.ch.queue_frame(&ClientMsg::Error {
            code,
            message: message.to_string(),
        });
        self.state = State::Failed;
        self.ch.no_deadline();
    }

    fn fail(&mut self, e: ProtoError, tell_peer: bool) {
        if self.is_closed() {
            return;
        }
        if tell_peer {
            self.ch.queue_frame(&ClientMsg::Error {
                code: e.code(),
                message: e.to_string(),
            });
        }
        self.state = State::Failed;
        self.ch.no_deadline();
        self.ch.emit(ClientEvent::Failed(e));
    }
}

impl Machine for ClientControl {
    type Event = ClientEvent;

    fn outbox(&mut self) -> &mut Outbox<ClientEvent> {
        &mut self.ch
    }

    fn outbox_ref(&self) -> &Outbox<ClientEvent> {
        &self.ch
    }

    fn handle_input(&mut self, now: Time, mut data: &[u8]) {
        if self.is_closed() {
            return;
        }
        if self.state == State::AwaitPreamble {
            let take = (PREAMBLE_LEN - self.preamble.len()).min(data.len());
            self.preamble.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.preamble.len() < PREAMBLE_LEN {
                return;
            }
            let mut raw = [0u8; PREAMBLE_LEN];
            raw.copy_from_slice(&self.preamble);
            match Preamble::decode(&raw) {
                Ok(p) if p.version != VERSION => {
                    return self.fail(
                        ProtoError::VersionMismatch {
                            ours: VERSION,
                            theirs: p.version,
                        },
                        false,
                    )
                }
                Ok(_) => self.state = State::AwaitWelcome,
                Err(e) => return self.fail(e, false),
            }
        }
        self.decoder.push(data);
        while !self.is_closed() {
            match self.decoder.next_frame() {
                Ok(Some(frame)) => {
                    if let Err(e) = self.handle_frame(now, &frame) {
                        self.fail(e, true);
                    }
                }
                Ok(None) => break,
                Err(e) => self.fail(e, true),
            }
        }
    }

    fn handle_eof(&mut self) {
        let when = match self.state {
            State::Done | State::Failed => return,
            State::AwaitPreamble | State::AwaitWelcome => "before accepting the test",
            State::AwaitResults | State::HaveResults => "before sending its results",
            _ => "in the middle of the test",
        };
        self.fail(ProtoError::Closed(when), false);
    }

    fn handle_timeout(&mut self, now: Time) {
        if let Some(what) = self.ch.expired(now) {
            self.fail(ProtoError::Timeout(what), true);
        }
    }

    fn is_closed(&self) -> bool {
        matches!(self.state, State::Done | State::Failed)
    }
}
