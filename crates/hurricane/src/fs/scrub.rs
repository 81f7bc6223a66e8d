//! Scrub: read every copy of every block of the meta-file and of every
//! regular file, verify it, and rewrite what redundancy can rebuild; and the
//! resilver that fills a replacement device, which is a scrub that treats
//! every piece on the replaced device as lost.
//!
//! The meta-file comes first (a scrub from the start): each copy's blocks
//! and checksum pages against the checksums the file keeps, a chunk at a
//! time with commits held off; a copy found wrong is made whole by a
//! checkpoint that copies the file from its good blocks.
//!
//! Files are visited in inode order, each in chunks of file blocks. A chunk
//! holds the file's I/O lock shared (as a write does, so truncates wait) and
//! the journal gate (so what its repairs record, such as space mapped for a
//! rewritten copy, is journalled as `Op::Map`), and nothing longer. The
//! position (inode, block) after each chunk can be kept in a small file
//! (docs/FORMAT.md, "Scrub position"), so an interrupted scrub continues
//! where it stopped.

use super::errors::ErrorSource;
use super::Fs;
use crate::blocks::{Leftovers, NodeRecord, Scrub, ScrubTally, BLOCK_SIZE};
use crate::device::DeviceState;
use crate::error::{Error, Result};
use crate::journal::{Ino, Op};
use crate::namespace::store::CopyCheck;
use crate::namespace::ROOT;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BS: u64 = BLOCK_SIZE as u64;
/// File blocks per chunk: 64 MiB (the blocks scrub steps of it at once).
const CHUNK_BLOCKS: u64 = 16384;
/// How often the position file is rewritten at most.
const SAVE_EVERY: Duration = Duration::from_secs(1);

/// Where a scrub stands: the next block of the next file to visit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ScrubPos {
    pub ino: Ino,
    pub block: u64,
}

/// What a scrub is asked to do.
#[derive(Debug, Clone, Default)]
pub struct ScrubOptions {
    /// Rewrite bad copies from good ones (false: only report).
    pub repair: bool,
    /// Bytes verified per second at most (every copy counts); None: no limit.
    pub rate: Option<u64>,
    /// Devices rebuilt wholesale (a replacement). Empty: the devices the
    /// pool has in the resilvering state, whose resilver this scrub then
    /// finishes.
    pub rebuild: Vec<u32>,
    /// Rebuild the pieces on the `rebuild` devices and nothing else (a
    /// resilver): files and nodes with nothing on them are not read, and a
    /// parity stripe is rebuilt from k units rather than all. False: every
    /// copy of every block is read and verified as well.
    pub resilver_only: bool,
    /// Start here (overrides the position file).
    pub start: Option<ScrubPos>,
    /// Keeps the position here while running, continues from it when
    /// `resume` is set and it belongs to this pool and the same rebuild,
    /// and is removed when the scrub completes.
    pub position_file: Option<PathBuf>,
    pub resume: bool,
    /// Set from elsewhere to stop the scrub after its current chunk (the
    /// position is saved; the report says it is incomplete).
    pub stop: Option<Arc<AtomicBool>>,
    /// Only the files with a piece on one of these devices (empty: every
    /// file): what a replacement verifies after its copy.
    pub focus: Vec<u32>,
    /// What the permanent error list says found the damage.
    pub source: ErrorSource,
}

/// Progress, reported after every chunk.
#[derive(Debug, Clone, Default)]
pub struct ScrubProgress {
    pub pos: ScrubPos,
    /// File bytes visited so far, and in all (from the start point).
    pub done_bytes: u64,
    pub total_bytes: u64,
    pub files_done: u64,
    pub checked_blocks: u64,
    pub repaired_blocks: u64,
    pub lost_blocks: u64,
}

/// File byte ranges of one file that no copy could supply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LostFile {
    pub ino: Ino,
    /// Every name the file has (hard links), "" when it has none left.
    pub paths: Vec<String>,
    /// (offset, length) in bytes.
    pub ranges: Vec<(u64, u64)>,
}

