//! The mount as other Linux file systems behave, where the kernel's caches
//! meet the engine's own changes: set-id bits an unprivileged change clears
//! show (and stop counting at execve) at once, a writer drops capabilities
//! even where the file's mode no longer lets it write, an open directory
//! outlives its name, buffered reads see direct asynchronous writes, access
//! times follow relatime, noatime and strictatime, and device nodes and
//! set-user-id programs work on a mount with `-o dev,suid`. Compared with
//! ext4 where behaviour was in doubt. Needs root (to act as another user)
//! and FUSE.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const NOBODY: u32 = 65534;

/// Skips (or fails in CI) where the test cannot act as another user.
macro_rules! require_root {
    () => {
        require_fuse!();
        if !is_root() || !have("setpriv") {
            eprintln!("skipped: needs root and setpriv");
            return;
        }
    };
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
}

/// The mode as `statx` with only STATX_MODE gives it (what `ls -l` and
/// `stat -c %A` ask for): the kernel answers from its cache while it holds
/// the mode for valid.
fn cached_mode(p: &Path) -> u32 {
    let c = cpath(p);
    // SAFETY: a plain C struct, all zeros valid.
    let mut x: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx fills the struct it is given; the path is a C string.
    check(unsafe { libc::statx(libc::AT_FDCWD, c.as_ptr(), 0, libc::STATX_MODE, &mut x) }).unwrap();
    u32::from(x.stx_mode)
}

/// The changes an unprivileged writer makes, by name, in Python.
const CHANGE: &str = r#"
import ctypes, mmap, os, sys
libc = ctypes.CDLL(None, use_errno=True)
p, how = sys.argv[1], sys.argv[2]
def fallocate(fd, mode, off, n):
    if libc.fallocate(fd, mode, ctypes.c_long(off), ctypes.c_long(n)) != 0:
        raise OSError(ctypes.get_errno(), "fallocate")
if how == "write":
    fd = os.open(p, os.O_RDWR); os.pwrite(fd, b"x", 0)
elif how == "write-only":
    fd = os.open(p, os.O_WRONLY); os.pwrite(fd, b"x", 0)
elif how == "direct":
    fd = os.open(p, os.O_RDWR | os.O_DIRECT)
    buf = mmap.mmap(-1, 4096); buf.write(b"d" * 4096); os.pwrite(fd, buf, 0)
elif how == "trunc-open":
    fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
elif how == "ftruncate":
    fd = os.open(p, os.O_RDWR); os.ftruncate(fd, 100)
elif how == "fallocate":
    fd = os.open(p, os.O_RDWR); fallocate(fd, 0, 0, 100000)
elif how == "punch":
    fd = os.open(p, os.O_RDWR); fallocate(fd, 3, 0, 4096)
elif how == "zero":
    fd = os.open(p, os.O_RDWR); fallocate(fd, 0x10, 0, 4096)
os.close(fd)
print("done")
"#;

const CHANGES: [&str; 8] = ["write", "write-only", "direct", "trunc-open", "ftruncate", "fallocate", "punch", "zero"];

/// Issue 56, item 1: after an unprivileged write (buffered, write-only or
/// direct), O_TRUNC open, truncate, fallocate, punch or zero-range, the
/// set-id bits the engine cleared are gone from what the kernel shows at
/// once, not after the attribute timeout (60 s), with or without the
/// kernel's writeback cache.
#[test]
fn cleared_set_id_bits_show_at_once() {
    require_root!();
    let pool = Pool::new(2, "128M");
    for opts in [&["allow_other"][..], &["allow_other", "writeback_cache"]] {
        let m = pool.mount(opts);
        for how in CHANGES {
            let f = m.path(&format!("setid-{how}"));
            std::fs::write(&f, data(8192, 7)).unwrap();
            chown(&f, NOBODY);
            chmod(&f, 0o6754);
            assert_eq!(cached_mode(&f) & 0o7777, 0o6754);
            let (ok, out) = python(CHANGE, &[s(&f), how], Some((NOBODY, NOBODY, &[])));
            assert!(ok && out.contains("done"), "{how}: {out}");
            // Set-user-id always goes; set-group-id of a group-executable file too.
            assert_eq!(cached_mode(&f) & 0o7777, 0o754, "{opts:?}, {how}: the kernel still shows the old mode");
            assert_eq!(std::fs::metadata(&f).unwrap().permissions().mode() & 0o7777, 0o754);
        }
        m.unmount();
    }
}

