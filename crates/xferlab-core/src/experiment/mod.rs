//! Experiments: scenario files expanded into points, the order their runs
//! are made in, metrics read from result documents and statistics over
//! repeats. Sans-IO like the rest of the core: the runner, the store and
//! the reports live in the binary.

pub mod metrics;
pub mod plan;
pub mod scenario;
pub mod stats;
