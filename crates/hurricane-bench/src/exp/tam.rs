//! `tam`: the microbenchmarks of Tam's thesis (chapters 5 and 6), one file
//! (or directory) per thread, each thread's file on its own device, 1 to N
//! threads together. What scales shows as a flat line: the time each
//! thread takes does not grow with the number of threads.
//!
//! - extent read (5.2): a 12,845,056-byte file (3,136 blocks) on one
//!   device; per block: get the attributes, read the block, update the
//!   access time;
//! - regular read (5.5): read a 4 MB file of the pool's default layout;
//! - create (6.2): 1,000 empty files in the thread's own directory;
//! - lookup (6.3): the 5-component path
//!   `/tN/directory1/directory2/directory3/directory4/lookatme.txt`,
//!   1,000 times;
//! - stat (6.4): the attributes of the thread's extent file, 3,136 times;
//! - stat + lookup (6.4.3): the lookup then the attributes, 1,000 times;
//! - regular write (6.5): 4,096,000 bytes in 4 KiB writes;
//! - extent write (6.6): 3,136 blocks of an extent file, per block the
//!   attributes read and the modification time updated.
//!
//! Each runs cold (the pool opened afresh: no inode, store page or data
//! block cached) and then warm (at once again), with the meta-data cache's
//! hits and misses (inodes, store pages) and the data cache's counted over
//! the run. Natively (`Fs` calls): the thesis ran its tests inside the file
//! system server too. The speedups any machine can show are bounded by its
//! cores: the table gives them, and the threads go to 16 where there are
//! as many.

use super::f2;
use crate::{plot, table, Outcome};
use hurricane::{Creds, FormatOptions, Fs, Options, SetAttr};
use serde_json::json;
use std::path::Path;
use std::sync::Barrier;
use std::time::Instant;

const BLOCK: usize = 4096;
const EXTENT_BYTES: u64 = 12_845_056;
const EXTENT_BLOCKS: u64 = EXTENT_BYTES / BLOCK as u64;
const REGULAR_READ_BYTES: u64 = 4 << 20;
const REGULAR_WRITE_BYTES: u64 = 4_096_000;
const CREATES: u64 = 1000;
const LOOKUPS: u64 = 1000;
const DEEP: &str = "directory1/directory2/directory3/directory4/lookatme.txt";

/// The benchmarks, in the order they run.
const BENCHES: &[&str] =
    &["extent-read", "regular-read", "create", "lookup", "stat", "stat-lookup", "regular-write", "extent-write"];

/// Sizes of one run: the thesis's, or a sixteenth of them for `--quick`.
#[derive(Clone, Copy)]
struct Size {
    div: u64,
}

impl Size {
    fn n(&self, full: u64) -> u64 {
        (full / self.div).max(1)
    }
}

/// The counters a run reads before and after.
#[derive(Clone, Copy, Default)]
struct Counters {
    inode_hits: u64,
    inode_misses: u64,
    page_hits: u64,
    page_misses: u64,
    data_hits: u64,
    data_misses: u64,
}

fn counters(fs: &Fs) -> Counters {
    let m = fs.meta_cache_stats();
    let c = fs.cache_stats();
    Counters {
        inode_hits: m.inodes.hits,
        inode_misses: m.inodes.misses,
        page_hits: m.store.page_hits,
        page_misses: m.store.page_misses,
        data_hits: c.hits,
        data_misses: c.misses,
    }
}

fn delta(a: Counters, b: Counters) -> Counters {
    Counters {
        inode_hits: b.inode_hits.saturating_sub(a.inode_hits),
        inode_misses: b.inode_misses.saturating_sub(a.inode_misses),
        page_hits: b.page_hits.saturating_sub(a.page_hits),
        page_misses: b.page_misses.saturating_sub(a.page_misses),
        data_hits: b.data_hits.saturating_sub(a.data_hits),
        data_misses: b.data_misses.saturating_sub(a.data_misses),
    }
}

