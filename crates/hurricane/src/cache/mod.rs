//! The block cache: file-data blocks keyed by (inode, file block), with a
//! memory bound, and the I/O threads that fill it ahead of readers.
//!
//! # Caches per kind of record (HFS section 6)
//!
//! HFS first kept every persistent building block in one shared cache and
//! found that 80% of a cached request went to finding the block, moving it
//! between queues and taking locks; it moved to several caches, each with the
//! locking and replacement that fits its kind. The engine has one structure
//! per kind of meta-data record, each held where it is used, so there is no
//! shared cache to search on the common path:
//!
//! - **Inodes** (attributes, extended attributes): the sharded, cache-padded
//!   inode table of `namespace::State` (Tam 8.1). A lookup locks one shard
//!   for reading; inodes stay in memory for the life of the mount, so there
//!   is no replacement and no queue to maintain.
//! - **Directory entries**: held by each directory inode (`namespace::Dir`),
//!   a hash map by name plus a cookie index for readdir, under that
//!   directory's own lock: one directory's traffic never touches another's.
//! - **Block records** (the persistent state of building blocks): inside each
//!   file's layout tree, one node per building block, each with its own
//!   lock sized to its needs (an extent map behind a reader-writer lock,
//!   stripes and regions with no state and so no lock). Finding a file's
//!   records costs one pointer from its inode: no hash lookup at all.
//!
//! # What this cache adds
//!
//! File *data*, which does not fit in memory, needs a bounded cache:
//!
//! - **Sharded**: shards sized to the cores, each behind its own lock and on
//!   its own cache line; a block's shard comes from a hash of (inode, block),
//!   so threads reading different parts of a file use different locks.
//! - **Bounded**: each shard holds at most `capacity / shards` blocks. Every
//!   buffer is counted, including those being filled, and a shard never
//!   allocates past its share, so the bound holds under any concurrency.
//! - **Replacement**: CLOCK with a reference bit, plus a FIFO of blocks read
//!   ahead and not used yet. A block read once (by a reader, or a prefetched
//!   block on its first use) is *not in use*; it becomes *in use* (reference
//!   bit set) when read again. Victims are chosen in this order: blocks not in
//!   use, then prefetched blocks not used yet (oldest first), then, for
//!   demand reads only, in-use blocks once the CLOCK hand has cleared their
//!   bit. Prefetches never clear reference bits, so a read-ahead stream
//!   cannot push out a working set that is being re-read; a prefetch that
//!   finds no victim is dropped.
//! - **In-flight blocks**: a block being read (by a prefetch or a reader)
//!   sits in its shard as *loading*; other readers wait for it instead of
//!   reading the device again, so a prefetch that is late still saves its
//!   device request.
//! - **Coherence**: the engine writes through to the layout as before; after
//!   the device write a write drops the cached copies of the blocks it wrote
//!   (a copy still loading is marked stale and discarded when it arrives,
//!   so a read that raced the write cannot leave old data behind). Truncate
//!   drops every block of the file at or past the new end. Inode numbers are
//!   never reused while a pool is open, so the blocks of an unlinked file can
//!   never be found again; they age out like any block not in use.

pub mod pool;

use crate::base::{Ino, BLOCK_SIZE};
use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};

pub use pool::IoPool;

/// Default memory bound of the data cache.
pub const DEFAULT_CACHE_BYTES: u64 = 256 << 20;

type Key = (Ino, u64);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    /// Being read; `stale` once a write or truncate overtook it.
    Loading {
        stale: bool,
        prefetch: bool,
    },
    /// Read ahead, not used yet.
    Prefetched,
    Cached {
        referenced: bool,
    },
}

struct Slot {
    key: Key,
    state: State,
    /// Position in the prefetch FIFO while `Prefetched`.
    stamp: u64,
    data: Box<[u8]>,
}

#[derive(Default, Clone, Copy)]
struct Counters {
    hits: u64,
    misses: u64,
    waits: u64,
    prefetched: u64,
    prefetch_used: u64,
    prefetch_unused_evicted: u64,
    prefetch_dropped: u64,
    evictions: u64,
    invalidations: u64,
}

