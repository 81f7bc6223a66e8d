//! What a mount leaves behind: everything after a clean unmount, every
//! fsync'd file after kill -9 of the server, a flushed and clean pool after
//! SIGTERM or SIGINT.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn getxattr(p: &std::path::Path, name: &str) -> Vec<u8> {
    fuse_util_xattr(p, name).unwrap_or_else(|e| panic!("getxattr {name} on {}: {e}", p.display()))
}

fn fuse_util_xattr(p: &std::path::Path, name: &str) -> std::io::Result<Vec<u8>> {
    let (c, n) = (cpath(p), std::ffi::CString::new(name).unwrap());
    let mut buf = vec![0u8; 4096];
    // SAFETY: the buffer is 4096 bytes.
    let r = check_ssize(unsafe { libc::getxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })?;
    buf.truncate(r);
    Ok(buf)
}

fn setxattr(p: &std::path::Path, name: &str, v: &[u8]) {
    let (c, n) = (cpath(p), std::ffi::CString::new(name).unwrap());
    // SAFETY: valid pointers.
    check(unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) }).unwrap();
}

#[test]
fn everything_survives_unmount_and_mount() {
    require_fuse!();
    let pool = Pool::new(3, "256M");
    let m = pool.mount(&[]);
    let p = |r: &str| m.path(r);
    fs::create_dir_all(p("a/b/c")).unwrap();
    setxattr(&p("a"), "user.hurricane.dir_layout", b"stripe(unit=64K,width=2)");
    for i in 0..50 {
        fs::write(p(&format!("a/b/c/f{i}")), data(i * 10_007, i as u64)).unwrap();
    }
    fs::write(p("a/big"), data(9_000_000, 99)).unwrap();
    File::create(p("placed")).unwrap();
    setxattr(&p("placed"), "user.hurricane.layout", b"extent@2");
    fs::write(p("placed"), data(100_000, 5)).unwrap();
    std::os::unix::fs::symlink("a/big", p("link")).unwrap();
    fs::hard_link(p("a/big"), p("a/big.hard")).unwrap();
    fs::set_permissions(p("a/b"), fs::Permissions::from_mode(0o711)).unwrap();
    setxattr(&p("a/big"), "user.note", b"kept");
    let sparse = File::create(p("sparse")).unwrap();
    sparse.set_len(1 << 30).unwrap();
    drop(sparse);
    let layout_big = getxattr(&p("a/big"), "user.hurricane.layout");
    m.unmount();
    pool.fsck_clean();

    let m = pool.mount(&[]);
    let p = |r: &str| m.path(r);
    for i in 0..50 {
        assert_eq!(fs::read(p(&format!("a/b/c/f{i}"))).unwrap(), data(i * 10_007, i as u64), "a/b/c/f{i}");
    }
    assert!(fs::read(p("link")).unwrap() == data(9_000_000, 99));
    assert_eq!(fs::metadata(p("a/big")).unwrap().nlink(), 2);
    assert_eq!(fs::metadata(p("a/b")).unwrap().mode() & 0o7777, 0o711);
    assert_eq!(getxattr(&p("a/big"), "user.note"), b"kept");
    assert_eq!(getxattr(&p("a/big"), "user.hurricane.layout"), layout_big);
    // As set, with the checksum block a default pool puts above the leaf.
    assert_eq!(getxattr(&p("placed"), "user.hurricane.layout"), b"checksum[extent@2]");
    assert_eq!(fs::read(p("placed")).unwrap(), data(100_000, 5));
    assert_eq!(getxattr(&p("a"), "user.hurricane.dir_layout"), b"stripe(unit=64K,width=2)");
    assert_eq!(fs::metadata(p("sparse")).unwrap().len(), 1 << 30);
    m.unmount();
    pool.fsck_clean();
}

