//! `extent`: file blocks stored in contiguous runs on one device, each run at
//! most `max` long. New space is asked for right after the file's preceding
//! data, so a file written in order stays one run and reads back in one
//! request.
//!
//! Concurrency: the map lock is held while runs are looked up, allocated or
//! dropped, never during data I/O. A write maps its holes under the lock (so
//! two writers never allocate one file block twice), writes the data unlocked,
//! then publishes the new runs. Until then they are *pending*: reads see them
//! as holes (never a previous owner's bytes), they are not persistent state,
//! and if a truncate or punch drops them meanwhile the writer, not the
//! truncate or punch, gives their space back.

use super::common::span;
use super::{Block, BlockType, BuildArgs, IoCtx, ParamKind, ParamSpec, Params, Value, BLOCK_SIZE};
use crate::codec::{Decoder, Encoder};
use crate::device::DeviceHandle;
use crate::error::{Error, Result};
use crate::pool::Allocator;
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The longest run a node keeps: `extent`'s one parameter, and `colocate`'s.
pub(super) const MAX_RUN: ParamSpec = ParamSpec {
    key: "max",
    kind: ParamKind::Size,
    default: Some("128M"),
    min: BLOCK_SIZE as u64,
    max: 1 << 40,
    doc: "longest single extent",
};

pub static TYPE: BlockType = BlockType {
    name: "extent",
    doc: "Contiguous runs on one device, each at most `max` bytes; appends stay contiguous.",
    params: &[MAX_RUN],
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

/// A change to an extent node's map: its journal record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    /// File blocks [fblk, fblk+len) now live at device blocks [pblk, pblk+len).
    Map { fblk: u64, pblk: u64, len: u64 },
    /// Every mapping at or past file block `from` is dropped.
    Truncate { from: u64 },
    /// File blocks [fblk, fblk+len) are dropped (a hole punched).
    Punch { fblk: u64, len: u64 },
    /// Every mapping at or past `from` moves by `delta` blocks; for a
    /// negative delta the `-delta` blocks below `from` are dropped first (a
    /// collapsed range).
    Shift { from: u64, delta: i64 },
}

impl Change {
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        match *self {
            Change::Map { fblk, pblk, len } => e.u8(1).u64(fblk).u64(pblk).u64(len),
            Change::Truncate { from } => e.u8(2).u64(from),
            Change::Punch { fblk, len } => e.u8(3).u64(fblk).u64(len),
            Change::Shift { from, delta } => e.u8(4).u64(from).u64(delta as u64),
        };
        e.into_inner()
    }

    /// Strict: unknown tags, trailing bytes and runs that are empty,
    /// longer than `max` or past 2^64 are corrupt.
    pub(super) fn decode(b: &[u8], id: u32, max: u64) -> Result<Change> {
        let mut d = Decoder::new(b, "extent record");
        let c = match d.u8()? {
            1 => Change::Map { fblk: d.u64()?, pblk: d.u64()?, len: d.u64()? },
            2 => Change::Truncate { from: d.u64()? },
            3 => Change::Punch { fblk: d.u64()?, len: d.u64()? },
            4 => Change::Shift { from: d.u64()?, delta: d.u64()? as i64 },
            t => return Err(d.err(format!("unknown extent change {t}"))),
        };
        d.expect_end()?;
        if let Change::Shift { from, delta } = c {
            if delta == 0 || from.checked_add_signed(delta).is_none() {
                return Err(Error::corrupt("journal", format!("extent node {id}: bad shift by {delta} at {from}")));
            }
        }
        if let Change::Punch { fblk, len } = c {
            if len == 0 || fblk.checked_add(len).is_none() {
                return Err(Error::corrupt(
                    "journal",
                    format!("extent node {id}: bad punch of {len} blocks at {fblk}"),
                ));
            }
        }
        if let Change::Map { fblk, pblk, len } = c {
            // Writes record runs of at most `max` blocks; a longer one is
            // corrupt (and would cost len/max map entries to apply).
            if len == 0 || len > max || fblk.checked_add(len).is_none() || pblk.checked_add(len).is_none() {
                return Err(Error::corrupt(
                    "journal",
                    format!("extent node {id}: bad map of {len} blocks at {fblk} -> {pblk}"),
                ));
            }
        }
        Ok(c)
    }
}