/// Items 1 and 13: on a mount with `-o suid`, a set-user-id program runs
/// with its owner's euid; once another user rewrote it, the bit is gone and
/// the rewritten program runs as that user, at once (the kernel reads the
/// mode it caches at execve: a stale bit would have run the user's code as
/// root).
#[test]
fn a_rewritten_set_uid_program_runs_as_its_caller() {
    require_root!();
    let pool = Pool::new(2, "128M");
    let m = pool.mount(&["allow_other", "suid"]);
    let prog = m.path("id");
    std::fs::copy("/usr/bin/id", &prog).unwrap();
    chmod(&prog, 0o4777);
    let euid = || {
        let o = Command::new("setpriv")
            .args([&format!("--reuid={NOBODY}"), &format!("--regid={NOBODY}"), "--clear-groups"])
            .arg(&prog)
            .arg("-u")
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    assert_eq!(euid(), "0", "-o suid: the program runs as its owner");
    // (The write puts back the byte that is there: the same program.)
    let (ok, out) = python(
        "import os, sys\nfd = os.open(sys.argv[1], os.O_WRONLY)\nos.pwrite(fd, open('/usr/bin/id', 'rb').read(1), 0)",
        &[s(&prog)],
        Some((NOBODY, NOBODY, &[])),
    );
    assert!(ok, "{out}");
    assert_eq!(euid(), NOBODY.to_string(), "the rewritten program kept its set-user-id bit");
    m.unmount();
}

/// Issue 56, item 2: a writer whose descriptor was opened while the mode
/// allowed writing keeps writing after a chmod took that away, and its
/// write, truncate or fallocate drops the file's capabilities
/// (`security.capability`), as on ext4, instead of failing with EPERM.
#[test]
fn a_writer_drops_capabilities_its_mode_no_longer_allows() {
    require_root!();
    let pool = Pool::new(2, "128M");
    let m = pool.mount(&["allow_other"]);
    // A version 2 capability set: CAP_NET_RAW permitted and effective.
    let mut cap = Vec::new();
    for w in [0x0200_0001u32, 1 << 13, 0, 0, 0] {
        cap.extend_from_slice(&w.to_le_bytes());
    }
    let script = r#"
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
p, how = sys.argv[1], sys.argv[2]
fd = os.open(p, os.O_WRONLY if how == "write-only" else os.O_RDWR)
print("open", flush=True)
sys.stdin.readline()
def run():
    if how in ("write", "write-only"):
        os.pwrite(fd, b"W", 0)
    elif how == "ftruncate":
        os.ftruncate(fd, 10)
    else:
        mode = {"fallocate": 0, "keep-size": 1, "punch": 3}[how]
        if libc.fallocate(fd, mode, ctypes.c_long(0), ctypes.c_long(16384)) != 0:
            raise OSError(ctypes.get_errno(), "fallocate")
try:
    run(); r = "ok"
except OSError as e:
    r = errno.errorcode[e.errno]
print(r, flush=True)
"#;
    for how in ["write", "write-only", "ftruncate", "fallocate", "keep-size", "punch"] {
        let f = m.path(&format!("cap-{how}"));
        std::fs::write(&f, data(8192, 3)).unwrap();
        chmod(&f, 0o666);
        rustix::fs::setxattr(&f, "security.capability", &cap, rustix::fs::XattrFlags::empty()).unwrap();
        let mut child = Command::new("setpriv")
            .args([&format!("--reuid={NOBODY}"), &format!("--regid={NOBODY}"), "--clear-groups"])
            .arg(python_bin())
            .args(["-c", script, s(&f), how])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "open", "{how}");
        chmod(&f, 0o444);
        writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
        line.clear();
        out.read_line(&mut line).unwrap();
        assert!(child.wait().unwrap().success());
        assert_eq!(line.trim(), "ok", "{how}: the change failed");
        let left = rustix::fs::getxattr(&f, "security.capability", &mut [0u8; 64]);
        assert_eq!(left.err(), Some(rustix::io::Errno::NODATA), "{how}: the capabilities stayed");
    }
    m.unmount();
    pool.fsck_clean();
}

