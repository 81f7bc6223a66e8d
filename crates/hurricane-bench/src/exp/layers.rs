//! `hfs-layers`: HFS 5.5 and Fig. 16. File structure A with 10 extra layers
//! of `regions` blocks between the top block and the per-disk extents (each
//! extra layer one region per turn over a single child, so the mapping is
//! unchanged and only the traversal costs). Two measurements:
//!
//! - the processor cost of the layers: one thread reads the file block by
//!   block from memory devices with the block cache off, so every request
//!   walks the whole tree; the difference in nanoseconds per one-block
//!   request (HFS: about 300 us per request, 30 us per layer, on a 16 MHz
//!   88100);
//! - the throughput lost on seven simulated disks with access pattern A
//!   (HFS: 1.2% for one thread without prefetching; 7-thread speedup 6.49
//!   instead of 6.89; full bandwidth with prefetching).

use super::{f0, f2, size_param, DISKS, PAGE};
use crate::pool::{kbps, pattern_a, RamDisk, SimPool};
use crate::{plot, table, Outcome};
use hurricane::device::Device;
use hurricane::open::Prefetch;
use hurricane::{FormatOptions, Fs, Options};
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

pub const EXTRA: usize = 10;

/// Structure A wrapped in `layers` single-child regions blocks.
pub fn layout(region: u64, layers: usize) -> String {
    let mut s = format!("regions(size={},width={DISKS})", size_param(region));
    for _ in 0..layers {
        s = format!("regions(size=1G)[{s}]");
    }
    s
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Nanoseconds per one-block read request, uncached, for 0 and EXTRA layers.
fn cpu_cost(quick: bool) -> Result<(f64, f64), String> {
    let region: u64 = if quick { 128 << 10 } else { 1 << 20 };
    let devs: Vec<Arc<dyn Device>> =
        (0..DISKS).map(|i| Arc::new(RamDisk::new(format!("ram{i}"), 16 << 20)) as Arc<dyn Device>).collect();
    Fs::format(devs.clone(), &FormatOptions { journal_size: Some(2 << 20), ..Default::default() })
        .map_err(crate::err)?;
    let fs = Fs::open(devs, Options { cache_bytes: 0, background_commit: false, ..Options::default() })
        .map_err(crate::err)?;
    let size = DISKS as u64 * region;
    let mut inos = Vec::new();
    for layers in [0, EXTRA] {
        let path = format!("/L{layers}");
        fs.write_file(&path, &vec![7u8; size as usize], Some(&layout(region, layers))).map_err(crate::err)?;
        inos.push(fs.resolve(&path).map_err(crate::err)?);
    }
    let blocks = size / PAGE as u64;
    let mut buf = vec![0u8; PAGE];
    let mut pass = |ino| -> Result<f64, String> {
        let t0 = Instant::now();
        for b in 0..blocks {
            fs.read(ino, b * PAGE as u64, &mut buf).map_err(crate::err)?;
        }
        Ok(t0.elapsed().as_nanos() as f64 / blocks as f64)
    };
    // Alternate the two files so drift in the machine's load hits both.
    let (mut t0, mut t10) = (Vec::new(), Vec::new());
    for _ in 0..if quick { 3 } else { 25 } {
        t0.push(pass(inos[0])?);
        t10.push(pass(inos[1])?);
    }
    Ok((median(&mut t0), median(&mut t10)))
}

pub fn run(quick: bool) -> Result<Outcome, String> {
    let (ns0, ns10) = cpu_cost(quick)?;
    let per_request = ns10 - ns0;

    let region: u64 = if quick { 64 << 10 } else { 1 << 20 };
    let pool = SimPool::new(DISKS, if quick { 8 << 20 } else { 16 << 20 }, None, Options::default())?;
    for layers in [0, EXTRA] {
        pool.write_file(&format!("/L{layers}"), &layout(region, layers), DISKS as u64 * region)?;
    }
    pool.timing(true);
    let reps = if quick { 1 } else { 2 };
    let cases: [(&str, usize, Prefetch); 3] = [
        ("1 thread", 1, Prefetch::None),
        ("7 threads", DISKS, Prefetch::None),
        ("7 threads +next", DISKS, Prefetch::NextBlock),
    ];
    let mut k = [[0.0f64; 2]; 3];
    for _ in 0..reps {
        for (ci, (_, threads, prefetch)) in cases.iter().enumerate() {
            for (li, layers) in [0, EXTRA].into_iter().enumerate() {
                pool.cold();
                let (bytes, secs) = pattern_a(&pool.fs, &format!("/L{layers}"), *threads, region, PAGE, *prefetch)?;
                k[ci][li] += kbps(bytes, secs) / reps as f64;
            }
        }
    }
    pool.timing(false);
    let loss = |ci: usize| 1.0 - k[ci][1] / k[ci][0];
    // Speedup of 7 threads over 1, without prefetching.
    let speedup = |li: usize| k[1][li] / k[0][li];
    let mut rows =
        vec![vec!["CPU ns per 1-block request".into(), f0(ns0), f0(ns10), format!("+{} ns", f0(per_request))]];
    for (ci, (name, _, _)) in cases.iter().enumerate() {
        rows.push(vec![format!("{name}, KB/s"), f0(k[ci][0]), f0(k[ci][1]), format!("{:.2}% lost", 100.0 * loss(ci))]);
    }
    rows.push(vec!["7-thread speedup".into(), f2(speedup(0)), f2(speedup(1)), String::new()]);
    let text = format!(
        "HFS 5.5: structure A with 0 and {EXTRA} extra layers of regions blocks\n{}",
        table(&["measure", "0 layers", &format!("{EXTRA} layers"), "cost"], &rows)
    );
    let line = format!(
        "hfs-layers: {EXTRA} extra layers cost {} ns per block request ({:.1} ns per layer) and {:.2}% of one thread's throughput without prefetching ({:.2}% with 7 threads, {:.2}% with prefetching); paper: 300 us per request, 1.2%",
        f0(per_request),
        per_request / EXTRA as f64,
        100.0 * loss(0),
        100.0 * loss(1),
        100.0 * loss(2)
    );
    let data = json!({
        "params": {"extra_layers": EXTRA, "region_bytes": region, "read_bytes": PAGE, "layout_10": layout(region, EXTRA)},
        "ns_per_request_0": ns0, "ns_per_request_10": ns10,
        "ns_per_block_per_request": per_request,
        "ns_per_layer": per_request / EXTRA as f64,
        "throughput_loss": loss(0),
        "throughput_loss_7_threads": loss(1),
        "throughput_loss_prefetch": loss(2),
        "kbps": {"1_thread": k[0], "7_threads": k[1], "7_threads_prefetch": k[2]},
        "speedup_7": {"layers_0": speedup(0), "layers_10": speedup(1)},
        "paper": {"ns_per_block_per_request": 300_000, "ns_per_layer": 30_000, "throughput_loss": 0.012, "speedup_7_layers_0": 6.89, "speedup_7_layers_10": 6.49},
    });
    let items: Vec<(String, f64, Option<f64>)> = cases
        .iter()
        .enumerate()
        .flat_map(|(ci, (name, _, _))| {
            [(format!("{name}, 0"), k[ci][0], None), (format!("{name}, {EXTRA}"), k[ci][1], None)]
        })
        .collect();
    Ok(Outcome {
        table: text,
        line,
        data,
        plot: Box::new(move |p| {
            plot::bars(p, &format!("HFS 5.5: 0 vs {EXTRA} extra layers of regions (KB/s)"), "KB/s", &items)
        }),
    })
}
