//! `meta-scale`: meta-data at scale. Creates FILES empty files (10 million
//! by default; `--files N`), all in one directory and spread 1,000 to a
//! directory, and at 100,000 files and then every tenth of FILES measures:
//! - the create rate of the files made since the last point, timed
//!   through the flush that ends the phase (a create's deferred work, the
//!   checkpoint or journal commit that makes it durable, is part of its
//!   cost: a rate that stopped the clock before the flush would leave out
//!   up to a write buffer of work, a tenth of a 100,000-file phase but a
//!   hundredth of a million-file one);
//! - stat of 10,000 random existing files, lookups of 10,000 names that do
//!   not exist (the directory index searched), unlinks of 10,000 random
//!   files (made again afterwards, untimed, so the count stays exact);
//! - resident memory (the process serves the pool itself, natively and
//!   through the mount);
//! - bytes written per create (the create phase between two flushes) and
//!   per random change (the sampled unlinks and the creates that put the
//!   files back).
//!
//! After the last point: the time to close (unmount), to open again after
//! that clean close, and to open after the process that had it open was
//! killed with SIGKILL while creating (the journal replayed).
//!
//! Systems, measured in the same run over the same host disk: Hurricane's
//! native API, Hurricane through its FUSE mount (std::fs calls), and ext4
//! and XFS on loop devices (std::fs calls). Bytes written are what reached
//! each system's devices between two flushes: Hurricane's own per-device
//! counters (the native API's, the mount's statistics), the sectors the
//! peers' loop devices wrote. A flush is a checkpoint natively, `syncfs`
//! for the peers, and an fsync of the root directory through the mount
//! (which commits the journal but cannot ask for a checkpoint: the mount's
//! per-phase bytes leave part of a phase's checkpoint to the next phase).
//!
//! `META_SCALE_SYSTEMS` and `META_SCALE_SHAPES` narrow a run;
//! `META_SCALE_META_CACHE=SIZE` gives the native runs another store cache.

use super::{f0, Rng};
use crate::{plot, table, Outcome};
use hurricane::{Creds, FormatOptions, Fs, Options};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Files a directory holds in the spread shape.
const PER_DIR: u64 = 1000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    OneDir,
    Spread,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::OneDir => "one-dir",
            Shape::Spread => "spread",
        }
    }
    /// The directory (relative) and name of file `i`.
    fn place(self, i: u64) -> (String, String) {
        match self {
            Shape::OneDir => ("m".into(), format!("f{i}")),
            Shape::Spread => (format!("s/d{}", i / PER_DIR), format!("f{i}")),
        }
    }
}

/// A system under test: namespace operations by (directory, name).
trait System {
    fn mkdir(&mut self, dir: &str) -> Result<(), String>;
    fn create(&mut self, dir: &str, name: &str) -> Result<(), String>;
    /// The size of an existing file (every file here is empty).
    fn stat(&mut self, dir: &str, name: &str) -> Result<u64, String>;
    /// True if `name` exists.
    fn exists(&mut self, dir: &str, name: &str) -> Result<bool, String>;
    fn unlink(&mut self, dir: &str, name: &str) -> Result<(), String>;
    /// Makes what was done durable and written where it lives.
    fn flush(&mut self) -> Result<(), String>;
    /// Bytes written to the system's devices so far.
    fn written(&mut self) -> Result<u64, String>;
    /// Resident memory of the process serving it (None: the kernel's).
    fn rss(&self) -> Option<u64>;
}

fn proc_status(key: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let l = s.lines().find(|l| l.starts_with(key))?;
    l.split_whitespace().nth(1)?.parse::<u64>().ok().map(|k| k * 1024)
}

/// Hurricane's native API: inode numbers of directories kept, so an
/// operation is one lookup in its parent, as a server using the library
/// would do.
struct Native {
    fs: Fs,
    dirs: std::collections::HashMap<String, u64>,
    cred: Creds,
}

impl Native {
    fn dir(&self, d: &str) -> Result<u64, String> {
        self.dirs.get(d).copied().ok_or_else(|| format!("directory {d} not made"))
    }
}