/// Issue 56, item 3: a directory removed, or renamed over, while open can
/// still be looked at through its descriptor: fstat says it is a directory
/// with no links, its listing is empty, fchmod works, nothing can be made
/// in it; its inode goes at the last close (fsck finds no orphan).
#[test]
fn an_open_directory_outlives_its_name() {
    require_fuse!();
    let pool = Pool::new(2, "128M");
    let m = pool.mount(&[]);
    let script = r#"
import os, sys
d = sys.argv[1]
for how in ["rmdir", "rename"]:
    p, q = os.path.join(d, "open-" + how), os.path.join(d, "other-" + how)
    os.mkdir(p); os.mkdir(q)
    fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY)
    if how == "rmdir":
        os.rmdir(p)
    else:
        os.rename(q, p)
    st = os.fstat(fd)
    print(how, "nlink", st.st_nlink, "dir", (st.st_mode & 0o170000) == 0o040000)
    print(how, "list", os.listdir(fd))
    os.fchmod(fd, 0o700)
    print(how, "mode %o" % (os.fstat(fd).st_mode & 0o777))
    try:
        os.close(os.open("x", os.O_CREAT | os.O_WRONLY, dir_fd=fd)); print(how, "made a file")
    except OSError as e:
        print(how, "create", e.errno)
    os.close(fd)
"#;
    let (ok, out) = python(script, &[s(&m.mnt)], None);
    assert!(ok, "{out}");
    for how in ["rmdir", "rename"] {
        for want in ["nlink 0 dir True", "list []", "mode 700", &format!("create {}", libc::ENOENT)] {
            assert!(out.contains(&format!("{how} {want}")), "{how}: {want:?} expected in\n{out}");
        }
    }
    assert!(std::fs::metadata(m.path("open-rename")).unwrap().is_dir());
    m.unmount();
    pool.fsck_clean();
}

/// A buffer aligned for O_DIRECT.
struct Aligned {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        Aligned { ptr, layout }
    }

    fn fill(&mut self, b: u8) {
        // SAFETY: the allocation is `layout.size()` bytes.
        unsafe { std::ptr::write_bytes(self.ptr, b, self.layout.size()) };
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// Issue 56, item 6: while readers read a range through the page cache
/// over and over, asynchronous direct writes (io_uring, O_DIRECT) replace
/// it; once a write completes, a buffered read of the range returns what
/// it wrote, never data a reader cached while the write was on its way.
/// Through a write-only and a read-write descriptor.
#[test]
fn buffered_reads_see_asynchronous_direct_writes() {
    require_fuse!();
    const LEN: usize = 64 << 10;
    const ROUNDS: u8 = 200;
    let pool = Pool::new(2, "128M");
    let m = pool.mount(&[]);
    for (name, rw) in [("write-only", false), ("read-write", true)] {
        let f = m.path(&format!("dio-{name}"));
        std::fs::write(&f, vec![0u8; 4 * LEN]).unwrap();
        let writer = std::fs::OpenOptions::new().read(rw).write(true).custom_flags(libc::O_DIRECT).open(&f).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let racers: Vec<_> = (0..2)
            .map(|_| {
                let (f, stop) = (f.clone(), stop.clone());
                std::thread::spawn(move || {
                    let r = std::fs::File::open(&f).unwrap();
                    let mut buf = vec![0u8; LEN];
                    while !stop.load(Ordering::Relaxed) {
                        r.read_exact_at(&mut buf, 0).unwrap();
                    }
                })
            })
            .collect();
        let reader = std::fs::File::open(&f).unwrap();
        let mut ring = io_uring::IoUring::new(4).unwrap();
        let mut buf = Aligned::new(LEN);
        let mut got = vec![0u8; LEN];
        let mut stale = Vec::new();
        for v in 1..=ROUNDS {
            buf.fill(v);
            let e = io_uring::opcode::Write::new(
                io_uring::types::Fd(std::os::fd::AsRawFd::as_raw_fd(&writer)),
                buf.ptr,
                LEN as u32,
            )
            .offset(0)
            .build();
            // SAFETY: the buffer outlives the operation (waited for below).
            unsafe { ring.submission().push(&e).unwrap() };
            ring.submit_and_wait(1).unwrap();
            let c = ring.completion().next().unwrap();
            assert_eq!(c.result(), LEN as i32, "{name}: direct write {v}");
            reader.read_exact_at(&mut got, 0).unwrap();
            if let Some(i) = got.iter().position(|&b| b != v) {
                stale.push((v, i, got[i]));
            }
        }
        stop.store(true, Ordering::Relaxed);
        for r in racers {
            r.join().unwrap();
        }
        assert!(
            stale.is_empty(),
            "{name}: {} of {ROUNDS} reads after a completed write were stale: {:?}",
            stale.len(),
            &stale[..stale.len().min(5)]
        );
    }
    m.unmount();
}

/// Access time and modification time of `p`, in nanoseconds.
fn times(p: &Path) -> (i128, i128) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).unwrap();
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    (ns(m.atime(), m.atime_nsec()), ns(m.mtime(), m.mtime_nsec()))
}

