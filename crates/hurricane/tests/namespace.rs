//! Namespace semantics through the native API.

mod common;
use common::*;
use hurricane::{Creds, Error, RenameFlags, SetAttr};
use std::io::Write;

fn errno(r: hurricane::Result<impl Sized>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.errno(),
    }
}

#[test]
fn create_lookup_readdir_and_names() {
    let p = MemPool::new(2, 32 * MB);
    let fs = p.open().unwrap();
    fs.mkdir_all("/a/b/c", 0o755).unwrap();
    fs.write_file("/a/b/c/f.txt", b"hello", None).unwrap();
    assert_eq!(fs.read_file("/a/b/c/f.txt").unwrap(), b"hello");
    let names: Vec<_> = fs.read_dir("/a/b").unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, vec![b"c".to_vec()]);
    assert_eq!(errno(fs.mkdir_path("/a", 0o755)), libc::EEXIST);
    assert_eq!(errno(fs.stat("/nope")), libc::ENOENT);
    assert_eq!(errno(fs.stat("/a/b/c/f.txt/x")), libc::ENOTDIR);
    let long = format!("/{}", "x".repeat(256));
    assert_eq!(errno(fs.write_file(&long, b"", None)), libc::ENAMETOOLONG);
    let ok = format!("/{}", "y".repeat(255));
    fs.write_file(&ok, b"z", None).unwrap();
    // Directory link counts: 2 + subdirectories.
    assert_eq!(fs.stat("/a").unwrap().nlink, 3);
    assert_eq!(fs.stat("/a/b/c").unwrap().nlink, 2);
    assert_eq!(errno(fs.remove("/a/b")), libc::ENOTEMPTY);
    fs.remove("/a/b/c/f.txt").unwrap();
    fs.remove("/a/b/c").unwrap();
    assert_eq!(fs.stat("/a/b").unwrap().nlink, 2);
}

#[test]
fn rename_cases() {
    let p = MemPool::new(1, 32 * MB);
    let fs = p.open().unwrap();
    let root = Creds::root();
    fs.mkdir_all("/d1/sub", 0o755).unwrap();
    fs.mkdir_all("/d2", 0o755).unwrap();
    fs.write_file("/d1/a", b"A", None).unwrap();
    fs.write_file("/d2/b", b"B", None).unwrap();
    // Over an existing file, across directories: atomic replace.
    fs.rename_path("/d1/a", "/d2/b").unwrap();
    assert_eq!(fs.read_file("/d2/b").unwrap(), b"A");
    assert_eq!(errno(fs.stat("/d1/a")), libc::ENOENT);
    // A directory may not move beneath itself.
    assert_eq!(errno(fs.rename_path("/d1", "/d1/sub/x")), libc::EINVAL);
    // Directory across parents fixes link counts and "..".
    fs.rename_path("/d1/sub", "/d2/sub").unwrap();
    assert_eq!(fs.stat("/d1").unwrap().nlink, 2);
    assert_eq!(fs.stat("/d2").unwrap().nlink, 3);
    let sub = fs.resolve("/d2/sub").unwrap();
    let d2 = fs.resolve("/d2").unwrap();
    assert_eq!(fs.lookup(&root, sub, b"..").unwrap().ino, d2);
    // File over directory and directory over file are refused.
    fs.write_file("/d2/f", b"f", None).unwrap();
    assert_eq!(errno(fs.rename_path("/d2/f", "/d2/sub")), libc::EISDIR);
    assert_eq!(errno(fs.rename_path("/d2/sub", "/d2/f")), libc::ENOTDIR);
    // Directory over an empty directory replaces it; over a non-empty one fails.
    fs.mkdir_path("/d1/empty", 0o755).unwrap();
    fs.rename_path("/d2/sub", "/d1/empty").unwrap();
    fs.write_file("/d1/empty/in", b"", None).unwrap();
    fs.mkdir_path("/d2/other", 0o755).unwrap();
    assert_eq!(errno(fs.rename_path("/d2/other", "/d1/empty")), libc::ENOTEMPTY);
    // NOREPLACE and EXCHANGE.
    let (d1, d2) = (fs.resolve("/d1").unwrap(), fs.resolve("/d2").unwrap());
    fs.write_file("/d1/x", b"X", None).unwrap();
    fs.write_file("/d2/y", b"Y", None).unwrap();
    let nr = RenameFlags { noreplace: true, exchange: false, ..Default::default() };
    assert_eq!(errno(fs.rename(&root, d1, b"x", d2, b"y", nr)), libc::EEXIST);
    let ex = RenameFlags { noreplace: false, exchange: true, ..Default::default() };
    fs.rename(&root, d1, b"x", d2, b"y", ex).unwrap();
    assert_eq!(fs.read_file("/d1/x").unwrap(), b"Y");
    assert_eq!(fs.read_file("/d2/y").unwrap(), b"X");
    assert_eq!(errno(fs.rename(&root, d1, b"x", d2, b"missing", ex)), libc::ENOENT);
    // Rename onto another link of the same file does nothing.
    fs.hard_link("/d1/x", "/d1/x2").unwrap();
    fs.rename_path("/d1/x", "/d1/x2").unwrap();
    assert_eq!(fs.read_file("/d1/x").unwrap(), b"Y");
    assert_eq!(fs.stat("/d1/x").unwrap().nlink, 2);
    // Linux's order of errors: a target that must not exist (or must)
    // is reported before a move beneath itself, and NOREPLACE refuses a
    // target that is another link of the source.
    assert_eq!(errno(fs.rename(&root, d1, b"x", d1, b"x2", nr)), libc::EEXIST);
    let (top, below) = (fs.resolve("/").unwrap(), fs.resolve("/d1/empty").unwrap());
    assert_eq!(errno(fs.rename(&root, top, b"d1", below, b"missing", ex)), libc::ENOENT);
    assert_eq!(errno(fs.rename(&root, top, b"d1", below, b"in", nr)), libc::EEXIST);
    assert_eq!(errno(fs.rename(&root, top, b"d1", below, b"new", RenameFlags::default())), libc::EINVAL);
}

