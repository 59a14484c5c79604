//! `cargo fuzz run udp_headers`: see [`xferlab_core::fuzz::udp_headers`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xferlab_core::fuzz::udp_headers(data));
