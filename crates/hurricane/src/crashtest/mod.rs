//! Crash-consistency harness (in the spirit of CrashMonkey and
//! dm-log-writes): behind `hurricane crashtest` and `tests/crashtest.rs`.
//!
//! 1. **Record.** A workload runs on a pool of memory devices wrapped in
//!    recording devices: every write and flush, on every device, goes into
//!    one log in the order the devices completed them. The workload mirrors
//!    each operation in a model and notes where in the log each operation
//!    and each `sync`/`fsync` started and ended.
//! 2. **Cut.** Prefixes of the log are cut right after flushes and at random
//!    points between them. At a cut each device holds what it had flushed,
//!    plus any subset of the writes since its last flush, block by block and
//!    in any order, as a disk's volatile cache allows: none, all, an in-order
//!    prefix, only the newest, random subsets, one device's cache only.
//! 3. **Check.** Each crash state is opened with [`Fs::open`] (no manual
//!    repair; a state with the same bytes as one already planned, at a cut
//!    judged by the same rules, is not opened again: `check::plan`) and
//!    must: open; have no block claimed twice; be fsck-clean; show a
//!    namespace (names, types, modes, link counts, sizes, symlink
//!    targets, xattrs, layouts) equal to a state the workload passed through that is
//!    no older than the last sync completed before the cut and no newer than
//!    what a sync started before the cut may have captured; and give every
//!    file not written since that state exactly its contents. With several
//!    threads (each in its own directory) this holds per thread.
//! 4. **Crash again.** Every 16th state (every 4th in long mode) is also
//!    recovered on recording devices and cut after each request of its
//!    recovery; those states must pass the same checks.
//!
//! The engine's `fsync` is a full sync, so "every file fsync'd before the
//! cut has exactly its content" is part of the last rule.

mod check;
mod image;
mod model;
mod record;
mod txn;
mod workloads;

use crate::device::{Device, MemDevice};
use crate::error::{Error, Result};
use crate::{FormatOptions, Fs, Options};
use parking_lot::Mutex;
use rand::{rngs::StdRng, SeedableRng};
use record::{Mark, Recorder, RecordingDevice};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use workloads::{Driver, Size, SyncRec};

/// What to run.
#[derive(Debug, Clone)]
pub struct CrashOptions {
    /// A name from [`workloads`], or "all".
    pub workload: String,
    /// Crash points (cuts of the log) to check; each is checked in several
    /// crash modes (the states).
    pub points: usize,
    pub seed: u64,
    /// Bigger workloads and about three times the crash modes per point.
    pub long: bool,
    /// Checker threads (0 = one per core).
    pub jobs: usize,
    /// Violations described in the report (all are counted).
    pub max_reported: usize,
    /// Devices that acknowledge flushes without doing them: a broken disk,
    /// for tests that the checker catches what such a disk loses.
    #[doc(hidden)]
    pub lying_devices: Vec<u32>,
}

impl Default for CrashOptions {
    fn default() -> Self {
        CrashOptions {
            workload: "posix".into(),
            points: 300,
            seed: 1,
            long: false,
            jobs: 0,
            max_reported: 20,
            lying_devices: Vec::new(),
        }
    }
}

impl CrashOptions {
    pub fn new(workload: &str, points: usize, seed: u64) -> Self {
        CrashOptions { workload: workload.into(), points, seed, ..Default::default() }
    }
}

/// One crash state that broke a rule.
#[derive(Debug, Clone)]
pub struct Violation {
    pub workload: String,
    pub seed: u64,
    /// The cut: how many logged device requests the crash kept in order.
    pub cut: usize,
    pub cut_desc: String,
    /// What the simulated cache did with the unflushed writes.
    pub mode: String,
    /// What differed.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} seed {} cut {} ({}), {}: {}",
            self.workload, self.seed, self.cut, self.cut_desc, self.mode, self.detail
        )
    }
}

