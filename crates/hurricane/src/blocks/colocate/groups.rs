//! The device-wide side of `colocate` ([`GroupSpace`], one per device, kept
//! on its handle): the group each key is filling, and the cache of device
//! blocks that group reads fill.
//!
//! # Groups
//!
//! A group is an aligned run of `group` device blocks (C-FFS's 64 KiB
//! "segments" of keyed co-location). A key (a directory, an owner) fills
//! one group at a time: a small file's blocks go right after the key's
//! previous ones, so the small files of a directory lie side by side. A
//! group is not reserved: it is taken from the allocator whole when it is
//! opened and everything past the first file's blocks is given straight
//! back, so no space is held for a key across a crash or a close, and the
//! next block is then claimed only if it is still free (other files may
//! have taken it meanwhile, which costs co-location, never correctness).
//! New groups are opened one after another up the device.
//!
//! A key that needs a group right after another key placed at least half
//! a group's blocks in a row takes the free end of that key's group
//! instead of opening one ([`GroupSpace::place`]): a directory written
//! whole leaves its last group part-filled, and the next directory goes
//! on there, so directories written one after another lie without gaps a
//! sequential read would have to wait through. The key that gave the end
//! up opens a new group if it places blocks again. Keys written in turns
//! (a few blocks each) never hand anything over and keep their own groups.
//!
//! # The group cache
//!
//! Device blocks, keyed by device block number (C-FFS's physical block
//! cache), filled by group reads: a miss on one small-file block reads the
//! used run of its group around it in one request and keeps every block of
//! it that was not cached yet. It is coherent because of one rule: a
//! `colocate` node maps a device block only after its own write of it went
//! through [`GroupCache::written`] (which replaces a cached copy and marks
//! one still being read stale), so a copy of a block's earlier life (another
//! file's data, free space) can sit in the cache but is never served. Every
//! block being read is marked as loading before the device read starts, and
//! only blocks still so marked, and not overtaken by a write, are filled
//! when it ends.
//!
//! # Held writes (group writes)
//!
//! The cache also holds *dirty* blocks: writes of small files that have
//! not gone to the device yet ([`GroupCache::hold`]). They are served to
//! reads like any cached block, never evicted, and leave in
//! [`GroupSpace::drain`]: sorted by device block, each run of adjacent
//! dirty blocks in one request (C-FFS's group write, 2.3.3). A drain runs
//! at every commit before the journal record or checkpoint that points at
//! the data (`Fs::write_batch`), early when a device holds more than
//! [`HOLD_BLOCKS`], and before anything reads the device behind the cache
//! (scrub, a relocation, a shift of the file's blocks).
//!
//! Ordering. Every dirty block carries a sequence number; a drain copies
//! the dirty blocks under the cache lock, writes them unlocked, and marks
//! clean only those not written again meanwhile. Drains of one device run
//! one at a time (`order` taken exclusively), so two versions of a block
//! never reach the device out of order; a write that goes to the device
//! directly (not held) takes `order` shared, so it never overlaps a drain
//! and what it leaves in the cache is what the device holds. Space given
//! back at once (not through a journal batch) first loses its dirty copies
//! under `order` exclusively ([`GroupSpace::forget`]), so no drain writes a
//! stale copy over the block's next owner; space freed through a batch is
//! released only after that batch's commit drained it.
//!
//! Errors. A drain that fails leaves its blocks dirty (readable, retried
//! by the next drain) and returns the error. What the commit that asked for
//! it does then depends on the device's state after the failure
//! (`colocate::drain_all`; the rule and why are in `colocate.rs`): one
//! still taking writes (the error was transient: a timeout, a full
//! cluster) fails the commit (its journal record is not written, the sync
//! or fsync that waited reports the error, and the next commit tries
//! again); one that no longer takes writes (faulted by the failed write,
//! missing, removed) gives its held blocks up ([`GroupSpace::give_up`]):
//! they are dropped, their owners (the inode each dirty block was written
//! for) are reported so that their next fsync fails once, and the commit
//! goes on, so a dead device fails its own files, never the pool's other
//! changes. Dropping a dirty block changes no allocation: the space stays
//! its file's, and a block freed through the commit's batch is released
//! after it as before, so nothing is leaked or freed twice.

use crate::device::DeviceHandle;
use crate::error::Result;
use crate::pool::Allocator;
use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use super::super::BLOCK_SIZE;

/// Memory bound of one device's group cache.
pub const CACHE_BYTES: usize = 32 << 20;

/// Dirty blocks one device may hold before a writer drains them (4 MiB).
pub const HOLD_BLOCKS: usize = 1024;

/// Longest single request a drain makes, in blocks (1 MiB).
const DRAIN_RUN: usize = 256;

/// The device-wide state of `colocate` on one device.
#[derive(Default)]
pub struct GroupSpace {
    /// (key, group length) -> the group the key is filling.
    open: Mutex<Groups>,
    pub(super) cache: GroupCache,
    pub(super) stats: GroupStats,
    /// Drains take it exclusively, writes that bypass the hold shared
    /// (module docs: ordering). It holds the buffer a drain gathers each
    /// run in, kept from one drain to the next: a fresh megabyte for every
    /// run cost more than the copy itself (new memory is zeroed by the
    /// kernel when first touched).
    order: RwLock<Vec<u8>>,
}

