//! `colocate`: small files kept together on one device (C-FFS co-location,
//! Sapuntzakis ch. 2.3, with its keyed variant). A node keeps its runs the
//! way `extent` does (the same map, records and state); what differs is
//! where new space comes from and how small-file blocks are read and
//! written.
//!
//! - **Placement.** The first `group` bytes of a file are placed in the
//!   group its key is filling (`key=dir`: the directory the file was
//!   created in or last reached through; `key=owner`: its owner), right
//!   after the key's previous blocks, so the small files of a directory lie
//!   side by side in aligned groups of `group` bytes (the device-wide state
//!   is in `colocate/groups.rs`). Blocks past that are placed as `extent`
//!   places them, after the file's preceding data: a large file loses
//!   nothing and costs its group at most one group's worth of its head.
//! - **Group reads.** A read of a small-file block that misses the group
//!   cache reads, in one request, the run of used blocks of its group around
//!   it (never free space) and keeps the rest in the cache, so reading the
//!   other files of the directory costs no further request (C-FFS's group
//!   read into its physical block cache). Blocks past the first group are
//!   read straight from the device.
//! - **Group writes.** A plain file write (`Fs::write`, inside
//!   [`holding`]) of blocks that all lie in the file's first group, in a
//!   file whose layout has no redundancy ([`may_hold`]: `colocate` under
//!   a `checksum` and nothing but `checksum`, `stripe` or `regions`), is
//!   *held*: its blocks
//!   go into the group cache as dirty blocks and the new runs are published
//!   and recorded as usual. Held blocks leave in a drain, each run of
//!   adjacent dirty blocks of the device in one request (C-FFS 2.3.3):
//!   at every commit, before the journal record or checkpoint that points
//!   at them (`Fs::write_batch`: ordered mode is kept, and a crash before
//!   that commit finds neither the data nor a record of it), when a device
//!   holds more than [`HOLD_BLOCKS`], and before the device is read behind
//!   the cache (an uncached read for scrub, a relocation, a shift). Every
//!   other write goes to the device, then through the cache (replacing a
//!   copy, or marking one being read stale) before its runs are published.
//!
//! Durability and errors of held writes: a write returns once its blocks
//! are held and readable; a device error comes back from the drain. Each
//! held block carries its owner (the inode it was written for). What a
//! drain at commit that failed does next is decided by the device's state
//! after the failure, which is where the pool draws the line between an
//! error that may pass and a dead device (`DeviceHandle::failed`):
//!
//! - **Retry: the device still takes writes.** The error was one the
//!   device calls transient ([`Device::transient`](crate::device::Device::transient):
//!   a request that timed out, [`Error::is_timed_out`], or a full cluster,
//!   ENOSPC, on a device in a Ceph cluster), so nothing on it is lost and
//!   it was not faulted. The commit fails (`sync`, `fsync`, the committer's
//!   next try): no journal record names data that did not reach its
//!   device, and the blocks stay held and readable until a drain gets them
//!   out, as a failed commit keeps its batch for the next. This is also
//!   what happens when a device that went away is back, or replaced (a
//!   replacement being resilvered takes writes), before the next drain:
//!   the drain writes what was held, and nothing is lost. The pool
//!   commits nothing while such a device holds blocks it cannot write,
//!   which costs little more than the error already does: a timeout that
//!   outlasts the writer's lease makes the mount refuse writes anyway, and
//!   a full cluster fails the pool's other writes there too.
//! - **Give up: the device takes writes no more.** Any other write error
//!   (EIO, a local disk's error of any kind) faulted it; a device that says
//!   it is gone is missing; or it was faulted, missing or removed before
//!   the drain. It cannot serve reads again before it is resilvered or the
//!   pool reopened, and its writes fail at once, so holding its blocks
//!   could only stop every commit of the pool. [`drain_all`] drops them
//!   ([`GroupSpace::give_up`]) and returns them as [`LostWrites`], even
//!   when another device fails the commit; the commit goes on, so the
//!   other files' changes and the meta-data commit. The files they were
//!   written for fail: reads of those blocks fail naming the device (as
//!   every other non-redundant block on it does; the pool's block cache
//!   drops the files' blocks, `Fs::write_batch`), and each such file's
//!   next `fsync` reports the loss once (EIO, `fs/write_errors.rs`, as
//!   Linux's errseq does), as the pool's next `sync` does. The blocks stay
//!   allocated to their files, mapped as their records say: no space is
//!   leaked or freed twice, and it is freed as any block is when the file
//!   is truncated or removed.
//!
//! So a dead device fails its own files and never holds up the rest of
//! the pool, and nothing is acknowledged as durable without being on the
//! device. Only layouts with a `checksum` above the `colocate` hold
//! ([`may_hold`]), so a block given up reads as a checksum error if the
//! device comes back, never as what the space held before (free space or
//! another file's old data). A layout with `replicate`, `parity`,
//! `write-mostly` or `compress` above never holds: those parents judge a
//! child write by its result when it is made (a copy that failed later
//! could not be reported to the parent that counted it written).
//!
//! Space given back at once drops its held copies first, and space freed
//! through a journal batch is released only after that batch's commit has
//! drained, so a held copy never lands on a block's next owner (the
//! ordering rules are in `colocate/groups.rs`). A truncate or punch drops
//! the held copies of the blocks it unmaps.
//!
//! Concurrency: as `extent` (its map lock is held while runs are looked
//! up, allocated or dropped, never during data I/O); the group cache has
//! one lock per device, held only to look up, claim, fill, hold or copy
//! blocks; drains of a device run one at a time and never beside a
//! write-through of that device.

