//! The Debian package, as a user gets it: scripts/package packs the debug
//! binary this test run already built (cargo-deb with --no-build: CI's
//! 20 minutes have no room for a second, release build), dpkg-deb unpacks
//! it into a temporary root, and the test looks at it with the tools a user
//! has: its file list and control data, `man -l` on its pages (every
//! option of a verb's --help, no more, no less), bash loading its
//! completion and completing a verb, and `systemd-analyze verify` on its
//! unit. Needs cargo-deb, dpkg-deb, dpkg-shlibdeps, man and systemd-analyze
//! (.ci/run installs them); a missing one fails the test with its fix.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Output, Proc, BIN};

/// Packing a 90 MB debug binary (strip, then xz at its fast level) took
/// 9 s on the 2-vCPU CI machine; the rest takes a second.
const PACK: Duration = Duration::from_secs(180);
const T: Duration = Duration::from_secs(30);

fn run_env(program: &str, args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Output {
    let out = Proc::spawn_program_env(program, args, env).finish(timeout);
    assert!(
        !out.timed_out && out.code == Some(0),
        "failed\n{}",
        out.describe()
    );
    out
}

fn run(program: &str, args: &[&str]) -> Output {
    run_env(program, args, &[], T)
}

/// A tool the test needs, or the failure that says how to get it.
fn require(program: &str, args: &[&str], fix: &str) {
    let ok = std::process::Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let cmd = [&[program], args].concat().join(" ");
    assert!(ok, "`{cmd}` failed: {fix} (.ci/run installs it)");
}

/// The verbs a `--help` lists under "Commands:" (without `help`).
fn verbs(args: &[&str]) -> Vec<String> {
    let mut all = args.to_vec();
    all.push("--help");
    let help = run(BIN, &all).stdout;
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        // A verb's line starts two spaces in; its wrapped text further.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|v| *v != "help")
        .map(str::to_owned)
        .collect()
}

/// The option lines of a --help or a rendered man page (`-P, --parallel
/// <N>`): those at one of `indents` that start with a dash.
fn option_lines(text: &str, indents: &[usize]) -> BTreeSet<String> {
    text.lines()
        .filter(|l| {
            let t = l.trim_start();
            t.starts_with('-') && indents.contains(&(l.len() - t.len()))
        })
        // The flags and value names, up to the text or default that may
        // follow on the line (a page puts the default there, --help after
        // the text: checked on their own); --help marks a counted flag
        // (-v...), a page does not.
        .map(|l| {
            let words = l.split_whitespace();
            let flag: Vec<&str> = words
                .take_while(|w| w.starts_with('-') || w.starts_with('<'))
                .collect();
            flag.join(" ").replace("...", "")
        })
        .collect()
}

#[test]
fn the_package_installs_binary_pages_completions_and_a_valid_unit() {
    require(
        "cargo",
        &["deb", "--version"],
        "cargo-deb is missing; it builds the package: scripts/install-cargo-deb",
    );
    require("dpkg-deb", &["--version"], "apt-get install dpkg");
    require(
        "dpkg-shlibdeps",
        &["--version"],
        "cargo-deb reads the binary's library dependencies with it: apt-get install dpkg-dev",
    );
    require("man", &["--version"], "apt-get install man-db");
    require("systemd-analyze", &["--version"], "apt-get install systemd");

    let tmp = tempfile::tempdir().unwrap();
    let deb = tmp.path().join("xferlab.deb");
    let root = tmp.path().join("root");
    let control = tmp.path().join("control");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/package");
    // --fast: xz's fast level, for the test's time; the real package is
    // made at its default.
    // TMPDIR: the script stages the binary there, gone with `tmp`.
    run_env(
        script.to_str().unwrap(),
        &["--bin", BIN, "-o", deb.to_str().unwrap(), "--fast"],
        &[("TMPDIR", tmp.path().to_str().unwrap())],
        PACK,
    );
    run(
        "dpkg-deb",
        &["-x", deb.to_str().unwrap(), root.to_str().unwrap()],
    );
    run(
        "dpkg-deb",
        &["-e", deb.to_str().unwrap(), control.to_str().unwrap()],
    );

    check_control(&deb, &control);
    check_files(&root);
    check_man_pages(&root);
    check_completions(&root);
    check_unit(&root, tmp.path());
}

/// The package's fields, and maintainer scripts that never enable or
/// start the service on their own.
fn check_control(deb: &Path, control: &Path) {
    let fields = run("dpkg-deb", &["-f", deb.to_str().unwrap()]).stdout;
    for want in [
        "Package: xferlab",
        "Section: net",
        "Depends: libc6",
        "Suggests: iperf3",
    ] {
        assert!(
            fields.contains(want),
            "no `{want}` in the control file:\n{fields}"
        );
    }
    let conffiles = std::fs::read_to_string(control.join("conffiles")).unwrap();
    assert!(
        conffiles.contains("/etc/default/xferlab-server"),
        "{conffiles}"
    );
    let postinst = std::fs::read_to_string(control.join("postinst")).unwrap();
    assert!(postinst.contains("systemd-sysusers"), "{postinst}");
    // No start, and an enable only on upgrades of a unit the admin had
    // enabled (debhelper's "don't enable" snippet: `debian-installed`
    // first; its "enable" one enables on a first install).
    assert!(!postinst.contains("deb-systemd-invoke start"), "{postinst}");
    assert!(
        !postinst.contains("deb-systemd-helper enable")
            || postinst.contains("deb-systemd-helper debian-installed xferlab-server.service"),
        "postinst enables the service on install:\n{postinst}"
    );
}

fn check_files(root: &Path) {
    let exe = root.join("usr/bin/xferlab");
    let version = run(exe.to_str().unwrap(), &["--version"]).stdout;
    assert!(version.starts_with("xferlab "), "{version}");
    for f in [
        "usr/share/bash-completion/completions/xferlab",
        "usr/share/zsh/vendor-completions/_xferlab",
        "usr/share/fish/vendor_completions.d/xferlab.fish",
        "usr/lib/systemd/system/xferlab-server.service",
        "usr/lib/sysusers.d/xferlab.conf",
        "etc/default/xferlab-server",
        "usr/share/doc/xferlab/README.md",
        "usr/share/doc/xferlab/docs/design.md",
        "usr/share/doc/xferlab/docs/result-schema.json",
        "usr/share/doc/xferlab/examples/scenarios/udpmon.toml",
        "usr/share/doc/xferlab/examples/probe-modules.toml",
        "usr/share/doc/xferlab/copyright",
    ] {
        assert!(root.join(f).is_file(), "{f} is not in the package");
    }
}

/// A page per verb and sub-verb the binary has, no other, and each
/// rendered page lists exactly the options of that verb's --help.
fn check_man_pages(root: &Path) {
    let man1 = root.join("usr/share/man/man1");
    let mut want = BTreeSet::from(["xferlab.1.gz".to_owned()]);
    let mut commands = vec![vec![]];
    for verb in verbs(&[]) {
        want.insert(format!("xferlab-{verb}.1.gz"));
        commands.push(vec![verb.clone()]);
        for sub in verbs(&[&verb]) {
            want.insert(format!("xferlab-{verb}-{sub}.1.gz"));
            commands.push(vec![verb.clone(), sub]);
        }
    }
    assert!(want.contains("xferlab-usb-bulk.1.gz"), "{want:?}");
    let have: BTreeSet<String> = std::fs::read_dir(&man1)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        have, want,
        "the package's man pages are not the binary's verbs"
    );

    // C locale: ASCII dashes; wide lines: no option line is broken.
    let env = [("LC_ALL", "C"), ("MANWIDTH", "250")];
    for words in &commands {
        let page = match words.is_empty() {
            true => "xferlab.1.gz".to_owned(),
            false => format!("xferlab-{}.1.gz", words.join("-")),
        };
        let text = run_env("man", &["-l", man1.join(&page).to_str().unwrap()], &env, T).stdout;
        let mut args: Vec<&str> = words.iter().map(String::as_str).collect();
        args.push("--help");
        let help = run(BIN, &args).stdout;
        // --help puts an option at 2 spaces (with a short flag) or 6
        // (long only); man at 7.
        let (in_help, in_man) = (option_lines(&help, &[2, 6]), option_lines(&text, &[7]));
        assert!(in_help.len() >= 2, "no options read from {args:?}:\n{help}");
        assert_eq!(
            in_man,
            in_help,
            "man {page} and `xferlab {}` differ",
            args.join(" ")
        );
        for default in text.match_indices("[default: ") {
            let d = &text[default.0..];
            let d = &d[..=d.find(']').unwrap_or(0)];
            assert!(help.contains(d), "man {page} says {d}, its --help does not");
        }
        if page == "xferlab-stream.1.gz" {
            assert!(
                text.contains("SEE ALSO") && text.contains("xferlab(1)"),
                "{text}"
            );
        }
    }
}

