//! `cargo fuzz run iperf3_client`: see [`xferlab_core::fuzz::iperf3_client`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xferlab_core::fuzz::iperf3_client(data));
