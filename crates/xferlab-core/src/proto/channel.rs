//! What both ends of a control connection keep besides their state: frames
//! waiting to go out, events waiting to be polled, and the one deadline of
//! the current step.

use std::collections::VecDeque;
use std::time::Instant;

use serde::Serialize;

use super::wire::encode_frame;

#[derive(Debug)]
pub(super) struct Channel<E> {
    out: Vec<u8>,
    events: VecDeque<E>,
    deadline: Option<(Instant, &'static str)>,
}

impl<E> Channel<E> {
    /// Starts with `first` (the preamble) queued for sending.
    pub fn new(first: &[u8]) -> Self {
        Channel {
            out: first.to_vec(),
            events: VecDeque::new(),
            deadline: None,
        }
    }

    pub fn queue<T: Serialize>(&mut self, msg: &T) {
        self.out.extend_from_slice(&encode_frame(msg));
    }

    pub fn emit(&mut self, event: E) {
        self.events.push_back(event);
    }

    /// The current step must be over by `at`; `what` names it in the
    /// timeout error.
    pub fn wait_until(&mut self, at: Instant, what: &'static str) {
        self.deadline = Some((at, what));
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
