//! Hostile input through the FUSE mount, with real system calls: xattr
//! names and values past every limit, names at and past NAME_MAX, paths
//! deeper than PATH_MAX, LINK_MAX hard links, absurd layouts, a device
//! filled to its last block, and images truncated or overwritten while
//! unmounted. Each gets its errno (or a clear message), nothing committed
//! is lost, and the pool is fsck-clean afterwards.

// A test crate: a panic is how a test fails, so unwrap and expect are fine (and, until the rework of the mount's tests lands, unsafe blocks without SAFETY comments).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::undocumented_unsafe_blocks)]

mod fuse_util;

use fuse_util::*;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

fn setxattr(p: &Path, name: &[u8], value: &[u8], flags: i32) -> io::Result<()> {
    let (p, n) = (cpath(p), CString::new(name).expect("no NUL"));
    // SAFETY: valid C strings, a buffer of value.len() bytes.
    check(unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), flags) }).map(|_| ())
}

fn getxattr(p: &Path, name: &[u8]) -> io::Result<Vec<u8>> {
    let (p, n) = (cpath(p), CString::new(name).expect("no NUL"));
    let mut buf = vec![0u8; 70_000];
    // SAFETY: the buffer holds buf.len() bytes.
    let r = check_ssize(unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })?;
    buf.truncate(r);
    Ok(buf)
}

fn mkdirat(dir: &OwnedFd, name: &[u8]) -> io::Result<()> {
    let n = CString::new(name).expect("no NUL");
    // SAFETY: an open directory descriptor and a C string.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), n.as_ptr(), 0o755) }).map(|_| ())
}