/// Writes files one after another, fsyncs each, and prints its number
/// once the fsync has returned; runs until the mount dies.
const WRITER: &str = r#"
import os, sys
d = sys.argv[1]
i = 0
try:
    while True:
        n = 1000 + (i * 7919) % 300000
        data = bytes((i * 31 + k * 7) % 251 for k in range(n))
        fd = os.open(f"{d}/synced-{i}", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
        print(i, n, flush=True)
        # And one file that is never fsync'd.
        with open(f"{d}/unsynced-{i}", "wb") as f:
            f.write(data)
        i += 1
except OSError:
    pass
"#;

fn writer_data(i: usize, n: usize) -> Vec<u8> {
    (0..n).map(|k| ((i * 31 + k * 7) % 251) as u8).collect()
}

#[test]
fn kill_9_keeps_every_fsynced_file() {
    require_fuse!();
    let pool = Pool::new(3, "256M");
    let m = pool.mount(&["commit_interval=0.2"]);
    fs::create_dir(m.path("w")).unwrap();
    let mut writer = Command::new(python_bin())
        .args(["-c", WRITER, s(&m.path("w"))])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = writer.stdout.take().unwrap();
    let lines = std::thread::spawn(move || BufReader::new(out).lines().map_while(Result::ok).collect::<Vec<String>>());
    std::thread::sleep(Duration::from_millis(1500));
    m.kill9();
    let _ = writer.wait();
    let synced: Vec<(usize, usize)> = lines
        .join()
        .unwrap()
        .iter()
        .map(|l| {
            let mut it = l.split(' ').map(|x| x.parse::<usize>().unwrap());
            (it.next().unwrap(), it.next().unwrap())
        })
        .collect();
    assert!(synced.len() >= 5, "the writer fsync'd only {} files before the kill", synced.len());

    // The pool mounts again without a repair, with every fsync'd file whole.
    let t0 = Instant::now();
    let m = pool.mount(&[]);
    assert!(t0.elapsed() < Duration::from_secs(20));
    for &(i, n) in &synced {
        let got = fs::read(m.path(&format!("w/synced-{i}"))).unwrap_or_else(|e| panic!("synced-{i} lost: {e}"));
        assert!(got == writer_data(i, n), "synced-{i} damaged");
    }
    // Files never fsync'd are absent, or a prefix of what was written.
    for e in fs::read_dir(m.path("w")).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if let Some(i) = name.strip_prefix("unsynced-").and_then(|x| x.parse::<usize>().ok()) {
            let got = fs::read(m.path(&format!("w/{name}"))).unwrap();
            let n = 1000 + (i * 7919) % 300000;
            assert!(got.len() <= n && got == writer_data(i, n)[..got.len()], "{name} holds data it was never given");
        }
    }
    m.unmount();
    pool.fsck_clean();
}