/// (file block, device block, length) of one mapped piece.
pub(super) type Seg = (u64, u64, u64);

/// How a type that keeps its runs the extent way (`extent` itself,
/// `colocate`) places and stores new data.
pub(super) struct Placement<'a> {
    /// `want` blocks for file block `fblk`, `goal` being the device block
    /// after the file's preceding data: (start, length), possibly shorter.
    pub take: &'a Take<'a>,
    /// Writes `l` blocks at device block `p`: `data`, or zeros with None.
    pub store: &'a Store<'a>,
    /// Space `store` wrote that is given back at once (a failed write, or
    /// pieces a truncate dropped meanwhile): called before the allocator
    /// may hand it out again, so a store that holds writes back drops them.
    pub forget: &'a Forget<'a>,
}

/// [`Placement::forget`]: (device, start, length).
pub(super) type Forget<'a> = dyn Fn(&DeviceHandle, u64, u64) + 'a;

/// A [`Placement::forget`] for stores that write straight to the device.
pub(super) fn nothing_held(_: &DeviceHandle, _: u64, _: u64) {}

/// [`Placement::take`]: (allocator, goal, file block, want) -> (start, length).
pub(super) type Take<'a> = dyn Fn(&Allocator, Option<u64>, u64, u64) -> Option<(u64, u64)> + 'a;

/// [`Placement::store`]: (device, start, length, data).
pub(super) type Store<'a> = dyn Fn(&DeviceHandle, u64, u64, Option<&[u8]>) -> Result<()> + 'a;

/// The extent type's own placement: next fit from the goal (epoch 0 is no
/// journal batch: the meta-file's own writes, which may use the reserve).
pub(super) fn next_fit(io: &IoCtx, alloc: &Allocator, goal: Option<u64>, want: u64) -> Option<(u64, u64)> {
    if io.epoch == 0 {
        alloc.alloc_reserved(goal, want)
    } else {
        alloc.alloc(goal, want)
    }
}

/// Writes straight to the device.
pub(super) fn store(dev: &DeviceHandle, p: u64, l: u64, data: Option<&[u8]>) -> Result<()> {
    match data {
        Some(buf) => dev.write_blocks(p, buf),
        None => dev.zero_blocks(p, l),
    }
}

pub(super) struct Extent {
    /// The type whose node this is (its records carry its version).
    kind: &'static BlockType,
    id: u32,
    dev: u32,
    /// Longest run, in blocks.
    max: u64,
    map: RwLock<Map>,
}

#[derive(Default)]
pub(super) struct Map {
    /// file block -> (device block, length): disjoint runs, none longer than `max`.
    pub(super) runs: BTreeMap<u64, (u64, u64)>,
    /// device block -> length: space mapped by writes still in progress.
    /// Keyed by device block because only the writer that allocated it may
    /// clear it, even if the file range is dropped and mapped again meanwhile.
    pending: BTreeMap<u64, u64>,
}

fn build(a: BuildArgs) -> Result<Arc<dyn Block>> {
    Ok(Arc::new(Extent::new(&TYPE, &a)?))
}

/// Decodes `count, (fblk, pblk, len)*`, refusing empty, overflowing, too long
/// or overlapping runs (in file or device blocks).
pub(super) fn decode_runs(s: &[u8], max: u64) -> Result<BTreeMap<u64, (u64, u64)>> {
    let mut d = Decoder::new(s, "extent map");
    let count = d.count(24)?;
    let mut runs = BTreeMap::new();
    let mut file_end = 0;
    let mut phys = Vec::with_capacity(count);
    for _ in 0..count {
        let (f, p, l) = (d.u64()?, d.u64()?, d.u64()?);
        if l == 0 || l > max || f.checked_add(l).is_none() || p.checked_add(l).is_none() {
            return Err(d.err(format!("bad run: file block {f}, device block {p}, {l} blocks (max {max})")));
        }
        if f < file_end {
            return Err(d.err(format!("run at file block {f} overlaps or is out of order")));
        }
        file_end = f + l;
        runs.insert(f, (p, l));
        phys.push((p, l));
    }
    d.expect_end()?;
    phys.sort_unstable();
    if phys.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0) {
        return Err(Error::corrupt("extent map", "two runs share device blocks"));
    }
    Ok(runs)
}