/// Descriptors here are close-on-exec: the other tests of this binary start
/// mount servers meanwhile, and a server that inherited a descriptor into
/// this test's mount would keep it busy past its unmount.
fn openat_dir(dir: &OwnedFd, name: &[u8]) -> io::Result<OwnedFd> {
    let n = CString::new(name).expect("no NUL");
    // SAFETY: as above; the new descriptor is owned by the OwnedFd.
    let fd = check(unsafe {
        libc::openat(dir.as_raw_fd(), n.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC)
    })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn open_dir(p: &Path) -> OwnedFd {
    File::open(p).expect("open directory").into()
}

fn name_of(len: usize, c: u8) -> Vec<u8> {
    vec![c; len]
}

fn join(dir: &Path, name: &[u8]) -> std::path::PathBuf {
    dir.join(std::ffi::OsStr::from_bytes(name))
}

/// A small pool, mounted.
fn setup(size: &str) -> (Pool, Mounted) {
    let pool = Pool::new(3, size);
    let m = pool.mount(&[]);
    (pool, m)
}

/// Unmounts cleanly and checks the pool with `hurricane fsck`.
fn finish(pool: &Pool, m: Mounted) {
    m.unmount();
    pool.fsck_clean();
}

#[test]
fn xattrs_past_every_limit() {
    require_fuse!();
    let (pool, m) = setup("64M");
    let f = m.path("f");
    fs::write(&f, b"data").unwrap();
    let mut n255 = b"user.".to_vec();
    n255.resize(255, b'n');
    let mut n256 = n255.clone();
    n256.push(b'n');
    setxattr(&f, &n255, b"longest name", 0).unwrap();
    // The kernel refuses names past XATTR_NAME_MAX and values past XATTR_SIZE_MAX.
    assert_eq!(errno(setxattr(&f, &n256, b"v", 0)), libc::ERANGE);
    assert_eq!(errno(setxattr(&f, b"", b"v", 0)), libc::ERANGE);
    setxattr(&f, b"user.max", &vec![1u8; 65_536], 0).unwrap();
    assert_eq!(errno(setxattr(&f, b"user.over", &vec![1u8; 65_537], 0)), libc::E2BIG);
    // Namespaces the pool does not keep.
    assert_eq!(errno(setxattr(&f, b"bogus.name", b"v", 0)), libc::EOPNOTSUPP);
    // The engine's total per inode (1 MiB): past it, ENOSPC.
    let mut i = 0;
    let e = loop {
        match setxattr(&f, format!("user.fill{i}").as_bytes(), &vec![i as u8; 65_536], 0) {
            Ok(()) => i += 1,
            Err(e) => break e,
        }
        assert!(i < 64, "no total limit");
    };
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    assert_eq!(getxattr(&f, b"user.max").unwrap(), vec![1u8; 65_536]);
    assert_eq!(getxattr(&f, &n255).unwrap(), b"longest name");
    // Everything set survives an unmount and mount.
    m.unmount();
    let m = pool.mount(&[]);
    assert_eq!(getxattr(&m.path("f"), b"user.fill3").unwrap(), vec![3u8; 65_536]);
    assert_eq!(fs::read(m.path("f")).unwrap(), b"data");
    finish(&pool, m);
}

#[test]
fn names_at_and_past_name_max() {
    require_fuse!();
    let (pool, m) = setup("64M");
    let root = m.path("");
    let ok = name_of(255, b'a');
    fs::write(join(&root, &ok), b"255").unwrap();
    fs::create_dir(join(&root, &name_of(255, b'd'))).unwrap();
    std::os::unix::fs::symlink("t", join(&root, &name_of(255, b's'))).unwrap();
    for len in [256, 1000, 4000] {
        let bad = join(&root, &name_of(len, b'b'));
        assert_eq!(errno(fs::write(&bad, b"x")), libc::ENAMETOOLONG, "create of {len}");
        assert_eq!(errno(fs::create_dir(&bad)), libc::ENAMETOOLONG, "mkdir of {len}");
        assert_eq!(errno(std::os::unix::fs::symlink("t", &bad)), libc::ENAMETOOLONG, "symlink of {len}");
        assert_eq!(errno(fs::hard_link(join(&root, &ok), &bad)), libc::ENAMETOOLONG, "link of {len}");
        assert_eq!(errno(fs::rename(join(&root, &ok), &bad)), libc::ENAMETOOLONG, "rename of {len}");
        assert_eq!(errno(fs::metadata(&bad)), libc::ENAMETOOLONG, "lookup of {len}");
    }
    // Symlink targets: 4095 bytes is the most the pool keeps.
    std::os::unix::fs::symlink("x".repeat(4095), m.path("longlink")).unwrap();
    assert_eq!(fs::read_link(m.path("longlink")).unwrap().as_os_str().len(), 4095);
    assert_eq!(fs::read(join(&root, &ok)).unwrap(), b"255");
    assert_eq!(fs::read_dir(&root).unwrap().count(), 4);
    finish(&pool, m);
}

#[test]
fn paths_deeper_than_path_max() {
    require_fuse!();
    let (pool, m) = setup("64M");
    // 600 levels of 9-byte names (6 KB of path) through directory descriptors.
    let mut fd = open_dir(&m.path(""));
    for i in 0..600 {
        let name = format!("level{i:04}");
        mkdirat(&fd, name.as_bytes()).unwrap();
        fd = openat_dir(&fd, name.as_bytes()).unwrap();
    }
    let leaf = CString::new("leaf").unwrap();
    // SAFETY: an open directory descriptor and a C string.
    let lfd = check(unsafe {
        libc::openat(fd.as_raw_fd(), leaf.as_ptr(), libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC, 0o644)
    })
    .unwrap();
    // SAFETY: lfd was just opened and is owned here.
    let mut lf = unsafe { File::from_raw_fd(lfd) };
    lf.write_all(b"at the bottom").unwrap();
    lf.sync_all().unwrap();
    drop(lf);
    // The whole path is past PATH_MAX: the kernel refuses it by name.
    let full: String = (0..600).map(|i| format!("/level{i:04}")).collect();
    let long = format!("{}{full}/leaf", m.mnt.display());
    assert!(long.len() > 4096);
    assert_eq!(errno(fs::read(&long)), libc::ENAMETOOLONG);
    // Moving the top under its own bottom is refused.
    let top = m.path("level0000");
    let e = fs::rename(&top, format!("{}{}", m.mnt.display(), &full[..60 * 10]) + "/loop");
    assert_eq!(errno(e), libc::EINVAL);
    drop(fd);
    m.unmount();
    pool.fsck_clean();
    // After a remount the bottom is still reachable, a descriptor at a time.
    let m = pool.mount(&[]);
    let mut fd = open_dir(&m.path(""));
    for i in 0..600 {
        fd = openat_dir(&fd, format!("level{i:04}").as_bytes()).unwrap();
    }
    // SAFETY: as above.
    let lfd = check(unsafe { libc::openat(fd.as_raw_fd(), leaf.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) }).unwrap();
    // SAFETY: owned here.
    let lf = unsafe { File::from_raw_fd(lfd) };
    let mut buf = [0u8; 64];
    let n = lf.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..n], b"at the bottom");
    drop(lf);
    drop(fd);
    finish(&pool, m);
}

