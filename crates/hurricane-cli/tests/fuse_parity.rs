//! `parity` files through a real mount: fio writes and verifies them
//! (aligned, unaligned, partial-stripe and concurrent writers), and they
//! read back after a remount.

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
fn fio_verifies_parity_files() {
    require_fuse!();
    if !have("fio") {
        eprintln!("SKIPPED fio_verifies_parity_files: fio is not installed");
        return;
    }
    let pool = Pool::new(4, "256M");
    let m = pool.mount(&[]);
    for (dir, spec) in [("p31", "parity(data=3,parity=1)"), ("p22", "parity(data=2,parity=2,unit=8K)")] {
        let d = m.path(dir);
        std::fs::create_dir(&d).unwrap();
        setxattr(&d, "user.hurricane.dir_layout", spec.as_bytes());
        for (rw, bs) in [("randwrite", "4k"), ("write", "1m"), ("randwrite", "6k")] {
            let (good, text) = fio_check(&d, rw, bs, "psync", "8m", &[]);
            assert!(good, "{spec}: fio {rw} {bs}:\n{text}");
        }
        // The files fio made are parity files.
        let f = std::fs::read_dir(&d).unwrap().next().unwrap().unwrap().path();
        let out = cmd("getfattr", &["--only-values", "-n", "user.hurricane.layout", s(&f)]);
        let layout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(!out.status.success() || layout.starts_with("parity("), "{layout}");
    }
    // Data written through the mount reads back after a remount.
    let big = data(5 << 20, 9);
    std::fs::write(m.path("p31/big"), &big).unwrap();
    m.unmount();
    pool.fsck_clean();
    let m = pool.mount(&[]);
    assert!(std::fs::read(m.path("p31/big")).unwrap() == big);
    m.unmount();
}
