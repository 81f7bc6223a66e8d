//! Permissions through the mount for an unprivileged user (uid and gid
//! 65534 with supplementary group 4242): owner/group/other bits, sticky
//! and setgid directories, ownership and time changes, set-id clearing,
//! O_NOATIME, opens of FIFOs and device nodes, chown rules. A mount with
//! `allow_other` always has the kernel check first (`default_permissions`:
//! FIFO and device opens never reach the engine), then the engine checks
//! every request that reaches it; run with and without the writeback
//! cache.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use std::fs;
use std::os::unix::fs::{chown, MetadataExt, PermissionsExt};
use std::path::Path;

const UID: u32 = 65534;
const GID: u32 = 65534;
const GROUP: u32 = 4242;

const SCRIPT: &str = r#"
import errno, fcntl, os, stat, sys
m = sys.argv[1]
uid, gid = os.getuid(), os.getgid()
fails = []
def P(*a): return os.path.join(m, *a)
def name(c): return errno.errorcode.get(c, str(c))
def expect(code, what, fn, *args):
    try:
        fn(*args)
    except OSError as e:
        if e.errno != code:
            fails.append(f"{what}: got {name(e.errno)}, want {name(code)}")
        return
    fails.append(f"{what}: succeeded, want {name(code)}")
def must(what, fn, *args):
    try:
        return fn(*args)
    except OSError as e:
        fails.append(f"{what}: {e}")
def truth(what, cond):
    if not cond:
        fails.append(what)
def read(p): 
    with open(p) as f: return f.read()
def append(p, s):
    with open(p, "a") as f: f.write(s)
def create(p):
    with open(p, "w") as f: f.write("new")

# A 0700 directory of root's.
expect(errno.EACCES, "list 0700 dir", os.listdir, P("private"))
expect(errno.EACCES, "stat in 0700 dir", os.stat, P("private", "f"))
expect(errno.EACCES, "open in 0700 dir", read, P("private", "f"))
expect(errno.EACCES, "mkdir in 0700 dir", os.mkdir, P("private", "x"))
expect(errno.EACCES, "chdir into 0700 dir", os.chdir, P("private"))

# Root's 0644 file in root's 0755 directory.
truth("read 0644 file", must("read 0644", read, P("rootfile")) == "root data")
expect(errno.EACCES, "open 0644 for writing", append, P("rootfile"), "x")
expect(errno.EACCES, "O_TRUNC 0644", create, P("rootfile"))
expect(errno.EACCES, "truncate 0644", os.truncate, P("rootfile"), 0)
expect(errno.EPERM, "chmod other's file", os.chmod, P("rootfile"), 0o666)
expect(errno.EPERM, "chown other's file", os.chown, P("rootfile"), uid, -1)
expect(errno.EPERM, "utime explicit on other's file", os.utime, P("rootfile"), (1, 1))
expect(errno.EACCES, "utime now without write access", os.utime, P("rootfile"), None)
expect(errno.EACCES, "unlink in 0755 dir", os.unlink, P("rootfile"))
expect(errno.EACCES, "create in 0755 dir", create, P("newfile"))
expect(errno.EACCES, "user xattr without write access", os.setxattr, P("rootfile"), "user.x", b"1")
truth("read user xattr", must("getxattr", os.getxattr, P("rootfile"), "user.root") == b"r")
expect(errno.ENODATA, "trusted xattr hidden", os.getxattr, P("rootfile"), "trusted.t")
expect(errno.EPERM, "O_NOATIME on other's file", os.open, P("rootfile"), os.O_RDONLY | os.O_NOATIME)
truth("access R_OK", os.access(P("rootfile"), os.R_OK))
truth("access W_OK refused", not os.access(P("rootfile"), os.W_OK))
truth("access X_OK refused", not os.access(P("rootfile"), os.X_OK))
expect(errno.EACCES, "rmdir in 0755 dir", os.rmdir, P("rodir", "sub"))

