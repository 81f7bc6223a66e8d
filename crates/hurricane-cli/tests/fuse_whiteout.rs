//! RENAME_WHITEOUT through the mount, and a mount as the upper layer of an
//! overlay file system (which makes whiteouts, keeps trusted.overlay.*
//! attributes and reads d_type).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

fn renameat2(from: &Path, to: &Path, flags: u32) -> io::Result<()> {
    let (f, t) = (cpath(from), cpath(to));
    // SAFETY: two NUL-terminated paths.
    check(unsafe { libc::renameat2(libc::AT_FDCWD, f.as_ptr(), libc::AT_FDCWD, t.as_ptr(), flags) }).map(|_| ())
}

/// A whiteout: a character device 0:0.
fn is_whiteout(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_char_device() && m.rdev() == 0)
}

#[test]
fn rename_whiteout_leaves_a_whiteout() {
    require_fuse!();
    if !is_root() {
        eprintln!("SKIP: RENAME_WHITEOUT needs CAP_MKNOD");
        return;
    }
    let pool = Pool::new(1, "64M");
    let m = pool.mount(&[]);
    fs::create_dir_all(m.path("a/dir/in")).unwrap();
    fs::create_dir(m.path("b")).unwrap();
    fs::write(m.path("a/f"), b"F").unwrap();
    fs::write(m.path("b/over"), b"O").unwrap();
    let ino = fs::metadata(m.path("a/f")).unwrap().ino();
    // Over an existing file, across directories.
    renameat2(&m.path("a/f"), &m.path("b/over"), libc::RENAME_WHITEOUT).unwrap();
    assert_eq!(fs::read(m.path("b/over")).unwrap(), b"F");
    assert_eq!(fs::metadata(m.path("b/over")).unwrap().ino(), ino);
    assert!(is_whiteout(&m.path("a/f")), "no whiteout where a/f was");
    let w = fs::symlink_metadata(m.path("a/f")).unwrap();
    assert_eq!((w.mode() & 0o7777, w.nlink(), w.uid()), (0, 1, 0));
    // A directory, with NOREPLACE.
    renameat2(&m.path("a/dir"), &m.path("a/moved"), libc::RENAME_WHITEOUT | libc::RENAME_NOREPLACE).unwrap();
    assert!(is_whiteout(&m.path("a/dir")));
    assert!(m.path("a/moved/in").is_dir());
    let e = renameat2(&m.path("a/moved"), &m.path("b/over"), libc::RENAME_WHITEOUT | libc::RENAME_NOREPLACE);
    assert_eq!(errno(e), libc::EEXIST);
    let e = renameat2(&m.path("a/moved"), &m.path("b/over"), libc::RENAME_WHITEOUT | libc::RENAME_EXCHANGE);
    assert_eq!(errno(e), libc::EINVAL);
    let mut names: Vec<String> =
        fs::read_dir(m.path("a")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["dir", "f", "moved"]);
    // The whiteouts are there after a remount, and removed like any node.
    m.unmount();
    let m = pool.mount(&[]);
    assert!(is_whiteout(&m.path("a/f")) && is_whiteout(&m.path("a/dir")));
    fs::remove_file(m.path("a/f")).unwrap();
    fs::remove_file(m.path("a/dir")).unwrap();
    m.unmount();
    pool.fsck_clean();
}

struct Mounts(Vec<std::path::PathBuf>);

impl Drop for Mounts {
    fn drop(&mut self) {
        for p in self.0.iter().rev() {
            let _ = cmd("umount", &["-l", s(p)]);
        }
    }
}

