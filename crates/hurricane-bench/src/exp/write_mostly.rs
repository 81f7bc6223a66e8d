//! `write-mostly`: aggregate write bandwidth of `write-mostly` against
//! `stripe` over four simulated disks, with all four idle and with a
//! competing job loading one of them (a thread reading 64 KiB at random
//! offsets of disk 1 straight from the device, as another tenant or a
//! rebuild would). Eight writers each write a file of their own in 64 KiB
//! requests; the bandwidth is the bytes written over the time until the
//! last writer is done. `stripe` places each unit by its offset, so a
//! quarter of every file waits behind the competitor; `write-mostly`
//! places each new unit on the child with the fewest requests in flight.

use super::{f0, f2, Rng};
use crate::pool::{kbps, SimPool};
use crate::{plot, table, Outcome};
use hurricane::device::Device;
use hurricane::Options;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

const DISKS: usize = 4;
const WRITERS: usize = 8;
const REQ: usize = 64 << 10;

/// KB/s of WRITERS threads each writing `per` bytes to a file of `layout`.
fn write_all(pool: &SimPool, tag: &str, layout: &str, per: u64) -> Result<f64, String> {
    let buf: Vec<u8> = (0..REQ).map(|i| (i as u8).wrapping_mul(31)).collect();
    let t0 = Instant::now();
    std::thread::scope(|s| -> Result<(), String> {
        let hs: Vec<_> = (0..WRITERS)
            .map(|w| {
                let buf = &buf;
                s.spawn(move || -> Result<(), String> {
                    let mut f = pool.fs.create(&format!("/{tag}-{w}"), Some(layout)).map_err(crate::err)?;
                    let mut off = 0;
                    while off < per {
                        f.write_all_at(buf, off).map_err(crate::err)?;
                        off += REQ as u64;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join().map_err(|_| "a writer panicked".to_string())??;
        }
        Ok(())
    })?;
    let secs = t0.elapsed().as_secs_f64();
    pool.fs.sync().map_err(crate::err)?;
    Ok(kbps(per * WRITERS as u64, secs))
}

pub fn run(quick: bool) -> Result<Outcome, String> {
    let per: u64 = if quick { 256 << 10 } else { 2 << 20 };
    let dev_size: u64 = if quick { 32 << 20 } else { 96 << 20 };
    let layouts = [("stripe", "stripe(unit=64K,width=4)"), ("write-mostly", "write-mostly(unit=64K,width=4)")];
    let mut rows = Vec::new();
    let mut out = Vec::new();
    for loaded in [false, true] {
        for (name, layout) in layouts {
            // A fresh pool each time: the same empty disks for every run.
            let pool = SimPool::new(DISKS, dev_size, None, Options::default())?;
            pool.timing(true);
            let stop = AtomicBool::new(false);
            let k = std::thread::scope(|s| -> Result<f64, String> {
                let competitor = loaded.then(|| {
                    let (sim, stop) = (pool.sims[1].clone(), &stop);
                    s.spawn(move || {
                        let mut rng = Rng(7);
                        let mut b = vec![0u8; REQ];
                        let span = sim.size() / REQ as u64;
                        while !stop.load(Ordering::Relaxed) {
                            let off = rng.below(span) * REQ as u64;
                            let _ = sim.read_at(&mut b, off);
                        }
                    })
                });
                let r = write_all(&pool, name, layout, per);
                stop.store(true, Ordering::Relaxed);
                if let Some(c) = competitor {
                    c.join().map_err(|_| "the competitor panicked".to_string())?;
                }
                r
            })?;
            pool.timing(false);
            // Where the data went, per disk.
            let mut per_dev = [0u64; DISKS];
            for w in 0..WRITERS {
                for (d, _, n) in pool.fs.device_extents_of(&format!("/{name}-{w}")).map_err(crate::err)? {
                    if let Some(x) = per_dev.get_mut(d as usize) {
                        *x += n * 4096;
                    }
                }
            }
            let share1 = per_dev[1] as f64 / per_dev.iter().sum::<u64>().max(1) as f64;
            rows.push(vec![
                name.to_string(),
                if loaded { "disk 1 loaded" } else { "idle" }.to_string(),
                f0(k),
                f2(share1),
            ]);
            out.push(json!({"layout": name, "spec": layout, "loaded": loaded, "kbps": k,
                            "bytes_per_device": per_dev, "share_on_loaded_disk": share1}));
        }
    }
    let get = |name: &str, loaded: bool| {
        out.iter()
            .find(|r| r["layout"] == name && r["loaded"] == loaded)
            .and_then(|r| r["kbps"].as_f64())
            .unwrap_or(0.0)
    };
    let (s0, s1, w0, w1) =
        (get("stripe", false), get("stripe", true), get("write-mostly", false), get("write-mostly", true));
    let mut text = format!(
        "{WRITERS} writers, {} KiB each in {} KiB requests, over {DISKS} simulated disks (sim {})\n",
        per >> 10,
        REQ >> 10,
        hurricane::device::SimParams::default()
    );
    text.push_str(&table(&["layout", "disks", "KB/s", "share on disk 1"], &rows));
    let line = format!(
        "write-mostly: with disk 1 loaded, write-mostly writes {} KB/s against the stripe's {} KB/s ({:.2}x); \
         idle {} against {} KB/s ({:.2}x)",
        f0(w1),
        f0(s1),
        w1 / s1.max(1e-9),
        f0(w0),
        f0(s0),
        w0 / s0.max(1e-9)
    );
    let data = json!({
        "params": {"disks": DISKS, "writers": WRITERS, "bytes_per_writer": per, "request_bytes": REQ,
                   "sim": hurricane::device::SimParams::default().to_string()},
        "rows": out,
    });
    let items: Vec<(String, f64, Option<f64>)> = vec![
        ("stripe idle".into(), s0, None),
        ("write-mostly idle".into(), w0, None),
        ("stripe loaded".into(), s1, None),
        ("write-mostly loaded".into(), w1, None),
    ];
    Ok(Outcome {
        table: text,
        line,
        data,
        plot: Box::new(move |p| plot::bars(p, "Aggregate write KB/s, disk 1 idle or loaded", "KB/s", &items)),
    })
}