# A world-writable file: write and "touch", but no explicit times.
must("utime now with write access", os.utime, P("rwfile"), None)
expect(errno.EPERM, "utime explicit with write access", os.utime, P("rwfile"), (1, 1))
must("append 0666", append, P("rwfile"), "x")
fd = os.open(P("rwfile"), os.O_RDWR)
must("lockf", fcntl.lockf, fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
os.close(fd)

# Our own files in a 0777 directory.
mine = P("pub", "mine")
must("create in 0777 dir", create, mine)
st = os.stat(mine)
truth(f"new file owner {st.st_uid}:{st.st_gid}", (st.st_uid, st.st_gid) == (uid, gid))
must("chmod own file", os.chmod, mine, 0o600)
truth("mode set", stat.S_IMODE(os.stat(mine).st_mode) == 0o600)
must("utime explicit on own file", os.utime, mine, (5, 5))
truth("mtime set", os.stat(mine).st_mtime == 5)
expect(errno.EPERM, "give own file away", os.chown, mine, 0, -1)
must("chgrp to a supplementary group", os.chown, mine, -1, 4242)
truth("group changed", os.stat(mine).st_gid == 4242)
expect(errno.EPERM, "chgrp to a foreign group", os.chown, mine, -1, 0)
must("user xattr on own file", os.setxattr, mine, "user.mine", b"v")
expect(errno.EPERM, "trusted xattr", os.setxattr, mine, "trusted.x", b"1")
must("chmod g+s, group is ours", os.chmod, mine, 0o2755)
truth("setgid kept for a member", os.stat(mine).st_mode & stat.S_ISGID)
must("chmod g+s, foreign group", os.chmod, P("pub", "notmember"), 0o2755)
truth("setgid dropped for a non-member", not os.stat(P("pub", "notmember")).st_mode & stat.S_ISGID)
expect(errno.EACCES, "move into 0700 dir", os.rename, mine, P("private", "x"))
expect(errno.EACCES, "hard link into 0755 dir", os.link, mine, P("rodir", "x"))
must("rename own file", os.rename, mine, P("pub", "mine2"))
must("unlink own file", os.unlink, P("pub", "mine2"))

# Sticky directory: only owners remove entries.
expect(errno.EPERM, "unlink other's file in sticky dir", os.unlink, P("sticky", "rootsfile"))
expect(errno.EPERM, "rename other's file in sticky dir", os.rename, P("sticky", "rootsfile"), P("sticky", "stolen"))
must("write other's 0666 file in sticky dir", append, P("sticky", "rootsfile"), "ok")
must("create in sticky dir", create, P("sticky", "ours"))
must("rename own file in sticky dir", os.rename, P("sticky", "ours"), P("sticky", "ours2"))
must("unlink own file in sticky dir", os.unlink, P("sticky", "ours2"))

# Setgid directory (root:4242, 2777): group and setgid bit are inherited.
must("create in setgid dir", create, P("sgid", "f"))
truth("file takes the directory's group", os.stat(P("sgid", "f")).st_gid == 4242)
must("mkdir in setgid dir", os.mkdir, P("sgid", "sub"))
st = os.stat(P("sgid", "sub"))
truth("subdirectory takes group and setgid", st.st_gid == 4242 and st.st_mode & stat.S_ISGID)

# Access through a supplementary group only (0070 root:4242).
truth("list group dir", must("list group dir", os.listdir, P("grp")) == ["f"])
truth("read group file", must("read group file", read, P("grp", "f")) == "group data")
must("write group file", append, P("grp", "f"), "+")
expect(errno.EACCES, "list foreign group dir", os.listdir, P("grp0"))

# Another user's 0600 FIFO and device node: no open, for reading or for
# writing (O_NONBLOCK: a FIFO open must not wait for the other end).
def opener(flags):
    return lambda p: os.close(os.open(p, flags | os.O_NONBLOCK))
for f in ("rootfifo", "rootdev"):
    expect(errno.EACCES, f"open {f} 0600 for reading", opener(os.O_RDONLY), P(f))
    expect(errno.EACCES, f"open {f} 0600 for writing", opener(os.O_WRONLY), P(f))
    expect(errno.EACCES, f"open {f} 0600 read-write", opener(os.O_RDWR), P(f))
# Our own 0600 FIFO and device node open.
must("open own fifo for reading", opener(os.O_RDONLY), P("pub", "myfifo"))
must("open own fifo read-write", opener(os.O_RDWR), P("pub", "myfifo"))
must("open own device for writing", opener(os.O_WRONLY), P("pub", "mydev"))

# chown by a non-owner fails even when it names the current owner and
# group, for every file type (lchown for the symlink); chown(-1, -1)
# changes nothing and succeeds, as on ext4.
for f in ("rootfile", "rootfifo", "rootdev", "rodir"):
    expect(errno.EPERM, f"chown {f} to its own owner", os.chown, P(f), 0, 0)
    expect(errno.EPERM, f"chown {f} to its own owner only", os.chown, P(f), 0, -1)
    expect(errno.EPERM, f"chgrp {f} to its own group", os.chown, P(f), -1, 0)
    must(f"chown {f} -1 -1", os.chown, P(f), -1, -1)
expect(errno.EPERM, "lchown symlink to its own owner", os.lchown, P("rootlink"), 0, 0)
must("lchown symlink -1 -1", os.lchown, P("rootlink"), -1, -1)
truth("symlink kept its owner", os.lstat(P("rootlink")).st_uid == 0)

# Writes and truncates by others clear set-id bits.
fd = os.open(P("suid"), os.O_WRONLY)
os.write(fd, b"x")
os.close(fd)
truth("write clears set-user-id", not os.stat(P("suid")).st_mode & stat.S_ISUID)
must("truncate setid file", os.truncate, P("suid2"), 0)
truth("truncate clears set-user-id and set-group-id", not os.stat(P("suid2")).st_mode & (stat.S_ISUID | stat.S_ISGID))

if fails:
    print("\n".join(fails))
    sys.exit(1)
print("all permission checks passed")
"#;

fn setup(m: &Path) {
    let p = |r: &str| m.join(r);
    let mode = |r: &str, mode: u32| fs::set_permissions(p(r), fs::Permissions::from_mode(mode)).unwrap();
    fs::create_dir(p("private")).unwrap();
    fs::write(p("private/f"), b"secret").unwrap();
    mode("private", 0o700);
    fs::write(p("rootfile"), b"root data").unwrap();
    let c = cpath(&p("rootfile"));
    for (n, v) in [("user.root", "r"), ("trusted.t", "t")] {
        let n = std::ffi::CString::new(n).unwrap();
        // SAFETY: valid C strings and value.
        check(unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) }).unwrap();
    }
    fs::create_dir_all(p("rodir/sub")).unwrap();
    fs::write(p("rwfile"), b"rw").unwrap();
    mode("rwfile", 0o666);
    fs::create_dir(p("pub")).unwrap();
    mode("pub", 0o777);
    fs::write(p("pub/notmember"), b"").unwrap();
    chown(p("pub/notmember"), Some(UID), Some(0)).unwrap();
    fs::create_dir(p("sticky")).unwrap();
    mode("sticky", 0o1777);
    fs::write(p("sticky/rootsfile"), b"").unwrap();
    mode("sticky/rootsfile", 0o666);
    fs::create_dir(p("sgid")).unwrap();
    chown(p("sgid"), Some(0), Some(GROUP)).unwrap();
    mode("sgid", 0o2777);
    fs::create_dir(p("grp")).unwrap();
    fs::write(p("grp/f"), b"group data").unwrap();
    chown(p("grp"), Some(0), Some(GROUP)).unwrap();
    chown(p("grp/f"), Some(0), Some(GROUP)).unwrap();
    mode("grp/f", 0o060);
    mode("grp", 0o070);
    fs::create_dir(p("grp0")).unwrap();
    mode("grp0", 0o070);
    fs::write(p("suid"), b"s").unwrap();
    mode("suid", 0o4646);
    std::os::unix::fs::symlink("rootfile", p("rootlink")).unwrap();
    let node = |rel: &str, kind: libc::mode_t, dev: libc::dev_t, owner: u32| {
        let c = cpath(&p(rel));
        // SAFETY: a valid C string.
        check(unsafe { libc::mknod(c.as_ptr(), kind | 0o600, dev) }).unwrap();
        chown(p(rel), Some(owner), Some(owner)).unwrap();
        mode(rel, 0o600);
    };
    let null = libc::makedev(1, 3);
    node("rootfifo", libc::S_IFIFO, 0, 0);
    node("rootdev", libc::S_IFCHR, null, 0);
    node("pub/myfifo", libc::S_IFIFO, 0, UID);
    node("pub/mydev", libc::S_IFCHR, null, UID);
    fs::write(p("suid2"), b"s").unwrap();
    mode("suid2", 0o6777);
}

