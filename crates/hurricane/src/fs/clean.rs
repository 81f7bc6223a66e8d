//! The `log` cleaner: empties segments by moving their live blocks to the
//! head, so that the log always finds whole clean segments to fill
//! (Rosenblum and Ousterhout's cleaner; Seltzer's BSD-LFS, ch. 5).
//!
//! A pass picks segments from each device's usage table
//! ([`crate::blocks::log::LogSpace`]) by policy: *cost-benefit*, the
//! largest (1 − u) × age / (1 + u) first (u: the segment's live share,
//! age: time since it was last written), or *greedy*, the emptiest first.
//! For each it moves every live block through its owner's node
//! ([`crate::blocks::Block::relocate`]), under the owner's I/O lock and in
//! a journal group of its own, exactly as a write would move it; the
//! blocks it leaves are freed when that group commits, and the pass ends
//! with a commit so the segments it emptied are clean at once.
//!
//! Runs on demand (`hurricane clean`); on its own thread while a device's
//! clean segments are under [`crate::blocks::log::CLEAN_START`] (the
//! background cleaner, alongside the writers); and in the foreground of a
//! write or a transaction's commit when they have fallen to the log's
//! reserve (writers wait for it: the throttle).
//!
//! A request of any layout refused for space reclaims it here before it
//! fails ([`Fs::with_room`]): a commit frees what the batches since the
//! last one freed, a pass for space empties segments of dead log blocks.

use super::Fs;
use crate::blocks::log::{Candidate, LogSpace, RESERVE_SEGMENTS};
use crate::blocks::IoCtx;
use crate::error::{Error, Result};
use crate::journal::{NodeRecord, Op};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The fullest segment the cleaner's own passes (background, and writers
/// at the reserve) take: one more live than this gains too little space
/// for the blocks it moves (a twentieth of a segment at best), and passes
/// over nearly full segments would go round moving the same blocks.
/// `hurricane clean` takes any segment that is not full.
const AUTO_MAX_UTILIZATION: f64 = 0.95;

/// How often the background cleaner looks at the logs.
const CLEAN_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Which segments a pass cleans first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CleanPolicy {
    /// Largest (1 − u) × age / (1 + u) first.
    #[default]
    CostBenefit,
    /// Lowest utilisation first.
    Greedy,
}

impl std::str::FromStr for CleanPolicy {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "cost-benefit" => Ok(CleanPolicy::CostBenefit),
            "greedy" => Ok(CleanPolicy::Greedy),
            _ => Err(format!("cleaning policy {s:?}: cost-benefit or greedy")),
        }
    }
}

/// What one pass is asked to do.
#[derive(Debug, Clone, Default)]
pub struct CleanOptions {
    pub policy: CleanPolicy,
    /// Clean at most this many segments (None: every candidate).
    pub max_segments: Option<usize>,
    /// Leave segments more than this share live (0.0 to 1.0; None: any
    /// that is not full).
    pub max_utilization: Option<f64>,
    pub stop: Option<Arc<AtomicBool>>,
    /// Leave the moves to the next commit instead of committing at the end.
    pub no_commit: bool,
}

/// What a pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanReport {
    /// Segments emptied.
    pub segments: u64,
    /// Live blocks moved to the head.
    pub moved_blocks: u64,
    /// Candidates the pass considered.
    pub candidates: u64,
}

/// Progress of a pass: segments done of those picked.
#[derive(Debug, Clone, Copy, Default)]
pub struct CleanProgress {
    pub done: u64,
    pub total: u64,
    pub moved_blocks: u64,
}

/// One device's log counters, for `hurricane stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LogStatsSnapshot {
    pub device: u32,
    /// Segments in the usage table, and live blocks in them.
    pub segments: u64,
    pub live_blocks: u64,
    /// Blocks files wrote, blocks the cleaner moved, segments it emptied.
    pub written_blocks: u64,
    pub moved_blocks: u64,
    pub cleaned_segments: u64,
    /// Of the segments emptied, those the background cleaner emptied while
    /// no writer waited for it.
    pub background_segments: u64,
    /// Summary blocks written in front of plain writes (roll-forward).
    pub summary_blocks: u64,
    /// (written + moved + summaries) / written.
    pub write_amplification: f64,
}

/// How often a request refused for space reclaims space and runs again
/// ([`Fs::with_room`]): each try must gain something, so the bound only
/// stops writers that keep losing what was reclaimed to others.
const MAX_RECLAIM_TRIES: usize = 8;

/// Passes leave segments with fewer than 1/`MIN_GAIN_DIVISOR` of their
/// blocks free.
const MIN_GAIN_DIVISOR: u64 = 64;