/// What a scrub found and did.
#[derive(Debug, Clone, Default)]
pub struct ScrubReport {
    pub files: u64,
    /// Blocks read and verified (every copy counts).
    pub checked_blocks: u64,
    pub repaired_blocks: u64,
    /// Bytes the devices read meanwhile (other I/O of a mounted pool included).
    pub bytes_read: u64,
    pub lost: Vec<LostFile>,
    pub duration: Duration,
    /// Bytes verified per second.
    pub rate: f64,
    /// False when stopped before the end (`next` is where to go on).
    pub complete: bool,
    pub next: Option<ScrubPos>,
    /// Started from a saved or given position rather than the beginning.
    pub resumed_from: Option<ScrubPos>,
    /// Devices rebuilt; when the scrub completed, those that were
    /// resilvering are online again.
    pub rebuilt: Vec<u32>,
    /// Blocks of the meta-file (the namespace and inode tables) that no
    /// copy holds as written: the meta-data store is damaged (`fsck`).
    pub meta_lost_blocks: u64,
}

impl ScrubReport {
    pub fn lost_blocks(&self) -> u64 {
        self.lost.iter().flat_map(|f| f.ranges.iter()).map(|r| r.1.div_ceil(BS)).sum()
    }
}

/// Keeps verified bytes under a rate: after each chunk, waits until the
/// time since the start covers what was verified.
struct Throttle {
    rate: Option<u64>,
    start: Instant,
}

impl Throttle {
    fn wait(&self, bytes: u64, stop: &dyn Fn() -> bool) {
        let Some(rate) = self.rate.filter(|&r| r > 0) else { return };
        let due = Duration::from_secs_f64(bytes as f64 / rate as f64);
        loop {
            let now = self.start.elapsed();
            if now >= due || stop() {
                return;
            }
            std::thread::sleep((due - now).min(Duration::from_millis(100)));
        }
    }
}

