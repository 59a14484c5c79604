//! The lab VM itself (lab/vm/run): a guest command's output and exit status
//! come back, a hung command is killed at its timeout, and no QEMU process
//! outlives a run. One boot per test; two boots in all.

mod labvm_support;

use std::time::Duration;

use labvm_support::*;

#[test]
#[cfg_attr(labvm_skip, ignore = "XFERLAB_LABVM=skip: boots the lab VM (QEMU)")]
fn guest_command_output_and_status_come_back() {
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
        Duration::from_secs(1200),
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
#[cfg_attr(labvm_skip, ignore = "XFERLAB_LABVM=skip: boots the lab VM (QEMU)")]
fn a_hung_guest_command_is_killed_at_its_timeout() {
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

/// SIGTERM or SIGKILL to lab/vm/run itself while the guest runs: its QEMU
/// dies too (killed by the script, or by PR_SET_PDEATHSIG).
#[test]
#[cfg_attr(labvm_skip, ignore = "XFERLAB_LABVM=skip: boots the lab VM (QEMU)")]
fn killing_the_lab_script_kills_its_qemu() {
    let _vm = vm_lock();
    for sig in [libc::SIGTERM, libc::SIGKILL] {
        let mut child = std::process::Command::new(repo_root().join("lab/vm/run"))
            .args(["--no-xferlab", "--timeout", "120", "--", "sleep 100"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start lab/vm/run");
        let mut err = child.stderr.take().unwrap();
        // Read the log until the guest is up; it names the qemu pid first.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 4096];
            let mut text = String::new();
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                text.push_str(&String::from_utf8_lossy(&buf[..n]));
                if text.contains("guest booted") {
                    let _ = tx.send(text.clone());
                }
            }
        });
        let log = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("guest did not boot");
        let pid: i32 = log
            .split("qemu pid ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no qemu pid in: {log}"));
        // SAFETY: kill(2) touches no memory; the child is not reaped yet.
        unsafe { libc::kill(child.id() as i32, sig) };
        let _ = child.wait();
        let t = std::time::Instant::now();
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let alive = !stat.is_empty() && !stat.contains(") Z ");
            if !alive {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "qemu {pid} outlived lab/vm/run after signal {sig}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
