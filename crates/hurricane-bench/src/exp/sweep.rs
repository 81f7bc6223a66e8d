//! `hfs-prefetch-sweep`: HFS Fig. 13. Access pattern B (seven threads, one
//! shared file pointer, 4 KiB reads) on the 4 KiB stripe over seven
//! simulated disks, with prefetch distance 1 to 40 and amount 1 and 5. HFS
//! needed distance 30 and amount 5 to reach the full bandwidth.

use super::{f0, f2, DISKS, PAGE};
use crate::pool::{kbps, pattern_b, SimPool};
use crate::{plot, table, Outcome};
use hurricane::open::{Prefetch, Scope};
use hurricane::Options;
use serde_json::json;

pub fn run(quick: bool) -> Result<Outcome, String> {
    let per_disk: u64 = if quick { 64 << 10 } else { 512 << 10 };
    let distances: Vec<u32> = if quick { vec![1, 8, 30] } else { vec![1, 2, 3, 5, 7, 10, 15, 20, 25, 30, 35, 40] };
    let pool = SimPool::new(DISKS, if quick { 8 << 20 } else { 16 << 20 }, None, Options::default())?;
    let size = DISKS as u64 * per_disk;
    pool.write_file("/B", &format!("stripe(unit=4K,width={DISKS})"), size)?;
    let devs = pool.device_kbps(4 << 20, per_disk)?;
    let aggregate: f64 = devs.iter().sum();
    pool.timing(true);
    let mut rows = Vec::new();
    let mut out = Vec::new();
    let mut series = Vec::new();
    let mut best = (0.0f64, 0, 0);
    for a in [1u32, 5] {
        let mut pts = Vec::new();
        for &d in &distances {
            pool.cold();
            let (bytes, secs) =
                pattern_b(&pool.fs, "/B", DISKS, PAGE, Prefetch::Distance { d, a, scope: Scope::File })?;
            if bytes != size {
                return Err(format!("distance {d} amount {a}: read {bytes} of {size} bytes"));
            }
            let k = kbps(bytes, secs);
            if k > best.0 {
                best = (k, d, a);
            }
            pts.push((d as f64, k));
            rows.push(vec![d.to_string(), a.to_string(), f0(k), f2(k / aggregate)]);
            out.push(json!({"distance": d, "amount": a, "kbps": k, "fraction": k / aggregate}));
        }
        series.push((format!("amount {a}"), pts));
    }
    pool.timing(false);
    series.push(("disks alone".to_string(), distances.iter().map(|&d| (d as f64, aggregate)).collect()));
    let at = |d: u32, a: u32| {
        out.iter().find(|r| r["distance"] == d && r["amount"] == a).and_then(|r| r["fraction"].as_f64()).unwrap_or(0.0)
    };
    let text = format!(
        "HFS Fig. 13: pattern B on the stripe, file of {} KiB; aggregate of the disks alone {} KB/s\n{}",
        size >> 10,
        f0(aggregate),
        table(&["distance", "amount", "KB/s", "fraction"], &rows)
    );
    let line = format!(
        "hfs-prefetch-sweep: distance 30 amount 5 reaches {:.2} of the aggregate, distance 30 amount 1 {:.2}, distance 1 {:.2}; best {} KB/s at d={} a={} (paper: full bandwidth needs d=30, a=5)",
        at(30, 5),
        at(30, 1),
        at(1, 1),
        f0(best.0),
        best.1,
        best.2
    );
    let data = json!({
        "params": {"file_bytes": size, "read_bytes": PAGE, "threads": DISKS, "distances": distances},
        "device_kbps": devs, "aggregate_kbps": aggregate,
        "rows": out,
        "paper": {"full_bandwidth_at": {"distance": 30, "amount": 5}, "aggregate_kbps": 4526},
    });
    Ok(Outcome {
        table: text,
        line,
        data,
        plot: plot::lines_later(
            "HFS Fig. 13: pattern B on the stripe",
            "prefetch distance (blocks)",
            "KB/s",
            plot::Legend::LowerRight,
            series,
        ),
    })
}