mod groups;

pub use groups::{GroupSpace, GroupStatsSnapshot, CACHE_BYTES, HOLD_BLOCKS};

use super::common::span;
use super::extent::{self, Extent, Placement};
use super::{Block, BlockType, BuildArgs, IoCtx, Layout, ParamKind, ParamSpec, Params, Value, BLOCK_SIZE};
use crate::codec::Encoder;
use crate::device::DeviceHandle;
use crate::error::{Error, Result};
use std::sync::Arc;

const KEYS: &[&str] = &["dir", "owner"];

pub static TYPE: BlockType = BlockType {
    name: "colocate",
    doc: "Like extent, but a file's first `group` bytes go in the group its key (directory or owner) is filling, so small files of a directory lie together and a read of one brings in its neighbours (C-FFS co-location, group reads).",
    params: &[
        ParamSpec {
            key: "group",
            kind: ParamKind::Size,
            default: Some("64K"),
            min: BLOCK_SIZE as u64,
            max: 1 << 20,
            doc: "size of a group: small files of one key share aligned runs this long, read whole on a miss",
        },
        ParamSpec {
            key: "key",
            kind: ParamKind::Choice(KEYS),
            default: Some("dir"),
            min: 0,
            max: 0,
            doc: "what files share groups by: dir (the directory a file is created in or reached through) or owner (its uid)",
        },
        extent::MAX_RUN,
    ],
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Dir,
    Owner,
}

struct Colocate {
    runs: Extent,
    /// Group length in blocks.
    group: u64,
    key: Key,
}

fn build(a: BuildArgs) -> Result<Arc<dyn Block>> {
    let bytes = a.params.num("group")?;
    if !bytes.is_multiple_of(BLOCK_SIZE as u64) {
        return Err(Error::Layout(format!("colocate: group={bytes} is not a multiple of 4K")));
    }
    let key = if a.params.word("key")? == "owner" { Key::Owner } else { Key::Dir };
    Ok(Arc::new(Colocate { runs: Extent::new(&TYPE, &a)?, group: bytes / BLOCK_SIZE as u64, key }))
}