/// Cost-benefit score of a candidate at time `now` (ns).
fn score(c: &Candidate, now: i64, policy: CleanPolicy) -> f64 {
    let u = c.usage.live as f64 / c.seg.max(1) as f64;
    match policy {
        CleanPolicy::Greedy => 1.0 - u,
        CleanPolicy::CostBenefit => {
            let age = (now - c.usage.mtime).max(0) as f64 / 1e9 + 1.0;
            (1.0 - u) * age / (1.0 + u)
        }
    }
}

impl Fs {
    /// The log spaces of the pool's devices (those a log node has used).
    pub(super) fn log_spaces(&self) -> Vec<(u32, Arc<LogSpace>)> {
        self.storage().devs.iter().filter_map(|h| h.shared_if::<LogSpace>().map(|s| (h.index, s))).collect()
    }

    /// Enters every log node's blocks in its device's owner index, once
    /// after open (writes since open are in it already).
    fn index_logs(&self) -> Result<()> {
        if self.inner.logs_indexed.load(Ordering::Acquire) {
            return Ok(());
        }
        let _one = self.inner.cleaning.lock();
        if self.inner.logs_indexed.load(Ordering::Acquire) {
            return Ok(());
        }
        let spaces = self.log_spaces();
        for (_, s) in &spaces {
            s.walking();
        }
        for node in self.state().each() {
            let _io = node.io.read();
            let lay = match node.data.read().layout() {
                Ok(Some(l)) => l.clone(),
                _ => continue,
            };
            if !lay.nodes().iter().any(|n| n.kind().name == crate::blocks::log::TYPE.name) {
                continue;
            }
            let io = IoCtx {
                owner: node.ino,
                origin: crate::blocks::Origin::NONE,
                storage: self.storage(),
                epoch: 0,
                sink: Fs::no_sink(),
                repair: false,
            };
            for n in lay.nodes() {
                n.register(&io);
            }
        }
        for (_, s) in &spaces {
            s.walked();
        }
        self.inner.logs_indexed.store(true, Ordering::Release);
        Ok(())
    }

    /// Runs one cleaning pass over every device's log.
    pub fn clean(&self, opts: &CleanOptions, progress: &mut dyn FnMut(&CleanProgress)) -> Result<CleanReport> {
        self.clean_pass(opts, false, progress)
    }

