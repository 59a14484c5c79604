//! The lab VM itself (lab/vm/run): a guest command's output and exit status
//! come back, a hung command is killed at its timeout, and no QEMU process
//! outlives a run. One boot per test; two boots in all.

mod labvm_support;

use std::time::Duration;

use labvm_support::*;

#[test]
fn guest_command_output_and_status_come_back() {
    if skip() {
        return;
    }
    let _vm = vm_lock();
    let script = "\
echo '== kernel =='; uname -r
echo '== xferlab =='; xferlab --version
echo '== modules =='; modprobe dummy_hcd && ls /sys/class/udc
echo '== tcp =='; xferlab stream -t 1 -i 0 -J > /tmp/r.json; echo rc=$?; grep -c '\"status\": \"ok\"' /tmp/r.json
echo '== stderr =='; echo to-stderr >&2
exit 7
";
    let r = run_vm(
        &["--extra-modules", "dummy_hcd"],
        script,
        Duration::from_secs(600),
    );
    assert_eq!(r.code, 7, "the guest's exit status is the script's");
    assert!(section(&r.out, "kernel").starts_with("6.1."), "{}", r.out);
    assert!(
        r.log.contains("kernel 6.1."),
        "the lab log names the kernel version"
    );
    assert!(section(&r.out, "xferlab").starts_with("xferlab "));
    assert!(section(&r.out, "modules").contains("dummy_udc.0"));
    let tcp = section(&r.out, "tcp");
    assert_eq!(
        field(tcp, "rc"),
        Some("0"),
        "xferlab ran in the guest: {tcp}"
    );
    assert!(section(&r.out, "stderr").contains("to-stderr"));
    assert_no_qemu_left();
}

#[test]
fn a_hung_guest_command_is_killed_at_its_timeout() {
    if skip() {
        return;
    }
    let _vm = vm_lock();
    let r = run_vm(
        &["--no-xferlab", "--timeout", "3"],
        "echo started; sleep 300 & sleep 300; echo never",
        Duration::from_secs(120),
    );
    assert_eq!(r.code, 124, "timeout exit status");
    assert!(r.out.contains("started") && !r.out.contains("never"));
    assert!(r.log.contains("timed out after 3 s"), "{}", r.log);
    assert!(r.wall < Duration::from_secs(60), "took {:?}", r.wall);
    assert_no_qemu_left();
}