/// Bash loads the completion and completes verbs, sub-verbs and flags;
/// zsh's and fish's name the verbs.
fn check_completions(root: &Path) {
    let bash = root.join("usr/share/bash-completion/completions/xferlab");
    let script = format!(
        r#"source '{}'
complete -p xferlab
c() {{ COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=()
  _xferlab xferlab "${{@: -1}}" "${{@: -2:1}}"; echo "$*: ${{COMPREPLY[*]}}"; }}
c xferlab str
c xferlab usb bu
c xferlab stream --paral"#,
        bash.display()
    );
    let out = run("bash", &["-c", &script]).stdout;
    for want in [
        "-F _xferlab xferlab",
        "xferlab str: stream",
        "xferlab usb bu: bulk",
        "xferlab stream --paral: --parallel",
    ] {
        assert!(out.contains(want), "bash completion: no `{want}` in\n{out}");
    }
    let zsh =
        std::fs::read_to_string(root.join("usr/share/zsh/vendor-completions/_xferlab")).unwrap();
    let fish =
        std::fs::read_to_string(root.join("usr/share/fish/vendor_completions.d/xferlab.fish"))
            .unwrap();
    assert!(
        zsh.starts_with("#compdef xferlab"),
        "zsh: {}",
        &zsh[..60.min(zsh.len())]
    );
    for verb in verbs(&[]) {
        assert!(
            zsh.contains(&format!("'{verb}:")),
            "zsh completion lacks {verb}"
        );
        assert!(
            fish.contains(&format!("-a \"{verb}\"")),
            "fish completion lacks {verb}"
        );
    }
}