#[test]
fn hard_links_up_to_link_max() {
    require_fuse!();
    let (pool, m) = setup("64M");
    let target = m.path("target");
    fs::write(&target, b"linked").unwrap();
    fs::create_dir(m.path("l")).unwrap();
    let max = 65_000u64; // the engine's LINK_MAX
    for i in 1..max {
        fs::hard_link(&target, m.path(format!("l/{i}").as_str())).unwrap();
    }
    assert_eq!(fs::metadata(&target).unwrap().nlink(), max);
    assert_eq!(errno(fs::hard_link(&target, m.path("l/too-many"))), libc::EMLINK);
    fs::remove_file(m.path("l/1")).unwrap();
    fs::hard_link(&target, m.path("l/again")).unwrap();
    m.unmount();
    pool.fsck_clean();
    let m = pool.mount(&[]);
    assert_eq!(fs::metadata(m.path("target")).unwrap().nlink(), max);
    assert_eq!(fs::read(m.path("l/64999")).unwrap(), b"linked");
    finish(&pool, m);
}

#[test]
fn absurd_layouts_are_refused() {
    require_fuse!();
    let (pool, m) = setup("64M");
    let f = m.path("empty");
    File::create(&f).unwrap();
    let too_deep = "replicate[".repeat(17) + "extent" + &"]".repeat(17);
    let wide = format!("stripe[{}]", vec!["extent@0"; 300].join(","));
    for spec in [
        "stripe(width=257)".to_string(),
        "stripe(width=99999999999)".into(),
        "replicate(copies=17)".into(),
        too_deep,
        wide,
        // Under the kernel's 64 KiB value limit, over the depth limit.
        "stripe[".repeat(9_000),
        "extent@7".into(),
        "stripe(unit=3K,width=2)".into(),
        "nonsense".into(),
    ] {
        let e = setxattr(&f, b"user.hurricane.layout", spec.as_bytes(), 0);
        assert_eq!(errno(e), libc::EINVAL, "{spec:.60}");
        let e = setxattr(&m.path(""), b"user.hurricane.dir_layout", spec.as_bytes(), 0);
        assert_eq!(errno(e), libc::EINVAL, "dir {spec:.60}");
        // The CLI says why.
        let o = cmd(BIN, &["layout", "set", s(&f), &spec]);
        assert!(!o.status.success(), "{spec:.60}");
        assert!(!o.stderr.is_empty(), "{spec:.60}: no message");
    }
    // The file is still empty and usable; a sane layout still works.
    setxattr(&f, b"user.hurricane.layout", b"stripe(unit=64K,width=3)", 0).unwrap();
    fs::write(&f, b"ok").unwrap();
    finish(&pool, m);
}

#[test]
fn a_device_filled_to_its_last_block() {
    require_fuse!();
    let (pool, m) = setup("16M");
    fs::write(m.path("kept"), data(300_000, 1)).unwrap();
    File::open(m.path("kept")).unwrap().sync_all().unwrap();
    let mut big = OpenOptions::new().create(true).truncate(true).write(true).open(m.path("big")).unwrap();
    let chunk = data(1 << 20, 2);
    let mut written = 0usize;
    let e = loop {
        match big.write(&chunk) {
            Ok(n) => written += n,
            Err(e) => break e,
        }
        assert!(written < 200 << 20, "never filled");
    };
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    // Meta-data still works on the full pool, and so does fsync.
    fs::create_dir(m.path("still")).unwrap();
    fs::write(m.path("still/small"), b"tiny").unwrap();
    File::open(m.path("still/small")).unwrap().sync_all().unwrap();
    drop(big);
    assert_eq!(fs::read(m.path("kept")).unwrap(), data(300_000, 1));
    m.unmount();
    pool.fsck_clean();
    let m = pool.mount(&[]);
    assert_eq!(fs::read(m.path("kept")).unwrap(), data(300_000, 1));
    assert_eq!(fs::read(m.path("still/small")).unwrap(), b"tiny");
    // Space comes back once the removal commits (freed blocks wait for
    // their batch; device 1 is as full as device 0 now that it holds the
    // journal's mirror).
    fs::remove_file(m.path("big")).unwrap();
    File::open(m.path("kept")).unwrap().sync_all().unwrap();
    fs::write(m.path("after"), data(2 << 20, 3)).unwrap();
    finish(&pool, m);
}