/// An overlay file system with its lower layer on a tmpfs and its upper
/// layer and work directory on the mount: a deleted lower file stays
/// hidden (a whiteout in the upper layer), a lower directory renamed
/// (redirect_dir: a trusted.overlay.redirect attribute) keeps its
/// contents, and all of it holds after both are mounted again.
#[test]
fn an_overlay_with_its_upper_layer_on_the_mount() {
    require_fuse!();
    if !is_root() || !fs::read_to_string("/proc/filesystems").unwrap_or_default().contains("overlay") {
        eprintln!("SKIP: needs root and overlayfs");
        return;
    }
    let pool = Pool::new(1, "64M");
    let m = pool.mount(&[]);
    let (lower, merged) = (pool.tmp.path().join("lower"), pool.tmp.path().join("merged"));
    fs::create_dir(&lower).unwrap();
    fs::create_dir(&merged).unwrap();
    let mut mounts = Mounts(Vec::new());
    ok("mount", &["-t", "tmpfs", "tmpfs", s(&lower)]);
    mounts.0.push(lower.clone());
    fs::create_dir_all(lower.join("d/sub")).unwrap();
    fs::write(lower.join("a"), b"A").unwrap();
    fs::write(lower.join("b"), b"B").unwrap();
    fs::write(lower.join("d/x"), b"X").unwrap();
    fs::create_dir(m.path("upper")).unwrap();
    fs::create_dir(m.path("work")).unwrap();
    let opts = format!(
        "lowerdir={},upperdir={},workdir={},redirect_dir=on",
        s(&lower),
        s(&m.path("upper")),
        s(&m.path("work"))
    );
    let mount_overlay = |mounts: &mut Mounts| {
        let (rc, out, err) = {
            let o = cmd("mount", &["-t", "overlay", "overlay", "-o", &opts, s(&merged)]);
            (
                o.status.code(),
                String::from_utf8_lossy(&o.stdout).into_owned(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        };
        let dmesg =
            String::from_utf8_lossy(&cmd("dmesg", &[]).stdout).lines().rev().take(5).collect::<Vec<_>>().join("\n");
        assert_eq!(rc, Some(0), "overlay mount: {out}{err}\n{dmesg}");
        mounts.0.push(merged.clone());
    };
    mount_overlay(&mut mounts);
    let seen = |when: &str| {
        assert!(!merged.join("a").exists(), "{when}: the deleted lower file shows");
        assert!(!merged.join("b").exists() && !merged.join("d").exists(), "{when}: a renamed lower entry shows");
        assert_eq!(fs::read(merged.join("b2")).unwrap(), b"B", "{when}");
        assert_eq!(fs::read(merged.join("d2/x")).unwrap(), b"X", "{when}");
        assert!(merged.join("d2/sub").is_dir(), "{when}");
        assert_eq!(fs::read(merged.join("new")).unwrap(), b"N", "{when}");
        let mut names: Vec<String> =
            fs::read_dir(&merged).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(names, ["b2", "d2", "new"], "{when}");
    };
    fs::remove_file(merged.join("a")).unwrap();
    assert!(is_whiteout(&m.path("upper/a")), "no whiteout in the upper layer for a");
    fs::rename(merged.join("b"), merged.join("b2")).unwrap();
    fs::rename(merged.join("d"), merged.join("d2")).unwrap();
    fs::write(merged.join("new"), b"N").unwrap();
    assert!(is_whiteout(&m.path("upper/b")) && is_whiteout(&m.path("upper/d")));
    let redirect = xattr_of(&m.path("upper/d2"), "trusted.overlay.redirect");
    assert!(redirect.is_some(), "the renamed directory has no redirect attribute in the upper layer");
    seen("overlay mounted");
    ok("umount", &[s(&merged)]);
    mounts.0.pop();
    m.unmount();
    let m = pool.mount(&[]);
    mount_overlay(&mut mounts);
    seen("both mounted again");
    ok("umount", &[s(&merged)]);
    mounts.0.pop();
    m.unmount();
    drop(mounts);
    pool.fsck_clean();
}

fn xattr_of(p: &Path, name: &str) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 4096];
    let (c, n) = (cpath(p), std::ffi::CString::new(name).unwrap());
    // SAFETY: NUL-terminated path and name, and a buffer of its length.
    let r = unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (r >= 0).then(|| {
        buf.truncate(r as usize);
        buf
    })
}