impl System for Native {
    fn mkdir(&mut self, dir: &str) -> Result<(), String> {
        let (parent, name) = match dir.rsplit_once('/') {
            Some((p, n)) => (self.dir(p)?, n),
            None => (hurricane::namespace::ROOT, dir),
        };
        let a = self.fs.mkdir(&self.cred, parent, name.as_bytes(), 0o755).map_err(crate::err)?;
        self.dirs.insert(dir.to_string(), a.ino);
        Ok(())
    }
    fn create(&mut self, dir: &str, name: &str) -> Result<(), String> {
        let d = self.dir(dir)?;
        self.fs.mknod(&self.cred, d, name.as_bytes(), libc::S_IFREG | 0o644, 0, None, None).map_err(crate::err)?;
        Ok(())
    }
    fn stat(&mut self, dir: &str, name: &str) -> Result<u64, String> {
        let d = self.dir(dir)?;
        Ok(self.fs.lookup(&self.cred, d, name.as_bytes()).map_err(|e| format!("{dir}/{name}: {e}"))?.size)
    }
    fn exists(&mut self, dir: &str, name: &str) -> Result<bool, String> {
        let d = self.dir(dir)?;
        match self.fs.lookup(&self.cred, d, name.as_bytes()) {
            Ok(_) => Ok(true),
            Err(hurricane::Error::NotFound(_)) => Ok(false),
            Err(e) => Err(format!("{dir}/{name}: {e}")),
        }
    }
    fn unlink(&mut self, dir: &str, name: &str) -> Result<(), String> {
        let d = self.dir(dir)?;
        self.fs.unlink(&self.cred, d, name.as_bytes()).map_err(|e| format!("{dir}/{name}: {e}"))
    }
    fn flush(&mut self) -> Result<(), String> {
        self.fs.checkpoint().map_err(crate::err)
    }
    fn written(&mut self) -> Result<u64, String> {
        Ok(self.fs.device_stats().iter().map(|(_, s)| s.write_bytes).sum())
    }
    fn rss(&self) -> Option<u64> {
        proc_status("VmRSS:")
    }
}

/// A mounted file system through std::fs: Hurricane's mount (served by
/// this process) or a kernel file system on a loop device.
struct Posix {
    root: PathBuf,
    /// The kernel file system's loop device, whose writes count (None:
    /// Hurricane's mount, whose own counters do).
    loop_fs: Option<crate::mounts::LoopFs>,
}

impl Posix {
    fn path(&self, dir: &str, name: &str) -> PathBuf {
        self.root.join(dir).join(name)
    }
}

impl System for Posix {
    fn mkdir(&mut self, dir: &str) -> Result<(), String> {
        std::fs::create_dir(self.root.join(dir)).map_err(|e| format!("mkdir {dir}: {e}"))
    }
    fn create(&mut self, dir: &str, name: &str) -> Result<(), String> {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.path(dir, name))
            .map(drop)
            .map_err(|e| format!("create {dir}/{name}: {e}"))
    }
    fn stat(&mut self, dir: &str, name: &str) -> Result<u64, String> {
        std::fs::metadata(self.path(dir, name)).map(|m| m.len()).map_err(|e| format!("stat {dir}/{name}: {e}"))
    }
    fn exists(&mut self, dir: &str, name: &str) -> Result<bool, String> {
        match std::fs::symlink_metadata(self.path(dir, name)) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(format!("stat {dir}/{name}: {e}")),
        }
    }
    fn unlink(&mut self, dir: &str, name: &str) -> Result<(), String> {
        std::fs::remove_file(self.path(dir, name)).map_err(|e| format!("unlink {dir}/{name}: {e}"))
    }
    fn flush(&mut self) -> Result<(), String> {
        let f = std::fs::File::open(&self.root).map_err(crate::err)?;
        match &self.loop_fs {
            // The mount commits its journal on an fsync of a directory.
            None => f.sync_all().map_err(|e| format!("fsync of the mount's root: {e}")),
            // SAFETY: syncfs on a descriptor this function owns.
            Some(_) => match unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) } {
                0 => Ok(()),
                _ => Err(format!("syncfs: {}", std::io::Error::last_os_error())),
            },
        }
    }
    fn written(&mut self) -> Result<u64, String> {
        match &self.loop_fs {
            None => {
                let r = hurricane_fuse::mountinfo::read_stats(&self.root)?;
                Ok(r.devices.iter().map(|d| d.write_bytes).sum())
            }
            Some(l) => l.written(),
        }
    }
    fn rss(&self) -> Option<u64> {
        self.loop_fs.is_none().then(|| proc_status("VmRSS:")).flatten()
    }
}

