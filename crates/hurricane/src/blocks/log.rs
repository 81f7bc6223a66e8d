//! `log`: a per-device block that never writes in place (HFS 3.2, "write
//! wherever the head is"; the log-structured layout of Rosenblum and
//! Ousterhout's LFS and Seltzer's BSD-LFS). Every write, new data and
//! overwrites alike, goes to the device's *head*: the next free blocks of
//! the segment it is filling, shared by every log file on the device, so
//! small random writes of many files become one sequential stream. The
//! blocks a write replaces are freed once its batch commits (the old data
//! stays intact until then, so a crash finds either mapping whole).
//!
//! Device-wide state ([`LogSpace`], one per device, kept on its handle):
//! the heads (three per segment size: plain writes, transaction commits,
//! the cleaner's moves), the *segment usage table* (live blocks and last
//! write time of each segment-aligned region) and the index of owners
//! (device block -> inode, node, file block) the cleaner (`fs/clean.rs`)
//! uses to move live blocks out of a segment. Both follow every write,
//! truncate and punch. The usage table is stored with each checkpoint and
//! loaded at open; the owner index is derived from the files' maps (the
//! persistent truth, journalled like `extent`'s) by the cleaner's walk
//! after open ([`Block::register`]), which counts the live blocks again.
//!
//! Plain writes go behind segment summaries (`summary.rs`), so that
//! roll-forward (`fs/rollforward.rs`) finds after a crash what reached the
//! disk after the journal's last record.
//!
//! Concurrency: the map lock is held while runs are looked up, replaced or
//! dropped, never during data I/O. A write takes its blocks at the head
//! (under the space's lock), notes them *in flight*, writes the data
//! unlocked, then publishes the new runs, replacing the old ones. Until
//! then reads see the old data. A truncate or punch that runs meanwhile
//! trims the in-flight pieces it covers, and the writer frees what was
//! trimmed instead of publishing it (a plain write once its batch commits:
//! its blocks lie in a chain roll-forward may walk until then).

mod summary;

pub use summary::{walk, Anchor, Found, Summary};

use super::common::span;
use super::extent::{decode_runs, read_segs, Change, Map, Seg};
use super::{Block, BlockType, BuildArgs, IoCtx, ParamKind, ParamSpec, Params, Value, BLOCK_SIZE};
use crate::codec::Encoder;
use crate::device::DeviceHandle;
use crate::error::{Error, Result};
use crate::pool::Allocator;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

pub static TYPE: BlockType = BlockType {
    name: "log",
    doc: "Log-structured: every write (overwrites too) goes to the device's current segment, shared by all log files on it; a cleaner compacts segments.",
    params: &[ParamSpec {
        key: "segment",
        kind: ParamKind::Size,
        default: Some("1M"),
        min: 64 << 10,
        max: 256 << 20,
        doc: "segment size: the unit the head fills and the cleaner frees",
    }],
    per_device: true,
    min_children: 0,
    max_children: 0,
    distinct_devices: false,
    width_param: None,
    implied_width: None,
    state_version: Some(1),
    in_metadata: false,
    build,
};

/// Longest run one map entry holds (as `extent`'s default).
const MAX_RUN: u64 = (128 << 20) / BLOCK_SIZE as u64;

/// Plain pieces up to this many blocks go down with their summary in one
/// request (copied behind it); longer ones in two.
const SMALL_PIECE: u64 = 32;

/// Whole clean segments user writes leave to the cleaner: below this many
/// the head takes what free runs there are (from the device's end, as it
/// takes segments, so the log leaves the space at the start whole for the
/// meta-file and contiguous files) and the space reports itself low, so
/// writers clean first. A small device leaves fewer ([`reserve_segments`]).
pub const RESERVE_SEGMENTS: usize = 4;

/// Clean segments under which the background cleaner starts (before the
/// writers would have to wait for it at [`RESERVE_SEGMENTS`]), as a
/// multiple of the device's reserve.
pub const CLEAN_START: usize = 4 * RESERVE_SEGMENTS;

/// Segments of `seg` blocks a log's writers leave to the cleaner on the
/// device `alloc` allocates: [`RESERVE_SEGMENTS`], but no more than a
/// sixteenth of the device, and at least one. One is enough for the
/// cleaner to always empty a segment that is not full: with a segment's
/// worth of free blocks on the device, the blocks free outside the
/// emptiest segment are at least as many as the live ones in it. Four of
/// 1 MiB would be half of an 8 MiB device: its writers would be refused
/// for space with half of it free.
pub fn reserve_segments(alloc: &Allocator, seg: u64) -> usize {
    let sixteenth = alloc.total_blocks() / 16 / seg.max(1);
    (sixteenth.min(RESERVE_SEGMENTS as u64) as usize).max(1)
}

struct Log {
    id: u32,
    dev: u32,
    /// Segment size in blocks.
    seg: u64,
    map: RwLock<Map>,
    inflight: Mutex<Inflight>,
}

/// Pieces written but not yet published: (token, file block, device block, len).
#[derive(Default)]
struct Inflight {
    next: u64,
    pieces: Vec<(u64, u64, u64, u64)>,
}

impl Inflight {
    /// Drops [from, to) from the pieces in flight (a truncate or punch).
    fn trim(&mut self, from: u64, to: u64) {
        let mut out = Vec::with_capacity(self.pieces.len());
        for &(t, f, p, l) in &self.pieces {
            let e = f + l;
            if e <= from || f >= to {
                out.push((t, f, p, l));
                continue;
            }
            if f < from {
                out.push((t, f, p, from - f));
            }
            if e > to {
                out.push((t, to, p + (to - f), e - to));
            }
        }
        self.pieces = out;
    }
}