fn run_as_nobody(opts: &[&str]) {
    let pool = Pool::new(2, "64M");
    let m = pool.mount(opts);
    setup(&m.mnt);
    let (ok, out) = python(SCRIPT, &[s(&m.mnt)], Some((UID, GID, &[GROUP])));
    assert!(ok, "as uid {UID} with -o {opts:?}:\n{out}");
    // Root sees what the user made, with the right owners.
    assert_eq!(fs::metadata(m.path("sgid/f")).unwrap().uid(), UID);
    m.unmount();
    pool.fsck_clean();
}

fn prerequisites() -> bool {
    if !is_root() {
        eprintln!("SKIPPED permission tests: they need root to switch users");
        return false;
    }
    if !have("setpriv") || !have("python3") {
        eprintln!("SKIPPED permission tests: setpriv or python3 is missing");
        return false;
    }
    true
}

#[test]
fn unprivileged_user_allow_other() {
    require_fuse!();
    if prerequisites() {
        run_as_nobody(&["allow_other,dev"]);
    }
}

#[test]
fn unprivileged_user_writeback_cache() {
    require_fuse!();
    if prerequisites() {
        run_as_nobody(&["allow_other,dev,writeback_cache"]);
    }
}

/// What another user's attempt gives: "ok" or the errno.
const TRY: &str = r#"
import os, subprocess, sys
op, path = sys.argv[1], sys.argv[2]
try:
    if op == "read":
        open(path, "rb").read()
    elif op == "stat":
        os.stat(path)
    elif op == "exec":
        subprocess.run([path], check=True, capture_output=True)
    print("ok")
