//! POSIX conformance of a mounted pool, as root: every operation the FUSE
//! front end serves, with the error codes programs rely on.

// A test crate: a panic is how a test fails, so unwrap and expect are fine (and, until the rework of the mount's tests lands, unsafe blocks without SAFETY comments).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::undocumented_unsafe_blocks)]

mod fuse_util;

use fuse_util::*;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::Duration;

use libc::{
    EACCES, EEXIST, EINVAL, EISDIR, ELOOP, ENAMETOOLONG, ENODATA, ENOENT, ENOTDIR, ENOTEMPTY, ENXIO, EOPNOTSUPP, EPERM,
    ERANGE, EXDEV,
};

fn renameat2(from: &Path, to: &Path, flags: u32) -> std::io::Result<()> {
    let (a, b) = (cpath(from), cpath(to));
    // SAFETY: valid C strings; AT_FDCWD with absolute paths.
    let r =
        unsafe { libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), flags) };
    check(r as i32).map(|_| ())
}

fn setxattr(p: &Path, name: &str, value: &[u8], flags: i32) -> std::io::Result<()> {
    let (p, n) = (cpath(p), CString::new(name).unwrap());
    // SAFETY: valid pointers and lengths.
    check(unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), flags) }).map(|_| ())
}

/// getxattr with a buffer of `size` bytes (0 = size probe).
fn getxattr(p: &Path, name: &str, size: usize) -> std::io::Result<Vec<u8>> {
    let (p, n) = (cpath(p), CString::new(name).unwrap());
    let mut buf = vec![0u8; size];
    // SAFETY: the buffer holds `size` bytes.
    let r = check_ssize(unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), size) })?;
    if size == 0 {
        return Ok(vec![0; r]);
    }
    buf.truncate(r);
    Ok(buf)
}

fn listxattr(p: &Path, size: usize) -> std::io::Result<Vec<u8>> {
    let p = cpath(p);
    let mut buf = vec![0u8; size];
    // SAFETY: the buffer holds `size` bytes.
    let r = check_ssize(unsafe { libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), size) })?;
    if size == 0 {
        return Ok(vec![0; r]);
    }
    buf.truncate(r);
    Ok(buf)
}

fn removexattr(p: &Path, name: &str) -> std::io::Result<()> {
    let (p, n) = (cpath(p), CString::new(name).unwrap());
    // SAFETY: valid C strings.
    check(unsafe { libc::removexattr(p.as_ptr(), n.as_ptr()) }).map(|_| ())
}

fn access(p: &Path, mode: i32) -> std::io::Result<()> {
    let p = cpath(p);
    // SAFETY: valid C string.
    check(unsafe { libc::access(p.as_ptr(), mode) }).map(|_| ())
}

fn lseek(f: &File, off: i64, whence: i32) -> std::io::Result<i64> {
    // SAFETY: a valid descriptor.
    let r = unsafe { libc::lseek(f.as_raw_fd(), off, whence) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn utimens(p: &Path, times: [libc::timespec; 2], flags: i32) -> std::io::Result<()> {
    let p = cpath(p);
    // SAFETY: valid C string and a two-element array.
    check(unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), times.as_ptr(), flags) }).map(|_| ())
}

fn ts(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec { tv_sec: sec, tv_nsec: nsec }
}

fn mknod(p: &Path, mode: u32, dev: u64) -> std::io::Result<()> {
    let p = cpath(p);
    // SAFETY: valid C string.
    check(unsafe { libc::mknod(p.as_ptr(), mode, dev) }).map(|_| ())
}

fn fallocate(f: &File, mode: i32, off: i64, len: i64) -> std::io::Result<()> {
    // SAFETY: a valid descriptor.
    check(unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) }).map(|_| ())
}

#[test]
fn names_lookup_and_directories() {
    require_fuse!();
    let pool = Pool::new(3, "256M");
    let m = pool.mount(&[]);
    names_lookup_and_directories_on(&pool, &m);
    // Every file the checks opened is closed again: a clean unmount.
    m.unmount();
    pool.fsck_clean();
}

/// Runs every check of the suite, each on a fresh pool mounted with
/// `opts`; `before` looks at the mount first.
fn whole_suite(opts: &[&str], before: impl Fn(&str, &Mounted)) {
    type Check = fn(&Pool, &Mounted);
    let checks: [(&str, Check); 5] = [
        ("names", |p, m| names_lookup_and_directories_on(p, m)),
        ("data", |_, m| file_data_attributes_and_links_on(m)),
        ("rename", |_, m| rename_variants_on(m)),
        ("xattrs", |p, m| xattrs_and_layouts_on(p, m)),
        ("fallocate", |_, m| fallocate_seek_copy_and_locks_on(m)),
    ];
    for (what, check) in checks {
        let pool = Pool::new(3, "256M");
        let m = pool.mount(opts);
        before(what, &m);
        check(&pool, &m);
        // Every file the checks opened is closed again: a clean unmount.
        m.unmount();
        pool.fsck_clean();
    }
}

/// The whole suite on a mount other users may use: the kernel checks
/// permissions as well (`default_permissions`) and keeps every name.
#[test]
fn allow_other_mount() {
    require_fuse!();
    whole_suite(&["allow_other"], |what, m| {
        let opts = fs::read_to_string("/proc/self/mountinfo").unwrap();
        let line = opts.lines().find(|l| l.contains(s(&m.mnt))).unwrap_or_default().to_string();
        assert!(line.contains("default_permissions") && line.contains("allow_other"), "{what}: {line}");
    });
}

