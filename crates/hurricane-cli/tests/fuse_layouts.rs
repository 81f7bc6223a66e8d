//! The placement blocks through a real mount: `write-mostly`, `table` and
//! `replicate(read=nearest)` files written and verified by fio, read back
//! after a remount, with the pool consistent.

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
fn placement_layouts_verify_under_fio_and_survive_a_remount() {
    require_fuse!();
    let pool = Pool::new(3, "256M");
    let m = pool.mount(&[]);
    let layouts = [
        ("wm", "write-mostly(unit=64K,width=3)", "write-mostly(unit=64K)["),
        ("tab", "table(map=0-1M:0;1M-4M:1;4M-:0)[extent@0,stripe(unit=64K)[extent@1,extent@2]]", "table(map="),
        ("near", "replicate(read=nearest)[extent@0,extent@2]", "replicate(read=nearest)["),
    ];
    let mut files = Vec::new();
    for (dir, spec, shown) in layouts {
        let d = m.path(dir);
        std::fs::create_dir(&d).unwrap();
        setxattr(&d, "user.hurricane.dir_layout", spec.as_bytes());
        if have("fio") {
            let (ok, text) = fio_check(&d, "randwrite", "16k", "psync", "8M", &[]);
            assert!(ok, "{spec}: fio found data that differs:\n{text}");
        }
        let f = d.join("plain");
        let body = data(5 << 20, dir.len() as u64);
        std::fs::write(&f, &body).unwrap();
        assert!(std::fs::read(&f).unwrap() == body, "{spec}");
        let l = hurricane(&["layout", "get", s(&f)]);
        assert!(l.starts_with(shown), "{spec}: {l}");
        files.push((format!("{dir}/plain"), body));
    }
    m.unmount();
    pool.fsck_clean();
    let m = pool.mount(&[]);
    for (name, body) in &files {
        let _ = std::fs::write("/proc/sys/vm/drop_caches", "3\n");
        assert!(std::fs::read(m.path(name)).unwrap() == *body, "{name} after a remount");
    }
    m.unmount();
    pool.fsck_clean();
}
