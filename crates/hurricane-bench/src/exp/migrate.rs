//! `hfs-migrate`: HFS Table 1's mismatched row, A/B (access pattern A on
//! a file with structure B, the 4 KiB stripe), fixed by migrating the file
//! online to structure A (regions, one per disk) on the seven simulated
//! disks. Measured in one run: pattern A on A/A and on A/B before; pattern
//! A on the file while it migrates (foreground reads beside the copy); the
//! migration's own rate beside a copy of the same file to a new file laid
//! out as A (read and written through the native API, what `cp` does);
//! pattern A on the migrated file.

use super::{f0, f2, size_param, DISKS, PAGE};
use crate::pool::{kbps, pattern_a, SimPool};
use crate::{plot, table, Outcome};
use hurricane::fs::MigrateOptions;
use hurricane::open::Prefetch;
use hurricane::Options;
use serde_json::json;
use std::time::Instant;

/// The paper's A/A and A/B rows (prefetch on), as fractions of its aggregate (4526 KB/s).
const PAPER_AA: f64 = 1.0;
const PAPER_AB: f64 = 1212.0 / 4526.0;

/// Copies `from` into a new file `to` laid out as `layout`, 1 MiB a
/// request, as `cp` would; returns seconds.
fn copy(pool: &SimPool, from: &str, to: &str, layout: &str) -> Result<f64, String> {
    let t0 = Instant::now();
    let src = pool.fs.open_file(from).map_err(crate::err)?;
    let mut dst = pool.fs.create(to, Some(layout)).map_err(crate::err)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    loop {
        let n = src.read_at(&mut buf, off).map_err(crate::err)?;
        if n == 0 {
            break;
        }
        dst.write_all_at(&buf[..n], off).map_err(crate::err)?;
        off += n as u64;
    }
    pool.fs.sync().map_err(crate::err)?;
    Ok(t0.elapsed().as_secs_f64())
}