impl Map {
    /// Applies a change (live and at replay alike); returns the device
    /// ranges it unmapped. Replacing whatever was mapped makes replay
    /// idempotent.
    pub(super) fn apply(&mut self, c: Change, max: u64) -> Vec<(u64, u64)> {
        match c {
            Change::Map { fblk, pblk, len } => {
                let old = self.remove(fblk, fblk + len);
                self.insert(fblk, pblk, len, max);
                old
            }
            Change::Truncate { from } => self.remove(from, u64::MAX),
            Change::Punch { fblk, len } => self.remove(fblk, fblk.saturating_add(len)),
            Change::Shift { from, delta } => {
                let gap = if delta < 0 { self.remove(from.saturating_sub(delta.unsigned_abs()), from) } else { vec![] };
                self.split_at(from);
                let moved: Vec<(u64, (u64, u64))> = self.runs.range(from..).map(|(&f, &v)| (f, v)).collect();
                for (f, _) in &moved {
                    self.runs.remove(f);
                }
                for (f, (p, l)) in moved {
                    // A run the shift would push past 2^64 is dropped (only a
                    // hostile record gets there: files end far below).
                    if let Some(nf) = f.checked_add_signed(delta).filter(|nf| nf.checked_add(l).is_some()) {
                        self.runs.insert(nf, (p, l));
                    }
                }
                gap
            }
        }
    }

    /// The first mapped file block at or after `fblk` (SEEK_DATA).
    pub(super) fn next_data(&self, fblk: u64) -> Option<u64> {
        match self.runs.range(..=fblk).next_back() {
            Some((&rf, &(_, rl))) if rf + rl > fblk => Some(fblk),
            _ => self.runs.range(fblk..).next().map(|(&k, _)| k),
        }
    }

    /// Mapped pieces of [f, end) in file order, adjacent ones joined when
    /// they are contiguous on the device too (one request each).
    pub(super) fn segments(&self, f: u64, end: u64) -> Vec<Seg> {
        let start = match self.runs.range(..=f).next_back() {
            Some((&rf, &(_, rl))) if rf + rl > f => rf,
            _ => f,
        };
        let mut out: Vec<Seg> = Vec::new();
        for (&rf, &(rp, rl)) in self.runs.range(start..end) {
            let s = rf.max(f);
            let e = (rf + rl).min(end);
            let p = rp + (s - rf);
            match out.last_mut() {
                Some(last) if last.0 + last.2 == s && last.1 + last.2 == p => last.2 += e - s,
                _ => out.push((s, p, e - s)),
            }
        }
        out
    }

    /// Mapped pieces of [f, end) minus space still pending: what reads see.
    pub(super) fn readable(&self, f: u64, end: u64) -> Vec<Seg> {
        let segs = self.segments(f, end);
        if self.pending.is_empty() {
            return segs;
        }
        let mut out = Vec::with_capacity(segs.len());
        for (sf, sp, sl) in segs {
            for (p, l) in self.minus_pending(sp, sl) {
                out.push((sf + (p - sp), p, l));
            }
        }
        out
    }

    /// Parts of device range [p, p+l) not pending.
    pub(super) fn minus_pending(&self, p: u64, l: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut pos = p;
        let end = p + l;
        let first = match self.pending.range(..=p).next_back() {
            Some((&s, &n)) if s + n > p => s,
            _ => p,
        };
        for (&s, &n) in self.pending.range(first..end) {
            if s > pos {
                out.push((pos, s - pos));
            }
            pos = pos.max(s + n);
        }
        if pos < end {
            out.push((pos, end - pos));
        }
        out
    }

    /// Unmapped sub-ranges of [f, end) as (start, len).
    fn gaps(&self, f: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut pos = f;
        for (s, _, l) in self.segments(f, end) {
            if s > pos {
                out.push((pos, s - pos));
            }
            pos = s + l;
        }
        if pos < end {
            out.push((pos, end - pos));
        }
        out
    }

    /// The device block after the last mapped file block before `f`: where an
    /// allocation for `f` should start to continue the file's data.
    fn goal(&self, f: u64) -> Option<u64> {
        self.runs.range(..f).next_back().map(|(_, &(p, l))| p + l)
    }

