//! Owns the build-time switch for the lab VM tests. With `XFERLAB_LABVM=skip`
//! in the environment (a machine without QEMU; see lab/vm/README.md) they
//! are compiled as `#[ignore]`d, so `cargo test` lists them as ignored with
//! the reason instead of passing without having checked anything: libtest
//! cannot ignore a test once it is running.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=XFERLAB_LABVM");
    println!("cargo::rustc-check-cfg=cfg(labvm_skip)");
    if std::env::var_os("XFERLAB_LABVM").is_some_and(|v| v == "skip") {
        println!("cargo::rustc-cfg=labvm_skip");
    }
}