/// Reads `p` from the engine: its cached pages are dropped first (pages
/// the kernel serves itself do not reach the mount).
fn read_through(p: &Path, flags: i32) {
    let mut f = std::fs::OpenOptions::new().read(true).custom_flags(flags).open(p).unwrap();
    // SAFETY: a valid descriptor.
    unsafe { libc::posix_fadvise(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, libc::POSIX_FADV_DONTNEED) };
    let mut v = Vec::new();
    f.read_to_end(&mut v).unwrap();
}

fn mount_line(mnt: &Path) -> String {
    let text = std::fs::read_to_string("/proc/self/mounts").unwrap();
    text.lines().find(|l| l.split(' ').nth(1) == Some(s(mnt))).unwrap_or_default().to_string()
}

/// Issue 56, item 12: reads update access times by relatime unless told
/// otherwise (the first read after a write moves it, the next ones leave
/// it), strictatime on every read, noatime never, O_NOATIME never;
/// listings update a directory's unless `nodiratime`.
#[test]
fn access_times_follow_the_mount_options() {
    require_fuse!();
    let pool = Pool::new(2, "128M");
    let pause = || std::thread::sleep(Duration::from_millis(20));
    let m = pool.mount(&[]);
    let f = m.path("f");
    std::fs::write(&f, b"contents").unwrap();
    let (a0, m0) = times(&f);
    pause();
    read_through(&f, 0);
    let (a1, m1) = times(&f);
    assert!(a1 > a0 && a1 > m1 && m1 == m0, "relatime: read after a write: {a0} {a1} {m1}");
    pause();
    read_through(&f, 0);
    assert_eq!(times(&f).0, a1, "relatime: read again since the last write");
    // A write, then a read with O_NOATIME: kept; a plain read: moved.
    std::fs::OpenOptions::new().write(true).open(&f).unwrap().write_all(b"C").unwrap();
    pause();
    read_through(&f, libc::O_NOATIME);
    assert_eq!(times(&f).0, a1, "O_NOATIME");
    read_through(&f, 0);
    assert!(times(&f).0 > a1);
    // A listing of a directory changed since it was last listed.
    let d = m.path("d");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("x"), b"").unwrap();
    let (da, _) = times(&d);
    pause();
    std::fs::read_dir(&d).unwrap().for_each(drop);
    let (da1, dm1) = times(&d);
    assert!(da1 > da && da1 > dm1, "a listing after a change");
    m.unmount();

    let m = pool.mount(&["noatime"]);
    assert!(mount_line(&m.mnt).contains("noatime"), "{}", mount_line(&m.mnt));
    let f = m.path("g");
    std::fs::write(&f, b"contents").unwrap();
    std::fs::write(d.join("y"), b"").unwrap();
    let (a0, _) = times(&f);
    let (da0, _) = times(&m.path("d"));
    pause();
    read_through(&f, 0);
    std::fs::read_dir(m.path("d")).unwrap().for_each(drop);
    assert_eq!(times(&f).0, a0, "noatime");
    assert_eq!(times(&m.path("d")).0, da0, "noatime, a directory");
    m.unmount();

    let m = pool.mount(&["strictatime,nodiratime"]);
    let f = m.path("g");
    read_through(&f, 0);
    let (a1, _) = times(&f);
    pause();
    read_through(&f, 0);
    assert!(times(&f).0 > a1, "strictatime: every read");
    std::fs::write(m.path("d/z"), b"").unwrap();
    let (da0, _) = times(&m.path("d"));
    pause();
    std::fs::read_dir(m.path("d")).unwrap().for_each(drop);
    assert_eq!(times(&m.path("d")).0, da0, "nodiratime");
    m.unmount();
    // The times were journalled.
    let m = pool.mount(&[]);
    assert!(times(&m.path("g")).0 > a1);
    m.unmount();
    pool.fsck_clean();
}

