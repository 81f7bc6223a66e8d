//! Per-device space allocator: a map of free extents behind the device's own
//! lock, so allocations on different devices never contend.
//!
//! The free map is not stored on disk: it is rebuilt when a pool opens from
//! the extents that the meta-data references (the tree is the truth), which
//! also makes `fsck --repair` of allocation state trivial.
//!
//! Freed space is not reused until the journal batch that freed it commits:
//! otherwise a crash could leave a committed file pointing at blocks that
//! already hold another file's data.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Free runs `alloc_top` looks at, from the device's end.
pub const TOP_RUNS: usize = 64;

#[derive(Default)]
struct FreeMap {
    /// start -> length
    free: BTreeMap<u64, u64>,
    free_blocks: u64,
    /// Next-fit cursor: spreads new files and keeps appends contiguous.
    cursor: u64,
}

pub struct Allocator {
    inner: Mutex<FreeMap>,
    /// (batch epoch, start, len): frees waiting for their batch to commit.
    deferred: Mutex<Vec<(u64, u64, u64)>>,
    total: u64,
    /// Blocks `alloc` leaves free: room for the next checkpoint's new
    /// meta-file, which is written before the old one is freed. Without it
    /// a device full of data could never checkpoint (nor free space again).
    reserve: AtomicU64,
}

impl Allocator {
    /// An allocator over blocks [first, total) of a device, all free.
    pub fn new(first: u64, total: u64) -> Self {
        let mut m = FreeMap::default();
        if total > first {
            m.free.insert(first, total - first);
            m.free_blocks = total - first;
        }
        m.cursor = first;
        Allocator { inner: Mutex::new(m), deferred: Mutex::new(Vec::new()), total, reserve: AtomicU64::new(0) }
    }

    pub fn set_reserve(&self, blocks: u64) {
        self.reserve.store(blocks, Ordering::Relaxed);
    }

    /// Like `alloc`, but may use the reserve (the meta-file's own writes).
    pub fn alloc_reserved(&self, goal: Option<u64>, want: u64) -> Option<(u64, u64)> {
        self.alloc_keeping(goal, want, 0)
    }

    pub fn total_blocks(&self) -> u64 {
        self.total
    }

    /// Free blocks data allocations leave alone (the meta-file's room to
    /// grow; see `set_reserve`).
    pub fn reserved_blocks(&self) -> u64 {
        self.reserve.load(Ordering::Relaxed)
    }

    pub fn free_blocks(&self) -> u64 {
        self.inner.lock().free_blocks
    }

    /// Free blocks data may take: all but the reserve.
    pub fn free_for_data(&self) -> u64 {
        self.free_blocks().saturating_sub(self.reserved_blocks())
    }

    /// Allocates up to `want` contiguous blocks (at least one), preferring to
    /// start exactly at `goal` so a growing extent stays contiguous.
    /// Returns (start, len), or None when the device is full.
    pub fn alloc(&self, goal: Option<u64>, want: u64) -> Option<(u64, u64)> {
        self.alloc_keeping(goal, want, self.reserve.load(Ordering::Relaxed))
    }

    fn alloc_keeping(&self, goal: Option<u64>, want: u64, keep: u64) -> Option<(u64, u64)> {
        let mut m = self.inner.lock();
        let avail = m.free_blocks.checked_sub(keep).filter(|&a| a > 0)?;
        let want = want.clamp(1, avail);
        if let Some(g) = goal {
            if let Some((&s, &l)) = m.free.range(..=g).next_back() {
                if g < s + l {
                    let n = want.min(s + l - g);
                    take(&mut m, s, l, g, n);
                    return Some((g, n));
                }
            }
        }
        // Next fit: first extent at or after the cursor big enough, then wrap,
        // then the largest extent there is.
        let cur = m.cursor;
        let pick = m
            .free
            .range(cur..)
            .find(|(_, &l)| l >= want)
            .or_else(|| m.free.range(..cur).find(|(_, &l)| l >= want))
            .map(|(&s, &l)| (s, l))
            .or_else(|| m.free.iter().max_by_key(|(_, &l)| l).map(|(&s, &l)| (s, l)));
        let (s, l) = pick?;
        let n = want.min(l);
        take(&mut m, s, l, s, n);
        m.cursor = s + n;
        Some((s, n))
    }

