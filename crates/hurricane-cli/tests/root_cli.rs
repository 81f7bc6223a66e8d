//! The `hurricane` command run by root on what other users control: pool
//! files with set-id bits, destinations and pool directories where a user
//! planted symbolic links, pool.conf lines a user wrote. Nothing a user
//! does there gets root to write through her links or hand her a set-id
//! file. Tests that need root (chown to another user) say so and return
//! early when run by anyone else.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_hurricane");
/// The user the tests hand things to (`nobody` on most systems).
const OTHER: u32 = 65534;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(args: &[&str]) -> Run {
    let o = Command::new(BIN).args(args).env_remove("RUST_LOG").stdin(Stdio::null()).output().expect("spawn hurricane");
    let r = Run {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    };
    assert!(!r.stderr.contains("panicked"), "{args:?}: {}", r.stderr);
    r
}

fn ok(args: &[&str]) -> Run {
    let r = run(args);
    assert_eq!(r.code, 0, "{args:?} failed: {}{}", r.stdout, r.stderr);
    r
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(uid)).expect("chown");
}

struct Pool {
    tmp: tempfile::TempDir,
    dir: PathBuf,
}

impl Pool {
    fn new() -> Pool {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("pool");
        ok(&["mkfs", s(&dir), "--devices", "2", "--device-size", "32M"]);
        Pool { tmp, dir }
    }

    fn p(&self) -> &str {
        s(&self.dir)
    }

    /// A path in the test's scratch directory (beside the pool).
    fn at(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// Gives pool path `path` the mode `mode` (set-id bits included),
    /// through the library: the command line has no chmod.
    fn chmod(&self, path: &str, mode: u32) {
        let fs = hurricane::Fs::open_dir(&self.dir, hurricane::Options::default()).expect("open the pool");
        let ino = fs.stat(path).expect("stat").ino;
        let s = hurricane::SetAttr { mode: Some(mode), ..Default::default() };
        fs.setattr(&hurricane::Creds::root(), ino, &s).expect("chmod");
        assert_eq!(fs.stat(path).unwrap().mode & 0o7777, mode, "the pool keeps the set-id bits");
        fs.close().expect("close");
    }

    /// The mode (permission and set-id bits) of pool path `path`.
    fn mode(&self, path: &str) -> u32 {
        let out = ok(&["stat", self.p(), path]).stdout;
        let m = out.split("Mode: ").nth(1).expect("a Mode line");
        u32::from_str_radix(&m[..4], 8).expect("octal mode")
    }
}

/// Fails unless the file `p` still holds `want` (saying what it holds
/// now, cut short).
fn unchanged(p: &Path, want: &[u8], what: &str) {
    let got = std::fs::read(p).unwrap();
    if got != want {
        let head = String::from_utf8_lossy(&got[..got.len().min(200)]).into_owned();
        panic!("{}: {what}: now {} bytes: {head:?}", p.display(), got.len());
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// `get` and `get -r` of set-uid and set-gid pool files make copies without
/// those bits (the copy is the caller's, not the pool file owner's), as cp
/// does; the permission bits, and a directory's sticky bit, are kept.
#[test]
fn get_drops_set_id_bits() {
    let pool = Pool::new();
    let local = pool.at("id");
    std::fs::write(&local, b"#!/bin/sh\nid\n").unwrap();
    ok(&["mkdir", pool.p(), "/u"]);
    ok(&["put", pool.p(), s(&local), "/u/id"]);
    ok(&["mkdir", pool.p(), "/u/shared"]);
    ok(&["put", pool.p(), s(&local), "/u/shared/g"]);
    pool.chmod("/u/id", 0o4755);
    pool.chmod("/u/shared/g", 0o2755);
    pool.chmod("/u/shared", 0o3777);

    let out = pool.at("out");
    ok(&["get", pool.p(), "/u/id", s(&out)]);
    assert_eq!(std::fs::read(&out).unwrap(), b"#!/bin/sh\nid\n");
    assert_eq!(mode(&out), 0o755, "get keeps no set-uid bit");

    let tree = pool.at("tree");
    ok(&["get", "-r", pool.p(), "/u", s(&tree)]);
    assert_eq!(mode(&tree.join("id")), 0o755, "get -r keeps no set-uid bit");
    assert_eq!(mode(&tree.join("shared/g")), 0o755, "get -r keeps no set-gid bit");
    assert_eq!(mode(&tree.join("shared")), 0o1777, "a directory keeps its sticky bit, not its set-gid bit");
}

/// `put` of a local set-uid file as root makes a pool file owned by root:
/// the set-id bits are dropped there too.
#[test]
fn put_drops_set_id_bits() {
    let pool = Pool::new();
    let local = pool.at("id");
    std::fs::write(&local, b"binary").unwrap();
    std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o4755)).unwrap();
    ok(&["put", pool.p(), s(&local), "/id"]);
    assert_eq!(pool.mode("/id"), 0o755);
    let dir = pool.at("d");
    std::fs::create_dir(&dir).unwrap();
    std::fs::copy(&local, dir.join("id")).unwrap();
    std::fs::set_permissions(dir.join("id"), std::fs::Permissions::from_mode(0o6750)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o2775)).unwrap();
    ok(&["put", "-r", pool.p(), s(&dir), "/d"]);
    assert_eq!(pool.mode("/d/id"), 0o750);
    assert_eq!(pool.mode("/d"), 0o775);
}

