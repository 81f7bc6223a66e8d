//! Online re-layout through a real mount and the CLI: `hurricane migrate
//! -r` moves files fio is writing and verifying (no verify error), `layout
//! get` shows a migration under way, `setfattr user.hurricane.layout` on a
//! file holding data moves it, and the offline forms work on the pool.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use std::time::{Duration, Instant};

fn setxattr(p: &std::path::Path, name: &str, v: &[u8]) -> std::io::Result<libc::c_int> {
    let (c, n) = (cpath(p), std::ffi::CString::new(name).unwrap());
    // SAFETY: valid NUL-terminated strings and a buffer of v.len() bytes.
    check(unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) })
}

fn layout_get(p: &std::path::Path) -> String {
    hurricane(&["layout", "get", s(p)])
}

#[test]
fn files_move_while_fio_writes_and_verifies_them() {
    require_fuse!();
    if !have("fio") {
        eprintln!("skipped: no fio");
        return;
    }
    let pool = Pool::new(4, "256M");
    let m = pool.mount(&[]);
    let d = m.path("d");
    std::fs::create_dir(&d).unwrap();
    setxattr(&d, "user.hurricane.dir_layout", b"extent@0").unwrap();
    let target = "stripe(unit=64K)[extent@1,extent@2,extent@3]";
    std::thread::scope(|sc| {
        let fio = sc.spawn(|| fio_check(&d, "randwrite", "4k", "psync", "16M", &["--rate=6m"]));
        // Once fio has laid its files out, they move under its writes.
        let t0 = Instant::now();
        while std::fs::read_dir(&d).unwrap().filter_map(|e| e.ok()).filter(|e| e.metadata().unwrap().len() > 0).count()
            < 2
        {
            assert!(t0.elapsed() < Duration::from_secs(60), "fio laid out no files");
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = hurricane(&["migrate", s(&d), "--layout", target, "-r", "--rate", "12M"]);
        assert!(out.contains("migrated 2 files"), "{out}");
        let (ok, text) = fio.join().unwrap();
        assert!(ok, "fio found data that differs:\n{text}");
    });
    for e in std::fs::read_dir(&d).unwrap() {
        let l = layout_get(&e.unwrap().path());
        assert!(l.starts_with("stripe(unit=64K)[") && !l.contains("extent@0"), "{l}");
    }
    m.unmount();
    pool.fsck_clean();
}

#[test]
fn layout_get_shows_a_migration_and_setfattr_moves_a_file() {
    require_fuse!();
    let pool = Pool::new(3, "256M");
    let m = pool.mount(&[]);
    let f = m.path("f");
    let want = data(24 << 20, 5);
    std::fs::write(&f, &want).unwrap();
    let before = layout_get(&f);
    // Without --migrate a file holding data keeps its layout.
    let (code, _, err) = run(&["layout", "set", s(&f), "extent@2"]);
    assert!(code != 0 && err.contains("--migrate"), "{code}: {err}");
    let mut seen = String::new();
    std::thread::scope(|sc| {
        let mover = sc.spawn(|| run(&["migrate", s(&f), "--layout", "extent@2", "--rate", "16M"]));
        while !mover.is_finished() {
            let l = layout_get(&f);
            if l.contains("migrating from") {
                seen = l;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let (code, out, err) = mover.join().unwrap();
        assert_eq!(code, 0, "{out}{err}");
    });
    assert!(
        seen.contains(&format!("migrating from {}", before.trim())) && seen.contains("to checksum[extent@2]"),
        "{seen}"
    );
    assert!(std::fs::read(&f).unwrap() == want);
    let l = layout_get(&f);
    assert_eq!(l.trim(), "checksum[extent@2]");
    // The extended attribute moves a file holding data too.
    setxattr(&f, "user.hurricane.layout", b"replicate[extent@0,extent@1]").unwrap();
    assert_eq!(layout_get(&f).trim(), "replicate[checksum[extent@0],checksum[extent@1]]");
    assert!(std::fs::read(&f).unwrap() == want);
    // A spec the pool cannot hold changes nothing.
    assert!(setxattr(&f, "user.hurricane.layout", b"extent@7").is_err());
    assert!(std::fs::read(&f).unwrap() == want);
    m.unmount();
    pool.fsck_clean();
    // Offline: `layout set --migrate` and `migrate` on the pool directory.
    let dir = s(&pool.dir);
    hurricane(&["layout", "set", dir, "/f", "stripe(unit=16K)[extent@1,extent@2]", "--migrate"]);
    assert_eq!(
        hurricane(&["layout", "get", dir, "/f"]).trim(),
        "stripe(unit=16K)[checksum[extent@1],checksum[extent@2]]"
    );
    let out = hurricane(&["migrate", dir, "/", "-r", "--layout", "extent@0"]);
    assert!(out.contains("migrated 1 files"), "{out}");
    let out = hurricane(&["migrate", dir, "/", "-r", "--layout", "extent@0"]);
    assert!(out.contains("migrated 0 files"), "{out}");
    assert!(pool.get("/f") == want);
    pool.fsck_clean();
}
