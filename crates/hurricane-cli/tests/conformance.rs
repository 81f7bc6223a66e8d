//! POSIX conformance: pjdfstest (vendor/pjdfstest, the suite FreeBSD, ZFS
//! and many FUSE file systems are held to) against a fresh multi-user
//! mount (`-o allow_other`), as root, with its unprivileged cases run as
//! uids 65533 and 65534. Every one of its ~8,800 assertions must pass.
//!
//! The suite is compiled from its C source into a temporary directory and
//! driven by `prove` (Perl's TAP harness). Where FUSE, a C compiler or
//! `prove` is missing the test says so and is skipped, except under
//! `CI=true`, where that fails the run (scripts/setup.sh installs them).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The C compiler and TAP harness the suite needs, or why it cannot run.
fn missing_tools() -> Option<String> {
    ["cc", "prove"].into_iter().find(|t| !have(t)).map(|t| format!("{t} is not installed"))
}

fn suite_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../vendor/pjdfstest")
}

/// Copies the suite's tests beside a freshly built `pjdfstest` binary
/// (each test finds the binary by walking up from its own directory).
fn build_suite(into: &Path) {
    let src = suite_source();
    ok("cp", &["-r", s(&src.join("tests")), s(into)]);
    ok(
        "cc",
        &["-Wall", "-Werror", "-O2", "-I", s(&src), "-o", s(&into.join("pjdfstest")), s(&src.join("pjdfstest.c"))],
    );
}

/// The lines of prove's output worth showing on failure: failed tests and
/// the summary.
fn failures(out: &str) -> String {
    let mut keep: Vec<&str> = out.lines().filter(|l| l.starts_with("not ok") || l.contains("Failed")).collect();
    if let Some(i) = out.find("Test Summary Report") {
        keep.push(&out[i..]);
    }
    keep.join("\n")
}

fn run_conformance(opts: &[&str]) {
    let work = tempfile::tempdir().expect("tempdir");
    build_suite(work.path());
    let pool = Pool::new(3, "1G");
    let m = pool.mount(opts);
    // The suite writes in the current directory: a directory of its own
    // on the mount, which every test user may enter.
    let here = m.path("conformance");
    std::fs::create_dir(&here).expect("mkdir on the mount");
    ok("chmod", &["0777", s(&here)]);
    let out = Command::new("prove")
        .args(["-r", "-j", "4", "--timer"])
        .arg(work.path().join("tests"))
        .current_dir(&here)
        .stdin(Stdio::null())
        .output()
        .expect("run prove");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let summary = text.lines().rev().find(|l| l.starts_with("Files=")).unwrap_or("").to_string();
    assert!(
        out.status.success() && text.contains("Result: PASS"),
        "pjdfstest on a mount with {opts:?} failed ({}):\n{}\n\nmount log:\n{}",
        out.status,
        failures(&text),
        pool.log()
    );
    eprintln!("pjdfstest with {opts:?}: {summary}");
    m.unmount();
    pool.fsck_clean();
}

#[test]
fn pjdfstest_on_a_multi_user_mount() {
    require_fuse!();
    if !is_root() {
        eprintln!("SKIPPED: pjdfstest runs its cases as other users, which needs root");
        return;
    }
    if let Some(why) = missing_tools() {
        assert!(std::env::var("CI").map_or(true, |v| v != "true"), "pjdfstest cannot run under CI: {why}");
        eprintln!("SKIPPED: {why}");
        return;
    }
    run_conformance(&["allow_other"]);
}