/// What a run checked and found.
#[derive(Debug, Clone, Default)]
pub struct CrashReport {
    pub workload: String,
    pub seed: u64,
    /// Operations the workload ran (all threads).
    pub ops: usize,
    /// Syncs and fsyncs that completed (the final clean close included).
    pub syncs: usize,
    /// Checkpoints the workload's commits wrote (journal wrap-around).
    pub checkpoints: u64,
    /// Of them, those written without a sync of their own (made durable by
    /// a later commit: a crash before it goes back to the one before).
    pub unsynced_checkpoints: u64,
    pub writes: usize,
    pub flushes: usize,
    /// Crash points (cuts) checked.
    pub points: usize,
    /// Crash states (a cut and what the caches kept) opened and checked.
    pub states: usize,
    /// States that showed a sync still in flight at the cut (legal).
    pub newer_states: usize,
    /// States not opened again: the same bytes as a state already checked,
    /// at a cut judged by the same rules (no operation, sync or
    /// transaction began or ended between the two cuts). Not in `states`.
    pub same_states: usize,
    /// States of a second crash during the recovery of a first (included
    /// in `states`): every 16th state (4th in long mode) is crashed again
    /// after each request of its recovery.
    pub recovery_states: usize,
    /// Crash states that broke a rule.
    pub violations: usize,
    /// The first violations, described.
    pub details: Vec<Violation>,
    /// The workload itself failed (an engine error while recording).
    pub error: Option<String>,
    pub elapsed: Duration,
    /// Per-workload reports of an "all" run.
    pub parts: Vec<CrashReport>,
}

impl CrashReport {
    /// No violation and no error.
    pub fn passed(&self) -> bool {
        self.violations == 0 && self.error.is_none() && self.parts.iter().all(CrashReport::passed)
    }
}

impl fmt::Display for CrashReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.parts {
            writeln!(f, "{p}")?;
        }
        write!(
            f,
            "crashtest {} (seed {}): {} ops, {} syncs, {} checkpoints ({} unsynced); {} writes and {} flushes recorded\n  {} crash points, {} crash states checked ({} of them crashes during recovery; {} showed an in-flight sync; {} more the same as one checked), {} violations [{:.1} s]",
            self.workload,
            self.seed,
            self.ops,
            self.syncs,
            self.checkpoints,
            self.unsynced_checkpoints,
            self.writes,
            self.flushes,
            self.points,
            self.states,
            self.recovery_states,
            self.newer_states,
            self.same_states,
            self.violations,
            self.elapsed.as_secs_f64()
        )?;
        if let Some(e) = &self.error {
            write!(f, "\n  workload error: {e}")?;
        }
        for v in &self.details {
            write!(f, "\n  VIOLATION: {v}")?;
        }
        if self.details.len() < self.violations {
            write!(f, "\n  ... and {} more violations", self.violations - self.details.len())?;
        }
        Ok(())
    }
}

/// Every workload: (name, what it does).
pub fn workloads() -> &'static [(&'static str, &'static str)] {
    workloads::WORKLOADS
}

/// Pool geometry: small devices and a small journal, so runs are quick and
/// the journal wraps and checkpoints often.
pub const DEVICES: usize = 3;
pub const DEVICE_SIZE: u64 = 8 << 20;
pub const JOURNAL_SIZE: u64 = 96 << 10;
/// Inodes the pool's cache holds in every run and check: few enough that
/// inodes are evicted and read back from the meta-data store all the time.
pub const INODE_CACHE: usize = 48;

