//! Serving a pool in-process (`hurricane_fuse::serve`), as the benchmarks
//! and embedding programs do: a mount that ends leaves nothing of itself
//! behind in the process.

// A test crate: a panic is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

/// This process's threads but the engine's helpers (`hurricane::helpers`):
/// those belong to the process, not to a mount, and end when idle for
/// `helpers::IDLE`, which four mounts on a slow machine may outlast.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        // "hurricane-helper", cut to the kernel's 15 characters.
        .filter(|name| name.trim_end() != "hurricane-helpe")
        .count()
}

/// Serves `pool` at `mnt` on a thread until unmounted; returns serve's result.
fn serve_once(pool: &Path, mnt: &Path) -> Result<(), String> {
    let (p, m) = (pool.to_path_buf(), mnt.to_path_buf());
    let before = hurricane_fuse::mountinfo::mount_ids(mnt);
    let server = std::thread::spawn(move || hurricane_fuse::serve(&p, &m, &hurricane_fuse::MountOptions::default()));
    let t0 = Instant::now();
    while !hurricane_fuse::mountinfo::serves_since(mnt, &before) {
        assert!(!server.is_finished(), "the server ended before it served: {:?}", server.join().unwrap());
        assert!(t0.elapsed() < Duration::from_secs(20), "no mount after 20 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::write(mnt.join("f"), b"data").unwrap();
    hurricane_fuse::mountinfo::unmount(mnt, false)?;
    server.join().unwrap()
}

/// Each ended mount used to leave a thread waiting for a shutdown signal,
/// holding the closed pool (its memory and its devices' descriptors) and
/// the session's unmounter: a process that mounts again and again (the
/// benchmarks restart their mounts before every phase) grew with each.
#[test]
fn a_mount_that_ended_leaves_no_thread_or_descriptor_behind() {
    if !hurricane_fuse::mountinfo::tests_can_mount() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (pool, mnt) = (tmp.path().join("pool"), tmp.path().join("mnt"));
    hurricane::Fs::mkfs_dir(&pool, 2, 64 << 20, &Default::default()).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    // The first round starts what a process keeps once (thread pools).
    serve_once(&pool, &mnt).unwrap();
    let (threads_before, fds) = (threads(), count("/proc/self/fd"));
    for i in 0..4 {
        serve_once(&pool, &mnt).unwrap_or_else(|e| panic!("round {i}: {e}"));
    }
    // Threads that end do so just after the server returns.
    let t0 = Instant::now();
    while threads() > threads_before && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(threads(), threads_before, "threads left behind by four mounts");
    assert_eq!(count("/proc/self/fd"), fds, "descriptors left behind by four mounts");
}
