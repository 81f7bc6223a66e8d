//! `hfs-getattr`: HFS Fig. 9. Threads ask for the attributes (the length)
//! of an open file over and over: all of them the same file, or each its
//! own. HFS: the same file saturates at about 4 threads (locks of the
//! file's building blocks and of the block cache's hash chain); different
//! files scale to 15.59 at 16 processors.
//!
//! Measured through the native API (`Fs::getattr`) and, in the full run,
//! through a FUSE mount of the same engine (fstat on open descriptors, with
//! the kernel's attribute cache off so every call reaches the engine). The
//! speedup any machine can show is bounded by its cores: the table gives
//! them.

use super::{f0, f2};
use crate::pool::RamDisk;
use crate::{plot, table, Outcome};
use hurricane::device::Device;
use hurricane::{FormatOptions, Fs, Options};
use serde_json::json;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Runs `threads` threads calling `op(thread)` for `dur`; total calls a second.
fn rate(threads: usize, dur: Duration, op: &(dyn Fn(usize) -> bool + Sync)) -> Result<f64, String> {
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let go = Barrier::new(threads + 1);
    let failed = AtomicBool::new(false);
    let secs = std::thread::scope(|s| {
        for t in 0..threads {
            let (stop, total, go, failed) = (&stop, &total, &go, &failed);
            s.spawn(move || {
                go.wait();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // Check the clock flag only every few calls.
                    for _ in 0..64 {
                        if !op(t) {
                            failed.store(true, Ordering::Relaxed);
                            stop.store(true, Ordering::Relaxed);
                            break;
                        }
                        n += 1;
                    }
                }
                total.fetch_add(n, Ordering::Relaxed);
            });
        }
        go.wait();
        let t0 = Instant::now();
        std::thread::sleep(dur);
        stop.store(true, Ordering::Relaxed);
        t0
    })
    .elapsed()
    .as_secs_f64();
    if failed.load(Ordering::Relaxed) {
        return Err("a getattr call failed".into());
    }
    Ok(total.load(Ordering::Relaxed) as f64 / secs)
}

struct Series {
    api: &'static str,
    /// (threads, same-file calls/s, different-files calls/s)
    points: Vec<(usize, f64, f64)>,
}

fn native(threads: &[usize], dur: Duration) -> Result<Series, String> {
    let devs: Vec<Arc<dyn Device>> =
        (0..2).map(|i| Arc::new(RamDisk::new(format!("ram{i}"), 32 << 20)) as Arc<dyn Device>).collect();
    Fs::format(devs.clone(), &FormatOptions { journal_size: Some(2 << 20), ..Default::default() })
        .map_err(crate::err)?;
    let fs = Fs::open(devs, Options { background_commit: false, ..Options::default() }).map_err(crate::err)?;
    let max = threads.iter().copied().max().unwrap_or(1);
    let mut inos = Vec::new();
    let mut files = Vec::new();
    for i in 0..max {
        let path = format!("/f{i}");
        fs.write_file(&path, &vec![1u8; 64 << 10], Some("stripe(unit=4K,width=2)")).map_err(crate::err)?;
        // An open file, as in HFS.
        files.push(fs.open_file(&path).map_err(crate::err)?);
        inos.push(fs.resolve(&path).map_err(crate::err)?);
    }
    let mut points = Vec::new();
    for &t in threads {
        let same = rate(t, dur, &|_| fs.getattr(inos[0]).is_ok_and(|a| a.size == 64 << 10))?;
        let diff = rate(t, dur, &|i| fs.getattr(inos[i]).is_ok_and(|a| a.size == 64 << 10))?;
        points.push((t, same, diff));
    }
    drop(files);
    Ok(Series { api: "native", points })
}

/// Serves a fresh pool on a FUSE mount for the length of `f`.
fn with_mount<R>(max: usize, f: impl FnOnce(&Path) -> Result<R, String>) -> Result<R, String> {
    let tmp = tempfile::tempdir().map_err(crate::err)?;
    let pool = tmp.path().join("pool");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir_all(&mnt).map_err(crate::err)?;
    Fs::mkfs_dir(&pool, 2, 64 << 20, &FormatOptions::default()).map_err(crate::err)?;
    {
        let fs = Fs::open_dir(&pool, Options::default()).map_err(crate::err)?;
        for i in 0..max {
            fs.write_file(&format!("/f{i}"), &vec![1u8; 64 << 10], Some("stripe(unit=4K,width=2)"))
                .map_err(crate::err)?;
        }
        fs.close().map_err(crate::err)?;
    }
    let opts = hurricane_fuse::MountOptions { attr_timeout: Duration::ZERO, ..Default::default() };
    crate::mounts::serve(&pool, &mnt, opts, || f(&mnt)).map(|(r, _)| r)
}

