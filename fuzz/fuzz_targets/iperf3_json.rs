//! `cargo fuzz run iperf3_json`: see [`xferlab_core::fuzz::iperf3_json`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xferlab_core::fuzz::iperf3_json(data));
