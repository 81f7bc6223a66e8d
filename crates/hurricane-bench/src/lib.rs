//! Named, reproducible experiments (`hurricane bench NAME [--quick]`).
//!
//! Each experiment prints a table, writes `OUT/NAME.json` and `OUT/NAME.png`
//! (OUT is `bench/results` from the command line) and ends with a one-line
//! summary. `--quick` runs a small version for CI: it checks that the
//! experiment works, and its figures mean little.
//!
//! The HFS experiments run on seven simulated mid-1990s disks
//! (`hurricane::device::sim`, default `hdd` parameters) over memory: the
//! timing is the model's alone, with no host-disk noise, and absolute KB/s
//! are comparable with HFS's (one simulated disk streams 720 KB/s, as the
//! paper's disks did). KB is 1024 bytes, as in the paper. The peer each
//! experiment is compared against is the raw simulated device, measured
//! alone: 4 KiB requests kept queued, timed on the disk model's clock
//! (so the reference does not move with the host's load).

mod compress_report;
mod exp;
mod mount_report;
mod mounts;
mod plot;
mod pool;
mod redundancy_report;

pub use compress_report::{compress_report, compress_rows, CompressRow};
pub use mount_report::{mount_report, mount_rows, MountRow};
pub use pool::{RamDisk, SimPool};
pub use redundancy_report::{redundancy_report, redundancy_rows, RedundancyRow};

use serde_json::Value;
use std::path::{Path, PathBuf};

/// (name, what it reproduces) of every experiment.
pub const EXPERIMENTS: &[(&str, &str)] = &[
    ("hfs-table1", "HFS Table 1: access patterns A and B on file structures A (regions) and B (stripe), with and without prefetch, 7 simulated disks"),
    ("hfs-speedup", "HFS Fig. 12: access pattern A on structure A with 1 to 7 threads, with and without prefetch"),
    ("hfs-prefetch-sweep", "HFS Fig. 13: access pattern B on the stripe, prefetch distance 1 to 40, amount 1 and 5"),
    ("hfs-layers", "HFS 5.5, Fig. 16: structure A with 0 and 10 extra layers of regions blocks: cost per block request, throughput lost"),
    ("hfs-parity", "Table 1's patterns A and B on parity(data=6,parity=1) over the 7 simulated disks, healthy and with one disk missing, beside the stripe"),
    ("hfs-migrate", "HFS Table 1's row A/B fixed online: pattern A before, during and after migrating the stripe to regions, beside a copy to a new file"),
    ("write-mostly", "write-mostly against stripe over 4 simulated disks, idle and with a competing job loading one disk: aggregate write bandwidth"),
    ("hfs-getattr", "HFS Fig. 9: getattr from 1..N threads on one file and on different files, native API and mount"),
    ("tam", "Tam's microbenchmarks (ch. 5, 6): extent and regular read, create, lookup, stat, writes; 1..N threads, per-thread time, cold and warm caches"),
    ("web-replay", "Tam ch. 7: a web server's log replayed (Zipf popularity, listings, errors), 1..N threads, native, mount and ext4"),
    ("meta-scale", "10 million empty files (--files N) in one directory and 1,000 per directory: create, stat, lookup, unlink rates, memory, bytes written, open times; native, mount, ext4, XFS"),
    ("tpcb", "Seltzer Table 7-9: TPC-B on embedded transactions, files laid out as extent and log (cleaner off, at 70% and 85% full), SQLite (WAL) on ext4 as the peer"),
    ("cffs", "C-FFS Table 4.2 and Seltzer Fig. 7-5: small files created, read, overwritten, removed with caches emptied between phases; co-located and default allocation, native and mount, ext4, XFS; image files and a simulated HDD"),
];

/// Not an experiment: summarises `OUT/mount.jsonl` from `bench/mount.sh`
/// (medians, ratios to ext4, `OUT/mount.png`).
pub const MOUNT_REPORT: &str = "mount-report";
/// What `list` says of [`MOUNT_REPORT`].
pub const MOUNT_REPORT_ABOUT: &str = "summary of bench/mount.sh's OUT/mount.jsonl: medians, ratios to ext4, mount.png";

