//! `cargo fuzz run dccp`: see [`xferlab_core::dccp::fuzz::dccp`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xferlab_core::dccp::fuzz::dccp(data));