#[test]
fn hard_links_symlinks_and_open_unlinked_files() {
    let p = MemPool::new(2, 32 * MB);
    let fs = p.open().unwrap();
    fs.write_file("/f", &pattern(1, 100_000), None).unwrap();
    fs.hard_link("/f", "/g").unwrap();
    assert_eq!(fs.stat("/f").unwrap().nlink, 2);
    assert_eq!(fs.stat("/f").unwrap().ino, fs.stat("/g").unwrap().ino);
    fs.mkdir_path("/d", 0o755).unwrap();
    assert_eq!(errno(fs.hard_link("/d", "/d2")), libc::EPERM);
    // Over an existing name, the name is reported first, as on Linux.
    assert_eq!(errno(fs.hard_link("/d", "/g")), libc::EEXIST);
    fs.remove("/f").unwrap();
    assert_eq!(fs.read_file("/g").unwrap(), pattern(1, 100_000));
    assert_eq!(fs.stat("/g").unwrap().nlink, 1);

    fs.symlink_path("/g", "/s").unwrap();
    assert_eq!(fs.read_file("/s").unwrap(), pattern(1, 100_000));
    assert!(fs.lstat("/s").unwrap().is_symlink());
    fs.symlink_path("/loop2", "/loop1").unwrap();
    fs.symlink_path("/loop1", "/loop2").unwrap();
    assert_eq!(errno(fs.stat("/loop1")), libc::ELOOP);

    // An unlinked file stays readable while open, and its space returns on close.
    let free0 = fs.statfs().bfree;
    let f = fs.open_file("/g").unwrap();
    fs.remove("/g").unwrap();
    assert_eq!(errno(fs.stat("/g")), libc::ENOENT);
    let mut buf = vec![0u8; 100_000];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 100_000);
    assert_eq!(buf, pattern(1, 100_000));
    drop(f);
    fs.sync().unwrap();
    assert!(fs.statfs().bfree > free0, "space of the unlinked file came back");
}