#[derive(Clone, Debug)]
struct Point {
    files: u64,
    create: f64,
    stat: f64,
    lookup: f64,
    unlink: f64,
    rss: Option<u64>,
    bytes_per_create: f64,
    bytes_per_random_change: f64,
}

/// What a point's table cells are.
const POINT_HEAD: [&str; 8] =
    ["files", "create/s", "stat/s", "lookup/s", "unlink/s", "B/create", "B/rnd change", "RSS MiB"];

impl Point {
    fn cells(&self) -> Vec<String> {
        vec![
            self.files.to_string(),
            f0(self.create),
            f0(self.stat),
            f0(self.lookup),
            f0(self.unlink),
            f0(self.bytes_per_create),
            f0(self.bytes_per_random_change),
            self.rss.map(|b| (b >> 20).to_string()).unwrap_or_else(|| "-".into()),
        ]
    }
}

struct Run {
    system: String,
    shape: Shape,
    points: Vec<Point>,
    peak_rss: Option<u64>,
    close_s: Option<f64>,
    open_s_clean: Option<f64>,
    open_s_killed: Option<f64>,
    note: String,
}

fn per_s(n: u64, t: Instant) -> f64 {
    n as f64 / t.elapsed().as_secs_f64().max(1e-9)
}

/// The points at which a run measures: 100,000 files (or a tenth of
/// `files` if that is less), then every tenth of `files`.
fn checkpoints(files: u64) -> Vec<u64> {
    let tenth = (files / 10).max(1);
    let mut v = vec![tenth.min(100_000)];
    let mut n = tenth;
    while n <= files {
        if n > v[0] {
            v.push(n);
        }
        n += tenth;
    }
    if *v.last().unwrap_or(&0) < files {
        v.push(files);
    }
    v
}

/// Creates `files` files in `shape` on `sys`, measuring at each point.
fn drive(sys: &mut dyn System, shape: Shape, files: u64, sample: u64) -> Result<Vec<Point>, String> {
    // The peak resident size (VmHWM) starts again from here.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let top = match shape {
        Shape::OneDir => "m",
        Shape::Spread => "s",
    };
    sys.mkdir(top)?;
    let mut made = 0u64;
    let mut rng = Rng(0x4855_5252_4943_414e);
    let mut points = Vec::new();
    for target in checkpoints(files) {
        sys.flush()?;
        let w0 = sys.written()?;
        let t = Instant::now();
        for i in made..target {
            if shape == Shape::Spread && i % PER_DIR == 0 {
                sys.mkdir(&shape.place(i).0)?;
            }
            let (d, n) = shape.place(i);
            sys.create(&d, &n)?;
        }
        sys.flush()?;
        let create = per_s(target - made, t);
        let w1 = sys.written()?;
        let bytes_per_create = w1.saturating_sub(w0) as f64 / (target - made) as f64;
        made = target;
        let k = sample.min(made);
        let picks: Vec<u64> = (0..k).map(|_| rng.below(made)).collect();
        let t = Instant::now();
        for &i in &picks {
            let (d, n) = shape.place(i);
            if sys.stat(&d, &n)? != 0 {
                return Err(format!("{d}/{n} is not empty"));
            }
        }
        let stat = per_s(k, t);
        let t = Instant::now();
        for &i in &picks {
            let (d, _) = shape.place(i);
            if sys.exists(&d, &format!("x{i}"))? {
                return Err(format!("{d}/x{i} exists but was never made"));
            }
        }
        let lookup = per_s(k, t);
        // Distinct files to unlink, then made again.
        let mut gone: Vec<u64> = picks.clone();
        gone.sort_unstable();
        gone.dedup();
        let t = Instant::now();
        for &i in &gone {
            let (d, n) = shape.place(i);
            sys.unlink(&d, &n)?;
        }
        let unlink = per_s(gone.len() as u64, t);
        for &i in &gone {
            let (d, n) = shape.place(i);
            sys.create(&d, &n)?;
        }
        sys.flush()?;
        let bytes_per_random_change = sys.written()?.saturating_sub(w1) as f64 / (2 * gone.len()).max(1) as f64;
        let p = Point {
            files: made,
            create,
            stat,
            lookup,
            unlink,
            rss: sys.rss(),
            bytes_per_create,
            bytes_per_random_change,
        };
        let line: Vec<String> = POINT_HEAD.iter().zip(p.cells()).map(|(h, c)| format!("{h} {c}")).collect();
        eprintln!("  {}", line.join(", "));
        points.push(p);
    }
    Ok(points)
}

