//! POSIX ACLs and inode flags through the mount, with the real tools
//! (`setfacl`/`getfacl`, `chattr`/`lsattr`) and real users: one scenario
//! runs on a Hurricane mount and on ext4 on a loop device, and the two
//! transcripts must agree line for line. With `allow_other` the kernel
//! checks too (`default_permissions`, with FUSE_POSIX_ACL it evaluates the
//! ACLs), then the engine; without it the engine alone checks, and only
//! the mounting user (root) reaches the mount. Needs root and FUSE.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use std::path::Path;
use std::process::Command;

/// The scenario: `python3 -c SCENARIO BASE USERS` prints one line per
/// step. BASE is an empty directory; USERS is 1 where other users may
/// reach it. Every step's outcome is printed (an errno name, a mode, the
/// ACL as `getfacl -cn` gives it, the flags `lsattr` shows of i, a, d, A).
const SCENARIO: &str = r#"
import errno, os, subprocess, sys
base, users = sys.argv[1], sys.argv[2] == "1"
ALICE, BOB, CAROL, TEAM, STAFF = 60201, 60202, 60203, 4343, 4344
os.umask(0o022)
os.chdir(base)
def out(step, what): print(f"{step}: {what}")
def name(e): return errno.errorcode.get(e, str(e))
def rc(*cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return "ok" if r.returncode == 0 else "fail"
def acl(p):
    r = subprocess.run(["getfacl", "-cn", p], capture_output=True, text=True)
    return " ".join(l for l in r.stdout.split("\n") if l) if r.returncode == 0 else "getfacl failed: " + r.stderr
def mode(p): return oct(os.lstat(p).st_mode & 0o7777)
def flags(p):
    r = subprocess.run(["lsattr", "-d", p], capture_output=True, text=True)
    return "".join(c for c in r.stdout.split()[0] if c in "iadA") if r.returncode == 0 else "lsattr failed"
def do(f, *a):
    try:
        f(*a)
        return "ok"
    except OSError as e:
        return name(e.errno)
USER_PRELUDE = '''
import errno, os, sys
os.chdir(sys.argv[1])
def do(f, *a):
    try:
        f(*a)
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def write(p, s, flags=os.O_WRONLY | os.O_APPEND):
    fd = os.open(p, flags)
    try:
        os.write(fd, s)
    finally:
        os.close(fd)
def create(p, m=0o666):
    os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, m))
'''
def user(uid, groups, code, *args):
    g = ["--groups=" + ",".join(map(str, groups))] if groups else ["--clear-groups"]
    r = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", *g, sys.executable, "-c",
                        USER_PRELUDE + code, base, *args], capture_output=True, text=True)
    return (r.stdout + r.stderr).strip().replace("\n", " | ")
def w(p, s=b"data"):
    with open(p, "wb") as f: f.write(s)

# The base is everyone's to search.
os.chmod(".", 0o755)
# A directory with named users and groups.
os.mkdir("s", 0o750)
out("setfacl access", rc("setfacl", "-m", f"u:{ALICE}:rwx,u:{BOB}:x,g:{TEAM}:rx", "s"))
out("acl s", acl("s"))
out("mode s", mode("s"))
out("setfacl default", rc("setfacl", "-d", "-m", f"u:{BOB}:rw,g:{TEAM}:r", "s"))
out("default acl s", " ".join(l for l in subprocess.run(["getfacl", "-cnd", "s"], capture_output=True, text=True).stdout.split("\n") if l))
# Inheritance, without the umask.
os.umask(0o077)
w("s/root-file")
os.mkdir("s/root-dir", 0o777)
os.umask(0o022)
out("inherited file", mode("s/root-file") + " " + acl("s/root-file"))
out("inherited dir", mode("s/root-dir") + " " + acl("s/root-dir"))
out("inherited default", " ".join(l for l in subprocess.run(["getfacl", "-cnd", "s/root-dir"], capture_output=True, text=True).stdout.split("\n") if l))
# chmod moves the mask; the named entries stay.
os.chmod("s/root-file", 0o640)
out("chmod masks", mode("s/root-file") + " " + acl("s/root-file"))
out("setfacl -b", rc("setfacl", "-b", "s/root-file") + " " + mode("s/root-file") + " " + acl("s/root-file"))
# An ACL the mode says all of: the mode changes, no ACL is kept.
w("plain")
out("equivalent acl", rc("setfacl", "-m", "u::rwx,g::r-x,o::--x", "plain") + " " + mode("plain") + " " + acl("plain"))
out("default on a file", rc("setfacl", "-d", "-m", f"u:{BOB}:r", "plain"))
out("bad acl", do(os.setxattr, "plain", "system.posix_acl_access", b"\x02\0\0\0\x01\0"))

