//! `hfs-parity`: HFS Table 1's access patterns A and B on
//! `parity(data=6,parity=1)` files over the seven simulated disks, healthy
//! and with one disk missing, beside Table 1's matched structures. As in
//! Table 1 each pattern gets the structure that suits it: for A (each thread
//! its own contiguous region) units of one region, so each thread reads one
//! disk; for B (a shared pointer, 4 KiB reads) units of 4 KiB, so the
//! prefetched blocks spread over the disks. Parity rotates over the disks,
//! so every disk serves data, but one unit in seven is parity: 6/7 of the
//! aggregate is the ceiling where all seven disks stream.

use super::{f0, f2, DISKS, PAGE};
use crate::exp::table1::prefetch_for;
use crate::pool::{kbps, pattern_a, pattern_b, SimPool};
use crate::{plot, table, Outcome};
use hurricane::device::DeviceState;
use hurricane::Options;
use serde_json::json;

pub fn run(quick: bool) -> Result<Outcome, String> {
    let region: u64 = if quick { 96 << 10 } else { 1536 << 10 };
    let dev_size: u64 = if quick { 8 << 20 } else { 24 << 20 };
    let pool = SimPool::new(DISKS, dev_size, None, Options::default())?;
    let size = DISKS as u64 * region;
    pool.write_file("/PA", &format!("parity(data={},parity=1,unit={})", DISKS - 1, super::size_param(region)), size)?;
    pool.write_file("/PB", &format!("parity(data={},parity=1,unit=4K)", DISKS - 1), size)?;
    pool.write_file("/A", &format!("regions(size={},width={DISKS})", super::size_param(region)), size)?;
    pool.write_file("/B", &format!("stripe(unit=4K,width={DISKS})"), size)?;
    let devs = pool.device_kbps(dev_size / 2, region.min(1 << 20))?;
    let aggregate: f64 = devs.iter().sum();
    let mut rows = Vec::new();
    let mut out = Vec::new();
    let runs = [
        ("A", "regions", "/A", false),
        ("A", "parity(unit=region)", "/PA", false),
        ("A", "parity(unit=region), disk 3 missing", "/PA", true),
        ("B", "stripe(unit=4K)", "/B", false),
        ("B", "parity(unit=4K)", "/PB", false),
        ("B", "parity(unit=4K), disk 3 missing", "/PB", true),
    ];
    for (pattern, structure, path, missing) in runs {
        {
            if missing {
                pool.fs.storage().devs[3].set_state(DeviceState::Missing);
            }
            pool.timing(true);
            pool.cold();
            let before: Vec<_> = pool.sims.iter().map(|d| d.stats()).collect();
            let policy = prefetch_for(pattern);
            let r = if pattern == "A" {
                pattern_a(&pool.fs, path, DISKS, region, PAGE, policy)
            } else {
                pattern_b(&pool.fs, path, DISKS, PAGE, policy)
            };
            pool.timing(false);
            pool.fs.storage().devs[3].set_state(DeviceState::Online);
            // Per disk: requests, media accesses (seek and rotation), and
            // seconds busy on the model's clock, for explaining a figure.
            let disks: Vec<_> = pool
                .sims
                .iter()
                .zip(&before)
                .map(|(d, b)| {
                    let a = d.stats();
                    json!({
                        "requests": a.requests - b.requests,
                        "media": a.media - b.media,
                        "busy_s": (a.busy_ns - b.busy_ns) as f64 / 1e9,
                    })
                })
                .collect();
            let (bytes, secs) = r?;
            if bytes != size {
                return Err(format!("pattern {pattern} on {structure} read {bytes} of {size} bytes"));
            }
            let k = kbps(bytes, secs);
            rows.push(vec![pattern.to_string(), structure.to_string(), f0(k), f2(k / aggregate)]);
            out.push(json!({"pattern": pattern, "structure": structure, "kbps": k, "fraction": k / aggregate, "seconds": secs, "policy": policy.to_string(), "disks": disks}));
        }
    }
    let head = ["pattern", "file", "KB/s", "fraction"];
    let mut text = format!(
        "Patterns A and B (prefetch as HFS matched them) on {DISKS} simulated disks, file of {} KiB; aggregate of the disks alone: {} KB/s\n",
        size >> 10,
        f0(aggregate)
    );
    text.push_str(&table(&head, &rows));
    let frac = |i: usize| out.get(i).and_then(|r| r["fraction"].as_f64()).unwrap_or(0.0);
    let line = format!(
        "hfs-parity: parity(data=6,parity=1) reads at {:.2} (A) and {:.2} (B) of the aggregate, 6/7 = 0.86 where all disks stream (regions {:.2}, stripe {:.2}); with a disk missing {:.2} and {:.2}",
        frac(1),
        frac(4),
        frac(0),
        frac(3),
        frac(2),
        frac(5)
    );
    let items: Vec<(String, f64, Option<f64>)> = out
        .iter()
        .map(|r| {
            let s = r["structure"].as_str().unwrap_or("");
            let tag = if !s.starts_with("parity") {
                s.split('(').next().unwrap_or(s)
            } else if s.contains("missing") {
                "parity-1"
            } else {
                "parity"
            };
            (
                format!("{}/{tag}", r["pattern"].as_str().unwrap_or("")),
                r["fraction"].as_f64().unwrap_or(0.0),
                Some(6.0 / 7.0),
            )
        })
        .collect();
    let data = json!({
        "params": {"disks": DISKS, "region_bytes": region, "file_bytes": size, "read_bytes": PAGE, "sim": hurricane::device::SimParams::default().to_string()},
        "device_kbps": devs, "aggregate_kbps": aggregate, "ceiling_fraction": 6.0 / 7.0,
        "rows": out,
    });
    Ok(Outcome {
        table: text,
        line,
        data,
        plot: Box::new(move |p| {
            plot::bars(
                p,
                "Patterns A and B on parity(data=6,parity=1): fraction of aggregate (black: 6/7)",
                "fraction of aggregate",
                &items,
            )
        }),
    })
}