/// A scratch directory on the host disk (not a memory file system), so
/// every system writes to the same disk.
fn scratch() -> Result<tempfile::TempDir, String> {
    let base = std::env::var_os("HURRICANE_BENCH_DIR").map(PathBuf::from).unwrap_or_else(|| "/var/tmp".into());
    tempfile::Builder::new().prefix("meta-scale.").tempdir_in(&base).map_err(|e| format!("{}: {e}", base.display()))
}

/// Device size for pools and images: room for `files` with margin (sparse).
fn image_size(files: u64) -> u64 {
    (files * 8192).clamp(4 << 30, 512 << 30)
}

/// The variable that sizes the meta-data store's cache of the native runs
/// (`Options::meta_cache_bytes`; a size such as `512M`), so the runs can be
/// made with another cache than the default. The checkpoints are sized by
/// it too (the changed inodes whose pages fit its write buffer).
const META_CACHE: &str = "META_SCALE_META_CACHE";

/// The options every native open of this experiment uses.
fn native_options() -> Result<Options, String> {
    let mut o = Options::default();
    if let Ok(v) = std::env::var(META_CACHE) {
        let bytes = hurricane::units::parse_size(&v).map_err(|e| format!("{META_CACHE}={v}: {e}"))?;
        o.meta_cache_bytes = usize::try_from(bytes).map_err(|_| format!("{META_CACHE}={v}: too large"))?;
    }
    Ok(o)
}

fn native(shape: Shape, files: u64, sample: u64, quick: bool) -> Result<Run, String> {
    let tmp = scratch()?;
    let pool = tmp.path().join("pool");
    Fs::mkfs_dir(&pool, 2, image_size(files), &FormatOptions::default()).map_err(crate::err)?;
    let fs = Fs::open_dir(&pool, native_options()?).map_err(crate::err)?;
    let mut sys = Native { fs, dirs: Default::default(), cred: Creds::root() };
    let points = drive(&mut sys, shape, files, sample)?;
    let peak_rss = proc_status("VmHWM:");
    let t = Instant::now();
    sys.fs.close().map_err(crate::err)?;
    drop(sys);
    let close_s = t.elapsed().as_secs_f64();
    let (d, n) = shape.place(files - 1);
    let path = format!("/{d}/{n}");
    let t = Instant::now();
    let fs = Fs::open_dir(&pool, native_options()?).map_err(crate::err)?;
    fs.stat(&path).map_err(|e| format!("{path} after reopening: {e}"))?;
    let open_s_clean = t.elapsed().as_secs_f64();
    fs.close().map_err(crate::err)?;
    drop(fs);
    // The killed process is this command run again: in full runs only (a
    // test binary run again would run its tests).
    let (open_s_killed, note) = match quick {
        true => (None, "open after kill -9: measured in full runs".to_string()),
        false => match killed_open(&pool, shape, files) {
            Ok(s) => (Some(s), String::new()),
            Err(e) => (None, format!("open after kill -9 not measured: {e}")),
        },
    };
    Ok(Run {
        system: "hurricane-native".into(),
        shape,
        points,
        peak_rss,
        close_s: Some(close_s),
        open_s_clean: Some(open_s_clean),
        open_s_killed,
        note,
    })
}