struct ShardState {
    map: HashMap<Key, u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    hand: usize,
    /// (slot, stamp) of prefetched blocks in arrival order; entries whose
    /// slot moved on are skipped.
    fifo: VecDeque<(u32, u64)>,
    prefetched: usize,
    next_stamp: u64,
    /// Blocks held per inode, so truncate can skip shards without any.
    per_ino: HashMap<Ino, u32>,
    c: Counters,
}

struct Shard {
    m: Mutex<ShardState>,
    /// Signalled when a loading block is filled or given up.
    cv: Condvar,
}

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Copied into the caller's buffer.
    Hit,
    /// Being read by someone else: [`BlockCache::wait`] for it.
    Loading,
    Miss,
}

/// Where a block is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    Present,
    /// Being read (by a prefetch or a reader).
    Loading,
    Absent,
}

/// What a claim got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The caller must read the block and then `fill` or `abort` it.
    Claimed,
    /// Cached already, or being read by someone else.
    Present,
    /// No room: every buffer of the shard is loading or in use.
    Full,
}

/// Hit rates and occupancy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// The memory bound in bytes.
    pub capacity: u64,
    /// Bytes of block buffers allocated (never above `capacity`).
    pub bytes: u64,
    /// Blocks holding valid data or being loaded.
    pub blocks: u64,
    pub hits: u64,
    pub misses: u64,
    /// Reads that found their block loading and waited for it.
    pub waits: u64,
    /// Blocks read ahead by prefetch requests.
    pub prefetched: u64,
    /// Prefetched blocks later read.
    pub prefetch_used: u64,
    /// Prefetched blocks evicted before any read.
    pub prefetch_unused_evicted: u64,
    /// Prefetch requests for blocks that found no room.
    pub prefetch_dropped: u64,
    pub evictions: u64,
    pub invalidations: u64,
}

impl CacheStats {
    /// Fraction of block lookups served from memory (waits count as hits:
    /// no device request of their own).
    pub fn hit_rate(&self) -> f64 {
        let all = self.hits + self.waits + self.misses;
        if all == 0 {
            0.0
        } else {
            (self.hits + self.waits) as f64 / all as f64
        }
    }
}

/// The data cache. A capacity of 0 turns it off: every call misses and
/// nothing is kept.
pub struct BlockCache {
    shards: Box<[CachePadded<Shard>]>,
    per_shard: usize,
    capacity: u64,
}

fn hash(k: Key) -> u64 {
    let h = k.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ k.1.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    h ^ (h >> 29)
}

impl BlockCache {
    /// A cache of at most `bytes` bytes of block buffers.
    pub fn new(bytes: u64) -> Self {
        let blocks = (bytes / BLOCK_SIZE as u64) as usize;
        let cores = crate::affinity::cpus();
        // Enough shards to spread the cores, each big enough for CLOCK to work.
        let mut n = (cores * 4).clamp(8, 64).next_power_of_two();
        while n > 1 && blocks / n < 16 {
            n /= 2;
        }
        let per_shard = blocks / n;
        let shards = (0..n)
            .map(|_| {
                CachePadded::new(Shard {
                    m: Mutex::new(ShardState {
                        map: HashMap::new(),
                        slots: Vec::new(),
                        free: Vec::new(),
                        hand: 0,
                        fifo: VecDeque::new(),
                        prefetched: 0,
                        next_stamp: 0,
                        per_ino: HashMap::new(),
                        c: Counters::default(),
                    }),
                    cv: Condvar::new(),
                })
            })
            .collect();
        BlockCache { shards, per_shard, capacity: (per_shard * n * BLOCK_SIZE) as u64 }
    }

    pub fn enabled(&self) -> bool {
        self.per_shard > 0
    }

    /// The effective bound (the requested one rounded down to whole blocks
    /// per shard).
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    fn shard(&self, k: Key) -> &Shard {
        &self.shards[(hash(k) as usize) & (self.shards.len() - 1)]
    }