impl Fs {
    /// Scrubs every regular file (see the module notes). Unrecoverable
    /// ranges are reported with the files' paths; they are not an error.
    pub fn scrub(&self, opts: &ScrubOptions, progress: &dyn Fn(&ScrubProgress)) -> Result<ScrubReport> {
        let t0 = Instant::now();
        let repair = opts.repair && !self.inner.read_only;
        let resilvering: Vec<u32> =
            self.storage().devs.iter().filter(|d| d.state() == DeviceState::Resilvering).map(|d| d.index).collect();
        let rebuild: Vec<u32> = match (opts.rebuild.is_empty(), repair) {
            (true, true) => resilvering.clone(),
            (true, false) => Vec::new(),
            (false, _) => opts.rebuild.clone(),
        };
        if let Some(&d) = rebuild.iter().find(|&&d| d >= self.storage().device_count()) {
            return Err(Error::Invalid(format!("device {d}: the pool has {} devices", self.storage().device_count())));
        }
        if !rebuild.is_empty() && !repair {
            return Err(Error::Invalid("rebuilding a device needs repair (and a writable pool)".into()));
        }
        let pool_id = self.pool_id();
        let saved = match (&opts.position_file, opts.resume) {
            (Some(f), true) => load_position(f, &pool_id, &rebuild)?,
            _ => None,
        };
        // A saved position past every inode the pool has is not one this
        // pool's scrub wrote (or its files are gone): going on from it would
        // skip everything, and end a resilver that rebuilt nothing.
        let last_ino = self.state().inos().ok().and_then(|v| v.last().copied()).unwrap_or(0);
        let saved = saved.filter(|p| {
            let ok = p.ino <= last_ino;
            if !ok {
                tracing::info!("scrub position at inode {} is past the last inode {last_ino}; starting over", p.ino);
            }
            ok
        });
        let start = opts.start.or(saved).unwrap_or_default();
        let stop = || opts.stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed));
        let read_bytes = |fs: &Fs| fs.storage().devs.iter().map(|d| d.stats.snapshot().read_bytes).sum::<u64>();
        let read0 = read_bytes(self);

        // The files to visit, with what they hold from the start point on.
        // With a focus, only files with a piece on its devices (a tree that
        // cannot be read back is visited, to be reported).
        let focused = |d: &crate::namespace::InodeData| match d.peek_layout() {
            Ok(Some(l)) => touches(l.root(), &opts.focus),
            Ok(None) => false,
            Err(_) => true,
        };
        let files: Vec<(Ino, u64)> = self
            .state()
            .each()
            .filter(|n| n.ino >= start.ino)
            .filter_map(|n| {
                let d = n.data.read();
                (d.is_file() && (opts.focus.is_empty() || focused(&d))).then(|| (n.ino, d.size.div_ceil(BS)))
            })
            .collect();
        let total_bytes: u64 = files
            .iter()
            .map(|&(ino, nb)| if ino == start.ino { nb.saturating_sub(start.block) } else { nb } * BS)
            .sum();

        let is_rebuilt = |d: u32| rebuild.contains(&d);
        let resilver_only = opts.resilver_only && !rebuild.is_empty();
        let tally = ScrubTally::default();
        let leftovers = Leftovers::default();
        let mut lost: BTreeMap<Ino, Vec<(u64, u64)>> = BTreeMap::new();
        // Files read from their first block to their last.
        let mut whole: BTreeSet<Ino> = BTreeSet::new();
        let mut p = ScrubProgress { pos: start, total_bytes, ..Default::default() };
        let chunk = match opts.rate {
            Some(r) if r > 0 => (r / 4 / BS).clamp(1, CHUNK_BLOCKS),
            _ => CHUNK_BLOCKS,
        };
        let throttle = Throttle { rate: opts.rate, start: Instant::now() };
        let mut saved_at = Instant::now();
        let mut stopped = None;
        // The meta-data first, as a scrub from the start. A resilver leaves
        // it to its end, which copies the meta-file whole (`set_online`).
        let meta =
            if start == ScrubPos::default() && !resilver_only { self.scrub_meta_file(repair, &stop)? } else { None };
        if let Some(m) = &meta {
            tally.checked(m.checked);
            tally.repaired(m.repaired);
            p.checked_blocks = m.checked;
            p.repaired_blocks = m.repaired;
            progress(&p);
        }
        'files: for &(ino, _) in &files {
            let Some(node) = self.state().get(ino) else { continue };
            let mut b = if ino == start.ino { start.block } else { 0 };
            let from_start = b == 0;
            loop {
                if stop() {
                    stopped = Some(ScrubPos { ino, block: b });
                    break 'files;
                }
                let _io = node.io.read();
                // Layout and size again under the I/O lock.
                let (lay, nblocks) = {
                    let d = node.data.read();
                    match d.layout() {
                        Ok(Some(l)) => (l.clone(), d.size.div_ceil(BS)),
                        Ok(None) => break,
                        // A tree that cannot be read back: its data is lost.
                        Err(e) => {
                            tracing::error!("scrub: inode {ino}: {e}");
                            lost.entry(ino).or_default().push((0, d.size.div_ceil(BS)));
                            break;
                        }
                    }
                };
                if b >= nblocks {
                    break;
                }
                let n = chunk.min(nblocks - b);
                let part = ScrubTally::default();
                let changes = Mutex::new(Vec::new());
                let sink = |c: NodeRecord| changes.lock().push(c);
                let s = Scrub {
                    repair,
                    rebuild: &is_rebuilt,
                    resilver_only,
                    tally: &part,
                    leftovers: &leftovers,
                    verify: None,
                };
                let r = if repair {
                    let g = self.inner.gate.enter();
                    let io = crate::blocks::IoCtx {
                        owner: ino,
                        origin: self.origin(ino),
                        storage: self.storage(),
                        epoch: g.epoch(),
                        sink: &sink,
                        repair,
                    };
                    // What the devices hold, not what a cache kept.
                    let r = from_media(resilver_only, || lay.root().scrub(&io, &s, b, n));
                    let ops: Vec<Op> = std::mem::take(&mut *changes.lock())
                        .into_iter()
                        .map(|change| Op::Map { ino, change })
                        .collect();
                    if !ops.is_empty() {
                        self.log(&g, &ops);
                    }
                    r
                } else {
                    let io = crate::blocks::IoCtx {
                        owner: ino,
                        origin: crate::blocks::Origin::NONE,
                        storage: self.storage(),
                        epoch: 0,
                        sink: &sink,
                        repair,
                    };
                    from_media(resilver_only, || lay.root().scrub(&io, &s, b, n))
                };
                if let Err(e) = r {
                    tracing::error!("scrub of inode {ino} blocks {b}+{n}: {e}");
                    part.lost(b, n);
                }
                let repaired = part.repaired.load(Ordering::Relaxed);
                if repaired > 0 {
                    // What was cached may be what the repair replaced.
                    self.inner.cache.invalidate(ino, b, n);
                }
                tally.checked(part.checked.load(Ordering::Relaxed));
                tally.repaired(repaired);
                let mut part_lost = part.unrecoverable.into_inner();
                p.lost_blocks += part_lost.iter().map(|r| r.1).sum::<u64>();
                lost.entry(ino).or_default().append(&mut part_lost);
                drop(_io);
                b += n;
                p.pos = ScrubPos { ino, block: b };
                p.done_bytes += n * BS;
                p.checked_blocks = tally.checked.load(Ordering::Relaxed);
                p.repaired_blocks = tally.repaired.load(Ordering::Relaxed);
                if let Some(f) = &opts.position_file {
                    if saved_at.elapsed() >= SAVE_EVERY {
                        save_position(f, &pool_id, &rebuild, p.pos)?;
                        saved_at = Instant::now();
                    }
                }
                progress(&p);
                throttle.wait(p.checked_blocks * BS, &stop);
            }
            p.files_done += 1;
            p.pos = ScrubPos { ino: ino + 1, block: 0 };
            if from_start {
                whole.insert(ino);
            }
        }
        lost.retain(|_, v| !v.is_empty());
        let paths = self.paths_of(&lost.keys().copied().collect());
        let lost: Vec<LostFile> = lost
            .into_iter()
            .map(|(ino, mut ranges)| {
                ranges.sort_unstable();
                // Adjacent ranges read as one.
                let mut merged: Vec<(u64, u64)> = Vec::new();
                for (s, n) in ranges {
                    match merged.last_mut() {
                        Some(m) if m.0 + m.1 >= s => m.1 = m.1.max(s + n - m.0),
                        _ => merged.push((s, n)),
                    }
                }
                // In bytes, held to the file's size (its last block is partial).
                let size = self.state().get(ino).map_or(u64::MAX, |n| n.data.read().size);
                let ranges = merged
                    .into_iter()
                    .map(|(s, n)| (s * BS, (s * BS + n * BS).min(size).saturating_sub(s * BS)))
                    .filter(|r| r.1 > 0)
                    .collect();
                LostFile { ino, paths: paths.get(&ino).cloned().unwrap_or_default(), ranges }
            })
            .collect();
        for f in &lost {
            tracing::warn!("scrub: unrecoverable data in {:?} (inode {}): {:?}", f.paths, f.ino, f.ranges);
            // A file read whole (every copy, not only a resilver's pieces)
            // has exactly these ranges damaged.
            let all = whole.contains(&f.ino) && !resilver_only;
            let what = if resilver_only {
                "could not be rebuilt from redundancy"
            } else {
                "no copy could be read or verified"
            };
            self.note_data_error(f.ino, &f.ranges, opts.source, what, all);
        }
        // A file read whole and found clean leaves the list.
        if !resilver_only {
            for ino in whole.iter().filter(|i| !lost.iter().any(|f| f.ino == **i)) {
                if self.inner.errors.forget(*ino) {
                    tracing::info!(ino, "permanent error cleared: a scrub read the file clean");
                }
            }
        }
        self.persist_data_errors();
        let complete = stopped.is_none() && meta.as_ref().is_none_or(|m| m.complete);
        if let Some(f) = &opts.position_file {
            match stopped {
                Some(pos) => save_position(f, &pool_id, &rebuild, pos)?,
                None => remove_position(f)?,
            }
        }
        if complete && repair {
            let done: Vec<u32> = rebuild.iter().copied().filter(|d| resilvering.contains(d)).collect();
            if !done.is_empty() {
                self.set_online(&done)?;
            }
        }
        let checked_blocks = tally.checked.load(Ordering::Relaxed);
        let duration = t0.elapsed();
        Ok(ScrubReport {
            files: p.files_done,
            checked_blocks,
            repaired_blocks: tally.repaired.load(Ordering::Relaxed),
            bytes_read: read_bytes(self).saturating_sub(read0),
            lost,
            duration,
            rate: (checked_blocks * BS) as f64 / duration.as_secs_f64().max(1e-9),
            complete,
            next: stopped,
            resumed_from: (start != ScrubPos::default()).then_some(start),
            rebuilt: rebuild,
            meta_lost_blocks: meta.map_or(0, |m| m.lost),
        })
    }

    /// Checks every copy of the meta-file against its checksums, a chunk at
    /// a time with commits held off (`MetaFile::check_copies`). With
    /// `repair`, a copy found wrong is made whole by a checkpoint, which
    /// copies the file to a fresh tree from the good blocks. None when the
    /// pool keeps no meta-file checksums to check against.
    fn scrub_meta_file(&self, repair: bool, stop: &dyn Fn() -> bool) -> Result<Option<MetaScrub>> {
        let file = self.state().store().file();
        if !file.verifies() {
            return Ok(None);
        }
        let mut check = CopyCheck::default();
        let mut out = MetaScrub { complete: true, ..Default::default() };
        let mut b = 0;
        while b == 0 || b < file.blocks() {
            if stop() {
                out.complete = false;
                break;
            }
            let _commits = self.inner.meta.lock();
            file.check_copies(b, META_CHUNK_BLOCKS, &mut check)?;
            b += META_CHUNK_BLOCKS;
        }
        out.checked = check.checked;
        out.lost = check.lost.len() as u64;
        if !check.lost.is_empty() {
            tracing::error!(
                "scrub: {} meta-file blocks are held by no copy (first: {}); the meta-data store is damaged",
                check.lost.len(),
                check.lost[0]
            );
        }
        if check.damaged > 0 {
            tracing::warn!("scrub: {} meta-file blocks were wrong on a copy", check.damaged);
            if repair && check.lost.is_empty() {
                // The checkpoint copies the file whole when every device of
                // it takes writes; otherwise it stays marked for a later one.
                self.checkpoint()?;
                if self.inner.meta.lock().relayout.is_none() && !file.is_damaged() {
                    out.repaired = check.damaged;
                }
            }
        }
        Ok(Some(out))
    }

    /// Reads every block of the meta-file within its length from each copy
    /// and checks it against its checksum, a chunk at a time with commits
    /// held off (`MetaFile::check_copies`); `progress` gets (blocks done,
    /// blocks). A copy found wrong marks the file for the next checkpoint
    /// to copy whole; nothing is written here. None when the pool keeps no
    /// meta-file checksums to check against. For `fsck`.
    pub(crate) fn check_meta_copies(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<Option<CopyCheck>> {
        let file = self.state().store().file();
        if !file.verifies() {
            return Ok(None);
        }
        let mut check = CopyCheck::default();
        let mut b = 0;
        while b == 0 || b < file.blocks() {
            progress(b.min(file.blocks()), file.blocks());
            let _commits = self.inner.meta.lock();
            if let Err(e) = file.check_copies(b, META_CHUNK_BLOCKS, &mut check) {
                // No copy of a checksum page they need: none of these
                // blocks can be verified.
                tracing::error!("meta-file blocks {b}..{}: {e}", b + META_CHUNK_BLOCKS);
                check.lost.extend(b.max(1)..(b + META_CHUNK_BLOCKS).min(file.blocks()));
            }
            b += META_CHUNK_BLOCKS;
        }
        progress(file.blocks(), file.blocks());
        Ok(Some(check))
    }

    /// This pool's identity (the same in every superblock).
    pub fn pool_id(&self) -> [u8; 16] {
        self.inner.meta.lock().sb.pool_id
    }

    /// Devices being resilvered (a replacement not yet filled).
    pub fn resilvering(&self) -> Vec<u32> {
        self.storage().devs.iter().filter(|d| d.state() == DeviceState::Resilvering).map(|d| d.index).collect()
    }

    /// Marks resilvered devices online and drops them from the superblocks'
    /// device states.
    fn set_online(&self, devs: &[u32]) -> Result<()> {
        // The meta-file is copied whole to a fresh tree first, so its copy
        // on the device is whole again.
        self.inner.meta.lock().relayout = Some(self.inner.state.store().file().layout().spec());
        self.checkpoint()?;
        let mut m = self.inner.meta.lock();
        if m.relayout.is_some() {
            // The copy failed (the log says why): the device keeps its
            // state, and a later scrub tries again.
            m.relayout = None;
            return Err(Error::Device(format!(
                "devices {devs:?}: the meta-file could not be copied whole onto them; they stay resilvering"
            )));
        }
        let mut sb = m.sb.clone();
        sb.dev_states.retain(|(i, _)| !devs.contains(i));
        sb.generation += 1;
        for &d in devs {
            if let Some(h) = self.storage().devs.get(d as usize) {
                h.set_state(DeviceState::Online);
            }
        }
        self.storage().write_superblocks(&sb)?;
        m.sb = sb;
        tracing::info!("resilver of devices {devs:?} complete");
        Ok(())
    }

    /// Every path (one per hard link) of each inode in `inos`, found by
    /// walking the directories once.
    pub fn paths_of(&self, inos: &BTreeSet<Ino>) -> BTreeMap<Ino, Vec<String>> {
        let mut out: BTreeMap<Ino, Vec<String>> = BTreeMap::new();
        if inos.is_empty() {
            return out;
        }
        // (directory, name) of every entry naming a wanted inode, and each
        // directory's own name and parent for building its path.
        let mut hits: Vec<(Ino, Ino, Vec<u8>)> = Vec::new();
        let mut dir_name: BTreeMap<Ino, (Ino, Vec<u8>)> = BTreeMap::new();
        for n in self.state().each() {
            let d = n.data.read();
            let Some(dir) = d.dir() else { continue };
            let entries = match dir.entries() {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!("directory {}: {e}", n.ino);
                    continue;
                }
            };
            for (name, e) in entries {
                if inos.contains(&e.ino) {
                    hits.push((e.ino, n.ino, name.clone()));
                }
                if e.kind == crate::namespace::inode::S_IFDIR {
                    dir_name.insert(e.ino, (n.ino, name));
                }
            }
        }
        let dir_path = |mut d: Ino| -> String {
            let mut parts: Vec<String> = Vec::new();
            // Bounded: a damaged tree must not loop.
            for _ in 0..4096 {
                if d == ROOT {
                    break;
                }
                match dir_name.get(&d) {
                    Some((parent, name)) => {
                        parts.push(String::from_utf8_lossy(name).into_owned());
                        d = *parent;
                    }
                    None => {
                        parts.push(format!("<inode {d}>"));
                        break;
                    }
                }
            }
            parts.reverse();
            format!("/{}", parts.join("/"))
        };
        for (ino, dir, name) in hits {
            let base = dir_path(dir);
            let sep = if base.ends_with('/') { "" } else { "/" };
            out.entry(ino).or_default().push(format!("{base}{sep}{}", String::from_utf8_lossy(&name)));
        }
        for v in out.values_mut() {
            v.sort();
        }
        out
    }
}