/// The environment variable that makes a run of this experiment the child
/// of [`killed_open`]: `POOL:SHAPE:FILES:EXTRA`.
const CHILD: &str = "HURRICANE_META_SCALE_CHILD";

/// In the child: opens the pool, creates `extra` files, says so on stdout
/// and goes on creating until it is killed.
fn child(spec: &str) -> Result<(), String> {
    let mut it = spec.rsplitn(4, ':');
    let (extra, files, shape, pool) = (it.next(), it.next(), it.next(), it.next());
    let bad = || format!("{CHILD}={spec}: not POOL:SHAPE:FILES:EXTRA");
    let extra: u64 = extra.and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    let files: u64 = files.and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    let shape = if shape == Some("spread") { Shape::Spread } else { Shape::OneDir };
    let fs = Fs::open_dir(Path::new(pool.ok_or_else(bad)?), native_options()?).map_err(crate::err)?;
    let cred = Creds::root();
    let (d, _) = shape.place(files - 1);
    let dir = fs.resolve(&format!("/{d}")).map_err(crate::err)?;
    for i in 0.. {
        fs.mknod(&cred, dir, format!("k{i}").as_bytes(), libc::S_IFREG | 0o644, 0, None, None).map_err(crate::err)?;
        if i + 1 == extra {
            use std::io::Write;
            let mut out = std::io::stdout();
            out.write_all(b"ready\n").and_then(|_| out.flush()).map_err(crate::err)?;
        }
    }
    Ok(())
}