    /// Copies block `fblk` of `ino` from `from` bytes into it into `out` on a hit.
    pub fn get(&self, ino: Ino, fblk: u64, from: usize, out: &mut [u8]) -> Lookup {
        if !self.enabled() {
            return Lookup::Miss;
        }
        let sh = self.shard((ino, fblk));
        let mut s = sh.m.lock();
        let Some(&i) = s.map.get(&(ino, fblk)) else {
            s.c.misses += 1;
            return Lookup::Miss;
        };
        let slot = &mut s.slots[i as usize];
        match slot.state {
            State::Loading { .. } => return Lookup::Loading,
            State::Prefetched => {
                // First use: from here on it is an ordinary block read once.
                slot.state = State::Cached { referenced: false };
                s.prefetched -= 1;
                s.c.prefetch_used += 1;
            }
            State::Cached { .. } => slot.state = State::Cached { referenced: true },
            State::Free => {
                s.c.misses += 1;
                return Lookup::Miss;
            }
        }
        let slot = &s.slots[i as usize];
        let n = out.len().min(BLOCK_SIZE.saturating_sub(from));
        out[..n].copy_from_slice(&slot.data[from..from + n]);
        s.c.hits += 1;
        Lookup::Hit
    }

    /// Whether block `fblk` of `ino` is here, on its way, or neither (not
    /// counted as a lookup).
    pub fn presence(&self, ino: Ino, fblk: u64) -> Presence {
        if !self.enabled() {
            return Presence::Absent;
        }
        let s = self.shard((ino, fblk)).m.lock();
        match s.map.get(&(ino, fblk)).map(|&i| s.slots[i as usize].state) {
            Some(State::Prefetched | State::Cached { .. }) => Presence::Present,
            Some(State::Loading { .. }) => Presence::Loading,
            _ => Presence::Absent,
        }
    }

    /// Waits until block `fblk` of `ino` is no longer loading.
    pub fn wait(&self, ino: Ino, fblk: u64) {
        let sh = self.shard((ino, fblk));
        let mut s = sh.m.lock();
        s.c.waits += 1;
        loop {
            let loading =
                s.map.get(&(ino, fblk)).is_some_and(|&i| matches!(s.slots[i as usize].state, State::Loading { .. }));
            if !loading {
                return;
            }
            sh.cv.wait(&mut s);
        }
    }

    /// Reserves a buffer for block `fblk` of `ino`, marked loading. A
    /// prefetch claim only takes buffers that are free, not in use, or hold
    /// older prefetched blocks.
    pub fn claim(&self, ino: Ino, fblk: u64, prefetch: bool) -> Claim {
        if !self.enabled() {
            return Claim::Full;
        }
        let key = (ino, fblk);
        let sh = self.shard(key);
        let mut s = sh.m.lock();
        if s.map.contains_key(&key) {
            return Claim::Present;
        }
        let Some(i) = self.victim(&mut s, prefetch) else {
            if prefetch {
                s.c.prefetch_dropped += 1;
            }
            return Claim::Full;
        };
        let slot = &mut s.slots[i as usize];
        slot.key = key;
        slot.state = State::Loading { stale: false, prefetch };
        s.map.insert(key, i);
        *s.per_ino.entry(ino).or_insert(0) += 1;
        Claim::Claimed
    }

    /// Publishes the data of a claimed block (dropped if a write overtook it).
    pub fn fill(&self, ino: Ino, fblk: u64, data: &[u8]) {
        let key = (ino, fblk);
        let sh = self.shard(key);
        let mut s = sh.m.lock();
        if let Some(&i) = s.map.get(&key) {
            match s.slots[i as usize].state {
                State::Loading { stale: false, prefetch } => {
                    let n = data.len().min(BLOCK_SIZE);
                    let stamp = s.next_stamp;
                    let slot = &mut s.slots[i as usize];
                    slot.data[..n].copy_from_slice(&data[..n]);
                    slot.data[n..].fill(0);
                    if prefetch {
                        slot.state = State::Prefetched;
                        slot.stamp = stamp;
                        s.next_stamp += 1;
                        s.fifo.push_back((i, stamp));
                        s.prefetched += 1;
                        s.c.prefetched += 1;
                        Self::compact_fifo(&mut s);
                    } else {
                        slot.state = State::Cached { referenced: false };
                    }
                }
                State::Loading { stale: true, .. } => Self::release(&mut s, i),
                _ => {}
            }
        }
        drop(s);
        sh.cv.notify_all();
    }

