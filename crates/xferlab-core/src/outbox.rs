//! What a sans-IO protocol state machine keeps besides its state: bytes
//! and events waiting for the driver to poll them, and the deadline of the
//! current step. Shared by xferlab's own control protocol and iperf3's.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Bytes and events for the driver, and the current step's deadline.
#[derive(Debug)]
pub(crate) struct Outbox<E> {
    out: Vec<u8>,
    events: VecDeque<E>,
    deadline: Option<(Instant, &'static str)>,
}

impl<E> Outbox<E> {
    pub fn new() -> Self {
        Outbox {
            out: Vec::new(),
            events: VecDeque::new(),
            deadline: None,
        }
    }

    /// Starts with `first` (a preamble) queued for sending.
    pub fn starting_with(first: &[u8]) -> Self {
        let mut o = Outbox::new();
        o.send(first);
        o
    }

    /// Queues one length-prefixed JSON frame of xferlab's own protocol.
    pub fn queue_frame<T: serde::Serialize>(&mut self, msg: &T) {
        self.send(&crate::proto::wire::encode_frame(msg));
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    pub fn emit(&mut self, e: E) {
        self.events.push_back(e);
    }

    /// The current step must be over `after` from `now`; `what` names it
    /// in the timeout error. A deadline past what `Instant` can hold means
    /// none.
    pub fn wait(&mut self, now: Instant, after: Duration, what: &'static str) {
        self.deadline = now.checked_add(after).map(|at| (at, what));
    }

    pub fn no_deadline(&mut self) {
        self.deadline = None;
    }

    /// The step that ran out of time by `now`, if any.
    pub fn expired(&self, now: Instant) -> Option<&'static str> {
        self.deadline.filter(|d| now >= d.0).map(|d| d.1)
    }

    pub fn poll_event(&mut self) -> Option<E> {
        self.events.pop_front()
    }

    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        (!self.out.is_empty()).then(|| std::mem::take(&mut self.out))
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline.map(|d| d.0)
    }
}
