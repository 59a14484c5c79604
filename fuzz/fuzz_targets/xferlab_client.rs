//! `cargo fuzz run xferlab_client`: see [`xferlab_core::fuzz::xferlab_client`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xferlab_core::fuzz::xferlab_client(data));