/// `systemd-analyze verify` on the packaged unit, its ExecStart pointed at
/// the unpacked binary (verify checks that it exists) and its man page
/// looked up in the unpacked root: no error, no warning; and systemd's
/// score of its hardening. The unit must
/// not be enabled by the package either (no symlink shipped).
fn check_unit(root: &Path, tmp: &Path) {
    let unit = std::fs::read_to_string(root.join("usr/lib/systemd/system/xferlab-server.service"))
        .unwrap();
    for want in [
        "ExecStart=/usr/bin/xferlab server $XFERLAB_SERVER_OPTS",
        "EnvironmentFile=-/etc/default/xferlab-server",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "Restart=on-failure",
    ] {
        assert!(unit.contains(want), "the unit lacks `{want}`");
    }
    let exe = root.join("usr/bin/xferlab");
    let dir = tmp.join("unit");
    std::fs::create_dir(&dir).unwrap();
    let path: PathBuf = dir.join("xferlab-server.service");
    let pointed = unit.replace(
        "ExecStart=/usr/bin/xferlab ",
        &format!("ExecStart={} ", exe.display()),
    );
    std::fs::write(&path, pointed).unwrap();
    let manpath = root.join("usr/share/man");
    let out = run_env(
        "systemd-analyze",
        &["verify", path.to_str().unwrap()],
        &[("MANPATH", manpath.to_str().unwrap())],
        T,
    );
    assert!(
        out.stderr.is_empty(),
        "systemd-analyze verify warned:\n{}",
        out.describe()
    );
    // Its hardening, as systemd scores it: 1.7 ("OK") today; 3.0 fails
    // (the unit without its hardening lines scores 9.2, "UNSAFE").
    run(
        "systemd-analyze",
        &[
            "security",
            "--offline=yes",
            "--threshold=30",
            path.to_str().unwrap(),
        ],
    );
    let wants = root.join("etc/systemd/system/multi-user.target.wants");
    assert!(!wants.exists(), "the package enables the service");
}

/// Bad input to `generate`: one line naming the cause, and nothing made.
#[test]
fn generate_refuses_bad_input_with_one_line() {
    common::run(&["generate", "man", "/proc/no/such/dir"], T)
        .assert_one_line_failure(1, &["cannot create /proc/no/such/dir", "directory"]);
    common::run(&["generate", "completions", "tcsh"], T)
        .assert_one_line_failure(2, &["tcsh", "bash", "zsh", "fish"]);
    // Its output cut short by a reader that went away is no failure.
    let out = run(
        "bash",
        &[
            "-c",
            &format!("'{BIN}' generate completions bash | head -1"),
        ],
    );
    assert!(out.stderr.is_empty(), "{}", out.describe());
}