/// Whether a device in `devs` holds a piece of the tree under `b`.
fn touches(b: &Arc<dyn crate::blocks::Block>, devs: &[u32]) -> bool {
    b.device().is_some_and(|d| devs.contains(&d)) || b.children().iter().any(|c| touches(c, devs))
}

/// Meta-file blocks checked under one hold of the commit lock (1 MiB a copy).
const META_CHUNK_BLOCKS: u64 = 256;

/// What a scrub found in the meta-file's copies.
#[derive(Debug, Clone, Default)]
struct MetaScrub {
    checked: u64,
    repaired: u64,
    lost: u64,
    complete: bool,
}

/// Puts the devices the superblock records as resilvering in that state.
pub(super) fn apply_resilvering(storage: &crate::pool::Storage, sb: &crate::pool::Superblock) {
    for &(i, st) in &sb.dev_states {
        if st == DeviceState::Resilvering as u8 {
            if let Some(h) = storage.devs.get(i as usize) {
                h.restore_state(DeviceState::Resilvering);
            }
        }
    }
}

const POS_MAGIC: &str = "hurricane scrub position 1";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What a scrub position file holds: the pool it belongs to, the devices
/// its scrub rebuilds (sorted), and where to go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PositionRecord {
    pub pool: [u8; 16],
    pub rebuild: Vec<u32>,
    pub pos: ScrubPos,
}

