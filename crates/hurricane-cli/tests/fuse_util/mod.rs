//! Shared helpers of the FUSE integration tests: pools in temporary
//! directories, mounts that clean up after themselves even when a test
//! fails, libc wrappers and deterministic data.

// Test helpers: a panic is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_hurricane");

// The random-operation tests' stream and namespace model, shared with the
// engine's tests.
#[path = "../../../hurricane/tests/common/ns_model.rs"]
pub mod ns_model;
#[path = "../../../hurricane/tests/common/oplog.rs"]
pub mod oplog;
#[path = "../../../hurricane/tests/common/rng.rs"]
pub mod rng;

/// Why FUSE tests cannot run here, if they cannot.
pub fn skip_reason() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    if !have("fusermount3") {
        return Some("fusermount3 is not installed (package fuse3)".into());
    }
    None
}

/// What a FUSE test does where FUSE may be missing.
#[derive(Debug, PartialEq, Eq)]
pub enum FuseCheck {
    Run,
    /// Say why and return: a developer's machine without FUSE.
    Skip(String),
    /// Fail the test: under CI a missing FUSE must not pass silently.
    Fail(String),
}

/// Whether the environment says it is a CI run (`CI` set, and not to
/// an empty string, `0` or `false`).
pub fn is_ci(ci: Option<&str>) -> bool {
    ci.is_some_and(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false" | "no"))
}

/// The decision for a missing-FUSE reason (None: FUSE is there) and the
/// value of `CI`.
pub fn fuse_check(missing: Option<String>, ci: Option<&str>) -> FuseCheck {
    match missing {
        None => FuseCheck::Run,
        Some(why) if is_ci(ci) => FuseCheck::Fail(why),
        Some(why) => FuseCheck::Skip(why),
    }
}

/// Returns early from a test, saying why, when FUSE is not available;
/// fails the test instead under `CI=true`.
#[macro_export]
macro_rules! require_fuse {
    () => {
        match fuse_util::fuse_check(fuse_util::skip_reason(), std::env::var("CI").ok().as_deref()) {
            fuse_util::FuseCheck::Run => {}
            fuse_util::FuseCheck::Skip(why) => {
                eprintln!("SKIPPED {}: {why}", module_path!());
                return;
            }
            fuse_util::FuseCheck::Fail(why) => {
                panic!("{}: FUSE is required under CI but {why}", module_path!())
            }
        }
    };
}

#[test]
fn missing_fuse_fails_under_ci() {
    let why = || Some("/dev/fuse is missing".to_string());
    assert_eq!(fuse_check(None, Some("true")), FuseCheck::Run);
    assert_eq!(fuse_check(None, None), FuseCheck::Run);
    assert_eq!(fuse_check(why(), Some("true")), FuseCheck::Fail("/dev/fuse is missing".into()));
    assert_eq!(fuse_check(why(), Some("1")), FuseCheck::Fail("/dev/fuse is missing".into()));
    assert_eq!(fuse_check(why(), None), FuseCheck::Skip("/dev/fuse is missing".into()));
    assert_eq!(fuse_check(why(), Some("false")), FuseCheck::Skip("/dev/fuse is missing".into()));
    assert_eq!(fuse_check(why(), Some("")), FuseCheck::Skip("/dev/fuse is missing".into()));
}

pub fn have(cmd: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
}

pub fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// Runs a command; returns its output (panics only if it cannot start).
pub fn cmd(prog: &str, args: &[&str]) -> Output {
    Command::new(prog).args(args).stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("cannot run {prog}: {e}"))
}

