//! The `log` layout through a real mount: fio overwrites and verifies log
//! files while `hurricane clean` passes move their blocks (no verify
//! error), `hurricane stats` shows the log's counters, and the offline
//! form cleans the pool.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;

fn setxattr(p: &std::path::Path, name: &str, v: &[u8]) -> std::io::Result<libc::c_int> {
    let (c, n) = (cpath(p), std::ffi::CString::new(name).unwrap());
    // SAFETY: valid NUL-terminated strings and a buffer of v.len() bytes.
    check(unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) })
}

#[test]
fn fio_verifies_log_files_while_the_cleaner_moves_them() {
    require_fuse!();
    if !have("fio") {
        eprintln!("skipped: no fio");
        return;
    }
    let pool = Pool::new(2, "128M");
    let m = pool.mount(&[]);
    let d = m.path("d");
    std::fs::create_dir(&d).unwrap();
    setxattr(&d, "user.hurricane.dir_layout", b"log(segment=256K)@1").unwrap();
    let mut cleaned = Vec::new();
    std::thread::scope(|sc| {
        let fio = sc.spawn(|| fio_check(&d, "randwrite", "4k", "psync", "12M", &["--rate=4m"]));
        while !fio.is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(300));
            cleaned.push(hurricane(&["clean", s(&m.mnt), "--policy", "greedy"]));
        }
        let (ok, text) = fio.join().unwrap();
        assert!(ok, "fio found data that differs:\n{text}");
    });
    assert!(cleaned.iter().any(|o| o.starts_with("cleaned ") && !o.starts_with("cleaned 0 ")), "{cleaned:?}");
    let st = m.stats();
    assert!(st.log.iter().any(|l| l.device == 1 && l.written_blocks > 0 && l.moved_blocks > 0), "{:?}", st.log);
    let text = hurricane(&["stats", s(&m.mnt)]);
    assert!(text.contains("log on device 1:"), "{text}");
    for e in std::fs::read_dir(&d).unwrap() {
        let l = hurricane(&["layout", "get", s(&e.unwrap().path())]);
        assert!(l.contains("log(segment=256K)@1"), "{l}");
    }
    m.unmount();
    let out = hurricane(&["clean", s(&pool.dir), "--json"]);
    assert!(out.contains("segments_cleaned"), "{out}");
    pool.fsck_clean();
}

/// A mount killed with unsynced overwrites of a log file: the pool's next
/// open rolls them forward from the log's summaries (fsck says so), and
/// the file reads back with them.
#[test]
fn a_killed_mount_loses_no_log_overwrite_that_reached_the_image() {
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    require_fuse!();
    let pool = Pool::new(1, "128M");
    // No background commit within the test, and no data cache in the mount:
    // a write goes to the image file when it returns.
    let m = pool.mount(&["commit_interval=3600", "cache=0"]);
    let d = m.path("d");
    std::fs::create_dir(&d).unwrap();
    setxattr(&d, "user.hurricane.dir_layout", b"log@0").unwrap();
    let mut want: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    let path = d.join("f");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&want).unwrap();
    f.sync_all().unwrap();
    for k in 0..16usize {
        let off = (k * 37 % 1024) * 4096;
        let block = vec![k as u8 + 1; 4096];
        f.write_all_at(&block, off as u64).unwrap();
        want[off..off + 4096].copy_from_slice(&block);
    }
    drop(f);
    std::thread::sleep(std::time::Duration::from_millis(300));
    m.kill9();
    // A read-only check finds them and leaves them; a repairing one (a
    // writable open) writes them again.
    let out = hurricane(&["fsck", s(&pool.dir)]);
    assert!(out.contains("16 log writes made after the last commit reached the disk"), "{out}");
    assert!(out.contains("consistent"), "{out}");
    let out = hurricane(&["fsck", "--repair", s(&pool.dir)]);
    assert!(out.contains("rolled forward 16 of 16 log writes"), "{out}");
    assert!(out.contains("consistent"), "{out}");
    let m = pool.mount(&[]);
    assert!(std::fs::read(m.path("d/f")).unwrap() == want, "the overwrites were not rolled forward");
    drop(m);
    pool.fsck_clean();
}

/// A log file fills its device through the mount, is removed, and a new
/// one is written at once (no sync between: the removed file's space is
/// free only once the removal commits): the writer reclaims that space
/// rather than fail with ENOSPC, and gets as much as the first. Both
/// read back as written, after a remount too, and fsck finds the pool
/// consistent.
#[test]
fn a_log_that_filled_its_device_takes_as_much_again_after_a_removal() {
    use std::io::Write;
    require_fuse!();
    let pool = Pool::new(1, "32M");
    let m = pool.mount(&["commit_interval=3600", "cache=0"]);
    let d = m.path("d");
    std::fs::create_dir(&d).unwrap();
    setxattr(&d, "user.hurricane.dir_layout", b"log@0").unwrap();
    let chunk = 1 << 20;
    // Written chunk by chunk, each made durable at once, until ENOSPC.
    let mut f = std::fs::File::create(d.join("a")).unwrap();
    let mut a = 0usize;
    loop {
        let r = f.write_all(&data(chunk, a as u64)).and_then(|()| f.sync_data());
        match r {
            Ok(()) => a += chunk,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("writing a at {a}: {e}"),
        }
        assert!(a <= 32 << 20, "a 32 MiB device took {a} bytes");
    }
    drop(f);
    assert!(a >= 16 << 20, "ENOSPC after {a} bytes of a 32 MiB device");
    std::fs::remove_file(d.join("a")).unwrap();
    // As much again, less the chunk the first fill lost at its end: no
    // sync until the end.
    let b = a - chunk;
    let mut f = std::fs::File::create(d.join("b")).unwrap();
    for off in (0..b).step_by(chunk) {
        f.write_all(&data(chunk, off as u64 + 7)).unwrap_or_else(|e| panic!("writing b at {off} (a took {a}): {e}"));
    }
    f.sync_all().unwrap_or_else(|e| panic!("syncing b ({b} bytes, a took {a}): {e}"));
    drop(f);
    let check = |path: &std::path::Path| {
        let got = std::fs::read(path).unwrap();
        assert_eq!(got.len(), b);
        for off in (0..b).step_by(chunk) {
            assert!(got[off..off + chunk] == data(chunk, off as u64 + 7)[..], "b differs at {off}");
        }
    };
    check(&d.join("b"));
    m.unmount();
    pool.fsck_clean();
    let m = pool.mount(&[]);
    check(&m.path("d/b"));
    m.unmount();
}