impl PositionRecord {
    /// The file's text (docs/FORMAT.md, "Scrub position").
    pub fn encode(&self) -> String {
        let mut sorted = self.rebuild.clone();
        sorted.sort_unstable();
        sorted.dedup();
        let devs: Vec<String> = sorted.iter().map(|d| d.to_string()).collect();
        format!(
            "{POS_MAGIC}\npool {}\nrebuild {}\ninode {}\nblock {}\n",
            hex(&self.pool),
            if devs.is_empty() { "-".to_string() } else { devs.join(",") },
            self.pos.ino,
            self.pos.block
        )
    }

    /// Strict: the five lines in order, nothing else; what is wrong is said.
    pub fn decode(bytes: &[u8]) -> std::result::Result<PositionRecord, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not text (invalid UTF-8)".to_string())?;
        parse_position(text)
    }
}

/// Writes the position file: a temporary file beside it (`scrub.tmp` for
/// `scrub.pos`) renamed over it, both opened relative to their directory
/// and never through a link (the pool directory may be another user's:
/// [`crate::dirfile`]).
pub fn save_position(f: &std::path::Path, pool: &[u8; 16], rebuild: &[u32], pos: ScrubPos) -> Result<()> {
    let text = PositionRecord { pool: *pool, rebuild: rebuild.to_vec(), pos }.encode();
    let tmp = f.with_extension("tmp");
    let tmp = tmp.file_name().and_then(|n| n.to_str()).unwrap_or("scrub.tmp");
    let (dir, name) = crate::dirfile::Dir::split(f)?;
    dir.replace(&name, tmp, text.as_bytes())
}

