//! `colocate` through a real mount: a directory default set with
//! setfattr, 200 small files of 1 to 8 KiB copied in by `cp -r`, every one
//! the same as its source after a remount (`diff -r`, and read back one by
//! one), the layout shown by `hurricane layout get`, and the pool
//! consistent.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;

fn setxattr(p: &std::path::Path, name: &str, v: &[u8]) {
    let (c, n) = (cpath(p), std::ffi::CString::new(name).unwrap());
    // SAFETY: valid NUL-terminated strings and a buffer of v.len() bytes.
    check(unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) }).unwrap();
}

#[test]
fn small_files_copied_into_a_colocate_directory_read_back_after_a_remount() {
    require_fuse!();
    let pool = Pool::new(1, "128M");
    // The source: 200 files of 1 to 8 KiB, most not a whole number of blocks.
    let src = pool.tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let mut files = Vec::new();
    for i in 0..200u64 {
        let len = 1024 + (i as usize * 7919) % (7 * 1024 + 1);
        let name = format!("f{i:03}");
        let body = data(len, i);
        std::fs::write(src.join(&name), &body).unwrap();
        files.push((name, body));
    }
    let m = pool.mount(&[]);
    let d = m.path("small");
    std::fs::create_dir(&d).unwrap();
    if have("setfattr") {
        ok("setfattr", &["-n", "user.hurricane.dir_layout", "-v", "colocate", s(&d)]);
    } else {
        setxattr(&d, "user.hurricane.dir_layout", b"colocate");
    }
    ok("cp", &["-r", &format!("{}/.", s(&src)), s(&d)]);
    ok("diff", &["-r", s(&src), s(&d)]);
    let l = hurricane(&["layout", "get", s(&d.join("f000"))]);
    assert!(l.contains("colocate"), "{l}");
    m.unmount();
    pool.fsck_clean();

    let m = pool.mount(&[]);
    let d = m.path("small");
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3\n");
    ok("diff", &["-r", s(&src), s(&d)]);
    for (name, body) in &files {
        let path = d.join(name);
        assert!(std::fs::read(&path).unwrap() == *body, "{name} after a remount");
        let shown = cmd("cat", &[s(&path)]);
        assert!(shown.status.success() && shown.stdout == *body, "{name}: cat");
    }
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), files.len());
    for name in ["f000", "f117", "f199"] {
        let l = hurricane(&["layout", "get", s(&d.join(name))]);
        assert!(l.contains("colocate"), "{name}: {l}");
    }
    m.unmount();
    pool.fsck_clean();
}