    /// Maps [f, f+len) (unmapped) to [p, p+len), joining runs on either side
    /// that continue it on the device, then recutting to at most `max`.
    fn insert(&mut self, f: u64, p: u64, len: u64, max: u64) {
        let (mut f0, mut p0, mut l0) = (f, p, len);
        if let Some((&rf, &(rp, rl))) = self.runs.range(..f).next_back() {
            if rf + rl == f && rp + rl == p {
                self.runs.remove(&rf);
                (f0, p0, l0) = (rf, rp, rl + len);
            }
        }
        if let Some(&(np, nl)) = self.runs.get(&(f + len)) {
            if np == p + len {
                self.runs.remove(&(f + len));
                l0 += nl;
            }
        }
        while l0 > 0 {
            let k = l0.min(max);
            self.runs.insert(f0, (p0, k));
            (f0, p0, l0) = (f0 + k, p0 + k, l0 - k);
        }
    }

    /// Unmaps [f, end); returns the device ranges that held it.
    pub(super) fn remove(&mut self, f: u64, end: u64) -> Vec<(u64, u64)> {
        let mut freed = Vec::new();
        for (s, p, l) in self.segments(f, end) {
            // Each segment may span several runs; cut at its ends, drop the middle.
            self.split_at(s);
            self.split_at(s + l);
            let keys: Vec<u64> = self.runs.range(s..s + l).map(|(&k, _)| k).collect();
            for k in keys {
                self.runs.remove(&k);
            }
            freed.push((p, l));
        }
        freed
    }

    /// Makes `f` a run boundary.
    fn split_at(&mut self, f: u64) {
        if let Some((&rf, &(rp, rl))) = self.runs.range(..f).next_back() {
            if rf + rl > f {
                self.runs.insert(rf, (rp, f - rf));
                self.runs.insert(f, (rp + (f - rf), rf + rl - f));
            }
        }
    }

    /// Parts of [f, f+l) still mapped to [p, p+l) (a truncate may have dropped
    /// some since they were mapped).
    pub(super) fn still_mapped(&self, f: u64, p: u64, l: u64) -> Vec<Seg> {
        self.segments(f, f + l).into_iter().filter(|&(sf, sp, _)| sp.checked_sub(sf - f) == Some(p)).collect()
    }
}

impl Extent {
    /// A node of type `kind` kept the extent way, from its `max` parameter
    /// and state.
    pub(super) fn new(kind: &'static BlockType, a: &BuildArgs) -> Result<Extent> {
        let bytes = a.params.num("max")?;
        // Rounding would make the built tree print back as another layout.
        if !bytes.is_multiple_of(BLOCK_SIZE as u64) {
            return Err(Error::Layout(format!("{}: max={bytes} is not a multiple of 4K", kind.name)));
        }
        let max = bytes / BLOCK_SIZE as u64;
        let dev = a.device.unwrap_or_default();
        let mut map = Map::default();
        if let Some(s) = a.state {
            map.runs = decode_runs(s, max)?;
        }
        Ok(Extent { kind, id: a.id, dev, max, map: RwLock::new(map) })
    }

    pub(super) fn dev(&self) -> u32 {
        self.dev
    }

    /// The pieces of [fblk, fblk+n) reads see (pending space reads as a hole).
    pub(super) fn readable(&self, fblk: u64, n: u64) -> Vec<Seg> {
        self.map.read().readable(fblk, fblk + n)
    }

    /// Applies a truncate, punch or shift: drops the mappings it covers,
    /// frees their space once the request's batch commits (pending space is
    /// freed by the writer that allocated it) and records the change if it
    /// dropped anything, or moved what follows (a shift, always).
    fn drop_mappings(&self, io: &IoCtx, c: Change) {
        let mut m = self.map.write();
        let freed = m.apply(c, self.max);
        if freed.is_empty() && !matches!(c, Change::Shift { .. }) {
            return;
        }
        for (p, l) in freed {
            for (p, l) in m.minus_pending(p, l) {
                io.free(self.dev, p, l);
            }
        }
        io.record(self.kind, self.id, &c.encode());
    }

