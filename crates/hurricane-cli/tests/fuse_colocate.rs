//! `colocate` through a real mount: a directory default set with
//! setfattr, 200 small files of 1 to 8 KiB copied in by `cp -r`, every one
//! the same as its source after a remount (`diff -r`, and read back one by
//! one), the layout shown by `hurricane layout get`, files grown after
//! the others scattered, regrouped by `hurricane regroup` through the
//! mount and offline, noted by `hurricane fsck` and regrouped by
//! `hurricane fsck --repair`, every byte kept, and the pool consistent.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use std::io::Write;

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
    // Twenty grow after all were copied. The default layout keeps
    // checksums, so the partial last block is rewritten copy-on-write with
    // the new ones after it: a file of one block moves whole (together
    // again), one of more leaves its full blocks behind (scattered).
    let grown = files.iter().take(20).filter(|(_, body)| body.len() > 4096).count() as u64;
    assert!(grown > 5, "{grown}");
    for (name, _) in files.iter().take(20) {
        let more = data(5000, name.len() as u64 + 7);
        for dir in [&src, &d] {
            let mut f = std::fs::OpenOptions::new().append(true).open(dir.join(name)).unwrap();
            f.write_all(&more).unwrap();
        }
    }
    ok("diff", &["-r", s(&src), s(&d)]);
    // Online: one grown file regrouped by the mount; a directory needs -r.
    let mut several = files.iter().take(20).filter(|(_, body)| body.len() > 4096).map(|(n, _)| n.clone());
    let (first, second) = (several.next().unwrap(), several.next().unwrap());
    let out = hurricane(&["regroup", s(&d.join(&first)), "--json"]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((v["files"].as_u64(), v["files_regrouped"].as_u64()), (Some(1), Some(1)), "{out}");
    assert!(v["blocks_moved"].as_u64().unwrap() >= 2, "{out}");
    let again = hurricane(&["regroup", s(&d.join(&first)), "--json"]);
    assert!(again.contains("\"files_regrouped\":0"), "nothing left to move: {again}");
    let refused = cmd(BIN, &["regroup", s(&d)]);
    assert!(!refused.status.success(), "a directory without -r");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("-r"), "{refused:?}");
    ok("diff", &["-r", s(&src), s(&d)]);
    m.unmount();
    // fsck notes the others (not a problem); one more is regrouped
    // offline, and --repair regroups the rest.
    let out = hurricane(&["fsck", s(&pool.dir)]);
    let found: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("note: ")?.split_once(" files have their small-file blocks scattered"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no note of scattered files: {out}"));
    assert!(found + 1 >= grown, "{grown} grown, one regrouped: {out}");
    assert!(out.contains("consistent"), "{out}");
    let out = hurricane(&["regroup", s(&pool.dir), &format!("/small/{second}")]);
    assert!(out.contains("regrouped 1 of 1 files"), "{out}");
    let rest = found - 1;
    let out = hurricane(&["fsck", "--repair", s(&pool.dir)]);
    assert!(out.contains(&format!("note: regrouped {rest} of {rest} files")), "{out}");
    let out = hurricane(&["regroup", s(&pool.dir), "/small", "-r"]);
    assert!(out.contains(&format!("regrouped 0 of {} files", files.len())), "{out}");
    assert!(!out.contains("problem:"), "{out}");
    pool.fsck_clean();
    let out = hurricane(&["fsck", s(&pool.dir)]);
    assert!(!out.contains("scattered"), "{out}");
    let m = pool.mount(&[]);
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3\n");
    ok("diff", &["-r", s(&src), s(&m.path("small"))]);
    m.unmount();
}
