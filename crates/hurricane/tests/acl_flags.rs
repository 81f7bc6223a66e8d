//! POSIX ACLs and inode flags as the engine enforces them for every front
//! end: the access check with named users and groups under the mask, the
//! mode and the ACL kept in step, default ACLs inherited on creation, and
//! immutable and append-only files refusing what Linux refuses.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use hurricane::namespace::acl::{self, Acl, Entry, GROUP, GROUP_OBJ, MASK, OTHER, USER, USER_OBJ};
use hurricane::namespace::flags;
use hurricane::{Creds, Fs, RenameFlags, SetAttr};

const R: u32 = 4;
const W: u32 = 2;
const X: u32 = 1;

fn errno(r: hurricane::Result<impl Sized>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.errno(),
    }
}

fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    Acl::new(entries.iter().map(|&(tag, perm, id)| Entry { tag, perm, id }).collect()).unwrap().encode()
}

fn chmod(m: u32) -> SetAttr {
    SetAttr { mode: Some(m), ..Default::default() }
}

fn get_acl(fs: &Fs, ino: u64, name: &str) -> Option<Acl> {
    match fs.getxattr(&Creds::root(), ino, name.as_bytes()) {
        Ok(v) => Acl::decode(&v).unwrap(),
        Err(e) => {
            assert_eq!(e.errno(), libc::ENODATA, "{e}");
            None
        }
    }
}

const ALICE: u32 = 1000;
const BOB: u32 = 1001;
const CAROL: u32 = 1002;
const DAVE: u32 = 1003;
const STAFF: u32 = 100;
const TEAM: u32 = 200;

/// Named users and groups get what their entry says under the mask; the
/// owning group and the named groups a caller is in are looked at together;
/// chmod moves the mask; the ACL and the mode survive a reopen.
#[test]
fn the_access_check_follows_named_entries_under_the_mask() {
    let p = MemPool::new(1, 32 * MB);
    let alice = Creds::user(ALICE, STAFF);
    let bob = Creds::user(BOB, BOB);
    let carol = Creds { uid: CAROL, gid: CAROL, groups: vec![TEAM] };
    let dave = Creds::user(DAVE, DAVE);
    let f = {
        let fs = p.open().unwrap();
        fs.setattr(&Creds::root(), 1, &chmod(0o777)).unwrap();
        let f = fs.mknod(&alice, 1, b"f", libc::S_IFREG | 0o640, 0, None, None).unwrap().ino;
        // Before: bob and carol are others, with nothing.
        assert_eq!(errno(fs.access(&bob, f, R)), libc::EACCES);
        let a =
            acl(&[(USER_OBJ, 6, 0), (USER, 6, BOB), (GROUP_OBJ, 4, 0), (GROUP, 4, TEAM), (MASK, 6, 0), (OTHER, 0, 0)]);
        // Only the owner (or root) sets an ACL.
        assert_eq!(errno(fs.setxattr(&bob, f, acl::ACCESS.as_bytes(), &a, 0)), libc::EPERM);
        fs.setxattr(&alice, f, acl::ACCESS.as_bytes(), &a, 0).unwrap();
        // The mode's group bits are the mask.
        assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o660);
        assert_eq!(errno(fs.access(&bob, f, R | W)), 0);
        assert_eq!(errno(fs.access(&bob, f, X)), libc::EACCES);
        assert_eq!(errno(fs.access(&carol, f, R)), 0);
        assert_eq!(errno(fs.access(&carol, f, W)), libc::EACCES);
        assert_eq!(errno(fs.access(&dave, f, R)), libc::EACCES);
        // An open takes the same check.
        assert_eq!(errno(fs.open_as(&bob, f, libc::O_RDWR)), 0);
        assert_eq!(errno(fs.open_as(&dave, f, libc::O_RDONLY)), libc::EACCES);
        // chmod g-w narrows the mask: bob's rw- entry now gives r--.
        fs.setattr(&alice, f, &chmod(0o640)).unwrap();
        assert_eq!(errno(fs.access(&bob, f, W)), libc::EACCES);
        assert_eq!(errno(fs.access(&bob, f, R)), 0);
        let got = get_acl(&fs, f, acl::ACCESS).unwrap();
        assert!(got.entries().contains(&Entry { tag: MASK, perm: 4, id: acl::UNDEFINED_ID }));
        assert!(got.entries().contains(&Entry { tag: USER, perm: 6, id: BOB }));
        fs.close().unwrap();
        f
    };
    let fs = p.open().unwrap();
    assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o640);
    assert_eq!(errno(fs.access(&bob, f, R)), 0);
    assert_eq!(errno(fs.access(&carol, f, R)), 0);
    assert_eq!(errno(fs.access(&dave, f, R)), libc::EACCES);
    // Removing the ACL leaves the mode alone, and bob an other again.
    fs.removexattr(&alice, f, acl::ACCESS.as_bytes()).unwrap();
    assert_eq!(errno(fs.access(&bob, f, R)), libc::EACCES);
    assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o640);
}