/// Runs a command and expects success; returns stdout.
pub fn ok(prog: &str, args: &[&str]) -> String {
    let o = cmd(prog, args);
    assert!(
        o.status.success(),
        "{prog} {args:?} failed ({}):\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs fio jobs that write and verify (crc32c) files in `dir`: two jobs
/// of `size` each, `rw` with blocks of `bs` through `engine`, and any
/// `extra` options. Returns whether fio succeeded with no verify error, and
/// what it printed.
pub fn fio_check(dir: &Path, rw: &str, bs: &str, engine: &str, size: &str, extra: &[&str]) -> (bool, String) {
    let mut args = vec![
        "--name=verify".to_string(),
        format!("--directory={}", s(dir)),
        format!("--rw={rw}"),
        format!("--bs={bs}"),
        format!("--ioengine={engine}"),
        format!("--size={size}"),
        "--numjobs=2".into(),
        "--verify=crc32c".into(),
        "--do_verify=1".into(),
        "--verify_fatal=1".into(),
        "--group_reporting".into(),
        // The state files would land in the working directory.
        "--verify_state_save=0".into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cmd("fio", &refs);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success() && !text.contains("verify: bad"), text)
}

/// Runs `hurricane ARGS`, expects success; returns stdout.
pub fn hurricane(args: &[&str]) -> String {
    ok(BIN, args)
}

/// Deterministic bytes (xorshift) that differ at every offset.
pub fn data(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL in path")
}

/// Turns a libc return value into a Result.
pub fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub fn check_ssize(r: isize) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// The errno of a call expected to fail.
#[track_caller]
pub fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
    match r {
        Ok(v) => panic!("expected an error, got Ok({v:?})"),
        Err(e) => e.raw_os_error().unwrap_or_else(|| panic!("not an OS error: {e}")),
    }
}

/// A pool of image files in a temporary directory, with a mount point.
pub struct Pool {
    pub tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub mnt: PathBuf,
}

impl Pool {
    pub fn new(devices: u32, size: &str) -> Pool {
        // Every test sets the same umask, so tests in parallel threads agree.
        // SAFETY: umask has no preconditions.
        unsafe { libc::umask(0o022) };
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("pool");
        let mnt = tmp.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mount point");
        hurricane(&["mkfs", s(&dir), "--devices", &devices.to_string(), "--device-size", size]);
        // Unprivileged test users must reach the mount point.
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755));
        Pool { tmp, dir, mnt }
    }

    pub fn mount(&self, opts: &[&str]) -> Mounted {
        Mounted::new(&self.dir, &self.mnt, opts)
    }

    pub fn fsck_clean(&self) {
        let out = hurricane(&["fsck", s(&self.dir)]);
        assert!(out.contains("consistent"), "{out}");
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("hurricane-mount.log")).unwrap_or_default()
    }

    /// `hurricane put` of `bytes` as `/NAME` with `layout`.
    pub fn put(&self, name: &str, bytes: &[u8], layout: &str) {
        let local = self.tmp.path().join(format!("local-{}", name.replace('/', "_")));
        std::fs::write(&local, bytes).unwrap();
        hurricane(&["put", s(&self.dir), s(&local), &format!("/{name}"), "-l", layout]);
    }

    /// `hurricane get` of `/NAME`.
    pub fn get(&self, name: &str) -> Vec<u8> {
        let dest = self.tmp.path().join(format!("got-{}", name.replace('/', "_")));
        let _ = std::fs::remove_file(&dest);
        hurricane(&["get", s(&self.dir), &format!("/{name}"), s(&dest)]);
        std::fs::read(&dest).unwrap()
    }
}

/// Runs `hurricane ARGS` that may fail; returns (exit status, stdout,
/// stderr), and fails the test only on a panic of the command.
pub fn run(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(BIN).args(args).env_remove("RUST_LOG").stdin(Stdio::null()).output().unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned());
    assert!(!err.contains("panicked") && !err.contains("internal error"), "{args:?}: {err}");
    (o.status.code().unwrap_or(-1), out, err)
}

/// A mounted pool. Dropping it unmounts (lazily if a failed test left
/// files open) and makes sure the server is gone.
pub struct Mounted {
    pub mnt: PathBuf,
    pub pid: u32,
    done: bool,
}

/// `hurricane stats --json` of the mount at `mnt`.
pub fn stats_json(mnt: &Path) -> hurricane_fuse::StatsReport {
    let out = ok(BIN, &["stats", "--json", s(mnt)]);
    hurricane_fuse::StatsReport::from_json(out.as_bytes()).unwrap_or_else(|e| panic!("stats: {e}: {out}"))
}

pub fn server_pid(mnt: &Path) -> u32 {
    stats_json(mnt).pid
}

