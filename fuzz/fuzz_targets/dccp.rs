//! `cargo fuzz run dccp`: see [`xferlab_core::fuzz::dccp`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xferlab_core::fuzz::dccp(data));