fn remove_position(f: &std::path::Path) -> Result<()> {
    match std::fs::remove_file(f) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(f.display().to_string(), e)),
    }
}

/// Reads the position file: None when there is none, or when it belongs to
/// another pool or another rebuild (then it is stale and ignored). Anything
/// malformed is an error naming the file.
pub fn load_position(f: &std::path::Path, pool: &[u8; 16], rebuild: &[u32]) -> Result<Option<ScrubPos>> {
    let bytes = match std::fs::read(f) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(f.display().to_string(), e)),
    };
    let rec = PositionRecord::decode(&bytes).map_err(|why| Error::corrupt(f.display().to_string(), why))?;
    let mut want: Vec<u32> = rebuild.to_vec();
    want.sort_unstable();
    want.dedup();
    if rec.pool != *pool || rec.rebuild != want {
        tracing::info!("{}: from another pool or another rebuild; starting from the beginning", f.display());
        return Ok(None);
    }
    Ok(Some(rec.pos))
}

/// Decimal digits without leading zeros (so one number has one spelling).
fn canonical_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
}

fn parse_position(text: &str) -> std::result::Result<PositionRecord, String> {
    let lines: Vec<&str> = text.split_terminator('\n').collect();
    if lines.first() != Some(&POS_MAGIC) {
        return Err("not a scrub position file of this version".into());
    }
    if lines.len() != 5 || !text.ends_with('\n') {
        return Err(format!("{} lines where 5 are expected (truncated or extended)", lines.len()));
    }
    let field = |i: usize, key: &str| -> std::result::Result<&str, String> {
        lines[i]
            .strip_prefix(key)
            .and_then(|r| r.strip_prefix(' '))
            .ok_or_else(|| format!("line {}: expected {key}", i + 1))
    };
    let id = field(1, "pool")?;
    if id.len() != 32 || !id.bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()) {
        return Err(format!("bad pool id {id:?}"));
    }
    let mut pool = [0u8; 16];
    for (i, b) in pool.iter_mut().enumerate() {
        *b = u8::from_str_radix(&id[2 * i..2 * i + 2], 16).map_err(|_| format!("bad pool id {id:?}"))?;
    }
    let dev = |d: &str| -> std::result::Result<u32, String> {
        if !canonical_number(d) {
            return Err(format!("bad device {d:?}"));
        }
        d.parse::<u32>().map_err(|_| format!("bad device {d:?}"))
    };
    let rebuild = match field(2, "rebuild")? {
        "-" => Vec::new(),
        s => {
            let v = s.split(',').map(dev).collect::<std::result::Result<Vec<u32>, String>>()?;
            if v.windows(2).any(|w| w[0] >= w[1]) {
                return Err(format!("devices {s:?} not in increasing order"));
            }
            v
        }
    };
    let num = |i: usize, key: &str| -> std::result::Result<u64, String> {
        let s = field(i, key)?;
        if !canonical_number(s) {
            return Err(format!("bad {key} {s:?}"));
        }
        s.parse::<u64>().map_err(|_| format!("bad {key} {s:?}"))
    };
    let ino = num(3, "inode")?;
    let block = num(4, "block")?;
    if block > super::io::MAX_FILE_SIZE / BS {
        return Err(format!("block {block} past the largest file"));
    }
    Ok(PositionRecord { pool, rebuild, pos: ScrubPos { ino, block } })
}