/// Issue 56, item 13: a mount with `-o dev` serves device nodes (a copy of
/// /dev/null reads empty and takes writes); without it (FUSE's default,
/// nodev) they cannot be opened. Set-user-id programs: see
/// `a_rewritten_set_uid_program_runs_as_its_caller`; without `-o suid`
/// the bit is ignored.
#[test]
fn device_nodes_and_set_uid_programs_need_dev_and_suid() {
    require_root!();
    let pool = Pool::new(2, "128M");
    let m = pool.mount(&["allow_other", "dev", "suid"]);
    let line = mount_line(&m.mnt);
    assert!(!line.contains("nodev") && !line.contains("nosuid"), "{line}");
    let null = m.path("null");
    // SAFETY: a C string path.
    check(unsafe { libc::mknod(cpath(&null).as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) }).unwrap();
    let mut v = Vec::new();
    std::fs::File::open(&null).unwrap().read_to_end(&mut v).unwrap();
    assert!(v.is_empty());
    std::fs::OpenOptions::new().write(true).open(&null).unwrap().write_all(b"gone").unwrap();
    let prog = m.path("id");
    std::fs::copy("/usr/bin/id", &prog).unwrap();
    chmod(&prog, 0o4755);
    m.unmount();

    let m = pool.mount(&["allow_other"]);
    let line = mount_line(&m.mnt);
    assert!(line.contains("nodev") && line.contains("nosuid"), "{line}");
    let e = std::fs::File::open(m.path("null")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "nodev: {e}");
    let o = Command::new("setpriv")
        .args([&format!("--reuid={NOBODY}"), &format!("--regid={NOBODY}"), "--clear-groups"])
        .arg(m.path("id"))
        .arg("-u")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), NOBODY.to_string(), "nosuid");
    m.unmount();
}

/// Item 1, times: a transaction's commit sets the times of the files it
/// wrote; the kernel shows them at once, not the ones it fetched after
/// the transaction's writes.
#[test]
fn a_committed_transaction_shows_its_times_at_once() {
    require_fuse!();
    let pool = Pool::new(2, "128M");
    let m = pool.mount(&[]);
    let f = m.path("protected");
    std::fs::write(&f, b"").unwrap();
    for (k, v) in [("user.hurricane.layout", &b"extent@0"[..]), ("user.hurricane.txn", b"1")] {
        rustix::fs::setxattr(&f, k, v, rustix::fs::XattrFlags::empty()).unwrap();
    }
    let script = r#"
import fcntl, os, sys, time
p = sys.argv[1]
fd = os.open(p, os.O_RDWR)
fcntl.ioctl(fd, 0x6801)
os.pwrite(fd, b"in a transaction", 0)
before = os.stat(p).st_mtime_ns
time.sleep(0.05)
fcntl.ioctl(fd, 0x6802)
print(before, os.stat(p).st_mtime_ns)
"#;
    let (ok, out) = python(script, &[s(&f)], None);
    assert!(ok, "{out}");
    let t: Vec<i128> = out.split_whitespace().map(|w| w.parse().unwrap()).collect();
    assert!(t[1] > t[0], "the commit's modification time does not show: {out}");
    assert_eq!(std::fs::read(&f).unwrap(), b"in a transaction");
    m.unmount();
}
