//! `xferlab usb` on the host itself (no VM): bad input gets one line that
//! names the flag and exit 2; a missing device or controller exit 1. The
//! real USB paths are tested in the lab VM (usb_vm.rs).

mod common;

use std::time::Duration;

use common::run;

const T: Duration = Duration::from_secs(20);

#[test]
fn bad_usb_flags_are_one_line_usage_errors() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["usb", "bulk", "-d", "zz"],
            &["-d zz", "VID:PID", "BUS.ADDR"],
        ),
        (&["usb", "bulk", "-d", "0525:xyz"], &["-d 0525:xyz", "hex"]),
        (&["usb", "bulk", "-Q", "0"], &["-Q/--depth", "got 0"]),
        (&["usb", "bulk", "-l", "0"], &["-l/--size"]),
        (
            &["usb", "bulk", "--pattern", "7"],
            &["pattern", "0/zeros", "1/mod63"],
        ),
        (&["usb", "bulk", "--ep-in", "zz"], &["endpoint address"]),
        (
            &["usb", "bulk", "-l", "1M", "-Q", "64"],
            &["usbfs", "usbfs_memory_mb"],
        ),
        (
            &["usb", "bulk", "--format", "iperf3-json"],
            &["iperf3-json", "USB"],
        ),
        (
            &["usb", "bulk", "-t", "1", "-n", "1M"],
            &["--bytes", "--time"],
        ),
        (&["usb", "gadget", "--queue", "0"], &["--queue"]),
        (&["usb", "cbr", "-t", "1"], &["--rate", "--ladder"]),
        (
            &["usb", "mon", "-d", "1.2", "-i", "0"],
            &["-i/--interval", "got 0"],
        ),
        (
            &["usb", "mon", "-d", "1.2", "--knob", "mtu"],
            &["--knob mtu", "NAME=VALUE"],
        ),
        // mon reports through the common reporters, as bulk does.
        (
            &["usb", "mon", "-d", "1.2", "--format", "iperf3-json"],
            &["iperf3-json", "USB"],
        ),
        (
            &["usb", "cbr", "-b", "1M", "--format", "csv"],
            &["--format csv", "human or json"],
        ),
        (
            &["usb", "cbr", "-b", "fast"],
            &["'fast'", "bytes per second"],
        ),
        (
            &["usb", "cbr", "-b", "1M", "--ladder", "1M,2M"],
            &["--ladder", "--rate"],
        ),
        (
            &["usb", "cbr", "-b", "1M", "--host-stall", "1s:2s"],
            &["--host-stall", "EVERY:FOR"],
        ),
        (
            &["usb", "cbr", "-b", "1M", "--device-request", "1M"],
            &["--device-request", "--device-buffer"],
        ),
        (&["usb", "cbr", "-b", "1M", "--repeat", "0"], &["--repeat"]),
        (
            &["usb", "cbr", "-b", "1M", "--prefill", "1M"],
            &["--prefill", "--device-buffer"],
        ),
        (
            &["usb", "cbr", "-b", "1M", "--app-size", "0"],
            &["--app-size"],
        ),
        (
            &[
                "usb",
                "cbr",
                "-b",
                "1M",
                "-l",
                "16K",
                "--host-buffer",
                "40K",
            ],
            &["--host-buffer", "whole number", "-l"],
        ),
        (
            &["usb", "cbr", "-b", "1M", "--host-buffer", "64K", "-Q", "4"],
            &["--host-buffer", "--depth"],
        ),
        // The same -l and -Q limits as `usb bulk`.
        (
            &["usb", "cbr", "-b", "1M", "-Q", "5000"],
            &["-Q/--depth", "4096"],
        ),
        (
            &["usb", "cbr", "-b", "1M", "-l", "65M"],
            &["-l/--size", "64M"],
        ),
        (&["usb", "gadget", "--name", "a/b"], &["--name"]),
        (
            &["usb", "gadget", "--function", "net"],
            &["--function net", "--encap"],
        ),
        (
            &["usb", "gadget", "--encap", "eem"],
            &["--encap", "--function net"],
        ),
        (
            &[
                "usb",
                "gadget",
                "--function",
                "net",
                "--encap",
                "eem",
                "-N",
                "0",
            ],
            &["--frames-per-transfer", "got 0"],
        ),
        (
            &["usb", "gadget", "--via", "raw-gadget"],
            &["--via raw-gadget", "--function net"],
        ),
        (
            &["usb", "gadget", "--function", "net", "--via", "raw-gadget"],
            &["--function net", "--encap"],
        ),
        (
            &["usb", "gadget", "--id", "12345"],
            &["--id 12345", "VID:PID"],
        ),
        (
            &["stream", "-t", "1", "--usbmon", "0525:a4a1,xyz"],
            &["--usbmon", "'xyz'", "ecm, eem or ncm"],
        ),
        (&["stream", "--usbmon", ",ecm"], &["--usbmon", "VID:PID"]),
    ];
    for (args, needles) in cases {
        let out = run(args, T);
        out.assert_one_line_failure(2, needles);
    }
}

#[test]
fn a_missing_device_is_named_with_what_to_do() {
    for (args, prefix) in [
        (&["usb", "bulk", "-d", "ffff:fffe", "-t", "1"][..], ""),
        (&["usb", "mon", "-d", "ffff:fffe", "-J"][..], ""),
        // Beside another verb: refused before the verb starts.
        (
            &["--usbmon", "ffff:fffe,ecm", "stream", "-t", "1"][..],
            "--usbmon: ",
        ),
    ] {
        let out = run(args, T);
        let line = out.assert_one_line(&[]);
        assert_eq!(out.code, Some(1), "{line}");
        assert!(line.contains(prefix), "{line}");
        assert!(
            line.contains("no USB device ffff:fffe") || line.contains("no USB host controller"),
            "{line}"
        );
    }
}

#[test]
fn usb_net_depth_out_of_range_is_one_line_before_any_device_is_touched() {
    for q in ["0", "257"] {
        let out = run(
            &["usb", "net", "-d", "ffff:fffe", "--encap", "ecm", "-Q", q],
            T,
        );
        let line = out.assert_one_line(&[]);
        assert_eq!(out.code, Some(1), "{line}");
        assert!(
            line.contains("-Q must be 1 to 256") && line.contains(&format!("got {q}")),
            "{line}"
        );
    }
}
