//! The layers of both crates (docs/design.md, "Layers"): a module may use
//! modules on lower floors and on none above its own. This test reads every
//! `crate::` path in the non-test code of each top-level module and fails on
//! a use that points up or sideways, unless it is one of today's known
//! ones, listed below with the cut that removes it. The list only shrinks:
//! an entry whose use is gone fails the test too, so a fix removes its line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The binary's floors, lowest first. Modules on one floor may not use
/// each other. `software` (the build's name and version) is the module
/// behind `crate::software()`, which main.rs re-exports.
const BINARY: &[&[&str]] = &[
    &["sys", "logging", "software"],
    &["net", "output"],
    &["control"],
    &["transport"],
    &["driver"],
    &["session"],
    &["stream"],
    &["rr", "iperf3", "quicperf", "usb"],
    &["patterns"],
    &["agent"],
    &["server", "metrics"],
    &["lab", "model", "series", "experiment", "calibrate"],
    &["cli"],
    &["main"],
];

/// The core's floors, lowest first.
const CORE: &[&[&str]] = &[
    &["time", "units", "csum", "steal", "latency", "jsondoc"],
    &["datagram", "dccp", "load", "outbox"],
    &["usb"],
    &["link"],
    &["knobs"],
    &["transport"],
    &["spec"],
    &["interval"],
    &["rr"],
    &["result"],
    &["counters", "sample", "experiment", "run"],
    &["proto"],
    &["iperf3"],
    &["fuzz"],
    &["lib"],
];

/// Uses against the floors that are known and being cut: (crate, from,
/// to, the cut that ends it). None since issue 33; a new entry needs the
/// cut that will remove it, and an entry whose use is gone fails.
#[rustfmt::skip]
const KNOWN: &[(&str, &str, &str, &str)] = &[];