/// Summaries of the benchmark scripts' results, each reading OUT/*.jsonl and
/// writing a plot beside it: (name, what it summarises, the summariser).
pub type Report = fn(&Path) -> Result<String, String>;
pub const REPORTS: &[(&str, &str, Report)] = &[
    (MOUNT_REPORT, MOUNT_REPORT_ABOUT, mount_report),
    (
        "redundancy-report",
        "summary of bench/redundancy.sh's OUT/redundancy.jsonl: medians, ratios to btrfs RAID, redundancy.png",
        redundancy_report,
    ),
    (
        "compress-report",
        "summary of bench/compress.sh's OUT/compress.jsonl: medians, compression ratios, reads against uncompressed, compress.png",
        compress_report,
    ),
];

/// What an experiment produced.
#[derive(Debug, Clone)]
pub struct Summary {
    pub name: String,
    /// The printed table.
    pub table: String,
    /// One line: the headline figures beside the paper's.
    pub line: String,
    pub json: PathBuf,
    pub png: PathBuf,
    /// The JSON document written.
    pub data: Value,
}

/// Draws an experiment's plot at the given path.
pub(crate) type Plot = Box<dyn FnOnce(&Path) -> Result<(), String>>;

/// What an experiment module returns before files are written.
pub(crate) struct Outcome {
    pub table: String,
    pub line: String,
    pub data: Value,
    pub plot: Plot,
}

/// The sizes and pool an experiment may be given on the command line.
/// Each option is refused by the experiments that do not take it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Params {
    /// Files to create (`--files N`: `meta-scale`, `cffs`).
    pub files: Option<u64>,
    /// Directories they go in (`--dirs N`: `cffs`).
    pub dirs: Option<u64>,
    /// Bytes a file (`--size S`: `cffs`).
    pub size: Option<u64>,
    /// The disk model of a simulated pool (`--sim hdd`, `hdd:key=value,...`,
    /// or `none`: `cffs`).
    pub sim: Option<String>,
}

/// Runs experiment `name` (see [`EXPERIMENTS`]), writing NAME.json and
/// NAME.png into `out_dir`.
pub fn run(name: &str, quick: bool, out_dir: &Path) -> Result<Summary, String> {
    run_params(name, quick, &Params::default(), out_dir)
}

/// [`run`] with a file count for the experiments that take one
/// (`meta-scale`, `cffs`; `--files N` on the command line).
pub fn run_with(name: &str, quick: bool, files: Option<u64>, out_dir: &Path) -> Result<Summary, String> {
    run_params(name, quick, &Params { files, ..Params::default() }, out_dir)
}