/// A user who can write where `get` writes plants symbolic links to a
/// root file: `get` neither writes through them nor follows them into
/// another directory.
#[test]
fn get_follows_no_link_another_user_planted() {
    if !is_root() {
        eprintln!("skipped: needs root (chown to another user)");
        return;
    }
    let pool = Pool::new();
    let local = pool.at("src");
    std::fs::write(&local, b"pool data").unwrap();
    ok(&["mkdir", pool.p(), "/t"]);
    ok(&["mkdir", pool.p(), "/t/sub"]);
    ok(&["put", pool.p(), s(&local), "/t/f"]);
    ok(&["put", pool.p(), s(&local), "/t/sub/g"]);

    let victim = pool.at("victim");
    std::fs::write(&victim, b"root's").unwrap();
    let secret = pool.at("secret");
    std::fs::create_dir(&secret).unwrap();
    // Her directory, where root fetches to.
    let hers = pool.at("hers");
    std::fs::create_dir(&hers).unwrap();
    chown(&hers, OTHER);
    let plant = |name: &str, to: &Path| {
        let l = hers.join(name);
        std::os::unix::fs::symlink(to, &l).unwrap();
        chown(&l, OTHER);
        l
    };

    // LOCAL itself, and LOCAL/NAME when LOCAL is a directory.
    let l = plant("out", &victim);
    let r = run(&["get", pool.p(), "/t/f", s(&l)]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("symbolic link") && r.stderr.contains(s(&l)), "{}", r.stderr);
    plant("f", &victim);
    let r = run(&["get", pool.p(), "/t/f", s(&hers)]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("symbolic link"), "{}", r.stderr);
    // A link to a directory is not taken as one.
    plant("t", &secret);
    let r = run(&["get", "-r", pool.p(), "/t", s(&hers)]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("symbolic link"), "{}", r.stderr);
    unchanged(&victim, b"root's", "written through a link");
    assert_eq!(std::fs::read_dir(&secret).unwrap().count(), 0, "nothing written in the link's target");

    // Inside a tree that get -r fills (hers, already there): a link where
    // a file goes is replaced, one where a directory goes is refused.
    let tree = hers.join("tree");
    std::fs::create_dir_all(tree.join("t")).unwrap();
    chown(&tree, OTHER);
    chown(&tree.join("t"), OTHER);
    let f = tree.join("t/f");
    std::os::unix::fs::symlink(&victim, &f).unwrap();
    chown(&f, OTHER);
    ok(&["get", "-r", pool.p(), "/t", s(&tree)]);
    unchanged(&victim, b"root's", "written through a link");
    assert!(std::fs::symlink_metadata(&f).unwrap().is_file(), "the link is replaced by the file");
    assert_eq!(std::fs::read(&f).unwrap(), b"pool data");
    let sub = tree.join("t/sub");
    std::fs::remove_dir_all(&sub).unwrap();
    std::os::unix::fs::symlink(&secret, &sub).unwrap();
    chown(&sub, OTHER);
    let r = run(&["get", "-r", pool.p(), "/t", s(&tree)]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("symbolic link") && r.stderr.contains("sub"), "{}", r.stderr);
    assert_eq!(std::fs::read_dir(&secret).unwrap().count(), 0, "nothing written through the link");
    unchanged(&victim, b"root's", "written through a link");
}

