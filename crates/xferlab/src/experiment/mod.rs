//! Experiments: declarative scenarios run as grids of ordinary xferlab invocations, and their reports.

pub mod html;
pub mod plot;
