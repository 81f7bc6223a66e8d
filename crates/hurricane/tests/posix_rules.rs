//! POSIX rules that the engine enforces for every front end: the native
//! API and the mount call the same checks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use hurricane::{Creds, SetAttr};

fn errno(r: hurricane::Result<impl Sized>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.errno(),
    }
}

fn chown(uid: Option<u32>, gid: Option<u32>) -> SetAttr {
    SetAttr { uid, gid, ..Default::default() }
}

/// A non-owner may not chown or chgrp, even to the owner and group the
/// file has (EPERM, as on Linux), for every file type; the owner may.
#[test]
fn chown_by_a_non_owner_naming_the_current_owner_fails() {
    let p = MemPool::new(1, 32 * MB);
    let fs = p.open().unwrap();
    let root = Creds::root();
    let alice = Creds::user(1000, 1000);
    let bob = Creds { uid: 1001, gid: 1001, groups: vec![1000] };
    let top = fs.mkdir(&root, 1, b"tmp", 0o1777).unwrap().ino;
    let mut inos = vec![
        fs.mknod(&alice, top, b"f", libc::S_IFREG | 0o644, 0, None, None).unwrap().ino,
        fs.mkdir(&alice, top, b"d", 0o755).unwrap().ino,
        fs.symlink(&alice, top, b"l", b"f").unwrap().ino,
        fs.mknod(&alice, top, b"p", libc::S_IFIFO | 0o644, 0, None, None).unwrap().ino,
        fs.mknod(&alice, top, b"s", libc::S_IFSOCK | 0o644, 0, None, None).unwrap().ino,
    ];
    inos.push(fs.mknod(&root, top, b"c", libc::S_IFCHR | 0o644, 0x103, None, None).unwrap().ino);
    fs.setattr(&root, inos[5], &chown(Some(1000), Some(1000))).unwrap();
    for &ino in &inos {
        let kind = fs.getattr(ino).unwrap().mode & libc::S_IFMT;
        for s in [chown(Some(1000), None), chown(None, Some(1000)), chown(Some(1000), Some(1000))] {
            assert_eq!(errno(fs.setattr(&bob, ino, &s)), libc::EPERM, "non-owner {s:?} on kind {kind:o}");
            fs.setattr(&alice, ino, &s).unwrap();
        }
        // Nothing named: nothing to check (Linux lets chown(-1, -1) through).
        fs.setattr(&bob, ino, &chown(None, None)).unwrap();
        // The owner may not give the file away or pick another's group.
        assert_eq!(errno(fs.setattr(&alice, ino, &chown(Some(1001), None))), libc::EPERM);
        assert_eq!(errno(fs.setattr(&alice, ino, &chown(None, Some(1001)))), libc::EPERM);
        let a = fs.getattr(ino).unwrap();
        assert_eq!((a.uid, a.gid), (1000, 1000));
    }
}

fn mode_of(fs: &hurricane::Fs, ino: u64) -> u32 {
    fs.getattr(ino).unwrap().mode & 0o7777
}

/// open(2)'s rules, as `Fs::open_as` applies them for the mount and the
/// native API alike.
#[test]
fn open_rules() {
    let p = MemPool::new(1, 32 * MB);
    let fs = p.open().unwrap();
    let root = Creds::root();
    let alice = Creds::user(1000, 1000);
    let bob = Creds::user(1001, 1001);
    let top = fs.mkdir(&root, 1, b"tmp", 0o1777).unwrap().ino;
    let mk = |name: &[u8], mode: u32| {
        let ino = fs.mknod(&alice, top, name, libc::S_IFREG | 0o644, 0, None, None).unwrap().ino;
        fs.write(ino, 0, b"data").unwrap();
        fs.setattr(&alice, ino, &SetAttr { mode: Some(mode), ..Default::default() }).unwrap();
        ino
    };
    use libc::{O_NOATIME, O_RDONLY, O_RDWR, O_TRUNC, O_WRONLY};
    let exec = hurricane::fs::O_EXEC_OPEN;

    // Access modes against the mode bits.
    let f = mk(b"f", 0o640);
    fs.open_as(&alice, f, O_RDWR).unwrap();
    assert_eq!(errno(fs.open_as(&bob, f, O_RDONLY)), libc::EACCES);
    let g = mk(b"g", 0o644);
    fs.open_as(&bob, g, O_RDONLY).unwrap();
    assert_eq!(errno(fs.open_as(&bob, g, O_WRONLY)), libc::EACCES);
    // O_TRUNC needs write permission even with O_RDONLY, and then truncates nothing.
    assert_eq!(errno(fs.open_as(&bob, g, O_RDONLY | O_TRUNC)), libc::EACCES);
    assert_eq!(fs.getattr(g).unwrap().size, 4);

    // O_NOATIME: the owner or root only.
    assert_eq!(errno(fs.open_as(&bob, g, O_RDONLY | O_NOATIME)), libc::EPERM);
    fs.open_as(&alice, g, O_RDONLY | O_NOATIME).unwrap();
    fs.open_as(&root, g, O_RDONLY | O_NOATIME).unwrap();

    // Execve opens need the caller's own x bit, not read.
    let x = mk(b"x", 0o711);
    fs.open_as(&bob, x, O_RDONLY | exec).unwrap();
    assert_eq!(errno(fs.open_as(&bob, x, O_RDONLY)), libc::EACCES, "no read bit for others");
    let y = mk(b"y", 0o744);
    fs.open_as(&alice, y, O_RDONLY | exec).unwrap();
    assert_eq!(errno(fs.open_as(&bob, y, O_RDONLY | exec)), libc::EACCES, "x for the owner only");
    fs.open_as(&root, y, O_RDONLY | exec).unwrap();
    let z = mk(b"z", 0o644);
    assert_eq!(errno(fs.open_as(&root, z, O_RDONLY | exec)), libc::EACCES, "root needs some x bit");

    // Directories: no writing open, no O_TRUNC.
    let d = fs.mkdir(&alice, top, b"d", 0o777).unwrap().ino;
    fs.open_as(&alice, d, O_RDONLY).unwrap();
    assert_eq!(errno(fs.open_as(&alice, d, O_WRONLY)), libc::EISDIR);
    assert_eq!(errno(fs.open_as(&alice, d, O_RDONLY | O_TRUNC)), libc::EISDIR);

    // O_TRUNC truncates; by an unprivileged caller it clears set-user-id,
    // and set-group-id of a group-executable file.
    let s1 = mk(b"s1", 0o6777);
    fs.open_as(&bob, s1, O_WRONLY | O_TRUNC).unwrap();
    assert_eq!(fs.getattr(s1).unwrap().size, 0);
    assert_eq!(mode_of(&fs, s1), 0o777);
    let s2 = mk(b"s2", 0o6767);
    fs.open_as(&bob, s2, O_WRONLY | O_TRUNC).unwrap();
    assert_eq!(mode_of(&fs, s2), 0o2767, "set-group-id of a file no group may execute stays");
    let s3 = mk(b"s3", 0o6777);
    fs.open_as(&root, s3, O_WRONLY | O_TRUNC).unwrap();
    assert_eq!(fs.getattr(s3).unwrap().size, 0);
    assert_eq!(mode_of(&fs, s3), 0o6777, "root keeps set-id bits");

    // The native API opens through the same rules.
    let n = mk(b"n", 0o644);
    let mut o = hurricane::OpenOptions::new();
    o.write(true).truncate(true);
    o.open(&fs, "/tmp/n").unwrap();
    assert_eq!(fs.getattr(n).unwrap().size, 0);
    assert_eq!(errno(hurricane::OpenOptions::new().write(true).open(&fs, "/tmp/d")), libc::EISDIR);
}