fn build(a: BuildArgs) -> Result<Arc<dyn Block>> {
    let bytes = a.params.num("segment")?;
    if !bytes.is_multiple_of(BLOCK_SIZE as u64) {
        return Err(Error::Layout(format!("log: segment={bytes} is not a multiple of 4K")));
    }
    let mut map = Map::default();
    if let Some(s) = a.state {
        map.runs = decode_runs(s, MAX_RUN)?;
    }
    Ok(Arc::new(Log {
        id: a.id,
        dev: a.device.unwrap_or_default(),
        seg: bytes / BLOCK_SIZE as u64,
        map: RwLock::new(map),
        inflight: Mutex::default(),
    }))
}

/// Who holds a run of log blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub ino: u64,
    /// The node's preorder id in the file's layout.
    pub node: u32,
    pub fblk: u64,
    pub len: u64,
    /// Segment size (blocks) of the node: which usage table entry counts it.
    pub seg: u64,
}

/// One segment's entry in the usage table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegUse {
    /// Live log blocks in it.
    pub live: u64,
    /// Last time blocks were written to it (ns since the epoch; the open
    /// time for blocks found by the walk after open).
    pub mtime: i64,
}

/// A segment the cleaner may clean.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    /// Size and first device block.
    pub seg: u64,
    pub start: u64,
    pub usage: SegUse,
}

/// Counters of one device's log.
#[derive(Debug, Default)]
pub struct LogStats {
    /// Blocks written by files (not counting the cleaner's).
    pub written: AtomicU64,
    /// Blocks the cleaner moved.
    pub moved: AtomicU64,
    /// Segments the cleaner emptied.
    pub cleaned: AtomicU64,
    /// Of those, the ones the background cleaner emptied (no writer waited).
    pub background: AtomicU64,
    /// Segments the heads took.
    pub taken: AtomicU64,
    /// Summary blocks written in front of plain writes.
    pub summaries: AtomicU64,
}

/// A head: the run being filled, [next, end), and for a head of plain
/// writes the run it goes on to (taken by the piece that spends the run,
/// so that piece's summary, the run's last, can name it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head {
    next: u64,
    end: u64,
    then: Option<(u64, u64)>,
}

/// Which head a write goes to: plain writes (each piece behind a summary,
/// see `summary.rs`); a transaction's commit (its journal record names and
/// verifies what it wrote); the cleaner's moves (they copy what the
/// meta-data holds already, and blocks that outlived their segment go on
/// living: kept apart from new writes, they fill segments that stay full,
/// and new writes fill segments that empty fast).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Class {
    Plain,
    Commit,
    Moved,
}

const CLASSES: [Class; 3] = [Class::Plain, Class::Commit, Class::Moved];

/// The chain of one plain head: the nonce its summaries carry now and the
/// place the journal last recorded.
#[derive(Debug, Default)]
struct Chain {
    nonce: u64,
    anchored: Option<Head>,
}

#[derive(Default)]
struct Space {
    /// (segment size, first block) -> usage.
    segs: BTreeMap<(u64, u64), SegUse>,
    /// (segment size, class) -> its head.
    heads: HashMap<(u64, Class), Head>,
    /// Segment size -> the chain of its plain head.
    chains: HashMap<u64, Chain>,
    /// First device block of a run -> its owner: every live log block
    /// placed since open, and after the walk every one.
    owners: BTreeMap<u64, Owner>,
    /// Runs roll-forward holds while it writes what they hold again.
    held: Vec<(u64, u64)>,
    /// Usage entries changed since the last checkpoint took them.
    dirty: BTreeSet<(u64, u64)>,
}

/// Where one piece of a write goes: file blocks [f, f+l) at device blocks
/// [p, p+l), behind a summary for a plain write.
#[derive(Debug, Clone, Copy)]
struct Piece {
    f: u64,
    p: u64,
    l: u64,
    sum: Option<SumAt>,
}

/// A piece's summary block and what it will say besides the data's crc.
#[derive(Debug, Clone, Copy)]
struct SumAt {
    at: u64,
    nonce: u64,
    order: u64,
    run_end: u64,
    then: Option<(u64, u64)>,
}

/// Orders the pieces of every log in the process (roll-forward applies
/// pieces found on several devices in this order).
static ORDER: AtomicU64 = AtomicU64::new(1);

/// The log's state for one device (see the module's text).
#[derive(Default)]
pub struct LogSpace {
    inner: Mutex<Space>,
    pub stats: LogStats,
    /// Whole clean segments fell under [`RESERVE_SEGMENTS`] when a head
    /// last took one: writers should clean first.
    low: AtomicBool,
    /// They fell under [`CLEAN_START`]: the background cleaner should run.
    wants: AtomicBool,
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

impl LogSpace {
    /// The space of device `h`, made on first use.
    pub fn of(h: &DeviceHandle) -> Arc<LogSpace> {
        h.shared(LogSpace::default)
    }

    pub fn is_low(&self) -> bool {
        self.low.load(Ordering::Acquire)
    }

    /// Blocks the log's writers leave free for the cleaner to move live
    /// blocks into on the device `alloc` allocates: the reserve of its
    /// largest segments ([`reserve_segments`]; 0 before any write).
    pub fn cleaner_reserve(&self, alloc: &Allocator) -> u64 {
        let seg = self.inner.lock().heads.keys().map(|k| k.0).max().unwrap_or(0);
        if seg == 0 {
            return 0;
        }
        reserve_segments(alloc, seg) as u64 * seg
    }

    /// Blocks the heads hold and have not handed out yet.
    pub fn head_room(&self) -> u64 {
        let mut n = 0;
        self.unused(&mut |_, l| n += l);
        n
    }

    /// Whether the free space of the device (`alloc`) is down to twice the
    /// cleaner's reserve: writers clean before they write (the throttle).
    pub fn short_of_space(&self, alloc: &Allocator) -> bool {
        let r = self.cleaner_reserve(alloc);
        r > 0 && alloc.free_for_data() < 2 * r
    }

    pub fn clear_low(&self) {
        self.low.store(false, Ordering::Release);
    }

