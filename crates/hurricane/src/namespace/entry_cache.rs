//! The directory-entry cache: entries read from the meta-data store, kept
//! so that the next lookup of the same name (an unlink after its lookup, a
//! path walked again) does not search the store's B-tree again (Tam 3: a
//! cache per kind of meta-data record).
//!
//! It holds the store's committed entries only: a directory's changes since
//! the last checkpoint live with the directory and are looked at first. A
//! checkpoint's commit changes the store, so it replaces the entries it
//! wrote with what it wrote (`committed`: a name just made is the likeliest
//! to be looked up next, as the unlinks of `rm -r` after the creates of a
//! build or an unpack, and once its directory forgets the change only the
//! store knows it), and an entry read from the state before a commit is not
//! put after it (`generation`).
//!
//! Sharded by the hash of (directory, name), each shard under its own lock
//! (Tam 8.1: no global lock on lookup); a shard over its share of the
//! capacity drops an eighth of its entries.

use super::inode::Name;
use super::store::StoredEntry;
use crate::base::Ino;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

/// One cached entry, keyed by the hash of (directory, name); a different
/// name with the same hash replaces it.
struct Slot {
    dir: Ino,
    name: Name,
    entry: StoredEntry,
}

/// The cache's counters, for `hurricane stats`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct EntryCounters {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub resident: u64,
}

/// One shard: slots by key, and its own counts (kept under the shard's
/// lock, not in counters every thread writes: a counter bounced between
/// cores costs more than the lookup it counts).
#[derive(Default)]
struct ShardMap {
    /// By the keyed hash of (directory, name): already spread, and not
    /// chosen by users, so hashed again with a fast hash.
    slots: HashMap<u64, Slot, foldhash::fast::RandomState>,
    hits: u64,
    misses: u64,
    evictions: u64,
}

type Shard = CachePadded<Mutex<ShardMap>>;

pub struct EntryCache {
    shards: Box<[Shard]>,
    /// Entries a shard holds before it drops some (0: the cache is off).
    per_shard: usize,
    hasher: RandomState,
    /// Advanced by every commit of the store, before its entries are dropped.
    generation: AtomicU64,
}

impl EntryCache {
    /// A cache of about `capacity` entries (0 turns it off).
    pub fn new(capacity: usize, shards: usize) -> Self {
        let shards = shards.max(1);
        EntryCache {
            shards: (0..shards).map(|_| CachePadded::new(Mutex::new(ShardMap::default()))).collect(),
            per_shard: capacity.div_ceil(shards),
            hasher: RandomState::new(),
            generation: AtomicU64::new(0),
        }
    }

    fn key(&self, dir: Ino, name: &[u8]) -> u64 {
        self.hasher.hash_one((dir, name))
    }

    fn shard(&self, key: u64) -> &Mutex<ShardMap> {
        &self.shards[(key % self.shards.len() as u64) as usize]
    }

    /// The store's entry `name` of `dir`, if cached.
    pub fn get(&self, dir: Ino, name: &[u8]) -> Option<StoredEntry> {
        if self.per_shard == 0 {
            return None;
        }
        let k = self.key(dir, name);
        let mut s = self.shard(k).lock();
        let hit = s.slots.get(&k).filter(|s| s.dir == dir && *s.name == *name).map(|s| s.entry);
        match hit {
            Some(_) => s.hits += 1,
            None => s.misses += 1,
        }
        hit
    }

    /// The generation to pass to [`put`](Self::put): read it before
    /// reading the store.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Caches an entry read from the store, unless a commit came since
    /// `generation` was read (what was read may be older than the store).
    pub fn put(&self, generation: u64, dir: Ino, name: &[u8], entry: StoredEntry) {
        if self.per_shard == 0 {
            return;
        }
        let k = self.key(dir, name);
        let mut s = self.shard(k).lock();
        // Under the shard's lock: a commit advances the generation before
        // it takes the locks to drop what it changed, so an entry put here
        // is either seen by that drop or refused.
        if self.generation.load(Ordering::Acquire) != generation {
            return;
        }
        self.keep(&mut s, k, Slot { dir, name: name.into(), entry });
    }