    /// Gives up a claimed block (its read failed).
    pub fn abort(&self, ino: Ino, fblk: u64) {
        let key = (ino, fblk);
        let sh = self.shard(key);
        let mut s = sh.m.lock();
        if let Some(&i) = s.map.get(&key) {
            if matches!(s.slots[i as usize].state, State::Loading { .. }) {
                Self::release(&mut s, i);
            }
        }
        drop(s);
        sh.cv.notify_all();
    }

    /// Drops blocks [from, from+n) of `ino` (after a write to them).
    pub fn invalidate(&self, ino: Ino, from: u64, n: u64) {
        if !self.enabled() {
            return;
        }
        for b in from..from.saturating_add(n) {
            let sh = self.shard((ino, b));
            let mut s = sh.m.lock();
            if s.per_ino.get(&ino).copied().unwrap_or(0) == 0 {
                continue;
            }
            if let Some(&i) = s.map.get(&(ino, b)) {
                Self::drop_slot(&mut s, i);
            }
        }
    }

    /// Drops every block of `ino` at or past `from` (truncate).
    pub fn invalidate_from(&self, ino: Ino, from: u64) {
        if !self.enabled() {
            return;
        }
        for sh in self.shards.iter() {
            let mut s = sh.m.lock();
            if s.per_ino.get(&ino).copied().unwrap_or(0) == 0 {
                continue;
            }
            let hit: Vec<u32> = s.map.iter().filter(|(k, _)| k.0 == ino && k.1 >= from).map(|(_, &i)| i).collect();
            for i in hit {
                Self::drop_slot(&mut s, i);
            }
        }
    }

    /// Drops every block (benchmarks: a cold cache between runs). Blocks
    /// loading are marked stale.
    pub fn clear(&self) {
        for sh in self.shards.iter() {
            let mut s = sh.m.lock();
            let all: Vec<u32> = s.map.values().copied().collect();
            for i in all {
                Self::drop_slot(&mut s, i);
            }
        }
    }

    pub fn stats(&self) -> CacheStats {
        let mut st = CacheStats { capacity: self.capacity, ..Default::default() };
        for sh in self.shards.iter() {
            let s = sh.m.lock();
            st.bytes += (s.slots.len() * BLOCK_SIZE) as u64;
            st.blocks += s.map.len() as u64;
            let c = s.c;
            st.hits += c.hits;
            st.misses += c.misses;
            st.waits += c.waits;
            st.prefetched += c.prefetched;
            st.prefetch_used += c.prefetch_used;
            st.prefetch_unused_evicted += c.prefetch_unused_evicted;
            st.prefetch_dropped += c.prefetch_dropped;
            st.evictions += c.evictions;
            st.invalidations += c.invalidations;
        }
        st
    }

    /// Invalidation: a loading block is marked stale (its filler discards
    /// it), any other is freed.
    fn drop_slot(s: &mut ShardState, i: u32) {
        s.c.invalidations += 1;
        match s.slots[i as usize].state {
            State::Loading { prefetch, .. } => s.slots[i as usize].state = State::Loading { stale: true, prefetch },
            State::Free => {}
            _ => Self::release(s, i),
        }
    }

    /// Frees slot `i` and unmaps its key.
    fn release(s: &mut ShardState, i: u32) {
        let slot = &mut s.slots[i as usize];
        if slot.state == State::Free {
            return;
        }
        if slot.state == State::Prefetched {
            s.prefetched -= 1;
        }
        let key = slot.key;
        slot.state = State::Free;
        s.map.remove(&key);
        if let Some(c) = s.per_ino.get_mut(&key.0) {
            *c -= 1;
            if *c == 0 {
                s.per_ino.remove(&key.0);
            }
        }
        s.free.push(i);
    }