fn mounted(threads: &[usize], dur: Duration) -> Result<Series, String> {
    let max = threads.iter().copied().max().unwrap_or(1);
    with_mount(max, |mnt| {
        // One descriptor per thread: on the same file, or each on its own.
        let open = |i: usize| std::fs::File::open(mnt.join(format!("f{i}"))).map_err(crate::err);
        let same: Vec<std::fs::File> = (0..max).map(|_| open(0)).collect::<Result<_, _>>()?;
        let diff: Vec<std::fs::File> = (0..max).map(open).collect::<Result<_, _>>()?;
        let mut points = Vec::new();
        for &t in threads {
            let s = rate(t, dur, &|i| same[i].metadata().is_ok_and(|m| m.len() == 64 << 10))?;
            let d = rate(t, dur, &|i| diff[i].metadata().is_ok_and(|m| m.len() == 64 << 10))?;
            points.push((t, s, d));
        }
        Ok(Series { api: "mount", points })
    })
}

pub fn run(quick: bool) -> Result<Outcome, String> {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let threads: Vec<usize> = if quick { vec![1, 2] } else { vec![1, 2, 4, 8, 16] };
    let dur = Duration::from_millis(if quick { 20 } else { 400 });
    let mut all = vec![native(&threads, dur)?];
    // The mount needs /dev/fuse and fusermount: measured in full runs only,
    // and reported as missing rather than failing where it cannot mount.
    let mount_note = if quick {
        "skipped in --quick".to_string()
    } else {
        match mounted(&threads, dur) {
            Ok(s) => {
                all.push(s);
                "measured".to_string()
            }
            Err(e) => format!("not measured: {e}"),
        }
    };
    let mut rows = Vec::new();
    let mut out = Vec::new();
    let mut series = Vec::new();
    for s in &all {
        let (base_s, base_d) = s.points.first().map(|p| (p.1, p.2)).unwrap_or((1.0, 1.0));
        let mut ps = Vec::new();
        let mut pd = Vec::new();
        for &(t, same, diff) in &s.points {
            rows.push(vec![s.api.to_string(), t.to_string(), f0(same), f2(same / base_s), f0(diff), f2(diff / base_d)]);
            out.push(json!({"api": s.api, "threads": t, "same_file_ops": same, "same_file_speedup": same / base_s, "different_files_ops": diff, "different_files_speedup": diff / base_d}));
            ps.push((t as f64, same / base_s));
            pd.push((t as f64, diff / base_d));
        }
        series.push((format!("{}: same file", s.api), ps));
        series.push((format!("{}: different files", s.api), pd));
    }
    let text = format!(
        "HFS Fig. 9: getattr of open files, {} cores (load average {}); mount: {mount_note}\n{}",
        cores,
        crate::loadavg(),
        table(&["api", "threads", "same file/s", "speedup", "different files/s", "speedup"], &rows)
    );
    let top = |api: &str| {
        all.iter()
            .find(|s| s.api == api)
            .and_then(|s| s.points.last().map(|p| (p.0, p.1 / s.points[0].1, p.2 / s.points[0].2)))
    };
    let (t, same_up, diff_up) = top("native").unwrap_or((1, 1.0, 1.0));
    let one = all[0].points.first().map(|p| 1e9 / p.1).unwrap_or(0.0);
    let mut line = format!(
        "hfs-getattr: native getattr takes {} ns; at {t} threads on {cores} cores the speedup is {same_up:.2} on one file and {diff_up:.2} on different files (paper: 72.5 us; same file saturates at ~4 threads, different files 15.59 at 16)",
        f0(one)
    );
    if let Some((t, s, d)) = top("mount") {
        line.push_str(&format!("; through the mount at {t} threads: {s:.2} and {d:.2}"));
    }
    let data = json!({
        "params": {"threads": threads, "seconds_per_point": dur.as_secs_f64(), "cores": cores, "mount": mount_note, "loadavg": crate::loadavg()},
        "native_ns_per_call": one,
        "rows": out,
        "paper": {"us_per_call": 72.5, "same_file_saturates_at_threads": 4, "different_files_speedup_16": 15.59},
    });
    Ok(Outcome {
        table: text,
        line,
        data,
        plot: plot::lines_later(
            "HFS Fig. 9: getattr throughput speedup",
            "threads",
            "speedup over 1 thread",
            plot::Legend::UpperLeft,
            series,
        ),
    })
}
