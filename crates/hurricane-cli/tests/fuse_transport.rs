//! The two ways requests reach the mount: per-CPU io_uring queues (the
//! default where the kernel offers FUSE over io_uring) and reads of
//! /dev/fuse (`-o nouring`). Both must serve the same operations with the
//! same results; the statistics say which one did.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;

/// Whether this kernel can serve FUSE through io_uring at all.
fn kernel_has_uring() -> bool {
    std::path::Path::new("/sys/module/fuse/parameters/enable_uring").exists() && is_root()
}

fn ring_requests(v: &hurricane_fuse::StatsReport) -> u64 {
    v.transport.ring_requests.iter().sum()
}

/// Operations of every kind, each checked: names, data of several request
/// sizes (the largest fills a ring entry's payload), attributes, xattrs,
/// links, directory listings, rename and removal.
fn workload(m: &Mounted) {
    let d = m.path("w");
    std::fs::create_dir(&d).expect("mkdir");
    let big = data(3 << 20, 7);
    for (i, len) in [0usize, 1, 4095, 4096, 65_537, 1 << 20, 3 << 20].into_iter().enumerate() {
        let p = d.join(format!("f{i}"));
        std::fs::write(&p, &big[..len]).expect("write");
        assert_eq!(std::fs::read(&p).expect("read"), &big[..len], "file of {len} bytes");
    }
    let mut f = std::fs::OpenOptions::new().read(true).write(true).open(d.join("f6")).expect("open");
    f.seek(SeekFrom::Start(1000)).expect("seek");
    f.write_all(b"overwritten").expect("overwrite");
    f.sync_all().expect("fsync");
    let mut back = vec![0u8; 11];
    f.seek(SeekFrom::Start(1000)).expect("seek");
    f.read_exact(&mut back).expect("read back");
    assert_eq!(&back, b"overwritten");
    drop(f);

    std::fs::set_permissions(d.join("f1"), std::fs::Permissions::from_mode(0o640)).expect("chmod");
    assert_eq!(std::fs::metadata(d.join("f1")).expect("stat").permissions().mode() & 0o777, 0o640);
    ok("setfattr", &["-n", "user.k", "-v", "v1", s(&d.join("f2"))]);
    assert!(ok("getfattr", &["-n", "user.k", s(&d.join("f2"))]).contains("user.k=\"v1\""));
    std::os::unix::fs::symlink("f3", d.join("sym")).expect("symlink");
    assert_eq!(std::fs::read_link(d.join("sym")).expect("readlink").to_str(), Some("f3"));
    std::fs::hard_link(d.join("f3"), d.join("hard")).expect("link");
    std::fs::rename(d.join("f4"), d.join("renamed")).expect("rename");
    let mut names: Vec<String> = std::fs::read_dir(&d)
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    names.sort();
    assert_eq!(names, ["f0", "f1", "f2", "f3", "f5", "f6", "hard", "renamed", "sym"]);
    for n in &names {
        std::fs::remove_file(d.join(n)).expect("unlink");
    }
    std::fs::remove_dir(&d).expect("rmdir");
    assert!(!d.exists());
}

#[test]
fn io_uring_queues_serve_the_mount() {
    require_fuse!();
    if !kernel_has_uring() {
        eprintln!("SKIPPED: this kernel has no FUSE over io_uring (or not root)");
        return;
    }
    let pool = Pool::new(3, "512M");
    let m = pool.mount(&[]);
    let before = m.stats();
    assert!(before.transport.io_uring, "{before:?}");
    assert!(before.kernel_features.iter().any(|x| x == "over_io_uring"), "{before:?}");
    workload(&m);
    let after = m.stats();
    // Dozens of requests went through the rings, not a handful.
    assert!(ring_requests(&after) >= ring_requests(&before) + 50, "before {before:?}\nafter {after:?}");
    assert!(hurricane(&["stats", s(&m.mnt)]).contains("requests through io_uring"));
    m.unmount();
    pool.fsck_clean();
    // The data survives a remount.
    let m = pool.mount(&[]);
    std::fs::write(m.path("again"), b"after remount").expect("write");
    m.unmount();
    let m = pool.mount(&["nouring"]);
    assert_eq!(std::fs::read(m.path("again")).expect("read"), b"after remount");
    m.unmount();
}

#[test]
fn dev_fuse_reads_serve_the_mount() {
    require_fuse!();
    let pool = Pool::new(2, "512M");
    let m = pool.mount(&["nouring"]);
    workload(&m);
    let v = m.stats();
    assert!(!v.transport.io_uring, "{v:?}");
    assert_eq!(ring_requests(&v), 0, "{v:?}");
    assert!(hurricane(&["stats", s(&m.mnt)]).contains("/dev/fuse"));
    m.unmount();
    pool.fsck_clean();
}