    /// A free slot for a new block, evicting if the shard is full.
    fn victim(&self, s: &mut ShardState, prefetch: bool) -> Option<u32> {
        if let Some(i) = s.free.pop() {
            return Some(i);
        }
        if s.slots.len() < self.per_shard {
            s.slots.push(Slot {
                key: (0, 0),
                state: State::Free,
                stamp: 0,
                data: vec![0u8; BLOCK_SIZE].into_boxed_slice(),
            });
            return Some((s.slots.len() - 1) as u32);
        }
        // Read-ahead beyond half the shard is not being used: it goes first.
        if s.prefetched > self.per_shard / 2 {
            if let Some(i) = Self::oldest_prefetched(s) {
                return Some(i);
            }
        }
        // 1. A block not in use (no bits cleared on the way).
        let n = s.slots.len();
        for k in 0..n {
            let h = (s.hand + k) % n;
            if s.slots[h].state == (State::Cached { referenced: false }) {
                s.hand = (h + 1) % n;
                return Some(Self::evict(s, h as u32));
            }
        }
        // 2. The oldest block read ahead and never used.
        if let Some(i) = Self::oldest_prefetched(s) {
            return Some(i);
        }
        if prefetch {
            return None;
        }
        // 3. Demand reads only: CLOCK over the blocks in use, clearing each
        //    bit it passes, so the least recently re-read goes.
        for _ in 0..2 * n {
            let h = s.hand;
            s.hand = (s.hand + 1) % n;
            match s.slots[h].state {
                State::Cached { referenced: true } => s.slots[h].state = State::Cached { referenced: false },
                State::Cached { referenced: false } => return Some(Self::evict(s, h as u32)),
                _ => {}
            }
        }
        None
    }

    fn oldest_prefetched(s: &mut ShardState) -> Option<u32> {
        while let Some((i, stamp)) = s.fifo.pop_front() {
            let slot = &s.slots[i as usize];
            if slot.state == State::Prefetched && slot.stamp == stamp {
                s.c.prefetch_unused_evicted += 1;
                return Some(Self::evict(s, i));
            }
        }
        None
    }

    fn evict(s: &mut ShardState, i: u32) -> u32 {
        s.c.evictions += 1;
        Self::release(s, i);
        // `release` pushed it on the free list; hand it out directly.
        s.free.pop();
        i
    }

