//! `cargo fuzz run xferlab_server`: see [`xferlab_core::fuzz::xferlab_server`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xferlab_core::fuzz::xferlab_server(data));