/// Lays out every thread's files: `/tN/extent` (extent on device N),
/// `/tN/regular` (4 MB of the default layout), the deep path, and the
/// directory creates go into.
fn populate(fs: &Fs, threads: usize, devices: usize, size: Size) -> Result<(), String> {
    let block = vec![7u8; BLOCK];
    for t in 0..threads {
        let dir = format!("/t{t}");
        fs.mkdir_all(&format!("{dir}/directory1/directory2/directory3/directory4"), 0o755).map_err(crate::err)?;
        fs.write_file(&format!("{dir}/{DEEP}"), b"look at me\n", None).map_err(crate::err)?;
        let layout = format!("extent@{}", t % devices);
        let f = fs.create(&format!("{dir}/extent"), Some(&layout)).map_err(crate::err)?;
        let ino = fs.resolve(&format!("{dir}/extent")).map_err(crate::err)?;
        for b in 0..size.n(EXTENT_BLOCKS) {
            fs.write(ino, b * BLOCK as u64, &block).map_err(crate::err)?;
        }
        drop(f);
        let data = vec![3u8; size.n(REGULAR_READ_BYTES) as usize];
        fs.write_file(&format!("{dir}/regular"), &data, None).map_err(crate::err)?;
    }
    fs.sync().map_err(crate::err)
}

/// Runs `bench` on `threads` threads together; each thread's own time in
/// seconds. `round` names fresh files for the benchmarks that make them.
fn run_bench(fs: &Fs, bench: &str, threads: usize, size: Size, round: usize) -> Result<Vec<f64>, String> {
    let go = Barrier::new(threads);
    let cred = Creds::root();
    let one = |t: usize| -> Result<f64, String> {
        let dir = format!("/t{t}");
        // What each thread needs found before the clock starts.
        let ext = fs.resolve(&format!("{dir}/extent")).map_err(crate::err)?;
        let reg = fs.resolve(&format!("{dir}/regular")).map_err(crate::err)?;
        let deep = format!("{dir}/{DEEP}");
        let create_dir = fs.mkdir_all(&format!("{dir}/c{round}"), 0o755).map_err(crate::err)?;
        let wname = format!("{dir}/w{round}");
        let w = fs.create(&wname, None).map_err(crate::err)?;
        drop(w);
        let wino = fs.resolve(&wname).map_err(crate::err)?;
        let ewname = format!("{dir}/e{round}");
        fs.create(&ewname, Some(&format!("extent@{}", t % fs.storage().devs.len()))).map_err(crate::err)?;
        let ewino = fs.resolve(&ewname).map_err(crate::err)?;
        let mut buf = vec![0u8; BLOCK];
        let data = vec![5u8; BLOCK];
        let touch = |ino, atime: bool| {
            let s = if atime {
                SetAttr { atime: Some(None), ..Default::default() }
            } else {
                SetAttr { mtime: Some(None), ..Default::default() }
            };
            fs.setattr(&cred, ino, &s).map(drop).map_err(crate::err)
        };
        go.wait();
        let t0 = Instant::now();
        match bench {
            "extent-read" => {
                for b in 0..size.n(EXTENT_BLOCKS) {
                    fs.getattr(ext).map_err(crate::err)?;
                    let n = fs.read(ext, b * BLOCK as u64, &mut buf).map_err(crate::err)?;
                    if n != BLOCK || buf[0] != 7 {
                        return Err(format!("{dir}/extent block {b}: read {n} bytes"));
                    }
                    touch(ext, true)?;
                }
            }
            "regular-read" => {
                let len = size.n(REGULAR_READ_BYTES);
                let mut off = 0;
                while off < len {
                    let n = fs.read(reg, off, &mut buf).map_err(crate::err)?;
                    if n == 0 || buf[0] != 3 {
                        return Err(format!("{dir}/regular at {off}: read {n} bytes"));
                    }
                    off += n as u64;
                }
            }
            "create" => {
                for i in 0..size.n(CREATES) {
                    fs.mknod(&cred, create_dir, format!("f{i}").as_bytes(), libc::S_IFREG | 0o644, 0, None, None)
                        .map_err(crate::err)?;
                }
            }
            "lookup" => {
                for _ in 0..size.n(LOOKUPS) {
                    fs.resolve(&deep).map_err(crate::err)?;
                }
            }
            "stat" => {
                for _ in 0..size.n(EXTENT_BLOCKS) {
                    fs.getattr(ext).map_err(crate::err)?;
                }
            }
            "stat-lookup" => {
                for _ in 0..size.n(LOOKUPS) {
                    let ino = fs.resolve(&deep).map_err(crate::err)?;
                    fs.getattr(ino).map_err(crate::err)?;
                }
            }
            "regular-write" => {
                let len = size.n(REGULAR_WRITE_BYTES);
                let mut off = 0;
                while off < len {
                    let n = (len - off).min(BLOCK as u64) as usize;
                    fs.write(wino, off, &data[..n]).map_err(crate::err)?;
                    off += n as u64;
                }
            }
            "extent-write" => {
                for b in 0..size.n(EXTENT_BLOCKS) {
                    fs.getattr(ewino).map_err(crate::err)?;
                    fs.write(ewino, b * BLOCK as u64, &data).map_err(crate::err)?;
                    touch(ewino, false)?;
                }
            }
            other => return Err(format!("unknown benchmark {other}")),
        }
        Ok(t0.elapsed().as_secs_f64())
    };
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads).map(|t| s.spawn(move || one(t))).collect();
        hs.into_iter().map(|h| h.join().map_err(|_| "a benchmark thread panicked".to_string())?).collect()
    })
}

