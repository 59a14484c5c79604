//! The one clock reading the core's unit tests make: an origin `Instant`.

use std::time::Instant;

/// An arbitrary origin for virtual time. std builds an `Instant` only from
/// the clock, so the tests read it once here and advance from it by adding
/// durations; nothing depends on its value.
#[allow(clippy::disallowed_methods)]
pub(crate) fn origin() -> Instant {
    Instant::now()
}