/// `device add` in a pool directory another user owns, where she linked
/// `pool.conf.tmp` to a root file: the link is not followed (the stale
/// temporary is removed, the new list written beside it), the root file
/// keeps its bytes, and root is warned whose directory it works in.
#[test]
fn device_add_writes_through_no_planted_link() {
    if !is_root() {
        eprintln!("skipped: needs root (chown to another user)");
        return;
    }
    let pool = Pool::new();
    let victim = pool.at("victim");
    std::fs::write(&victim, b"root's\n").unwrap();
    chown(&pool.dir, OTHER);
    let tmp = pool.dir.join("pool.conf.tmp");
    std::os::unix::fs::symlink(&victim, &tmp).unwrap();
    chown(&tmp, OTHER);
    let new = pool.at("new2.img");
    let r = run(&["device", "add", pool.p(), s(&new)]);
    unchanged(&victim, b"root's\n", &format!("written through the link: {}", r.stderr));
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let conf = std::fs::read_to_string(pool.dir.join("pool.conf")).unwrap();
    assert!(conf.contains("new2.img"), "{conf}");
    assert!(std::fs::symlink_metadata(&tmp).is_err(), "the stale temporary is gone");
    assert!(r.stderr.contains(pool.p()) && r.stderr.contains(&format!("uid {OTHER}")), "{}", r.stderr);
    // pool.conf itself a link (to a copy of the list, in a file of
    // root's): not read through, nor written through.
    std::fs::rename(pool.dir.join("pool.conf"), pool.at("conf")).unwrap();
    std::os::unix::fs::symlink(pool.at("conf"), pool.dir.join("pool.conf")).unwrap();
    let before = std::fs::read(pool.at("conf")).unwrap();
    let r = run(&["device", "add", pool.p(), s(&pool.at("new3.img"))]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("pool.conf") && r.stderr.contains("symbolic link"), "{}", r.stderr);
    unchanged(&pool.at("conf"), &before, "written through the link");
    assert!(!pool.at("new3.img").exists());
}