    /// Allocates `len` contiguous blocks starting at a multiple of `len`
    /// (a whole segment of the `log`), the highest such run first, so that
    /// the log fills the device from its end and leaves the space at its
    /// start (the journal, the meta-file and contiguous files) whole.
    /// Keeps the reserve (unless `reserved`). None when no such run is free.
    pub fn alloc_aligned(&self, len: u64, reserved: bool) -> Option<u64> {
        let mut m = self.inner.lock();
        let keep = if reserved { 0 } else { self.reserve.load(Ordering::Relaxed) };
        if len == 0 || m.free_blocks < len.saturating_add(keep) {
            return None;
        }
        let (s, l, a) = m.free.iter().rev().find_map(|(&s, &l)| {
            // The highest aligned start inside [s, s+l) with room for len.
            let a = (s + l).checked_sub(len)? / len * len;
            (a >= s).then_some((s, l, a))
        })?;
        take(&mut m, s, l, a, len);
        Some(a)
    }

    /// Allocates `len` contiguous blocks starting at a multiple of `len`,
    /// the lowest such run at or after block `from` (then from the start):
    /// where `colocate` opens its groups, one after another. Keeps the
    /// reserve. None when no such run is free.
    pub fn alloc_aligned_from(&self, len: u64, from: u64) -> Option<u64> {
        let mut m = self.inner.lock();
        let keep = self.reserve.load(Ordering::Relaxed);
        if len == 0 || m.free_blocks < len.saturating_add(keep) {
            return None;
        }
        let fits = |(&s, &l): (&u64, &u64), lo: u64| {
            let a = s.max(lo).div_ceil(len).checked_mul(len)?;
            (a.checked_add(len)? <= s + l).then_some((s, l, a))
        };
        let first = m.free.range(..=from).next_back().map_or(from, |(&s, _)| s);
        let (s, l, a) = m
            .free
            .range(first..)
            .find_map(|r| fits(r, from))
            .or_else(|| m.free.range(..=first).find_map(|r| fits(r, 0)))?;
        take(&mut m, s, l, a, len);
        Some(a)
    }

    /// The longest run [a, b) inside [lo, hi) that holds block `p` and no
    /// free block (empty when `p` itself is free): what a read of `p` may
    /// take along without reading free space.
    pub fn used_around(&self, p: u64, lo: u64, hi: u64) -> (u64, u64) {
        let m = self.inner.lock();
        if let Some((&s, &l)) = m.free.range(..=p).next_back() {
            if p < s + l {
                return (p, p);
            }
        }
        let a = m.free.range(..p).next_back().map_or(lo, |(&s, &l)| (s + l).max(lo));
        let b = m.free.range(p..).next().map_or(hi, |(&s, _)| s.min(hi));
        (a, b.max(p + 1).min(hi.max(p + 1)))
    }

    /// Allocates up to `want` contiguous blocks from the end of the highest
    /// free run of at least an eighth of `want` among the highest
    /// [`TOP_RUNS`] (or the longest of those), keeping the reserve: where
    /// the log goes when no whole segment is free. The bound keeps a call
    /// short on a free map of many small runs.
    pub fn alloc_top(&self, want: u64) -> Option<(u64, u64)> {
        self.alloc_top_keeping(want, 0)
    }

    /// [`Allocator::alloc_top`] leaving `extra` blocks free on top of the
    /// reserve (the log's writers leave its cleaner room to move blocks).
    pub fn alloc_top_keeping(&self, want: u64, extra: u64) -> Option<(u64, u64)> {
        let mut m = self.inner.lock();
        let keep = self.reserve.load(Ordering::Relaxed).saturating_add(extra);
        let avail = m.free_blocks.checked_sub(keep).filter(|&a| a > 0)?;
        let top = || m.free.iter().rev().take(TOP_RUNS);
        let (s, l) = top()
            .find(|(_, &l)| l >= (want / 8).max(1))
            .or_else(|| top().max_by_key(|(_, &l)| l))
            .map(|(&s, &l)| (s, l))?;
        let n = want.clamp(1, avail).min(l);
        let at = s + l - n;
        take(&mut m, s, l, at, n);
        Some((at, n))
    }

