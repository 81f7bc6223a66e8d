//! `cffs`: small files, as C-FFS measured them (Sapuntzakis's thesis,
//! Table 4.2: 1,000 files of 4 KiB across 10 directories) and as Seltzer
//! did (thesis, Fig. 7-5: 10,000 files of 1 KiB in 100 directories).
//!
//! Four phases, each over every file in the order they were made
//! (directory by directory): create (and write), read, overwrite (the same
//! bytes again, new contents), remove. The caches are emptied before each
//! phase, and each phase's time includes a final sync, as C-FFS's did:
//! - natively (`Fs` calls): the pool is closed and opened again, and the
//!   host's page cache is dropped (`/proc/sys/vm/drop_caches`), since an
//!   image file's blocks would otherwise be read from it; the sync is
//!   `Fs::sync`;
//! - through Hurricane's mount (std::fs calls; the pool served by a thread
//!   of this process): unmounted and mounted again, host caches dropped;
//!   the sync is an fsync of the mount's root (the mount commits the
//!   journal on it);
//! - ext4 and XFS on loop devices (std::fs calls): unmounted and mounted
//!   again, host caches dropped; the sync is `syncfs`.
//!
//! Hurricane runs twice, with the workload's directories defaulting to
//! the co-located layout ([`COLOCATED`], `user.hurricane.dir_layout`) and
//! to the default allocation ([`DEFAULT`], also the pool's default layout),
//! each on a pool of one image file. The file named in each phase's
//! results is checked: every file read back holds what was written, the
//! files after the overwrite hold the new contents (read back after the
//! phase, caches emptied, untimed), the directories are empty after the
//! remove, and a file created in a workload directory has the layout its
//! directory gives (`layout` in the JSON).
//!
//! Device requests per phase (reads and writes, the sync included) are
//! Hurricane's per-device counters (native: `Fs::device_stats`; the mount:
//! its statistics) and the requests the peers' loop devices completed
//! (`/sys/block/loopN/stat`).
//!
//! A large file (32 MiB on image files, 8 MiB on the simulated disk) is
//! written on each system's pool before the small files, the caches
//! emptied, and read: the large-file read bandwidth. `small_read_fraction`
//! is the small-file read bandwidth (file data, the first workload, the
//! co-located layout, natively) over that pool's large-file read
//! bandwidth; C-FFS reports 90% (5.4 MB/s against 6.0, counting the 8 KiB
//! blocks it read per file: by file data, 680 files/s of 4 KiB is 46%).
//!
//! The simulated disk (`--sim hdd`, or `hdd:key=value,...`; see
//! `hurricane::device::sim`): a pool of one simulated mid-1990s disk over
//! memory, where seeks and rotation cost what the model says; natively
//! only, co-located and default, the first workload only
//! (`CFFS_SIM_WORKLOADS` widens it). `hdd_colocated_over_default` is the
//! read rate (files/s) with co-location over the default's there. A run
//! without `--sim` measures the image files and the simulated disk;
//! `--sim hdd` only the simulated disk, `--sim none` only the image files.
//!
//! `--files N`, `--dirs N` and `--size S` replace the two workloads with
//! one of those sizes (missing ones from Table 4.2). Environment:
//! `CFFS_SYSTEMS` (a comma-separated subset of native-colocated,
//! native-default, mount-colocated, mount-default, ext4, xfs),
//! `CFFS_WORKLOADS` (cffs, seltzer), `CFFS_SIM_WORKLOADS`, `CFFS_REPEATS`
//! (each workload's four phases run again on the same pool, medians
//! reported; default 1), `CFFS_LARGE` (the large file's size),
//! `CFFS_COLOCATED` and `CFFS_DEFAULT` (the two layouts),
//! `CFFS_MOUNT_OPTIONS` (Hurricane's mount options, a `-o` list), and
//! `HURRICANE_BENCH_DIR` (where the pools and images go, default
//! `/var/tmp`). The JSON records the values used.

use super::{f0, f2, Rng};
use crate::mounts::{LoopFs, Served};
use crate::pool::RamDisk;
use crate::{plot, table, Outcome, Params};
use hurricane::device::sim::SimStats;
use hurricane::device::{Device, SimDevice, SimParams};
use hurricane::{Creds, FormatOptions, Fs, OpenOptions, Options};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The co-located layout (C-FFS grouping): small files of a directory
/// together in aligned groups, a whole group read on a miss.
pub const COLOCATED: &str = "colocate";
/// The default allocation on a pool of one device.
pub const DEFAULT: &str = "extent";

const PHASES: [&str; 4] = ["create", "read", "overwrite", "remove"];

/// One phase of C-FFS's table: seconds, reads, writes, files a second.
type Published = (f64, u64, u64, f64);

/// C-FFS Table 4.2 as published: per system, per phase (create/write,
/// read, overwrite, remove).
const CFFS_TABLE: [(&str, [Published; 4]); 3] = [
    ("FFS", [(15.34, 41, 3052, 65.2), (2.08, 1031, 21, 480.0), (3.98, 1031, 1021, 251.0), (13.19, 41, 2033, 76.0)]),
    (
        "C-FFS without grouping",
        [(2.48, 2, 1064, 403.0), (1.59, 1031, 30, 629.0), (3.55, 1031, 1030, 282.0), (8.66, 34, 1004, 115.0)],
    ),
    (
        "C-FFS with grouping",
        [(2.55, 4, 181, 392.0), (1.47, 151, 31, 680.0), (3.32, 167, 135, 301.0), (8.62, 34, 1006, 116.0)],
    ),
];

/// C-FFS's small-file read bandwidth over its large-file bandwidth.
const CFFS_SMALL_READ_FRACTION: f64 = 0.90;

#[derive(Clone, Debug)]
struct Workload {
    key: &'static str,
    title: &'static str,
    files: u64,
    dirs: u64,
    size: u64,
    /// Files are made round robin over the directories (one in each in
    /// turn), as a mail spool or a parallel build makes them, not
    /// directory by directory; the other phases go directory by directory.
    interleaved: bool,
}

impl Workload {
    fn per_dir(&self) -> u64 {
        self.files.div_ceil(self.dirs).max(1)
    }
    fn dir(&self, d: u64) -> String {
        format!("{}/d{d}", self.key)
    }
    /// File `i`, relative to the root: directory by directory.
    fn file(&self, i: u64) -> String {
        format!("{}/d{}/f{i}", self.key, i / self.per_dir())
    }
    fn bytes(&self) -> u64 {
        self.files * self.size
    }
    /// The order files are made in: `file(i)` for each `i`.
    fn create_order(&self) -> Vec<u64> {
        if !self.interleaved {
            return (0..self.files).collect();
        }
        let per = self.per_dir();
        let mut out = Vec::with_capacity(self.files as usize);
        for k in 0..per {
            for d in 0..self.dirs {
                let i = d * per + k;
                if i < self.files {
                    out.push(i);
                }
            }
        }
        out
    }
    fn json(&self) -> Value {
        json!({"key": self.key, "title": self.title, "files": self.files, "dirs": self.dirs, "size": self.size,
            "made": if self.interleaved { "round robin over the directories" } else { "directory by directory" }})
    }
}

/// Every file's contents, one generation (1: created, 2: overwritten).
fn contents(w: &Workload, generation: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(w.bytes() as usize);
    for i in 0..w.files {
        fill(&mut out, i, generation, w.size);
    }
    out
}

fn fill(out: &mut Vec<u8>, i: u64, generation: u64, size: u64) {
    let mut rng = Rng(i.wrapping_mul(0x1000_0000_01b3) ^ generation.wrapping_mul(0x9e37_79b9));
    let mut left = size as usize;
    while left > 0 {
        let b = rng.next().to_le_bytes();
        let n = left.min(8);
        out.extend_from_slice(&b[..n]);
        left -= n;
    }
}

