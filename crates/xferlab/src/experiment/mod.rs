//! Experiments (`xferlab run SCENARIO.toml`): the binary side.

pub mod vm;