    /// How many whole aligned runs of `len` blocks are free, counting up
    /// to `limit` (from the device's end, where `alloc_aligned` takes them).
    pub fn aligned_free(&self, len: u64, limit: usize) -> usize {
        if len == 0 {
            return 0;
        }
        let m = self.inner.lock();
        let mut n = 0usize;
        for (&s, &l) in m.free.iter().rev() {
            let a = s.div_ceil(len).saturating_mul(len);
            if a < s + l {
                n += ((s + l - a) / len) as usize;
            }
            if n >= limit {
                return limit;
            }
        }
        n
    }

    /// Takes [start, start+len) if all of it is free; otherwise takes
    /// nothing and returns false.
    pub fn take_if_free(&self, start: u64, len: u64) -> bool {
        let mut m = self.inner.lock();
        let Some(end) = start.checked_add(len) else { return false };
        match m.free.range(..=start).next_back().map(|(&s, &l)| (s, l)) {
            Some((s, l)) if len > 0 && end <= s + l => {
                take(&mut m, s, l, start, len);
                true
            }
            _ => false,
        }
    }

    /// Marks [start, start+len) in use (rebuilding from the tree). Returns false
    /// if some of it was not free: two owners claim the same blocks.
    pub fn mark_used(&self, start: u64, len: u64) -> bool {
        let mut m = self.inner.lock();
        let mut ok = true;
        let mut pos = start;
        let end = start + len;
        while pos < end {
            let hit = m.free.range(..=pos).next_back().map(|(&s, &l)| (s, l));
            match hit {
                Some((s, l)) if pos < s + l => {
                    let n = (s + l).min(end) - pos;
                    take(&mut m, s, l, pos, n);
                    pos += n;
                }
                _ => {
                    ok = false;
                    // Skip to the next free extent, or the end.
                    let next = m.free.range(pos..).next().map(|(&s, _)| s).unwrap_or(end);
                    pos = next.min(end).max(pos + 1);
                }
            }
        }
        ok
    }

    /// Replaces the free map with `free` (the meta-data store's record of
    /// it): the extents must lie in the device, apart and in order.
    pub fn load_free(&self, free: &[(u64, u64)]) -> std::result::Result<(), String> {
        let mut m = self.inner.lock();
        let mut map = BTreeMap::new();
        let mut blocks = 0u64;
        let mut end = 0u64;
        for &(s, l) in free {
            let e = s.checked_add(l).filter(|&e| l > 0 && e <= self.total && s >= end);
            let Some(e) = e else {
                return Err(format!("free extent {s}+{l} overlaps another or lies outside the device"));
            };
            map.insert(s, l);
            blocks += l;
            end = e;
        }
        m.free = map;
        m.free_blocks = blocks;
        m.cursor = 0;
        Ok(())
    }

    /// Marks whatever of [start, start+len) is free as used (space a
    /// superblock names, which the free map may already count as used).
    pub fn claim(&self, start: u64, len: u64) {
        let _ = self.mark_used(start, len);
    }