/// The newest superblock of an image file and its meta-file's extents.
fn meta_extents(img: &[u8]) -> Vec<(u32, u64, u64)> {
    use hurricane::codec::Decoder;
    let sb = (0..2)
        .filter_map(|s| hurricane::pool::Superblock::decode(&img[s * 4096..(s + 1) * 4096], "img").ok().flatten())
        .max_by_key(|s| s.generation)
        .expect("a superblock");
    let meta = hurricane::blocks::Layout::decode(&mut Decoder::new(&sb.meta_layout, "meta")).expect("meta layout");
    let mut ext = Vec::new();
    meta.extents(&mut |d, s, l| ext.push((d, s, l)));
    ext
}

#[test]
fn images_truncated_or_overwritten_while_unmounted() {
    require_fuse!();
    let (pool, m) = setup("32M");
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/f"), data(200_000, 5)).unwrap();
    m.unmount();
    let img = |i: u32| pool.dir.join(format!("dev{i}.img"));

    // Truncated: the mount is refused, naming the device; nothing is mounted.
    let full = fs::metadata(img(1)).unwrap().len();
    OpenOptions::new().write(true).open(img(1)).unwrap().set_len(full / 2).unwrap();
    let o = cmd(BIN, &["mount", s(&pool.dir), s(&pool.mnt)]);
    assert!(!o.status.success());
    let msg = String::from_utf8_lossy(&o.stderr);
    assert!(msg.contains("dev1.img") && msg.contains("truncated"), "{msg}");
    assert!(!is_fuse_mount(&pool.mnt));
    let o = cmd(BIN, &["fsck", s(&pool.dir)]);
    assert!(!o.status.success(), "fsck of a truncated pool should fail");
    OpenOptions::new().write(true).open(img(1)).unwrap().set_len(full).unwrap();

    // Garbage over one copy of the meta-file (on device 0 or 1): mounts with everything.
    for victim in [0u32, 1] {
        let image = fs::read(img(0)).unwrap();
        let ext = meta_extents(&image);
        let f = OpenOptions::new().write(true).open(img(victim)).unwrap();
        for &(d, start, len) in ext.iter().filter(|e| e.0 == victim) {
            assert_eq!(d, victim);
            f.write_all_at(&data(len as usize * 4096, 9), start * 4096).unwrap();
        }
        drop(f);
        let m = pool.mount(&[]);
        assert_eq!(fs::read(m.path("d/f")).unwrap(), data(200_000, 5), "meta copy {victim} destroyed");
        m.unmount();
        pool.fsck_clean();
    }

    // Garbage over the superblocks of a whole device: the device is taken
    // as faulted, the pool mounts degraded, and status names it.
    let f = OpenOptions::new().write(true).open(img(2)).unwrap();
    let saved = {
        let mut b = vec![0u8; 8192];
        File::open(img(2)).unwrap().read_exact_at(&mut b, 0).unwrap();
        b
    };
    f.write_all_at(&data(8192, 11), 0).unwrap();
    let m = pool.mount(&[]);
    let o = cmd(BIN, &["status", s(&pool.mnt)]);
    assert!(!o.status.success(), "status of a pool with a faulted device");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("dev2.img") && out.contains("faulted"), "{out}");
    m.unmount();
    f.write_all_at(&saved, 0).unwrap();
    drop(f);
    let m = pool.mount(&[]);
    assert_eq!(fs::read(m.path("d/f")).unwrap(), data(200_000, 5));
    finish(&pool, m);
}
