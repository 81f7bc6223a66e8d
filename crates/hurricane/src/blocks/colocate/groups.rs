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

use crate::pool::Allocator;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use super::super::BLOCK_SIZE;

/// Memory bound of one device's group cache.
pub const CACHE_BYTES: usize = 32 << 20;

/// The device-wide state of `colocate` on one device.
#[derive(Default)]
pub struct GroupSpace {
    /// (key, group length) -> the group the key is filling.
    open: Mutex<Groups>,
    pub(super) cache: GroupCache,
    pub(super) stats: GroupStats,
}

#[derive(Default)]
struct Groups {
    by_key: HashMap<(u64, u64), Open>,
    /// Where the next group is looked for: after the last one opened.
    from: u64,
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
    pub group_reads: AtomicU64,
    pub blocks_read_ahead: AtomicU64,
    pub cache_hits: AtomicU64,
}

/// A snapshot of [`GroupStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupStatsSnapshot {
    /// Groups opened for a key.
    pub groups_opened: u64,
    /// Blocks placed in a key's group.
    pub placed_blocks: u64,
    /// Device reads of a group made on a miss.
    pub group_reads: u64,
    /// Blocks those reads brought in beside the one asked for.
    pub blocks_read_ahead: u64,
    /// Small-file blocks served from the group cache.
    pub cache_hits: u64,
    /// Blocks the group caches hold now.
    pub cached_blocks: u64,
}

impl GroupStats {
    pub fn snapshot(&self) -> GroupStatsSnapshot {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        GroupStatsSnapshot {
            groups_opened: g(&self.groups_opened),
            placed_blocks: g(&self.placed_blocks),
            group_reads: g(&self.group_reads),
            blocks_read_ahead: g(&self.blocks_read_ahead),
            cache_hits: g(&self.cache_hits),
            cached_blocks: 0,
        }
    }
}

impl GroupSpace {
    /// Up to `want` blocks in the group `key` is filling (groups of `len`
    /// blocks), right after `goal` (the end of the file's own preceding
    /// blocks) when that is in a group and free: (start, count). Opens a new
    /// group when the key has none or its group is full; None when no whole
    /// group is free (the caller then places the blocks as `extent` would).
    pub fn place(&self, alloc: &Allocator, key: u64, len: u64, goal: Option<u64>, want: u64) -> Option<(u64, u64)> {
        let mut g = self.open.lock();
        // Go on in the group the file's previous block is in.
        if let Some(p) = goal.filter(|p| p % len != 0) {
            let end = p.div_ceil(len) * len;
            if let Some(n) = take_some(alloc, p, want.min(end - p)) {
                self.stats.placed_blocks.fetch_add(n, Ordering::Relaxed);
                return Some((p, n));
            }
        }
        if let Some(o) = g.by_key.get_mut(&(key, len)) {
            let end = o.start + len;
            while o.next < end {
                if let Some(n) = take_some(alloc, o.next, want.min(end - o.next)) {
                    let at = o.next;
                    o.next += n;
                    self.stats.placed_blocks.fetch_add(n, Ordering::Relaxed);
                    return Some((at, n));
                }
                o.next += 1;
            }
        }
        let start = alloc.alloc_aligned_from(len, g.from)?;
        let n = want.min(len);
        alloc.free_now(start + n, len - n);
        g.from = start + len;
        g.by_key.insert((key, len), Open { start, next: start + n });
        self.stats.groups_opened.fetch_add(1, Ordering::Relaxed);
        self.stats.placed_blocks.fetch_add(n, Ordering::Relaxed);
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
        {
            let mut g = self.open.lock();
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
                    return Some((p, want));
                }
            }
            if let Some((start, next)) = open.as_deref().map(|o| (o.start, o.next)) {
                let end = start + len;
                for p in next..(end + 1).saturating_sub(room) {
                    if take(p, &mut open) {
                        return Some((p, want));
                    }
                }
                if let Some(o) = open {
                    o.next = end;
                }
            }
        }
        // Too full for them: the key goes on in a new group.
        self.place(alloc, key, len, None, want)
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
}

#[derive(Default)]
struct CacheInner {
    slots: HashMap<u64, Slot>,
    /// Filled blocks, oldest first (a block filled twice is listed twice;
    /// the older entry then evicts it early, which costs a hit at most).
    order: VecDeque<u64>,
    ready: usize,
}

/// Device blocks read by group reads (module docs: the coherence rule).
#[derive(Default)]
pub struct GroupCache {
    inner: Mutex<CacheInner>,
}

impl GroupCache {
    const CAP: usize = CACHE_BYTES / BLOCK_SIZE;

    /// Copies device block `p` into `out` if it is cached.
    pub fn get(&self, p: u64, out: &mut [u8]) -> bool {
        match self.inner.lock().slots.get(&p) {
            Some(Slot::Ready(b)) => {
                out.copy_from_slice(b);
                true
            }
            _ => false,
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
        while c.ready > Self::CAP {
            let Some(p) = c.order.pop_front() else { break };
            if matches!(c.slots.get(&p), Some(Slot::Ready(_))) {
                c.slots.remove(&p);
                c.ready -= 1;
            }
        }
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
    /// marked stale.
    pub fn written(&self, p: u64, n: u64, data: Option<&[u8]>, failed: bool) {
        let mut c = self.inner.lock();
        if c.slots.is_empty() {
            return;
        }
        for (i, b) in (p..p + n).enumerate() {
            match c.slots.get_mut(&b) {
                Some(Slot::Loading { stale }) => *stale = true,
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

    /// Empties the cache (blocks being read are left to their readers).
    pub fn clear(&self) {
        let mut c = self.inner.lock();
        c.slots.retain(|_, s| matches!(s, Slot::Loading { .. }));
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
}