except OSError as e:
    print(e.errno)
"#;

fn as_nobody(op: &str, path: &Path) -> String {
    let (_, out) = python(TRY, &[op, s(path)], Some((UID, GID, &[])));
    out.trim().to_string()
}

/// Names the kernel has kept stop letting another user through once the
/// directory they are in no longer lets that user search it: after a chmod
/// of the directory and after a rename into a private directory. Execution
/// needs the x bit of the caller's class, not just any x bit.
fn names_follow_permission_changes(opts: &[&str]) {
    let pool = Pool::new(2, "64M");
    let m = pool.mount(opts);
    let mode = |rel: &str, bits: u32| fs::set_permissions(m.path(rel), fs::Permissions::from_mode(bits)).unwrap();
    let eacces = libc::EACCES.to_string();
    mode("", 0o755);
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/f"), b"data").unwrap();
    fs::create_dir(m.path("pub")).unwrap();
    fs::write(m.path("pub/g"), b"g").unwrap();
    mode("pub/g", 0o644);
    fs::create_dir(m.path("priv")).unwrap();
    mode("priv", 0o700);
    fs::write(m.path("x.sh"), b"#!/bin/sh\necho ran\n").unwrap();
    mode("x.sh", 0o744);

    // Looked up (and kept by the kernel) while everyone may search d.
    assert_eq!(as_nobody("read", &m.path("d/f")), "ok", "{opts:?}");
    assert_eq!(as_nobody("stat", &m.path("d/none")), libc::ENOENT.to_string(), "{opts:?}");
    mode("d", 0o700);
    assert_eq!(as_nobody("read", &m.path("d/f")), eacces, "kept name after chmod, {opts:?}");
    assert_eq!(as_nobody("stat", &m.path("d/none")), eacces, "kept negative name after chmod, {opts:?}");
    mode("d", 0o755);
    assert_eq!(as_nobody("read", &m.path("d/f")), "ok", "{opts:?}");

    assert_eq!(as_nobody("read", &m.path("pub/g")), "ok", "{opts:?}");
    fs::rename(m.path("pub/g"), m.path("priv/g")).unwrap();
    assert_eq!(as_nobody("read", &m.path("priv/g")), eacces, "kept name moved into a private directory, {opts:?}");
    fs::rename(m.path("priv/g"), m.path("pub/g")).unwrap();
    assert_eq!(as_nobody("read", &m.path("pub/g")), "ok", "{opts:?}");

    assert_eq!(as_nobody("exec", &m.path("x.sh")), eacces, "exec without x for others, {opts:?}");
    mode("x.sh", 0o755);
    assert_eq!(as_nobody("exec", &m.path("x.sh")), "ok", "{opts:?}");
    m.unmount();
    pool.fsck_clean();
}

#[test]
fn kept_names_allow_other() {
    require_fuse!();
    if prerequisites() {
        names_follow_permission_changes(&["allow_other"]);
    }
}

#[test]
fn other_users_are_kept_out_without_allow_other() {
    require_fuse!();
    if !prerequisites() {
        return;
    }
    let pool = Pool::new(2, "64M");
    let m = pool.mount(&[]);
    fs::write(m.path("f"), b"x").unwrap();
    mode_world(&m.mnt);
    let (ok, out) = python("import os,sys\ntry:\n  os.stat(sys.argv[1]+'/f')\nexcept OSError as e:\n  print(e.errno); sys.exit(0)\nsys.exit(1)", &[s(&m.mnt)], Some((UID, GID, &[])));
    assert!(ok && out.trim() == libc::EACCES.to_string(), "{out}");
    m.unmount();
}

fn mode_world(p: &Path) {
    fs::set_permissions(p, fs::Permissions::from_mode(0o777)).unwrap();
}