    /// Whether clean segments fell under [`CLEAN_START`] when a head last
    /// took one (the background cleaner's cue).
    pub fn wants_cleaning(&self) -> bool {
        self.wants.load(Ordering::Acquire)
    }

    /// After a cleaner pass: the heads count clean segments afresh.
    pub fn cleaned(&self) {
        self.wants.store(false, Ordering::Release);
        self.low.store(false, Ordering::Release);
    }

    /// Counts `n` blocks at `p` (of a node with `seg`-block segments) as
    /// live (+) or dead (-) in the usage table.
    /// A segment new to the table is stamped now; `t` restamps the ones it
    /// touches.
    fn count(s: &mut Space, seg: u64, p: u64, n: u64, live: bool, t: Option<i64>) {
        per_segment(seg, p, n, |start, k| {
            s.dirty.insert((seg, start));
            let u = s.segs.entry((seg, start)).or_insert_with(|| SegUse { live: 0, mtime: now() });
            if live {
                u.live += k;
            } else {
                u.live = u.live.saturating_sub(k);
            }
            if let Some(t) = t {
                u.mtime = t;
            }
            if u.live == 0 && !Self::filling(s, seg, start) {
                s.segs.remove(&(seg, start));
            }
        });
    }

    /// Whether a head is still filling segment (`seg`, `start`).
    fn filling(s: &Space, seg: u64, start: u64) -> bool {
        CLASSES
            .iter()
            .any(|&c| s.heads.get(&(seg, c)).is_some_and(|h| h.next < h.end && start < h.end && start + seg > h.next))
    }

    /// The places of the plain heads that moved since the journal last
    /// recorded them, each with a fresh nonce for the summaries written
    /// after it (called while a batch is captured: the batch records them).
    pub fn anchors(&self, dev: u32) -> Vec<Anchor> {
        let mut s = self.inner.lock();
        let heads: Vec<(u64, Head)> =
            s.heads.iter().filter(|(k, _)| k.1 == Class::Plain).map(|(k, &h)| (k.0, h)).collect();
        let mut out = Vec::new();
        for (seg, h) in heads {
            let c = s.chains.entry(seg).or_default();
            if c.anchored != Some(h) {
                c.nonce = rand::random();
                c.anchored = Some(h);
                out.push(Anchor { dev, seg, next: h.next, end: h.end, then: h.then, nonce: c.nonce });
            }
        }
        out
    }

    /// Notes runs roll-forward took from the allocator to read: until
    /// [`LogSpace::release_held`], they count as unused (a checkpoint
    /// records them free, so a crash before roll-forward commits finds
    /// them as they were).
    pub fn hold(&self, runs: &[(u64, u64)]) {
        self.inner.lock().held.extend_from_slice(runs);
    }

    /// Gives the held runs back to `alloc`.
    pub fn release_held(&self, alloc: &Allocator) {
        for (p, l) in std::mem::take(&mut self.inner.lock().held) {
            alloc.free_now(p, l);
        }
    }

    /// After a checkpoint emptied the journal: the next batch records every
    /// plain head again.
    pub fn forget_anchors(&self) {
        for c in self.inner.lock().chains.values_mut() {
            c.anchored = None;
        }
    }

    /// Takes a run for a head of `seg`-block segments: a whole clean
    /// segment while more than the device's reserve ([`reserve_segments`])
    /// are left (or for the cleaner), else the highest free run, leaving
    /// the cleaner room for a pass. Sets the low and wants-cleaning flags.
    /// Runs shorter than `min` are skipped.
    fn take_run(&self, alloc: &Allocator, seg: u64, cleaning: bool, min: u64) -> Option<(u64, u64)> {
        let reserve = reserve_segments(alloc, seg);
        let start = CLEAN_START / RESERVE_SEGMENTS * reserve;
        // Once low, the count is taken again only after a cleaner pass
        // (which clears the flag): counting walks the free map, and a head
        // that lives on free runs comes back for another at every few
        // writes.
        let clean = if self.is_low() && !cleaning { 0 } else { alloc.aligned_free(seg, start + 1) };
        self.low.store(clean <= reserve, Ordering::Release);
        if clean <= start {
            self.wants.store(true, Ordering::Release);
        }
        let run = if cleaning || clean > reserve { alloc.alloc_aligned(seg, false).map(|a| (a, seg)) } else { None };
        let keep = if cleaning { 0 } else { reserve as u64 * seg };
        let mut short = Vec::new();
        let mut got = run;
        while got.is_none() && short.len() < 16 {
            match alloc.alloc_top_keeping(seg, keep) {
                Some((a, l)) if l < min => short.push((a, l)),
                r => {
                    got = r;
                    break;
                }
            }
        }
        for (a, l) in short {
            alloc.free_now(a, l);
        }
        match got {
            Some(_) => self.stats.taken.fetch_add(1, Ordering::Relaxed),
            None => {
                self.low.store(true, Ordering::Release);
                0
            }
        };
        got
    }