    pub(super) fn handle<'a>(&self, io: &'a IoCtx) -> Result<&'a DeviceHandle> {
        io.storage
            .devs
            .get(self.dev as usize)
            .ok_or_else(|| Error::Device(format!("{}@{}: no such device in the pool", self.kind.name, self.dev)))
    }

    /// Maps every hole in [f, end) to new device space, marked pending.
    /// Returns the new runs; on a full device maps nothing and frees all.
    fn allocate(&self, m: &mut Map, io: &IoCtx, place: &Placement, f: u64, end: u64) -> Result<Vec<Seg>> {
        let gaps = m.gaps(f, end);
        if gaps.is_empty() {
            return Ok(Vec::new());
        }
        // No space is handed out on a device that takes no writes.
        self.handle(io)?.check_writable()?;
        let alloc = io
            .storage
            .allocs
            .get(self.dev as usize)
            .ok_or_else(|| Error::Device(format!("{}@{}: no allocator", self.kind.name, self.dev)))?;
        let mut fresh: Vec<Seg> = Vec::new();
        for (gf, gl) in gaps {
            let mut pos = gf;
            while pos < gf + gl {
                let want = (gf + gl - pos).min(self.max);
                let Some((p, got)) = (place.take)(alloc, m.goal(pos), pos, want).filter(|&(_, n)| n > 0) else {
                    // Nothing was recorded yet, so the space goes straight back.
                    for &(sf, sp, sl) in &fresh {
                        m.remove(sf, sf + sl);
                        m.pending.remove(&sp);
                        alloc.free_now(sp, sl);
                    }
                    return Err(Error::NoSpace(self.handle(io).map(|h| h.name()).unwrap_or_default()));
                };
                m.insert(pos, p, got, self.max);
                m.pending.insert(p, got);
                fresh.push((pos, p, got));
                pos += got;
            }
        }
        Ok(fresh)
    }

    /// A write of `buf`, or of zeros with `None` (the device zeroes the
    /// space where it can): maps, writes unlocked, then publishes.
    pub(super) fn put(&self, io: &IoCtx, place: &Placement, fblk: u64, n: u64, buf: Option<&[u8]>) -> Result<()> {
        let dev = self.handle(io)?;
        let end = fblk + n;
        let (segs, fresh) = {
            let mut m = self.map.write();
            let fresh = self.allocate(&mut m, io, place, fblk, end)?;
            (m.segments(fblk, end), fresh)
        };
        let mut res = Ok(());
        for &(f, p, l) in &segs {
            let start = (f - fblk) as usize * BLOCK_SIZE;
            res = (place.store)(dev, p, l, buf.map(|b| &b[start..start + l as usize * BLOCK_SIZE]));
            if res.is_err() {
                break;
            }
        }
        if fresh.is_empty() {
            return res;
        }
        // Publish the new runs, or on failure give back their space (nothing
        // was recorded, so it can be reused at once).
        let alloc = &io.storage.allocs[self.dev as usize];
        let give_back = |p: u64, l: u64| {
            if l > 0 {
                (place.forget)(dev, p, l);
                alloc.free_now(p, l);
            }
        };
        let mut m = self.map.write();
        for &(f, p, l) in &fresh {
            m.pending.remove(&p);
            let live = m.still_mapped(f, p, l);
            let mut pos = p;
            for &(sf, sp, sl) in &live {
                // Pieces a truncate dropped meanwhile are ours to free.
                give_back(pos, sp - pos);
                pos = sp + sl;
                if res.is_ok() {
                    // Publishing goes through the same apply as replay.
                    let c = Change::Map { fblk: sf, pblk: sp, len: sl };
                    m.apply(c, self.max);
                    io.record(self.kind, self.id, &c.encode());
                } else {
                    m.remove(sf, sf + sl);
                    give_back(sp, sl);
                }
            }
            give_back(pos, p + l - pos);
        }
        res
    }

    /// Moves file blocks [fblk, fblk+n) that still live at device blocks
    /// [pblk, pblk+n) to space `place` gives, as a write would: the data is
    /// copied, then each new run is published (replacing the old mapping,
    /// so reads see one or the other, whole) and recorded, and the old
    /// space is freed once the batch commits. Returns the blocks moved.
    ///
    /// Called under the file's I/O lock held exclusively, so no write of
    /// this node is in flight: pieces are placed, written and published one
    /// at a time, `place.take` runs without the map lock (it may look at
    /// the node's runs) and sees the pieces moved before it as mapped.
    pub(super) fn relocate(&self, io: &IoCtx, place: &Placement, fblk: u64, pblk: u64, n: u64) -> Result<u64> {
        let live: Vec<Seg> = {
            let m = self.map.read();
            let mut out = Vec::new();
            for (f, p, l) in m.still_mapped(fblk, pblk, n) {
                for (pp, pl) in m.minus_pending(p, l) {
                    out.push((f + (pp - p), pp, pl));
                }
            }
            out
        };
        if live.is_empty() {
            return Ok(0);
        }
        let dev = self.handle(io)?;
        dev.check_writable()?;
        let alloc = io
            .storage
            .allocs
            .get(self.dev as usize)
            .ok_or_else(|| Error::Device(format!("{}@{}: no allocator", self.kind.name, self.dev)))?;
        let mut moved = 0;
        for (f, p, l) in live {
            let mut buf = vec![0u8; l as usize * BLOCK_SIZE];
            dev.read_blocks(p, &mut buf)?;
            let mut pos = f;
            while pos < f + l {
                let want = (f + l - pos).min(self.max);
                let goal = self.map.read().goal(pos);
                let Some((np, got)) = (place.take)(alloc, goal, pos, want).filter(|&(_, k)| k > 0 && k <= want) else {
                    return Err(Error::NoSpace(dev.name()));
                };
                let at = (pos - f) as usize * BLOCK_SIZE;
                if let Err(e) = (place.store)(dev, np, got, Some(&buf[at..at + got as usize * BLOCK_SIZE])) {
                    alloc.free_now(np, got);
                    return Err(e);
                }
                let old = p + (pos - f);
                let mut m = self.map.write();
                let mut unused = np;
                for (sf, sp, sl) in m.still_mapped(pos, old, got) {
                    let q = np + (sp - old);
                    alloc.free_now(unused, q - unused);
                    let c = Change::Map { fblk: sf, pblk: q, len: sl };
                    for (op, ol) in m.apply(c, self.max) {
                        for (op, ol) in m.minus_pending(op, ol) {
                            io.free(self.dev, op, ol);
                        }
                    }
                    io.record(self.kind, self.id, &c.encode());
                    moved += sl;
                    unused = q + sl;
                }
                alloc.free_now(unused, np + got - unused);
                pos += got;
            }
        }
        Ok(moved)
    }
}

