pub mod metrics;
pub mod stats;