#[derive(Default)]
struct Groups {
    by_key: HashMap<(u64, u64), Open>,
    /// Where the next group is looked for: after the last one opened.
    from: u64,
    /// The (key, group length) whose blocks were placed last, and how many
    /// it placed in a row.
    run: Option<((u64, u64), u64)>,
}

impl Groups {
    fn placed(&mut self, key: (u64, u64), n: u64) {
        self.run = match self.run {
            Some((k, m)) if k == key => Some((k, m + n)),
            _ => Some((key, n)),
        };
    }

    /// The free end of the group of the key that placed the last run of
    /// blocks, when `key` may take it over: that key is another one with
    /// groups of the same length, placed at least half a group in a row,
    /// and left at least `room` (one or more) blocks of its group.
    fn handed_over(&self, key: (u64, u64), room: u64) -> Option<((u64, u64), Open)> {
        let (k, m) = self.run?;
        if k == key || k.1 != key.1 || m < key.1.div_ceil(2) {
            return None;
        }
        let o = *self.by_key.get(&k)?;
        (o.start + key.1 - o.next >= room.max(1)).then_some((k, o))
    }
}

#[derive(Clone, Copy)]
struct Open {
    /// The group is [start, start + len).
    start: u64,
    /// The next block to hand out.
    next: u64,
}

/// Counters of one device's group placement and group reads.
#[derive(Default)]
pub struct GroupStats {
    pub groups_opened: AtomicU64,
    pub placed_blocks: AtomicU64,
    pub groups_taken_over: AtomicU64,
    pub group_reads: AtomicU64,
    pub blocks_read_ahead: AtomicU64,
    pub cache_hits: AtomicU64,
    pub held_blocks: AtomicU64,
    pub group_writes: AtomicU64,
    pub blocks_drained: AtomicU64,
    pub blocks_lost: AtomicU64,
}

/// A snapshot of [`GroupStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupStatsSnapshot {
    /// Groups opened for a key.
    pub groups_opened: u64,
    /// Blocks placed in a key's group.
    pub placed_blocks: u64,
    /// Free ends of groups a key took over from the key before it (in
    /// place of opening a group).
    pub groups_taken_over: u64,
    /// Device reads of a group made on a miss.
    pub group_reads: u64,
    /// Blocks those reads brought in beside the one asked for.
    pub blocks_read_ahead: u64,
    /// Small-file blocks served from the group cache.
    pub cache_hits: u64,
    /// Blocks the group caches hold now.
    pub cached_blocks: u64,
    /// Block writes held back to leave in a group write.
    pub held_blocks: u64,
    /// Device writes made by drains of held blocks (one per run).
    pub group_writes: u64,
    /// Blocks those writes carried.
    pub blocks_drained: u64,
    /// Held blocks not drained yet.
    pub dirty_blocks: u64,
    /// Held blocks dropped because their device stopped taking writes.
    pub blocks_lost: u64,
}

impl GroupStats {
    pub fn snapshot(&self) -> GroupStatsSnapshot {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        GroupStatsSnapshot {
            groups_opened: g(&self.groups_opened),
            placed_blocks: g(&self.placed_blocks),
            groups_taken_over: g(&self.groups_taken_over),
            group_reads: g(&self.group_reads),
            blocks_read_ahead: g(&self.blocks_read_ahead),
            cache_hits: g(&self.cache_hits),
            cached_blocks: 0,
            held_blocks: g(&self.held_blocks),
            group_writes: g(&self.group_writes),
            blocks_drained: g(&self.blocks_drained),
            dirty_blocks: 0,
            blocks_lost: g(&self.blocks_lost),
        }
    }
}

impl GroupSpace {
    /// Up to `want` blocks in the group `key` is filling (groups of `len`
    /// blocks), right after `goal` (the end of the file's own preceding
    /// blocks) when that is in a group and free: (start, count). When the
    /// key has no group or its group is full, takes over the free end of
    /// the group of a key that placed half a group in a row just before
    /// (module docs), or else opens a new group; None when no whole group
    /// is free (the caller then places the blocks as `extent` would).
    pub fn place(&self, alloc: &Allocator, key: u64, len: u64, goal: Option<u64>, want: u64) -> Option<(u64, u64)> {
        let k = (key, len);
        let mut g = self.open.lock();
        let got = self.place_locked(&mut g, alloc, k, goal, want, 1)?;
        Some(self.placed(&mut g, k, got))
    }

    /// Counts blocks placed for `k`: (start, count) as given.
    fn placed(&self, g: &mut Groups, k: (u64, u64), (at, n): (u64, u64)) -> (u64, u64) {
        g.placed(k, n);
        self.stats.placed_blocks.fetch_add(n, Ordering::Relaxed);
        (at, n)
    }