/// Records the workload and checks `opts.points` crash points of it.
pub fn run(opts: &CrashOptions) -> CrashReport {
    if opts.workload == "all" {
        let t0 = Instant::now();
        let parts: Vec<CrashReport> =
            workloads().iter().map(|(n, _)| run(&CrashOptions { workload: n.to_string(), ..opts.clone() })).collect();
        let mut r = CrashReport { workload: "all".into(), seed: opts.seed, ..Default::default() };
        for p in &parts {
            r.ops += p.ops;
            r.syncs += p.syncs;
            r.checkpoints += p.checkpoints;
            r.unsynced_checkpoints += p.unsynced_checkpoints;
            r.writes += p.writes;
            r.flushes += p.flushes;
            r.points += p.points;
            r.states += p.states;
            r.newer_states += p.newer_states;
            r.same_states += p.same_states;
            r.recovery_states += p.recovery_states;
            r.violations += p.violations;
        }
        r.parts = parts;
        r.elapsed = t0.elapsed();
        return r;
    }
    let t0 = Instant::now();
    let mut report = CrashReport { workload: opts.workload.clone(), seed: opts.seed, ..Default::default() };
    let (rec, (ckpts, unsynced)) = match record_workload(opts) {
        Ok(r) => r,
        Err(e) => {
            report.error = Some(e.to_string());
            report.elapsed = t0.elapsed();
            return report;
        }
    };
    report.checkpoints = ckpts;
    report.unsynced_checkpoints = unsynced;
    report.ops = rec.threads.iter().map(|t| t.ops.len()).sum::<usize>() + rec.txn.as_ref().map_or(0, |h| h.attempts);
    report.syncs = rec.syncs.len() - 1;
    report.flushes = rec.events.iter().filter(|e| matches!(e, record::Event::Flush { .. })).count();
    report.writes = rec.events.len() - report.flushes;
    let cuts = check::choose_cuts(&rec.events, opts.points, opts.seed);
    report.points = cuts.len();
    let (states, same) = check::plan(&rec, &cuts, opts.long, opts.seed);
    report.same_states = same;
    let jobs = match opts.jobs {
        0 => crate::affinity::cpus(),
        j => j,
    }
    .clamp(1, states.len().max(1));
    let results: Vec<check::CutResult> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..jobs)
            .map(|w| {
                let (rec, states) = (&rec, &states);
                s.spawn(move || check::check_states(rec, states, w, jobs, opts.long))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    let mut r = check::CutResult::default();
                    r.violations.push(Violation {
                        workload: opts.workload.clone(),
                        seed: opts.seed,
                        cut: 0,
                        cut_desc: String::new(),
                        mode: String::new(),
                        detail: "a checker thread panicked (see stderr)".into(),
                    });
                    r
                })
            })
            .collect()
    });
    let mut all: Vec<Violation> = Vec::new();
    for r in results {
        report.states += r.states + r.recovery_states;
        report.recovery_states += r.recovery_states;
        report.newer_states += r.newer;
        report.same_states += r.same;
        all.extend(r.violations);
    }
    all.sort_by_key(|v| v.cut);
    report.violations = all.len();
    all.truncate(opts.max_reported);
    report.details = all;
    report.elapsed = t0.elapsed();
    report
}