/// Root working on a pool directory it does not own, or that others may
/// write, is told so; its own directory is worked on silently.
#[test]
fn a_pool_directory_root_does_not_own_is_named_in_a_warning() {
    if !is_root() {
        eprintln!("skipped: needs root (chown to another user)");
        return;
    }
    let pool = Pool::new();
    let r = ok(&["ls", pool.p()]);
    assert!(!r.stderr.contains("warning"), "{}", r.stderr);
    chown(&pool.dir, OTHER);
    let r = ok(&["ls", pool.p()]);
    assert!(r.stderr.contains("warning") && r.stderr.contains(pool.p()), "{}", r.stderr);
    assert!(r.stderr.contains(&format!("uid {OTHER}")), "{}", r.stderr);
    chown(&pool.dir, 0);
    std::fs::set_permissions(&pool.dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let r = ok(&["ls", pool.p()]);
    assert!(r.stderr.contains("warning") && r.stderr.contains("writable"), "{}", r.stderr);
}

/// A line pool.conf does not know is an error naming it and its line
/// number, before anything is opened or written.
#[test]
fn pool_conf_with_an_unknown_line_is_refused() {
    let pool = Pool::new();
    let f = pool.dir.join("pool.conf");
    let good = std::fs::read_to_string(&f).unwrap();
    let n = good.lines().count() + 1;
    std::fs::write(&f, format!("{good}* * * * * root /tmp/x\n")).unwrap();
    for args in [vec!["ls", pool.p()], vec!["device", "add", pool.p(), s(&pool.at("new.img"))]] {
        let r = run(&args);
        assert_eq!(r.code, 1, "{args:?}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains(&format!("line {n}")) && r.stderr.contains("* * * * * root /tmp/x"),
            "{args:?}: {}",
            r.stderr
        );
    }
    assert!(!pool.at("new.img").exists());
    assert_eq!(std::fs::read_to_string(&f).unwrap(), format!("{good}* * * * * root /tmp/x\n"));
    // A bare path (not `device = PATH`) is refused too.
    std::fs::write(&f, format!("{good}dev9.img\n")).unwrap();
    let r = run(&["ls", pool.p()]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("dev9.img") && r.stderr.contains("device = PATH"), "{}", r.stderr);
    std::fs::write(&f, &good).unwrap();
    ok(&["ls", pool.p()]);
}

/// Unmounts (lazily) a mount a failed test left behind.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3").args(["-u", "-z"]).arg(&self.0).output();
    }
}

/// A background mount of a pool directory another user owns, where she
/// linked the mount's log to a root file: the mount serves, without that
/// log, and the root file keeps its bytes.
#[test]
fn the_mount_log_is_written_through_no_planted_link() {
    if !is_root() || !Path::new("/dev/fuse").exists() {
        eprintln!("skipped: needs root and FUSE");
        return;
    }
    let pool = Pool::new();
    let victim = pool.at("victim");
    std::fs::write(&victim, b"root's\n").unwrap();
    chown(&pool.dir, OTHER);
    let log = pool.dir.join("hurricane-mount.log");
    std::os::unix::fs::symlink(&victim, &log).unwrap();
    chown(&log, OTHER);
    let mnt = pool.at("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let guard = Unmount(mnt.clone());
    let r = run(&["mount", pool.p(), s(&mnt)]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    std::fs::write(mnt.join("a"), b"served").unwrap();
    ok(&["umount", s(&mnt)]);
    std::mem::forget(guard);
    unchanged(&victim, b"root's\n", "the mount logged through the link");
    assert!(r.stderr.contains("hurricane-mount.log") && r.stderr.contains("will not log"), "{}", r.stderr);
    assert!(std::fs::symlink_metadata(&log).unwrap().file_type().is_symlink());
}

/// `mkfs --devices N` as root in a directory another user owns, where she
/// linked `dev0.img` to a root file: refused before anything is opened;
/// the root file keeps its bytes.
#[test]
fn mkfs_makes_no_image_in_another_users_directory() {
    if !is_root() {
        eprintln!("skipped: needs root (chown to another user)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, b"root's\n").unwrap();
    let dir = tmp.path().join("hers");
    std::fs::create_dir(&dir).unwrap();
    chown(&dir, OTHER);
    std::os::unix::fs::symlink(&victim, dir.join("dev0.img")).unwrap();
    chown(&dir.join("dev0.img"), OTHER);
    let r = run(&["mkfs", s(&dir), "--devices", "2", "--device-size", "32M"]);
    unchanged(&victim, b"root's\n", "formatted through the link");
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains(s(&dir)) && r.stderr.contains(&format!("uid {OTHER}")), "{}", r.stderr);
    assert!(!dir.join("pool.conf").exists() && !dir.join("dev1.img").exists());
}