/// An ACL that says no more than a mode sets the mode and is not kept;
/// bad values are refused with EINVAL; default ACLs go on directories
/// only; setting an access ACL drops set-group-id for a caller outside
/// the file's group.
#[test]
fn setting_an_acl_updates_the_mode_as_linux_does() {
    let p = MemPool::new(1, 32 * MB);
    let fs = p.open().unwrap();
    let root = Creds::root();
    let alice = Creds::user(ALICE, ALICE);
    fs.setattr(&root, 1, &chmod(0o777)).unwrap();
    let f = fs.mknod(&alice, 1, b"f", libc::S_IFREG | 0o644, 0, None, None).unwrap().ino;
    let minimal = acl(&[(USER_OBJ, 7, 0), (GROUP_OBJ, 5, 0), (OTHER, 1, 0)]);
    fs.setxattr(&alice, f, acl::ACCESS.as_bytes(), &minimal, 0).unwrap();
    assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o751);
    assert!(get_acl(&fs, f, acl::ACCESS).is_none());
    for bad in [&b""[..], &b"\x02\0\0\0\x01\0"[..], &b"\x01\0\0\0\x01\0\x07\0\xff\xff\xff\xff"[..], &minimal[..12]] {
        assert_eq!(errno(fs.setxattr(&alice, f, acl::ACCESS.as_bytes(), bad, 0)), libc::EINVAL, "{bad:?}");
    }
    assert_eq!(errno(fs.setxattr(&alice, f, acl::DEFAULT.as_bytes(), &minimal, 0)), libc::EACCES);
    let s = fs.symlink(&alice, 1, b"l", b"f").unwrap().ino;
    assert_eq!(errno(fs.setxattr(&alice, s, acl::ACCESS.as_bytes(), &minimal, 0)), libc::EOPNOTSUPP);
    // Set-group-id: root makes the file 2775 in group STAFF, which alice is not in.
    fs.setattr(&root, f, &SetAttr { gid: Some(STAFF), mode: Some(0o2775), ..Default::default() }).unwrap();
    let named = acl(&[(USER_OBJ, 7, 0), (USER, 7, BOB), (GROUP_OBJ, 5, 0), (MASK, 7, 0), (OTHER, 5, 0)]);
    fs.setxattr(&alice, f, acl::ACCESS.as_bytes(), &named, 0).unwrap();
    assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o775);
    // A member keeps it.
    fs.setattr(&root, f, &chmod(0o2775)).unwrap();
    let member = Creds { uid: ALICE, gid: ALICE, groups: vec![STAFF] };
    fs.setxattr(&member, f, acl::ACCESS.as_bytes(), &named, 0).unwrap();
    assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o2775);
    // Anyone reads it, and it is listed.
    let v = fs.getxattr(&Creds::user(DAVE, DAVE), f, acl::ACCESS.as_bytes()).unwrap();
    assert_eq!(v, named);
    assert!(fs.listxattr(&alice, f).unwrap().contains(&acl::ACCESS.as_bytes().to_vec()));
}