    /// Takes blocks at the head for file blocks [o.fblk, o.fblk+o.len) of
    /// node `o.node` of inode `o.ino`. A plain write (`summarized`) puts a
    /// summary block in front of each piece. The cleaner's moves
    /// (`cleaning`) may use the clean segments writers leave it. Fails
    /// (placing nothing) when the device is full.
    fn place(&self, alloc: &Allocator, o: Owner, cleaning: bool, summarized: bool) -> Result<Vec<Piece>> {
        let Owner { ino, node, fblk, len: n, seg } = o;
        let class = match (cleaning, summarized) {
            (true, _) => Class::Moved,
            (false, true) => Class::Plain,
            (false, false) => Class::Commit,
        };
        // A plain piece needs room for its summary and one data block.
        let need = if summarized { 2 } else { 1 };
        let mut s = self.inner.lock();
        let t = now();
        let mut out: Vec<Piece> = Vec::new();
        let mut done = 0;
        while done < n {
            let head = match s.heads.get(&(seg, class)).copied() {
                Some(h) if h.end - h.next >= need => h,
                old => {
                    // What is left of the run (one block at most) goes back.
                    if let Some(h) = old.filter(|h| h.next < h.end) {
                        alloc.free_now(h.next, h.end - h.next);
                    }
                    let ahead = old.and_then(|h| h.then).filter(|_| summarized);
                    let run = match ahead {
                        Some(r) => Some(r),
                        None => self.take_run(alloc, seg, cleaning, need),
                    };
                    let Some((a, len)) = run else {
                        s.heads.remove(&(seg, class));
                        drop(s);
                        for x in &out {
                            self.unplace(alloc, x.p, x.l, seg);
                            if let Some(sa) = x.sum {
                                alloc.free_now(sa.at, 1);
                            }
                        }
                        return Err(Error::NoSpace(format!("log: device full ({n} blocks to place)")));
                    };
                    let h = Head { next: a, end: a + len, then: None };
                    s.heads.insert((seg, class), h);
                    // The head's segments stay in the table while it fills them.
                    let mut pos = a;
                    while pos < a + len {
                        let st = pos - pos % seg;
                        s.segs.entry((seg, st)).or_default().mtime = t;
                        s.dirty.insert((seg, st));
                        pos = st + seg;
                    }
                    h
                }
            };
            let mut head = head;
            let (sum, p, k) = if summarized {
                let nonce =
                    s.chains.entry(seg).or_insert_with(|| Chain { nonce: rand::random(), anchored: None }).nonce;
                let k = (n - done).min(head.end - head.next - 1);
                // The piece that spends the run takes the next one, so that
                // its summary (the last of the run) can name it.
                if head.then.is_none() && head.end - (head.next + 1 + k) < need {
                    head.then = self.take_run(alloc, seg, cleaning, need);
                }
                let order = ORDER.fetch_add(1, Ordering::Relaxed);
                let sum = SumAt { at: head.next, nonce, order, run_end: head.end, then: head.then };
                (Some(sum), head.next + 1, k)
            } else {
                (None, head.next, (n - done).min(head.end - head.next))
            };
            s.heads.insert((seg, class), Head { next: p + k, ..head });
            s.owners.insert(p, Owner { ino, node, fblk: fblk + done, len: k, seg });
            Self::count(&mut s, seg, p, k, true, Some(t));
            match out.last_mut() {
                Some(last) if sum.is_none() && last.f + last.l == fblk + done && last.p + last.l == p => last.l += k,
                _ => out.push(Piece { f: fblk + done, p, l: k, sum }),
            }
            done += k;
        }
        let c = if cleaning { &self.stats.moved } else { &self.stats.written };
        c.fetch_add(n, Ordering::Relaxed);
        Ok(out)
    }

    /// Gives back blocks placed and never published (nothing recorded them).
    fn unplace(&self, alloc: &Allocator, p: u64, l: u64, seg: u64) {
        self.dead(p, l, seg);
        alloc.free_now(p, l);
    }

    /// Device blocks [p, p+n) of a node with `seg`-block segments no longer
    /// hold live data.
    fn dead(&self, p: u64, n: u64, seg: u64) {
        let mut s = self.inner.lock();
        Self::unown(&mut s, p, n);
        Self::count(&mut s, seg, p, n, false, None);
    }

    /// Drops the owner entries of [p, p+n), keeping the parts outside.
    fn unown(s: &mut Space, p: u64, n: u64) {
        let end = p + n;
        let first = match s.owners.range(..=p).next_back() {
            Some((&k, o)) if k + o.len > p => k,
            _ => p,
        };
        let hit: Vec<(u64, Owner)> = s.owners.range(first..end).map(|(&k, &o)| (k, o)).collect();
        for (k, o) in hit {
            s.owners.remove(&k);
            if k < p {
                s.owners.insert(k, Owner { len: p - k, ..o });
            }
            if k + o.len > end {
                s.owners.insert(end, Owner { fblk: o.fblk + (end - k), len: k + o.len - end, ..o });
            }
        }
    }

    /// Enters a run found in a node's map (the walk after open): counted
    /// once, however often it is entered.
    fn register(&self, o: Owner, p: u64) {
        let mut s = self.inner.lock();
        if s.owners.get(&p) == Some(&o) {
            return;
        }
        // What the index held there before is replaced.
        let old: Vec<(u64, Owner)> = {
            let first = match s.owners.range(..=p).next_back() {
                Some((&k, x)) if k + x.len > p => k,
                _ => p,
            };
            s.owners.range(first..p + o.len).map(|(&k, &x)| (k, x)).collect()
        };
        for (k, x) in old {
            let from = k.max(p);
            let to = (k + x.len).min(p + o.len);
            Self::unown(&mut s, from, to - from);
            Self::count(&mut s, x.seg, from, to - from, false, None);
        }
        s.owners.insert(p, o);
        // Segments keep their ages (the stored table's, or those of writes
        // since open).
        Self::count(&mut s, o.seg, p, o.len, true, None);
    }

    /// Enters the usage table the last checkpoint stored: (segment size,
    /// first block, usage). Before the walk of the files the live counts
    /// are the checkpoint's, moved on by replay ([`LogSpace::replayed`]).
    pub fn load_usage(&self, entries: impl IntoIterator<Item = (u64, u64, SegUse)>) {
        let mut s = self.inner.lock();
        for (seg, start, u) in entries {
            s.segs.insert((seg, start), u);
        }
    }

    /// Journal replay mapped (`live`) or dropped device blocks [p, p+n) of
    /// a node with `seg`-block segments after the checkpoint.
    pub fn replayed(&self, seg: u64, p: u64, n: u64, live: bool) {
        let mut s = self.inner.lock();
        Self::count(&mut s, seg, p, n, live, live.then(now));
    }

    /// The usage entries that changed since the last call, as they are
    /// now (`None`: gone), for a checkpoint to store.
    pub fn usage_changes(&self) -> Vec<((u64, u64), Option<SegUse>)> {
        let mut s = self.inner.lock();
        let keys = std::mem::take(&mut s.dirty);
        keys.into_iter().map(|k| (k, s.segs.get(&k).copied())).collect()
    }