/// The whole suite again with the kernel's writeback cache, and what that
/// cache changes: writes and times reach the engine later, merged; a writer
/// who is not the owner still updates the file's time; O_APPEND is the
/// kernel's; fsync still makes data survive a killed mount.
#[test]
fn writeback_cache_mount() {
    require_fuse!();
    whole_suite(&["writeback_cache"], |what, m| {
        let v = m.stats();
        assert!(v.kernel_features.iter().any(|f| f == "writeback_cache"), "{what}: {v:?}");
    });

    let pool = Pool::new(2, "128M");
    let m = pool.mount(&["writeback_cache,allow_other"]);
    // Small writes are merged before they reach the engine.
    let before = m.stats();
    let mut f = File::create(m.path("small")).unwrap();
    for i in 0..1000u32 {
        f.write_all(&i.to_le_bytes()).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    let after = m.stats();
    let writes = |v: &hurricane_fuse::StatsReport| v.ops.get("write").map_or(0, |o| o.count);
    assert!(writes(&after) - writes(&before) < 100, "1000 writes of 4 bytes were not merged: {after:?}");
    let want: Vec<u8> = (0..1000u32).flat_map(|i| i.to_le_bytes()).collect();
    assert_eq!(fs::read(m.path("small")).unwrap(), want);

    // Two appending descriptors: every record lands whole, none lost.
    {
        let mut a = OpenOptions::new().append(true).create(true).open(m.path("log")).unwrap();
        let mut b = OpenOptions::new().append(true).open(m.path("log")).unwrap();
        for i in 0..50 {
            a.write_all(format!("a{i:03}\n").as_bytes()).unwrap();
            b.write_all(format!("b{i:03}\n").as_bytes()).unwrap();
        }
    }
    let log = fs::read_to_string(m.path("log")).unwrap();
    assert_eq!(log.lines().count(), 100, "{log}");
    assert!((0..50).all(|i| log.contains(&format!("a{i:03}\n")) && log.contains(&format!("b{i:03}\n"))));

    // A writer who is not the owner: its writes set the time, also when
    // they are flushed well after they were made, and close reports no
    // error.
    if is_root() {
        fs::write(m.path("shared"), b"").unwrap();
        fs::set_permissions(m.path("shared"), fs::Permissions::from_mode(0o666)).unwrap();
        utimens(&m.path("shared"), [ts(1_000_000, 0), ts(1_000_000, 0)], 0).unwrap();
        let script = "import os,sys,time\nfd=os.open(sys.argv[1],os.O_WRONLY)\nos.write(fd,b'by nobody')\n\
                      time.sleep(3)\nos.fsync(fd)\nos.close(fd)";
        let (ok, out) = python(script, &[s(&m.path("shared"))], Some((65534, 65534, &[])));
        assert!(ok, "{out}");
        let md = fs::metadata(m.path("shared")).unwrap();
        assert_eq!((md.len(), md.uid()), (9, 0));
        assert!(md.mtime() > 1_000_000, "mtime {}", md.mtime());
        assert_eq!(fs::read(m.path("shared")).unwrap(), b"by nobody");
    }

    // Data the kernel holds and has not written back is data, not a hole:
    // a copy made by a program that skips holes (cp, tar --sparse) while
    // another process writes the file must not come out as zeros there.
    let f = File::create(m.path("dirty")).unwrap();
    f.write_all_at(&[7u8; 4096], 0).unwrap();
    f.sync_all().unwrap();
    let tail = data(64 << 10, 13);
    f.write_all_at(&tail, 1 << 20).unwrap();
    let size = (1 << 20) + tail.len() as i64;
    // At 4096 (no hole reported) or at the data written; not ENXIO.
    let d = lseek(&f, 4096, libc::SEEK_DATA).unwrap();
    assert!(d == 4096 || d == 1 << 20, "SEEK_DATA from 4096 gave {d}");
    assert_eq!(lseek(&f, 1 << 20, libc::SEEK_HOLE).unwrap(), size, "SEEK_HOLE within data the kernel holds");
    drop(f);
    assert!(fs::read(m.path("dirty")).unwrap()[1 << 20..] == tail[..]);

    // fsync'd data survives a killed mount.
    let mut f = File::create(m.path("durable")).unwrap();
    f.write_all(&data(300_000, 5)).unwrap();
    f.sync_all().unwrap();
    drop(f);
    m.kill9();
    let m = pool.mount(&[]);
    assert_eq!(fs::read(m.path("durable")).unwrap(), data(300_000, 5));
    assert_eq!(fs::read(m.path("small")).unwrap(), want);
    m.unmount();
    pool.fsck_clean();

    // A full pool: writes land in the kernel's cache, the error comes at
    // fsync, and the pool stays consistent.
    let pool = Pool::new(2, "16M");
    let m = pool.mount(&["writeback_cache"]);
    let mut f = File::create(m.path("big")).unwrap();
    let chunk = data(1 << 20, 9);
    for _ in 0..60 {
        f.write_all(&chunk).unwrap();
    }
    assert_eq!(errno(f.sync_all()), libc::ENOSPC);
    drop(f);
    m.unmount();
    pool.fsck_clean();
}

fn names_lookup_and_directories_on(pool: &Pool, m: &Mounted) {
    let p = |r: &str| m.path(r);

    fs::create_dir(p("d")).unwrap();
    assert_eq!(errno(fs::create_dir(p("d"))), EEXIST);
    assert_eq!(errno(fs::create_dir(p("nope/sub"))), ENOENT);
    assert_eq!(errno(fs::metadata(p("missing"))), ENOENT);
    fs::write(p("file"), b"x").unwrap();
    assert_eq!(errno(fs::metadata(p("file/x"))), ENOTDIR);
    assert_eq!(errno(fs::create_dir(p("file/x"))), ENOTDIR);
    let long = "n".repeat(256);
    assert_eq!(errno(fs::metadata(p(&long))), ENAMETOOLONG);
    assert_eq!(errno(File::create(p(&long))), ENAMETOOLONG);
    assert_eq!(errno(fs::create_dir(p(&long))), ENAMETOOLONG);
    let max = "m".repeat(255);
    fs::write(p(&max), b"255").unwrap();
    assert_eq!(fs::read(p(&max)).unwrap(), b"255");

    // Modes (umask 022) and directory link counts.
    fs::create_dir(p("d/sub")).unwrap();
    let md = fs::metadata(p("d")).unwrap();
    assert!(md.is_dir());
    assert_eq!(md.mode() & 0o7777, 0o755);
    assert_eq!(md.nlink(), 3, "a directory with one subdirectory");
    fs::DirBuilder::new().mode(0o700).create(p("d/private")).unwrap();
    assert_eq!(fs::metadata(p("d/private")).unwrap().mode() & 0o7777, 0o700);

    // rmdir and unlink errors.
    assert_eq!(errno(fs::remove_dir(p("d"))), ENOTEMPTY);
    assert_eq!(errno(fs::remove_dir(p("file"))), ENOTDIR);
    assert_eq!(errno(fs::remove_dir(p("missing"))), ENOENT);
    assert_eq!(errno(fs::remove_dir(p("d/sub/."))), EINVAL);
    assert_eq!(errno(fs::remove_file(p("d"))), EISDIR);
    assert_eq!(errno(fs::remove_file(p("missing"))), ENOENT);
    fs::remove_dir(p("d/sub")).unwrap();
    fs::remove_dir(p("d/private")).unwrap();
    fs::remove_dir(p("d")).unwrap();
    assert_eq!(errno(fs::metadata(p("d"))), ENOENT);

    // readdir of a large directory: every name once, "." and "..".
    fs::create_dir(p("big")).unwrap();
    let mut want: Vec<String> = (0..1500).map(|i| format!("entry-{i:05}-{}", "x".repeat(i % 40))).collect();
    for n in &want {
        File::create(p(&format!("big/{n}"))).unwrap();
    }
    let mut got: Vec<String> =
        fs::read_dir(p("big")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    let ls = ok("ls", &["-a", s(&p("big"))]);
    assert!(ls.lines().any(|l| l == ".") && ls.lines().any(|l| l == ".."));
    // Entries seen through readdirplus carry their attributes.
    let out = ok("ls", &["-l", s(&p("big"))]);
    assert_eq!(out.lines().filter(|l| l.starts_with("-rw-r--r--")).count(), 1500);
    assert_eq!(errno(fs::read_dir(p("file"))), ENOTDIR);

    // Symlinks: readlink, loops, O_NOFOLLOW.
    std::os::unix::fs::symlink("file", p("ln")).unwrap();
    assert_eq!(fs::read_link(p("ln")).unwrap(), Path::new("file"));
    assert!(fs::symlink_metadata(p("ln")).unwrap().file_type().is_symlink());
    assert_eq!(fs::read(p("ln")).unwrap(), b"x");
    assert_eq!(errno(fs::read_link(p("file"))), EINVAL);
    assert_eq!(errno(std::os::unix::fs::symlink("x", p("ln"))), EEXIST);
    std::os::unix::fs::symlink("loop2", p("loop1")).unwrap();
    std::os::unix::fs::symlink("loop1", p("loop2")).unwrap();
    assert_eq!(errno(fs::metadata(p("loop1"))), ELOOP);
    assert_eq!(errno(OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(p("ln"))), ELOOP);
    std::os::unix::fs::symlink("/nonexistent/target", p("dangling")).unwrap();
    assert_eq!(errno(fs::metadata(p("dangling"))), ENOENT);

    // Special files.
    mknod(&p("fifo"), libc::S_IFIFO | 0o644, 0).unwrap();
    assert!(fs::symlink_metadata(p("fifo")).unwrap().file_type().is_fifo());
    mknod(&p("null"), libc::S_IFCHR | 0o666, libc::makedev(1, 3)).unwrap();
    let md = fs::symlink_metadata(p("null")).unwrap();
    assert!(md.file_type().is_char_device());
    assert_eq!(md.rdev(), libc::makedev(1, 3));
    assert_eq!(errno(mknod(&p("fifo"), libc::S_IFIFO | 0o644, 0)), EEXIST);

    // statfs.
    let c = cpath(&m.mnt);
    // SAFETY: valid path and output struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    check(unsafe { libc::statvfs(c.as_ptr(), &mut st) }).unwrap();
    assert_eq!(st.f_bsize, 4096);
    assert_eq!(st.f_namemax, 255);
    assert!(
        st.f_blocks >= 3 * 256 * 256 - 1024 && st.f_bfree > 0 && st.f_bfree < st.f_blocks,
        "{} {}",
        st.f_blocks,
        st.f_bfree
    );

    // A rename out of the mount is the kernel's EXDEV.
    assert_eq!(errno(fs::rename(p("file"), pool.tmp.path().join("outside"))), EXDEV);
}

#[test]
fn file_data_attributes_and_links() {
    require_fuse!();
    let pool = Pool::new(3, "256M");
    let m = pool.mount(&[]);
    file_data_attributes_and_links_on(&m);
    // Every file the checks opened is closed again: a clean unmount.
    m.unmount();
    pool.fsck_clean();
}

fn file_data_attributes_and_links_on(m: &Mounted) {
    let p = |r: &str| m.path(r);

    // create / O_EXCL / open errors.
    let mut f = File::create(p("a")).unwrap();
    assert_eq!(errno(OpenOptions::new().write(true).create_new(true).open(p("a"))), EEXIST);
    assert_eq!(errno(File::open(p("missing"))), ENOENT);
    fs::create_dir(p("dir")).unwrap();
    assert_eq!(errno(OpenOptions::new().write(true).open(p("dir"))), EISDIR);

    // write / read, unaligned, large, sparse.
    let big = data(5_000_123, 1);
    f.write_all(&big).unwrap();
    f.sync_all().unwrap();
    assert_eq!(fs::read(p("a")).unwrap(), big);
    f.write_all_at(b"PATCH", 4095).unwrap();
    let mut buf = [0u8; 7];
    File::open(p("a")).unwrap().read_exact_at(&mut buf, 4094).unwrap();
    assert_eq!(&buf, &[big[4094], b'P', b'A', b'T', b'C', b'H', big[4100]]);
    let sp = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(p("sparse")).unwrap();
    sp.write_all_at(b"tail", 10 << 20).unwrap();
    assert_eq!(sp.metadata().unwrap().len(), (10 << 20) + 4);
    let mut mid = vec![1u8; 8192];
    sp.read_exact_at(&mut mid, 5 << 20).unwrap();
    assert!(mid.iter().all(|&b| b == 0), "a hole reads as zeros");
    assert!(
        sp.metadata().unwrap().blocks() < 1024,
        "a sparse file allocates little: {} blocks",
        sp.metadata().unwrap().blocks()
    );

    // O_APPEND: two descriptors both write at the end.
    fs::write(p("log"), b"0123").unwrap();
    let mut a1 = OpenOptions::new().append(true).open(p("log")).unwrap();
    let mut a2 = OpenOptions::new().append(true).open(p("log")).unwrap();
    a1.write_all(b"aa").unwrap();
    a2.write_all(b"bbb").unwrap();
    a1.write_all(b"c").unwrap();
    assert_eq!(fs::read(p("log")).unwrap(), b"0123aabbbc");
    // Appends from many threads lose nothing.
    let hs: Vec<_> = (0..4)
        .map(|t| {
            let path = p("log");
            std::thread::spawn(move || {
                let mut f = OpenOptions::new().append(true).open(path).unwrap();
                for _ in 0..100 {
                    f.write_all(&[b'A' + t as u8; 10]).unwrap();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let log = fs::read(p("log")).unwrap();
    assert_eq!(log.len(), 10 + 4000);
    for chunk in log[10..].chunks(10) {
        assert!(chunk.iter().all(|&c| c == chunk[0]), "an append was split: {chunk:?}");
    }

    // O_TRUNC and truncate both ways.
    fs::write(p("t"), b"hello world").unwrap();
    drop(OpenOptions::new().write(true).truncate(true).open(p("t")).unwrap());
    assert_eq!(fs::metadata(p("t")).unwrap().len(), 0);
    let t = OpenOptions::new().read(true).write(true).open(p("t")).unwrap();
    t.write_all_at(&[9u8; 10000], 0).unwrap();
    t.set_len(5000).unwrap();
    t.set_len(12000).unwrap();
    let got = fs::read(p("t")).unwrap();
    assert_eq!(got.len(), 12000);
    assert!(
        got[..5000].iter().all(|&b| b == 9) && got[5000..].iter().all(|&b| b == 0),
        "truncate then extend shows zeros"
    );
    let c = cpath(&p("dir"));
    // SAFETY: valid C string.
    assert_eq!(errno(check(unsafe { libc::truncate(c.as_ptr(), 0) })), EISDIR);

    // chmod, chown, utimens (explicit, UTIME_NOW, UTIME_OMIT).
    fs::set_permissions(p("t"), fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(fs::metadata(p("t")).unwrap().mode() & 0o7777, 0o640);
    std::os::unix::fs::chown(p("t"), Some(1234), Some(5678)).unwrap();
    let md = fs::metadata(p("t")).unwrap();
    assert_eq!((md.uid(), md.gid()), (1234, 5678));
    utimens(&p("t"), [ts(1_000_000_000, 123_456_789), ts(1_500_000_000, 987_654_321)], 0).unwrap();
    let md = fs::metadata(p("t")).unwrap();
    assert_eq!(
        (md.atime(), md.atime_nsec(), md.mtime(), md.mtime_nsec()),
        (1_000_000_000, 123_456_789, 1_500_000_000, 987_654_321)
    );
    utimens(&p("t"), [ts(0, libc::UTIME_OMIT), ts(0, libc::UTIME_NOW)], 0).unwrap();
    let md = fs::metadata(p("t")).unwrap();
    assert_eq!(md.atime(), 1_000_000_000, "UTIME_OMIT keeps atime");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!((md.mtime() - now).abs() < 30, "UTIME_NOW sets mtime to now");
    // Times before 1970 and with nanoseconds survive.
    utimens(&p("t"), [ts(-86_400, 5), ts(-1, 999_999_999)], 0).unwrap();
    let md = fs::metadata(p("t")).unwrap();
    assert_eq!((md.atime(), md.atime_nsec(), md.mtime(), md.mtime_nsec()), (-86_400, 5, -1, 999_999_999));
    // A symlink's own times.
    std::os::unix::fs::symlink("t", p("tl")).unwrap();
    utimens(&p("tl"), [ts(7, 0), ts(8, 0)], libc::AT_SYMLINK_NOFOLLOW).unwrap();
    assert_eq!(fs::symlink_metadata(p("tl")).unwrap().mtime(), 8);
    // mtime and ctime move on write.
    let before = fs::metadata(p("a")).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    OpenOptions::new().write(true).open(p("a")).unwrap().write_all_at(b"z", 0).unwrap();
    let after = fs::metadata(p("a")).unwrap();
    assert!((after.mtime(), after.mtime_nsec()) > (before.mtime(), before.mtime_nsec()));

    // Hard links.
    fs::hard_link(p("a"), p("a2")).unwrap();
    assert_eq!(fs::metadata(p("a")).unwrap().nlink(), 2);
    assert_eq!(fs::metadata(p("a")).unwrap().ino(), fs::metadata(p("a2")).unwrap().ino());
    assert_eq!(errno(fs::hard_link(p("a"), p("t"))), EEXIST);
    assert_eq!(errno(fs::hard_link(p("dir"), p("dir2"))), EPERM);
    assert_eq!(errno(fs::hard_link(p("missing"), p("x"))), ENOENT);
    fs::remove_file(p("a")).unwrap();
    assert_eq!(fs::metadata(p("a2")).unwrap().nlink(), 1);
    assert_eq!(fs::read(p("a2")).unwrap().len(), big.len());

    // An unlinked file lives while open (and only while open).
    drop(f);
    let mut keep = OpenOptions::new().read(true).write(true).open(p("a2")).unwrap();
    fs::remove_file(p("a2")).unwrap();
    assert_eq!(errno(fs::metadata(p("a2"))), ENOENT);
    assert_eq!(keep.metadata().unwrap().nlink(), 0);
    keep.write_all_at(b"still here", 0).unwrap();
    let mut head = [0u8; 10];
    keep.seek(SeekFrom::Start(0)).unwrap();
    keep.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"still here");
    let files_before = statvfs_files(&m.mnt);
    drop(keep);
    // Its space and inode go with the last close.
    let mut freed = false;
    for _ in 0..100 {
        if statvfs_files(&m.mnt) < files_before {
            freed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(freed, "the inode of an unlinked file was not freed at its last close");

    // fsync, fdatasync, fsync of a directory, syncfs.
    let f = File::create(p("s")).unwrap();
    f.sync_all().unwrap();
    f.sync_data().unwrap();
    File::open(p("dir")).unwrap().sync_all().unwrap();
    // SAFETY: a valid descriptor.
    check(unsafe { libc::syncfs(f.as_raw_fd()) }).unwrap();

    // Programs run from the mount.
    let echo = ["/bin/echo", "/usr/bin/echo"].into_iter().find(|p| Path::new(p).exists()).expect("an echo binary");
    fs::copy(echo, p("echo")).unwrap();
    fs::set_permissions(p("echo"), fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(ok(s(&p("echo")), &["run", "from", "the", "mount"]), "run from the mount\n");

    // access(2): root may do anything but execute a file nobody may.
    fs::write(p("plain"), b"").unwrap();
    access(&p("plain"), libc::R_OK | libc::W_OK).unwrap();
    assert_eq!(errno(access(&p("plain"), libc::X_OK)), EACCES);
    fs::set_permissions(p("plain"), fs::Permissions::from_mode(0o744)).unwrap();
    access(&p("plain"), libc::X_OK).unwrap();
    assert_eq!(errno(access(&p("missing"), libc::F_OK)), ENOENT);
}

fn statvfs_files(mnt: &Path) -> u64 {
    let c = cpath(mnt);
    // SAFETY: valid path and output struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    check(unsafe { libc::statvfs(c.as_ptr(), &mut st) }).unwrap();
    st.f_files.saturating_sub(st.f_ffree)
}

#[test]
fn rename_variants() {
    require_fuse!();
    let pool = Pool::new(2, "128M");
    let m = pool.mount(&[]);
    rename_variants_on(&m);
    // Every file the checks opened is closed again: a clean unmount.
    m.unmount();
    pool.fsck_clean();
}

fn rename_variants_on(m: &Mounted) {
    let p = |r: &str| m.path(r);
    fs::write(p("a"), b"A").unwrap();
    fs::write(p("b"), b"B").unwrap();
    fs::create_dir_all(p("d1/inner")).unwrap();
    fs::create_dir(p("d2")).unwrap();
    fs::create_dir(p("empty")).unwrap();

    fs::rename(p("a"), p("a1")).unwrap();
    assert_eq!(errno(fs::metadata(p("a"))), ENOENT);
    // Replace an existing file atomically.
    fs::rename(p("a1"), p("b")).unwrap();
    assert_eq!(fs::read(p("b")).unwrap(), b"A");
    fs::write(p("c"), b"C").unwrap();
    assert_eq!(errno(renameat2(&p("c"), &p("b"), libc::RENAME_NOREPLACE)), EEXIST);
    renameat2(&p("c"), &p("c2"), libc::RENAME_NOREPLACE).unwrap();
    // Exchange two files, and a file with a directory.
    renameat2(&p("b"), &p("c2"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!((fs::read(p("b")).unwrap(), fs::read(p("c2")).unwrap()), (b"C".to_vec(), b"A".to_vec()));
    renameat2(&p("b"), &p("d2"), libc::RENAME_EXCHANGE).unwrap();
    assert!(fs::metadata(p("b")).unwrap().is_dir() && fs::metadata(p("d2")).unwrap().is_file());
    renameat2(&p("b"), &p("d2"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(errno(renameat2(&p("b"), &p("nothing"), libc::RENAME_EXCHANGE)), ENOENT);
    assert_eq!(errno(renameat2(&p("b"), &p("c2"), libc::RENAME_EXCHANGE | libc::RENAME_NOREPLACE)), EINVAL);
    // Directory rules.
    assert_eq!(errno(fs::rename(p("d2"), p("d1"))), ENOTEMPTY);
    assert_eq!(errno(fs::rename(p("d2"), p("b"))), ENOTDIR);
    assert_eq!(errno(fs::rename(p("b"), p("d2"))), EISDIR);
    assert_eq!(errno(fs::rename(p("d1"), p("d1/inner/x"))), EINVAL);
    assert_eq!(errno(fs::rename(p("missing"), p("x"))), ENOENT);
    fs::rename(p("d2"), p("empty")).unwrap();
    // Moving a directory between parents fixes the link counts.
    fs::rename(p("empty"), p("d1/moved")).unwrap();
    assert_eq!(fs::metadata(p("d1")).unwrap().nlink(), 4);
    assert_eq!(fs::metadata(p("d1/moved/..")).unwrap().ino(), fs::metadata(p("d1")).unwrap().ino());
    // Renaming onto a hard link of itself does nothing.
    fs::hard_link(p("b"), p("b-link")).unwrap();
    fs::rename(p("b"), p("b-link")).unwrap();
    assert!(fs::metadata(p("b")).is_ok() && fs::metadata(p("b-link")).is_ok());
    let long = "r".repeat(256);
    assert_eq!(errno(fs::rename(p("b"), p(&long))), ENAMETOOLONG);
}

#[test]
fn xattrs_and_layouts() {
    require_fuse!();
    let pool = Pool::new(3, "256M");
    let m = pool.mount(&[]);
    xattrs_and_layouts_on(&pool, &m);
    // Every file the checks opened is closed again: a clean unmount.
    m.unmount();
    pool.fsck_clean();
}

fn xattrs_and_layouts_on(pool: &Pool, m: &Mounted) {
    let p = |r: &str| m.path(r);
    fs::write(p("f"), b"data").unwrap();

    setxattr(&p("f"), "user.color", b"blue", 0).unwrap();
    assert_eq!(getxattr(&p("f"), "user.color", 64).unwrap(), b"blue");
    assert_eq!(getxattr(&p("f"), "user.color", 0).unwrap().len(), 4, "size probe");
    assert_eq!(errno(getxattr(&p("f"), "user.color", 2)), ERANGE);
    assert_eq!(errno(getxattr(&p("f"), "user.none", 64)), ENODATA);
    assert_eq!(errno(setxattr(&p("f"), "user.color", b"red", libc::XATTR_CREATE)), EEXIST);
    assert_eq!(errno(setxattr(&p("f"), "user.other", b"x", libc::XATTR_REPLACE)), ENODATA);
    setxattr(&p("f"), "user.color", b"red", libc::XATTR_REPLACE).unwrap();
    setxattr(&p("f"), "user.empty", b"", 0).unwrap();
    assert_eq!(getxattr(&p("f"), "user.empty", 16).unwrap(), b"");
    let names = listxattr(&p("f"), 1024).unwrap();
    assert_eq!(names, b"user.color\0user.empty\0".to_vec(), "sorted names; no virtual attributes listed");
    assert_eq!(listxattr(&p("f"), 0).unwrap().len(), names.len());
    assert_eq!(errno(listxattr(&p("f"), 3)), ERANGE);
    removexattr(&p("f"), "user.empty").unwrap();
    assert_eq!(errno(removexattr(&p("f"), "user.empty")), ENODATA);
    setxattr(&p("f"), "trusted.t", b"root only", 0).unwrap();
    assert_eq!(getxattr(&p("f"), "trusted.t", 64).unwrap(), b"root only");
    assert_eq!(errno(setxattr(&p("f"), "system.bogus", b"x", 0)), EOPNOTSUPP);
    std::os::unix::fs::symlink("f", p("ln")).unwrap();
    let ln = cpath(&p("ln"));
    let (n, v) = (CString::new("user.x").unwrap(), b"1");
    // SAFETY: valid pointers.
    assert_eq!(errno(check(unsafe { libc::lsetxattr(ln.as_ptr(), n.as_ptr(), v.as_ptr().cast(), 1, 0) })), EPERM);
    // File capabilities (a VFS_CAP_REVISION_2 record granting
    // CAP_NET_BIND_SERVICE) go away on a write, a truncate and a chown,
    // as on a local file system.
    let caps: Vec<u8> = [0x0200_0001u32, 1 << 10, 0, 0, 0].iter().flat_map(|w| w.to_le_bytes()).collect();
    fs::write(p("cap"), b"binary").unwrap();
    let drops: [(&str, &dyn Fn()); 4] = [
        ("write", &|| OpenOptions::new().write(true).open(p("cap")).unwrap().write_all_at(b"B", 0).unwrap()),
        ("cached write", &|| {
            OpenOptions::new().read(true).write(true).open(p("cap")).unwrap().write_all_at(b"C", 0).unwrap()
        }),
        ("truncate", &|| OpenOptions::new().write(true).open(p("cap")).unwrap().set_len(3).unwrap()),
        ("chown", &|| std::os::unix::fs::chown(p("cap"), Some(1), Some(1)).unwrap()),
    ];
    for (what, change) in drops {
        setxattr(&p("cap"), "security.capability", &caps, 0).unwrap();
        assert_eq!(getxattr(&p("cap"), "security.capability", 64).unwrap(), caps);
        change();
        assert_eq!(errno(getxattr(&p("cap"), "security.capability", 64)), ENODATA, "capabilities kept after {what}");
    }
    let big = vec![7u8; 65536];
    setxattr(&p("f"), "user.big", &big, 0).unwrap();
    assert_eq!(getxattr(&p("f"), "user.big", 70000).unwrap(), big);

    // Layouts: read on any file; set on an empty file, or on a file holding
    // data, which moves to it (an online migration) with its bytes intact.
    let lay = String::from_utf8(getxattr(&p("f"), "user.hurricane.layout", 4096).unwrap()).unwrap();
    assert!(lay.starts_with("stripe"), "default layout: {lay}");
    let before = fs::read(p("f")).unwrap();
    setxattr(&p("f"), "user.hurricane.layout", b"extent@1", 0).unwrap();
    assert_eq!(getxattr(&p("f"), "user.hurricane.layout", 4096).unwrap(), b"checksum[extent@1]");
    assert_eq!(fs::read(p("f")).unwrap(), before);
    File::create(p("e")).unwrap();
    setxattr(&p("e"), "user.hurricane.layout", b"extent@1", 0).unwrap();
    // As set, with the checksum block a default pool puts above the leaf.
    assert_eq!(getxattr(&p("e"), "user.hurricane.layout", 4096).unwrap(), b"checksum[extent@1]");
    fs::write(p("e"), data(300_000, 3)).unwrap();
    assert_eq!(fs::read(p("e")).unwrap(), data(300_000, 3));
    setxattr(&p("e"), "user.hurricane.layout", b"extent@0", 0).unwrap();
    assert_eq!(getxattr(&p("e"), "user.hurricane.layout", 4096).unwrap(), b"checksum[extent@0]");
    let _ = fs::write("/proc/sys/vm/drop_caches", "3\n");
    assert_eq!(fs::read(p("e")).unwrap(), data(300_000, 3));
    File::create(p("e2")).unwrap();
    assert_eq!(errno(setxattr(&p("e2"), "user.hurricane.layout", b"stripe(unit=64K,width=9)", 0)), EINVAL);
    assert_eq!(errno(setxattr(&p("e2"), "user.hurricane.layout", b"nonsense((", 0)), EINVAL);
    assert_eq!(errno(setxattr(&p("e2"), "user.hurricane.layout", b"extent@7", 0)), EINVAL);

    // Directory defaults are inherited by new files and subdirectories.
    fs::create_dir(p("striped")).unwrap();
    assert_eq!(errno(getxattr(&p("striped"), "user.hurricane.dir_layout", 4096)), ENODATA);
    setxattr(&p("striped"), "user.hurricane.dir_layout", b"stripe(unit=64K,width=2)", 0).unwrap();
    assert_eq!(getxattr(&p("striped"), "user.hurricane.dir_layout", 4096).unwrap(), b"stripe(unit=64K,width=2)");
    fs::write(p("striped/new"), data(200_000, 4)).unwrap();
    let l = String::from_utf8(getxattr(&p("striped/new"), "user.hurricane.layout", 4096).unwrap()).unwrap();
    assert!(l.starts_with("stripe(unit=64K)[") && l.matches("extent").count() == 2, "{l}");
    fs::create_dir(p("striped/sub")).unwrap();
    fs::write(p("striped/sub/deep"), b"x").unwrap();
    let l = String::from_utf8(getxattr(&p("striped/sub/deep"), "user.hurricane.layout", 4096).unwrap()).unwrap();
    assert!(l.starts_with("stripe(unit=64K)["), "{l}");
    assert_eq!(errno(setxattr(&p("striped"), "user.hurricane.dir_layout", b"stripe(width=", 0)), EINVAL);
    assert_eq!(errno(setxattr(&p("f"), "user.hurricane.dir_layout", b"extent", 0)), ENOTDIR);
    removexattr(&p("striped"), "user.hurricane.dir_layout").unwrap();
    assert_eq!(errno(getxattr(&p("striped"), "user.hurricane.dir_layout", 4096)), ENODATA);
    assert!(pool.log().contains("nonsense(("), "a refused layout is logged with its spec:\n{}", pool.log());

    // Statistics on the root.
    let st = getxattr(&m.mnt, "user.hurricane.stats", 1 << 20).unwrap();
    let v = hurricane_fuse::StatsReport::from_json(&st).unwrap();
    assert!(v.ops["setxattr"].count > 10);
    assert_eq!(v.devices.len(), 3);
    assert_eq!(errno(getxattr(&p("f"), "user.hurricane.stats", 4096)), ENODATA);
    assert_eq!(errno(setxattr(&m.mnt, "user.hurricane.stats", b"x", 0)), EPERM);
    let table = hurricane(&["stats", s(&m.mnt)]);
    assert!(table.contains("setxattr") && table.contains("dev0.img") && table.contains("journal"), "{table}");
}

#[test]
fn fallocate_seek_copy_and_locks() {
    require_fuse!();
    let pool = Pool::new(3, "256M");
    let m = pool.mount(&[]);
    fallocate_seek_copy_and_locks_on(&m);
    // Every file the checks opened is closed again: a clean unmount.
    m.unmount();
    pool.fsck_clean();
}

fn fallocate_seek_copy_and_locks_on(m: &Mounted) {
    let p = |r: &str| m.path(r);

    let f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(p("fa")).unwrap();
    fallocate(&f, 0, 0, 1 << 20).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    assert!(f.metadata().unwrap().blocks() >= 2048);
    fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, 1 << 20, 1 << 20).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 1 << 20, "KEEP_SIZE keeps the size");
    assert_eq!(errno(fallocate(&f, 0, 0, 0)), EINVAL);

    // Punched holes read as zeros, give their blocks back and are found by
    // SEEK_HOLE; a zero range reads as zeros and may extend the file.
    let body = data(10 * 4096, 21);
    let ph = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(p("punch")).unwrap();
    ph.write_all_at(&body, 0).unwrap();
    ph.sync_all().unwrap();
    let before = ph.metadata().unwrap().blocks();
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    fallocate(&ph, punch, 4096 + 100, 4 * 4096).unwrap();
    let mut want = body.clone();
    want[4096 + 100..5 * 4096 + 100].fill(0);
    assert!(fs::read(p("punch")).unwrap() == want, "after a punch");
    assert_eq!(ph.metadata().unwrap().len(), body.len() as u64, "a punch keeps the size");
    ph.sync_all().unwrap();
    // With the kernel's writeback cache the kernel keeps the file's
    // attributes itself, st_blocks among them: the engine's count shows
    // only without it. It also holds written data the engine has not seen,
    // so it answers SEEK_DATA and SEEK_HOLE itself, reporting no hole.
    let writeback = m.stats().kernel_features.iter().any(|f| f == "writeback_cache");
    if !writeback {
        assert_eq!(ph.metadata().unwrap().blocks(), before - 3 * 8, "3 whole blocks punched");
    }
    // While a read-write open lives, a shared mapping may hold pages not
    // yet written back: no hole is reported (nor ever under writeback).
    assert_eq!(lseek(&ph, 0, libc::SEEK_HOLE).unwrap(), body.len() as i64);
    assert_eq!(lseek(&ph, 2 * 4096, libc::SEEK_DATA).unwrap(), 2 * 4096);
    assert_eq!(errno(lseek(&ph, body.len() as i64, libc::SEEK_DATA)), ENXIO);
    // Past the end: nothing to punch, the size stays.
    fallocate(&ph, punch, 9 * 4096, 1 << 20).unwrap();
    want[9 * 4096..].fill(0);
    assert!(fs::read(p("punch")).unwrap() == want);
    assert_eq!(ph.metadata().unwrap().len(), body.len() as u64);
    let zero = libc::FALLOC_FL_ZERO_RANGE;
    match fallocate(&ph, zero, 7 * 4096 - 5, 20_000) {
        Err(e) if e.raw_os_error() == Some(EOPNOTSUPP) => eprintln!("this kernel's FUSE passes no ZERO_RANGE"),
        r => {
            r.unwrap();
            want.resize(want.len().max(7 * 4096 - 5 + 20_000), 0);
            want[7 * 4096 - 5..7 * 4096 - 5 + 20_000].fill(0);
            assert!(fs::read(p("punch")).unwrap() == want, "after a zero range");
        }
    }
    // The kernel's FUSE passes neither collapse nor insert to a file system
    // (the native API has both).
    assert_eq!(errno(fallocate(&ph, libc::FALLOC_FL_COLLAPSE_RANGE, 0, 4096)), EOPNOTSUPP);
    // Once it is closed, the punched hole is found.
    drop(ph);
    let ph = File::open(p("punch")).unwrap();
    let (hole, data_at) = (lseek(&ph, 0, libc::SEEK_HOLE).unwrap(), lseek(&ph, 2 * 4096, libc::SEEK_DATA).unwrap());
    if writeback {
        assert_eq!((hole, data_at), (want.len() as i64, 2 * 4096));
    } else {
        assert_eq!((hole, data_at), (2 * 4096, 5 * 4096));
    }

    // SEEK_DATA / SEEK_HOLE: data at [0, 4K) and [3M, 3M+4K), size 5M.
    let h = File::create(p("holes")).unwrap();
    h.write_all_at(&[1u8; 4096], 0).unwrap();
    h.write_all_at(&[2u8; 4096], 3 << 20).unwrap();
    h.set_len(5 << 20).unwrap();
    let h = File::open(p("holes")).unwrap();
    assert_eq!(lseek(&h, 0, libc::SEEK_DATA).unwrap(), 0);
    if writeback {
        assert_eq!(lseek(&h, 0, libc::SEEK_HOLE).unwrap(), 5 << 20);
        assert_eq!(lseek(&h, (4 << 20) + 10, libc::SEEK_DATA).unwrap(), (4 << 20) + 10);
    } else {
        let hole = lseek(&h, 0, libc::SEEK_HOLE).unwrap();
        assert!((4096..=3 << 20).contains(&hole), "first hole at {hole}");
        let d = lseek(&h, hole, libc::SEEK_DATA).unwrap();
        assert!(d > hole && d <= 3 << 20, "next data at {d}");
        let h2 = lseek(&h, 3 << 20, libc::SEEK_HOLE).unwrap();
        assert!(((3 << 20) + 4096..=5 << 20).contains(&h2), "{h2}");
        assert_eq!(errno(lseek(&h, (4 << 20) + 10, libc::SEEK_DATA)), ENXIO, "no data after the last block");
        assert_eq!(lseek(&h, (4 << 20) + 10, libc::SEEK_HOLE).unwrap(), (4 << 20) + 10);
    }
    assert_eq!(errno(lseek(&h, 5 << 20, libc::SEEK_HOLE)), ENXIO, "at end of file");
    // Stores through a shared mapping into a hole, not yet written back:
    // another program's copy that skips holes must still carry them.
    let size = (1 << 20) + (64 << 10);
    let mf = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(p("mapped-holes")).unwrap();
    mf.write_all_at(&[7u8; 4096], 0).unwrap();
    mf.set_len(size as u64).unwrap();
    // SAFETY: a fresh mapping of the open file; unmapped below.
    let map = unsafe {
        libc::mmap(std::ptr::null_mut(), size, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, mf.as_raw_fd(), 0)
    };
    assert_ne!(map, libc::MAP_FAILED);
    let stored = data(64 << 10, 17);
    // SAFETY: the last 64 KiB of the live mapping.
    unsafe { std::ptr::copy_nonoverlapping(stored.as_ptr(), map.cast::<u8>().add(1 << 20), stored.len()) };
    let other = File::open(p("mapped-holes")).unwrap();
    let d = lseek(&other, 4096, libc::SEEK_DATA).unwrap();
    assert!(d == 4096 || d == 1 << 20, "SEEK_DATA from 4096 gave {d} with mapped stores at 1 MiB");
    assert_eq!(lseek(&other, 1 << 20, libc::SEEK_HOLE).unwrap(), size as i64);
    ok("cp", &["--sparse=always", s(&p("mapped-holes")), s(&p("mapped-holes.cp"))]);
    let copy = fs::read(p("mapped-holes.cp")).unwrap();
    assert!(copy.len() == size && copy[1 << 20..] == stored[..], "the copy lost the mapped stores");
    // SAFETY: the mapping made above, unmapped once.
    assert_eq!(unsafe { libc::munmap(map, size) }, 0);
    drop((mf, other));

    // cp recreates the holes.
    ok("cp", &["--sparse=always", s(&p("holes")), s(&p("holes.cp"))]);
    assert_eq!(fs::read(p("holes")).unwrap(), fs::read(p("holes.cp")).unwrap());

    // copy_file_range within the mount.
    let src_data = data(3_000_001, 9);
    fs::write(p("src"), &src_data).unwrap();
    let src = File::open(p("src")).unwrap();
    let dst = OpenOptions::new().write(true).create(true).truncate(true).open(p("dst")).unwrap();
    let mut off_in: i64 = 1;
    let mut off_out: i64 = 10;
    let mut left = src_data.len() - 1;
    while left > 0 {
        // SAFETY: valid descriptors and offset pointers.
        let n = check_ssize(unsafe {
            libc::copy_file_range(src.as_raw_fd(), &mut off_in, dst.as_raw_fd(), &mut off_out, left, 0)
        })
        .unwrap();
        assert!(n > 0);
        left -= n;
    }
    let got = fs::read(p("dst")).unwrap();
    assert_eq!(got.len(), 10 + src_data.len() - 1);
    assert!(got[..10].iter().all(|&b| b == 0));
    assert_eq!(&got[10..], &src_data[1..]);

    // POSIX record locks between processes: a Python child holds a write
    // lock on [0, 100) until told to go.
    let lockf = p("locked");
    fs::write(&lockf, vec![0u8; 200]).unwrap();
    let script = r#"
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX, 100, 0)
print("locked", flush=True)
sys.stdin.readline()
os.close(fd)
"#;
    let mut child = std::process::Command::new("python3")
        .args(["-c", script, s(&lockf)])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "locked");
    let me = OpenOptions::new().read(true).write(true).open(&lockf).unwrap();
    let mut fl = flock_struct(libc::F_WRLCK, 50, 10);
    // SAFETY: valid descriptor and struct.
    check(unsafe { libc::fcntl(me.as_raw_fd(), libc::F_GETLK, &mut fl) }).unwrap();
    assert_eq!(fl.l_type as i32, libc::F_WRLCK);
    assert_eq!(fl.l_pid as u32, child.id(), "F_GETLK names the holder");
    let mut fl = flock_struct(libc::F_WRLCK, 50, 10);
    // SAFETY: as above.
    let e = errno(check(unsafe { libc::fcntl(me.as_raw_fd(), libc::F_SETLK, &mut fl) }));
    assert!(e == libc::EAGAIN || e == libc::EACCES, "{e}");
    let mut free = flock_struct(libc::F_WRLCK, 100, 100);
    // SAFETY: as above.
    check(unsafe { libc::fcntl(me.as_raw_fd(), libc::F_SETLK, &mut free) }).unwrap();
    let mut test = flock_struct(libc::F_RDLCK, 150, 10);
    // SAFETY: as above; our own lock does not block us.
    check(unsafe { libc::fcntl(me.as_raw_fd(), libc::F_GETLK, &mut test) }).unwrap();
    assert_eq!(test.l_type as i32, libc::F_UNLCK);
    // F_SETLKW waits until the child lets go.
    let t0 = std::time::Instant::now();
    let waiter = {
        let path = lockf.clone();
        std::thread::spawn(move || {
            let f = OpenOptions::new().read(true).write(true).open(path).unwrap();
            let mut fl = flock_struct(libc::F_WRLCK, 0, 100);
            // SAFETY: valid descriptor and struct.
            check(unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLKW, &mut fl) }).unwrap();
            std::time::Instant::now()
        })
    };
    // A signal wakes a waiting F_SETLKW (the kernel keeps the locks).
    let interrupted = std::process::Command::new("python3")
        .args([
            "-c",
            r#"
import fcntl, os, signal, sys
def alarm(*_): raise TimeoutError
signal.signal(signal.SIGALRM, alarm)
fd = os.open(sys.argv[1], os.O_RDWR)
signal.setitimer(signal.ITIMER_REAL, 0.2)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX, 100, 0)
    print("granted")
except TimeoutError:
    print("interrupted")
"#,
            s(&lockf),
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&interrupted.stdout).trim(), "interrupted");
    std::thread::sleep(Duration::from_millis(300));
    child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    assert!(child.wait().unwrap().success());
    let granted = waiter.join().unwrap();
    assert!(granted.duration_since(t0) >= Duration::from_millis(250), "F_SETLKW did not wait");

    // flock (kept by the kernel): two open files exclude each other.
    let f1 = File::open(&lockf).unwrap();
    let f2 = File::open(&lockf).unwrap();
    // SAFETY: valid descriptors.
    check(unsafe { libc::flock(f1.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }).unwrap();
    assert_eq!(errno(check(unsafe { libc::flock(f2.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) })), libc::EWOULDBLOCK);
    drop(f1);
    check(unsafe { libc::flock(f2.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }).unwrap();
}

fn flock_struct(typ: i32, start: i64, len: i64) -> libc::flock {
    // SAFETY: plain data; every field set below or zero.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = typ as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = start;
    fl.l_len = len;
    fl
}

#[test]
fn read_only_mount_and_helper() {
    require_fuse!();
    let pool = Pool::new(2, "64M");
    {
        let m = pool.mount(&[]);
        fs::write(m.path("kept"), b"kept").unwrap();
        m.unmount();
    }
    let m = pool.mount(&["ro"]);
    assert_eq!(fs::read(m.path("kept")).unwrap(), b"kept");
    assert_eq!(errno(File::create(m.path("new"))), libc::EROFS);
    assert_eq!(errno(fs::remove_file(m.path("kept"))), libc::EROFS);
    m.unmount();
    pool.fsck_clean();

    // mount(8) runs mount.fuse.hurricane POOL MOUNTPOINT -o OPTIONS.
    let helper = pool.tmp.path().join("mount.fuse.hurricane");
    std::os::unix::fs::symlink(BIN, &helper).unwrap();
    let out = cmd(s(&helper), &[s(&pool.dir), s(&pool.mnt), "-o", "rw,noatime,defaults,x-systemd.automount"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m = Mounted::attach(&pool.mnt);
    assert_eq!(fs::read(m.path("kept")).unwrap(), b"kept");
    m.unmount();
    let bad = cmd(s(&helper), &[s(&pool.dir), s(&pool.mnt), "-o", "bogus_option"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("bogus_option"));
    assert!(!is_fuse_mount(&pool.mnt));

    // Errors are reported, not hung on.
    let out = cmd(BIN, &["mount", s(&pool.tmp.path().join("nopool")), s(&pool.mnt)]);
    assert!(!out.status.success());
    let out = cmd(BIN, &["umount", s(&pool.mnt)]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("no FUSE"));
}

/// `cache=none` takes the kernel's page cache away from a file's handles
/// (those of files created under a directory with it too): every read
/// reaches the mount, the same bytes read again included, while a
/// page-cached file's repeated reads do not; shared mappings still work
/// and what they write is what the next read returns.
#[test]
fn cache_none_opens_bypass_the_page_cache() {
    require_fuse!();
    let pool = Pool::new(2, "256M");
    let m = pool.mount(&[]);
    fs::create_dir(m.path("direct")).unwrap();
    setxattr(&m.path("direct"), "user.hurricane.open", b"cache=none", 0).unwrap();
    let spec = getxattr(&m.path("direct"), "user.hurricane.open", 256).unwrap();
    assert_eq!(spec, b"cursor=shared,prefetch=adaptive,locks=none,cache=none");
    assert_eq!(errno(setxattr(&m.path("direct"), "user.hurricane.open", b"cache=sometimes", 0)), EINVAL);
    let body = data(1 << 20, 5);
    fs::write(m.path("direct/f"), &body).unwrap();
    fs::write(m.path("cached"), &body).unwrap();
    let reads = || stats_json(&m.path("")).ops.get("read").map_or(0, |o| o.count);
    let mut counts = Vec::new();
    for name in ["cached", "direct/f"] {
        assert_eq!(fs::read(m.path(name)).unwrap(), body, "{name}");
        let before = reads();
        for _ in 0..3 {
            assert_eq!(fs::read(m.path(name)).unwrap(), body, "{name}");
        }
        counts.push(reads() - before);
    }
    assert!(counts[1] >= 3 && counts[0] < counts[1], "reads reaching the mount, cached and cache=none: {counts:?}");

    // A shared mapping of a cache=none file.
    let (f, p) = map_shared(&m.path("direct/f"), 8192);
    // SAFETY: a fresh shared mapping of 8 KiB of an open file of 1 MiB,
    // written and synced through its own pointer, then unmapped.
    unsafe {
        let s = std::slice::from_raw_parts_mut(p.cast::<u8>(), 8192);
        assert_eq!(s, &body[..8192]);
        s[100..105].copy_from_slice(b"HELLO");
        assert_eq!(libc::msync(p, 8192, libc::MS_SYNC), 0, "msync: {}", std::io::Error::last_os_error());
        assert_eq!(libc::munmap(p, 8192), 0);
    }
    let mut want = body.clone();
    want[100..105].copy_from_slice(b"HELLO");
    assert_eq!(fs::read(m.path("direct/f")).unwrap(), want);
    drop(f);
    m.unmount();
    pool.fsck_clean();
}

/// A shared, writable mapping of the first `len` bytes of `p`, with the
/// descriptor it was made through.
fn map_shared(p: &Path, len: usize) -> (File, *mut libc::c_void) {
    let f = OpenOptions::new().read(true).write(true).open(p).unwrap();
    // SAFETY: a fresh mapping of an open file; the caller unmaps it.
    let m = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, f.as_raw_fd(), 0)
    };
    assert_ne!(m, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
    (f, m)
}

/// Write-only descriptors write past the page cache: a new file costs no
/// capability query before its first write, and a reader holding the
/// file's pages sees what such a descriptor wrote.
#[test]
fn write_only_opens_write_past_the_page_cache() {
    require_fuse!();
    let pool = Pool::new(2, "256M");
    let m = pool.mount(&[]);
    // A read of the statistics is a getxattr (or two) itself: what two
    // reads in a row differ by is that cost alone.
    let getxattrs = || stats_json(&m.path("")).ops.get("getxattr").map_or(0, |o| o.count);
    let g0 = getxattrs();
    let g1 = getxattrs();
    for i in 0..20 {
        fs::write(m.path(&format!("new{i}")), data(6000, i)).unwrap();
    }
    assert_eq!(getxattrs() - g1, g1 - g0, "capability queries for 20 new files");
    for i in 0..20 {
        assert_eq!(fs::read(m.path(&format!("new{i}"))).unwrap(), data(6000, i));
    }

    let body = data(64 << 10, 3);
    fs::write(m.path("shared"), &body).unwrap();
    let reader = File::open(m.path("shared")).unwrap();
    let mut seen = vec![0u8; body.len()];
    reader.read_exact_at(&mut seen, 0).unwrap();
    assert_eq!(seen, body);
    // The reader's pages are cached now; a write-only descriptor changes
    // a range inside them and past the end.
    let writer = OpenOptions::new().write(true).open(m.path("shared")).unwrap();
    writer.write_all_at(b"HELLO", 5000).unwrap();
    writer.write_all_at(b"TAIL", body.len() as u64).unwrap();
    let mut want = body.clone();
    want[5000..5005].copy_from_slice(b"HELLO");
    want.extend_from_slice(b"TAIL");
    let mut seen = vec![0u8; want.len()];
    reader.read_exact_at(&mut seen, 0).unwrap();
    assert!(seen == want, "the reader's cached pages kept the old data");
    // An appending write-only descriptor writes at the end the mount keeps.
    let mut app = OpenOptions::new().append(true).open(m.path("shared")).unwrap();
    app.write_all(b"MORE").unwrap();
    want.extend_from_slice(b"MORE");
    assert!(fs::read(m.path("shared")).unwrap() == want);
    drop((reader, writer, app));

    // A page another process dirtied through a shared mapping, not yet
    // written back, reaches the mount before a write-only descriptor's
    // write to the same page, whichever was opened first: neither change
    // is lost.
    for mapped_first in [true, false] {
        fs::write(m.path("mapped"), vec![b'.'; 8192]).unwrap();
        let map = || map_shared(&m.path("mapped"), 8192);
        let (mapping, w) = if mapped_first {
            let mapping = map();
            (mapping, OpenOptions::new().write(true).open(m.path("mapped")).unwrap())
        } else {
            let w = OpenOptions::new().write(true).open(m.path("mapped")).unwrap();
            (map(), w)
        };
        // SAFETY: byte 0 of the live 8 KiB mapping.
        unsafe { *mapping.1.cast::<u8>() = b'M' };
        w.write_all_at(b"WRITTEN", 100).unwrap();
        // SAFETY: the mapping made above, unmapped once.
        assert_eq!(unsafe { libc::munmap(mapping.1, 8192) }, 0);
        drop((mapping.0, w));
        let got = fs::read(m.path("mapped")).unwrap();
        assert_eq!((&got[..1], &got[100..107]), (&b"M"[..], &b"WRITTEN"[..]), "mapped first: {mapped_first}");
    }
    m.unmount();
    pool.fsck_clean();
}

/// Reads through the mount use the file's open composition (HFS 3.1):
/// `user.hurricane.open` when set on it or on a directory above it, else
/// the kernel's readahead; the policies fill the engine's cache ahead of a
/// sequential reader.
#[test]
fn open_policies_apply_to_mounted_reads() {
    require_fuse!();
    let pool = Pool::new(2, "256M");
    let m = pool.mount(&[]);
    let body = data(16 << 20, 11);
    fs::write(m.path("explicit"), &body).unwrap();
    fs::write(m.path("adaptive"), &body).unwrap();
    setxattr(&m.path("explicit"), "user.hurricane.open", b"prefetch=distance(d=8,a=4)", 0).unwrap();
    let spec = getxattr(&m.path("explicit"), "user.hurricane.open", 256).unwrap();
    assert!(String::from_utf8_lossy(&spec).contains("distance"), "{spec:?}");
    assert_eq!(errno(setxattr(&m.path("explicit"), "user.hurricane.open", b"prefetch=sideways", 0)), EINVAL);
    let prefetched = || -> (u64, u64) {
        let j = stats_json(&m.path(""));
        (j.cache.prefetched, j.cache.prefetch_used)
    };
    fs::write(m.path("plain"), &body).unwrap();
    setxattr(&m.path("adaptive"), "user.hurricane.open", b"prefetch=adaptive", 0).unwrap();
    // A directory's spec reaches the files beneath it, however deep.
    fs::create_dir_all(m.path("d/sub")).unwrap();
    setxattr(&m.path("d"), "user.hurricane.open", b"prefetch=distance(d=8,a=4)", 0).unwrap();
    fs::write(m.path("d/sub/inherited"), &body).unwrap();
    let mut last = prefetched();
    for name in ["explicit", "adaptive", "d/sub/inherited", "plain"] {
        // Drop the kernel's page cache so reads reach the mount.
        let _ = fs::write("/proc/sys/vm/drop_caches", "3\n");
        assert_eq!(fs::read(m.path(name)).unwrap(), body, "{name}: content");
        let now = prefetched();
        if name == "plain" {
            // Without a spec of its own the kernel's readahead is the prefetcher.
            assert_eq!(now.0, last.0, "{name}: the engine prefetched under the kernel's readahead");
        } else {
            assert!(now.0 > last.0 && now.1 > last.1, "{name}: no prefetch through the mount ({last:?} -> {now:?})");
        }
        last = now;
    }
    m.unmount();
    pool.fsck_clean();
}
