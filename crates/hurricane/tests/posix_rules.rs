//! POSIX rules that the engine enforces for every front end: the native
//! API and the mount call the same checks.

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
