//! `cargo fuzz run iperf3_server`: see [`xferlab_core::fuzz::iperf3_server`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xferlab_core::fuzz::iperf3_server(data));