/// Runs a scrub step reading what the devices hold: not the group cache
/// of `colocate` (held writes are drained first), nor, unless it only
/// rebuilds (`resilver`: what it copies is verified on the way, and a
/// survivor's cached copy serves as well as the disk's), the host's page
/// cache of image files (`base::from_media`).
fn from_media<R>(resilver: bool, f: impl FnOnce() -> R) -> R {
    if resilver {
        crate::blocks::colocate::uncached(f)
    } else {
        crate::base::from_media(|| crate::blocks::colocate::uncached(f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pool directory may be another user's: a `scrub.tmp` link she
    /// left there is removed, not written through, and a `scrub.pos` link
    /// is replaced.
    #[test]
    fn the_position_is_written_through_no_planted_link() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "root's").unwrap();
        let pool = dir.path().join("pool");
        std::fs::create_dir(&pool).unwrap();
        std::os::unix::fs::symlink(&victim, pool.join("scrub.tmp")).unwrap();
        let f = pool.join("scrub.pos");
        let at = ScrubPos { ino: 9, block: 2 };
        save_position(&f, &[1; 16], &[], at).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"root's");
        assert_eq!(load_position(&f, &[1; 16], &[]).unwrap(), Some(at));
        assert!(std::fs::symlink_metadata(pool.join("scrub.tmp")).is_err());
        std::fs::remove_file(&f).unwrap();
        std::os::unix::fs::symlink(&victim, &f).unwrap();
        save_position(&f, &[1; 16], &[], at).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"root's");
        assert!(std::fs::symlink_metadata(&f).unwrap().is_file());
    }

    #[test]
    fn position_files_round_trip_and_refuse_damage() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("scrub.pos");
        let id = [0xab; 16];
        assert_eq!(load_position(&f, &id, &[]).unwrap(), None);
        save_position(&f, &id, &[3, 1], ScrubPos { ino: 42, block: 7 }).unwrap();
        assert_eq!(load_position(&f, &id, &[1, 3]).unwrap(), Some(ScrubPos { ino: 42, block: 7 }));
        // Another pool's or another rebuild's position is not used.
        assert_eq!(load_position(&f, &[1; 16], &[1, 3]).unwrap(), None);
        assert_eq!(load_position(&f, &id, &[]).unwrap(), None);
        let good = std::fs::read_to_string(&f).unwrap();
        let bad = [
            good.replace("block 7", "block 7x"),
            good.replace("block 7", "block -7"),
            good.replace("inode 42", "inode"),
            good.replace("rebuild 1,3", "rebuild 1,,3"),
            good.replace(&hex(&id), "abab"),
            format!("{good}extra\n"),
            good.trim_end().to_string(),
            good.replace("position 1", "position 9"),
            good.replace("block 7", &format!("block {}", u64::MAX)),
            good.replace("rebuild 1,3", "rebuild 3,1"),
            good.replace("rebuild 1,3", "rebuild 1,1,3"),
            good.replace("inode 42", "inode 042"),
            good.replace("block 7", "block +7"),
            good.replace('\n', "\r\n"),
            String::new(),
        ];
        for b in bad {
            std::fs::write(&f, &b).unwrap();
            let e = load_position(&f, &id, &[1, 3]).unwrap_err().to_string();
            assert!(e.contains("scrub.pos"), "{b:?}: {e}");
        }
    }
}
