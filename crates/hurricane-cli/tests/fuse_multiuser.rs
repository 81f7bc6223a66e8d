//! Hostile users on a shared mount (`-o allow_other`, two ordinary users
//! besides root): no user can wedge the serving threads, hold off another
//! user's writes, take over another's transaction, run the daemon out of
//! memory, or make every other request slow with pool-wide reports; a
//! writer drops a file's capabilities as it would on ext4. Every program
//! runs under `timeout`, so a hang fails its test instead of hanging the
//! suite. Needs root (to act as other users) and FUSE.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ALICE: u32 = 60101;
const BOB: u32 = 60102;

/// The Python prelude every script starts with: the ioctls, and a helper
/// that returns an errno name for a call that fails.
const PRELUDE: &str = r#"
import errno, fcntl, os, sys, threading, time, struct
BEGIN, COMMIT, ABORT = 0x6801, 0x6802, 0x6803
def err(f, *a):
    try:
        f(*a)
        return "ok"
    except OSError as e:
        # (EDEADLK's other name is EDEADLOCK.)
        return "EDEADLK" if e.errno == errno.EDEADLK else errno.errorcode.get(e.errno, str(e.errno))
"#;

/// A command line that runs `script` as `uid` (root if None), killed after
/// `secs` seconds, on CPU 0 when `pin` (every request then comes on one of
/// the mount's queues).
fn py_cmd(uid: Option<u32>, secs: u32, pin: bool, script: &str, args: &[&str]) -> Command {
    let mut c = Command::new("timeout");
    c.arg("-s").arg("KILL").arg(secs.to_string());
    if pin && have("taskset") {
        c.arg("taskset").arg("-c").arg("0");
    }
    if let Some(u) = uid {
        c.arg("setpriv").arg(format!("--reuid={u}")).arg(format!("--regid={u}")).arg("--clear-groups");
    }
    c.arg(python_bin()).arg("-c").arg(format!("{PRELUDE}\n{script}")).args(args);
    c
}

/// Runs a script to its end; (success, output). A script killed by its
/// timeout fails, saying so.
fn py(uid: Option<u32>, secs: u32, script: &str, args: &[&str]) -> (bool, String) {
    let o = py_cmd(uid, secs, false, script, args).stdin(Stdio::null()).output().unwrap();
    let mut out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    if o.status.code() == Some(137) || o.status.code().is_none() {
        out.push_str(&format!("\n(killed after {secs} s: it hung)"));
    }
    (o.status.success(), out)
}