fn src(krate: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join(krate)
        .join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its test modules (a `#[cfg(test)]` that
/// opens a `mod`, to its closing brace) and without comment lines: a doc
/// link to a module above (`see [`crate::patterns`]`) tells the reader
/// where to look and makes no dependency. A file that is itself a test
/// module (`tests.rs`) has none.
fn non_test_code(path: &Path, text: &str) -> String {
    if path.file_name().is_some_and(|n| n == "tests.rs") {
        return String::new();
    }
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        if l.trim() == "#[cfg(test)]" {
            if let Some(next) = lines.peek() {
                let n = next.trim_start();
                if n.starts_with("mod ")
                    || n.starts_with("pub mod ")
                    || n.starts_with("pub(crate) mod ")
                {
                    // Up to the line that closes the module's braces at
                    // its indentation.
                    let indent = next.len() - n.len();
                    let close = format!("{}}}", " ".repeat(indent));
                    for l in lines.by_ref() {
                        if l == close {
                            break;
                        }
                    }
                    continue;
                }
            }
        }
        if l.trim_start().starts_with("//") {
            continue;
        }
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// The top-level modules `code` names through `crate::`, grouped imports
/// (`crate::{a::X, b}`) included.
fn used_modules(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        // `xferlab_core::` paths and `$crate::` are other crates' or macros'.
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = 0;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.insert(ident(&group[start..k]));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(ident(&group[start..k]));
                        start = k + 1;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out.retain(|m| !m.is_empty() && m != "self");
    out
}

/// (from, to) for every top-level module's use of another, in `krate`.
fn uses(krate: &str) -> BTreeSet<(String, String)> {
    let root = src(krate);
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut out = BTreeSet::new();
    for f in files {
        let rel = f.strip_prefix(&root).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let from = first.trim_end_matches(".rs").to_string();
        let text = std::fs::read_to_string(&f).unwrap();
        for to in used_modules(&non_test_code(&f, &text)) {
            if to != from {
                out.insert((from.clone(), to));
            }
        }
    }
    out
}

/// Uses that point to a floor at or above the user's own.
fn upward(
    uses: &BTreeSet<(String, String)>,
    floors: &[&[&str]],
) -> Result<BTreeSet<(String, String)>, String> {
    let floor: BTreeMap<&str, usize> = floors
        .iter()
        .enumerate()
        .flat_map(|(i, f)| f.iter().map(move |m| (*m, i)))
        .collect();
    let at = |m: &str| {
        floor.get(m).copied().ok_or_else(|| {
            format!(
                "module `{m}` is on no floor: place it in this test's floors and in docs/design.md"
            )
        })
    };
    let mut out = BTreeSet::new();
    for (a, b) in uses {
        if at(a)? <= at(b)? {
            out.insert((a.clone(), b.clone()));
        }
    }
    Ok(out)
}

fn check(krate: &str, floors: &[&[&str]]) {
    let found = upward(&uses(krate), floors).unwrap_or_else(|e| panic!("{krate}: {e}"));
    let known: BTreeSet<(String, String)> = KNOWN
        .iter()
        .filter(|k| k.0 == krate)
        .map(|k| (k.1.to_string(), k.2.to_string()))
        .collect();
    let new: Vec<_> = found.difference(&known).collect();
    assert!(
        new.is_empty(),
        "{krate}: uses against the layers (docs/design.md, Layers): {new:?}; move the shared type down or invert the dependency with a trait"
    );
    let gone: Vec<_> = known.difference(&found).collect();
    assert!(
        gone.is_empty(),
        "{krate}: {gone:?} no longer happen: delete their lines from KNOWN in tests/layering.rs"
    );
}

#[test]
fn the_binary_uses_only_lower_floors() {
    check("xferlab", BINARY);
}

#[test]
fn the_core_uses_only_lower_floors() {
    check("xferlab-core", CORE);
}

/// `xferlab-sys` sits below both crates (docs/design.md, "Layers"): it
/// depends on neither, and the binary, which leaves its unsafe code to it,
/// forbids unsafe code.
#[test]
fn the_sys_crate_sits_below_both_and_the_binary_has_no_unsafe_code() {
    let manifest =
        std::fs::read_to_string(src("xferlab-sys").parent().unwrap().join("Cargo.toml")).unwrap();
    let deps = manifest
        .split("[dependencies]")
        .nth(1)
        .expect("a [dependencies] table")
        .split("\n[")
        .next()
        .unwrap();
    for line in deps.lines() {
        assert!(
            !line.trim_start().starts_with("xferlab"),
            "xferlab-sys depends on another xferlab crate: {line}"
        );
    }
    let main = std::fs::read_to_string(src("xferlab").join("main.rs")).unwrap();
    assert!(main.contains("#![forbid(unsafe_code)]"));
}

#[test]
fn an_upward_use_is_found_and_a_sideways_one_too() {
    let code = "use crate::{net::Sock, output};\nuse crate::session::x;\nlet a = xferlab_core::crate_thing; fn f() { crate::sys::now() }\n#[cfg(test)]\nmod tests {\n    use crate::cli;\n}\n";
    let path = Path::new("x.rs");
    let mods = used_modules(&non_test_code(path, code));
    assert_eq!(
        mods.into_iter().collect::<Vec<_>>(),
        ["net", "output", "session", "sys"]
    );
    let floors: &[&[&str]] = &[&["sys"], &["net", "output"], &["session"]];
    let uses: BTreeSet<(String, String)> = [
        ("session", "net"),
        ("net", "sys"),
        ("net", "output"),
        ("sys", "session"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    let up = upward(&uses, floors).unwrap();
    assert_eq!(
        up.into_iter().collect::<Vec<_>>(),
        [
            ("net".to_string(), "output".to_string()),
            ("sys".to_string(), "session".to_string())
        ]
    );
    let mut stray = uses.clone();
    stray.insert(("new".into(), "sys".into()));
    assert!(upward(&stray, floors)
        .unwrap_err()
        .contains("`new` is on no floor"));
}