/// `fallocate` COLLAPSE_RANGE and INSERT_RANGE through the native API (the
/// kernel's FUSE passes neither): whole blocks move on extents (with their
/// checksums) and on stripes by whole rows; other layouts and bad ranges
/// are refused with nothing changed; the result survives a reopen.
#[test]
fn collapse_and_insert_ranges() {
    const COLLAPSE: i32 = libc::FALLOC_FL_COLLAPSE_RANGE;
    const INSERT: i32 = libc::FALLOC_FL_INSERT_RANGE;
    let p = MemPool::new(3, 32 * MB);
    let fs = p.open().unwrap();
    let mut models = Vec::new();
    for (path, layout) in [("/e", "extent@0"), ("/s", "stripe(unit=16K)[extent@1,extent@2]")] {
        let mut m = pattern(7, 1 << 20);
        m.truncate(1_000_000); // a partial last block
        fs.write_file(path, &m, Some(layout)).unwrap();
        let ino = fs.resolve(path).unwrap();
        // 32 KiB: a whole row of the stripe, 8 blocks of the extent.
        fs.fallocate(ino, 64 << 10, 32 << 10, COLLAPSE).unwrap();
        m.drain(64 << 10..96 << 10);
        fs.fallocate(ino, 128 << 10, 64 << 10, INSERT).unwrap();
        m.splice(128 << 10..128 << 10, std::iter::repeat_n(0u8, 64 << 10));
        assert_eq!(fs.stat(path).unwrap().size, m.len() as u64);
        assert!(fs.read_file(path).unwrap() == m, "{path}");
        // Bad ranges: not whole blocks, reaching the end, past the end.
        for (off, len, mode, want) in [
            (4097u64, 4096u64, COLLAPSE, libc::EINVAL),
            (0, 1000, INSERT, libc::EINVAL),
            ((m.len() as u64 / 4096 - 1) * 4096, 8192, COLLAPSE, libc::EINVAL),
            (m.len() as u64 + 4096, 4096, INSERT, libc::EINVAL),
        ] {
            assert_eq!(fs.fallocate(ino, off, len, mode).unwrap_err().errno(), want, "{path} {off}+{len}");
        }
        models.push((path, m));
    }
    // A stripe moves by whole rows only; a mirror not at all.
    let s = fs.resolve("/s").unwrap();
    assert_eq!(fs.fallocate(s, 0, 16 << 10, COLLAPSE).unwrap_err().errno(), libc::EOPNOTSUPP);
    fs.write_file("/r", &pattern(2, 200_000), Some("replicate[extent@0,extent@1]")).unwrap();
    let r = fs.resolve("/r").unwrap();
    assert_eq!(fs.fallocate(r, 0, 4096, COLLAPSE).unwrap_err().errno(), libc::EOPNOTSUPP);
    assert_eq!(fs.read_file("/r").unwrap(), pattern(2, 200_000));
    for (path, m) in &models {
        assert!(fs.read_file(path).unwrap() == *m, "{path} after refusals");
    }
    fs.sync().unwrap();
    let report = hurricane::fsck::check(&fs, false, &mut |_, _, _| {}).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    drop(fs);
    // Replayed from the journal after a power cut.
    let fs = p.crash(hurricane::device::CrashMode::KeepAll).open().unwrap();
    for (path, m) in &models {
        assert!(fs.read_file(path).unwrap() == *m, "{path} after a reopen");
    }
    let report = hurricane::fsck::check(&fs, false, &mut |_, _, _| {}).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
}