thread_local! {
    static UNCACHED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static HOLD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with `colocate` reads going to the device, not the group cache
/// (a scrub must see what the device holds: held writes are drained first).
pub fn uncached<R>(f: impl FnOnce() -> R) -> R {
    crate::base::with_flag(&UNCACHED, f)
}

/// Runs `f` (a plain write of a file for which [`may_hold`] is true) with
/// the small-file writes of `colocate` nodes held for a group write.
pub fn holding<R>(f: impl FnOnce() -> R) -> R {
    crate::base::with_flag(&HOLD, f)
}

/// Whether writes to `layout` may be held: it has a `colocate` node, each
/// under a `checksum`, and nothing but `colocate`, `extent`, `checksum`,
/// `stripe` and `regions` (no parent that judges a child's write by its
/// result when made). The checksum is what makes a held write that never
/// reached its device (given up with a dead device, module docs) read as
/// an error once the device is back, never as the block's earlier contents
/// (a copy-on-write `checksum` puts every write in fresh space, whose old
/// contents fail the new checksum).
pub fn may_hold(layout: &Layout) -> bool {
    fn ok(b: &Arc<dyn Block>, checked: bool) -> bool {
        match b.kind().name {
            "colocate" => checked,
            "extent" => true,
            "checksum" => b.children().iter().all(|c| ok(c, true)),
            "stripe" | "regions" => b.children().iter().all(|c| ok(c, checked)),
            _ => false,
        }
    }
    layout.nodes().iter().any(|b| b.kind().name == TYPE.name) && ok(layout.root(), false)
}

/// Held writes a device that stopped taking writes gave up (module docs):
/// the files they were for, to be failed.
#[derive(Debug)]
pub struct LostWrites {
    pub device: u32,
    /// The inodes whose held blocks were dropped, sorted.
    pub owners: Vec<u64>,
    pub blocks: usize,
    /// What the drain met, naming the device.
    pub error: Error,
}

/// Writes every device's held blocks (module docs): before a journal
/// record or checkpoint that may point at them. Every device is tried. One
/// that takes writes no more gives its held blocks up, and they are pushed
/// to `lost` (whatever the call returns: dropped blocks must fail their
/// files even when another device fails the commit). One still taking
/// writes that fails (a transient error) keeps what it holds and fails the
/// call with the first such error.
pub fn drain_all(storage: &crate::pool::Storage, lost: &mut Vec<LostWrites>) -> Result<()> {
    let mut first = None;
    for h in storage.devs.iter() {
        if let Some(s) = h.shared_if::<GroupSpace>() {
            if s.dirty_blocks() > 0 {
                if let Err(e) = s.drain(h) {
                    match s.give_up(h) {
                        (_, 0) => {
                            first.get_or_insert(e);
                        }
                        (owners, blocks) => lost.push(LostWrites { device: h.index, owners, blocks, error: e }),
                    }
                }
            }
        }
    }
    first.map_or(Ok(()), Err)
}

/// Drains `dev`'s held blocks if it has any: before the device is read
/// behind the group cache.
fn drain_dev(dev: &DeviceHandle) -> Result<()> {
    match dev.shared_if::<GroupSpace>() {
        Some(s) if s.dirty_blocks() > 0 => s.drain(dev),
        _ => Ok(()),
    }
}

/// Empties the group caches of every device (the pool's caches dropped).
pub fn drop_caches(storage: &crate::pool::Storage) {
    for h in storage.devs.iter() {
        if let Some(s) = h.shared_if::<GroupSpace>() {
            s.cache.clear();
        }
    }
}

/// Group placement and group read counters of every device, summed.
pub fn stats(storage: &crate::pool::Storage) -> GroupStatsSnapshot {
    let mut t = GroupStatsSnapshot::default();
    for h in storage.devs.iter() {
        if let Some(s) = h.shared_if::<GroupSpace>() {
            t.cached_blocks += s.cache.len() as u64;
            t.dirty_blocks += s.dirty_blocks() as u64;
            let s = s.stats.snapshot();
            t.groups_opened += s.groups_opened;
            t.groups_taken_over += s.groups_taken_over;
            t.placed_blocks += s.placed_blocks;
            t.group_reads += s.group_reads;
            t.blocks_read_ahead += s.blocks_read_ahead;
            t.cache_hits += s.cache_hits;
            t.held_blocks += s.held_blocks;
            t.group_writes += s.group_writes;
            t.blocks_drained += s.blocks_drained;
            t.blocks_lost += s.blocks_lost;
        }
    }
    t
}

impl Colocate {
    fn key_of(&self, io: &IoCtx) -> u64 {
        match self.key {
            Key::Dir => io.origin.dir,
            Key::Owner => io.origin.uid as u64,
        }
    }

    fn put(&self, io: &IoCtx, fblk: u64, n: u64, buf: Option<&[u8]>) -> Result<()> {
        let h = self.runs.handle(io)?;
        let space = GroupSpace::of(h);
        let key = self.key_of(io);
        let take = |a: &crate::pool::Allocator, goal: Option<u64>, f: u64, want: u64| {
            if f < self.group {
                // Only the file's first group's worth is grouped.
                let want = want.min(self.group - f);
                if let Some(got) = space.place(a, key, self.group, goal, want) {
                    return Some(got);
                }
            }
            extent::next_fit(io, a, goal, want)
        };
        // Held: a plain write of blocks all in the first group (the file's
        // small-file part), outside a scrub.
        let hold = HOLD.with(|c| c.get()) && !UNCACHED.with(|c| c.get()) && fblk.saturating_add(n) <= self.group;
        let store = |dev: &DeviceHandle, p: u64, l: u64, data: Option<&[u8]>| {
            if hold {
                space.hold(dev, p, l, data, io.owner)
            } else {
                space.write_through(dev, p, l, data)
            }
        };
        let forget = |_: &DeviceHandle, p: u64, l: u64| space.forget(p, l);
        self.runs.put(io, &Placement { take: &take, store: &store, forget: &forget }, fblk, n, buf)
    }

    /// Drops the held copies of what a truncate or punch of file blocks
    /// [fblk, fblk+n) is about to unmap (only first-group blocks are held).
    /// Their space is freed through the request's batch, so a drain under
    /// way that writes them anyway writes space nobody else has yet.
    fn drop_held(&self, dev: &DeviceHandle, fblk: u64, n: u64) {
        let Some(space) = dev.shared_if::<GroupSpace>() else { return };
        if fblk >= self.group || space.dirty_blocks() == 0 {
            return;
        }
        for (_, p, l) in self.runs.readable(fblk, n.min(self.group - fblk)) {
            space.cache.discard(p, l);
        }
    }

    /// Reads device blocks [p, p+l) (file blocks from `f`) into `out`:
    /// from the group cache where they are, and otherwise by a group read.
    fn read_small(
        &self,
        dev: &DeviceHandle,
        space: &GroupSpace,
        io: &IoCtx,
        p: u64,
        l: u64,
        out: &mut [u8],
    ) -> Result<()> {
        // Cached blocks first, held (dirty) ones among them: a device read
        // below never overrides what the cache had when the read began.
        let have = space.cache.get_many(p, l, out);
        let mut i = 0;
        while i < l {
            let b = p + i;
            if have[i as usize] {
                space.stats.cache_hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                i += 1;
                continue;
            }
            let o = &mut out[i as usize * BLOCK_SIZE..(i as usize + 1) * BLOCK_SIZE];
            // The used run of b's group around it (never free space), and
            // at least the rest of this request's piece within the group.
            let lo = b - b % self.group;
            let hi = lo.saturating_add(self.group).min(dev.blocks());
            let alloc = io.storage.allocs.get(self.runs.dev() as usize);
            let (a, e) = alloc.map_or((b, b + 1), |al| al.used_around(b, lo, hi));
            let e = e.max((p + l).min(hi)).max(b + 1);
            let a = a.min(b);
            let claimed = space.cache.claim(a, e);
            if !claimed.contains(&b) {
                // Another reader is bringing b in: read it alone.
                dev.read_blocks(b, o)?;
                i += 1;
                continue;
            }
            let mut data = vec![0u8; (e - a) as usize * BLOCK_SIZE];
            if let Err(err) = dev.read_blocks(a, &mut data) {
                space.cache.abort(&claimed);
                return Err(err);
            }
            space.stats.group_reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            space.stats.blocks_read_ahead.fetch_add(claimed.len() as u64 - 1, std::sync::atomic::Ordering::Relaxed);
            // This request's own blocks come from the read, whatever the
            // cache kept, except those it had when the read began.
            let upto = (p + l).min(e);
            for j in b..upto {
                let k = (j - p) as usize;
                if !have[k] {
                    let s = (j - a) as usize * BLOCK_SIZE;
                    out[k * BLOCK_SIZE..(k + 1) * BLOCK_SIZE].copy_from_slice(&data[s..s + BLOCK_SIZE]);
                }
            }
            space.cache.fill(a, &data, &claimed);
            i = upto - p;
        }
        Ok(())
    }
}

impl GroupSpace {
    /// The device-wide state of `colocate` on `h`.
    pub fn of(h: &DeviceHandle) -> Arc<GroupSpace> {
        h.shared(GroupSpace::default)
    }
}

impl Block for Colocate {
    fn id(&self) -> u32 {
        self.runs.id()
    }
    fn kind(&self) -> &'static BlockType {
        &TYPE
    }
    fn params(&self) -> Params {
        let mut p = self.runs.params();
        p.0.insert("group".into(), Value::Num(self.group * BLOCK_SIZE as u64));
        let key = if self.key == Key::Owner { "owner" } else { "dir" };
        p.0.insert("key".into(), Value::Word(key.into()));
        p
    }
    fn device(&self) -> Option<u32> {
        Some(self.runs.dev())
    }

    fn read(&self, io: &IoCtx, fblk: u64, buf: &mut [u8]) -> Result<()> {
        let n = span(fblk, buf.len())?;
        let dev = self.runs.handle(io)?;
        let segs = self.runs.readable(fblk, n);
        let uncached = UNCACHED.with(|c| c.get());
        if uncached {
            // The device must hold what the cache holds before it is read.
            drain_dev(dev)?;
        }
        let cached = fblk < self.group && !uncached;
        if !cached {
            return extent::read_segs(dev, &segs, fblk, buf);
        }
        let space = GroupSpace::of(dev);
        let mut pos = 0;
        for &(f, p, l) in &segs {
            let start = (f - fblk) as usize * BLOCK_SIZE;
            buf[pos..start].fill(0);
            // The part in the first group goes through the cache.
            let small = if f < self.group { l.min(self.group - f) } else { 0 };
            let end = start + l as usize * BLOCK_SIZE;
            let mid = start + small as usize * BLOCK_SIZE;
            if small > 0 {
                self.read_small(dev, &space, io, p, small, &mut buf[start..mid])?;
            }
            if mid < end {
                dev.read_blocks(p + small, &mut buf[mid..end])?;
            }
            pos = end;
        }
        buf[pos..].fill(0);
        Ok(())
    }

    fn write(&self, io: &IoCtx, fblk: u64, buf: &[u8]) -> Result<()> {
        self.put(io, fblk, span(fblk, buf.len())?, Some(buf))
    }

    fn write_zeroes(&self, io: &IoCtx, fblk: u64, n: u64) -> Result<()> {
        fblk.checked_add(n).ok_or_else(|| Error::TooBig(format!("block {fblk} + {n}")))?;
        self.put(io, fblk, n, None)
    }

    fn truncate(&self, io: &IoCtx, nblocks: u64) -> Result<()> {
        // (A node whose device left the pool holds nothing.)
        if let Ok(dev) = self.runs.handle(io) {
            self.drop_held(dev, nblocks, u64::MAX - nblocks);
        }
        self.runs.truncate(io, nblocks)
    }

    fn can_shift(&self, from: u64, delta: i64) -> bool {
        self.runs.can_shift(from, delta)
    }

    fn shift(&self, io: &IoCtx, from: u64, delta: i64) -> Result<()> {
        // Blocks may move out of the first group, where reads go straight
        // to the device: nothing stays held across a shift.
        if let Ok(dev) = self.runs.handle(io) {
            drain_dev(dev)?;
        }
        self.runs.shift(io, from, delta)
    }

    fn punch(&self, io: &IoCtx, fblk: u64, n: u64) -> Result<()> {
        if let (true, Some(_), Ok(dev)) = (n > 0, fblk.checked_add(n), self.runs.handle(io)) {
            self.drop_held(dev, fblk, n);
        }
        self.runs.punch(io, fblk, n)
    }

    fn encode_state(&self, e: &mut Encoder) {
        self.runs.encode_state(e)
    }

    fn apply(&self, payload: &[u8]) -> Result<()> {
        self.runs.apply(payload)
    }

    fn extents(&self, f: &mut dyn FnMut(u32, u64, u64)) {
        self.runs.extents(f)
    }

    fn next_data(&self, fblk: u64) -> Option<u64> {
        self.runs.next_data(fblk)
    }

    /// Moves blocks as a write would, but blocks of the first group go
    /// where every first-group block the file has from there on fits in one
    /// group: right after the file's preceding blocks, else in the key's
    /// group, else in a new one (regrouping, C-FFS 2.3.4).
    fn relocate(&self, io: &IoCtx, fblk: u64, pblk: u64, n: u64) -> Result<u64> {
        let h = self.runs.handle(io)?;
        let space = GroupSpace::of(h);
        let key = self.key_of(io);
        let take = |a: &crate::pool::Allocator, goal: Option<u64>, f: u64, want: u64| {
            if f < self.group {
                let want = want.min(self.group - f);
                // Pieces moved before this one are mapped at their new
                // place already: what is mapped from f on is left to move.
                let room = self.runs.readable(f, self.group - f).iter().map(|s| s.2).sum::<u64>().max(want);
                if let Some(got) = space.place_together(a, key, self.group, goal, want, room) {
                    return Some(got);
                }
            }
            extent::next_fit(io, a, goal, want)
        };
        // The old blocks are read from the device: held copies go first.
        drain_dev(h)?;
        let store = |dev: &DeviceHandle, p: u64, l: u64, data: Option<&[u8]>| space.write_through(dev, p, l, data);
        let forget = |_: &DeviceHandle, p: u64, l: u64| space.forget(p, l);
        self.runs.relocate(io, &Placement { take: &take, store: &store, forget: &forget }, fblk, pblk, n)
    }

    /// The first group's blocks, unless they lie in one run in one group.
    fn scattered(&self) -> Vec<(u64, u64, u64)> {
        let segs = self.runs.readable(0, self.group);
        let (Some(first), Some(last)) = (segs.first(), segs.last()) else { return segs };
        let one_run = segs.windows(2).all(|w| w[1].1 == w[0].1 + w[0].2);
        if one_run && first.1 / self.group == (last.1 + last.2 - 1) / self.group {
            return Vec::new();
        }
        segs
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Layout, Origin, Spec};
    use super::*;
    use crate::device::{Device, MemDevice};
    use crate::pool::{Allocator, Storage};

    const BS: usize = BLOCK_SIZE;

    fn storage(blocks: u64) -> Storage {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new("mem:0", blocks * BS as u64));
        Storage { allocs: vec![Allocator::new(1, blocks)].into(), devs: vec![DeviceHandle::new(0, dev)].into() }
    }

    fn spec() -> Spec {
        Spec { kind: "colocate".into(), params: vec![], children: vec![], device: Some(0) }
    }

    fn first_block(l: &Layout) -> u64 {
        let mut first = u64::MAX;
        l.extents(&mut |_, p, _| first = first.min(p));
        first
    }

    #[test]
    fn files_of_a_directory_lie_together_and_one_miss_reads_them_all() {
        let s = storage(4096);
        let sink = |_| {};
        // Files of two directories created alternately.
        let mut files = Vec::new();
        for i in 0..8u64 {
            let dir = 100 + i % 2;
            let io = IoCtx {
                owner: 10 + i,
                origin: Origin { dir, uid: 0 },
                storage: &s,
                epoch: 1,
                sink: &sink,
                repair: true,
            };
            let l = Layout::build(&spec()).unwrap();
            l.root().write(&io, 0, &vec![i as u8 + 1; BS]).unwrap();
            files.push((dir, l));
        }
        let of = |d: u64| files.iter().filter(|(dir, _)| *dir == d).map(|(_, l)| first_block(l)).collect::<Vec<_>>();
        let (a, b) = (of(100), of(101));
        assert!(a.windows(2).all(|w| w[1] == w[0] + 1), "{a:?}");
        assert!(b.windows(2).all(|w| w[1] == w[0] + 1), "{b:?}");
        assert_eq!(a[0] / 16, a[3] / 16, "one group");
        let space = GroupSpace::of(&s.devs[0]);
        space.cache.clear();
        let before = s.devs[0].stats.snapshot().reads;
        let io = IoCtx { owner: 0, origin: Origin::NONE, storage: &s, epoch: 0, sink: &sink, repair: false };
        for (i, (_, l)) in files.iter().enumerate() {
            let mut out = vec![0u8; BS];
            l.root().read(&io, 0, &mut out).unwrap();
            assert_eq!(out, vec![i as u8 + 1; BS]);
        }
        // One group read per directory.
        assert_eq!(s.devs[0].stats.snapshot().reads - before, 2);
        // A write after the group read is what a later read sees.
        let wio =
            IoCtx { owner: 10, origin: Origin { dir: 100, uid: 0 }, storage: &s, epoch: 2, sink: &sink, repair: true };
        files[0].1.root().write(&wio, 0, &vec![0xEE; BS]).unwrap();
        let mut out = vec![0u8; BS];
        files[0].1.root().read(&io, 0, &mut out).unwrap();
        assert_eq!(out, vec![0xEE; BS]);
        // The device holds it too.
        uncached(|| files[0].1.root().read(&io, 0, &mut out)).unwrap();
        assert_eq!(out, vec![0xEE; BS]);
    }

    #[test]
    fn a_large_file_goes_on_past_its_group_in_one_run() {
        let s = storage(4096);
        let sink = |_| {};
        let io =
            IoCtx { owner: 1, origin: Origin { dir: 5, uid: 0 }, storage: &s, epoch: 1, sink: &sink, repair: true };
        let l = Layout::build(&spec()).unwrap();
        let data: Vec<u8> = (0..64 * BS).map(|i| (i / BS) as u8).collect();
        l.root().write(&io, 0, &data).unwrap();
        let mut out = vec![0u8; data.len()];
        l.root().read(&io, 0, &mut out).unwrap();
        assert_eq!(out, data);
        let mut runs = Vec::new();
        l.extents(&mut |_, p, n| runs.push((p, n)));
        // Its first 16 blocks fill a group, the rest follow them.
        assert_eq!(runs, vec![(16, 64)]);
        // A small file of the same directory opens the next free group.
        let small = Layout::build(&spec()).unwrap();
        small.root().write(&io, 0, &[3u8; BS]).unwrap();
        assert_eq!(first_block(&small), 80);
    }
}