fn spawn_foreground(pool: &Pool) -> std::process::Child {
    let child = Command::new(BIN)
        .args(["mount", "-f", s(&pool.dir), s(&pool.mnt)])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    while !is_fuse_mount(&pool.mnt) {
        assert!(Instant::now() < end, "foreground mount did not appear");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Cleans up a foreground server if a test fails half way.
struct Child(std::process::Child, std::path::PathBuf);
impl Drop for Child {
    fn drop(&mut self) {
        if is_fuse_mount(&self.1) {
            let _ = cmd("fusermount3", &["-u", "-z", s(&self.1)]);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sigterm_and_sigint_flush_and_unmount() {
    require_fuse!();
    let pool = Pool::new(2, "128M");
    let mut c = Child(spawn_foreground(&pool), pool.mnt.clone());
    for i in 0..20 {
        fs::write(pool.mnt.join(format!("f{i}")), data(50_000 + i, i as u64)).unwrap();
    }
    // SAFETY: signalling our child.
    unsafe { libc::kill(c.0.id() as i32, libc::SIGTERM) };
    let status = wait_exit(&mut c.0, Duration::from_secs(30));
    assert!(status.success(), "server exited with {status} after SIGTERM");
    assert!(!is_fuse_mount(&pool.mnt));
    pool.fsck_clean();
    drop(c);

    // SIGINT while a file is open: the mount detaches at once, the server
    // stays until the last user leaves, then closes the pool.
    let mut c = Child(spawn_foreground(&pool), pool.mnt.clone());
    for i in 0..20 {
        assert_eq!(fs::read(pool.mnt.join(format!("f{i}"))).unwrap(), data(50_000 + i, i as u64));
    }
    let mut open = fs::OpenOptions::new().append(true).open(pool.mnt.join("f0")).unwrap();
    // SAFETY: signalling our child.
    unsafe { libc::kill(c.0.id() as i32, libc::SIGINT) };
    let end = Instant::now() + Duration::from_secs(10);
    while is_fuse_mount(&pool.mnt) {
        assert!(Instant::now() < end, "the busy mount was not detached");
        std::thread::sleep(Duration::from_millis(20));
    }
    open.write_all(b"written after the detach").unwrap();
    assert!(c.0.try_wait().unwrap().is_none(), "the server left while a file was open");
    drop(open);
    let status = wait_exit(&mut c.0, Duration::from_secs(30));
    assert!(status.success(), "server exited with {status} after SIGINT");
    pool.fsck_clean();
    drop(c);
    let m = pool.mount(&[]);
    let f0 = fs::read(m.path("f0")).unwrap();
    assert!(f0.ends_with(b"written after the detach") && f0.len() == 50_000 + 24);
    m.unmount();
}

/// A mount detached while a file in it is open (`fusermount3 -u -z`) lives
/// on until that file closes, and its server with it. Another pool mounted
/// meanwhile on the same directory is not that server's: when it ends, it
/// must leave the new mount alone (it once unmounted whatever was mounted
/// at its mount point by then).
#[test]
fn a_server_ending_late_leaves_a_new_mount_at_its_mount_point_alone() {
    require_fuse!();
    let a = Pool::new(1, "64M");
    let b = Pool::new(1, "64M");
    let ma = a.mount(&[]);
    fs::write(ma.path("a"), b"in pool a").unwrap();
    let open = fs::File::open(ma.path("a")).unwrap();
    let out = cmd("fusermount3", &["-u", "-z", s(&a.mnt)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!is_fuse_mount(&a.mnt));
    assert!(alive(ma.pid), "the server left while a file was open");

    let mb = Mounted::new(&b.dir, &a.mnt, &[]);
    fs::write(mb.path("b"), b"in pool b").unwrap();
    drop(open);
    assert!(wait_gone(ma.pid, Duration::from_secs(30)), "the detached server did not end");
    ma.forget();
    assert!(is_fuse_mount(&a.mnt), "the server of pool a unmounted pool b's mount when it ended");
    assert_eq!(fs::read(mb.path("b")).unwrap(), b"in pool b");
    assert!(alive(mb.pid));
    mb.unmount();
    a.fsck_clean();
    b.fsck_clean();
}

fn wait_exit(c: &mut std::process::Child, timeout: Duration) -> std::process::ExitStatus {
    let end = Instant::now() + timeout;
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            return st;
        }
        assert!(Instant::now() < end, "server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn one_server_per_pool() {
    require_fuse!();
    let pool = Pool::new(2, "64M");
    let m = pool.mount(&[]);
    let other = pool.tmp.path().join("mnt2");
    fs::create_dir(&other).unwrap();
    let out = cmd(BIN, &["mount", s(&pool.dir), s(&other)]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!is_fuse_mount(&other));
    // `hurricane umount` also clears a mount whose server died.
    // SAFETY: signalling the server this test started.
    unsafe { libc::kill(m.pid as i32, libc::SIGKILL) };
    assert!(wait_gone(m.pid, Duration::from_secs(10)));
    assert!(is_fuse_mount(&pool.mnt), "a dead server leaves its mount behind");
    let again = cmd(BIN, &["mount", s(&pool.dir), s(&pool.mnt)]);
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success() && said.contains("hurricane umount"), "{:?}: {said}", again.status);
    hurricane(&["umount", s(&pool.mnt)]);
    assert!(!is_fuse_mount(&pool.mnt));
    m.forget();
    // The next mount recovers and serves again.
    let m = pool.mount(&[]);
    m.unmount();
    pool.fsck_clean();
}