if users:
    # Named user ALICE: rwx on s; her umask is not applied under the default ACL.
    out("alice creates", user(ALICE, [], "os.umask(0o077); print(do(create, 's/a'), do(os.mkdir, 's/asub', 0o777))"))
    out("alice's file", mode("s/a") + " " + acl("s/a"))
    out("alice's dir", mode("s/asub") + " " + acl("s/asub"))
    # BOB: search only on s, rw on what is created in it.
    out("bob lists", user(BOB, [], "print(do(os.listdir, 's'))"))
    out("bob rw", user(BOB, [], "print(do(write, 's/a', b'bob'), do(lambda: open('s/a').read()))"))
    out("bob creates", user(BOB, [], "print(do(create, 's/b'))"))
    # CAROL, in TEAM: r-x on s, r on its files; without TEAM, nothing.
    out("carol lists", user(CAROL, [TEAM], "print(do(os.listdir, 's'), do(lambda: open('s/a').read()), do(write, 's/a', b'c'))"))
    out("carol without team", user(CAROL, [], "print(do(os.listdir, 's'))"))
    # chmod g-w by the owner: BOB's rw- entry gives r-- under the mask.
    out("alice chmod", user(ALICE, [], "print(do(os.chmod, 's/a', 0o640))"))
    out("bob after chmod", user(BOB, [], "print(do(write, 's/a', b'bob'), do(lambda: open('s/a').read()))"))
    # Only the owner sets an ACL; getfacl is anyone's.
    out("alice setfacl", user(ALICE, [], "import subprocess; print(subprocess.run(['setfacl', '-m', 'u:60203:rw', 's/a']).returncode)"))
    out("bob setfacl", user(BOB, [], "import subprocess; print(subprocess.run(['setfacl', '-m', 'u:60202:rwx', 's/a'], capture_output=True).returncode)"))
    out("after setfacl", mode("s/a") + " " + acl("s/a"))
    # Setting an ACL drops set-group-id for an owner outside the group.
    w("g")
    os.chown("g", ALICE, STAFF)
    os.chmod("g", 0o2770)
    out("sgid", user(ALICE, [], "import subprocess; print(subprocess.run(['setfacl', '-m', 'u:60202:r', 'g']).returncode)") + " " + mode("g"))
    os.chmod("g", 0o2770)
    out("sgid member", user(ALICE, [STAFF], "import subprocess; print(subprocess.run(['setfacl', '-m', 'u:60203:r', 'g']).returncode)") + " " + mode("g"))

# Flags.
w("imm")
out("chattr +i", rc("chattr", "+i", "imm") + " " + flags("imm"))
out("imm write", do(lambda: open("imm", "a").write("x")))
out("imm unlink", do(os.unlink, "imm"))
out("imm rename", do(os.rename, "imm", "imm2"))
out("imm link", do(os.link, "imm", "imm3"))
out("imm chmod", do(os.chmod, "imm", 0o600))
out("imm chown", do(os.chown, "imm", 1, 1))
out("imm truncate", do(os.truncate, "imm", 0))
out("imm setxattr", do(os.setxattr, "imm", "user.x", b"1"))
out("imm setfacl", rc("setfacl", "-m", f"u:{BOB}:r", "imm"))
out("imm read", do(lambda: open("imm").read()))
w("log", b"one\n")
os.chmod("log", 0o666)
if users:
    os.chown("log", ALICE, ALICE)
out("chattr +a", rc("chattr", "+a", "log") + " " + flags("log"))
out("log append", do(lambda: open("log", "a").write("two\n")))
out("log write", do(lambda: open("log", "r+").write("X")))
out("log trunc", do(lambda: open("log", "w")))
out("log unlink", do(os.unlink, "log"))
out("log rename", do(os.rename, "log", "log2"))
os.mkdir("idir")
w("idir/f")
out("chattr +i dir", rc("chattr", "+i", "idir") + " " + flags("idir"))
out("idir create", do(w, "idir/g"))
out("idir unlink", do(os.unlink, "idir/f"))
out("idir write", do(w, "idir/f", b"new"))
w("nd")
out("chattr +dA", rc("chattr", "+dA", "nd") + " " + flags("nd"))
out("chattr -dA", rc("chattr", "-dA", "nd") + " " + flags("nd"))
if users:
    os.chown("nd", ALICE, ALICE)
    out("owner +d", user(ALICE, [], "import subprocess; print(subprocess.run(['chattr', '+d', 'nd']).returncode)") + " " + flags("nd"))
    out("owner +i", user(ALICE, [], "import subprocess; print(subprocess.run(['chattr', '+i', 'nd'], capture_output=True).returncode)") + " " + flags("nd"))
    out("owner -a", user(ALICE, [], "import subprocess; print(subprocess.run(['chattr', '-a', 'log'], capture_output=True).returncode)") + " " + flags("log"))
    out("alice appends", user(ALICE, [], "print(do(write, 'log', b'three\\n'), do(write, 'log', b'x', os.O_WRONLY))"))
out("chattr -i -a", rc("chattr", "-i", "imm", "idir") + " " + rc("chattr", "-a", "log") + " " + flags("imm") + flags("log"))
out("log content", repr(open("log").read()))
out("cleared", do(os.unlink, "imm") + " " + do(os.unlink, "log") + " " + do(os.unlink, "idir/f"))
"#;