impl Extent {
    fn put_next_fit(&self, io: &IoCtx, fblk: u64, n: u64, buf: Option<&[u8]>) -> Result<()> {
        let place =
            Placement { take: &|a, goal, _, want| next_fit(io, a, goal, want), store: &store, forget: &nothing_held };
        self.put(io, &place, fblk, n, buf)
    }
}

impl Block for Extent {
    fn id(&self) -> u32 {
        self.id
    }
    fn kind(&self) -> &'static BlockType {
        self.kind
    }
    fn params(&self) -> Params {
        let mut p = Params::default();
        p.0.insert("max".into(), Value::Num(self.max * BLOCK_SIZE as u64));
        p
    }
    fn device(&self) -> Option<u32> {
        Some(self.dev)
    }

    fn read(&self, io: &IoCtx, fblk: u64, buf: &mut [u8]) -> Result<()> {
        let n = span(fblk, buf.len())?;
        let dev = self.handle(io)?;
        let segs = self.map.read().readable(fblk, fblk + n);
        read_segs(dev, &segs, fblk, buf)
    }

    fn write(&self, io: &IoCtx, fblk: u64, buf: &[u8]) -> Result<()> {
        self.put_next_fit(io, fblk, span(fblk, buf.len())?, Some(buf))
    }

    fn write_zeroes(&self, io: &IoCtx, fblk: u64, n: u64) -> Result<()> {
        fblk.checked_add(n).ok_or_else(|| Error::TooBig(format!("block {fblk} + {n}")))?;
        self.put_next_fit(io, fblk, n, None)
    }

    fn truncate(&self, io: &IoCtx, nblocks: u64) -> Result<()> {
        self.drop_mappings(io, Change::Truncate { from: nblocks });
        Ok(())
    }

    fn can_shift(&self, from: u64, delta: i64) -> bool {
        from.checked_add_signed(delta).is_some()
    }

    fn shift(&self, io: &IoCtx, from: u64, delta: i64) -> Result<()> {
        if delta == 0 {
            return Ok(());
        }
        if !self.can_shift(from, delta) {
            return Err(Error::Invalid(format!("extent node {}: shift by {delta} at {from}", self.id)));
        }
        self.drop_mappings(io, Change::Shift { from, delta });
        Ok(())
    }

    fn punch(&self, io: &IoCtx, fblk: u64, n: u64) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        fblk.checked_add(n).ok_or_else(|| Error::TooBig(format!("extent node {}: punch {fblk}+{n}", self.id)))?;
        self.drop_mappings(io, Change::Punch { fblk, len: n });
        Ok(())
    }

    fn encode_state(&self, e: &mut Encoder) {
        // Only published runs are persistent; pending ones are not recorded yet.
        let m = self.map.read();
        let mut runs = Vec::with_capacity(m.runs.len());
        for (&f, &(p, l)) in &m.runs {
            for (pp, pl) in m.minus_pending(p, l) {
                runs.push((f + (pp - p), pp, pl));
            }
        }
        e.u32(runs.len() as u32);
        for (f, p, l) in runs {
            e.u64(f).u64(p).u64(l);
        }
    }

    fn apply(&self, payload: &[u8]) -> Result<()> {
        let c = Change::decode(payload, self.id, self.max)?;
        self.map.write().apply(c, self.max);
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
}