/// A system under test, by paths relative to its root.
trait System {
    fn name(&self) -> &str;
    /// Makes a directory; Hurricane's get the system's layout as their default.
    fn mkdir(&mut self, dir: &str) -> Result<(), String>;
    /// Empties every cache: the next phase starts cold.
    fn cold(&mut self) -> Result<(), String>;
    fn create(&mut self, path: &str, data: &[u8]) -> Result<(), String>;
    /// Reads a whole file into `buf`.
    fn read(&mut self, path: &str, buf: &mut Vec<u8>) -> Result<(), String>;
    /// Writes `data` over an existing file's first bytes.
    fn overwrite(&mut self, path: &str, data: &[u8]) -> Result<(), String>;
    fn remove(&mut self, path: &str) -> Result<(), String>;
    /// Makes everything done so far durable.
    fn sync(&mut self) -> Result<(), String>;
    /// Device requests so far (reads, writes), where known.
    fn requests(&self) -> Result<Option<(u64, u64)>, String>;
    fn entries(&mut self, dir: &str) -> Result<usize, String>;
    /// A file's layout (Hurricane's only).
    fn layout_of(&mut self, path: &str) -> Result<Option<String>, String>;
    /// The simulated disks' timing on or off (nothing elsewhere).
    fn timing(&self, _on: bool) {}
    /// Loads every file's inode, and nothing else, into memory, as an
    /// inode embedded in its directory entry would come with the entry:
    /// false where that cannot be done (not Hurricane's native API).
    fn load_inodes(&mut self) -> Result<bool, String> {
        Ok(false)
    }
    /// The simulated disks' own counters (every request they served, and
    /// the time the disk model spent on them), summed; None elsewhere.
    fn disk(&self) -> Option<SimStats> {
        None
    }
    fn close(self: Box<Self>) -> Result<(), String>;
}

