//! `--load cpu=N,mem=M`: the workers reach their CPU share (as measured
//! from their own CPU time), the result records it, and a SIGKILL of
//! xferlab leaves nothing behind.

mod common;

use std::time::{Duration, Instant};

use common::{thread_names, Proc};

/// Processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/status"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("PPid:"))
                        .and_then(|v| v.trim().parse::<u32>().ok())
                })
                == Some(pid)
        })
        .collect()
}

#[test]
fn load_workers_reach_their_cpu_share_and_the_result_records_it() {
    let dir = std::env::temp_dir().join(format!("xferlab-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("r.json");
    let out = common::run(
        &[
            "--load",
            "cpu=1,mem=1,vm-bytes=16M",
            "model",
            "usb",
            "-t",
            "60",
            "-l",
            "512",
            "-J",
            "-o",
            file.to_str().unwrap(),
        ],
        Duration::from_secs(300),
    );
    out.assert_success();
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(
        doc["schema"], "xferlab.usb-model/1",
        "the verb's own document"
    );
    let load = &doc["load"];
    assert_eq!(load["requested"]["cpu"], 1);
    let workers = load["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2, "{load}");
    // A spinner that runs is on a core nearly all the time it exists; on
    // this shared 2-core machine (the verb's own thread and other tests
    // compete) it still gets well over a fifth of one. A worker that
    // slept or ended early would report near 0.
    for w in workers {
        let pct = w["cpu_percent"].as_f64().unwrap();
        assert!((20.0..=101.0).contains(&pct), "{w}");
    }
    assert!(workers[1]["rounds"].as_u64().unwrap() >= 1, "{load}");
    // Without -o the report is one line on stderr.
    let plain = common::run(
        &["--load", "cpu=1", "model", "usb", "-t", "1"],
        Duration::from_secs(60),
    );
    assert_eq!(plain.code, Some(0), "{}", plain.stderr);
    assert!(
        plain.stderr.contains("load over") && plain.stderr.contains("1 cpu"),
        "{}",
        plain.stderr
    );
}

#[test]
fn sigkill_of_xferlab_leaves_no_load_worker_behind() {
    let mut p = Proc::spawn(&[
        "--load",
        "cpu=2,mem=1,vm-bytes=16M",
        "model",
        "usb",
        "-t",
        "60",
        "-l",
        "512",
    ]);
    let pid = p.pid();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let names = thread_names(pid);
        if ["load-cpu0", "load-cpu1", "load-mem0"]
            .iter()
            .all(|n| names.iter().any(|x| x == n))
        {
            break;
        }
        assert!(Instant::now() < deadline, "no load threads: {names:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        children_of(pid).is_empty(),
        "workers are threads, not processes"
    );
    p.kill();
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "process {pid} still exists after SIGKILL and reaping"
    );
    assert!(children_of(pid).is_empty());
}