/// Reads the mapped pieces `segs` of file blocks from `fblk` into `buf`
/// (one request each), zeroing what lies between them.
pub(super) fn read_segs(dev: &DeviceHandle, segs: &[Seg], fblk: u64, buf: &mut [u8]) -> Result<()> {
    let mut pos = 0; // bytes of buf done
    for &(f, p, l) in segs {
        let start = (f - fblk) as usize * BLOCK_SIZE;
        let len = l as usize * BLOCK_SIZE;
        buf[pos..start].fill(0);
        dev.read_blocks(p, &mut buf[start..start + len])?;
        pos = start + len;
    }
    buf[pos..].fill(0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{Layout, NodeRecord, Spec};
    use super::*;
    use crate::device::{Device, DeviceHandle, MemDevice};
    use crate::pool::{Allocator, Storage};
    use parking_lot::Mutex;

    const BS: usize = BLOCK_SIZE;

    #[test]
    fn punch_drops_a_range_frees_it_after_the_batch_and_replays() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new("mem:0", 256 * BS as u64));
        let storage =
            Storage { allocs: vec![Allocator::new(1, 256)].into(), devs: vec![DeviceHandle::new(0, dev)].into() };
        let log = Mutex::new(Vec::new());
        let sink = |c: NodeRecord| log.lock().push(c);
        let io = IoCtx {
            owner: 0,
            origin: crate::blocks::Origin::NONE,
            storage: &storage,
            epoch: 3,
            sink: &sink,
            repair: true,
        };
        let spec = Spec { kind: "extent".into(), params: vec![], children: vec![], device: Some(0) };
        let l = Layout::build(&spec).unwrap();
        let data: Vec<u8> = (0..20 * BS).map(|i| (i / BS) as u8 + 1).collect();
        l.root().write(&io, 0, &data).unwrap();
        let free = storage.allocs[0].free_blocks();
        l.root().punch(&io, 5, 5).unwrap();
        // Punching a hole again records nothing.
        let n = log.lock().len();
        l.root().punch(&io, 6, 2).unwrap();
        assert_eq!(log.lock().len(), n);
        let mut buf = vec![0xAA; 20 * BS];
        l.root().read(&io, 0, &mut buf).unwrap();
        let mut want = data.clone();
        want[5 * BS..10 * BS].fill(0);
        assert_eq!(buf, want);
        assert_eq!(l.root().next_data(5), Some(10));
        // The space comes back only once batch 3 commits.
        assert_eq!(storage.allocs[0].free_blocks(), free);
        storage.allocs[0].release(2);
        assert_eq!(storage.allocs[0].free_blocks(), free);
        storage.allocs[0].release(3);
        assert_eq!(storage.allocs[0].free_blocks(), free + 5);
        // Replayed onto an empty node: the same map.
        let r = Layout::build(&spec).unwrap();
        for c in log.lock().iter() {
            r.apply(c).unwrap();
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        l.extents(&mut |_, p, n| a.push((p, n)));
        r.extents(&mut |_, p, n| b.push((p, n)));
        assert_eq!(a, b);
        assert_eq!(a.iter().map(|x| x.1).sum::<u64>(), 15);
    }

    #[test]
    fn hostile_punch_records_are_corrupt() {
        let spec = Spec { kind: "extent".into(), params: vec![], children: vec![], device: Some(0) };
        let l = Layout::build(&spec).unwrap();
        let rec = |vals: &[u64], extra: &[u8]| {
            let mut e = Encoder::new();
            e.u8(1).u8(3);
            for &v in vals {
                e.u64(v);
            }
            e.raw(extra);
            NodeRecord { node: 0, bytes: e.into_inner() }
        };
        for r in [rec(&[0, 0], &[]), rec(&[u64::MAX, 2], &[]), rec(&[0, 1], &[0]), rec(&[0], &[])] {
            assert!(matches!(l.apply(&r), Err(Error::Corrupt { .. })), "{:?}", r.bytes);
        }
        l.apply(&rec(&[0, u64::MAX], &[])).unwrap();
    }
}