/// Whether any thread of process `pid` still runs (the mount's own test).
pub fn alive(pid: u32) -> bool {
    hurricane_fuse::mountinfo::process_alive(pid)
}

pub fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let end = Instant::now() + timeout;
    while alive(pid) {
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

pub fn is_fuse_mount(mnt: &Path) -> bool {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = s(mnt).replace(' ', "\\040");
    text.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let fstype = f.iter().position(|x| *x == "-").and_then(|i| f.get(i + 1)).copied().unwrap_or("");
        f.get(4) == Some(&want.as_str()) && fstype.starts_with("fuse")
    })
}

impl Mounted {
    pub fn new(pool: &Path, mnt: &Path, opts: &[&str]) -> Mounted {
        let mut args = vec!["mount", s(pool), s(mnt)];
        for o in opts {
            args.push("-o");
            args.push(o);
        }
        hurricane(&args);
        assert!(is_fuse_mount(mnt), "{} is not a FUSE mount after `hurricane mount`", mnt.display());
        let pid = server_pid(mnt);
        Mounted { mnt: mnt.to_path_buf(), pid, done: false }
    }

    /// Takes charge of a mount made some other way (mount(8) helper).
    pub fn attach(mnt: &Path) -> Mounted {
        assert!(is_fuse_mount(mnt), "{} is not a FUSE mount", mnt.display());
        Mounted { mnt: mnt.to_path_buf(), pid: server_pid(mnt), done: false }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    pub fn stats(&self) -> hurricane_fuse::StatsReport {
        stats_json(&self.mnt)
    }

    /// Makes directory `rel` with `layout` as the default of new files in it.
    pub fn dir_with_layout(&self, rel: &str, layout: &str) {
        std::fs::create_dir(self.path(rel)).unwrap();
        rustix::fs::setxattr(
            self.path(rel),
            "user.hurricane.dir_layout",
            layout.as_bytes(),
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
    }

    /// Clean unmount through `hurricane umount` (waits for the server).
    pub fn unmount(mut self) {
        hurricane(&["umount", s(&self.mnt)]);
        assert!(!is_fuse_mount(&self.mnt));
        assert!(!alive(self.pid), "server {} still running after umount", self.pid);
        self.done = true;
    }

    /// Simulated crash: SIGKILL the server, then detach the dead mount.
    pub fn kill9(mut self) {
        // SAFETY: signalling a process we started.
        unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        assert!(wait_gone(self.pid, Duration::from_secs(10)), "server survived SIGKILL");
        let _ = cmd("fusermount3", &["-u", "-z", s(&self.mnt)]);
        assert!(!is_fuse_mount(&self.mnt));
        self.done = true;
    }

    /// Marks the mount as handled elsewhere (the test unmounted it).
    pub fn forget(mut self) {
        self.done = true;
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if is_fuse_mount(&self.mnt) {
            let _ = cmd("fusermount3", &["-u", "-z", s(&self.mnt)]);
        }
        if !wait_gone(self.pid, Duration::from_secs(10)) {
            // SAFETY: signalling the server this test started.
            unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
            wait_gone(self.pid, Duration::from_secs(5));
        }
    }
}

/// A Python interpreter every user may run (a per-user shim such as
/// pyenv's is not readable by others).
pub fn python_bin() -> &'static str {
    ["/usr/bin/python3", "/usr/local/bin/python3"].into_iter().find(|p| Path::new(p).exists()).unwrap_or("python3")
}

/// Runs a Python script (from `-c`), optionally as another user through
/// setpriv; returns (success, stdout+stderr).
pub fn python(script: &str, args: &[&str], as_user: Option<(u32, u32, &[u32])>) -> (bool, String) {
    let py = python_bin();
    let mut c = match as_user {
        Some((uid, gid, groups)) => {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={uid}")).arg(format!("--regid={gid}"));
            if groups.is_empty() {
                c.arg("--clear-groups");
            } else {
                c.arg(format!("--groups={}", groups.iter().map(|g| g.to_string()).collect::<Vec<_>>().join(",")));
            }
            c.arg(py);
            c
        }
        None => Command::new(py),
    };
    c.arg("-c").arg(script).args(args).stdin(Stdio::null());
    let o = c.output().expect("run python3");
    (o.status.success(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}
