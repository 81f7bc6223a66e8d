//! Truthful health through the CLI and a mount: files whose data a read,
//! scrub, `device replace` or `fsck --data` found no good copy of are
//! listed by `hurricane status` ("permanent errors"), which exits 1 until
//! they are rewritten, deleted, scrubbed clean or cleared with
//! `--clear-errors`; and `device replace` of a device full of garbage
//! rebuilds what it copied from the other copies rather than copy the
//! garbage.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use hurricane_fuse::report::StatusReport;
use std::path::Path;

/// `hurricane status` as text and as JSON: (exit status, text, report).
fn status(target: &Path) -> (i32, String, StatusReport) {
    let (code, text, err) = run(&["status", s(target)]);
    let (jcode, json, _) = run(&["status", "--json", s(target)]);
    assert_eq!(code, jcode, "{text}{err}");
    let rep = StatusReport::from_json(json.as_bytes()).unwrap_or_else(|e| panic!("{e}: {json}{err}"));
    (code, text, rep)
}

/// Device blocks of image `img` that hold one of `data`'s whole blocks.
fn blocks_holding(img: &Path, data: &[u8]) -> Vec<usize> {
    let bytes = std::fs::read(img).unwrap();
    let want: std::collections::HashSet<&[u8]> = data.chunks(4096).filter(|c| c.len() == 4096).collect();
    bytes.chunks(4096).enumerate().filter(|(_, c)| want.contains(c)).map(|(i, _)| i).collect()
}

/// Writes pseudo-random garbage over the given blocks of `img` (through
/// the file, as another program would while the pool is in use).
fn garbage(img: &Path, blocks: &[usize], seed: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(img).unwrap();
    for &b in blocks {
        f.write_all_at(&data(4096, seed + b as u64), b as u64 * 4096).unwrap();
    }
    f.sync_all().unwrap();
}

#[test]
fn status_lists_permanent_errors_until_they_are_cleared() {
    let pool = Pool::new(3, "32M");
    let m = data(1 << 20, 1);
    let p = data(64 << 10, 2);
    pool.put("m", &m, "replicate(copies=2)[extent@1,extent@2]");
    pool.put("p", &p, "extent@0");
    let (code, text, _) = status(&pool.dir);
    assert_eq!(code, 0, "{text}");
    // One block of /p, one of a copy of /m.
    let bp = blocks_holding(&pool.dir.join("dev0.img"), &p[..4096]);
    garbage(&pool.dir.join("dev0.img"), &bp, 10);
    let bm = blocks_holding(&pool.dir.join("dev1.img"), &m[8192..12288]);
    garbage(&pool.dir.join("dev1.img"), &bm, 20);

    let (code, out, _) = run(&["scrub", s(&pool.dir)]);
    assert_eq!(code, 4, "{out}");
    let (code, text, rep) = status(&pool.dir);
    assert_eq!(code, 1, "status after a scrub found loss: {text}");
    assert!(text.contains("lost data"), "{text}");
    assert!(text.contains("permanent errors in the following files:"), "{text}");
    assert!(text.contains("/p (bytes 0+4096; found by scrub"), "{text}");
    assert!(!text.contains("/m"), "/m was repaired: {text}");
    assert_eq!(rep.health.error_files, 1);
    assert_eq!(rep.health.errors[0].paths, vec!["/p".to_string()]);
    assert_eq!(rep.health.errors[0].ranges, vec![(0, 4096)]);
    assert_eq!(rep.health.errors[0].source, "scrub");
    assert!(!rep.healthy());

    // A read of the file fails; fsck --data finds it too.
    let dest = pool.tmp.path().join("got-p");
    let (code, _, err) = run(&["get", s(&pool.dir), "/p", s(&dest)]);
    assert_ne!(code, 0, "{err}");
    let (code, out, _) = run(&["fsck", "--data", s(&pool.dir)]);
    assert_eq!(code, 4, "{out}");

    // Cleared: healthy, and it stays so across opens.
    let (code, text, _) = run(&["status", "--clear-errors", s(&pool.dir)]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("healthy"), "{text}");
    assert_eq!(status(&pool.dir).0, 0);
    // A read-only scrub reports it and records nothing (the pool is not
    // written); the next scrub lists it again.
    assert_eq!(run(&["scrub", "--no-repair", s(&pool.dir)]).0, 4);
    assert_eq!(status(&pool.dir).0, 0);
    assert_eq!(run(&["scrub", s(&pool.dir)]).0, 4);
    let (code, text, _) = status(&pool.dir);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("/p (bytes 0+4096"), "{text}");
    // Written again: off the list, and the pool is healthy.
    pool.put("p", &p, "extent@0");
    let (code, text, rep) = status(&pool.dir);
    assert_eq!(code, 0, "{text}");
    assert_eq!(rep.health.error_files, 0);
    assert_eq!(pool.get("p"), p);
    assert_eq!(run(&["scrub", s(&pool.dir)]).0, 0);
    pool.fsck_clean();
}