/// Runs this same command again as a child that opens the pool and
/// creates files until it is killed with SIGKILL, then times the open that
/// replays its journal.
fn killed_open(pool: &Path, shape: Shape, files: u64) -> Result<f64, String> {
    use std::io::BufRead;
    let extra = (files / 10).clamp(1, 100_000);
    let exe = std::env::current_exe().map_err(crate::err)?;
    let mut c = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(CHILD, format!("{}:{}:{files}:{extra}", pool.display(), shape.name()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("starting the child: {e}"))?;
    let mut line = String::new();
    let got = c.stdout.take().map(|o| std::io::BufReader::new(o).read_line(&mut line));
    // Let it go on creating (and its committer commit) for a moment.
    std::thread::sleep(Duration::from_millis(1500));
    let _ = c.kill();
    let status = c.wait().map_err(crate::err)?;
    if !matches!(got, Some(Ok(_))) || line.trim() != "ready" {
        return Err(format!("the child did not get to create its files ({status})"));
    }
    let (d, n) = shape.place(files - 1);
    let t = Instant::now();
    let fs = Fs::open_dir(pool, native_options()?).map_err(crate::err)?;
    fs.stat(&format!("/{d}/{n}")).map_err(crate::err)?;
    let s = t.elapsed().as_secs_f64();
    fs.close().map_err(crate::err)?;
    Ok(s)
}

/// Hurricane through its mount, served by a thread of this process.
fn mounted(shape: Shape, files: u64, sample: u64) -> Result<Run, String> {
    let tmp = scratch()?;
    let pool = tmp.path().join("pool");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir_all(&mnt).map_err(crate::err)?;
    Fs::mkfs_dir(&pool, 2, image_size(files), &FormatOptions::default()).map_err(crate::err)?;
    let mut peak_rss = None;
    let (points, close_s) = crate::mounts::serve(&pool, &mnt, hurricane_fuse::MountOptions::default(), || {
        let mut sys = Posix { root: mnt.clone(), loop_fs: None };
        let p = drive(&mut sys, shape, files, sample);
        peak_rss = proc_status("VmHWM:");
        p
    })?;
    Ok(Run {
        system: "hurricane-mount".into(),
        shape,
        points,
        peak_rss,
        close_s: Some(close_s),
        open_s_clean: None,
        open_s_killed: None,
        note: String::new(),
    })
}

/// A kernel file system (`ext4` or `xfs`) on a loop device over an image
/// file in the scratch directory.
fn kernel(fstype: &str, shape: Shape, files: u64, sample: u64) -> Result<Run, String> {
    let tmp = scratch()?;
    let inodes = (files + files / 4 + 100_000).to_string();
    // ext4 gets inodes enough for every file (its default ratio runs out
    // first); XFS makes them as it goes.
    let args: &[&str] = if fstype == "ext4" { &["-N", &inodes] } else { &[] };
    let lfs = crate::mounts::LoopFs::make(
        fstype,
        &tmp.path().join(format!("{fstype}.img")),
        image_size(files),
        &tmp.path().join("mnt"),
        args,
    )?;
    let mut sys = Posix { root: lfs.mnt.clone(), loop_fs: Some(lfs) };
    let points = drive(&mut sys, shape, files, sample)?;
    let mut lfs = sys.loop_fs.take().ok_or("the loop device went away")?;
    let (close_s, open_s_clean) = lfs.remount()?;
    Ok(Run {
        system: fstype.into(),
        shape,
        points,
        peak_rss: None,
        close_s: Some(close_s),
        open_s_clean: Some(open_s_clean),
        open_s_killed: None,
        note: String::new(),
    })
}

/// The environment variable that makes a run of this experiment one
/// Hurricane run in a process of its own (`SYSTEM:SHAPE:FILES:SAMPLE`), so
/// the resident memory measured is that run's alone: it prints the run as
/// one JSON line after [`RUN_MARK`].
const RUN: &str = "HURRICANE_META_SCALE_RUN";
const RUN_MARK: &str = "meta-scale-run ";

fn run_json(r: &Run) -> Value {
    json!({
        "system": r.system, "shape": r.shape.name(), "close_s": r.close_s, "open_s_clean": r.open_s_clean,
        "open_s_killed": r.open_s_killed, "peak_rss_bytes": r.peak_rss, "note": r.note,
        "points": r.points.iter().map(point_json).collect::<Vec<_>>(),
    })
}

fn run_from(v: &Value) -> Option<Run> {
    let f = |p: &Value, k: &str| p[k].as_f64();
    let points = v["points"]
        .as_array()?
        .iter()
        .map(|p| {
            Some(Point {
                files: p["files"].as_u64()?,
                create: f(p, "create_per_s")?,
                stat: f(p, "stat_per_s")?,
                lookup: f(p, "lookup_per_s")?,
                unlink: f(p, "unlink_per_s")?,
                rss: p["rss_bytes"].as_u64(),
                bytes_per_create: f(p, "bytes_written_per_create")?,
                bytes_per_random_change: f(p, "bytes_written_per_random_change")?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Run {
        system: v["system"].as_str()?.to_string(),
        shape: if v["shape"] == "spread" { Shape::Spread } else { Shape::OneDir },
        points,
        peak_rss: v["peak_rss_bytes"].as_u64(),
        close_s: v["close_s"].as_f64(),
        open_s_clean: v["open_s_clean"].as_f64(),
        open_s_killed: v["open_s_killed"].as_f64(),
        note: v["note"].as_str().unwrap_or_default().to_string(),
    })
}

/// In the child: the one run `spec` names, printed.
fn one_run(spec: &str) -> Result<(), String> {
    let v: Vec<&str> = spec.split(':').collect();
    let [system, shape, files, sample] = v[..] else {
        return Err(format!("{RUN}={spec}: not SYSTEM:SHAPE:FILES:SAMPLE"));
    };
    let shape = if shape == "spread" { Shape::Spread } else { Shape::OneDir };
    let files: u64 = files.parse().map_err(|_| format!("{RUN}={spec}: bad FILES"))?;
    let sample: u64 = sample.parse().map_err(|_| format!("{RUN}={spec}: bad SAMPLE"))?;
    let r = match system {
        "native" => native(shape, files, sample, false)?,
        _ => mounted(shape, files, sample)?,
    };
    println!("{RUN_MARK}{}", run_json(&r));
    Ok(())
}

/// Runs a Hurricane run (`native` or `mount`) in a process of its own.
fn isolated(system: &str, shape: Shape, files: u64, sample: u64) -> Result<Run, String> {
    let exe = std::env::current_exe().map_err(crate::err)?;
    let out = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(RUN, format!("{system}:{}:{files}:{sample}", shape.name()))
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("starting the {system} run: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find_map(|l| l.strip_prefix(RUN_MARK));
    match line.and_then(|l| serde_json::from_str::<Value>(l).ok()).as_ref().and_then(run_from) {
        Some(r) => Ok(r),
        None => Err(format!("the {system} run ended without a result ({})", out.status)),
    }
}

fn point_json(p: &Point) -> Value {
    json!({"files": p.files, "create_per_s": p.create, "stat_per_s": p.stat, "lookup_per_s": p.lookup,
           "unlink_per_s": p.unlink, "rss_bytes": p.rss, "bytes_written_per_create": p.bytes_per_create,
           "bytes_written_per_random_change": p.bytes_per_random_change})
}

/// `files`: how many to create (None: 10 million, or 20,000 with `quick`).
pub fn run(quick: bool, files: Option<u64>) -> Result<Outcome, String> {
    // This command run again as a child of its own: the child's work, then exit.
    type Work = fn(&str) -> Result<(), String>;
    for (var, work) in [(CHILD, child as Work), (RUN, one_run as Work)] {
        if let Ok(spec) = std::env::var(var) {
            if let Err(e) = work(&spec) {
                eprintln!("meta-scale ({var}): {e}");
                std::process::exit(1);
            }
            std::process::exit(0);
        }
    }
    let files = files.unwrap_or(if quick { 20_000 } else { 10_000_000 }).max(10);
    let sample = if quick { 500 } else { 10_000 };
    // META_SCALE_SYSTEMS=native,mount,ext4,xfs and META_SCALE_SHAPES=one-dir,spread
    // narrow a run (the native one-directory run is always made).
    let pick = |var: &str, what: &str| std::env::var(var).map(|v| v.split(',').any(|s| s == what)).unwrap_or(true);
    let mut runs = Vec::new();
    let mut skipped = Vec::new();
    for shape in [Shape::OneDir, Shape::Spread] {
        if shape != Shape::OneDir && !pick("META_SCALE_SHAPES", shape.name()) {
            continue;
        }
        eprintln!("meta-scale: hurricane native, {}, {files} files", shape.name());
        if quick {
            // In this process (a test binary run again would run its tests).
            runs.push(native(shape, files, sample, quick)?);
            continue;
        }
        // Each Hurricane run in a process of its own: the memory it reports
        // is its own, not what earlier runs left with the allocator.
        runs.push(isolated("native", shape, files, sample)?);
        if pick("META_SCALE_SYSTEMS", "mount") {
            eprintln!("meta-scale: hurricane mount, {}, {files} files", shape.name());
            match isolated("mount", shape, files, sample) {
                Ok(r) => runs.push(r),
                Err(e) => skipped.push(format!("hurricane-mount {}: {e}", shape.name())),
            }
        }
        for fstype in ["ext4", "xfs"].into_iter().filter(|f| pick("META_SCALE_SYSTEMS", f)) {
            eprintln!("meta-scale: {fstype}, {}, {files} files", shape.name());
            match kernel(fstype, shape, files, sample) {
                Ok(r) => runs.push(r),
                Err(e) => skipped.push(format!("{fstype} {}: {e}", shape.name())),
            }
        }
    }
    let find = |sys: &str, shape: Shape| runs.iter().find(|r| r.system == sys && r.shape == shape);
    let mut rows = Vec::new();
    for r in &runs {
        for p in &r.points {
            let mut row = vec![r.system.clone(), r.shape.name().into()];
            row.extend(p.cells());
            rows.push(row);
        }
    }
    let mut opens = Vec::new();
    for r in &runs {
        let s = |x: Option<f64>| x.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into());
        opens.push(vec![
            r.system.clone(),
            r.shape.name().into(),
            s(r.close_s),
            s(r.open_s_clean),
            s(r.open_s_killed),
            r.peak_rss.map(|b| (b >> 20).to_string()).unwrap_or_else(|| "-".into()),
        ]);
    }
    let base = find("hurricane-native", Shape::OneDir).ok_or("no native run")?;
    let first = base.points.first().ok_or("no points")?;
    let last = base.points.last().ok_or("no points")?;
    // Bytes per create over the whole run (each phase weighted by its creates).
    let per_create = |r: &Run| {
        let (mut b, mut n, mut prev) = (0.0, 0.0, 0u64);
        for p in &r.points {
            b += p.bytes_per_create * (p.files - prev) as f64;
            n += (p.files - prev) as f64;
            prev = p.files;
        }
        b / n.max(1.0)
    };
    let ext4_bytes = find("ext4", Shape::OneDir).map(per_create);
    let caches = native_options()?.meta_cache_bytes as u64;
    let mut text = format!(
        "meta-scale: {files} empty files, samples of {sample}; {} cores, load average {}\n{}\n{}",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        crate::loadavg(),
        table(&[&["system", "shape"][..], &POINT_HEAD[..]].concat(), &rows),
        table(&["system", "shape", "close s", "open s (clean)", "open s (kill -9)", "peak RSS MiB"], &opens)
    );
    for s in &skipped {
        text.push_str(&format!("not measured: {s}\n"));
    }
    for r in runs.iter().filter(|r| !r.note.is_empty()) {
        text.push_str(&format!("{} {}: {}\n", r.system, r.shape.name(), r.note));
    }
    let line = format!(
        "meta-scale: {} files in one directory natively: create {}/s at {} files and {}/s at {} ({:.2}), open {:.2} s after a clean close{}, RSS {} MiB{}",
        files,
        f0(first.create),
        first.files,
        f0(last.create),
        last.files,
        last.create / first.create,
        base.open_s_clean.unwrap_or(0.0),
        base.open_s_killed.map(|s| format!(" and {s:.2} s after kill -9")).unwrap_or_default(),
        last.rss.unwrap_or(0) >> 20,
        ext4_bytes
            .map(|e| format!(", {:.0} bytes written per create ({:.2} of ext4's)", per_create(base), per_create(base) / e))
            .unwrap_or_default()
    );
    let data = json!({
        "files": files,
        "open_s_clean": base.open_s_clean,
        "open_s_killed": base.open_s_killed,
        "rss_bytes": last.rss,
        "peak_rss_bytes": base.peak_rss,
        "create_per_s_at_100k": first.create,
        "create_per_s_at_end": last.create,
        "bytes_written_per_create": per_create(base),
        "ext4_bytes_written_per_create": ext4_bytes,
        "configured_caches": {"inodes": Options::default().inode_cache, "meta_cache_bytes": caches},
        "params": {"sample": sample, "per_dir": PER_DIR, "skipped": skipped},
        "runs": runs.iter().map(run_json).collect::<Vec<_>>(),
    });
    let series: Vec<(String, Vec<(f64, f64)>)> = runs
        .iter()
        .map(|r| {
            (
                format!("{} {}", r.system, r.shape.name()),
                r.points.iter().map(|p| (p.files as f64 / 1e6, p.create)).collect(),
            )
        })
        .collect();
    Ok(Outcome {
        table: text,
        line,
        data,
        plot: plot::lines_later(
            "Creates per second as the file count grows",
            "million files",
            "creates per second",
            plot::Legend::UpperRight,
            series,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_start_at_100k_or_a_tenth_and_end_at_the_count() {
        assert_eq!(checkpoints(20_000), (1..=10).map(|i| i * 2_000).collect::<Vec<_>>());
        let big = checkpoints(10_000_000);
        assert_eq!(big.first(), Some(&100_000));
        assert_eq!(big.get(1), Some(&1_000_000));
        assert_eq!(big.last(), Some(&10_000_000));
        assert_eq!(big.len(), 11);
        assert_eq!(checkpoints(15), vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
    }

    #[test]
    fn spread_puts_a_thousand_files_in_a_directory() {
        assert_eq!(Shape::Spread.place(999), ("s/d0".into(), "f999".into()));
        assert_eq!(Shape::Spread.place(1000), ("s/d1".into(), "f1000".into()));
        assert_eq!(Shape::OneDir.place(7), ("m".into(), "f7".into()));
    }
}