    /// Keeps the FIFO from growing with entries of blocks already used.
    fn compact_fifo(s: &mut ShardState) {
        if s.fifo.len() > 2 * s.prefetched + 64 {
            let slots = &s.slots;
            s.fifo.retain(|&(i, st)| slots[i as usize].state == State::Prefetched && slots[i as usize].stamp == st);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(v: u8) -> Vec<u8> {
        vec![v; BLOCK_SIZE]
    }

    fn load(c: &BlockCache, ino: Ino, b: u64, prefetch: bool) -> Claim {
        let r = c.claim(ino, b, prefetch);
        if r == Claim::Claimed {
            c.fill(ino, b, &block(b as u8));
        }
        r
    }

    #[test]
    fn hit_after_fill_and_miss_after_invalidate() {
        let c = BlockCache::new(1 << 20);
        let mut out = vec![0u8; BLOCK_SIZE];
        assert_eq!(c.get(7, 3, 0, &mut out), Lookup::Miss);
        assert_eq!(c.claim(7, 3, false), Claim::Claimed);
        assert_eq!(c.get(7, 3, 0, &mut out), Lookup::Loading);
        assert_eq!(c.claim(7, 3, false), Claim::Present);
        c.fill(7, 3, &block(9));
        assert_eq!(c.get(7, 3, 0, &mut out), Lookup::Hit);
        assert_eq!(out, block(9));
        let mut part = [0u8; 10];
        assert_eq!(c.get(7, 3, 4090, &mut part), Lookup::Hit);
        assert_eq!(&part[..6], &[9; 6]);
        c.invalidate(7, 0, 10);
        assert_eq!(c.get(7, 3, 0, &mut out), Lookup::Miss);
        let s = c.stats();
        assert_eq!((s.hits, s.misses), (2, 2));
    }

    #[test]
    fn a_write_overtaking_a_load_discards_it() {
        let c = BlockCache::new(1 << 20);
        assert_eq!(c.claim(1, 0, true), Claim::Claimed);
        c.invalidate(1, 0, 1);
        c.fill(1, 0, &block(1));
        assert_eq!(c.get(1, 0, 0, &mut block(0)), Lookup::Miss);
        assert_eq!(c.claim(1, 5, false), Claim::Claimed);
        c.invalidate_from(1, 2);
        c.fill(1, 5, &block(1));
        assert_eq!(c.get(1, 5, 0, &mut block(0)), Lookup::Miss);
        assert_eq!(c.stats().blocks, 0);
    }

    #[test]
    fn truncate_drops_only_blocks_past_the_end() {
        let c = BlockCache::new(4 << 20);
        for b in 0..100 {
            load(&c, 5, b, false);
            load(&c, 6, b, false);
        }
        c.invalidate_from(5, 40);
        let mut out = block(0);
        assert_eq!(c.get(5, 39, 0, &mut out), Lookup::Hit);
        assert_eq!(c.get(5, 40, 0, &mut out), Lookup::Miss);
        assert_eq!(c.get(6, 99, 0, &mut out), Lookup::Hit);
        assert_eq!(c.stats().blocks, 140);
    }

    #[test]
    fn bound_holds_and_zero_disables() {
        let c = BlockCache::new(256 << 10);
        for b in 0..10_000 {
            load(&c, 1, b, b % 3 == 0);
            assert!(c.stats().bytes <= c.capacity());
        }
        assert!(c.capacity() <= 256 << 10 && c.capacity() > 0);
        let off = BlockCache::new(0);
        assert!(!off.enabled());
        assert_eq!(off.claim(1, 1, false), Claim::Full);
        assert_eq!(off.get(1, 1, 0, &mut block(0)), Lookup::Miss);
    }

    #[test]
    fn prefetch_does_not_evict_blocks_in_use() {
        let c = BlockCache::new(64 << 10); // one shard of 16 blocks
        assert_eq!((c.shards.len(), c.per_shard), (1, 16));
        let mut out = block(0);
        // A working set of 8 blocks, each read twice: in use.
        for b in 0..8 {
            assert_eq!(load(&c, 1, b, false), Claim::Claimed);
            assert_eq!(c.get(1, b, 0, &mut out), Lookup::Hit);
        }
        // A long read-ahead stream through the rest of the cache.
        for b in 0..1000 {
            assert_eq!(load(&c, 2, b, true), Claim::Claimed);
        }
        for b in 0..8 {
            assert_eq!(c.get(1, b, 0, &mut out), Lookup::Hit, "block {b} in use was evicted");
        }
        assert!(c.stats().prefetch_unused_evicted >= 990);
        // With every block in use, a prefetch finds no room and is dropped...
        for b in 8..16 {
            load(&c, 1, b, false);
            c.get(1, b, 0, &mut out);
        }
        assert_eq!(c.claim(2, 5000, true), Claim::Full);
        assert_eq!(c.stats().prefetch_dropped, 1);
        // ...while a demand read still gets one.
        assert_eq!(load(&c, 3, 0, false), Claim::Claimed);
    }

    #[test]
    fn unused_prefetched_blocks_go_before_blocks_in_use() {
        let c = BlockCache::new(64 << 10);
        let mut out = block(0);
        for b in 0..8 {
            load(&c, 1, b, false);
            c.get(1, b, 0, &mut out);
        }
        for b in 0..8 {
            load(&c, 2, b, true);
        }
        // Full: a demand read evicts a prefetched block, not one in use.
        assert_eq!(load(&c, 3, 0, false), Claim::Claimed);
        assert_eq!(c.stats().prefetch_unused_evicted, 1);
        for b in 1..4 {
            assert_eq!(load(&c, 3, b, false), Claim::Claimed);
        }
        for b in 0..8 {
            assert_eq!(c.get(1, b, 0, &mut out), Lookup::Hit, "block {b} in use was evicted");
        }
    }

    #[test]
    fn waiters_wake_when_a_load_ends() {
        let c = std::sync::Arc::new(BlockCache::new(1 << 20));
        assert_eq!(c.claim(4, 4, true), Claim::Claimed);
        let c2 = c.clone();
        let h = std::thread::spawn(move || {
            c2.wait(4, 4);
            let mut out = block(0);
            c2.get(4, 4, 0, &mut out)
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        c.fill(4, 4, &block(4));
        assert_eq!(h.join().unwrap(), Lookup::Hit);
        assert_eq!(c.stats().prefetch_used, 1);
    }
}