pub fn run(quick: bool) -> Result<Outcome, String> {
    let region: u64 = if quick { 128 << 10 } else { 2 << 20 };
    let dev_size: u64 = if quick { 16 << 20 } else { 64 << 20 };
    let pool = SimPool::new(DISKS, dev_size, None, Options::default())?;
    let size = DISKS as u64 * region;
    let structure_a = format!("regions(size={},width={DISKS})", size_param(region));
    let structure_b = format!("stripe(unit=4K,width={DISKS})");
    pool.write_file("/A", &structure_a, size)?;
    pool.write_file("/B", &structure_b, size)?;
    let devs = pool.device_kbps(dev_size / 2, region.min(1 << 20))?;
    let aggregate: f64 = devs.iter().sum();
    pool.timing(true);
    let read_a = |path: &str| -> Result<f64, String> {
        pool.cold();
        let (bytes, secs) = pattern_a(&pool.fs, path, DISKS, region, PAGE, Prefetch::NextBlock)?;
        if bytes != size {
            return Err(format!("pattern A on {path} read {bytes} of {size} bytes"));
        }
        Ok(kbps(bytes, secs))
    };
    let aa = read_a("/A")?;
    let ab = read_a("/B")?;
    // The peer: the same file copied to a new one laid out as A.
    pool.cold();
    let copy_s = copy(&pool, "/B", "/C", &structure_a)?;
    pool.fs.remove("/C").map_err(crate::err)?;
    pool.fs.sync().map_err(crate::err)?;
    // The migration alone, then back to B, then again with pattern A
    // reading the file meanwhile.
    pool.cold();
    let t0 = Instant::now();
    let r = pool.fs.migrate_path("/B", &structure_a, &MigrateOptions::default(), &|_| {}).map_err(crate::err)?;
    let migrate_s = t0.elapsed().as_secs_f64();
    if !r.complete || r.unchanged {
        return Err(format!("the migration to {structure_a} did not happen: {r:?}"));
    }
    let after = read_a("/B")?;
    pool.timing(false);
    pool.fs.migrate_path("/B", &structure_b, &MigrateOptions::default(), &|_| {}).map_err(crate::err)?;
    pool.timing(true);
    pool.cold();
    let (during, migrate2_s) = std::thread::scope(|s| -> Result<(f64, f64), String> {
        let mover = s.spawn(|| {
            let t0 = Instant::now();
            pool.fs
                .migrate_path("/B", &structure_a, &MigrateOptions::default(), &|_| {})
                .map(|_| t0.elapsed().as_secs_f64())
                .map_err(crate::err)
        });
        let (bytes, secs) = pattern_a(&pool.fs, "/B", DISKS, region, PAGE, Prefetch::NextBlock)?;
        let m = mover.join().map_err(|_| "the migration thread panicked".to_string())??;
        if bytes != size {
            return Err(format!("pattern A during the migration read {bytes} of {size} bytes"));
        }
        Ok((kbps(bytes, secs), m))
    })?;
    pool.timing(false);
    let mib = size as f64 / (1 << 20) as f64;
    let rows = vec![
        vec!["A/A (structure A from the start)".into(), f0(aa), f2(aa / aggregate), f2(PAPER_AA)],
        vec!["A/B before".into(), f0(ab), f2(ab / aggregate), f2(PAPER_AB)],
        vec!["A/B while it migrates to A".into(), f0(during), f2(during / aggregate), "-".into()],
        vec!["A/(B migrated to A)".into(), f0(after), f2(after / aggregate), "-".into()],
    ];
    let mut text = format!(
        "HFS Table 1, row A/B migrated online to A/A, {DISKS} simulated disks, file of {} KiB; aggregate {} KB/s\n",
        size >> 10,
        f0(aggregate)
    );
    text.push_str(&table(&["pattern/structure", "KB/s", "fraction", "paper"], &rows));
    text.push_str(&table(
        &["copy of the file to structure A", "seconds", "MiB/s"],
        &[
            vec!["migrate (online, same inode)".into(), format!("{migrate_s:.2}"), f2(mib / migrate_s)],
            vec!["migrate, with pattern A reading".into(), format!("{migrate2_s:.2}"), f2(mib / migrate2_s)],
            vec!["copy to a new file (read + write)".into(), format!("{copy_s:.2}"), f2(mib / copy_s)],
        ],
    ));
    let line = format!(
        "hfs-migrate: pattern A on structure B {:.2} of the aggregate, {:.2} after an online migration to structure A \
         (A/A from the start {:.2}; paper A/B {PAPER_AB:.2}); the migration copies at {:.2} MiB/s, a copy to a new file \
         {:.2} MiB/s ({:.2}x); pattern A reads {:.2} of the aggregate while the file migrates",
        ab / aggregate,
        after / aggregate,
        aa / aggregate,
        mib / migrate_s,
        mib / copy_s,
        copy_s / migrate_s,
        during / aggregate
    );
    let data = json!({
        "params": {"disks": DISKS, "region_bytes": region, "file_bytes": size, "read_bytes": PAGE,
                   "structure_a": structure_a, "structure_b": structure_b,
                   "sim": hurricane::device::SimParams::default().to_string()},
        "device_kbps": devs, "aggregate_kbps": aggregate,
        "kbps": {"aa": aa, "ab_before": ab, "ab_during_migration": during, "ab_after_migration": after},
        "fraction": {"aa": aa / aggregate, "ab_before": ab / aggregate, "ab_during_migration": during / aggregate,
                     "ab_after_migration": after / aggregate, "paper_aa": PAPER_AA, "paper_ab": PAPER_AB},
        "seconds": {"migrate": migrate_s, "migrate_with_reader": migrate2_s, "copy": copy_s},
        "mib_per_s": {"migrate": mib / migrate_s, "migrate_with_reader": mib / migrate2_s, "copy": mib / copy_s},
    });
    let items: Vec<(String, f64, Option<f64>)> = vec![
        ("A/A".into(), aa / aggregate, Some(PAPER_AA)),
        ("A/B".into(), ab / aggregate, Some(PAPER_AB)),
        ("A/B migrating".into(), during / aggregate, None),
        ("A/B->A".into(), after / aggregate, None),
    ];
    Ok(Outcome {
        table: text,
        line,
        data,
        plot: Box::new(move |p| {
            plot::bars(
                p,
                "Pattern A before, during and after an online migration B -> A",
                "fraction of aggregate",
                &items,
            )
        }),
    })
}