#[test]
fn permissions_sticky_and_setgid() {
    let p = MemPool::new(1, 32 * MB);
    let fs = p.open().unwrap();
    let root = Creds::root();
    let alice = Creds::user(1000, 1000);
    let bob = Creds::user(1001, 1001);
    let top = fs.mkdir(&root, 1, b"tmp", 0o1777).unwrap().ino;
    let priv_ = fs.mkdir(&root, 1, b"private", 0o700).unwrap().ino;
    assert_eq!(errno(fs.lookup(&alice, priv_, b"x")), libc::EACCES);
    assert_eq!(errno(fs.mknod(&alice, priv_, b"x", libc::S_IFREG | 0o644, 0, None, None)), libc::EACCES);
    let a = fs.mknod(&alice, top, b"a", libc::S_IFREG | 0o644, 0, None, None).unwrap();
    assert_eq!(a.uid, 1000);
    // Sticky: bob cannot remove or rename alice's file (EPERM, as on Linux).
    assert_eq!(errno(fs.unlink(&bob, top, b"a")), libc::EPERM);
    assert_eq!(errno(fs.rename(&bob, top, b"a", top, b"b", RenameFlags::default())), libc::EPERM);
    fs.unlink(&alice, top, b"a").unwrap();
    // chmod/chown rules.
    let f = fs.mknod(&alice, top, b"f", libc::S_IFREG | 0o644, 0, None, None).unwrap().ino;
    assert_eq!(errno(fs.setattr(&bob, f, &SetAttr { mode: Some(0o777), ..Default::default() })), libc::EPERM);
    assert_eq!(errno(fs.setattr(&alice, f, &SetAttr { uid: Some(0), ..Default::default() })), libc::EPERM);
    fs.setattr(&alice, f, &SetAttr { mode: Some(0o600), ..Default::default() }).unwrap();
    assert_eq!(errno(fs.access(&bob, f, 4)), libc::EACCES);
    // Supplementary groups count.
    fs.setattr(&root, f, &SetAttr { gid: Some(50), mode: Some(0o640), ..Default::default() }).unwrap();
    let carol = Creds { uid: 1002, gid: 1002, groups: vec![50] };
    fs.access(&carol, f, 4).unwrap();
    // setgid directories hand down their group.
    let sg = fs.mkdir(&root, 1, b"sg", 0o2777).unwrap().ino;
    fs.setattr(&root, sg, &SetAttr { gid: Some(77), ..Default::default() }).unwrap();
    let inner = fs.mkdir(&alice, sg, b"inner", 0o755).unwrap();
    assert_eq!(inner.gid, 77);
    assert_ne!(inner.mode & libc::S_ISGID, 0);
    let file = fs.mknod(&alice, sg, b"file", libc::S_IFREG | 0o644, 0, None, None).unwrap();
    assert_eq!(file.gid, 77);
}

#[test]
fn sparse_truncate_xattrs_and_times() {
    let p = MemPool::new(3, 32 * MB);
    let fs = p.open().unwrap();
    let root = Creds::root();
    let mut f = fs.create("/sparse", Some("stripe(unit=64K,width=3)")).unwrap();
    f.write_all_at(b"tail", 10 * MB).unwrap();
    let a = f.metadata().unwrap();
    assert_eq!(a.size, 10 * MB + 4);
    assert!(a.blocks <= 16, "a hole costs nothing: {} blocks", a.blocks);
    let mut buf = vec![1u8; 8192];
    f.read_at(&mut buf, 5 * MB).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
    assert_eq!(fs.seek_data_hole(f.ino(), 0, true).unwrap(), Some(10 * MB));
    assert_eq!(fs.seek_data_hole(f.ino(), 0, false).unwrap(), Some(0));
    // Shrink to mid-block, grow again: the cut bytes read as zeros.
    f.write_all_at(&[9u8; 10000], 0).unwrap();
    f.set_len(5000).unwrap();
    f.set_len(20000).unwrap();
    let mut b2 = vec![7u8; 20000];
    f.read_at(&mut b2, 0).unwrap();
    assert!(b2[..5000].iter().all(|&b| b == 9));
    assert!(b2[5000..].iter().all(|&b| b == 0));
    // Extended attributes.
    let ino = f.ino();
    fs.setxattr(&root, ino, b"user.k", b"v", 0).unwrap();
    assert_eq!(fs.getxattr(&root, ino, b"user.k").unwrap(), b"v");
    assert_eq!(errno(fs.setxattr(&root, ino, b"user.k", b"w", 1)), libc::EEXIST);
    assert_eq!(errno(fs.setxattr(&root, ino, b"user.none", b"w", 2)), libc::ENODATA);
    assert_eq!(errno(fs.setxattr(&root, ino, b"user.big", &vec![0u8; 70_000], 0)), libc::EFBIG);
    assert_eq!(fs.listxattr(&root, ino).unwrap(), vec![b"user.k".to_vec()]);
    fs.removexattr(&root, ino, b"user.k").unwrap();
    assert_eq!(errno(fs.getxattr(&root, ino, b"user.k")), libc::ENODATA);
    // Explicit times.
    let a = fs.setattr(&root, ino, &SetAttr { mtime: Some(Some(1_000_000_000)), ..Default::default() }).unwrap();
    assert_eq!(a.mtime, 1_000_000_000);
}

