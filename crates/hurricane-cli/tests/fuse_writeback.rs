//! `-o writeback_cache`: what each small file written through it costs in
//! requests, and that what it holds reaches the pool.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use std::io::Write;

fn op_count(m: &Mounted, op: &str) -> u64 {
    m.stats().ops.get(op).map_or(0, |o| o.count)
}

#[test]
fn closes_send_no_flush_and_the_data_reaches_the_pool() {
    require_fuse!();
    let pool = Pool::new(2, "256M");
    let m = pool.mount(&["writeback_cache"]);
    assert!(m.stats().kernel_features.iter().any(|f| f == "writeback_cache"));
    std::fs::create_dir(m.path("d")).unwrap();
    for i in 0..50u64 {
        let mut f = std::fs::File::create(m.path(&format!("d/f{i}"))).unwrap();
        f.write_all(&data(4096, i)).unwrap();
    }
    // The kernel ignores NOFLUSH under writeback_cache and sends a FLUSH
    // at every close until it is told the mount has none.
    assert!(op_count(&m, "flush") <= 1, "{} flushes for 50 closes", op_count(&m, "flush"));
    // Each close wrote its file back before returning.
    assert!(op_count(&m, "write") >= 50);
    for i in 0..50u64 {
        assert_eq!(std::fs::read(m.path(&format!("d/f{i}"))).unwrap(), data(4096, i));
    }
    m.unmount();
    let m = pool.mount(&[]);
    for i in 0..50u64 {
        assert_eq!(std::fs::read(m.path(&format!("d/f{i}"))).unwrap(), data(4096, i), "f{i} after a remount");
    }
    m.unmount();
}
