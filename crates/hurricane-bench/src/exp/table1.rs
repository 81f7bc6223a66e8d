//! `hfs-table1`: HFS Table 1. Seven threads read one file on seven
//! simulated disks. Access pattern A: each thread reads its own contiguous
//! region sequentially, with a cursor of its own. Access pattern B: the
//! threads share one file pointer and read 4 KiB at a time. File structure
//! A: `regions` over seven extents, one region per disk; structure B: a
//! `stripe` of 4 KiB units over the same seven. Prefetching is the policy
//! HFS matched to each pattern: next block per thread for A, distance 30
//! and amount 5 for the file for B.

use super::{f0, f2, size_param, DISKS, PAGE};
use crate::pool::{kbps, pattern_a, pattern_b, SimPool};
use crate::{plot, table, Outcome};
use hurricane::open::{Prefetch, Scope};
use hurricane::Options;
use serde_json::json;

/// (pattern, structure, prefetch) -> KB/s in the paper.
const PAPER: [(&str, &str, bool, f64); 8] = [
    ("A", "A", false, 3597.0),
    ("A", "B", false, 1000.0),
    ("B", "A", false, 520.0),
    ("B", "B", false, 640.0),
    ("A", "A", true, 4526.0),
    ("A", "B", true, 1212.0),
    ("B", "A", true, 646.0),
    ("B", "B", true, 4526.0),
];
/// The paper's 100%: seven disks at 646.6 KB/s with 4 KiB pages.
const PAPER_AGGREGATE: f64 = 4526.0;

pub fn prefetch_for(pattern: &str) -> Prefetch {
    if pattern == "A" {
        Prefetch::NextBlock
    } else {
        Prefetch::Distance { d: 30, a: 5, scope: Scope::File }
    }
}

pub fn run(quick: bool) -> Result<Outcome, String> {
    let region: u64 = if quick { 128 << 10 } else { 2 << 20 };
    let dev_size: u64 = if quick { 8 << 20 } else { 24 << 20 };
    let pool = SimPool::new(DISKS, dev_size, None, Options::default())?;
    let size = DISKS as u64 * region;
    pool.write_file("/A", &format!("regions(size={},width={DISKS})", size_param(region)), size)?;
    pool.write_file("/B", &format!("stripe(unit=4K,width={DISKS})"), size)?;
    // The peer: each raw simulated disk alone, read sequentially in 4 KiB requests.
    let devs = pool.device_kbps(dev_size / 2, region.min(1 << 20))?;
    let aggregate: f64 = devs.iter().sum();
    pool.timing(true);
    let mut rows = Vec::new();
    let mut out = Vec::new();
    for (pattern, structure, prefetch, paper) in PAPER {
        pool.cold();
        let policy = if prefetch { prefetch_for(pattern) } else { Prefetch::None };
        let path = format!("/{structure}");
        let (bytes, secs) = if pattern == "A" {
            pattern_a(&pool.fs, &path, DISKS, region, PAGE, policy)?
        } else {
            pattern_b(&pool.fs, &path, DISKS, PAGE, policy)?
        };
        if bytes != size {
            return Err(format!("pattern {pattern} on structure {structure} read {bytes} of {size} bytes"));
        }
        let k = kbps(bytes, secs);
        let frac = k / aggregate;
        rows.push(vec![
            pattern.to_string(),
            structure.to_string(),
            if prefetch { "yes" } else { "no" }.to_string(),
            f0(k),
            f2(frac),
            f0(paper),
            f2(paper / PAPER_AGGREGATE),
        ]);
        out.push(json!({
            "pattern": pattern, "structure": structure, "prefetch": prefetch,
            "policy": policy.to_string(), "kbps": k, "fraction": frac, "seconds": secs,
            "paper_kbps": paper, "paper_fraction": paper / PAPER_AGGREGATE,
        }));
    }
    // The same four runs with the adaptive policy (the mount's default),
    // which has to find the pattern and the distance by itself.
    let mut adaptive = Vec::new();
    for (pattern, structure) in [("A", "A"), ("A", "B"), ("B", "A"), ("B", "B")] {
        pool.cold();
        let path = format!("/{structure}");
        let (bytes, secs) = if pattern == "A" {
            pattern_a(&pool.fs, &path, DISKS, region, PAGE, Prefetch::Adaptive)?
        } else {
            pattern_b(&pool.fs, &path, DISKS, PAGE, Prefetch::Adaptive)?
        };
        let k = kbps(bytes, secs);
        rows.push(vec![
            pattern.into(),
            structure.into(),
            "adaptive".into(),
            f0(k),
            f2(k / aggregate),
            "-".into(),
            "-".into(),
        ]);
        adaptive.push(json!({"pattern": pattern, "structure": structure, "policy": "adaptive", "kbps": k, "fraction": k / aggregate}));
    }
    pool.timing(false);
    let cache = pool.fs.cache_stats();
    let head = ["pattern", "structure", "prefetch", "KB/s", "fraction", "paper KB/s", "paper frac"];
    let mut text = format!(
        "HFS Table 1 on {DISKS} simulated disks (sim {}), file of {} KiB; aggregate of the disks alone: {} KB/s ({} each)\n",
        hurricane::device::SimParams::default(),
        size >> 10,
        f0(aggregate),
        devs.iter().map(|d| f0(*d)).collect::<Vec<_>>().join(" ")
    );
    text.push_str(&table(&head, &rows));
    let frac = |p: &str, s: &str, pf: bool| {
        out.iter()
            .find(|r| r["pattern"] == p && r["structure"] == s && r["prefetch"] == pf)
            .and_then(|r| r["fraction"].as_f64())
            .unwrap_or(0.0)
    };
    let (aa, bb) = (frac("A", "A", true), frac("B", "B", true));
    let verdict = if aa >= 0.95 && bb >= 0.95 { "both >= 0.95" } else { "BELOW the 0.95 target" };
    let line = format!(
        "hfs-table1: matched structure and policy reach {aa:.2} (A/A, next-block) and {bb:.2} (B/B, distance 30 amount 5) of the {} KB/s aggregate, {verdict}; paper 1.00 and 1.00. Mismatched: A/B {:.2}, B/A {:.2} (paper 0.27, 0.14)",
        f0(aggregate),
        frac("A", "B", true),
        frac("B", "A", true)
    );
    let data = json!({
        "params": {"disks": DISKS, "region_bytes": region, "file_bytes": size, "read_bytes": PAGE, "sim": hurricane::device::SimParams::default().to_string()},
        "device_kbps": devs, "aggregate_kbps": aggregate, "paper_aggregate_kbps": PAPER_AGGREGATE,
        "rows": out,
        "adaptive_rows": adaptive,
        "cache": {"hits": cache.hits, "misses": cache.misses, "waits": cache.waits, "prefetched": cache.prefetched, "hit_rate": cache.hit_rate()},
    });
    let items: Vec<(String, f64, Option<f64>)> = PAPER
        .iter()
        .zip(&out)
        .map(|(p, r)| {
            (
                format!("{}/{}{}", p.0, p.1, if p.2 { "+pf" } else { "" }),
                r["fraction"].as_f64().unwrap_or(0.0),
                Some(p.3 / PAPER_AGGREGATE),
            )
        })
        .collect();
    Ok(Outcome {
        table: text,
        line,
        data,
        plot: Box::new(move |p| {
            plot::bars(
                p,
                "HFS Table 1: fraction of aggregate bandwidth (blue: regions, red: stripe, black: paper)",
                "fraction of aggregate",
                &items,
            )
        }),
    })
}