    /// A checkpoint that took `keys` did not commit: the next one takes
    /// them again.
    pub fn usage_unsaved(&self, keys: impl IntoIterator<Item = (u64, u64)>) {
        self.inner.lock().dirty.extend(keys);
    }

    /// Before the walk of the files: every live count is taken again from
    /// the owner index (what was placed since open), and the walk adds the
    /// rest; the segments keep their ages. Segments left with nothing live
    /// after the walk are dropped by [`LogSpace::walked`].
    pub fn walking(&self) {
        let mut s = self.inner.lock();
        let s = &mut *s;
        let mut fresh: BTreeMap<(u64, u64), u64> = BTreeMap::new();
        for (&p, o) in &s.owners {
            per_segment(o.seg, p, o.len, |start, k| *fresh.entry((o.seg, start)).or_default() += k);
        }
        // Only the entries whose count changes go to the next checkpoint.
        for (&key, u) in s.segs.iter_mut() {
            let live = fresh.remove(&key).unwrap_or(0);
            if u.live != live {
                u.live = live;
                s.dirty.insert(key);
            }
        }
        let t = now();
        for (key, live) in fresh {
            s.segs.insert(key, SegUse { live, mtime: t });
            s.dirty.insert(key);
        }
    }

    /// After the walk: segments with nothing live and no head filling them
    /// leave the table.
    pub fn walked(&self) {
        let mut s = self.inner.lock();
        let empty: Vec<(u64, u64)> = s
            .segs
            .iter()
            .filter(|&(&(seg, st), u)| u.live == 0 && !Self::filling(&s, seg, st))
            .map(|(&k, _)| k)
            .collect();
        for k in empty {
            s.segs.remove(&k);
            s.dirty.insert(k);
        }
    }

    /// Segments worth cleaning: every one not being filled by a head whose
    /// live blocks do not fill it.
    pub fn candidates(&self) -> Vec<Candidate> {
        let s = self.inner.lock();
        s.segs
            .iter()
            .filter(|(&(seg, start), u)| u.live < seg && !Self::filling(&s, seg, start))
            .map(|(&(seg, start), &usage)| Candidate { seg, start, usage })
            .collect()
    }

    /// The owners of the live blocks in segment (`seg`, `start`):
    /// (device block, owner), clipped to the segment.
    pub fn owners_in(&self, seg: u64, start: u64) -> Vec<(u64, Owner)> {
        let s = self.inner.lock();
        let end = start + seg;
        let first = match s.owners.range(..=start).next_back() {
            Some((&k, o)) if k + o.len > start => k,
            _ => start,
        };
        s.owners
            .range(first..end)
            .filter(|(_, o)| o.seg == seg)
            .map(|(&k, &o)| {
                let from = k.max(start);
                let to = (k + o.len).min(end);
                (from, Owner { fblk: o.fblk + (from - k), len: to - from, ..o })
            })
            .collect()
    }

    /// The whole usage table: (segment size, first block, usage), in order.
    pub fn usage_table(&self) -> Vec<(u64, u64, SegUse)> {
        self.inner.lock().segs.iter().map(|(&(seg, st), &u)| (seg, st, u)).collect()
    }

    /// The usage of one segment.
    pub fn usage(&self, seg: u64, start: u64) -> Option<SegUse> {
        self.inner.lock().segs.get(&(seg, start)).copied()
    }

    /// Segments in the table and live blocks in them.
    pub fn totals(&self) -> (usize, u64) {
        let s = self.inner.lock();
        (s.segs.len(), s.segs.values().map(|u| u.live).sum())
    }