/// A script that runs alongside the test: it reads lines from stdin as
/// cues, and its output lines are read as they come.
struct Peer {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Peer {
    fn start(uid: Option<u32>, secs: u32, pin: bool, script: &str, args: &[&str]) -> Peer {
        let mut child = py_cmd(uid, secs, pin, script, args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Peer { child, out }
    }

    /// The next line it prints ("" once it has ended).
    fn line(&mut self) -> String {
        let mut l = String::new();
        self.out.read_line(&mut l).unwrap();
        l.trim_end().to_string()
    }

    fn cue(&mut self, word: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{word}").unwrap();
        stdin.flush().unwrap();
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits for it to end: its remaining output, and whether it succeeded.
    fn finish(mut self) -> (bool, String) {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.out, &mut rest).unwrap();
        let st = self.child.wait().unwrap();
        (st.success(), rest)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
}

fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn setxattr(p: &Path, name: &str, v: &[u8]) {
    rustix::fs::setxattr(p, name, v, rustix::fs::XattrFlags::empty()).unwrap();
}

/// A protected file (`user.hurricane.txn` = 1) of `owner` with `mode`.
fn protected_file(m: &Mounted, name: &str, owner: u32, mode: u32, data: &[u8]) -> std::path::PathBuf {
    let p = m.path(name);
    std::fs::write(&p, b"").unwrap();
    setxattr(&p, "user.hurricane.layout", b"extent@0");
    setxattr(&p, "user.hurricane.txn", b"1");
    std::fs::write(&p, data).unwrap();
    chown(&p, owner);
    chmod(&p, mode);
    p
}

/// Waits (20 s at most) until the mount has no transaction open and none
/// of their bytes buffered: `whose` were aborted, and their count follows
/// their locks.
fn no_transactions_left(m: &Mounted, whose: &str) {
    let t0 = Instant::now();
    loop {
        let t = m.stats().transactions;
        if t.open == 0 && t.buffered_bytes == 0 {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{whose} transactions were not aborted: {t:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Skips (or fails in CI) where the test cannot act as other users.
macro_rules! require_users {
    () => {
        require_fuse!();
        if !is_root() || !have("setpriv") || !have("timeout") {
            eprintln!("skipped: needs root, setpriv and timeout");
            return;
        }
    };
}

/// Hole 1: a user's own transaction read a byte of her file; her truncate
/// or fallocate of it, outside the transaction, would wait for her own lock
/// forever on a serving thread. It fails with EDEADLK, and everybody else
/// goes on. A plain write that waits for another transaction waits off the
/// serving threads: another user's requests on the same CPU queue are
/// served meanwhile.
#[test]
fn no_user_can_wedge_the_serving_threads() {
    require_users!();
    let pool = Pool::new(2, "128M");
    let m = pool.mount(&["allow_other"]);
    let a = protected_file(&m, "a", ALICE, 0o644, &[7u8; 8192]);
    std::fs::create_dir(m.path("bob")).unwrap();
    chown(&m.path("bob"), BOB);

    let own = r#"
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.ioctl(fd, BEGIN)
os.pread(fd, 1, 0)
print(err(os.ftruncate, fd, 0), err(os.posix_fallocate, fd, 0, 100000), flush=True)
fcntl.ioctl(fd, ABORT)
print(err(os.ftruncate, fd, 4096), os.fstat(fd).st_size)
"#;
    let (ok, out) = py(Some(ALICE), 30, own, &[s(&a)]);
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "EDEADLK EDEADLK\nok 4096", "{out}");

    // Alice holds an exclusive lock on bytes of her file until cued.
    let hold = r#"
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.ioctl(fd, BEGIN)
os.pwrite(fd, b"A" * 100, 0)
print("holding", flush=True)
sys.stdin.readline()
fcntl.ioctl(fd, COMMIT)
print("committed", flush=True)
"#;
    let mut alice = Peer::start(Some(ALICE), 60, true, hold, &[s(&a)]);
    assert_eq!(alice.line(), "holding");
    // Root writes the same bytes outside any transaction: it waits for hers.
    let write = r#"
fd = os.open(sys.argv[1], os.O_RDWR)
print(os.pwrite(fd, b"R" * 10, 0), flush=True)
"#;
    let mut root = Peer::start(None, 60, true, write, &[s(&a)]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(root.running(), "the write did not wait for the transaction's lock");
    // Meanwhile Bob's requests, on the same CPU, are all served.
    let busy = r#"
d = sys.argv[1]
for i in range(200):
    open(d + "/f%d" % i, "w").close()
    os.stat(d + "/f%d" % i)
    os.listdir(d)
print("served")
"#;
    let (ok, out) = py(Some(BOB), 30, busy, &[s(&m.path("bob"))]);
    assert!(ok && out.trim() == "served", "{out}");
    assert!(root.running(), "the write went around the transaction's lock");
    assert_eq!(m.stats().transactions.waiting_requests, 1);
    alice.cue("go");
    assert_eq!(alice.line(), "committed");
    let (ok, out) = root.finish();
    assert!(ok && out.trim() == "10", "{out}");
    let got = std::fs::read(&a).unwrap();
    assert_eq!(&got[..10], b"RRRRRRRRRR");
    assert_eq!(&got[10..100], &[b'A'; 90][..]);
    // The mount unmounts (no request is stuck in it).
    m.unmount();
    pool.fsck_clean();
}

/// Every wait is bounded: a write held off by a transaction that does not
/// end fails with EAGAIN after the mount's `txn_lock_wait`.
#[test]
fn a_wait_for_a_transaction_ends_with_eagain() {
    require_users!();
    let pool = Pool::new(2, "128M");
    let m = pool.mount(&["allow_other", "txn_lock_wait=1"]);
    let a = protected_file(&m, "a", ALICE, 0o666, &[7u8; 4096]);
    let hold = r#"
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.ioctl(fd, BEGIN)
os.pwrite(fd, b"A" * 100, 0)
print("holding", flush=True)
sys.stdin.readline()
fcntl.ioctl(fd, ABORT)
"#;
    let mut alice = Peer::start(Some(ALICE), 60, false, hold, &[s(&a)]);
    assert_eq!(alice.line(), "holding");
    let write = r#"
fd = os.open(sys.argv[1], os.O_RDWR)
print(err(os.pwrite, fd, b"B", 50), err(os.ftruncate, fd, 10))
"#;
    let (ok, out) = py(Some(BOB), 30, write, &[s(&a)]);
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "EAGAIN EAGAIN", "{out}");
    alice.cue("go");
    let _ = alice.finish();
    assert_eq!(std::fs::read(&a).unwrap(), vec![7u8; 4096], "nothing of either changed the file");
    m.unmount();
}

/// Hole 2: a reader's transaction holds off no writer. One without write
/// permission takes no lock at all; one with it loses its locks the moment
/// its process ends, found by the reaper with no other request. The
/// settings that make a file transactional, or choose how it is opened,
/// are its owner's.
#[test]
fn readers_cannot_hold_off_the_owners_writes() {
    require_users!();
    let pool = Pool::new(2, "128M");
    let m = pool.mount(&["allow_other"]);
    let a = protected_file(&m, "a", ALICE, 0o644, &[1u8; 4096]);
    let read = r#"
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.ioctl(fd, BEGIN)
assert os.pread(fd, 4096, 0) == b"\x01" * 4096
print("read", flush=True)
sys.stdin.readline()
"#;
    let write = r#"
fd = os.open(sys.argv[1], os.O_RDWR)
print(os.pwrite(fd, sys.argv[2].encode(), 0))
"#;
    // Bob may only read: his transaction takes no lock.
    let mut bob = Peer::start(Some(BOB), 60, false, read, &[s(&a)]);
    assert_eq!(bob.line(), "read");
    let (ok, out) = py(Some(ALICE), 20, write, &[s(&a), "first"]);
    assert!(ok && out.trim() == "5", "{out}");
    bob.cue("go");
    let _ = bob.finish();

    // With write permission he locks what he reads, until his process ends.
    chmod(&a, 0o666);
    let read_rw = r#"
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.ioctl(fd, BEGIN)
os.pread(fd, 4096, 0)
print(os.getpid(), flush=True)
sys.stdin.readline()
"#;
    let mut bob = Peer::start(Some(BOB), 60, false, read_rw, &[s(&a)]);
    let pid: i32 = bob.line().parse().unwrap();
    let t0 = Instant::now();
    // SAFETY: signalling the program this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let _ = bob.finish();
    let (ok, out) = py(Some(ALICE), 20, write, &[s(&a), "second"]);
    assert!(ok && out.trim() == "6", "{out} (after {:?})", t0.elapsed());
    assert_eq!(&std::fs::read(&a).unwrap()[..6], b"second");
    // (Its locks went first; the count follows.)
    no_transactions_left(&m, "a killed reader's");

    // Only the owner (or root) sets or removes these, whoever may write.
    let set = r#"
p = sys.argv[1]
print(err(os.setxattr, p, "user.hurricane.txn", b"0"), err(os.setxattr, p, "user.hurricane.open", b"cache=none"),
      err(os.removexattr, p, "user.hurricane.txn"))
"#;
    let (ok, out) = py(Some(BOB), 20, set, &[s(&a)]);
    assert!(ok && out.trim() == "EPERM EPERM EPERM", "{out}");
    let (ok, out) = py(Some(ALICE), 20, set, &[s(&a)]);
    assert!(ok && out.trim() == "ok ok ok", "{out}");
    m.unmount();
    pool.fsck_clean();
}

/// Hole 3: a transaction is its thread's (id and start time) and its
/// user's. A process of another user that gets the thread id of a dead
/// one (made to, through `ns_last_pid`) finds no transaction to commit,
/// and its own writes are its own; the dead thread's writes never land.
/// Hundreds of transactions left open by a program that exits are aborted
/// without any other request.
#[test]
fn a_dead_threads_transaction_is_nobody_elses() {
    require_users!();
    let pool = Pool::new(2, "128M");
    let m = pool.mount(&["allow_other"]);
    let a = protected_file(&m, "a", ALICE, 0o644, &[0u8; 4096]);
    let b = protected_file(&m, "b", BOB, 0o644, &[0u8; 4096]);
    let leave = r#"
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.ioctl(fd, BEGIN)
os.pwrite(fd, b"ALICE", 0)
print(os.getpid(), flush=True)
os._exit(0)
"#;
    let take = r#"
print(os.getpid())
fd = os.open(sys.argv[1], os.O_RDWR)
print(err(fcntl.ioctl, fd, COMMIT))
os.pwrite(fd, b"BOB", 0)
"#;
    let mut reused = 0;
    for _ in 0..5 {
        let (ok, out) = py(Some(ALICE), 20, leave, &[s(&a)]);
        assert!(ok, "{out}");
        let tid: u32 = out.trim().parse().unwrap();
        // The next process gets the dead thread's id (unless another
        // process of the machine is faster).
        let _ = std::fs::write("/proc/sys/kernel/ns_last_pid", (tid - 1).to_string());
        let o = Command::new("setpriv")
            .args([&format!("--reuid={BOB}"), &format!("--regid={BOB}"), "--clear-groups", python_bin(), "-c"])
            .arg(format!("{PRELUDE}\n{take}"))
            .arg(s(&b))
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
        let mut l = out.lines();
        if l.next().and_then(|p| p.parse::<u32>().ok()) == Some(tid) {
            reused += 1;
        }
        assert_eq!(l.next(), Some("EINVAL"), "{out}");
        assert_eq!(&std::fs::read(&b).unwrap()[..3], b"BOB", "Bob's write is his own");
        assert_eq!(std::fs::read(&a).unwrap(), vec![0u8; 4096], "a dead transaction's write landed");
    }
    eprintln!("thread id reused in {reused} of 5 tries");

    // Three hundred transactions left by threads of a program that exits.
    let many = r#"
fd = os.open(sys.argv[1], os.O_RDWR)
def one(i):
    if err(fcntl.ioctl, fd, BEGIN) == "ok":
        os.pwrite(fd, b"x", i)
ts = [threading.Thread(target=one, args=(i,)) for i in range(300)]
for t in ts: t.start()
for t in ts: t.join()
print("left")
"#;
    let (ok, out) = py(Some(ALICE), 60, many, &[s(&a)]);
    assert!(ok && out.trim() == "left", "{out}");
    no_transactions_left(&m, "300 orphans'");
    assert_eq!(std::fs::read(&a).unwrap(), vec![0u8; 4096]);
    m.unmount();
    pool.fsck_clean();
}

/// Hole 4: what transactions buffer, and how many are open, is bounded per
/// user and for the mount (ENOMEM past either), shown in `hurricane stats`.
#[test]
fn transaction_memory_is_bounded_per_user_and_per_mount() {
    require_users!();
    let pool = Pool::new(2, "256M");
    let m = pool.mount(&["allow_other", "txn_bytes_per_user=4M,txn_bytes_total=6M,txn_open_per_user=3"]);
    let a = protected_file(&m, "a", ALICE, 0o666, b"");
    let t = m.stats().transactions;
    assert_eq!((t.max_bytes_per_user, t.max_bytes, t.max_open_per_user), (4 << 20, 6 << 20, 3));
    let (_, text, _) = run(&["stats", s(&m.mnt)]);
    assert!(text.contains("transactions:"), "{text}");
    // Alice: 3.5 MiB fit, 1 MiB more does not; a fourth transaction does not.
    let alice = r#"
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.ioctl(fd, BEGIN)
print(err(os.pwrite, fd, b"a" * (7 << 19), 0), err(os.pwrite, fd, b"a" * (1 << 20), 7 << 19), flush=True)
res = []
def other(go):
    f = os.open(sys.argv[1], os.O_RDWR)
    res.append(err(fcntl.ioctl, f, BEGIN))
    go.wait()
go = threading.Event()
ts = [threading.Thread(target=other, args=(go,)) for i in range(3)]
for t in ts: t.start()
while len(res) < 3: time.sleep(0.01)
print(" ".join(sorted(res)), flush=True)
sys.stdin.readline()
go.set()
for t in ts: t.join()
fcntl.ioctl(fd, ABORT)
"#;
    let mut al = Peer::start(Some(ALICE), 60, false, alice, &[s(&a)]);
    assert_eq!(al.line(), "ok ENOMEM");
    assert_eq!(al.line(), "ENOMEM ok ok");
    assert_eq!(m.stats().transactions.buffered_bytes, 7 << 19);
    // Bob has his own bound, but the mount's total is shared.
    let bob = r#"
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.ioctl(fd, BEGIN)
print(err(os.pwrite, fd, b"b" * (2 << 20), 8 << 20), err(os.pwrite, fd, b"b" * (1 << 20), 16 << 20))
fcntl.ioctl(fd, ABORT)
"#;
    let (ok, out) = py(Some(BOB), 30, bob, &[s(&a)]);
    assert!(ok && out.trim() == "ok ENOMEM", "{out}");
    al.cue("go");
    let _ = al.finish();
    no_transactions_left(&m, "the aborted ones'");
    assert_eq!(std::fs::metadata(&a).unwrap().len(), 0);
    m.unmount();
}

/// Hole 5: the pool's status is a walk of every file. Any user may read
/// it, as often as they like: they share one walk, kept for a while, and
/// see counts without paths; root gets a fresh walk with the paths.
#[test]
fn status_walks_are_shared_and_not_per_request() {
    require_users!();
    let pool = Pool::new(2, "128M");
    let m = pool.mount(&["allow_other"]);
    for i in 0..300 {
        std::fs::write(m.path(&format!("f{i}")), b"x").unwrap();
    }
    let before = m.stats().status_walks;
    let loop_status = r#"
import json
n = 0
for i in range(int(sys.argv[2])):
    r = json.loads(os.getxattr(sys.argv[1], "user.hurricane.status"))
    assert r["health"]["lost_paths"] == [] and r["health"]["degraded_paths"] == []
    n += r["health"]["healthy"]
print(n)
"#;
    let (ok, out) = py(Some(BOB), 60, loop_status, &[s(&m.mnt), "40"]);
    assert!(ok, "{out}");
    assert!(out.trim().parse::<u64>().unwrap() >= 300 * 40, "{out}");
    let walks = m.stats().status_walks - before;
    // Forty reads (and their size probes) by one user: a walk at most
    // every two seconds, not one per read.
    assert!(walks <= 10, "{walks} walks for 40 reads");
    // Root's reads each walk.
    let before = m.stats().status_walks;
    let (ok, out) = py(None, 60, loop_status, &[s(&m.mnt), "3"]);
    assert!(ok, "{out}");
    assert!(m.stats().status_walks - before >= 3);
    m.unmount();
}

/// Hole 9: a writer drops a file's capabilities (`security.capability`),
/// whether it writes, copies into it or allocates it, as on ext4; the file
/// keeps its data and the writer gets no EPERM.
#[test]
fn a_writer_drops_capabilities_instead_of_failing() {
    require_users!();
    let pool = Pool::new(2, "128M");
    let m = pool.mount(&["allow_other"]);
    let f = m.path("prog");
    std::fs::write(&f, b"0123456789").unwrap();
    chmod(&f, 0o666);
    let src = m.path("src");
    std::fs::write(&src, b"copied").unwrap();
    chmod(&src, 0o644);
    // A version 2 capability set: CAP_NET_RAW permitted and effective.
    let mut cap = Vec::new();
    for w in [0x0200_0001u32, 1 << 13, 0, 0, 0] {
        cap.extend_from_slice(&w.to_le_bytes());
    }
    let script = r#"
p, src, how = sys.argv[1], sys.argv[2], sys.argv[3]
fd = os.open(p, os.O_RDWR)
if how == "write":
    r = err(os.pwrite, fd, b"W", 0)
elif how == "copy":
    s = os.open(src, os.O_RDONLY)
    r = err(os.copy_file_range, s, fd, 6, 0, 2)
else:
    r = err(os.posix_fallocate, fd, 0, 20000)
print(r, err(os.getxattr, p, "security.capability"))
"#;
    for how in ["write", "copy", "fallocate"] {
        rustix::fs::setxattr(&f, "security.capability", &cap, rustix::fs::XattrFlags::empty()).unwrap();
        let (ok, out) = py(Some(BOB), 30, script, &[s(&f), s(&src), how]);
        assert!(ok, "{how}: {out}");
        assert_eq!(out.trim(), "ok ENODATA", "{how}: {out}");
    }
    let got = std::fs::read(&f).unwrap();
    assert_eq!(&got[..10], b"W1copied89");
    assert_eq!(got.len(), 20000);
    // Nobody else may remove it: only a writer, as the kernel asks.
    rustix::fs::setxattr(&f, "security.capability", &cap, rustix::fs::XattrFlags::empty()).unwrap();
    chmod(&f, 0o644);
    let (ok, out) = py(Some(BOB), 30, "print(err(os.removexattr, sys.argv[1], 'security.capability'))", &[s(&f)]);
    assert!(ok && out.trim() == "EPERM", "{out}");
    m.unmount();
}

/// Hole 8: a value a user chose (a layout with line breaks and an escape
/// sequence) reaches the mount's log as one escaped line: no user can forge
/// a line of root's log, or send control sequences to the terminal of
/// whoever reads it.
#[test]
fn a_users_strings_cannot_forge_log_lines() {
    require_users!();
    let pool = Pool::new(2, "128M");
    let m = pool.mount(&["allow_other"]);
    std::fs::create_dir(m.path("bob")).unwrap();
    chown(&m.path("bob"), BOB);
    let forge = r#"
p = sys.argv[1] + "/f"
open(p, "w").close()
v = b"stripe(width=99)\n2026-01-01T00:00:00.000000Z  INFO root: FORGED line\x1b[2K\r"
print(err(os.setxattr, p, "user.hurricane.layout", v))
"#;
    let (ok, out) = py(Some(BOB), 30, forge, &[s(&m.path("bob"))]);
    assert!(ok && out.trim() != "ok", "{out}");
    m.unmount();
    let log = pool.log();
    assert!(log.contains("FORGED line"), "the refusal is logged: {log}");
    for line in log.lines() {
        assert!(!line.trim_start().starts_with("2026-01-01T00:00:00.000000Z"), "a forged line: {line:?}");
        assert!(!line.contains('\x1b') && !line.contains('\r'), "a control character: {line:?}");
    }
    assert!(log.contains("\\n2026-01-01T00:00:00.000000Z  INFO root: FORGED line"), "{log}");
}
