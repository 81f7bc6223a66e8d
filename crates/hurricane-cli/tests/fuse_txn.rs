//! Transactions through a real mount, for programs that cannot link the
//! library: a Python program begins one with an ioctl, writes two
//! protected files (an extent and a log file), reads its own writes while
//! another process still sees the old contents, commits, and aborts a
//! second; writes to an unprotected file inside a transaction are refused.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;

const SCRIPT: &str = r#"
import errno, fcntl, os, sys
mnt = sys.argv[1]
BEGIN, COMMIT, ABORT = 0x6801, 0x6802, 0x6803
a = os.open(mnt + "/a", os.O_RDWR)
b = os.open(mnt + "/b", os.O_RDWR)
try:
    fcntl.ioctl(a, COMMIT)
    sys.exit("commit with no transaction open succeeded")
except OSError as e:
    assert e.errno == errno.EINVAL, e
fcntl.ioctl(a, BEGIN)
os.pwrite(a, b"A" * 5000, 0)
os.pwrite(b, b"B" * 3000, 100)
assert os.pread(a, 5000, 0) == b"A" * 5000, "a transaction reads its own writes"
pid = os.fork()
if pid == 0:
    c = os.open(mnt + "/a", os.O_RDONLY)
    os._exit(0 if os.pread(c, 5000, 0) == b"" else 1)
_, st = os.waitpid(pid, 0)
assert st == 0, "another process saw uncommitted data"
fcntl.ioctl(b, COMMIT)
# A second transaction, aborted: nothing of it stays.
fcntl.ioctl(a, BEGIN)
os.pwrite(b, b"X" * 10, 0)
os.pwrite(a, b"Y" * 9000, 4000)
fcntl.ioctl(a, ABORT)
assert os.pread(b, 10, 0) == b"\0" * 10
assert os.fstat(a).st_size == 5000
# Appends inside a transaction follow one another.
h = os.open(mnt + "/b", os.O_RDWR | os.O_APPEND)
fcntl.ioctl(h, BEGIN)
os.write(h, b"1" * 10)
os.write(h, b"2" * 10)
fcntl.ioctl(h, COMMIT)
assert os.pread(b, 20, 3100) == b"1" * 10 + b"2" * 10, os.pread(b, 20, 3100)
# An unprotected file takes no part.
u = os.open(mnt + "/u", os.O_RDWR | os.O_CREAT)
fcntl.ioctl(u, BEGIN)
try:
    os.pwrite(u, b"U", 0)
    sys.exit("a write to an unprotected file inside a transaction succeeded")
except OSError as e:
    assert e.errno == errno.EINVAL, e
fcntl.ioctl(u, ABORT)
print("ok")
"#;

fn setxattr(p: &std::path::Path, name: &str, v: &[u8]) {
    let (c, n) = (cpath(p), std::ffi::CString::new(name).unwrap());
    // SAFETY: valid NUL-terminated strings and a buffer of v.len() bytes.
    check(unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) }).unwrap();
}

#[test]
fn a_program_commits_and_aborts_transactions_through_ioctls() {
    require_fuse!();
    let pool = Pool::new(2, "128M");
    let m = pool.mount(&[]);
    for (name, layout) in [("a", "extent@0"), ("b", "log@1")] {
        let p = m.path(name);
        std::fs::write(&p, b"").unwrap();
        setxattr(&p, "user.hurricane.layout", layout.as_bytes());
        setxattr(&p, "user.hurricane.txn", b"1");
    }
    let (ok, out) = python(SCRIPT, &[s(&m.mnt)], None);
    assert!(ok && out.trim_end().ends_with("ok"), "{out}");
    let mut want_b = vec![0u8; 100];
    want_b.extend_from_slice(&[b'B'; 3000]);
    want_b.extend_from_slice(&[b'1'; 10]);
    want_b.extend_from_slice(&[b'2'; 10]);
    assert_eq!(std::fs::read(m.path("a")).unwrap(), vec![b'A'; 5000]);
    assert_eq!(std::fs::read(m.path("b")).unwrap(), want_b);
    m.unmount();
    assert_eq!(pool.get("/a"), vec![b'A'; 5000]);
    assert_eq!(pool.get("/b"), want_b);
    pool.fsck_clean();
}