    /// [`GroupSpace::place`] under the lock, taking over another key's
    /// group only where at least `room` blocks of it are left.
    fn place_locked(
        &self,
        g: &mut Groups,
        alloc: &Allocator,
        k: (u64, u64),
        goal: Option<u64>,
        want: u64,
        room: u64,
    ) -> Option<(u64, u64)> {
        let len = k.1;
        // Go on in the group the file's previous block is in.
        if let Some(p) = goal.filter(|p| p % len != 0) {
            let end = p.div_ceil(len) * len;
            if let Some(n) = take_some(alloc, p, want.min(end - p)) {
                return Some((p, n));
            }
        }
        if let Some(o) = g.by_key.get_mut(&k) {
            let end = o.start + len;
            while o.next < end {
                if let Some(n) = take_some(alloc, o.next, want.min(end - o.next)) {
                    let at = o.next;
                    o.next += n;
                    return Some((at, n));
                }
                o.next += 1;
            }
        }
        // The free end of the group the key before this one left.
        if let Some((j, o)) = g.handed_over(k, room) {
            if let Some(n) = take_some(alloc, o.next, want.min(o.start + len - o.next)) {
                g.by_key.remove(&j);
                g.by_key.insert(k, Open { start: o.start, next: o.next + n });
                self.stats.groups_taken_over.fetch_add(1, Ordering::Relaxed);
                return Some((o.next, n));
            }
        }
        let start = alloc.alloc_aligned_from(len, g.from)?;
        let n = want.min(len);
        alloc.free_now(start + n, len - n);
        g.from = start + len;
        g.by_key.insert(k, Open { start, next: start + n });
        self.stats.groups_opened.fetch_add(1, Ordering::Relaxed);
        Some((start, n))
    }
}

impl GroupSpace {
    /// [`GroupSpace::place`] for blocks being regrouped: `want` blocks, the
    /// first of `room` (at least `want`) that should lie together in one
    /// group. Right after `goal` when `room` blocks fit there in its group
    /// and `want` are free; else at the first `room` free blocks in a row
    /// in the key's group; else in a new group. Only `want` blocks are
    /// taken: the rest of the room is left free for the pieces after.
    pub fn place_together(
        &self,
        alloc: &Allocator,
        key: u64,
        len: u64,
        goal: Option<u64>,
        want: u64,
        room: u64,
    ) -> Option<(u64, u64)> {
        if want == 0 || want > len {
            return None;
        }
        let room = room.max(want).min(len);
        let mut g = self.open.lock();
        let at = 'found: {
            let mut open = g.by_key.get_mut(&(key, len));
            // Takes `want` of `room` free blocks at p.
            let take = |p: u64, open: &mut Option<&mut Open>| {
                if !alloc.take_if_free(p, room) {
                    return false;
                }
                alloc.free_now(p + want, room - want);
                if let Some(o) = open.as_deref_mut().filter(|o| o.next == p) {
                    o.next += want;
                }
                self.stats.placed_blocks.fetch_add(want, Ordering::Relaxed);
                true
            };
            if let Some(p) = goal.filter(|p| p % len != 0) {
                if p + room <= p.div_ceil(len) * len && take(p, &mut open) {
                    break 'found Some(p);
                }
            }
            if let Some((start, next)) = open.as_deref().map(|o| (o.start, o.next)) {
                let end = start + len;
                for p in next..(end + 1).saturating_sub(room) {
                    if take(p, &mut open) {
                        break 'found Some(p);
                    }
                }
                if let Some(o) = open {
                    o.next = end;
                }
            }
            None
        };
        if let Some(p) = at {
            g.placed((key, len), want);
            return Some((p, want));
        }
        // Too full for them: the key goes on in another group.
        let got = self.place_locked(&mut g, alloc, (key, len), None, want, room)?;
        Some(self.placed(&mut g, (key, len), got))
    }
}

