//! What a create costs the meta-data store alone as its trees grow
//! (BENCHMARKS.md, "The create rate at ten million against a hundred
//! thousand").
//!
//! ```text
//! store_growth FILES [CACHE] [RECORD_BYTES] [CHECKPOINT]
//! ```
//! The three records a create adds at a checkpoint (the inode, the name, the
//! readdir cookie), with the key and value shapes of the store's `inodes`,
//! `names` and `cookies` tables (`hurricane::namespace::store`), one
//! directory, names `f0`, `f1`, ... as `hurricane bench meta-scale` makes
//! them, added in checkpoints of CHECKPOINT inodes (default 10,485, the
//! store's default) in the order checkpoints add them (by key, three of
//! every five and then the other two), each a transaction committed with
//! quick repair, as the store's are. The store is a file of
//! `HURRICANE_BENCH_DIR` (default /var/tmp) with a page cache of CACHE
//! bytes (default 102 MiB, what the default 128 MiB meta-data cache gives
//! it). RECORD_BYTES (default 350) sets the inode record's size: with it a
//! checkpoint writes about the 519 bytes a create that the store's own
//! test measures (`a_checkpoint_of_new_files_fills_the_leaves_it_writes`).
//! With no file system around it, the figures are the store's own: one
//! JSON line at 100,000 files, each further 100,000 to a million, then each
//! million, with the microseconds of commit work a create and the bytes
//! written to and read from the store's file a create over that step, and
//! the heights of the three trees (inodes, names, cookies), read by a walk
//! of each tree whose reads are not counted (its effect on the page cache
//! is).

// An example: a panic is how it reports a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use redb::{Database, ReadableDatabase, ReadableTableMetadata, TableDefinition};
use std::time::Instant;

const INODES: TableDefinition<u64, &[u8]> = TableDefinition::new("inodes");
const NAMES: TableDefinition<(u64, &[u8]), (u64, u32, u64)> = TableDefinition::new("names");
const COOKIES: TableDefinition<(u64, u64), (u64, u32, &[u8])> = TableDefinition::new("cookies");

/// The store's fill order: sorted, then three of every five, then the rest.
fn fill_order<T: Clone + Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    let (first, then): (Vec<_>, Vec<_>) = v.into_iter().enumerate().partition(|(i, _)| !matches!(i % 5, 1 | 3));
    first.into_iter().chain(then).map(|(_, t)| t).collect()
}

/// Bytes this process has written and read through system calls.
fn io() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/io").unwrap();
    let field = |k: &str| -> u64 {
        s.lines().find(|l| l.starts_with(k)).and_then(|l| l.split_whitespace().nth(1)).unwrap().parse().unwrap()
    };
    (field("wchar:"), field("rchar:"))
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let size = |i: usize, d: u64| a.get(i).map_or(d, |s| hurricane::units::parse_size(s).unwrap());
    let files = size(0, 10_000_000);
    let cache = size(1, (128u64 << 20) / 5 * 4) as usize;
    let record = vec![0x5a; size(2, 350) as usize];
    let batch = size(3, 10_485);
    let dir = std::env::var("HURRICANE_BENCH_DIR").unwrap_or_else(|_| "/var/tmp".into());
    let tmp = tempfile::Builder::new().prefix("store-growth.").tempdir_in(dir).unwrap();
    let db = Database::builder().set_cache_size(cache).create(tmp.path().join("store")).unwrap();
    const DIR: u64 = 1;
    let (mut done, mut next) = (0u64, 100_000u64);
    let (mut busy, mut since) = (0f64, 0u64);
    let mut last = io();
    while done < files {
        let end = (done + batch).min(files);
        let inos: Vec<u64> = (done..end).map(|i| i + 2).collect();
        let names: Vec<(Vec<u8>, u64)> = (done..end).map(|i| (format!("f{i}").into_bytes(), i + 2)).collect();
        let t = Instant::now();
        let mut w = db.begin_write().unwrap();
        w.set_quick_repair(true);
        {
            let mut tab = w.open_table(INODES).unwrap();
            for ino in fill_order(inos) {
                tab.insert(ino, record.as_slice()).unwrap();
            }
            let mut tab = w.open_table(NAMES).unwrap();
            for (name, ino) in fill_order(names.clone()) {
                tab.insert((DIR, name.as_slice()), (ino, 1, ino)).unwrap();
            }
            let mut tab = w.open_table(COOKIES).unwrap();
            // A directory's cookies grow with its entries: here the inode
            // number serves.
            for (cookie, name) in fill_order(names.into_iter().map(|(n, ino)| (ino, n)).collect()) {
                tab.insert((DIR, cookie), (cookie, 1, name.as_slice())).unwrap();
            }
        }
        w.commit().unwrap();
        busy += t.elapsed().as_secs_f64();
        since += end - done;
        done = end;
        if done >= next || done == files {
            let now = io();
            let n = since as f64;
            let r = db.begin_read().unwrap();
            let heights = [
                r.open_table(INODES).unwrap().stats().unwrap().tree_height(),
                r.open_table(NAMES).unwrap().stats().unwrap().tree_height(),
                r.open_table(COOKIES).unwrap().stats().unwrap().tree_height(),
            ];
            drop(r);
            // The walk that measured the heights read the trees: not counted.
            let walked = io();
            println!(
                "{{\"files\": {done}, \"us_per_create\": {:.2}, \"written_per_create\": {:.0}, \"read_per_create\": {:.0}, \"tree_heights\": {heights:?}}}",
                busy * 1e6 / n,
                (now.0 - last.0) as f64 / n,
                (now.1 - last.1) as f64 / n
            );
            (busy, since, last) = (0.0, 0, walked);
            next = if next < 1_000_000 { next + 100_000 } else { next + 1_000_000 };
        }
    }
}