#[cfg(test)]
mod relocate_tests {
    use super::super::testenv::{build, decode, encode, pattern, Env};
    use super::super::{Layout, Spec, Value};

    fn colocate() -> Spec {
        Spec {
            kind: "colocate".into(),
            params: vec![("group".into(), Value::Num(16 << 10))],
            children: vec![],
            device: Some(0),
        }
    }

    fn runs(l: &Layout) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        l.extents(&mut |_, p, n| v.push((p, n)));
        v
    }

    #[test]
    fn a_relocation_replaces_the_map_and_frees_the_old_blocks_once_when_the_batch_commits() {
        let env = Env::new(1, 1024);
        let (a, b) = (build(&colocate()), build(&colocate()));
        // a's second block comes after b's first: a is scattered.
        env.write(&a, 0, &pattern(1, 1)).unwrap();
        env.write(&b, 0, &pattern(2, 1)).unwrap();
        env.write(&a, 1, &pattern(3, 1)).unwrap();
        env.commit();
        let before = runs(&a);
        assert_eq!(before.len(), 2, "{before:?}");
        let scattered = a.nodes()[0].scattered();
        assert_eq!(scattered.len(), 2, "{scattered:?}");
        assert!(b.nodes()[0].scattered().is_empty());
        let used = env.used();
        let records = env.changes().len();
        let saved = encode(&a);
        let moved: u64 =
            env.io(|io| scattered.iter().map(|&(f, p, n)| a.nodes()[0].relocate(io, f, p, n).unwrap()).sum());
        assert_eq!(moved, 2);
        // One run in one group now, the same bytes.
        let after = runs(&a);
        assert_eq!(after.len(), 1, "{after:?}");
        assert_eq!(after[0].0 / 4, (after[0].0 + 1) / 4);
        assert!(a.nodes()[0].scattered().is_empty());
        let mut want = pattern(1, 1);
        want.extend_from_slice(&pattern(3, 1));
        assert_eq!(env.read(&a, 0, 2), want);
        assert_eq!(env.read(&b, 0, 1), pattern(2, 1));
        // The old blocks are held until the batch commits, then free once.
        assert_eq!(env.used(), used + 2);
        env.commit();
        assert_eq!(env.used(), used);
        env.check_accounting(&[&a, &b]);
        // Where the blocks were is stale now: nothing moves.
        for &(f, p, n) in &scattered {
            assert_eq!(env.io(|io| a.nodes()[0].relocate(io, f, p, n)).unwrap(), 0);
        }
        // The records replay onto the tree as it was to the same map.
        let replayed = decode(&saved).unwrap();
        assert_eq!(runs(&replayed), before);
        for r in &env.changes()[records..] {
            replayed.apply(r).unwrap();
        }
        assert_eq!(runs(&replayed), after);
    }
}