impl GroupSpace {
    /// Holds blocks [p, p+n) of a write (`data`, or zeros with None) in
    /// the cache, to leave with their neighbours in the next drain. Drains
    /// first when the device holds too much (an error then is the
    /// writer's, and nothing of its write is held). `owner` is the inode
    /// the write is for, reported if the blocks are given up.
    pub(super) fn hold(&self, dev: &DeviceHandle, p: u64, n: u64, data: Option<&[u8]>, owner: u64) -> Result<()> {
        dev.check_writable()?;
        if self.cache.dirty_len() + n as usize > HOLD_BLOCKS {
            self.drain(dev)?;
        }
        self.cache.hold(p, n, data, owner);
        self.stats.held_blocks.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    /// Writes blocks [p, p+n) to the device now (zeros with None) and
    /// then through the cache: never during a drain (module docs).
    pub(super) fn write_through(&self, dev: &DeviceHandle, p: u64, n: u64, data: Option<&[u8]>) -> Result<()> {
        let _o = self.order.read();
        let r = match data {
            Some(buf) => dev.write_blocks(p, buf),
            None => dev.zero_blocks(p, n),
        };
        self.cache.written(p, n, data, r.is_err());
        r
    }

    /// Writes every dirty block to the device, adjacent blocks in one
    /// request, and marks those not written again meanwhile clean. On an
    /// error the blocks not written stay dirty and the first error is
    /// returned.
    pub fn drain(&self, dev: &DeviceHandle) -> Result<()> {
        let mut buf = self.order.write();
        let runs = self.cache.dirty_runs(DRAIN_RUN);
        if runs.is_empty() {
            return Ok(());
        }
        let mut first_err = None;
        let mut done = Vec::new();
        for (start, n) in runs {
            let seqs = self.cache.copy_run(start, n, &mut buf);
            if seqs.is_empty() {
                continue;
            }
            // Plain data writes: ordered mode flushes them before the
            // journal's next record, whoever's thread drains them.
            match crate::device::not_verified(|| dev.write_blocks(start, &buf)) {
                Ok(()) => {
                    self.stats.group_writes.fetch_add(1, Ordering::Relaxed);
                    self.stats.blocks_drained.fetch_add(seqs.len() as u64, Ordering::Relaxed);
                    done.extend(seqs.into_iter().enumerate().map(|(i, s)| (start + i as u64, s)));
                }
                Err(e) => {
                    tracing::warn!(device = dev.index, "group write of blocks {start}+{}: {e}", seqs.len());
                    first_err.get_or_insert(e);
                }
            }
        }
        self.cache.cleaned(&done);
        first_err.map_or(Ok(()), Err)
    }

    /// Drops the dirty copies of blocks [p, p+n), which are being given
    /// back for immediate reuse: waits for a drain under way, so none of
    /// them reaches the device after this returns.
    pub(super) fn forget(&self, p: u64, n: u64) {
        if n == 0 || self.cache.dirty_len() == 0 {
            return;
        }
        let _o = self.order.write();
        self.cache.discard(p, n);
    }

    /// Drops every dirty block of a device that takes writes no more
    /// (module docs: errors), after waiting for a drain under way: the
    /// owners of what was dropped, sorted, and how many blocks. Nothing is
    /// dropped while the device takes writes (a drain will get them out).
    pub fn give_up(&self, dev: &DeviceHandle) -> (Vec<u64>, usize) {
        if dev.state().writable() {
            return (Vec::new(), 0);
        }
        let _o = self.order.write();
        let (owners, n) = self.cache.drop_dirty();
        self.stats.blocks_lost.fetch_add(n as u64, Ordering::Relaxed);
        (owners, n)
    }

    /// Dirty blocks held now.
    pub fn dirty_blocks(&self) -> usize {
        self.cache.dirty_len()
    }
}

/// Takes `want` blocks at `p` if free, else the one block at `p` if free.
fn take_some(alloc: &Allocator, p: u64, want: u64) -> Option<u64> {
    if want == 0 {
        return None;
    }
    if alloc.take_if_free(p, want) {
        return Some(want);
    }
    (want > 1 && alloc.take_if_free(p, 1)).then_some(1)
}

enum Slot {
    /// Being read by a group read; `stale` once a write overtook it.
    Loading {
        stale: bool,
    },
    Ready(Box<[u8]>),
    /// Written by a held write, not on the device yet; `seq` tells one
    /// version from the next, `owner` is the inode it was written for.
    Dirty {
        data: Box<[u8]>,
        seq: u64,
        owner: u64,
    },
}

#[derive(Default)]
struct CacheInner {
    slots: HashMap<u64, Slot>,
    /// Filled blocks, oldest first (a block filled twice is listed twice;
    /// the older entry then evicts it early, which costs a hit at most).
    order: VecDeque<u64>,
    ready: usize,
    dirty: usize,
    seq: u64,
}

/// Device blocks read by group reads (module docs: the coherence rule).
#[derive(Default)]
pub struct GroupCache {
    inner: Mutex<CacheInner>,
}

impl GroupCache {
    const CAP: usize = CACHE_BYTES / BLOCK_SIZE;

    /// Copies device block `p` into `out` if it is cached (clean or dirty).
    #[cfg(test)]
    pub fn get(&self, p: u64, out: &mut [u8]) -> bool {
        match self.inner.lock().slots.get(&p) {
            Some(Slot::Ready(b)) | Some(Slot::Dirty { data: b, .. }) => {
                out.copy_from_slice(b);
                true
            }
            _ => false,
        }
    }

    /// [`GroupCache::get`] of blocks [p, p+n) into `out` at once: which of
    /// them were cached.
    pub fn get_many(&self, p: u64, n: u64, out: &mut [u8]) -> Vec<bool> {
        let c = self.inner.lock();
        (0..n)
            .map(|i| match c.slots.get(&(p + i)) {
                Some(Slot::Ready(b)) | Some(Slot::Dirty { data: b, .. }) => {
                    out[i as usize * BLOCK_SIZE..(i as usize + 1) * BLOCK_SIZE].copy_from_slice(b);
                    true
                }
                _ => false,
            })
            .collect()
    }

    /// Blocks [p, p+n) take `data` (zeros with None) as dirty blocks of
    /// inode `owner`.
    pub fn hold(&self, p: u64, n: u64, data: Option<&[u8]>, owner: u64) {
        let mut c = self.inner.lock();
        for (i, b) in (p..p + n).enumerate() {
            let block: Box<[u8]> = match data {
                Some(d) => d[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE].into(),
                None => vec![0u8; BLOCK_SIZE].into(),
            };
            c.seq += 1;
            let seq = c.seq;
            match c.slots.insert(b, Slot::Dirty { data: block, seq, owner }) {
                Some(Slot::Dirty { .. }) => {}
                Some(Slot::Ready(_)) => {
                    c.ready -= 1;
                    c.dirty += 1;
                }
                // A group read under way finds the slot no longer loading
                // and keeps nothing of it.
                Some(Slot::Loading { .. }) | None => c.dirty += 1,
            }
        }
    }