/// Runs the workload on recording devices. Returns the recording and the
/// number of checkpoints the workload's commits wrote (all, unsynced).
fn record_workload(opts: &CrashOptions) -> Result<(check::Recorded, (u64, u64))> {
    let name = opts.workload.as_str();
    let concurrent = name == "concurrent";
    // Transactions: threads sharing a few protected files.
    let txn = name == "txn";
    let log = name == "log" || name == "cleaner";
    // A write refused for space commits (to free what the batches since
    // the last commit freed) and runs again (`Fs::with_room`): on a full
    // pool the engine commits on its own inside an operation.
    let fills = name == "full";
    let threads = if concurrent { 4 } else { 1 };
    let size = Size { ops: if opts.long { 2000 } else { 400 } };
    if !workloads().iter().any(|(n, _)| *n == name) {
        let known: Vec<&str> = workloads().iter().map(|(n, _)| *n).collect();
        return Err(Error::Invalid(format!("unknown workload {name:?} (known: {}, all)", known.join(", "))));
    }

    // The starting pool: formatted (and, for threads, their directories made).
    let mems: Vec<Arc<MemDevice>> =
        (0..DEVICES).map(|i| Arc::new(MemDevice::new(format!("mem{i}"), DEVICE_SIZE))).collect();
    let dyns = || mems.iter().map(|d| d.clone() as Arc<dyn Device>).collect::<Vec<_>>();
    Fs::format(dyns(), &FormatOptions { journal_size: Some(JOURNAL_SIZE), ..Default::default() })?;
    let quiet = Options { background_commit: false, inode_cache: INODE_CACHE, ..Options::default() };
    let prefixes: Vec<String> =
        if concurrent { (0..threads).map(|t| format!("/t{t}")).collect() } else { vec![String::new()] };
    if concurrent {
        let fs = Fs::open(dyns(), quiet.clone())?;
        for p in &prefixes {
            fs.mkdir_path(p, 0o755)?;
        }
        fs.close()?;
    }
    let mut initial = Vec::new();
    if txn {
        let fs = Fs::open(dyns(), quiet.clone())?;
        initial = txn::setup(&fs, opts.seed)?;
        fs.close()?;
    }
    let base: Vec<Arc<Vec<u8>>> = mems.iter().map(|d| Arc::new(d.image())).collect();
    drop(mems);

    let rec = Arc::new(Recorder::default());
    let devs: Vec<Arc<dyn Device>> = base
        .iter()
        .enumerate()
        .map(|(i, img)| {
            Arc::new(RecordingDevice::new(i as u32, img.clone(), rec.clone(), opts.lying_devices.contains(&(i as u32))))
                as Arc<dyn Device>
        })
        .collect();
    // Threads run with the background committer too: commits at moments
    // no thread chose.
    let opts_open = if concurrent || txn {
        Options { background_commit: true, commit_interval: Duration::from_millis(2), ..quiet }
    } else {
        quiet
    };
    let fs = Fs::open(devs, opts_open)?;
    // The formatted pool is the first durable state.
    let syncs = Mutex::new(vec![SyncRec { start: Mark { pos: 0, tick: 0 }, end: Mark { pos: 0, tick: 0 } }]);
    let txn_hist = Mutex::new(txn::TxnHist { initial, ..Default::default() });
    let hists = if txn {
        let per_thread = size.ops / 8;
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..txn::THREADS)
                .map(|t| {
                    let (fs, rec, syncs, hist) = (&fs, &*rec, &syncs, &txn_hist);
                    s.spawn(move || txn::thread(fs, rec, syncs, hist, opts.seed, t, per_thread))
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(Error::Invalid("workload thread panicked".into()))))
                .collect::<Result<Vec<()>>>()
        })?;
        Vec::new()
    } else if concurrent {
        std::thread::scope(|s| {
            let hs: Vec<_> = prefixes
                .iter()
                .enumerate()
                .map(|(t, prefix)| {
                    let (fs, rec, syncs) = (&fs, &*rec, &syncs);
                    let rng = StdRng::seed_from_u64(opts.seed.wrapping_mul(1000).wrapping_add(t as u64));
                    s.spawn(move || {
                        let mut d = Driver::new(fs, rec, syncs, rng, t as u64, prefix.clone(), Default::default());
                        workloads::concurrent_thread(&mut d, Size { ops: size.ops / 2 })?;
                        Ok::<_, Error>(d.hist)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(Error::Invalid("workload thread panicked".into()))))
                .collect::<Result<Vec<_>>>()
        })?
    } else {
        let rng = StdRng::seed_from_u64(opts.seed);
        let mut d = Driver::new(&fs, &rec, &syncs, rng, 0, String::new(), Default::default());
        d.compressible = name == "compress";
        d.atomic_only = log || fills;
        match name {
            "posix" => workloads::posix(&mut d, size)?,
            "renames" => workloads::renames(&mut d, size)?,
            "appends" => workloads::appends(&mut d, size)?,
            "full" => workloads::full(&mut d, size)?,
            "resilver" => workloads::resilver(&mut d, size)?,
            "evacuate" => workloads::evacuate(&mut d, size)?,
            "migrate" => workloads::migrate(&mut d, size)?,
            "cleaner" => workloads::cleaner(&mut d, size)?,
            "degraded" => workloads::degraded(&mut d, size)?,
            "directory" => workloads::directory(&mut d, size)?,
            "colocate" => workloads::colocate(&mut d, size)?,
            other => {
                let (specs, max) =
                    workloads::layout_family(other).ok_or_else(|| Error::Invalid(format!("workload {other}")))?;
                workloads::layouts(&mut d, size, specs, max)?;
            }
        }
        vec![d.hist]
    };
    let ckpts = (fs.commit_counts().1, fs.unsynced_checkpoints());
    // A clean close is the last sync.
    let start = rec.mark();
    fs.close()?;
    let end = rec.mark();
    let mut syncs = syncs.into_inner();
    syncs.push(SyncRec { start, end });
    drop(fs);
    let events = rec.take();
    Ok((
        check::Recorded {
            workload: name.to_string(),
            seed: opts.seed,
            base,
            events,
            threads: hists,
            syncs,
            // The log cleans and commits on its own when a write finds its
            // clean segments gone, and a write refused for space commits
            // before it tries again: commits of the engine's own, as the
            // committer's.
            background: concurrent || txn || log || fills,
            txn: txn.then(|| txn_hist.into_inner()),
        },
        ckpts,
    ))
}
