//! O_TMPFILE through the mount: an unnamed file, in no directory listing,
//! freed at its last close (or at the next mount if the mount process
//! dies), that `linkat` may name once (AT_EMPTY_PATH or /proc/self/fd),
//! and never when it was opened with O_EXCL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::path::Path;

fn tmpfile(dir: &Path, flags: i32, mode: u32) -> io::Result<File> {
    let c = cpath(dir);
    // SAFETY: a NUL-terminated path.
    let fd = check(unsafe { libc::open(c.as_ptr(), libc::O_TMPFILE | libc::O_CLOEXEC | flags, mode) })?;
    // SAFETY: a descriptor just opened and owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// `linkat(fd, "", AT_FDCWD, to, AT_EMPTY_PATH)`.
fn link_fd(f: &File, to: &Path) -> io::Result<()> {
    let t = cpath(to);
    // SAFETY: an open descriptor, an empty and a NUL-terminated path.
    check(unsafe { libc::linkat(f.as_raw_fd(), c"".as_ptr(), libc::AT_FDCWD, t.as_ptr(), libc::AT_EMPTY_PATH) })
        .map(|_| ())
}

/// `linkat` of /proc/self/fd/N, following it (what unprivileged programs use).
fn link_proc(f: &File, to: &Path) -> io::Result<()> {
    let (p, t) = (cpath(Path::new(&format!("/proc/self/fd/{}", f.as_raw_fd()))), cpath(to));
    // SAFETY: two NUL-terminated paths.
    check(unsafe { libc::linkat(libc::AT_FDCWD, p.as_ptr(), libc::AT_FDCWD, t.as_ptr(), libc::AT_SYMLINK_FOLLOW) })
        .map(|_| ())
}

fn used_inodes(p: &Path) -> u64 {
    let v = rustix::fs::statvfs(p).unwrap();
    v.f_files - v.f_ffree
}

/// The count of used inodes once it settles at `want` (a close's RELEASE
/// reaches the mount after close(2) returns), or after 10 seconds.
fn used_inodes_become(p: &Path, want: u64) -> u64 {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let n = used_inodes(p);
        if n == want || std::time::Instant::now() > end {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn names(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(p).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

#[test]
fn tmpfile_is_unnamed_linkable_once_and_freed_at_close() {
    require_fuse!();
    let pool = Pool::new(1, "64M");
    let m = pool.mount(&[]);
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/other"), b"o").unwrap();
    let base = used_inodes(&m.path(""));

    // Named through AT_EMPTY_PATH.
    let f = tmpfile(&m.path("d"), libc::O_RDWR, 0o640).unwrap();
    let st = f.metadata().unwrap();
    assert_eq!((st.nlink(), st.mode()), (0, libc::S_IFREG | 0o640));
    f.write_all_at(&data(100_000, 7), 0).unwrap();
    assert_eq!(names(&m.path("d")), ["other"], "an unnamed file shows in its directory");
    assert_eq!(used_inodes(&m.path("")), base + 1);
    link_fd(&f, &m.path("d/named")).unwrap();
    assert_eq!(f.metadata().unwrap().nlink(), 1);
    assert_eq!(fs::metadata(m.path("d/named")).unwrap().ino(), st.ino());
    assert!(fs::read(m.path("d/named")).unwrap() == data(100_000, 7));
    assert_eq!(names(&m.path("d")), ["named", "other"]);
    // Linkable once: unlinked again, it stays unnamed.
    fs::remove_file(m.path("d/named")).unwrap();
    assert_eq!(errno(link_fd(&f, &m.path("d/again"))), libc::ENOENT);
    drop(f);
    assert_eq!(used_inodes_become(&m.path(""), base), base, "the unlinked file outlived its last close");

    // Named through /proc/self/fd; a second link is an ordinary one.
    let f = tmpfile(&m.path(""), libc::O_WRONLY, 0o600).unwrap();
    f.write_all_at(b"proc", 0).unwrap();
    link_proc(&f, &m.path("viaproc")).unwrap();
    link_fd(&f, &m.path("d/second")).unwrap();
    assert_eq!(fs::metadata(m.path("viaproc")).unwrap().nlink(), 2);
    drop(f);
    assert_eq!(fs::read(m.path("d/second")).unwrap(), b"proc");

    // O_EXCL: never linkable; freed at close.
    let f = tmpfile(&m.path("d"), libc::O_RDWR | libc::O_EXCL, 0o600).unwrap();
    f.write_all_at(b"x", 0).unwrap();
    assert_eq!(errno(link_fd(&f, &m.path("d/excl"))), libc::ENOENT);
    assert_eq!(errno(link_proc(&f, &m.path("d/excl"))), libc::ENOENT);
    drop(f);
    // Not a directory, and the usual errors.
    assert_eq!(errno(tmpfile(&m.path("d/other"), libc::O_RDWR, 0o600)), libc::ENOTDIR);
    assert_eq!(errno(tmpfile(&m.path("d"), libc::O_RDONLY, 0o600)), libc::EINVAL);
    assert_eq!(used_inodes_become(&m.path(""), base + 1), base + 1, "only viaproc/second was added");
    m.unmount();
    let m = pool.mount(&[]);
    assert_eq!(fs::read(m.path("viaproc")).unwrap(), b"proc");
    assert_eq!(names(&m.path("d")), ["other", "second"]);
    m.unmount();
    pool.fsck_clean();
}

/// An unnamed file held open when the mount process dies is freed by the
/// next mount, as unlinked open files are.
#[test]
fn an_unnamed_file_left_by_a_crash_is_freed_at_the_next_mount() {
    require_fuse!();
    let pool = Pool::new(1, "64M");
    let m = pool.mount(&[]);
    let base = used_inodes(&m.path(""));
    let f = tmpfile(&m.path(""), libc::O_RDWR, 0o600).unwrap();
    f.write_all_at(&data(1 << 20, 3), 0).unwrap();
    // Durable, as an orphan.
    f.sync_all().unwrap();
    assert_eq!(used_inodes(&m.path("")), base + 1);
    m.kill9();
    drop(f);
    let m = pool.mount(&[]);
    assert_eq!(used_inodes(&m.path("")), base, "the orphan was not freed");
    assert!(pool.log().contains("freed 1 orphaned inodes"), "{}", pool.log());
    m.unmount();
    pool.fsck_clean();
}