/// [`run`] with the command line's sizes and pool ([`Params`]).
pub fn run_params(name: &str, quick: bool, p: &Params, out_dir: &Path) -> Result<Summary, String> {
    let takes: &[&str] = match name {
        "meta-scale" => &["--files"],
        "cffs" => &["--files", "--dirs", "--size", "--sim"],
        _ => &[],
    };
    let given = [
        ("--files", p.files.is_some()),
        ("--dirs", p.dirs.is_some()),
        ("--size", p.size.is_some()),
        ("--sim", p.sim.is_some()),
    ];
    if let Some((opt, _)) = given.iter().find(|(o, g)| *g && !takes.contains(o)) {
        if EXPERIMENTS.iter().any(|e| e.0 == name) {
            return Err(format!("{name} does not take {opt}"));
        }
    }
    let files = p.files;
    let load_before = loadavg();
    let outcome = match name {
        "hfs-table1" => exp::table1::run(quick)?,
        "hfs-speedup" => exp::speedup::run(quick)?,
        "hfs-prefetch-sweep" => exp::sweep::run(quick)?,
        "hfs-layers" => exp::layers::run(quick)?,
        "hfs-getattr" => exp::getattr::run(quick)?,
        "hfs-parity" => exp::parity::run(quick)?,
        "hfs-migrate" => exp::migrate::run(quick)?,
        "write-mostly" => exp::write_mostly::run(quick)?,
        "meta-scale" => exp::meta_scale::run(quick, files)?,
        "tam" => exp::tam::run(quick)?,
        "web-replay" => exp::web_replay::run(quick)?,
        "tpcb" => exp::tpcb::run(quick)?,
        "cffs" => exp::cffs::run(quick, p)?,
        _ => {
            let names: Vec<&str> = EXPERIMENTS.iter().map(|e| e.0).collect();
            return Err(format!("unknown experiment {name:?} (known: {})", names.join(", ")));
        }
    };
    std::fs::create_dir_all(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let json = out_dir.join(format!("{name}.json"));
    let png = out_dir.join(format!("{name}.png"));
    let mut data = outcome.data;
    if let Value::Object(m) = &mut data {
        m.insert("experiment".into(), Value::String(name.into()));
        m.insert("quick".into(), Value::Bool(quick));
        m.insert("summary".into(), Value::String(outcome.line.clone()));
        // Runs without queued requests feel the host's scheduling delays.
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        m.insert(
            "host".into(),
            serde_json::json!({"cores": cores, "loadavg_before": load_before, "loadavg_after": loadavg()}),
        );
    }
    let text = serde_json::to_string_pretty(&data).map_err(|e| e.to_string())?;
    // Written beside and renamed, so a reader never sees half a file.
    let tmp = out_dir.join(format!("{name}.json.tmp"));
    std::fs::write(&tmp, text + "\n")
        .and_then(|_| std::fs::rename(&tmp, &json))
        .map_err(|e| format!("{}: {e}", json.display()))?;
    (outcome.plot)(&png)?;
    Ok(Summary { name: name.into(), table: outcome.table, line: outcome.line, json, png, data })
}

/// `NAME [--quick] [--out DIR]` or `list`: runs and prints; the exit code.
pub fn main_with_args(args: &[String]) -> i32 {
    let mut name = None;
    let mut quick = false;
    let mut params = Params::default();
    let mut out = PathBuf::from("bench/results");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--files" => match it.next().and_then(|n| n.replace([',', '_'], "").parse::<u64>().ok()) {
                Some(n) if n >= 10 => params.files = Some(n),
                _ => {
                    eprintln!("hurricane bench: --files needs a count of at least 10");
                    return 2;
                }
            },
            "--dirs" => match it.next().and_then(|n| n.replace([',', '_'], "").parse::<u64>().ok()) {
                Some(n) if n >= 1 => params.dirs = Some(n),
                _ => {
                    eprintln!("hurricane bench: --dirs needs a count of at least 1");
                    return 2;
                }
            },
            "--size" => match it.next().map(|s| hurricane::units::parse_size(s)) {
                Some(Ok(n)) if n >= 1 => params.size = Some(n),
                _ => {
                    eprintln!("hurricane bench: --size needs a size of at least 1 byte (4K, 1KiB, 4096)");
                    return 2;
                }
            },
            "--sim" => match it.next() {
                Some(m) => params.sim = Some(m.clone()),
                None => {
                    eprintln!("hurricane bench: --sim needs a disk model (hdd, hdd:key=value,..., none)");
                    return 2;
                }
            },
            "--out" => match it.next() {
                Some(d) => out = PathBuf::from(d),
                None => {
                    eprintln!("hurricane bench: --out needs a directory");
                    return 2;
                }
            },
            "list" | "--list" => {
                for (n, what) in EXPERIMENTS {
                    println!("{n:20} {what}");
                }
                for (n, what, _) in REPORTS {
                    println!("{n:20} {what}");
                }
                return 0;
            }
            s if s.starts_with('-') => {
                eprintln!("hurricane bench: unknown option {s}");
                return 2;
            }
            s if name.is_none() => name = Some(s.to_string()),
            s => {
                eprintln!("hurricane bench: unexpected argument {s}");
                return 2;
            }
        }
    }
    let Some(name) = name else {
        eprintln!(
            "usage: hurricane bench NAME [--quick] [--files N] [--dirs N] [--size S] [--sim hdd] [--out DIR]   (hurricane bench list)"
        );
        return 2;
    };
    if let Some((_, _, report)) = REPORTS.iter().find(|r| r.0 == name) {
        return match report(&out) {
            Ok(t) => {
                print!("{t}");
                0
            }
            Err(e) => {
                eprintln!("hurricane bench {name}: {e}");
                1
            }
        };
    }
    match run_params(&name, quick, &params, &out) {
        Ok(s) => {
            print!("{}", s.table);
            println!("wrote {} and {}", s.json.display(), s.png.display());
            println!("{}", s.line);
            0
        }
        Err(e) => {
            eprintln!("hurricane bench {name}: {e}");
            1
        }
    }
}

/// A fixed-width text table.
pub(crate) fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < w.len() {
                w[i] = w[i].max(c.len());
            }
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let width = w.get(i).copied().unwrap_or(0);
            if i == 0 {
                s.push_str(&format!("{c:<width$}"));
            } else {
                s.push_str(&format!("  {c:>width$}"));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(head.to_vec());
    out.push_str(&line(w.iter().map(|&n| "-".repeat(n)).collect::<Vec<_>>().iter().map(String::as_str).collect()));
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

/// The host's 1-minute load average.
pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

pub(crate) fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}