    /// Puts a slot in its shard, making room first when the shard is full.
    fn keep(&self, s: &mut ShardMap, k: u64, slot: Slot) {
        if s.slots.len() >= self.per_shard && !s.slots.contains_key(&k) {
            let drop: Vec<u64> = s.slots.keys().take((self.per_shard / 8).max(1)).copied().collect();
            for d in &drop {
                s.slots.remove(d);
            }
            s.evictions += drop.len() as u64;
        }
        s.slots.insert(k, slot);
    }

    /// After a commit of the store: each entry it changed is now what the
    /// commit wrote (`Some`, kept) or absent (`None`, dropped).
    pub fn committed<'a>(&self, changed: impl Iterator<Item = (Ino, &'a Name, Option<StoredEntry>)>) {
        // First: a lookup that read the store before the commit is not
        // put after this (module docs).
        self.generation.fetch_add(1, Ordering::AcqRel);
        if self.per_shard == 0 {
            return;
        }
        for (dir, name, entry) in changed {
            let k = self.key(dir, name);
            let mut s = self.shard(k).lock();
            match entry {
                Some(entry) => self.keep(&mut s, k, Slot { dir, name: name.clone(), entry }),
                None => {
                    s.slots.remove(&k);
                }
            }
        }
    }

    pub fn counters(&self) -> EntryCounters {
        let mut n = EntryCounters::default();
        for s in self.shards.iter() {
            let s = s.lock();
            n.hits += s.hits;
            n.misses += s.misses;
            n.evictions += s.evictions;
            n.resident += s.slots.len() as u64;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(ino: Ino) -> StoredEntry {
        StoredEntry { ino, kind: 0o100000, cookie: ino + 2 }
    }

    #[test]
    fn entries_come_back_by_directory_and_name() {
        let c = EntryCache::new(100, 4);
        let g = c.generation();
        c.put(g, 1, b"a", e(10));
        c.put(g, 2, b"a", e(20));
        assert_eq!(c.get(1, b"a"), Some(e(10)));
        assert_eq!(c.get(2, b"a"), Some(e(20)));
        assert_eq!(c.get(1, b"b"), None);
        let n = c.counters();
        assert_eq!((n.hits, n.misses, n.resident), (2, 1, 2));
    }

    fn name(n: &[u8]) -> Name {
        n.into()
    }

    #[test]
    fn a_commit_replaces_what_it_changed_and_refuses_older_reads() {
        let c = EntryCache::new(100, 4);
        let before = c.generation();
        c.put(before, 1, b"a", e(10));
        c.put(before, 1, b"b", e(11));
        c.put(before, 1, b"d", e(13));
        // The commit removed a, made d another file and made n.
        let (a, d, n) = (name(b"a"), name(b"d"), name(b"n"));
        c.committed([(1, &a, None), (1, &d, Some(e(30))), (1, &n, Some(e(31)))].into_iter());
        assert_eq!(c.get(1, b"a"), None);
        assert_eq!(c.get(1, b"b"), Some(e(11)));
        assert_eq!(c.get(1, b"d"), Some(e(30)));
        assert_eq!(c.get(1, b"n"), Some(e(31)));
        assert_eq!(c.get(2, b"n"), None);
        // Read before the commit, put after it: refused.
        c.put(before, 1, b"c", e(12));
        assert_eq!(c.get(1, b"c"), None);
        c.put(c.generation(), 1, b"c", e(12));
        assert_eq!(c.get(1, b"c"), Some(e(12)));
    }

    #[test]
    fn the_cache_stays_within_its_capacity() {
        let c = EntryCache::new(64, 4);
        for i in 0..10_000u64 {
            c.put(c.generation(), 1, format!("f{i}").as_bytes(), e(i));
        }
        let n = c.counters();
        assert!(n.resident <= 64, "{} entries", n.resident);
        assert!(n.evictions >= 10_000 - 64);
        // What is still here is right.
        let mut found = 0;
        for i in 0..10_000u64 {
            if let Some(x) = c.get(1, format!("f{i}").as_bytes()) {
                assert_eq!(x, e(i));
                found += 1;
            }
        }
        assert_eq!(found, n.resident);
    }

    #[test]
    fn a_cache_of_size_zero_holds_nothing() {
        let c = EntryCache::new(0, 4);
        c.put(c.generation(), 1, b"a", e(10));
        assert_eq!(c.get(1, b"a"), None);
        assert_eq!(c.counters(), EntryCounters::default());
    }
}