/// Empties the host's page cache (an image file's blocks, a loop
/// device's). False when that is not allowed (not root).
fn drop_host_caches() -> bool {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// Where the host caches could not be dropped (reported in the JSON).
static HOST_CACHES_KEPT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn drop_host() {
    if !drop_host_caches() {
        HOST_CACHES_KEPT.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

enum Backing {
    /// A pool directory of image files.
    Dir(PathBuf),
    /// Simulated disks over memory, kept between opens.
    Sim { devs: Vec<Arc<dyn Device>>, sims: Vec<Arc<SimDevice>> },
}

/// Hurricane's native API.
struct Native {
    name: String,
    layout: String,
    fs: Option<Fs>,
    backing: Backing,
    /// Every file's inode number, by path.
    inos: std::collections::HashMap<String, u64>,
}

impl Native {
    fn fs(&self) -> Result<&Fs, String> {
        self.fs.as_ref().ok_or_else(|| "the pool is not open".to_string())
    }
    fn open(&self) -> Result<Fs, String> {
        match &self.backing {
            Backing::Dir(d) => Fs::open_dir(d, Options::default()).map_err(crate::err),
            Backing::Sim { devs, .. } => Fs::open(devs.clone(), Options::default()).map_err(crate::err),
        }
    }
    fn p(path: &str) -> String {
        format!("/{path}")
    }
}

impl System for Native {
    fn name(&self) -> &str {
        &self.name
    }
    fn mkdir(&mut self, dir: &str) -> Result<(), String> {
        let fs = self.fs()?;
        let ino = fs.mkdir_all(&Self::p(dir), 0o755).map_err(|e| format!("mkdir {dir}: {e}"))?;
        fs.dir_layout_set(&Creds::root(), ino, &self.layout).map_err(|e| format!("{dir}: layout {}: {e}", self.layout))
    }
    fn cold(&mut self) -> Result<(), String> {
        self.timing(false);
        if let Some(fs) = self.fs.take() {
            fs.close().map_err(|e| format!("closing the pool: {e}"))?;
        }
        if let Backing::Dir(_) = self.backing {
            drop_host();
        }
        self.fs = Some(self.open()?);
        Ok(())
    }
    fn create(&mut self, path: &str, data: &[u8]) -> Result<(), String> {
        let p = Self::p(path);
        let mut f = self.fs()?.create(&p, None).map_err(|e| format!("create {p}: {e}"))?;
        f.write_all_at(data, 0).map_err(|e| format!("write {p}: {e}"))?;
        self.inos.insert(p, f.ino());
        Ok(())
    }
    fn read(&mut self, path: &str, buf: &mut Vec<u8>) -> Result<(), String> {
        let p = Self::p(path);
        let f = self.fs()?.open_file(&p).map_err(|e| format!("open {p}: {e}"))?;
        let size = f.len().map_err(|e| format!("{p}: {e}"))?;
        buf.resize(size as usize, 0);
        let mut off = 0;
        while off < size {
            let n = f.read_at(&mut buf[off as usize..], off).map_err(|e| format!("read {p}: {e}"))?;
            if n == 0 {
                break;
            }
            off += n as u64;
        }
        buf.truncate(off as usize);
        Ok(())
    }
    fn overwrite(&mut self, path: &str, data: &[u8]) -> Result<(), String> {
        let p = Self::p(path);
        let mut f = self.fs()?.open_with(&p, OpenOptions::new().write(true)).map_err(|e| format!("open {p}: {e}"))?;
        f.write_all_at(data, 0).map_err(|e| format!("write {p}: {e}"))
    }
    fn remove(&mut self, path: &str) -> Result<(), String> {
        let p = Self::p(path);
        self.fs()?.remove(&p).map_err(|e| format!("remove {p}: {e}"))?;
        self.inos.remove(&p);
        Ok(())
    }
    fn load_inodes(&mut self) -> Result<bool, String> {
        let fs = self.fs()?;
        for &ino in self.inos.values() {
            fs.getattr(ino).map_err(|e| format!("inode {ino}: {e}"))?;
        }
        Ok(true)
    }
    fn sync(&mut self) -> Result<(), String> {
        self.fs()?.sync().map_err(|e| format!("sync: {e}"))
    }
    fn requests(&self) -> Result<Option<(u64, u64)>, String> {
        let s = self.fs()?.device_stats();
        Ok(Some((s.iter().map(|d| d.1.reads).sum(), s.iter().map(|d| d.1.writes).sum())))
    }
    fn entries(&mut self, dir: &str) -> Result<usize, String> {
        Ok(self.fs()?.read_dir(&Self::p(dir)).map_err(crate::err)?.len())
    }
    fn layout_of(&mut self, path: &str) -> Result<Option<String>, String> {
        Ok(Some(self.fs()?.layout_of(&Self::p(path)).map_err(crate::err)?))
    }
    fn disk(&self) -> Option<SimStats> {
        let Backing::Sim { sims, .. } = &self.backing else { return None };
        let mut t = SimStats::default();
        for s in sims.iter().map(|s| s.stats()) {
            t.requests += s.requests;
            t.cache_hits += s.cache_hits;
            t.stream_hits += s.stream_hits;
            t.media += s.media;
            t.busy_ns += s.busy_ns;
        }
        Some(t)
    }
    fn timing(&self, on: bool) {
        if let Backing::Sim { sims, .. } = &self.backing {
            for s in sims {
                s.set_enabled(on);
            }
        }
    }
    fn close(mut self: Box<Self>) -> Result<(), String> {
        self.timing(false);
        match self.fs.take() {
            Some(fs) => fs.close().map_err(crate::err),
            None => Ok(()),
        }
    }
}

enum Kind {
    /// Hurricane's mount of a pool directory.
    Mount { pool: PathBuf, served: Option<Served>, layout: String },
    /// A kernel file system on a loop device.
    Loop(LoopFs),
}

/// A mounted file system through std::fs.
struct Posix {
    name: String,
    root: PathBuf,
    kind: Kind,
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(crate::err)?;
    let n = std::ffi::CString::new(name).map_err(crate::err)?;
    // SAFETY: both strings are NUL-terminated and live across the call;
    // the value pointer and length describe one borrowed slice.
    let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r != 0 {
        return Err(format!("setxattr {name} on {}: {}", path.display(), std::io::Error::last_os_error()));
    }
    Ok(())
}

impl System for Posix {
    fn name(&self) -> &str {
        &self.name
    }
    fn mkdir(&mut self, dir: &str) -> Result<(), String> {
        let p = self.root.join(dir);
        std::fs::create_dir_all(&p).map_err(|e| format!("mkdir {}: {e}", p.display()))?;
        if let Kind::Mount { layout, .. } = &self.kind {
            set_xattr(&p, hurricane::xattr::DIR_LAYOUT, layout.as_bytes())?;
        }
        Ok(())
    }
    fn cold(&mut self) -> Result<(), String> {
        match &mut self.kind {
            Kind::Mount { pool, served, .. } => {
                if let Some(s) = served.take() {
                    s.stop()?;
                }
                drop_host();
                *served = Some(Served::start(pool, &self.root, mount_options()?)?);
            }
            Kind::Loop(l) => {
                l.remount()?;
                drop_host();
            }
        }
        Ok(())
    }
    fn create(&mut self, path: &str, data: &[u8]) -> Result<(), String> {
        let p = self.root.join(path);
        std::fs::write(&p, data).map_err(|e| format!("create {}: {e}", p.display()))
    }
    fn read(&mut self, path: &str, buf: &mut Vec<u8>) -> Result<(), String> {
        let p = self.root.join(path);
        buf.clear();
        let mut f = std::fs::File::open(&p).map_err(|e| format!("open {}: {e}", p.display()))?;
        f.read_to_end(buf).map_err(|e| format!("read {}: {e}", p.display()))?;
        Ok(())
    }
    fn overwrite(&mut self, path: &str, data: &[u8]) -> Result<(), String> {
        let p = self.root.join(path);
        let mut f =
            std::fs::OpenOptions::new().write(true).open(&p).map_err(|e| format!("open {}: {e}", p.display()))?;
        f.write_all(data).map_err(|e| format!("write {}: {e}", p.display()))
    }
    fn remove(&mut self, path: &str) -> Result<(), String> {
        let p = self.root.join(path);
        std::fs::remove_file(&p).map_err(|e| format!("remove {}: {e}", p.display()))
    }
    fn sync(&mut self) -> Result<(), String> {
        let f = std::fs::File::open(&self.root).map_err(crate::err)?;
        match &self.kind {
            // The mount commits its journal on an fsync of a directory.
            Kind::Mount { .. } => f.sync_all().map_err(|e| format!("fsync of the mount's root: {e}")),
            // SAFETY: syncfs on a descriptor this function owns.
            Kind::Loop(_) => match unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) } {
                0 => Ok(()),
                _ => Err(format!("syncfs: {}", std::io::Error::last_os_error())),
            },
        }
    }
    fn requests(&self) -> Result<Option<(u64, u64)>, String> {
        match &self.kind {
            Kind::Mount { .. } => {
                let r = hurricane_fuse::mountinfo::read_stats(&self.root)?;
                Ok(Some((r.devices.iter().map(|d| d.reads).sum(), r.devices.iter().map(|d| d.writes).sum())))
            }
            Kind::Loop(l) => l.requests().map(Some),
        }
    }
    fn entries(&mut self, dir: &str) -> Result<usize, String> {
        Ok(std::fs::read_dir(self.root.join(dir)).map_err(crate::err)?.count())
    }
    fn layout_of(&mut self, path: &str) -> Result<Option<String>, String> {
        match &self.kind {
            Kind::Mount { .. } => {
                let v = hurricane_fuse::mountinfo::get_xattr(&self.root.join(path), hurricane::xattr::LAYOUT)
                    .map_err(|e| format!("{path}: {}: {e}", hurricane::xattr::LAYOUT))?;
                Ok(Some(String::from_utf8_lossy(&v).trim_end_matches('\0').to_string()))
            }
            Kind::Loop(_) => Ok(None),
        }
    }
    fn close(mut self: Box<Self>) -> Result<(), String> {
        if let Kind::Mount { served, .. } = &mut self.kind {
            if let Some(s) = served.take() {
                s.stop()?;
            }
        }
        Ok(())
    }
}

/// The options of Hurricane's mount: the defaults, or `CFFS_MOUNT_OPTIONS`
/// (a `-o` list, as `hurricane mount` takes it).
fn mount_options() -> Result<hurricane_fuse::MountOptions, String> {
    let list = std::env::var("CFFS_MOUNT_OPTIONS").unwrap_or_default();
    hurricane_fuse::MountOptions::parse(&[list]).map_err(|e| format!("CFFS_MOUNT_OPTIONS: {e}"))
}

/// One phase's measurement.
#[derive(Clone, Debug)]
struct Sample {
    seconds: f64,
    requests: Option<(u64, u64)>,
    /// The simulated disk's counters over the phase.
    disk: Option<SimStats>,
}

/// A system's results on one workload: samples per phase, one a repeat.
struct Run {
    pool: &'static str,
    system: String,
    layout: Option<String>,
    workload: Workload,
    /// The layout a file created in a workload directory got.
    layout_seen: Option<String>,
    samples: [Vec<Sample>; 4],
    /// The read phase with every inode loaded first (native only).
    inodes_loaded: Vec<Sample>,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Medians over the repeats of one phase.
struct Figures {
    seconds: f64,
    files_per_s: f64,
    mb_per_s: f64,
    reads: Option<u64>,
    writes: Option<u64>,
    /// The simulated disk: requests it served, seconds it was busy.
    disk_requests: Option<u64>,
    disk_busy_s: Option<f64>,
}

impl Run {
    fn figures(&self, phase: usize) -> Figures {
        self.figures_of(&self.samples[phase])
    }

    /// The read with every inode loaded first, where measured.
    fn loaded_figures(&self) -> Option<Figures> {
        (!self.inodes_loaded.is_empty()).then(|| self.figures_of(&self.inodes_loaded))
    }

    fn figures_of(&self, s: &[Sample]) -> Figures {
        let seconds = median(s.iter().map(|x| x.seconds).collect());
        let req = |f: fn(&(u64, u64)) -> u64| -> Option<u64> {
            let v: Option<Vec<f64>> = s.iter().map(|x| x.requests.as_ref().map(|r| f(r) as f64)).collect();
            v.filter(|v| !v.is_empty()).map(|v| median(v).round() as u64)
        };
        let disk = |f: fn(&SimStats) -> f64| -> Option<f64> {
            let v: Option<Vec<f64>> = s.iter().map(|x| x.disk.as_ref().map(f)).collect();
            v.filter(|v| !v.is_empty()).map(median)
        };
        Figures {
            seconds,
            files_per_s: self.workload.files as f64 / seconds.max(1e-9),
            mb_per_s: self.workload.bytes() as f64 / 1e6 / seconds.max(1e-9),
            reads: req(|r| r.0),
            writes: req(|r| r.1),
            disk_requests: disk(|d| d.requests as f64).map(|x| x.round() as u64),
            disk_busy_s: disk(|d| d.busy_ns as f64 / 1e9),
        }
    }
}

/// The large file's read.
struct Large {
    pool: &'static str,
    system: String,
    bytes: u64,
    read_seconds: f64,
    requests: Option<(u64, u64)>,
}

impl Large {
    fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.read_seconds.max(1e-9)
    }
}

/// The simulated disk's counters from `a` to `b`.
fn disk_delta(a: Option<SimStats>, b: Option<SimStats>) -> Option<SimStats> {
    a.zip(b).map(|(a, b)| SimStats {
        requests: b.requests - a.requests,
        cache_hits: b.cache_hits - a.cache_hits,
        stream_hits: b.stream_hits - a.stream_hits,
        media: b.media - a.media,
        busy_ns: b.busy_ns - a.busy_ns,
    })
}

fn delta(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> Option<(u64, u64)> {
    match (a, b) {
        (Some(a), Some(b)) => Some((b.0.saturating_sub(a.0), b.1.saturating_sub(a.1))),
        _ => None,
    }
}

fn bar(pb: &ProgressBar, len: u64, msg: String) {
    pb.set_length(len);
    pb.set_position(0);
    pb.set_message(msg);
}

/// Writes the large file, empties the caches and reads it (timed).
fn large(sys: &mut dyn System, pool: &'static str, bytes: u64, pb: &ProgressBar) -> Result<Large, String> {
    bar(pb, 1, format!("{}: large file", sys.name()));
    let mut data = Vec::with_capacity(bytes as usize);
    fill(&mut data, u64::MAX, 3, bytes);
    sys.create("large", &data)?;
    sys.sync()?;
    sys.cold()?;
    let mut buf = Vec::with_capacity(bytes as usize);
    let before = sys.requests()?;
    sys.timing(true);
    let t0 = Instant::now();
    sys.read("large", &mut buf)?;
    let read_seconds = t0.elapsed().as_secs_f64();
    sys.timing(false);
    let requests = delta(before, sys.requests()?);
    if buf != data {
        return Err(format!("{}: the large file read back differs from what was written", sys.name()));
    }
    pb.inc(1);
    Ok(Large { pool, system: sys.name().to_string(), bytes, read_seconds, requests })
}

/// Checks every file holds generation `data`, caches emptied, untimed.
fn verify(sys: &mut dyn System, w: &Workload, data: &[u8], what: &str) -> Result<(), String> {
    sys.cold()?;
    let mut buf = Vec::new();
    for i in 0..w.files {
        let p = w.file(i);
        sys.read(&p, &mut buf)?;
        let want = &data[(i * w.size) as usize..((i + 1) * w.size) as usize];
        if buf != want {
            return Err(format!(
                "{}: {p} after the {what}: {} bytes read, not the {} written",
                sys.name(),
                buf.len(),
                w.size
            ));
        }
    }
    Ok(())
}

/// One repeat of the four phases; the directories exist.
fn phases(
    sys: &mut dyn System,
    w: &Workload,
    gens: &[Vec<u8>; 2],
    pb: &ProgressBar,
    layout_seen: &mut Option<String>,
) -> Result<([Sample; 4], Option<Sample>), String> {
    let size = w.size as usize;
    let piece = |g: usize, i: u64| &gens[g][i as usize * size..(i as usize + 1) * size];
    let mut out = Vec::new();
    let mut warm = None;
    let mut buf = Vec::with_capacity(size);
    for (k, phase) in PHASES.iter().enumerate() {
        sys.cold()?;
        bar(pb, w.files, format!("{} {}: {phase}", sys.name(), w.key));
        let before = sys.requests()?;
        let disk0 = sys.disk();
        sys.timing(true);
        let order: Vec<u64> = if k == 0 { w.create_order() } else { (0..w.files).collect() };
        let t0 = Instant::now();
        for i in order {
            let p = w.file(i);
            match k {
                0 => sys.create(&p, piece(0, i))?,
                1 => {
                    sys.read(&p, &mut buf)?;
                    if buf != piece(0, i) {
                        return Err(format!("{}: {p}: {} bytes read, not the {size} written", sys.name(), buf.len()));
                    }
                }
                2 => sys.overwrite(&p, piece(1, i))?,
                _ => sys.remove(&p)?,
            }
            pb.inc(1);
        }
        out.push(finish(sys, t0, before, disk0)?);
        if k == 1 {
            warm = read_with_inodes_loaded(sys, w, gens, pb)?;
        }
        match k {
            0 if layout_seen.is_none() && w.files > 0 => *layout_seen = sys.layout_of(&w.file(0))?,
            2 => verify(sys, w, &gens[1], "overwrite")?,
            3 => {
                for d in 0..w.dirs {
                    let n = sys.entries(&w.dir(d))?;
                    if n != 0 {
                        return Err(format!("{}: {} holds {n} entries after the remove", sys.name(), w.dir(d)));
                    }
                }
            }
            _ => {}
        }
    }
    let out: [Sample; 4] = out.try_into().map_err(|_| "four phases expected".to_string())?;
    Ok((out, warm))
}

/// The read phase again with every inode loaded first, caches otherwise
/// emptied: what reading would cost if inodes came with their directory
/// entries (C-FFS's embedded inodes), at best. The load is not timed (nor,
/// on the simulated disk, charged). None for systems that cannot load
/// inodes alone.
fn read_with_inodes_loaded(
    sys: &mut dyn System,
    w: &Workload,
    gens: &[Vec<u8>; 2],
    pb: &ProgressBar,
) -> Result<Option<Sample>, String> {
    sys.cold()?;
    if !sys.load_inodes()? {
        return Ok(None);
    }
    bar(pb, w.files, format!("{} {}: read, inodes loaded", sys.name(), w.key));
    let size = w.size as usize;
    let mut buf = Vec::with_capacity(size);
    let before = sys.requests()?;
    let disk0 = sys.disk();
    sys.timing(true);
    let t0 = Instant::now();
    for i in 0..w.files {
        let p = w.file(i);
        sys.read(&p, &mut buf)?;
        if buf != gens[0][i as usize * size..(i as usize + 1) * size] {
            return Err(format!("{}: {p}: not the {size} bytes written", sys.name()));
        }
        pb.inc(1);
    }
    Ok(Some(finish(sys, t0, before, disk0)?))
}

/// Ends a timed pass: the sync, then the time, requests and disk counters
/// since `t0`, `before` and `disk0`.
fn finish(
    sys: &mut dyn System,
    t0: Instant,
    before: Option<(u64, u64)>,
    disk0: Option<SimStats>,
) -> Result<Sample, String> {
    sys.sync()?;
    let seconds = t0.elapsed().as_secs_f64();
    sys.timing(false);
    let requests = delta(before, sys.requests()?);
    let disk = disk_delta(disk0, sys.disk());
    Ok(Sample { seconds, requests, disk })
}

/// Runs the workloads on one system (after its large file, when asked).
#[allow(clippy::too_many_arguments)]
fn measure(
    mut sys: Box<dyn System>,
    pool: &'static str,
    layout: Option<&str>,
    workloads: &[(Workload, [Vec<u8>; 2])],
    repeats: usize,
    large_bytes: Option<u64>,
    pb: &ProgressBar,
) -> Result<(Vec<Run>, Option<Large>), String> {
    let res = (|| -> Result<(Vec<Run>, Option<Large>), String> {
        let big = match large_bytes {
            Some(b) => Some(large(sys.as_mut(), pool, b, pb)?),
            None => None,
        };
        let mut runs = Vec::new();
        for (w, gens) in workloads {
            for d in 0..w.dirs {
                sys.mkdir(&w.dir(d))?;
            }
            sys.sync()?;
            let mut samples: [Vec<Sample>; 4] = Default::default();
            let mut inodes_loaded = Vec::new();
            let mut layout_seen = None;
            for _ in 0..repeats {
                let (s, warm) = phases(sys.as_mut(), w, gens, pb, &mut layout_seen)?;
                for (k, x) in s.into_iter().enumerate() {
                    samples[k].push(x);
                }
                inodes_loaded.extend(warm);
            }
            let run = Run {
                pool,
                system: sys.name().to_string(),
                layout: layout.map(str::to_string),
                workload: w.clone(),
                layout_seen,
                samples,
                inodes_loaded,
            };
            let cells: Vec<String> = PHASES
                .iter()
                .enumerate()
                .map(|(k, p)| format!("{p} {} files/s", f0(run.figures(k).files_per_s)))
                .collect();
            pb.suspend(|| eprintln!("cffs: {pool} {} {}: {}", run.system, w.key, cells.join(", ")));
            runs.push(run);
        }
        Ok((runs, big))
    })();
    let closed = sys.close();
    let r = res?;
    closed?;
    Ok(r)
}

fn native_file(dir: &Path, name: &str, layout: &str, size: u64, default: &str) -> Result<Box<dyn System>, String> {
    let fo = FormatOptions { default_layout: Some(default.to_string()), ..Default::default() };
    Fs::mkfs_dir(dir, 1, size, &fo).map_err(crate::err)?;
    let fs = Fs::open_dir(dir, Options::default()).map_err(crate::err)?;
    Ok(Box::new(Native {
        name: name.into(),
        layout: layout.into(),
        fs: Some(fs),
        inos: Default::default(),
        backing: Backing::Dir(dir.to_path_buf()),
    }))
}

fn native_sim(name: &str, layout: &str, size: u64, p: &SimParams, default: &str) -> Result<Box<dyn System>, String> {
    let sims = vec![Arc::new(SimDevice::new(Arc::new(RamDisk::new("ram0", size)), p.clone()))];
    for s in &sims {
        s.set_enabled(false);
    }
    let devs: Vec<Arc<dyn Device>> = sims.iter().map(|s| s.clone() as Arc<dyn Device>).collect();
    let fo = FormatOptions { default_layout: Some(default.to_string()), ..Default::default() };
    Fs::format(devs.clone(), &fo).map_err(crate::err)?;
    let fs = Fs::open(devs.clone(), Options::default()).map_err(crate::err)?;
    Ok(Box::new(Native {
        name: name.into(),
        layout: layout.into(),
        fs: Some(fs),
        inos: Default::default(),
        backing: Backing::Sim { devs, sims },
    }))
}

fn mount(
    dir: &Path,
    mnt: &Path,
    name: &str,
    layout: &str,
    size: u64,
    default: &str,
) -> Result<Box<dyn System>, String> {
    let fo = FormatOptions { default_layout: Some(default.to_string()), ..Default::default() };
    Fs::mkfs_dir(dir, 1, size, &fo).map_err(crate::err)?;
    std::fs::create_dir_all(mnt).map_err(crate::err)?;
    let served = Served::start(dir, mnt, mount_options()?)?;
    Ok(Box::new(Posix {
        name: name.into(),
        root: mnt.to_path_buf(),
        kind: Kind::Mount { pool: dir.to_path_buf(), served: Some(served), layout: layout.into() },
    }))
}

fn kernel(fstype: &str, tmp: &Path, size: u64) -> Result<Box<dyn System>, String> {
    let l = LoopFs::make(fstype, &tmp.join(format!("{fstype}.img")), size, &tmp.join(fstype), &[])?;
    Ok(Box::new(Posix { name: fstype.into(), root: l.mnt.clone(), kind: Kind::Loop(l) }))
}

fn env_list(var: &str) -> Option<Vec<String>> {
    std::env::var(var).ok().map(|v| v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())
}

fn env_u64(var: &str) -> Result<Option<u64>, String> {
    match std::env::var(var) {
        Ok(v) => hurricane::units::parse_size(&v).map(Some).map_err(|e| format!("{var}={v}: {e}")),
        Err(_) => Ok(None),
    }
}

/// Every layout given must be one this engine takes.
fn check_layout(spec: &str, var: &str) -> Result<(), String> {
    hurricane::layout::parse(spec)
        .map(|_| ())
        .map_err(|e| format!("layout {spec:?} is not one this engine takes ({e}); {var} names another"))
}

const SYSTEMS: [&str; 6] = ["native-colocated", "native-default", "mount-colocated", "mount-default", "ext4", "xfs"];

pub fn run(quick: bool, params: &Params) -> Result<Outcome, String> {
    let colocated = std::env::var("CFFS_COLOCATED").unwrap_or_else(|_| COLOCATED.to_string());
    let default = std::env::var("CFFS_DEFAULT").unwrap_or_else(|_| DEFAULT.to_string());
    check_layout(&colocated, "CFFS_COLOCATED")?;
    check_layout(&default, "CFFS_DEFAULT")?;
    // The simulated disk: none, or its model; and whether image files run.
    let (sim, files_too) = match params.sim.as_deref() {
        None => (SimParams::parse("hdd").map_err(crate::err)?, true),
        Some(spec) => match SimParams::parse(spec).map_err(crate::err)? {
            Some(p) => (Some(p), false),
            None => (None, true),
        },
    };
    let custom = params.files.is_some() || params.dirs.is_some() || params.size.is_some();
    for (opt, v) in [("--files", params.files), ("--dirs", params.dirs), ("--size", params.size)] {
        if v == Some(0) {
            return Err(format!("{opt} must be at least 1"));
        }
    }
    let mut workloads: Vec<Workload> = if custom {
        vec![Workload {
            key: "custom",
            title: "small files (--files, --dirs, --size)",
            files: params.files.unwrap_or(1000),
            dirs: params.dirs.unwrap_or(10),
            size: params.size.unwrap_or(4096),
            interleaved: false,
        }]
    } else if quick {
        vec![
            Workload {
                key: "cffs",
                title: "C-FFS Table 4.2 (quick)",
                files: 40,
                dirs: 4,
                size: 4096,
                interleaved: false,
            },
            Workload {
                key: "cffs-interleaved",
                title: "C-FFS Table 4.2, made round robin (quick)",
                files: 40,
                dirs: 4,
                size: 4096,
                interleaved: true,
            },
            Workload {
                key: "seltzer",
                title: "Seltzer Fig. 7-5 (quick)",
                files: 100,
                dirs: 10,
                size: 1024,
                interleaved: false,
            },
        ]
    } else {
        vec![
            Workload {
                key: "cffs",
                title: "C-FFS Table 4.2: 1,000 files of 4 KiB, 10 directories",
                files: 1000,
                dirs: 10,
                size: 4096,
                interleaved: false,
            },
            Workload {
                key: "cffs-interleaved",
                title: "C-FFS Table 4.2, the files made round robin over the directories",
                files: 1000,
                dirs: 10,
                size: 4096,
                interleaved: true,
            },
            Workload {
                key: "seltzer",
                title: "Seltzer Fig. 7-5: 10,000 files of 1 KiB, 100 directories",
                files: 10_000,
                dirs: 100,
                size: 1024,
                interleaved: false,
            },
        ]
    };
    if !custom {
        if let Some(only) = env_list("CFFS_WORKLOADS") {
            workloads.retain(|w| only.iter().any(|o| o == w.key));
        }
    }
    let Some(first) = workloads.first().cloned() else { return Err("CFFS_WORKLOADS leaves no workload".into()) };
    let sim_workloads: Vec<Workload> = match env_list("CFFS_SIM_WORKLOADS") {
        Some(only) => workloads.iter().filter(|w| only.iter().any(|o| o == w.key)).cloned().collect(),
        // Table 4.2's files made both ways: a directory's files side by side
        // on a new pool either way when made directory by directory.
        None => workloads.iter().filter(|w| *w.key == *first.key || w.key == "cffs-interleaved").cloned().collect(),
    };
    let systems: Vec<&str> = match env_list("CFFS_SYSTEMS") {
        Some(only) => SYSTEMS.iter().copied().filter(|s| only.iter().any(|o| o == s)).collect(),
        None if quick => vec!["native-colocated", "native-default"],
        None => SYSTEMS.to_vec(),
    };
    let repeats = env_u64("CFFS_REPEATS")?.unwrap_or(1).max(1) as usize;
    let large_file = env_u64("CFFS_LARGE")?.unwrap_or(if quick { 1 << 20 } else { 32 << 20 });
    let large_sim = env_u64("CFFS_LARGE")?.unwrap_or(if quick { 1 << 20 } else { 8 << 20 });
    let data: Vec<(Workload, [Vec<u8>; 2])> =
        workloads.iter().map(|w| (w.clone(), [contents(w, 1), contents(w, 2)])).collect();
    let sim_data: Vec<(Workload, [Vec<u8>; 2])> =
        data.iter().filter(|(w, _)| sim_workloads.iter().any(|s| s.key == w.key)).cloned().collect();
    // Room for every file in whole blocks several times over, and the large
    // file; XFS takes no less than 300 MB.
    let blocks: u64 = workloads.iter().map(|w| w.files * w.size.div_ceil(4096).max(1) * 4096).sum();
    let pool_size = (blocks * 4 + large_file * 2 + (64 << 20)).max(512 << 20);
    let sim_size = (blocks * 4 + large_sim * 2 + (32 << 20)).max(96 << 20);
    let base = std::env::var_os("HURRICANE_BENCH_DIR").map(PathBuf::from).unwrap_or_else(|| "/var/tmp".into());
    let tmp = tempfile::Builder::new().prefix("cffs.").tempdir_in(&base).map_err(crate::err)?;
    HOST_CACHES_KEPT.store(false, std::sync::atomic::Ordering::Relaxed);

    let pb = ProgressBar::new(0);
    pb.set_style(
        ProgressStyle::with_template("{msg:40} {bar:30} {pos}/{len} [{elapsed}]")
            .map_err(crate::err)?
            .progress_chars("=> "),
    );
    let mut runs: Vec<Run> = Vec::new();
    let mut larges: Vec<Large> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let layout_of = |s: &str| {
        if s.ends_with("-colocated") {
            Some(colocated.as_str())
        } else if s.ends_with("-default") {
            Some(default.as_str())
        } else {
            None
        }
    };
    if files_too {
        for &s in &systems {
            let dir = tmp.path().join(s);
            let layout = layout_of(s);
            let made = match (s, layout) {
                (_, Some(l)) if s.starts_with("native") => native_file(&dir, s, l, pool_size, &default),
                (_, Some(l)) => mount(&dir, &tmp.path().join(format!("{s}.mnt")), s, l, pool_size, &default),
                _ => kernel(s, tmp.path(), pool_size),
            };
            let r = made.and_then(|sys| measure(sys, "image-file", layout, &data, repeats, Some(large_file), &pb));
            match r {
                Ok((rs, big)) => {
                    runs.extend(rs);
                    larges.extend(big);
                }
                Err(e) if s.starts_with("native") => {
                    pb.finish_and_clear();
                    return Err(format!("{s}: {e}"));
                }
                Err(e) => {
                    pb.suspend(|| eprintln!("cffs: {s} not measured: {e}"));
                    notes.push(format!("{s} not measured: {e}"));
                }
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    if let Some(p) = &sim {
        for s in systems.iter().copied().filter(|s| s.starts_with("native")) {
            let layout = layout_of(s).unwrap_or(default.as_str());
            let r = native_sim(s, layout, sim_size, p, &default)
                .and_then(|sys| measure(sys, "sim-hdd", Some(layout), &sim_data, repeats, Some(large_sim), &pb));
            match r {
                Ok((rs, big)) => {
                    runs.extend(rs);
                    larges.extend(big);
                }
                Err(e) => {
                    pb.finish_and_clear();
                    return Err(format!("sim-hdd {s}: {e}"));
                }
            }
        }
    }
    pb.finish_and_clear();
    if runs.is_empty() {
        return Err("no system measured (CFFS_SYSTEMS, --sim)".into());
    }
    let host_caches_kept = HOST_CACHES_KEPT.load(std::sync::atomic::Ordering::Relaxed);
    if host_caches_kept {
        notes.push("the host's page cache could not be dropped (not root): image-file reads may come from it".into());
    }
    report(Report {
        quick,
        runs,
        larges,
        notes,
        workloads: &workloads,
        first: &first,
        sim: sim.as_ref(),
        colocated: &colocated,
        default: &default,
        repeats,
        host_caches_kept,
    })
}

struct Report<'a> {
    quick: bool,
    runs: Vec<Run>,
    larges: Vec<Large>,
    notes: Vec<String>,
    workloads: &'a [Workload],
    first: &'a Workload,
    sim: Option<&'a SimParams>,
    colocated: &'a str,
    default: &'a str,
    repeats: usize,
    host_caches_kept: bool,
}

fn opt(x: Option<f64>) -> String {
    x.map(f2).unwrap_or_else(|| "-".into())
}

fn report(r: Report<'_>) -> Result<Outcome, String> {
    let Report { quick, runs, larges, mut notes, workloads, first, sim, colocated, default, repeats, host_caches_kept } =
        r;
    let find =
        |pool: &str, sys: &str, w: &str| runs.iter().find(|r| r.pool == pool && r.system == sys && r.workload.key == w);
    let large_of = |pool: &str, sys: &str| larges.iter().find(|l| l.pool == pool && l.system == sys);
    let mut text = format!(
        "cffs: small files, caches emptied before each phase, sync included; layouts {colocated:?} (co-located) and {default:?} (default); {} repeat(s); {} cores, load average {}\n",
        repeats,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        crate::loadavg()
    );
    let head = ["system", "phase", "seconds", "files/s", "MB/s", "reads+writes", "disk requests, busy s"];
    let mut pools: Vec<&str> = Vec::new();
    for r in &runs {
        if !pools.contains(&r.pool) {
            pools.push(r.pool);
        }
    }
    let mut rows_json = Vec::new();
    for pool in &pools {
        for w in workloads {
            let mut rows = Vec::new();
            for r in runs.iter().filter(|r| r.pool == *pool && r.workload.key == w.key) {
                let mut phases = serde_json::Map::new();
                for (k, p) in PHASES.iter().enumerate() {
                    let f = r.figures(k);
                    rows.push(vec![
                        r.system.clone(),
                        p.to_string(),
                        format!("{:.3}", f.seconds),
                        f0(f.files_per_s),
                        f2(f.mb_per_s),
                        match (f.reads, f.writes) {
                            (Some(a), Some(b)) => format!("{a}+{b}"),
                            _ => "-".into(),
                        },
                        match (f.disk_requests, f.disk_busy_s) {
                            (Some(n), Some(b)) => format!("{n}, {b:.2}"),
                            _ => "-".into(),
                        },
                    ]);
                    let samples: Vec<Value> = r.samples[k]
                        .iter()
                        .map(|s| {
                            let disk = s.disk.map(|d| {
                                json!({"requests": d.requests, "media": d.media, "stream_hits": d.stream_hits,
                                       "cache_hits": d.cache_hits, "busy_s": d.busy_ns as f64 / 1e9})
                            });
                            json!({"seconds": s.seconds, "reads": s.requests.map(|q| q.0),
                                   "writes": s.requests.map(|q| q.1), "disk": disk})
                        })
                        .collect();
                    phases.insert(
                        p.to_string(),
                        json!({"seconds": f.seconds, "files_per_s": f.files_per_s, "mb_per_s": f.mb_per_s,
                               "reads": f.reads, "writes": f.writes,
                               "requests": f.reads.zip(f.writes).map(|(a, b)| a + b),
                               "disk_requests": f.disk_requests, "disk_busy_s": f.disk_busy_s, "samples": samples}),
                    );
                }
                rows_json.push(json!({"pool": r.pool, "workload": r.workload.key, "system": r.system,
                    "layout": r.layout, "layout_seen": r.layout_seen, "phases": phases}));
            }
            if rows.is_empty() {
                continue;
            }
            if w.key == "cffs" && w.files == 1000 && w.size == 4096 {
                for (name, ph) in CFFS_TABLE {
                    for (k, p) in PHASES.iter().enumerate() {
                        let (s, rd, wr, fps) = ph[k];
                        rows.push(vec![
                            format!("(published) {name}"),
                            p.to_string(),
                            format!("{s:.2}"),
                            format!("{fps:.0}"),
                            f2(fps * 4096.0 / 1e6),
                            format!("{rd}+{wr}"),
                            "-".into(),
                        ]);
                    }
                }
            }
            text.push_str(&format!(
                "\n{pool}: {} ({} files of {} bytes in {} directories)\n",
                w.title, w.files, w.size, w.dirs
            ));
            text.push_str(&table(&head, &rows));
        }
    }
    // The large file.
    let mut lrows = Vec::new();
    for l in &larges {
        lrows.push(vec![
            l.pool.to_string(),
            l.system.clone(),
            (l.bytes >> 20).to_string(),
            format!("{:.3}", l.read_seconds),
            f2(l.mb_per_s()),
            l.requests.map(|q| format!("{}+{}", q.0, q.1)).unwrap_or_else(|| "-".into()),
        ]);
    }
    text.push_str("\nlarge file, read with caches emptied\n");
    text.push_str(&table(&["pool", "system", "MiB", "seconds", "MB/s", "reads+writes"], &lrows));
    // Ratios.
    let fraction = |pool: &str| -> Option<f64> {
        let small = find(pool, "native-colocated", first.key)?.figures(1).mb_per_s;
        Some(small / large_of(pool, "native-colocated")?.mb_per_s())
    };
    let mut by_pool = serde_json::Map::new();
    for pool in &pools {
        if let Some(f) = fraction(pool) {
            by_pool.insert(pool.to_string(), json!(f));
        }
    }
    // The disk's figure where measured: C-FFS's is a disk's.
    let (frac_pool, small_read_fraction) = match (fraction("sim-hdd"), fraction("image-file")) {
        (Some(f), _) => (Some("sim-hdd"), Some(f)),
        (None, Some(f)) => (Some("image-file"), Some(f)),
        _ => (None, None),
    };
    let rate = |pool: &str, sys: &str, w: &str, k: usize| find(pool, sys, w).map(|r| r.figures(k).files_per_s);
    let hdd_ratio = |k: usize| -> Option<f64> {
        Some(rate("sim-hdd", "native-colocated", first.key, k)? / rate("sim-hdd", "native-default", first.key, k)?)
    };
    let hdd_colocated_over_default = hdd_ratio(1);
    let hdd_interleaved = (|| {
        Some(
            rate("sim-hdd", "native-colocated", "cffs-interleaved", 1)?
                / rate("sim-hdd", "native-default", "cffs-interleaved", 1)?,
        )
    })();
    let mut hdd_by_phase = serde_json::Map::new();
    for (k, p) in PHASES.iter().enumerate() {
        if let Some(x) = hdd_ratio(k) {
            hdd_by_phase.insert(p.to_string(), json!(x));
        }
    }
    let mut vs_ext4 = serde_json::Map::new();
    let mut vrows = Vec::new();
    for w in workloads {
        let mut m = serde_json::Map::new();
        for (label, sys) in [("colocated", "mount-colocated"), ("default", "mount-default")] {
            let ratio = |k: usize| Some(rate("image-file", sys, w.key, k)? / rate("image-file", "ext4", w.key, k)?);
            let (read, create) = (ratio(1), ratio(0));
            let xfs = |k: usize| Some(rate("image-file", sys, w.key, k)? / rate("image-file", "xfs", w.key, k)?);
            if read.is_some() || create.is_some() {
                m.insert(
                    label.into(),
                    json!({"read": read, "create": create, "read_over_xfs": xfs(1), "create_over_xfs": xfs(0)}),
                );
                vrows.push(vec![w.key.to_string(), sys.to_string(), opt(create), opt(read), opt(xfs(0)), opt(xfs(1))]);
            }
        }
        if !m.is_empty() {
            vs_ext4.insert(w.key.into(), Value::Object(m));
        }
    }
    text.push('\n');
    let fr = |f: Option<f64>| f.map(|x| format!("{:.0}%", x * 100.0)).unwrap_or_else(|| "-".into());
    text.push_str(&format!(
        "small-file read bandwidth over large-file read bandwidth (native, co-located, {}): {} on {} (C-FFS: {:.0}%)\n",
        first.key,
        fr(small_read_fraction),
        frac_pool.unwrap_or("-"),
        CFFS_SMALL_READ_FRACTION * 100.0
    ));
    for (pool, f) in &by_pool {
        text.push_str(&format!("  {pool}: {}\n", fr(f.as_f64())));
    }
    if let Some(x) = hdd_colocated_over_default {
        text.push_str(&format!(
            "simulated HDD, {} read: co-located {} files/s, default {} files/s: {:.2}x (C-FFS with/without grouping: 680/629 = {:.2}x)\n",
            first.key,
            f0(rate("sim-hdd", "native-colocated", first.key, 1).unwrap_or(0.0)),
            f0(rate("sim-hdd", "native-default", first.key, 1).unwrap_or(0.0)),
            x,
            680.0 / 629.0
        ));
    }
    if let Some(x) = hdd_interleaved {
        text.push_str(&format!(
            "simulated HDD, cffs-interleaved read: co-located {} files/s, default {} files/s: {:.2}x\n",
            f0(rate("sim-hdd", "native-colocated", "cffs-interleaved", 1).unwrap_or(0.0)),
            f0(rate("sim-hdd", "native-default", "cffs-interleaved", 1).unwrap_or(0.0)),
            x
        ));
    }
    if !vrows.is_empty() {
        text.push_str("\nthe mount against the kernel file systems (files/s ratios, image files)\n");
        text.push_str(&table(
            &["workload", "system", "create / ext4", "read / ext4", "create / xfs", "read / xfs"],
            &vrows,
        ));
    }
    // Embedded inodes, at best: the read phase without its inode loads.
    let mut irows = Vec::new();
    let mut inodes_json = Vec::new();
    for r in &runs {
        let Some(l) = r.loaded_figures() else { continue };
        let f = r.figures(1);
        let share = 1.0 - l.seconds / f.seconds.max(1e-9);
        let reqs = |x: &Figures| x.reads.map(|n| n.to_string()).unwrap_or_else(|| "-".into());
        irows.push(vec![
            r.pool.to_string(),
            r.system.clone(),
            r.workload.key.to_string(),
            format!("{:.3}", f.seconds),
            format!("{:.3}", l.seconds),
            format!("{:.0}%", share * 100.0),
            reqs(&f),
            reqs(&l),
        ]);
        inodes_json.push(json!({"pool": r.pool, "system": r.system, "workload": r.workload.key,
            "read_s": f.seconds, "read_inodes_loaded_s": l.seconds, "inode_share": share,
            "reads": f.reads, "reads_inodes_loaded": l.reads}));
    }
    if !irows.is_empty() {
        text.push_str("\nembedded inodes, at best: the read phase again with every inode loaded first (untimed)\n");
        text.push_str(&table(
            &["pool", "system", "workload", "read s", "inodes loaded s", "inode share", "reads", "reads then"],
            &irows,
        ));
    }
    for r in runs.iter().filter(|r| r.layout.is_some()) {
        if let (Some(want), Some(seen)) = (&r.layout, &r.layout_seen) {
            let head = want.split(['(', '@']).next().unwrap_or(want);
            if !seen.contains(head) {
                notes.push(format!(
                    "{} {} {}: files got layout {seen:?}, not {want:?}",
                    r.pool, r.system, r.workload.key
                ));
            }
        }
    }
    for n in &notes {
        text.push_str(n);
        text.push('\n');
    }
    let mut line = String::from("cffs:");
    if let Some(x) = hdd_colocated_over_default {
        line.push_str(&format!(" simulated HDD read co-located/default {x:.2}x;"));
    }
    if let Some(x) = hdd_interleaved {
        line.push_str(&format!(" the same, files made round robin {x:.2}x;"));
    }
    if let Some(f) = small_read_fraction {
        line.push_str(&format!(" small-file read fraction {} ({}; C-FFS 90%);", fr(Some(f)), frac_pool.unwrap_or("-")));
    }
    if let Some(Value::Object(m)) = vs_ext4.get(first.key) {
        if let Some(c) = m.get("colocated") {
            line.push_str(&format!(
                " mount co-located / ext4: read {}, create {};",
                opt(c["read"].as_f64()),
                opt(c["create"].as_f64())
            ));
        }
    }
    line.push_str(&format!(" {} runs, every file read back checked", runs.len()));

    let published: Vec<Value> = CFFS_TABLE
        .iter()
        .map(|(name, ph)| {
            let mut m = serde_json::Map::new();
            for (k, p) in PHASES.iter().enumerate() {
                let (s, rd, wr, fps) = ph[k];
                m.insert(p.to_string(), json!({"seconds": s, "reads": rd, "writes": wr, "files_per_s": fps}));
            }
            json!({"system": name, "phases": m})
        })
        .collect();
    let data = json!({
        "params": {
            "workloads": workloads.iter().map(Workload::json).collect::<Vec<_>>(),
            "colocated_layout": colocated, "default_layout": default,
            "sim": sim.map(|p| p.to_string()), "repeats": repeats,
            "large_bytes": larges.iter().map(|l| json!({"pool": l.pool, "bytes": l.bytes})).collect::<Vec<_>>(),
            "host_caches_dropped": !host_caches_kept, "quick": quick,
            "mount_options": std::env::var("CFFS_MOUNT_OPTIONS").unwrap_or_default(),
            "mb": "10^6 bytes of file data",
        },
        "small_read_fraction": small_read_fraction,
        "small_read_fraction_pool": frac_pool,
        "small_read_fraction_by_pool": by_pool,
        "hdd_colocated_over_default": hdd_colocated_over_default,
        "hdd_colocated_over_default_by_phase": hdd_by_phase,
        "hdd_colocated_over_default_interleaved": hdd_interleaved,
        "embedded_inodes_at_best": inodes_json,
        "mount_over_ext4": vs_ext4,
        "rows": rows_json,
        "large": larges.iter().map(|l| json!({"pool": l.pool, "system": l.system, "bytes": l.bytes,
            "read_seconds": l.read_seconds, "read_mb_per_s": l.mb_per_s(),
            "reads": l.requests.map(|q| q.0), "writes": l.requests.map(|q| q.1)})).collect::<Vec<_>>(),
        "cffs_table_4_2": published,
        "notes": notes,
    });
    // The plot: each phase's rate with and without co-location on the
    // simulated disk (C-FFS's figures as ticks), else natively on image files.
    let pool = if pools.contains(&"sim-hdd") { "sim-hdd" } else { "image-file" };
    let mut items = Vec::new();
    for (k, p) in PHASES.iter().enumerate() {
        for (sys, short, refk) in [("native-default", "def.", 1), ("native-colocated", "col.", 2)] {
            if let Some(x) = rate(pool, sys, first.key, k) {
                let paper = (pool == "sim-hdd" && first.key == "cffs").then(|| CFFS_TABLE[refk].1[k].3);
                items.push((format!("{p} {short}"), x, paper));
            }
        }
    }
    let title = if pool == "sim-hdd" {
        "Small files on a simulated HDD, default (def.) and co-located (col.); ticks: C-FFS Table 4.2"
    } else {
        "Small files on image files, native, default (def.) and co-located (col.)"
    };
    Ok(Outcome {
        table: text,
        line,
        data,
        plot: Box::new(move |path| plot::bars(path, title, "files per second", &items)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_go_directory_by_directory() {
        let w = Workload { key: "t", title: "", files: 1000, dirs: 10, size: 4096, interleaved: false };
        assert_eq!(w.file(0), "t/d0/f0");
        assert_eq!(w.file(99), "t/d0/f99");
        assert_eq!(w.file(100), "t/d1/f100");
        assert_eq!(w.file(999), "t/d9/f999");
        let odd = Workload { key: "t", title: "", files: 10, dirs: 3, size: 1, interleaved: false };
        assert!((0..10).all(|i| odd.file(i).starts_with("t/d") && odd.file(i)[3..4].parse::<u64>().unwrap_or(9) < 3));
    }

    #[test]
    fn interleaved_files_are_made_one_directory_after_another_in_turn() {
        let w = Workload { key: "t", title: "", files: 10, dirs: 3, size: 1, interleaved: true };
        let order = w.create_order();
        // per_dir 4: d0 = 0..4, d1 = 4..8, d2 = 8..10.
        assert_eq!(order, vec![0, 4, 8, 1, 5, 9, 2, 6, 3, 7]);
        let flat = Workload { interleaved: false, ..w };
        assert_eq!(flat.create_order(), (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn contents_differ_between_files_and_generations() {
        let w = Workload { key: "t", title: "", files: 3, dirs: 1, size: 1000, interleaved: false };
        let (a, b) = (contents(&w, 1), contents(&w, 2));
        assert_eq!(a.len(), 3000);
        assert_ne!(a[..1000], a[1000..2000]);
        assert_ne!(a[..1000], b[..1000]);
        assert_eq!(a, contents(&w, 1));
    }

    /// A system in memory; `corrupt` changes the bytes of one file read.
    #[derive(Default)]
    struct Mem {
        files: std::collections::BTreeMap<String, Vec<u8>>,
        dirs: std::collections::BTreeSet<String>,
        corrupt: Option<String>,
        colds: usize,
        syncs: usize,
    }

    impl System for Mem {
        fn name(&self) -> &str {
            "mem"
        }
        fn mkdir(&mut self, dir: &str) -> Result<(), String> {
            self.dirs.insert(dir.into());
            Ok(())
        }
        fn cold(&mut self) -> Result<(), String> {
            self.colds += 1;
            Ok(())
        }
        fn create(&mut self, path: &str, data: &[u8]) -> Result<(), String> {
            self.files.insert(path.into(), data.to_vec());
            Ok(())
        }
        fn read(&mut self, path: &str, buf: &mut Vec<u8>) -> Result<(), String> {
            *buf = self.files.get(path).cloned().ok_or_else(|| format!("{path}: no such file"))?;
            if self.corrupt.as_deref() == Some(path) {
                buf[0] ^= 1;
            }
            Ok(())
        }
        fn overwrite(&mut self, path: &str, data: &[u8]) -> Result<(), String> {
            let f = self.files.get_mut(path).ok_or_else(|| format!("{path}: no such file"))?;
            f[..data.len()].copy_from_slice(data);
            Ok(())
        }
        fn remove(&mut self, path: &str) -> Result<(), String> {
            self.files.remove(path).map(|_| ()).ok_or_else(|| format!("{path}: no such file"))
        }
        fn sync(&mut self) -> Result<(), String> {
            self.syncs += 1;
            Ok(())
        }
        fn requests(&self) -> Result<Option<(u64, u64)>, String> {
            Ok(None)
        }
        fn entries(&mut self, dir: &str) -> Result<usize, String> {
            Ok(self.files.keys().filter(|k| k.starts_with(&format!("{dir}/"))).count())
        }
        fn layout_of(&mut self, _path: &str) -> Result<Option<String>, String> {
            Ok(Some("mem".into()))
        }
        fn close(self: Box<Self>) -> Result<(), String> {
            Ok(())
        }
    }

    #[test]
    fn every_phase_checks_what_it_reads_and_leaves() {
        let w = Workload { key: "t", title: "", files: 30, dirs: 3, size: 100, interleaved: false };
        let gens = [contents(&w, 1), contents(&w, 2)];
        let pb = ProgressBar::hidden();
        let mut m = Mem::default();
        let mut seen = None;
        let (s, loaded) = phases(&mut m, &w, &gens, &pb, &mut seen).unwrap();
        assert_eq!(s.len(), 4);
        // It cannot load inodes alone: no extra read.
        assert!(loaded.is_none());
        assert!(m.files.is_empty());
        // Each phase starts cold and ends with a sync; the overwrite is read
        // back cold, and the caches are emptied for the read with inodes loaded.
        assert_eq!((m.colds, m.syncs), (6, 4));
        assert_eq!(seen.as_deref(), Some("mem"));
        // A file read back wrong fails the read phase.
        let mut bad = Mem { corrupt: Some(w.file(17)), ..Mem::default() };
        let e = phases(&mut bad, &w, &gens, &pb, &mut None).unwrap_err();
        assert!(e.contains("f17"), "{e}");
    }

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
    }
}