    /// Blocks the heads hold and have not handed out: free as far as the
    /// meta-data knows (a checkpoint records them so).
    pub fn unused(&self, f: &mut dyn FnMut(u64, u64)) {
        let s = self.inner.lock();
        for &(p, l) in &s.held {
            f(p, l);
        }
        for h in s.heads.values() {
            if h.next < h.end {
                f(h.next, h.end - h.next);
            }
            if let Some((a, l)) = h.then {
                f(a, l);
            }
        }
    }
}

/// Calls `f(segment start, blocks)` for each `seg`-block segment that
/// device blocks [p, p+n) cross.
fn per_segment(seg: u64, p: u64, n: u64, mut f: impl FnMut(u64, u64)) {
    let mut pos = p;
    while pos < p + n {
        let start = pos - pos % seg;
        let k = (start + seg).min(p + n) - pos;
        f(start, k);
        pos += k;
    }
}

/// A run of a log node's blocks: (device, segment size, first block, length).
pub type Run = (u32, u64, u64, u64);

/// Calls `f` for every run of every `log` node of `lay`.
pub fn runs(lay: &super::Layout, f: &mut dyn FnMut(Run)) {
    for n in lay.nodes().iter().filter(|n| n.kind().name == TYPE.name) {
        let seg = match n.params().0.get("segment") {
            Some(Value::Num(b)) => b / BLOCK_SIZE as u64,
            _ => continue,
        };
        n.extents(&mut |d, p, l| f((d, seg, p, l)));
    }
}

/// Moves the usage tables of `storage`'s devices on by what journal replay
/// changed in one file: its log runs were `was` at the checkpoint and are
/// `now`. Runs in both lists are left alone (their segments keep their
/// ages).
pub fn replayed(storage: &crate::pool::Storage, was: &[Run], now: &[Run]) {
    let (mut was, mut now) = (was.to_vec(), now.to_vec());
    was.sort_unstable();
    now.sort_unstable();
    let gone: Vec<Run> = was.iter().filter(|r| now.binary_search(r).is_err()).copied().collect();
    let new: Vec<Run> = now.iter().filter(|r| was.binary_search(r).is_err()).copied().collect();
    for (runs, live) in [(gone, false), (new, true)] {
        for (d, seg, p, l) in runs {
            if let Some(h) = storage.devs.get(d as usize) {
                LogSpace::of(h).replayed(seg, p, l, live);
            }
        }
    }
}

/// The parts of device range [p, p+l) that no range of `covered` (sorted)
/// overlaps.
fn uncovered(p: u64, l: u64, covered: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut pos = p;
    for &(cp, cl) in covered.iter().filter(|&&(cp, cl)| cp < p + l && cp + cl > p) {
        if cp > pos {
            out.push((pos, cp - pos));
        }
        pos = pos.max(cp + cl);
    }
    if pos < p + l {
        out.push((pos, p + l - pos));
    }
    out
}

impl Log {
    fn handle<'a>(&self, io: &'a IoCtx) -> Result<&'a DeviceHandle> {
        io.storage
            .devs
            .get(self.dev as usize)
            .ok_or_else(|| Error::Device(format!("log@{}: no such device in the pool", self.dev)))
    }

    fn alloc<'a>(&self, io: &'a IoCtx) -> Result<&'a Allocator> {
        io.storage.allocs.get(self.dev as usize).ok_or_else(|| Error::Device(format!("log@{}: no allocator", self.dev)))
    }

    /// Replaces the map of [f, f+l) with [p, p+l): the old blocks are
    /// freed once the batch commits, the change recorded.
    fn publish(&self, io: &IoCtx, m: &mut Map, space: &LogSpace, (f, p, l): Seg) {
        let c = Change::Map { fblk: f, pblk: p, len: l };
        for (op, ol) in m.apply(c, MAX_RUN) {
            space.dead(op, ol, self.seg);
            io.free(self.dev, op, ol);
        }
        io.record(&TYPE, self.id, &c.encode());
    }

    /// A write of `buf`, or of zeros with `None`: placed at the head,
    /// written unlocked, then published.
    fn put(&self, io: &IoCtx, fblk: u64, n: u64, buf: Option<&[u8]>, cleaning: bool) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let dev = self.handle(io)?;
        dev.check_writable()?;
        let alloc = self.alloc(io)?;
        let space = LogSpace::of(dev);
        let who = Owner { ino: io.owner, node: self.id, fblk, len: n, seg: self.seg };
        // Plain writes go behind summaries; a transaction's commit (which
        // its journal record names for recovery) and the cleaner's moves do
        // not.
        let summarized = !cleaning && !crate::device::in_verified_scope();
        let pieces = space.place(alloc, who, cleaning, summarized)?;
        let token = {
            let mut fl = self.inflight.lock();
            fl.next += 1;
            let t = fl.next;
            fl.pieces.extend(pieces.iter().map(|x| (t, x.f, x.p, x.l)));
            t
        };
        let mut res = Ok(());
        for x in &pieces {
            let start = (x.f - fblk) as usize * BLOCK_SIZE;
            let data = buf.map(|b| &b[start..start + x.l as usize * BLOCK_SIZE]);
            res = match x.sum {
                Some(sa) => self.write_piece(dev, &space, who, x, sa, data),
                None => match data {
                    Some(d) => dev.write_blocks(x.p, d),
                    None => dev.zero_blocks(x.p, x.l),
                },
            };
            if res.is_err() {
                break;
            }
        }
        let mut m = self.map.write();
        let mine: Vec<Seg> = {
            let mut fl = self.inflight.lock();
            let (mine, rest): (Vec<_>, Vec<_>) = fl.pieces.drain(..).partition(|x| x.0 == token);
            fl.pieces = rest;
            mine.into_iter().map(|(_, f, p, l)| (f, p, l)).collect()
        };
        let mut kept: Vec<(u64, u64)> = Vec::new();
        if res.is_ok() {
            for &(f, p, l) in &mine {
                self.publish(io, &mut m, &space, (f, p, l));
                kept.push((p, l));
            }
        }
        // What was placed and not published (trimmed by a truncate or punch
        // meanwhile, or all of it on failure) goes back: nothing recorded
        // it. A plain write's blocks (and every summary) lie in the chain
        // roll-forward may walk, so they are freed only once the batch
        // commits, when a newer anchor stands past them.
        kept.sort_unstable();
        for x in &pieces {
            for (gp, gl) in uncovered(x.p, x.l, &kept) {
                if summarized {
                    space.dead(gp, gl, self.seg);
                    io.free(self.dev, gp, gl);
                } else {
                    space.unplace(alloc, gp, gl, self.seg);
                }
            }
            if let Some(sa) = x.sum {
                io.free(self.dev, sa.at, 1);
            }
        }
        res
    }

    /// Writes a plain piece: its summary, then its data (one request for a
    /// small piece).
    fn write_piece(
        &self,
        dev: &DeviceHandle,
        space: &LogSpace,
        who: Owner,
        x: &Piece,
        sa: SumAt,
        data: Option<&[u8]>,
    ) -> Result<()> {
        let sum = Summary {
            nonce: sa.nonce,
            order: sa.order,
            ino: who.ino,
            node: self.id,
            seg: self.seg,
            fblk: x.f,
            len: x.l,
            run_end: sa.run_end,
            then: sa.then,
            data_crc: match data {
                Some(d) => crc32c::crc32c(d),
                None => summary::zeros_crc(x.l),
            },
        };
        let block = sum.encode();
        space.stats.summaries.fetch_add(1, Ordering::Relaxed);
        match data {
            Some(d) if x.l <= SMALL_PIECE => {
                let mut b = Vec::with_capacity(BLOCK_SIZE + d.len());
                b.extend_from_slice(&block);
                b.extend_from_slice(d);
                dev.write_blocks(sa.at, &b)
            }
            Some(d) => {
                dev.write_blocks(sa.at, &block)?;
                dev.write_blocks(x.p, d)
            }
            None => {
                dev.write_blocks(sa.at, &block)?;
                dev.zero_blocks(x.p, x.l)
            }
        }
    }

    /// Applies a truncate or punch: drops the mappings, frees their space
    /// once the batch commits, trims what is in flight, records the change
    /// if it dropped anything.
    fn drop_mappings(&self, io: &IoCtx, c: Change, from: u64, to: u64) {
        let mut m = self.map.write();
        self.inflight.lock().trim(from, to);
        let freed = m.apply(c, MAX_RUN);
        if freed.is_empty() {
            return;
        }
        let space = io.storage.devs.get(self.dev as usize).map(LogSpace::of);
        for (p, l) in freed {
            if let Some(s) = &space {
                s.dead(p, l, self.seg);
            }
            io.free(self.dev, p, l);
        }
        io.record(&TYPE, self.id, &c.encode());
    }
}