struct Row {
    bench: &'static str,
    cache: &'static str,
    threads: usize,
    /// Mean and slowest per-thread time, milliseconds.
    mean_ms: f64,
    max_ms: f64,
    c: Counters,
}

fn measure(pool: &Path, threads: usize, devices: usize, size: Size) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for (round, &bench) in BENCHES.iter().enumerate() {
        // Cold: opened afresh, so nothing is cached (the host's page cache
        // under the image files is the disk here).
        let fs = Fs::open_dir(pool, Options::default()).map_err(crate::err)?;
        if fs.storage().devs.len() != devices {
            return Err("the pool lost a device".into());
        }
        for (cache, r) in [("cold", 2 * round), ("warm", 2 * round + 1)] {
            let before = counters(&fs);
            let times = run_bench(&fs, bench, threads, size, r)?;
            let c = delta(before, counters(&fs));
            let mean = times.iter().sum::<f64>() / times.len() as f64 * 1e3;
            let max = times.iter().cloned().fold(0.0, f64::max) * 1e3;
            rows.push(Row { bench, cache, threads, mean_ms: mean, max_ms: max, c });
        }
        fs.close().map_err(crate::err)?;
    }
    Ok(rows)
}

pub fn run(quick: bool) -> Result<Outcome, String> {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let top = if quick { 2 } else { cores.clamp(4, 16) };
    let threads: Vec<usize> = (0..).map(|i| 1usize << i).take_while(|&t| t <= top).collect();
    let size = Size { div: if quick { 16 } else { 1 } };
    let tmp = tempfile::tempdir().map_err(crate::err)?;
    // One device per thread, as in the thesis.
    let devices = top.max(2);
    // Room for the journal and its mirror, the meta-file's copies and each
    // thread's files (sparse images: space unused costs nothing).
    let per_dev = 512u64 << 20;
    let mut rows = Vec::new();
    for &t in &threads {
        // Each thread count gets a pool of its own, so runs share nothing.
        let pool = tmp.path().join(format!("pool{t}"));
        let fo = FormatOptions { journal_size: Some(32 << 20), ..Default::default() };
        Fs::mkfs_dir(&pool, devices as u32, per_dev, &fo).map_err(crate::err)?;
        let fs = Fs::open_dir(&pool, Options::default()).map_err(crate::err)?;
        populate(&fs, t, devices, size)?;
        fs.close().map_err(crate::err)?;
        drop(fs);
        rows.extend(measure(&pool, t, devices, size)?);
        std::fs::remove_dir_all(&pool).map_err(crate::err)?;
    }
    let one = |bench: &str, cache: &str| {
        rows.iter().find(|r| r.bench == bench && r.cache == cache && r.threads == 1).map(|r| r.mean_ms)
    };
    let mut text_rows = Vec::new();
    let mut out = Vec::new();
    let mut series = Vec::new();
    for &bench in BENCHES {
        let mut pts = Vec::new();
        for r in rows.iter().filter(|r| r.bench == bench) {
            let base = one(bench, r.cache).unwrap_or(r.mean_ms).max(1e-9);
            text_rows.push(vec![
                bench.to_string(),
                r.cache.to_string(),
                r.threads.to_string(),
                format!("{:.2}", r.mean_ms),
                format!("{:.2}", r.max_ms),
                f2(r.mean_ms / base),
                format!("{}/{}", r.c.inode_hits, r.c.inode_misses),
                format!("{}/{}", r.c.page_hits, r.c.page_misses),
                format!("{}/{}", r.c.data_hits, r.c.data_misses),
            ]);
            out.push(json!({
                "bench": bench, "cache": r.cache, "threads": r.threads, "per_thread_ms": r.mean_ms,
                "slowest_thread_ms": r.max_ms, "relative_to_1_thread": r.mean_ms / base,
                "inode_hits": r.c.inode_hits, "inode_misses": r.c.inode_misses,
                "store_page_hits": r.c.page_hits, "store_page_misses": r.c.page_misses,
                "data_hits": r.c.data_hits, "data_misses": r.c.data_misses,
            }));
            if r.cache == "warm" {
                pts.push((r.threads as f64, r.mean_ms / base));
            }
        }
        series.push((bench.to_string(), pts));
    }
    let text = format!(
        "Tam's microbenchmarks, native API, {} cores (load average {}); per-thread time, 1.00 = as fast as one thread alone\n{}",
        cores,
        crate::loadavg(),
        table(
            &[
                "benchmark",
                "cache",
                "threads",
                "ms/thread",
                "slowest ms",
                "vs 1 thread",
                "inode hit/miss",
                "page hit/miss",
                "data hit/miss"
            ],
            &text_rows
        )
    );
    let at_top = |bench: &str| {
        rows.iter()
            .find(|r| r.bench == bench && r.cache == "warm" && r.threads == top)
            .map(|r| r.mean_ms / one(bench, "warm").unwrap_or(r.mean_ms).max(1e-9))
            .unwrap_or(0.0)
    };
    let line = format!(
        "tam: at {top} threads on {cores} cores each thread takes {:.2}x its time alone for extent read, {:.2}x for stat, {:.2}x for lookup, {:.2}x for create (warm cache; 1.00 is ideal, a machine with fewer cores than threads cannot show it)",
        at_top("extent-read"),
        at_top("stat"),
        at_top("lookup"),
        at_top("create")
    );
    let data = json!({
        "params": {"threads": threads, "cores": cores, "devices": devices, "size_divisor": size.div,
                   "extent_bytes": size.n(EXTENT_BLOCKS) * BLOCK as u64,
                   "regular_read_bytes": size.n(REGULAR_READ_BYTES), "regular_write_bytes": size.n(REGULAR_WRITE_BYTES),
                   "creates": size.n(CREATES), "lookups": size.n(LOOKUPS)},
        "rows": out,
    });
    Ok(Outcome {
        table: text,
        line,
        data,
        plot: plot::lines_later(
            "Tam's microbenchmarks: per-thread time (warm), relative to one thread",
            "threads",
            "per-thread time / one thread's",
            plot::Legend::UpperLeft,
            series,
        ),
    })
}