#[test]
fn layouts_are_per_file_and_inherited() {
    let p = MemPool::new(4, 32 * MB);
    let fs = p.open().unwrap();
    let root = Creds::root();
    fs.mkdir_path("/striped", 0o755).unwrap();
    let d = fs.resolve("/striped").unwrap();
    fs.dir_layout_set(&root, d, "stripe(unit=64K,width=2)").unwrap();
    fs.write_file("/striped/f", &pattern(3, 300_000), None).unwrap();
    let l = fs.layout_of("/striped/f").unwrap();
    // The pool checksums by default: a checksum block above every leaf.
    assert!(l.starts_with("stripe(unit=64K)[checksum[extent@"), "{l}");
    // Subdirectories inherit the default too.
    fs.mkdir_path("/striped/sub", 0o755).unwrap();
    fs.write_file("/striped/sub/g", b"x", None).unwrap();
    assert!(fs.layout_of("/striped/sub/g").unwrap().starts_with("stripe(unit=64K)"));
    // A file with data moves to a new layout (migrated); an empty one takes it.
    fs.set_layout("/striped/f", "extent@0").unwrap();
    assert_eq!(fs.layout_of("/striped/f").unwrap(), "checksum[extent@0]");
    assert_eq!(fs.read_file("/striped/f").unwrap(), pattern(3, 300_000));
    fs.write_file("/e", b"", None).unwrap();
    fs.set_layout("/e", "replicate[stripe(width=2),stripe(width=2)]").unwrap();
    let canon = fs.layout_of("/e").unwrap();
    fs.write_file("/e2", b"", None).unwrap();
    fs.set_layout("/e2", &canon).unwrap();
    assert_eq!(fs.layout_of("/e2").unwrap(), canon);
    // Bad specs are refused with a message naming the problem.
    match fs.set_layout("/e2", "strpe[extent@0]") {
        Err(Error::Layout(m)) => assert!(m.contains("strpe"), "{m}"),
        other => panic!("expected a layout error, got {:?}", other.map(|_| ())),
    }
    assert_eq!(errno(fs.set_layout("/e2", "extent@9")), libc::EINVAL);
    // Inline files move to the pool default when they outgrow it.
    fs.write_file("/small", b"", Some("inline")).unwrap();
    fs.write_file("/small", b"tiny", None).unwrap();
    let mut f = fs.create("/grow", Some("inline")).unwrap();
    f.write_all_at(b"abc", 0).unwrap();
    assert_eq!(f.layout().unwrap(), "inline");
    f.write_all_at(&pattern(5, 50_000), 3).unwrap();
    assert_ne!(f.layout().unwrap(), "inline");
    let mut want = b"abc".to_vec();
    want.extend(pattern(5, 50_000));
    assert_eq!(fs.read_file("/grow").unwrap(), want);
}