/// The case: a device overwritten with garbage, then replaced
/// while it still reads. The copy is verified: every copied block of the
/// mirror is rebuilt from the other copy (the new device alone then serves
/// it), and the file with no other copy is reported and listed.
#[test]
fn replacing_a_device_full_of_garbage_rebuilds_it_from_redundancy() {
    let pool = Pool::new(3, "32M");
    let m = data(2 << 20, 3);
    let p = data(100_000, 4);
    pool.put("m", &m, "replicate(copies=2)[extent@0,extent@2]");
    pool.put("p", &p, "extent@0");
    let img0 = pool.dir.join("dev0.img");
    let mut bad = blocks_holding(&img0, &m);
    assert_eq!(bad.len(), 512);
    bad.extend(blocks_holding(&img0, &p));
    garbage(&img0, &bad, 30);
    let new = pool.tmp.path().join("new0.img");
    let (code, out, err) = run(&["device", "replace", s(&pool.dir), "0", s(&new)]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(out.contains("copied") && out.contains("verified, 512 blocks rebuilt from redundancy"), "{out}");
    assert!(out.contains("unrecoverable: /p (bytes 0+98304)"), "{out}");
    assert!(err.contains("1 files have unrecoverable data"), "{err}");
    let (code, text, rep) = status(&pool.dir);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("/p (bytes 0+98304; found by replace"), "{text}");
    assert_eq!(rep.health.errors[0].source, "replace");
    // The other copy gone: the new device serves the mirror as written.
    std::fs::remove_file(pool.dir.join("dev2.img")).unwrap();
    assert_eq!(pool.get("m"), m);
}

#[test]
fn a_mount_reports_permanent_errors_and_clears_them() {
    require_fuse!();
    let pool = Pool::new(3, "32M");
    let mnt = pool.mount(&[]);
    let p = data(64 << 10, 5);
    std::fs::File::create(mnt.path("p")).unwrap();
    hurricane(&["layout", "set", s(&mnt.path("p")), "extent@0"]);
    std::fs::write(mnt.path("p"), &p).unwrap();
    std::fs::write(mnt.path("ok"), b"fine").unwrap();
    // Mounted again: nothing of /p in any cache.
    mnt.unmount();
    let mnt = pool.mount(&[]);
    let (code, text, _) = status(&mnt.mnt);
    assert_eq!(code, 0, "{text}");
    // Garbage under the mount: a read meets it and lists the file.
    let img0 = pool.dir.join("dev0.img");
    let bp = blocks_holding(&img0, &p[8192..12288]);
    assert_eq!(bp.len(), 1);
    garbage(&img0, &bp, 40);
    let e = std::fs::read(mnt.path("p")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let (code, text, rep) = status(&mnt.mnt);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("/p (bytes 8192+4096; found by read"), "{text}");
    assert_eq!(rep.health.errors[0].source, "read");
    // The checksum error is counted against device 0 alone.
    assert!(rep.devices[0].checksum_errors > 0, "{rep:?}");
    assert!(rep.devices[1..].iter().all(|d| d.checksum_errors == 0), "{rep:?}");
    // Cleared through the mount.
    let (code, text, _) = run(&["status", "--clear-errors", s(&mnt.mnt)]);
    assert_eq!(code, 0, "{text}");
    let (code, _, rep) = status(&mnt.mnt);
    assert_eq!(code, 0);
    assert_eq!(rep.health.error_files, 0);
    // Found again by a scrub, kept across the unmount.
    let (code, out, _) = run(&["scrub", s(&mnt.mnt)]);
    assert_eq!(code, 4, "{out}");
    mnt.unmount();
    let (code, text, _) = status(&pool.dir);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("/p (bytes 8192+4096; found by scrub"), "{text}");
}