impl Block for Log {
    fn id(&self) -> u32 {
        self.id
    }
    fn kind(&self) -> &'static BlockType {
        &TYPE
    }
    fn params(&self) -> Params {
        let mut p = Params::default();
        p.0.insert("segment".into(), Value::Num(self.seg * BLOCK_SIZE as u64));
        p
    }
    fn device(&self) -> Option<u32> {
        Some(self.dev)
    }

    fn read(&self, io: &IoCtx, fblk: u64, buf: &mut [u8]) -> Result<()> {
        let n = span(fblk, buf.len())?;
        let dev = self.handle(io)?;
        let segs = self.map.read().segments(fblk, fblk + n);
        read_segs(dev, &segs, fblk, buf)
    }

    fn write(&self, io: &IoCtx, fblk: u64, buf: &[u8]) -> Result<()> {
        self.put(io, fblk, span(fblk, buf.len())?, Some(buf), false)
    }

    fn write_zeroes(&self, io: &IoCtx, fblk: u64, n: u64) -> Result<()> {
        fblk.checked_add(n).ok_or_else(|| Error::TooBig(format!("block {fblk} + {n}")))?;
        self.put(io, fblk, n, None, false)
    }

    fn truncate(&self, io: &IoCtx, nblocks: u64) -> Result<()> {
        self.drop_mappings(io, Change::Truncate { from: nblocks }, nblocks, u64::MAX);
        Ok(())
    }

    fn overwrites_in_place(&self) -> bool {
        false
    }

    fn punch(&self, io: &IoCtx, fblk: u64, n: u64) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let end =
            fblk.checked_add(n).ok_or_else(|| Error::TooBig(format!("log node {}: punch {fblk}+{n}", self.id)))?;
        self.drop_mappings(io, Change::Punch { fblk, len: n }, fblk, end);
        Ok(())
    }

    fn encode_state(&self, e: &mut Encoder) {
        let m = self.map.read();
        e.u32(m.runs.len() as u32);
        for (&f, &(p, l)) in &m.runs {
            e.u64(f).u64(p).u64(l);
        }
    }

    fn apply(&self, payload: &[u8]) -> Result<()> {
        let c = Change::decode(payload, self.id, MAX_RUN)?;
        if matches!(c, Change::Shift { .. }) {
            return Err(Error::corrupt("journal", format!("log node {}: a shift record", self.id)));
        }
        self.map.write().apply(c, MAX_RUN);
        Ok(())
    }

    fn extents(&self, f: &mut dyn FnMut(u32, u64, u64)) {
        for &(p, l) in self.map.read().runs.values() {
            f(self.dev, p, l);
        }
    }

    fn next_data(&self, fblk: u64) -> Option<u64> {
        self.map.read().next_data(fblk)
    }

    fn register(&self, io: &IoCtx) {
        let Some(h) = io.storage.devs.get(self.dev as usize) else { return };
        let space = LogSpace::of(h);
        for (&f, &(p, l)) in &self.map.read().runs {
            space.register(Owner { ino: io.owner, node: self.id, fblk: f, len: l, seg: self.seg }, p);
        }
    }

    fn relocate(&self, io: &IoCtx, fblk: u64, pblk: u64, n: u64) -> Result<u64> {
        let live = self.map.read().still_mapped(fblk, pblk, n);
        let dev = self.handle(io)?;
        let mut moved = 0;
        for (f, p, l) in live {
            let mut buf = vec![0u8; l as usize * BLOCK_SIZE];
            dev.read_blocks(p, &mut buf)?;
            self.put(io, f, l, Some(&buf), true)?;
            moved += l;
        }
        Ok(moved)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testenv::{build, pattern, Env, BS};
    use super::super::{Spec, Value};
    use super::*;

    fn spec(d: u32) -> Spec {
        Spec {
            kind: "log".into(),
            params: vec![("segment".into(), Value::Num(64 << 10))],
            children: vec![],
            device: Some(d),
        }
    }

    fn pblk(l: &super::super::Layout, fblk: u64) -> u64 {
        let n = &l.nodes()[0];
        let mut out = None;
        let mut runs = Vec::new();
        n.extents(&mut |_, p, len| runs.push((p, len)));
        // Map through the node's own state.
        let mut e = Encoder::new();
        n.encode_state(&mut e);
        let m = decode_runs(&e.into_inner(), MAX_RUN).unwrap();
        if let Some((&f, &(p, len))) = m.range(..=fblk).next_back() {
            if fblk < f + len {
                out = Some(p + (fblk - f));
            }
        }
        out.unwrap_or_else(|| panic!("file block {fblk} not mapped ({runs:?})"))
    }

    #[test]
    fn random_overwrites_of_several_files_go_down_one_after_another() {
        let env = Env::new(1, 4096);
        let (a, b) = (build(&spec(0)), build(&spec(0)));
        env.write(&a, 0, &pattern(1, 32)).unwrap();
        env.write(&b, 0, &pattern(2, 32)).unwrap();
        let mut last = None;
        let mut model_a = pattern(1, 32);
        for (i, f) in [7u64, 3, 30, 1, 12, 12, 5].into_iter().enumerate() {
            let (l, data) = if i % 2 == 0 { (&a, pattern(10 + i as u64, 1)) } else { (&b, pattern(10 + i as u64, 1)) };
            let before = pblk(l, f);
            env.write(l, f, &data).unwrap();
            let now = pblk(l, f);
            assert_ne!(now, before, "an overwrite never goes in place");
            if let Some(p) = last {
                // Each plain write goes behind its summary, right after the
                // previous one or at the start of the run the head took next.
                assert!(
                    now == p + 2 || (now - 1).is_multiple_of(16),
                    "write {i} went to {now}, not after the previous one at {p}"
                );
            }
            let mut b = vec![0u8; BS];
            env.storage.devs[0].read_blocks(now - 1, &mut b).unwrap();
            let sum = Summary::decode(&b).expect("a summary in front of the write");
            assert_eq!((sum.fblk, sum.len, sum.data_crc), (f, 1, crc32c::crc32c(&data)));
            last = Some(now);
            if i % 2 == 0 {
                model_a[f as usize * BS..(f as usize + 1) * BS].copy_from_slice(&data);
            }
        }
        assert_eq!(env.read(&a, 0, 32), model_a);
        // Old copies are freed once the batch commits; nothing leaks.
        env.check_accounting(&[&a, &b]);
    }

    #[test]
    fn hostile_records_and_state_are_corrupt() {
        let l = build(&spec(0));
        let rec = |tag: u8, vals: &[u64]| {
            let mut e = Encoder::new();
            e.u8(1).u8(tag);
            for &v in vals {
                e.u64(v);
            }
            super::super::NodeRecord { node: 0, bytes: e.into_inner() }
        };
        // A shift (which a log never records), an empty or overflowing
        // map, an unknown tag, a run longer than the longest: all corrupt.
        for r in [
            rec(4, &[10, (-2i64) as u64]),
            rec(1, &[0, 5, 0]),
            rec(1, &[u64::MAX, 5, 2]),
            rec(9, &[0]),
            rec(1, &[0, 5, MAX_RUN + 1]),
        ] {
            assert!(matches!(l.apply(&r), Err(Error::Corrupt { .. })), "{:?}", r.bytes);
        }
        // State with two runs sharing device blocks.
        let mut e = Encoder::new();
        e.u32(2).u64(0).u64(100).u64(4).u64(10).u64(102).u64(4);
        assert!(decode_runs(&e.into_inner(), MAX_RUN).is_err());
    }

    #[test]
    fn uncovered_is_what_no_kept_piece_overlaps() {
        assert_eq!(uncovered(10, 10, &[]), vec![(10, 10)]);
        assert_eq!(uncovered(10, 10, &[(10, 10)]), vec![]);
        assert_eq!(uncovered(10, 10, &[(5, 7), (14, 2), (30, 4)]), vec![(12, 2), (16, 4)]);
        assert_eq!(uncovered(10, 10, &[(11, 2), (12, 3)]), vec![(10, 1), (15, 5)]);
    }

    #[test]
    fn replay_gives_the_same_map() {
        let env = Env::new(1, 4096);
        let l = build(&spec(0));
        env.write(&l, 0, &pattern(1, 30)).unwrap();
        env.write(&l, 4, &pattern(2, 3)).unwrap();
        env.io(|io| l.root().punch(io, 10, 5)).unwrap();
        env.truncate(&l, 25);
        env.write(&l, 2, &pattern(3, 1)).unwrap();
        let r = build(&spec(0));
        for c in env.changes() {
            r.apply(&c).unwrap();
        }
        assert_eq!(env.read(&r, 0, 30), env.read(&l, 0, 30));
        let (mut x, mut y) = (Vec::new(), Vec::new());
        l.extents(&mut |_, p, n| x.push((p, n)));
        r.extents(&mut |_, p, n| y.push((p, n)));
        assert_eq!(x, y);
    }

    #[test]
    fn the_usage_table_counts_live_blocks_and_relocation_moves_them() {
        let env = Env::new(1, 4096);
        let l = build(&spec(0));
        env.write(&l, 0, &pattern(3, 40)).unwrap();
        env.commit();
        let space = LogSpace::of(&env.storage.devs[0]);
        assert_eq!(space.totals().1, 40);
        // Overwrite half: the live count stays 40, spread over more segments.
        env.write(&l, 0, &pattern(4, 20)).unwrap();
        env.commit();
        assert_eq!(space.totals().1, 40);
        let cands = space.candidates();
        let first = cands.iter().find(|c| c.start <= pblk(&l, 25) && pblk(&l, 25) < c.start + c.seg).copied().unwrap();
        assert!(first.usage.live < first.seg, "{cands:?}");
        // Moving its owners empties the segment.
        let owners = space.owners_in(first.seg, first.start);
        assert_eq!(owners.iter().map(|o| o.1.len).sum::<u64>(), first.usage.live);
        let moved: u64 =
            env.io(|io| owners.iter().map(|&(p, o)| l.nodes()[0].relocate(io, o.fblk, p, o.len).unwrap()).sum());
        assert_eq!(moved, first.usage.live);
        assert!(space.usage(first.seg, first.start).is_none_or(|u| u.live == 0));
        // A second move finds them gone.
        let again: u64 =
            env.io(|io| owners.iter().map(|&(p, o)| l.nodes()[0].relocate(io, o.fblk, p, o.len).unwrap()).sum());
        assert_eq!(again, 0);
        let mut want = pattern(3, 40);
        want[..20 * BS].copy_from_slice(&pattern(4, 20));
        assert_eq!(env.read(&l, 0, 40), want);
        env.commit();
        env.check_accounting(&[&l]);
        // Truncating drops the count.
        env.truncate(&l, 10);
        assert_eq!(space.totals().1, 10);
        // Registering again (the walk after open) counts nothing twice.
        env.io(|io| l.nodes()[0].register(io));
        env.io(|io| l.nodes()[0].register(io));
        assert_eq!(space.totals().1, 10);
    }
}