#[test]
fn many_threads_create_and_write() {
    let p = MemPool::new(4, 64 * MB);
    let fs = p.open().unwrap();
    let shared = fs.create("/shared", None).unwrap();
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let fs = fs.clone();
            s.spawn(move || {
                let dir = format!("/t{t}");
                fs.mkdir_path(&dir, 0o755).unwrap();
                for i in 0..50u64 {
                    fs.write_file(&format!("{dir}/f{i}"), &pattern(t * 1000 + i, 3000 + i as usize * 7), None).unwrap();
                }
            });
        }
        // One shared file written in disjoint whole-block ranges by 4 threads.
        let shared = &shared;
        for t in 0..4u64 {
            s.spawn(move || {
                for k in 0..16u64 {
                    shared.write_at(&pattern(t * 100 + k, 65536), (k * 4 + t) * 65536).unwrap();
                }
            });
        }
    });
    fs.sync().unwrap();
    for t in 0..8u64 {
        for i in 0..50u64 {
            assert_eq!(fs.read_file(&format!("/t{t}/f{i}")).unwrap(), pattern(t * 1000 + i, 3000 + i as usize * 7));
        }
    }
    let data = fs.read_file("/shared").unwrap();
    for t in 0..4u64 {
        for k in 0..16u64 {
            let o = ((k * 4 + t) * 65536) as usize;
            assert_eq!(&data[o..o + 65536], &pattern(t * 100 + k, 65536)[..]);
        }
    }
}

/// Layouts that leave devices to the allocator land on the device with the
/// most free space at creation time, also when earlier creations resolved
/// the same spec while the devices ranked otherwise.
#[test]
fn unplaced_layouts_follow_free_space() {
    let p = MemPool::new(3, 64 * MB);
    let fs = p.open().unwrap();
    for round in 0..6 {
        let info = fs.pool_info();
        let best = (0..info.devices).max_by_key(|&d| (info.free_blocks[d as usize], std::cmp::Reverse(d))).unwrap();
        let path = format!("/f{round}");
        let mut f = fs.create(&path, Some("extent")).unwrap();
        assert_eq!(fs.layout_of(&path).unwrap(), format!("checksum[extent@{best}]"), "round {round}");
        // Enough data that this device falls behind the others.
        f.write_all(&pattern(round, 6 * MB as usize)).unwrap();
        f.sync_all().unwrap();
    }
    // Every device was chosen at some point.
    let used: std::collections::BTreeSet<String> = (0..6).map(|r| fs.layout_of(&format!("/f{r}")).unwrap()).collect();
    assert_eq!(used.len(), 3, "{used:?}");
}

/// RENAME_WHITEOUT (overlay file systems' upper layers): the source's name
/// is left holding a whiteout, a character device 0:0 owned by the caller,
/// made in the same atomic group as the move; with EXCHANGE it is refused.
#[test]
fn rename_with_whiteout_leaves_a_whiteout_in_the_source_place() {
    let p = MemPool::new(1, 32 * MB);
    let fs = p.open().unwrap();
    let root = Creds::root();
    fs.mkdir_all("/a/sub", 0o755).unwrap();
    fs.mkdir_all("/b", 0o755).unwrap();
    fs.write_file("/a/f", b"F", None).unwrap();
    fs.write_file("/b/old", b"O", None).unwrap();
    let (a, b) = (fs.resolve("/a").unwrap(), fs.resolve("/b").unwrap());
    let f = fs.stat("/a/f").unwrap();
    let wo = RenameFlags { whiteout: true, ..Default::default() };
    let ex = RenameFlags { exchange: true, whiteout: true, ..Default::default() };
    assert_eq!(errno(fs.rename(&root, a, b"f", b, b"old", ex)), libc::EINVAL);
    // Over an existing file, across directories.
    fs.rename(&root, a, b"f", b, b"old", wo).unwrap();
    assert_eq!(fs.read_file("/b/old").unwrap(), b"F");
    assert_eq!(fs.stat("/b/old").unwrap().ino, f.ino);
    let is_whiteout = |path: &str| {
        let w = fs.lstat(path).unwrap();
        assert_eq!(w.mode, libc::S_IFCHR, "{path}: mode {:o}", w.mode);
        assert_eq!((w.rdev, w.nlink, w.uid), (0, 1, 0), "{path}");
        w.ino
    };
    let w1 = is_whiteout("/a/f");
    assert_ne!(w1, f.ino);
    // A directory, within its parent, with NOREPLACE.
    let nr = RenameFlags { noreplace: true, whiteout: true, ..Default::default() };
    fs.rename(&root, a, b"sub", a, b"moved", nr).unwrap();
    is_whiteout("/a/sub");
    assert!(fs.lstat("/a/moved").unwrap().is_dir());
    assert_eq!(fs.stat("/a").unwrap().nlink, 3);
    assert_eq!(errno(fs.rename(&root, a, b"moved", a, b"f", nr)), libc::EEXIST);
    // A whiteout is removed like any node, and the group survives a crash.
    fs.sync().unwrap();
    let c = p.crash(hurricane::device::CrashMode::DropAll);
    let fs = c.open().unwrap();
    assert_eq!(fs.lstat("/a/f").unwrap().ino, w1);
    fs.remove("/a/f").unwrap();
    fs.remove("/a/sub").unwrap();
    let names: Vec<_> = fs.read_dir("/a").unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, vec![b"moved".to_vec()]);
}

