//! The stream pattern: bulk transfer one way, reverse or both, over any
//! registered transport (see [`crate::transport`]); its flows run as a
//! [`Side`], the pattern's [`Workload`].

pub mod client;
pub mod session;
pub mod side;

pub use side::{ConnectedFlow, Side};

use crate::driver::{Finished, Workload};
use crate::output::Reporter;
use xferlab_core::time::Time;

impl Workload for Side {
    fn tick(&mut self, now: Time, out: Option<&mut dyn Reporter>) {
        self.reap();
        let live = Side::tick(self, now);
        if let Some(out) = out.filter(|_| !live.is_empty()) {
            out.interval(&live).ok();
        }
    }

    fn next_tick(&self) -> Option<Time> {
        Side::next_tick(self)
    }

    fn stop(&mut self, now: Time) {
        Side::stop(self, now);
    }

    fn abort(&mut self, why: &str) {
        Side::abort(self, why);
    }

    fn cut(&mut self, now: Time) {
        Side::cut(self, now);
    }

    fn all_done(&self) -> bool {
        Side::all_done(self)
    }

    fn finish(self: Box<Self>) -> Finished {
        Side::finish(*self).into()
    }
}