    /// The dirty blocks, as runs of adjacent blocks of at most `max`:
    /// (first block, number of blocks).
    pub fn dirty_runs(&self, max: usize) -> Vec<(u64, usize)> {
        let mut blocks: Vec<u64> = {
            let c = self.inner.lock();
            if c.dirty == 0 {
                return Vec::new();
            }
            c.slots.iter().filter(|(_, s)| matches!(s, Slot::Dirty { .. })).map(|(&p, _)| p).collect()
        };
        blocks.sort_unstable();
        let mut runs: Vec<(u64, usize)> = Vec::new();
        for p in blocks {
            match runs.last_mut() {
                Some((start, n)) if *start + *n as u64 == p && *n < max => *n += 1,
                _ => runs.push((p, 1)),
            }
        }
        runs
    }

    /// Copies the dirty blocks [p, p+n) into `buf` (emptied first), up to
    /// the first that is not dirty: the sequence number of each block
    /// copied. Under a drain's exclusive `order` a dirty block stays dirty
    /// (only its data may change, with its number), so the whole run is
    /// copied.
    pub fn copy_run(&self, p: u64, n: usize, buf: &mut Vec<u8>) -> Vec<u64> {
        buf.clear();
        buf.reserve(n * BLOCK_SIZE);
        let c = self.inner.lock();
        let mut seqs = Vec::with_capacity(n);
        for b in p..p + n as u64 {
            let Some(Slot::Dirty { data, seq, .. }) = c.slots.get(&b) else { break };
            buf.extend_from_slice(data);
            seqs.push(*seq);
        }
        seqs
    }

    /// Blocks a drain wrote, with the version it wrote: those still at
    /// that version are clean now.
    pub fn cleaned(&self, done: &[(u64, u64)]) {
        let mut c = self.inner.lock();
        for &(p, seq) in done {
            if let Some(slot) = c.slots.get_mut(&p) {
                if matches!(slot, Slot::Dirty { seq: s, .. } if *s == seq) {
                    let Slot::Dirty { data, .. } = std::mem::replace(slot, Slot::Loading { stale: true }) else {
                        continue;
                    };
                    *slot = Slot::Ready(data);
                    c.dirty -= 1;
                    c.ready += 1;
                    c.order.push_back(p);
                }
            }
        }
        Self::evict(&mut c);
    }

    /// Drops the dirty copies of blocks [p, p+n).
    pub fn discard(&self, p: u64, n: u64) {
        let mut c = self.inner.lock();
        if c.dirty == 0 {
            return;
        }
        for b in p..p + n {
            if matches!(c.slots.get(&b), Some(Slot::Dirty { .. })) {
                c.slots.remove(&b);
                c.dirty -= 1;
            }
        }
    }

    /// Drops every dirty block: the owners they were held for (sorted,
    /// each once) and how many there were.
    pub fn drop_dirty(&self) -> (Vec<u64>, usize) {
        let mut c = self.inner.lock();
        if c.dirty == 0 {
            return (Vec::new(), 0);
        }
        let mut owners = Vec::new();
        c.slots.retain(|_, s| match s {
            Slot::Dirty { owner, .. } => {
                owners.push(*owner);
                false
            }
            _ => true,
        });
        let n = c.dirty;
        c.dirty = 0;
        owners.sort_unstable();
        owners.dedup();
        (owners, n)
    }

    /// Dirty blocks held.
    pub fn dirty_len(&self) -> usize {
        self.inner.lock().dirty
    }

    fn evict(c: &mut CacheInner) {
        while c.ready > Self::CAP {
            let Some(p) = c.order.pop_front() else { break };
            if matches!(c.slots.get(&p), Some(Slot::Ready(_))) {
                c.slots.remove(&p);
                c.ready -= 1;
            }
        }
    }

    /// Marks every block of [a, b) that is not cached or being read as
    /// loading, and returns them: the caller reads them and passes them to
    /// [`GroupCache::fill`] (or [`GroupCache::abort`]).
    pub fn claim(&self, a: u64, b: u64) -> Vec<u64> {
        let mut c = self.inner.lock();
        let mut got = Vec::new();
        for p in a..b {
            if let std::collections::hash_map::Entry::Vacant(v) = c.slots.entry(p) {
                v.insert(Slot::Loading { stale: false });
                got.push(p);
            }
        }
        got
    }

    /// Keeps the claimed blocks of `data` (device blocks from `a` on) that
    /// no write overtook.
    pub fn fill(&self, a: u64, data: &[u8], claimed: &[u64]) {
        let mut c = self.inner.lock();
        for &p in claimed {
            let fresh = matches!(c.slots.get(&p), Some(Slot::Loading { stale: false }));
            if !fresh {
                if matches!(c.slots.get(&p), Some(Slot::Loading { .. })) {
                    c.slots.remove(&p);
                }
                continue;
            }
            let i = (p - a) as usize * BLOCK_SIZE;
            c.slots.insert(p, Slot::Ready(data[i..i + BLOCK_SIZE].into()));
            c.order.push_back(p);
            c.ready += 1;
        }
        Self::evict(&mut c);
    }