    /// The free map as it will be once the journal batch `epoch` commits
    /// (with the frees that wait for it), for a checkpoint.
    pub fn snapshot(&self, epoch: u64) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self.inner.lock().free.iter().map(|(&s, &l)| (s, l)).collect();
        v.extend(self.deferred.lock().iter().filter(|(e, _, _)| *e <= epoch).map(|&(_, s, l)| (s, l)));
        v.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
        for (s, l) in v {
            match out.last_mut() {
                Some((ps, pl)) if *ps + *pl == s => *pl += l,
                _ => out.push((s, l)),
            }
        }
        out
    }

    /// Returns blocks to the free map at once (they were never committed).
    pub fn free_now(&self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        let mut m = self.inner.lock();
        let mut s = start;
        let mut l = len;
        if let Some((&ps, &pl)) = m.free.range(..s).next_back() {
            if ps + pl == s {
                m.free.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(&nl) = m.free.get(&(start + len)) {
            m.free.remove(&(start + len));
            l += nl;
        }
        m.free.insert(s, l);
        m.free_blocks += len;
    }

    /// Frees blocks once the journal batch `epoch` has committed.
    pub fn free_deferred(&self, epoch: u64, start: u64, len: u64) {
        if len > 0 {
            self.deferred.lock().push((epoch, start, len));
        }
    }

    /// Blocks freed by batches not yet committed: free once they are.
    pub fn pending_frees(&self) -> u64 {
        self.deferred.lock().iter().map(|&(_, _, l)| l).sum()
    }

    /// Releases the deferred frees of every batch up to `committed`.
    pub fn release(&self, committed: u64) {
        self.release_with(committed, 1, |_, _| {});
    }

    /// [`Allocator::release`], handing each range (start, blocks) to
    /// `discard` before it becomes free: nothing can be placed there until
    /// it returns, so a discard never meets a new owner's writes. `unit`
    /// is the device's discard unit in blocks (a Ceph cluster's object):
    /// free space next to a range that completes a unit the range covers
    /// only in part goes with it, taken out of the free map until the
    /// discard returns, so that a unit freed piece by piece is given back
    /// whole once its last piece is.
    pub fn release_with(&self, committed: u64, unit: u64, discard: impl Fn(u64, u64)) {
        let ready: Vec<_> = {
            let mut d = self.deferred.lock();
            let (ready, keep): (Vec<_>, Vec<_>) = d.drain(..).partition(|&(e, _, _)| e <= committed);
            *d = keep;
            ready
        };
        for (_, s, l) in ready {
            let (ds, de) = self.borrow_to_units(s, s + l, unit);
            discard(ds, de - ds);
            self.free_now(ds, de - ds);
        }
    }

    /// For a range [s, e) about to be freed: takes out of the free map the
    /// free blocks that, with it, make whole the `unit`-aligned units at
    /// its two ends (only units that are then free whole), and returns the
    /// range with them.
    fn borrow_to_units(&self, s: u64, e: u64, unit: u64) -> (u64, u64) {
        if unit <= 1 {
            return (s, e);
        }
        let mut m = self.inner.lock();
        let (us, ue) = (s / unit * unit, e.div_ceil(unit).saturating_mul(unit));
        // The free extent that ends at `s` and reaches back to `us`, and
        // the one that starts at `e` and reaches `ue` (free extents are
        // merged, so a free neighbour ends or starts exactly there).
        let left =
            m.free.range(..s).next_back().map(|(&fs, &fl)| (fs, fl)).filter(|&(fs, fl)| fs + fl == s && fs <= us);
        let right = m.free.get(&e).map(|&fl| (e, fl)).filter(|&(_, fl)| e + fl >= ue);
        let left_free = us == s || left.is_some();
        let right_free = ue == e || right.is_some();
        // Whole once [s, e) is free: the unit at the start, and at the end.
        let first_whole = left_free && (e >= us + unit || right_free);
        let last_whole = right_free && (s <= ue - unit || left_free);
        let (mut ds, mut de) = (s, e);
        if let (Some((fs, fl)), true) = (left, first_whole && us < s) {
            take(&mut m, fs, fl, us, s - us);
            ds = us;
        }
        if let (Some((_, fl)), true) = (right, last_whole && ue > e) {
            take(&mut m, e, fl, e, ue - e);
            de = ue;
        }
        (ds, de)
    }

    /// Free extents, for fsck and `df`.
    pub fn free_extents(&self) -> Vec<(u64, u64)> {
        self.inner.lock().free.iter().map(|(&s, &l)| (s, l)).collect()
    }
}

fn take(m: &mut FreeMap, s: u64, l: u64, at: u64, n: u64) {
    m.free.remove(&s);
    if at > s {
        m.free.insert(s, at - s);
    }
    if at + n < s + l {
        m.free.insert(at + n, s + l - at - n);
    }
    m.free_blocks -= n;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A discard unit freed in two pieces is discarded whole with the
    /// second; free space elsewhere is not discarded again, and the free
    /// map ends as plain frees would leave it.
    #[test]
    fn a_unit_freed_piece_by_piece_is_discarded_whole_with_its_last_piece() {
        let a = Allocator::new(0, 4096);
        assert_eq!(a.alloc(None, 2048), Some((0, 2048)));
        // Frees (start, blocks) once its epoch commits, in units of 1024
        // blocks: what was discarded.
        let free = |epoch, s, l| {
            let seen = std::cell::RefCell::new(Vec::new());
            a.free_deferred(epoch, s, l);
            a.release_with(epoch, 1024, |s, l| seen.borrow_mut().push((s, l)));
            seen.into_inner()
        };
        // Half of unit 0: its other half is in use.
        assert_eq!(free(1, 0, 512), vec![(0, 512)]);
        // The rest of unit 0 and a piece of unit 1.
        assert_eq!(free(2, 512, 600), vec![(0, 1112)]);
        // The rest of unit 1, which ends on a unit boundary: the blocks
        // from 2048, free from the start, are not taken again.
        assert_eq!(free(3, 1112, 936), vec![(1024, 1024)]);
        assert_eq!(a.free_extents(), vec![(0, 4096)]);
        assert_eq!(a.free_blocks(), 4096);
        // Unit 1 (blocks 1024..2048) is not borrowed while a free inside
        // it is only partly next to free space.
        assert_eq!(a.alloc(Some(1500), 100), Some((1500, 100)));
        assert_eq!(free(4, 1500, 50), vec![(1500, 50)]);
        assert_eq!(free(5, 1550, 50), vec![(1024, 1024)]);
        assert_eq!(a.free_extents(), vec![(0, 4096)]);
        assert_eq!(a.free_blocks(), 4096);
    }

    #[test]
    fn alloc_goal_free_and_coalesce() {
        let a = Allocator::new(10, 110);
        assert_eq!(a.free_blocks(), 100);
        let (s, n) = a.alloc(None, 20).unwrap();
        assert_eq!((s, n), (10, 20));
        // Growing at the goal stays contiguous.
        assert_eq!(a.alloc(Some(30), 5), Some((30, 5)));
        a.free_now(10, 20);
        a.free_now(30, 5);
        assert_eq!(a.free_extents(), vec![(10, 100)]);
        assert!(a.mark_used(50, 10));
        assert!(!a.mark_used(55, 10), "double claim is reported");
        a.free_deferred(3, 50, 10);
        a.release(2);
        assert_eq!(a.free_blocks(), 100 - 15);
        a.release(3);
        assert_eq!(a.free_blocks(), 100 - 5);
    }

    #[test]
    fn aligned_runs_start_at_multiples_of_their_length() {
        let a = Allocator::new(3, 64);
        assert_eq!(a.aligned_free(16, 10), 3);
        // The highest first.
        assert_eq!(a.alloc_aligned(16, false), Some(48));
        assert!(a.mark_used(40, 1));
        // [32, 48) is no longer whole; [16, 32) is.
        assert_eq!(a.aligned_free(16, 10), 1);
        assert_eq!(a.alloc_aligned(16, false), Some(16));
        assert_eq!(a.alloc_aligned(16, false), None);
        assert_eq!(a.free_blocks(), 61 - 33);
        // The highest free run's end: [41, 48).
        assert_eq!(a.alloc_top(4), Some((44, 4)));
        assert_eq!(a.alloc_top(10), Some((41, 3)));
    }

    #[test]
    fn aligned_runs_from_a_block_go_up_and_wrap() {
        let a = Allocator::new(1, 64);
        assert_eq!(a.alloc_aligned_from(16, 0), Some(16));
        assert_eq!(a.alloc_aligned_from(16, 17), Some(32));
        assert_eq!(a.alloc_aligned_from(16, 40), Some(48));
        // Wraps past the end to the start; [1, 16) holds no aligned run.
        assert_eq!(a.alloc_aligned_from(16, 60), None);
        a.free_now(32, 16);
        assert_eq!(a.alloc_aligned_from(16, 60), Some(32));
    }

    #[test]
    fn used_around_stops_at_free_space_and_bounds() {
        let a = Allocator::new(0, 64);
        assert!(a.take_if_free(10, 20));
        assert_eq!(a.used_around(15, 0, 64), (10, 30));
        assert_eq!(a.used_around(15, 12, 16), (12, 16));
        assert_eq!(a.used_around(5, 0, 64), (5, 5));
        assert!(a.take_if_free(0, 10));
        assert_eq!(a.used_around(3, 0, 64), (0, 30));
    }

    #[test]
    fn full_device_returns_none() {
        let a = Allocator::new(0, 8);
        assert_eq!(a.alloc(None, 100), Some((0, 8)));
        assert_eq!(a.alloc(None, 1), None);
    }
}