    /// A pass; `background` counts its segments as the background
    /// cleaner's (`LogStats::background`).
    fn clean_pass(
        &self,
        opts: &CleanOptions,
        background: bool,
        progress: &mut dyn FnMut(&CleanProgress),
    ) -> Result<CleanReport> {
        self.check_writable()?;
        self.index_logs()?;
        let _one = self.inner.cleaning.lock();
        let now = super::now();
        let mut picked: Vec<(u32, Candidate, f64)> = Vec::new();
        let mut report = CleanReport::default();
        for (dev, space) in self.log_spaces() {
            for c in space.candidates() {
                report.candidates += 1;
                let u = c.usage.live as f64 / c.seg.max(1) as f64;
                if opts.max_utilization.is_some_and(|m| u > m) {
                    continue;
                }
                // A segment that would give back less than a 64th of
                // itself is as good as full: a sequential write leaves one
                // summary block free in each.
                if c.seg - c.usage.live.min(c.seg) < c.seg.div_ceil(MIN_GAIN_DIVISOR) {
                    continue;
                }
                picked.push((dev, c, score(&c, now, opts.policy)));
            }
        }
        picked.sort_by(|a, b| b.2.total_cmp(&a.2));
        if let Some(m) = opts.max_segments {
            picked.truncate(m);
        }
        let mut p = CleanProgress { total: picked.len() as u64, ..Default::default() };
        progress(&p);
        let mut failed = None;
        for (dev, c, _) in picked {
            if opts.stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed)) {
                break;
            }
            // Room to move the segment's live blocks, or the pass stops
            // here: the commit below frees what it emptied so far.
            if self.cleaning_room(dev) < c.usage.live {
                break;
            }
            let moved = match self.clean_segment(dev, c.seg, c.start) {
                Ok(m) => m,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            report.moved_blocks += moved;
            let space = LogSpace::of(&self.storage().devs[dev as usize]);
            if space.usage(c.seg, c.start).is_none_or(|u| u.live == 0) {
                report.segments += 1;
                space.stats.cleaned.fetch_add(1, Ordering::Relaxed);
                if background {
                    space.stats.background.fetch_add(1, Ordering::Relaxed);
                }
            }
            p.done += 1;
            p.moved_blocks = report.moved_blocks;
            progress(&p);
        }
        // The blocks left behind are free once this commits (also after a
        // failed move: what the pass did before it stands).
        if !opts.no_commit && (report.moved_blocks > 0 || report.segments > 0) {
            self.commit_all()?;
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    /// Blocks the cleaner can move into on device `dev`: free space past
    /// the allocator's reserve, and what the log's heads hold unused.
    fn cleaning_room(&self, dev: u32) -> u64 {
        let storage = self.storage();
        let free = storage.allocs.get(dev as usize).map_or(0, |a| a.free_for_data());
        free + storage.devs.get(dev as usize).and_then(|h| h.shared_if::<LogSpace>()).map_or(0, |s| s.head_room())
    }

    /// Moves every live block of segment (`seg`, `start`) on `dev` to the
    /// head: the runs of each owning file together, under one hold of its
    /// I/O lock and in one journal group (writers of that file wait for one
    /// file's share of a segment, not for each run).
    fn clean_segment(&self, dev: u32, seg: u64, start: u64) -> Result<u64> {
        let Some(h) = self.storage().devs.get(dev as usize) else { return Ok(0) };
        let space = LogSpace::of(h);
        let mut by_ino: std::collections::BTreeMap<u64, Vec<(u64, crate::blocks::log::Owner)>> = Default::default();
        for (pblk, o) in space.owners_in(seg, start) {
            by_ino.entry(o.ino).or_default().push((pblk, o));
        }
        let mut moved = 0;
        for (ino, runs) in by_ino {
            let Some(node) = self.state().get(ino) else { continue };
            let _io = node.io.write();
            let lay = match node.data.read().layout() {
                Ok(Some(l)) => l.clone(),
                _ => continue,
            };
            let changes = Mutex::new(Vec::new());
            let sink = |c: NodeRecord| changes.lock().push(c);
            let g = self.inner.gate.enter();
            let io = IoCtx {
                owner: ino,
                origin: crate::blocks::Origin::NONE,
                storage: self.storage(),
                epoch: g.epoch(),
                sink: &sink,
                repair: false,
            };
            let mut r = Ok(());
            for (pblk, o) in runs {
                let Some(n) = lay.nodes().get(o.node as usize) else { continue };
                if n.device() != Some(dev) {
                    continue;
                }
                match n.relocate(&io, o.fblk, pblk, o.len) {
                    Ok(m) => moved += m,
                    Err(e) => {
                        r = Err(e);
                        break;
                    }
                }
            }
            let ops: Vec<Op> =
                std::mem::take(&mut *changes.lock()).into_iter().map(|change| Op::Map { ino, change }).collect();
            if !ops.is_empty() {
                self.log(&g, &ops);
            }
            r?;
        }
        Ok(moved)
    }

    /// Before a write: when a device's log has used up the clean segments
    /// it keeps for the cleaner, cleans first (writers wait for it).
    pub(crate) fn clean_if_low(&self) {
        if self.inner.read_only {
            return;
        }
        let storage = self.storage();
        let low = self
            .log_spaces()
            .into_iter()
            .filter(|(d, s)| s.is_low() || storage.allocs.get(*d as usize).is_some_and(|a| s.short_of_space(a)))
            .collect::<Vec<_>>();
        if low.is_empty() {
            return;
        }
        // One thread cleans; the others wait for it and go on.
        if self.inner.cleaning.is_locked() {
            drop(self.inner.cleaning.lock());
            return;
        }
        // The pass commits, so what it emptied is free for this write.
        let opts = CleanOptions {
            max_segments: Some(2 * RESERVE_SEGMENTS),
            max_utilization: Some(AUTO_MAX_UTILIZATION),
            ..Default::default()
        };
        if let Err(e) = self.clean(&opts, &mut |_| {}) {
            tracing::warn!("cleaning before a write: {e}");
        }
        // Until a head looks again, writers go on (with what free runs
        // there are, if the pass could not empty any).
        for (_, s) in low {
            s.cleaned();
        }
    }

    /// A foreground pass for a writer refused for space, the last resort
    /// before ENOSPC: any segment that is not full, however little it
    /// gains. Returns whether it emptied or moved anything (what it emptied
    /// is free on return).
    pub(crate) fn clean_for_space(&self) -> bool {
        if self.inner.read_only || self.log_spaces().is_empty() {
            return false;
        }
        let opts = CleanOptions { max_segments: Some(2 * RESERVE_SEGMENTS), ..Default::default() };
        match self.clean(&opts, &mut |_| {}) {
            Ok(r) => r.segments > 0 || r.moved_blocks > 0,
            Err(e) => {
                tracing::warn!("cleaning for space: {e}");
                false
            }
        }
    }

    /// After a request was refused for space: makes free what is free but
    /// for a commit (the space of the batches since the last one, freed
    /// once they commit) and, where a log is, runs a foreground pass for
    /// space. Returns whether the devices gained free blocks or the pass
    /// emptied or moved anything: a try again may succeed.
    pub(crate) fn reclaim_space(&self) -> bool {
        if self.inner.read_only {
            return false;
        }
        let storage = self.storage();
        let free = || storage.allocs.iter().map(|a| a.free_for_data()).sum::<u64>();
        let before = free();
        if storage.allocs.iter().any(|a| a.pending_frees() > 0) {
            if let Err(e) = self.commit_all() {
                tracing::warn!("committing for space: {e}");
                return false;
            }
        }
        let cleaned = self.clean_for_space();
        cleaned || free() > before
    }

    /// Runs `f`, a request that may place data, and when it is refused for
    /// space ([`Error::NoSpace`]), reclaims space ([`Fs::reclaim_space`])
    /// and runs it again, while that gains something and at most
    /// [`MAX_RECLAIM_TRIES`] times: a writer sees ENOSPC only when nothing
    /// more can be made free. `f` must leave what it did recorded when it
    /// fails, and do it again whole.
    pub(crate) fn with_room<T>(&self, mut f: impl FnMut() -> Result<T>) -> Result<T> {
        let mut r = f();
        for _ in 0..MAX_RECLAIM_TRIES {
            if !matches!(r, Err(Error::NoSpace(_))) || !self.reclaim_space() {
                break;
            }
            r = f();
        }
        r
    }

    /// Starts the background cleaner: a thread that, while some device's
    /// log has fewer than [`crate::blocks::log::CLEAN_START`] clean segments, cleans
    /// [`RESERVE_SEGMENTS`] at a time and commits them, alongside the
    /// writers (which wait for a pass only when the reserve is reached).
    /// It looks every [`CLEAN_POLL`] and stops when the pool closes.
    pub(super) fn start_cleaner(&self) {
        let weak = Arc::downgrade(&self.inner);
        let h = std::thread::Builder::new().name("hurricane-clean".into()).spawn(move || loop {
            let Some(inner) = weak.upgrade() else { return };
            {
                let mut stop = inner.shutdown.lock();
                if *stop {
                    return;
                }
                inner.shutdown_cv.wait_for(&mut stop, CLEAN_POLL);
                if *stop {
                    return;
                }
            }
            let fs = Fs { inner };
            let spaces = fs.log_spaces();
            if !spaces.iter().any(|(_, s)| s.wants_cleaning()) || fs.check_writable().is_err() {
                continue;
            }
            let opts = CleanOptions {
                max_segments: Some(RESERVE_SEGMENTS),
                max_utilization: Some(AUTO_MAX_UTILIZATION),
                ..Default::default()
            };
            if let Err(e) = fs.clean_pass(&opts, true, &mut |_| {}) {
                tracing::warn!("background cleaning: {e}");
            }
            for (_, s) in spaces {
                s.cleaned();
            }
        });
        match h {
            Ok(h) => *self.inner.cleaner.lock() = Some(h),
            Err(e) => tracing::error!("cannot start the cleaner thread: {e}; writers clean when space runs low"),
        }
    }

    /// Each device's log counters.
    pub fn log_stats(&self) -> Vec<LogStatsSnapshot> {
        self.log_spaces()
            .into_iter()
            .map(|(device, s)| {
                let (segments, live) = s.totals();
                let w = s.stats.written.load(Ordering::Relaxed);
                let m = s.stats.moved.load(Ordering::Relaxed);
                let sums = s.stats.summaries.load(Ordering::Relaxed);
                LogStatsSnapshot {
                    device,
                    segments: segments as u64,
                    live_blocks: live,
                    written_blocks: w,
                    moved_blocks: m,
                    cleaned_segments: s.stats.cleaned.load(Ordering::Relaxed),
                    background_segments: s.stats.background.load(Ordering::Relaxed),
                    summary_blocks: sums,
                    write_amplification: if w == 0 { 1.0 } else { (w + m + sums) as f64 / w as f64 },
                }
            })
            .collect()
    }

    /// A checkpoint that took these usage entries did not commit: the next
    /// one takes them again.
    pub(super) fn log_usage_unsaved(&self, delta: &crate::namespace::store::Delta) {
        for (dev, space) in self.log_spaces() {
            space.usage_unsaved(delta.log_usage.iter().filter(|e| e.0 .0 == dev).map(|e| (e.0 .1, e.0 .2)));
        }
    }

    /// Blocks the log heads hold unused: a checkpoint records them free.
    pub(crate) fn log_unused(&self, out: &mut Vec<(u32, u64, u64)>) {
        for (d, s) in self.log_spaces() {
            s.unused(&mut |p, l| out.push((d, p, l)));
        }
    }
}