/// An unnamed file (O_TMPFILE): made open once with no links, in no
/// listing; `link_unnamed` names it (a plain `link` refuses a file with no
/// links); unnamed at its last close it is freed. One left open by a crash
/// is freed by the next open, from the journal alone (no checkpoint) or
/// from a checkpoint's orphans.
#[test]
fn unnamed_files_are_orphans_until_linked() {
    let p = MemPool::new(1, 64 * MB);
    let fs = p.open().unwrap();
    let root = Creds::root();
    fs.mkdir_all("/d", 0o755).unwrap();
    let d = fs.resolve("/d").unwrap();
    let a = fs.tmpfile(&root, d, 0o640, 0, None).unwrap();
    assert_eq!((a.nlink, a.mode), (0, libc::S_IFREG | 0o640));
    assert!(fs.read_dir("/d").unwrap().is_empty());
    fs.write(a.ino, 0, b"unnamed").unwrap();
    assert_eq!(errno(fs.link(&root, a.ino, d, b"plain")), libc::ENOENT);
    assert_eq!(fs.link_unnamed(&root, a.ino, d, b"named").unwrap().nlink, 1);
    fs.release_inode(a.ino).unwrap();
    assert_eq!(fs.read_file("/d/named").unwrap(), b"unnamed");
    // Closed unnamed: freed.
    let b = fs.tmpfile(&root, d, 0o600, 0, None).unwrap();
    fs.write(b.ino, 0, &[7u8; 100_000]).unwrap();
    fs.release_inode(b.ino).unwrap();
    assert!(fs.getattr(b.ino).is_err());
    assert!(fs.link_unnamed(&root, b.ino, d, b"late").is_err());
    // Permissions are a create's.
    let bob = Creds { uid: 1000, gid: 1000, groups: vec![] };
    assert_eq!(errno(fs.tmpfile(&bob, d, 0o600, 0, None)), libc::EACCES);
    // Left open by crashes: once only in the journal, once in a checkpoint.
    let c = fs.tmpfile(&root, d, 0o600, 0, None).unwrap();
    fs.sync().unwrap();
    let p2 = p.crash(hurricane::device::CrashMode::DropAll);
    let fs = p2.open().unwrap();
    assert_eq!(fs.report().orphans_freed, 1);
    assert!(fs.getattr(c.ino).is_err());
    let e = fs.tmpfile(&root, d, 0o600, 0, None).unwrap();
    fs.checkpoint().unwrap();
    let p3 = p2.crash(hurricane::device::CrashMode::DropAll);
    let fs = p3.open().unwrap();
    assert_eq!(fs.report().orphans_freed, 1);
    assert!(fs.getattr(e.ino).is_err());
    assert_eq!(fs.read_file("/d/named").unwrap(), b"unnamed");
    let names: Vec<_> = fs.read_dir("/d").unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, vec![b"named".to_vec()]);
}