    /// Drops the claims of a read that failed.
    pub fn abort(&self, claimed: &[u64]) {
        let mut c = self.inner.lock();
        for p in claimed {
            if matches!(c.slots.get(p), Some(Slot::Loading { .. })) {
                c.slots.remove(p);
            }
        }
    }

    /// Device blocks [p, p+n) were just written with `data` (zeros with
    /// None), or a write of them failed (`data` unknown: pass `failed`):
    /// cached copies take the new data (or go), copies being read are
    /// marked stale. A dirty copy (a held write of the block) is replaced
    /// by the data, clean, as no drain runs meanwhile; after a failed
    /// write it stays dirty and the next drain writes it.
    pub fn written(&self, p: u64, n: u64, data: Option<&[u8]>, failed: bool) {
        let mut c = self.inner.lock();
        if c.slots.is_empty() {
            return;
        }
        for (i, b) in (p..p + n).enumerate() {
            match c.slots.get_mut(&b) {
                Some(Slot::Loading { stale }) => *stale = true,
                Some(Slot::Dirty { .. }) if failed => {}
                Some(slot @ Slot::Dirty { .. }) => {
                    let d: Box<[u8]> = match data {
                        Some(d) => d[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE].into(),
                        None => vec![0u8; BLOCK_SIZE].into(),
                    };
                    *slot = Slot::Ready(d);
                    c.dirty -= 1;
                    c.ready += 1;
                    c.order.push_back(b);
                }
                Some(Slot::Ready(buf)) if !failed => match data {
                    Some(d) => buf.copy_from_slice(&d[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE]),
                    None => buf.fill(0),
                },
                Some(Slot::Ready(_)) => {
                    c.slots.remove(&b);
                    c.ready -= 1;
                }
                None => {}
            }
        }
    }

    /// Empties the cache (blocks being read are left to their readers,
    /// dirty blocks to the next drain).
    pub fn clear(&self) {
        let mut c = self.inner.lock();
        c.slots.retain(|_, s| matches!(s, Slot::Loading { .. } | Slot::Dirty { .. }));
        c.order.clear();
        c.ready = 0;
    }

