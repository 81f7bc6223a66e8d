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

/// Whether the tests of the io_uring transport can run here; says why not.
fn uring_or_skip() -> bool {
    let ok = kernel_has_uring();
    if !ok {
        eprintln!("SKIPPED: this kernel has no FUSE over io_uring (or not root)");
    }
    ok
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
    if !uring_or_skip() {
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

/// The CPUs a thread of `pid` may run on, by thread name.
fn thread_cpus(pid: u32) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default().trim().to_string();
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        if let Some(l) = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")) {
            out.push((comm, l.trim().to_string()));
        }
    }
    out
}

/// Each queue thread is pinned to its CPU, and a thread inherits the CPUs
/// of the one that starts it. A scrub started through the mount (its
/// request taken by one queue thread) must still run on every CPU the
/// mount has, or its workers take turns on one.
#[test]
fn jobs_started_by_a_queue_thread_run_on_every_cpu() {
    require_fuse!();
    if !uring_or_skip() {
        return;
    }
    let pool = Pool::new(3, "512M");
    let m = pool.mount(&[]);
    assert!(m.stats().transport.io_uring);
    std::fs::write(m.path("big"), data(32 << 20, 7)).expect("write");
    let main_cpus = thread_cpus(m.pid).into_iter().find(|(n, _)| n == "hurricane").map(|(_, c)| c).expect("main");
    let queues: Vec<String> =
        thread_cpus(m.pid).into_iter().filter(|(n, _)| n.starts_with("hurricane-uring")).map(|(_, c)| c).collect();
    assert!(!queues.is_empty());
    // A slow scrub (1 MiB/s), so its thread is there to look at.
    let mut scrub = std::process::Command::new(BIN)
        .args(["scrub", s(&m.mnt), "--rate", "1M"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("scrub");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let maint = loop {
        if let Some((_, c)) = thread_cpus(m.pid).into_iter().find(|(n, _)| n == "hurricane-maint") {
            break c;
        }
        assert!(std::time::Instant::now() < deadline, "no scrub thread in the mount");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let _ = scrub.kill();
    let _ = scrub.wait();
    assert_eq!(maint, main_cpus, "scrub thread CPUs {maint}, the mount's {main_cpus}, queues {queues:?}");
    if main_cpus.contains(['-', ',']) {
        // More than one CPU: the premise holds, queue threads are pinned
        // (those of CPUs that are possible but offline cannot be).
        assert!(queues.iter().any(|q| q != &main_cpus), "{queues:?} vs {main_cpus}");
    }
    m.unmount();
    pool.fsck_clean();
}