/// A directory's default ACL: its new files get it as their access ACL,
/// masked by the mode they are created with and without the umask; its new
/// directories get it as their default too; without one, the umask applies.
#[test]
fn default_acls_are_inherited_on_creation() {
    let p = MemPool::new(1, 32 * MB);
    let fs = p.open().unwrap();
    let root = Creds::root();
    let alice = Creds::user(ALICE, ALICE);
    let bob = Creds::user(BOB, BOB);
    fs.setattr(&root, 1, &chmod(0o777)).unwrap();
    let d = fs.mkdir(&alice, 1, b"d", 0o755).unwrap().ino;
    let def = acl(&[(USER_OBJ, 7, 0), (USER, 7, BOB), (GROUP_OBJ, 5, 0), (MASK, 7, 0), (OTHER, 0, 0)]);
    fs.setxattr(&alice, d, acl::DEFAULT.as_bytes(), &def, 0).unwrap();
    // The directory's own mode and access are unchanged by a default ACL.
    assert_eq!(fs.getattr(d).unwrap().mode & 0o7777, 0o755);
    assert!(get_acl(&fs, d, acl::ACCESS).is_none());
    // open(O_CREAT, 0666) under umask 022: the umask does not apply.
    let f = fs.mknod_umask(&alice, d, b"f", libc::S_IFREG | 0o666, 0o022, 0, None, None).unwrap().ino;
    assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o660);
    let fa = get_acl(&fs, f, acl::ACCESS).unwrap();
    assert!(fa.entries().contains(&Entry { tag: USER, perm: 7, id: BOB }));
    assert!(fa.entries().contains(&Entry { tag: MASK, perm: 6, id: acl::UNDEFINED_ID }));
    assert!(get_acl(&fs, f, acl::DEFAULT).is_none());
    assert_eq!(errno(fs.access(&bob, f, R | W)), 0);
    assert_eq!(errno(fs.access(&bob, f, X)), libc::EACCES);
    // mkdir(0777): both ACLs, and the subdirectory's files inherit in turn.
    let sub = fs.mknod_umask(&alice, d, b"sub", libc::S_IFDIR | 0o777, 0o022, 0, None, None).unwrap().ino;
    assert_eq!(fs.getattr(sub).unwrap().mode & 0o7777, 0o770);
    assert_eq!(fs.getxattr(&root, sub, acl::DEFAULT.as_bytes()).unwrap(), def);
    assert!(get_acl(&fs, sub, acl::ACCESS).is_some());
    let g = fs.mknod_umask(&bob, sub, b"g", libc::S_IFREG | 0o644, 0o077, 0, None, None).unwrap().ino;
    assert_eq!(fs.getattr(g).unwrap().mode & 0o7777, 0o640);
    // A default ACL that names nobody gives the masked mode and no ACL.
    let plain = fs.mkdir(&alice, 1, b"plain", 0o777).unwrap().ino;
    fs.setxattr(&alice, plain, acl::DEFAULT.as_bytes(), &acl(&[(USER_OBJ, 7, 0), (GROUP_OBJ, 7, 0), (OTHER, 5, 0)]), 0)
        .unwrap();
    let h = fs.mknod_umask(&alice, plain, b"h", libc::S_IFREG | 0o666, 0o077, 0, None, None).unwrap().ino;
    assert_eq!(fs.getattr(h).unwrap().mode & 0o7777, 0o664);
    assert!(get_acl(&fs, h, acl::ACCESS).is_none());
    // No default ACL: the umask.
    let k = fs.mknod_umask(&alice, 1, b"k", libc::S_IFREG | 0o666, 0o027, 0, None, None).unwrap().ino;
    assert_eq!(fs.getattr(k).unwrap().mode & 0o7777, 0o640);
    assert!(get_acl(&fs, k, acl::ACCESS).is_none());
    // Removing the default ACL stops inheritance.
    fs.removexattr(&alice, d, acl::DEFAULT.as_bytes()).unwrap();
    let m = fs.mknod_umask(&alice, d, b"m", libc::S_IFREG | 0o666, 0o022, 0, None, None).unwrap().ino;
    assert_eq!(fs.getattr(m).unwrap().mode & 0o7777, 0o644);
    assert!(get_acl(&fs, m, acl::ACCESS).is_none());
}