    /// Blocks cached.
    pub fn len(&self) -> usize {
        self.inner.lock().ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BS: usize = BLOCK_SIZE;

    #[test]
    fn keys_fill_their_own_groups_one_after_another() {
        let a = Allocator::new(0, 1024);
        let s = GroupSpace::default();
        // Two directories' files interleaved: each directory's stay together.
        let mut d1 = Vec::new();
        let mut d2 = Vec::new();
        for _ in 0..4 {
            d1.push(s.place(&a, 1, 16, None, 1).unwrap());
            d2.push(s.place(&a, 2, 16, None, 1).unwrap());
        }
        assert_eq!(d1, vec![(0, 1), (1, 1), (2, 1), (3, 1)]);
        assert_eq!(d2, vec![(16, 1), (17, 1), (18, 1), (19, 1)]);
        // Only what was placed is taken: the rest of each group is free.
        assert_eq!(a.free_blocks(), 1024 - 8);
        // A file going on from its own block stays in its group.
        assert_eq!(s.place(&a, 1, 16, Some(4), 3), Some((4, 3)));
        // A block someone else took is stepped over.
        assert!(a.take_if_free(7, 1));
        assert_eq!(s.place(&a, 1, 16, None, 2), Some((8, 2)));
        // A full group: the key opens the next free one up the device.
        assert_eq!(s.place(&a, 1, 16, None, 16), Some((10, 6)));
        assert_eq!(s.place(&a, 1, 16, None, 2), Some((32, 2)));
        assert_eq!(s.stats.snapshot().groups_opened, 3);
    }

    #[test]
    fn a_directory_written_whole_hands_the_free_end_of_its_last_group_to_the_next() {
        let a = Allocator::new(0, 1024);
        let s = GroupSpace::default();
        // Directory 1 written whole: 20 one-block files, a group and a bit.
        for p in 0..20 {
            assert_eq!(s.place(&a, 1, 16, None, 1), Some((p, 1)));
        }
        // Directory 2 goes on right after them, in the rest of that group
        // and then in a new one: no gap between the two directories.
        for p in 20..40 {
            assert_eq!(s.place(&a, 2, 16, None, 1), Some((p, 1)));
        }
        assert_eq!(s.place(&a, 3, 16, None, 3), Some((40, 3)));
        let st = s.stats.snapshot();
        assert_eq!((st.groups_opened, st.groups_taken_over), (3, 2));
        // Directory 1 gave its group up: written again, it opens a new one.
        assert_eq!(s.place(&a, 1, 16, None, 1), Some((48, 1)));
        // Directory 3 placed 3 blocks in a row, too few to hand its group
        // over: it goes on in its own, and directory 1 in its own.
        assert_eq!(s.place(&a, 3, 16, None, 1), Some((43, 1)));
        assert_eq!(s.place(&a, 1, 16, None, 1), Some((49, 1)));
        // Keys with groups of another length never take one over.
        for _ in 0..10 {
            s.place(&a, 1, 16, None, 1).unwrap();
        }
        assert_eq!(s.place(&a, 4, 32, None, 1), Some((64, 1)));
        // Regrouped pieces take over an end only where all of them fit.
        assert_eq!(s.place(&a, 5, 16, None, 10), Some((96, 10)));
        assert_eq!(s.place_together(&a, 6, 16, None, 2, 8), Some((112, 2)));
        assert_eq!(s.place(&a, 7, 16, None, 9), Some((128, 9)));
        assert_eq!(s.place_together(&a, 8, 16, None, 2, 7), Some((137, 2)));
        assert_eq!(a.free_blocks(), 1024 - 20 - 20 - 4 - 12 - 1 - 10 - 2 - 9 - 2);
    }

    #[test]
    fn regrouped_blocks_go_where_all_of_them_fit_in_one_group() {
        let a = Allocator::new(0, 1024);
        let s = GroupSpace::default();
        assert_eq!(s.place(&a, 1, 16, None, 10), Some((0, 10)));
        // 4 blocks to move, the first 2 now: the key's group has room.
        assert_eq!(s.place_together(&a, 1, 16, None, 2, 4), Some((10, 2)));
        // Only those 2 are taken; the next piece goes on after them.
        assert_eq!(a.free_blocks(), 1024 - 12);
        assert_eq!(s.place_together(&a, 1, 16, Some(12), 2, 2), Some((12, 2)));
        // 5 more do not fit in what is left (2 blocks): a new group.
        assert_eq!(s.place_together(&a, 1, 16, None, 1, 5), Some((16, 1)));
        // Going on from a goal that has no room for the rest: the key's group.
        assert!(a.take_if_free(18, 1));
        assert_eq!(s.place_together(&a, 1, 16, Some(17), 1, 4), Some((19, 1)));
        assert_eq!(s.place_together(&a, 1, 16, None, 0, 4), None);
        assert_eq!(s.place_together(&a, 1, 16, None, 17, 17), None);
    }

    #[test]
    fn a_write_overtaking_a_group_read_is_not_undone_by_it() {
        let c = GroupCache::default();
        let claimed = c.claim(10, 14);
        assert_eq!(claimed, vec![10, 11, 12, 13]);
        // A second reader claims nothing already claimed.
        assert!(c.claim(12, 16).iter().all(|&p| p >= 14));
        // Block 11 is written while the read of the old contents is under way.
        c.written(11, 1, Some(&[7u8; BS]), false);
        c.fill(10, &vec![1u8; 4 * BS], &claimed);
        let mut out = vec![0u8; BS];
        assert!(!c.get(11, &mut out), "the stale copy must not be kept");
        assert!(c.get(10, &mut out));
        assert_eq!(out, vec![1u8; BS]);
        // A cached block takes the data written over it.
        c.written(10, 1, Some(&[9u8; BS]), false);
        assert!(c.get(10, &mut out));
        assert_eq!(out, vec![9u8; BS]);
        c.written(10, 1, None, true);
        assert!(!c.get(10, &mut out));
        c.clear();
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn held_blocks_leave_as_runs_and_a_newer_version_is_never_marked_clean() {
        use crate::device::{Device, DeviceHandle, MemDevice};
        use std::sync::Arc;
        let mem = Arc::new(MemDevice::new("mem:0", 64 * BS as u64));
        let dev = DeviceHandle::new(0, mem.clone() as Arc<dyn Device>);
        let s = GroupSpace::default();
        // Blocks 3..6 and 7, held out of order; 9 as zeros.
        s.hold(&dev, 5, 1, Some(&[5u8; BS]), 1).unwrap();
        s.hold(&dev, 3, 2, Some(&[3u8; 2 * BS]), 1).unwrap();
        s.hold(&dev, 7, 1, Some(&[7u8; BS]), 1).unwrap();
        s.hold(&dev, 9, 1, None, 1).unwrap();
        let mut out = vec![0u8; 3 * BS];
        assert_eq!(s.cache.get_many(3, 3, &mut out), vec![true, true, true]);
        assert_eq!(out[2 * BS], 5);
        let runs = s.cache.dirty_runs(DRAIN_RUN);
        assert_eq!(runs, vec![(3, 3), (7, 1), (9, 1)]);
        let mut buf = Vec::new();
        assert_eq!(s.cache.copy_run(3, 3, &mut buf).len(), 3);
        assert_eq!((buf.len(), buf[0], buf[2 * BS], buf[3 * BS - 1]), (3 * BS, 3, 5, 5));
        assert_eq!(s.cache.copy_run(7, 3, &mut buf).len(), 1, "a run stops at the first block not dirty");
        assert_eq!(buf, vec![7u8; BS]);
        let w0 = dev.stats.snapshot().writes;
        s.drain(&dev).unwrap();
        assert_eq!(dev.stats.snapshot().writes - w0, 3, "one request a run");
        assert_eq!(s.dirty_blocks(), 0);
        let mut b = vec![0u8; BS];
        mem.read_at(&mut b, 4 * BS as u64).unwrap();
        assert_eq!(b, vec![3u8; BS]);
        // Drained blocks stay cached, clean: clear() drops them.
        assert!(s.cache.get(4, &mut b));
        s.cache.clear();
        assert!(!s.cache.get(4, &mut b));

        // A version held while a drain writes the one before stays dirty.
        s.hold(&dev, 20, 1, Some(&[1u8; BS]), 1).unwrap();
        let seqs = s.cache.copy_run(20, 1, &mut buf);
        s.hold(&dev, 20, 1, Some(&[2u8; BS]), 1).unwrap();
        s.cache.cleaned(&[(20, seqs[0])]);
        assert_eq!(s.dirty_blocks(), 1);
        s.cache.clear();
        assert!(s.cache.get(20, &mut b), "clear keeps held blocks");
        assert_eq!(b, vec![2u8; BS]);
        // A write through replaces a held copy, clean; a failed one keeps it.
        s.hold(&dev, 21, 1, Some(&[4u8; BS]), 1).unwrap();
        s.cache.written(21, 1, None, true);
        assert_eq!(s.dirty_blocks(), 2);
        s.write_through(&dev, 20, 1, Some(&[8u8; BS])).unwrap();
        assert_eq!(s.dirty_blocks(), 1);
        assert!(s.cache.get(20, &mut b));
        assert_eq!(b, vec![8u8; BS]);
        // Forgotten (space given back at once) and discarded copies never
        // reach the device.
        s.forget(21, 1);
        s.hold(&dev, 22, 1, Some(&[6u8; BS]), 1).unwrap();
        s.cache.discard(22, 1);
        assert_eq!(s.dirty_blocks(), 0);
        let w1 = dev.stats.snapshot().writes;
        s.drain(&dev).unwrap();
        assert_eq!(dev.stats.snapshot().writes, w1);
    }

    /// A 64-block memory device behind a fault plan: the plan, the memory
    /// (to look at what reached it) and the handle.
    fn faulty_device(
    ) -> (std::sync::Arc<crate::device::FaultPlan>, std::sync::Arc<crate::device::MemDevice>, crate::device::DeviceHandle)
    {
        use crate::device::{Device, DeviceHandle, FaultDevice, FaultPlan, MemDevice};
        use std::sync::Arc;
        let plan = Arc::new(FaultPlan::default());
        let mem = Arc::new(MemDevice::new("mem:0", 64 * BS as u64));
        let dev = DeviceHandle::new(0, Arc::new(FaultDevice::new(mem.clone(), plan.clone())) as Arc<dyn Device>);
        (plan, mem, dev)
    }

    #[test]
    fn a_failed_drain_keeps_its_blocks_held_for_the_next() {
        use crate::device::{Device, DeviceState, FaultSpec};
        let (plan, mem, dev) = faulty_device();
        let s = GroupSpace::default();
        s.hold(&dev, 1, 2, Some(&[9u8; 2 * BS]), 1).unwrap();
        plan.set(FaultSpec { write_errors: vec![(0, 64)], ..Default::default() });
        assert!(s.drain(&dev).is_err());
        assert_eq!(s.dirty_blocks(), 2);
        // A device that takes no writes takes no new held writes either.
        assert!(s.hold(&dev, 5, 1, Some(&[1u8; BS]), 1).is_err());
        plan.restore();
        dev.set_state(DeviceState::Online);
        s.drain(&dev).unwrap();
        assert_eq!(s.dirty_blocks(), 0);
        let mut b = vec![0u8; BS];
        mem.read_at(&mut b, 2 * BS as u64).unwrap();
        assert_eq!(b, vec![9u8; BS]);
    }

    #[test]
    fn a_device_that_takes_no_writes_gives_its_held_blocks_up_with_their_owners() {
        use crate::device::{Device, DeviceState, FaultSpec};
        let (plan, mem, dev) = faulty_device();
        let s = GroupSpace::default();
        s.hold(&dev, 1, 2, Some(&[9u8; 2 * BS]), 9).unwrap();
        s.hold(&dev, 4, 1, Some(&[7u8; BS]), 7).unwrap();
        s.hold(&dev, 5, 1, Some(&[9u8; BS]), 9).unwrap();
        // A device taking writes keeps everything for the next drain.
        assert_eq!(s.give_up(&dev), (vec![], 0));
        assert_eq!(s.dirty_blocks(), 4);
        plan.set(FaultSpec { write_error_rate: 1.0, ..Default::default() });
        assert!(s.drain(&dev).is_err());
        assert_eq!(dev.state(), DeviceState::Faulted);
        assert_eq!(s.give_up(&dev), (vec![7, 9], 4));
        assert_eq!(s.dirty_blocks(), 0);
        assert_eq!(s.stats.snapshot().blocks_lost, 4);
        let mut b = vec![0u8; BS];
        assert!(!s.cache.get(4, &mut b), "a given-up block is not served");
        // Back online, nothing of it reaches the device.
        plan.restore();
        dev.set_state(DeviceState::Online);
        let w = dev.stats.snapshot().writes;
        s.drain(&dev).unwrap();
        assert_eq!(dev.stats.snapshot().writes, w);
        mem.read_at(&mut b, 4 * BS as u64).unwrap();
        assert_eq!(b, vec![0u8; BS]);
    }
}