fn scenario(base: &Path, users: bool) -> String {
    let o = Command::new(python_bin())
        .arg("-c")
        .arg(SCENARIO)
        .arg(s(base))
        .arg(if users { "1" } else { "0" })
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "scenario on {}: {err}", base.display());
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// ext4 on a loop device, for the same scenario; None where it cannot be made.
struct Ext4 {
    _tmp: tempfile::TempDir,
    mnt: std::path::PathBuf,
}

impl Ext4 {
    fn new() -> Option<Ext4> {
        if !have("mkfs.ext4") || !have("losetup") {
            return None;
        }
        let tmp = tempfile::tempdir().ok()?;
        let img = tmp.path().join("ext4.img");
        let mnt = tmp.path().join("mnt");
        std::fs::create_dir(&mnt).ok()?;
        std::fs::File::create(&img).ok()?.set_len(64 << 20).ok()?;
        let ok = |c: &mut Command| c.output().is_ok_and(|o| o.status.success());
        if !ok(Command::new("mkfs.ext4").args(["-q", "-F", s(&img)])) {
            return None;
        }
        if !ok(Command::new("mount").args(["-o", "loop", s(&img), s(&mnt)])) {
            return None;
        }
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755));
        Some(Ext4 { _tmp: tmp, mnt })
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
    }
}

fn prerequisites() -> bool {
    if !is_root() {
        eprintln!("SKIPPED ACL tests: they need root to switch users");
        return false;
    }
    for tool in ["setpriv", "python3", "setfacl", "getfacl", "chattr", "lsattr"] {
        if !have(tool) {
            eprintln!("SKIPPED ACL tests: {tool} is missing (scripts/setup.sh installs it)");
            return false;
        }
    }
    true
}

/// Lines of the transcript both must show whatever ext4 does (so the test
/// says something where no loop device can be made).
fn check_expected(t: &str, users: bool) {
    let want_root = [
        "setfacl access: ok",
        "mode s: 0o770",
        // The file has BOB's rw- under a mask rw- (0666 & the default's
        // mask), no umask applied (it was 077).
        "inherited file: 0o660 user::rw- user:60202:rw- group::r-x\t#effective:r-- group:4343:r-- mask::rw- other::---",
        "chmod masks: 0o640",
        "equivalent acl: ok 0o751 user::rwx group::r-x other::--x",
        "default on a file: fail",
        "bad acl: EINVAL",
        "chattr +i: ok i",
        "imm write: EPERM",
        "imm unlink: EPERM",
        "imm rename: EPERM",
        "imm link: EPERM",
        "imm chmod: EPERM",
        "imm truncate: EPERM",
        "imm setxattr: EPERM",
        "imm setfacl: fail",
        "imm read: ok",
        "chattr +a: ok a",
        "log append: ok",
        "log write: EPERM",
        "log trunc: EPERM",
        "log unlink: EPERM",
        "idir create: EPERM",
        "idir unlink: EPERM",
        "chattr +dA: ok dA",
        "chattr -dA: ok ",
        "cleared: ok ok ok",
    ];
    let want_users = [
        "alice creates: ok ok",
        "bob lists: EACCES",
        "bob rw: ok ok",
        "bob creates: EACCES",
        "carol lists: ok ok EACCES",
        "carol without team: EACCES",
        "bob after chmod: EACCES ok",
        "alice setfacl: 0",
        "bob setfacl: 1",
        "sgid: 0 0o770",
        "sgid member: 0 0o2770",
        "owner +d: 0 d",
        "owner +i: 1 d",
        "owner -a: 1 a",
        "alice appends: ok EPERM",
    ];
    let lines: Vec<&str> = t.lines().collect();
    let wanted = want_root.iter().chain(if users { &want_users[..] } else { &[] });
    for w in wanted {
        assert!(lines.iter().any(|l| l.starts_with(w)), "missing {w:?} in:\n{t}");
    }
}

fn compare(opts: &[&str], users: bool) {
    let pool = Pool::new(2, "64M");
    let m = pool.mount(opts);
    let ours = scenario(&m.mnt, users);
    m.unmount();
    pool.fsck_clean();
    check_expected(&ours, users);
    match Ext4::new() {
        Some(e) => {
            let theirs = scenario(&e.mnt, users);
            for (a, b) in ours.lines().zip(theirs.lines()) {
                assert_eq!(a, b, "Hurricane (-o {opts:?}) and ext4 differ:\n{ours}\n---- ext4:\n{theirs}");
            }
            assert_eq!(ours.lines().count(), theirs.lines().count());
        }
        None => eprintln!("no ext4 loop device: checked the expected lines only"),
    }
}

/// A shared mount: the kernel evaluates the ACLs (FUSE_POSIX_ACL), and
/// the engine again.
#[test]
fn acls_and_flags_with_allow_other_match_ext4() {
    require_fuse!();
    if prerequisites() {
        compare(&["allow_other"], true);
    }
}

/// The engine alone checks (no `default_permissions`); only root reaches
/// the mount, and the flags hold even for root.
#[test]
fn acls_and_flags_with_engine_permissions_match_ext4() {
    require_fuse!();
    if prerequisites() {
        compare(&[], false);
    }
}