/// Immutable: no write, truncate, removal, rename, link, chmod, chown or
/// attribute change; only root sets or clears it. Append-only: writes at
/// the end only, no O_TRUNC, no removal. The flags survive a reopen and
/// are not an attribute anyone can read or set.
#[test]
fn immutable_and_append_only_files_refuse_what_linux_refuses() {
    let p = MemPool::new(1, 32 * MB);
    let root = Creds::root();
    let alice = Creds::user(ALICE, ALICE);
    let (f, a) = {
        let fs = p.open().unwrap();
        fs.setattr(&root, 1, &chmod(0o777)).unwrap();
        let f = fs.mknod(&alice, 1, b"f", libc::S_IFREG | 0o644, 0, None, None).unwrap().ino;
        let a = fs.mknod(&alice, 1, b"a", libc::S_IFREG | 0o644, 0, None, None).unwrap().ino;
        fs.write(f, 0, b"hello").unwrap();
        fs.write(a, 0, b"log\n").unwrap();
        // The owner may set nodump and noatime, not immutable or append-only.
        assert_eq!(errno(fs.set_inode_flags(&alice, f, flags::IMMUTABLE)), libc::EPERM);
        assert_eq!(errno(fs.set_inode_flags(&Creds::user(BOB, BOB), f, flags::NODUMP)), libc::EPERM);
        fs.set_inode_flags(&alice, f, flags::NODUMP | flags::NOATIME).unwrap();
        assert_eq!(errno(fs.set_inode_flags(&alice, f, 0x1)), libc::EOPNOTSUPP);
        fs.set_inode_flags(&root, f, flags::IMMUTABLE | flags::NODUMP).unwrap();
        fs.set_inode_flags(&root, a, flags::APPEND).unwrap();
        fs.close().unwrap();
        (f, a)
    };
    let fs = p.open().unwrap();
    assert_eq!(fs.inode_flags(f).unwrap(), flags::IMMUTABLE | flags::NODUMP);
    assert_eq!(fs.inode_flags(a).unwrap(), flags::APPEND);
    // Immutable.
    let eperm = libc::EPERM;
    assert_eq!(errno(fs.write(f, 5, b"!")), eperm);
    assert_eq!(errno(fs.truncate(f, 0)), eperm);
    assert_eq!(errno(fs.setattr(&alice, f, &SetAttr { size: Some(0), ..Default::default() })), eperm);
    assert_eq!(errno(fs.setattr(&root, f, &chmod(0o600))), eperm);
    assert_eq!(errno(fs.setattr(&root, f, &SetAttr { uid: Some(0), ..Default::default() })), eperm);
    assert_eq!(errno(fs.setattr(&alice, f, &SetAttr { mtime: Some(None), ..Default::default() })), eperm);
    assert_eq!(errno(fs.open_as(&alice, f, libc::O_WRONLY)), eperm);
    assert_eq!(errno(fs.open_as(&alice, f, libc::O_RDONLY)), 0);
    assert_eq!(errno(fs.unlink(&root, 1, b"f")), eperm);
    assert_eq!(errno(fs.rename(&root, 1, b"f", 1, b"g", RenameFlags::default())), eperm);
    assert_eq!(errno(fs.rename(&root, 1, b"a", 1, b"f", RenameFlags::default())), eperm);
    assert_eq!(errno(fs.link(&root, f, 1, b"f2")), eperm);
    assert_eq!(errno(fs.setxattr(&root, f, b"user.x", b"1", 0)), eperm);
    let minimal = acl(&[(USER_OBJ, 7, 0), (GROUP_OBJ, 5, 0), (OTHER, 1, 0)]);
    assert_eq!(errno(fs.setxattr(&root, f, acl::ACCESS.as_bytes(), &minimal, 0)), eperm);
    assert_eq!(errno(fs.fallocate(f, 0, 4096, 0)), eperm);
    // Not an attribute of its own.
    assert!(!fs.listxattr(&root, f).unwrap().iter().any(|n| n.starts_with(b"system.")));
    assert_eq!(errno(fs.getxattr(&root, f, flags::XATTR.as_bytes())), libc::EOPNOTSUPP);
    assert_eq!(errno(fs.setxattr(&root, f, flags::XATTR.as_bytes(), &[0, 0, 0, 0], 0)), libc::EOPNOTSUPP);
    assert_eq!(errno(fs.removexattr(&root, f, flags::XATTR.as_bytes())), libc::EOPNOTSUPP);
    // An immutable directory takes no new entries and loses none.
    let d = fs.mkdir(&root, 1, b"d", 0o777).unwrap().ino;
    fs.mknod(&root, d, b"x", libc::S_IFREG | 0o644, 0, None, None).unwrap();
    fs.set_inode_flags(&root, d, flags::IMMUTABLE).unwrap();
    assert_eq!(errno(fs.mknod(&root, d, b"y", libc::S_IFREG | 0o644, 0, None, None)), eperm);
    assert_eq!(errno(fs.unlink(&root, d, b"x")), eperm);
    assert_eq!(errno(fs.rename(&root, 1, b"a", d, b"z", RenameFlags::default())), eperm);
    // Append-only: at the end only.
    assert_eq!(errno(fs.write(a, 0, b"X")), eperm);
    assert_eq!(fs.write(a, 4, b"more\n").unwrap(), 5);
    assert_eq!(errno(fs.open_as(&alice, a, libc::O_WRONLY)), eperm);
    assert_eq!(errno(fs.open_as(&alice, a, libc::O_WRONLY | libc::O_APPEND | libc::O_TRUNC)), eperm);
    assert_eq!(errno(fs.open_as(&alice, a, libc::O_WRONLY | libc::O_APPEND)), 0);
    assert_eq!(errno(fs.truncate(a, 0)), eperm);
    assert_eq!(errno(fs.unlink(&alice, 1, b"a")), eperm);
    assert_eq!(errno(fs.setattr(&alice, a, &chmod(0o600))), eperm);
    assert_eq!(errno(fs.fallocate(a, 0, 4096, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE)), eperm);
    assert_eq!(errno(fs.fallocate(a, 0, 65536, libc::FALLOC_FL_KEEP_SIZE)), 0);
    // Cleared by root, everything works again.
    fs.set_inode_flags(&root, f, 0).unwrap();
    fs.set_inode_flags(&root, a, 0).unwrap();
    assert_eq!(errno(fs.set_inode_flags(&root, d, 0)), 0);
    fs.write(f, 5, b"!").unwrap();
    fs.write(a, 0, b"L").unwrap();
    fs.rename(&root, 1, b"f", 1, b"g", RenameFlags::default()).unwrap();
    fs.unlink(&root, 1, b"a").unwrap();
    assert_eq!(fs.inode_flags(f).unwrap(), 0);
}
