//! `hfs-speedup`: HFS Fig. 12. Access pattern A on file structure A with 1
//! to 7 threads (thread i reads region i, on disk i), without prefetching
//! and with next-block prefetching per thread. HFS: 6.89 of 7 without, 7
//! with.

use super::{f0, f2, size_param, DISKS, PAGE};
use crate::pool::{kbps, pattern_a, SimPool};
use crate::{plot, table, Outcome};
use hurricane::open::Prefetch;
use hurricane::Options;
use serde_json::json;

pub fn run(quick: bool) -> Result<Outcome, String> {
    let region: u64 = if quick { 64 << 10 } else { 1 << 20 };
    let threads: Vec<usize> = if quick { vec![1, 4, 7] } else { (1..=DISKS).collect() };
    let pool = SimPool::new(DISKS, if quick { 8 << 20 } else { 16 << 20 }, None, Options::default())?;
    pool.write_file("/A", &format!("regions(size={},width={DISKS})", size_param(region)), DISKS as u64 * region)?;
    pool.timing(true);
    let mut rows = Vec::new();
    let mut out = Vec::new();
    let mut series = Vec::new();
    let mut at7 = [0.0f64; 2];
    for (pi, prefetch) in [Prefetch::None, Prefetch::NextBlock].into_iter().enumerate() {
        let mut base = 0.0;
        let mut pts = Vec::new();
        for &t in &threads {
            pool.cold();
            let (bytes, secs) = pattern_a(&pool.fs, "/A", t, region, PAGE, prefetch)?;
            let k = kbps(bytes, secs);
            if t == 1 {
                base = k;
            }
            let speedup = if base > 0.0 { k / base } else { 0.0 };
            if t == DISKS {
                at7[pi] = speedup;
            }
            pts.push((t as f64, speedup));
            rows.push(vec![t.to_string(), prefetch.to_string(), f0(k), f2(speedup)]);
            out.push(json!({"threads": t, "prefetch": prefetch != Prefetch::None, "policy": prefetch.to_string(), "kbps": k, "speedup": speedup}));
        }
        series.push((format!("prefetch={prefetch}"), pts));
    }
    pool.timing(false);
    series.push(("ideal".to_string(), threads.iter().map(|&t| (t as f64, t as f64)).collect()));
    let text = format!(
        "HFS Fig. 12: pattern A on structure A, region {} KiB per thread\n{}",
        region >> 10,
        table(&["threads", "prefetch", "KB/s", "speedup"], &rows)
    );
    let line = format!(
        "hfs-speedup: {DISKS} threads reach a speedup of {:.2} without prefetching and {:.2} with next-block prefetching (paper: 6.89 and 7.00)",
        at7[0], at7[1]
    );
    let data = json!({
        "params": {"region_bytes": region, "threads": threads, "read_bytes": PAGE},
        "rows": out,
        "speedup_7": {"no_prefetch": at7[0], "prefetch": at7[1]},
        "paper": {"speedup_7_no_prefetch": 6.89, "speedup_7_prefetch": 7.0},
    });
    Ok(Outcome {
        table: text,
        line,
        data,
        plot: plot::lines_later(
            "HFS Fig. 12: pattern A on structure A",
            "threads",
            "speedup",
            plot::Legend::LowerRight,
            series,
        ),
    })
}
