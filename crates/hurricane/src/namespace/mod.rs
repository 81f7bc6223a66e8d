//! The namespace and its meta-data state: a bounded, sharded cache of
//! inodes over the meta-data store (`store.rs`: the inode table and the
//! directories as B-trees in the meta-file), directories that read their
//! entries from the store and keep their changes until a checkpoint writes
//! them, and [`State::apply`], the one place a journal [`Op`] changes the
//! state.

pub mod acl;
pub mod entry_cache;
pub mod flags;
pub mod inode;
pub mod perm;
pub mod store;

pub use inode::{Body, Dir, DirEntry, FileLayout, Inode, InodeData};
pub use perm::Creds;

use crate::codec::Decoder;
use crate::error::{Error, Result};
use crate::journal::{Ino, Op};
use crossbeam_utils::CachePadded;
use inode::DirChanges;
use inode::{S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};
use parking_lot::lock_api::ArcRwLockWriteGuard;
use parking_lot::{RawRwLock, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use store::{Delta, MetaStore, StoredEntry};

pub const ROOT: Ino = 1;

/// One shard of the inode cache: the inodes in memory, and which of them
/// changed since the last checkpoint (pinned until it commits), with the
/// checkpoint generation of their last change.
#[derive(Default)]
struct ShardMap {
    /// Hits on this shard, counted here beside its lock rather than in one
    /// counter every thread writes (a shared counter bounced between the
    /// cores costs more than the hit it counts: Tam 8.1).
    hits: AtomicU64,
    map: InoMap<Arc<Inode>>,
    dirty: InoMap<u64>,
    /// Inodes freed since the last checkpoint: the store still has them.
    freed: InoMap<u64>,
}

/// A map by inode number. Numbers are handed out by the file system, not
/// chosen by users, so a fast hash serves (SipHash, the default, stood out
/// in a profile of the mount's unlinks).
type InoMap<V> = HashMap<Ino, V, foldhash::fast::RandomState>;

type Shard = CachePadded<RwLock<ShardMap>>;

/// The inode cache's counters, for `hurricane stats`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheCounters {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    /// Inodes in memory now, and of them changed since the last checkpoint.
    pub resident: u64,
    pub dirty: u64,
}

/// The meta-data state: a bounded, sharded cache of inodes over the
/// meta-data store (Tam 8.1: no global lock on lookup or getattr; each
/// shard is cache-padded and locked on its own). An inode is read from the
/// store on a miss; a clean inode nobody holds is evicted when its shard
/// is over its share of the capacity; a changed one stays until the
/// checkpoint that writes it commits.
pub struct State {
    shards: Box<[Shard]>,
    next_ino: CachePadded<AtomicU64>,
    inodes: AtomicU64,
    /// Checkpoint generation: changes are tagged with it, and a committed
    /// checkpoint settles those it took.
    generation: AtomicU64,
    per_shard: usize,
    store: Arc<MetaStore>,
    misses: CachePadded<AtomicU64>,
    evictions: AtomicU64,
    /// Inodes an unlink or rename left with no links (open files unlinked):
    /// the orphans a checkpoint records for the next open to free. A link
    /// count of 0 reached any other way is damage for fsck, not a file to
    /// free.
    unlinked: parking_lot::Mutex<std::collections::HashSet<Ino>>,
    /// Inodes changed since the last checkpoint, over all shards.
    dirty_total: CachePadded<AtomicU64>,
}

/// What a checkpoint took from the state, to settle once it commits.
pub struct Taken {
    generation: u64,
    dirs: Vec<(Ino, DirChanges)>,
}

/// Write guards on the inodes an operation touches, taken in inode order so
/// that concurrent multi-inode operations cannot deadlock.
pub struct Locked {
    guards: Vec<(Ino, ArcRwLockWriteGuard<RawRwLock, InodeData>)>,
}

impl Locked {
    pub fn get(&mut self, ino: Ino) -> Result<&mut InodeData> {
        self.guards
            .iter_mut()
            .find(|(i, _)| *i == ino)
            .map(|(_, g)| &mut **g)
            .ok_or_else(|| Error::Stale(format!("inode {ino}")))
    }
    /// Takes over another set of guards (an inode created after these were taken).
    pub fn absorb(&mut self, other: &mut Locked) {
        self.guards.append(&mut other.guards);
    }
    pub fn has(&self, ino: Ino) -> bool {
        self.guards.iter().any(|(i, _)| *i == ino)
    }
}

impl State {
    /// The state over `store`, as of its last checkpoint, caching about
    /// `capacity` inodes.
    pub fn new(store: Arc<MetaStore>, shards: usize, capacity: usize) -> Result<Self> {
        let n = shards.max(1).next_power_of_two();
        let sys = store.sys()?;
        Ok(State {
            shards: (0..n).map(|_| CachePadded::new(RwLock::new(ShardMap::default()))).collect(),
            next_ino: CachePadded::new(AtomicU64::new(sys.next_ino.max(ROOT + 1))),
            inodes: AtomicU64::new(sys.inodes),
            generation: AtomicU64::new(1),
            per_shard: capacity.div_ceil(n).max(2),
            store,
            misses: CachePadded::new(AtomicU64::new(0)),
            evictions: AtomicU64::new(0),
            unlinked: Default::default(),
            dirty_total: CachePadded::new(AtomicU64::new(0)),
        })
    }

    pub fn store(&self) -> &Arc<MetaStore> {
        &self.store
    }

    fn shard(&self, ino: Ino) -> &Shard {
        // Fibonacci hashing spreads consecutive inode numbers over shards.
        let h = ino.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        &self.shards[h as usize & (self.shards.len() - 1)]
    }

    /// The inode, read from the store if it is not in memory. A store that
    /// cannot be read is logged and the inode reported absent; callers
    /// that must tell the two apart use [`State::inode`].
    pub fn get(&self, ino: Ino) -> Option<Arc<Inode>> {
        match self.try_get(ino) {
            Ok(n) => n,
            Err(e) => {
                tracing::error!("inode {ino}: {e}");
                None
            }
        }
    }

    pub fn try_get(&self, ino: Ino) -> Result<Option<Arc<Inode>>> {
        {
            let s = self.shard(ino).read();
            if let Some(n) = s.map.get(&ino) {
                s.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(Some(n.clone()));
            }
            if s.freed.contains_key(&ino) {
                return Ok(None);
            }
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let Some(rec) = self.store.inode(ino)? else { return Ok(None) };
        let mut d = Decoder::new(&rec, "inode record");
        let mut data = InodeData::decode(&mut d)?;
        d.expect_end()?;
        if let Some(dir) = data.dir_mut() {
            dir.attach(ino, &self.store);
        }
        let mut s = self.shard(ino).write();
        if let Some(n) = s.map.get(&ino) {
            // Another thread read it meanwhile: one object per inode.
            return Ok(Some(n.clone()));
        }
        if s.freed.contains_key(&ino) {
            return Ok(None);
        }
        let node = Arc::new(Inode::new(ino, data));
        s.map.insert(ino, node.clone());
        self.evict(&mut s);
        Ok(Some(node))
    }

    /// Drops clean inodes nobody holds until the shard is back under its
    /// share (with some slack, so eviction is not paid on every miss).
    fn evict(&self, s: &mut ShardMap) {
        if s.map.len() <= self.per_shard {
            return;
        }
        let target = self.per_shard - self.per_shard / 8;
        // Changed inodes cannot go: when too few others are here to get
        // back to the target, the scan waits for the checkpoint that
        // settles them (which evicts), so a miss never pays for nothing.
        if s.map.len().saturating_sub(s.dirty.len()) < s.map.len() - target {
            return;
        }
        let mut victims = Vec::new();
        for (ino, n) in &s.map {
            if s.map.len() - victims.len() <= target {
                break;
            }
            if !s.dirty.contains_key(ino)
                && Arc::strong_count(n) == 1
                && Arc::strong_count(&n.data) == 1
                && n.opens.load(Ordering::Acquire) == 0
                && !n.dirty_times.load(Ordering::Acquire)
            {
                victims.push(*ino);
            }
        }
        for ino in &victims {
            s.map.remove(ino);
        }
        self.evictions.fetch_add(victims.len() as u64, Ordering::Relaxed);
    }

    pub fn inode(&self, ino: Ino) -> Result<Arc<Inode>> {
        self.try_get(ino)?.ok_or_else(|| Error::NotFound(format!("inode {ino}")))
    }

    /// Marks an inode changed: it stays in memory until a checkpoint writes it.
    pub fn touch(&self, ino: Ino) {
        let g = self.generation.load(Ordering::Acquire);
        if self.shard(ino).write().dirty.insert(ino, g).is_none() {
            self.dirty_total.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A new inode (created by an op, or loaded by a test or fsck).
    pub fn insert(&self, ino: Ino, mut data: InodeData) -> Arc<Inode> {
        if let Some(dir) = data.dir_mut() {
            dir.attach(ino, &self.store);
        }
        let node = Arc::new(Inode::new(ino, data));
        let g = self.generation.load(Ordering::Acquire);
        let mut s = self.shard(ino).write();
        if s.map.insert(ino, node.clone()).is_none() {
            self.inodes.fetch_add(1, Ordering::Relaxed);
        }
        if s.freed.remove(&ino).is_some() {
            self.dirty_total.fetch_sub(1, Ordering::Relaxed);
        }
        if s.dirty.insert(ino, g).is_none() {
            self.dirty_total.fetch_add(1, Ordering::Relaxed);
        }
        self.evict(&mut s);
        drop(s);
        self.next_ino.fetch_max(ino.saturating_add(1), Ordering::Relaxed);
        node
    }

    /// Whether an unlink or rename left `ino` with no links (see `unlinked`).
    pub fn was_unlinked(&self, ino: Ino) -> bool {
        self.unlinked.lock().contains(&ino)
    }

    fn free(&self, ino: Ino) {
        self.unlinked.lock().remove(&ino);
        let g = self.generation.load(Ordering::Acquire);
        let mut s = self.shard(ino).write();
        s.map.remove(&ino);
        // A freed inode counts as changed until a checkpoint deletes its
        // record, so deleting many files checkpoints as creating does.
        let was_dirty = s.dirty.remove(&ino).is_some();
        let was_freed = s.freed.insert(ino, g).is_some();
        match (was_dirty, was_freed) {
            (false, false) => {
                self.dirty_total.fetch_add(1, Ordering::Relaxed);
            }
            (true, true) => {
                self.dirty_total.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
        drop(s);
        let _ = self.inodes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    pub fn alloc_ino(&self) -> Ino {
        self.next_ino.fetch_add(1, Ordering::Relaxed)
    }

    pub fn next_ino(&self) -> Ino {
        self.next_ino.load(Ordering::Relaxed)
    }

    /// Inodes in the pool.
    pub fn count(&self) -> usize {
        self.inodes.load(Ordering::Relaxed) as usize
    }

    /// Inodes changed or freed since the last checkpoint.
    pub fn dirty_count(&self) -> usize {
        self.dirty_total.load(Ordering::Relaxed) as usize
    }

    pub fn counters(&self) -> CacheCounters {
        let (mut resident, mut dirty, mut hits) = (0, 0, 0);
        for s in self.shards.iter() {
            let s = s.read();
            resident += s.map.len() as u64;
            dirty += s.dirty.len() as u64;
            hits += s.hits.load(Ordering::Relaxed);
        }
        CacheCounters {
            hits,
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            resident,
            dirty,
        }
    }

    /// Every inode number, in order: the store's, with the changes since
    /// the last checkpoint.
    pub fn inos(&self) -> Result<Vec<Ino>> {
        let mut v = self.store.inos()?;
        let mut freed = std::collections::HashSet::new();
        for s in self.shards.iter() {
            let s = s.read();
            v.extend(s.dirty.keys().copied());
            freed.extend(s.freed.keys().copied());
        }
        v.sort_unstable();
        v.dedup();
        v.retain(|i| !freed.contains(i));
        Ok(v)
    }

    /// Every inode, one at a time (the whole-pool walks: scrub, device
    /// removal, health): each is read from the store if it is not in
    /// memory, and may be evicted again once the caller lets it go.
    pub fn each(&self) -> impl Iterator<Item = Arc<Inode>> + '_ {
        let inos = self.inos().unwrap_or_else(|e| {
            tracing::error!("listing inodes: {e}");
            Vec::new()
        });
        inos.into_iter().filter_map(|i| self.get(i))
    }

    /// Every inode at once, for fsck (which models the whole tree): they
    /// are all in memory while the list lives.
    pub fn all(&self) -> Vec<Arc<Inode>> {
        match self.inos() {
            Ok(v) => v.into_iter().filter_map(|i| self.get(i)).collect(),
            Err(e) => {
                tracing::error!("listing inodes: {e}");
                Vec::new()
            }
        }
    }

    /// Write-locks the given inodes in inode order (duplicates and missing
    /// inodes are skipped; `Locked::get` reports the missing).
    pub fn lock(&self, inos: &[Ino]) -> Locked {
        let mut v: Vec<Ino> = inos.to_vec();
        v.sort_unstable();
        v.dedup();
        let guards: Vec<_> = v.into_iter().filter_map(|i| self.get(i).map(|n| (i, n.data.write_arc()))).collect();
        // Whoever write-locks an inode changes it: it stays in memory
        // until the next checkpoint.
        for (i, _) in &guards {
            self.touch(*i);
        }
        Locked { guards }
    }

    /// The inodes an op touches, read from the current state.
    pub fn involved(&self, op: &Op) -> Vec<Ino> {
        let entry =
            |dir: Ino, name: &[u8]| -> Option<Ino> { self.get(dir)?.data.read().dir()?.get(name).ok()?.map(|e| e.ino) };
        match op {
            Op::Create(_) | Op::Verify { .. } | Op::LogHead { .. } => vec![],
            Op::Link { dir, ino, .. } => vec![*dir, *ino],
            Op::Unlink { dir, name, .. } => [Some(*dir), entry(*dir, name)].into_iter().flatten().collect(),
            Op::Rename { sdir, sname, ddir, dname, .. } => {
                [Some(*sdir), Some(*ddir), entry(*sdir, sname), entry(*ddir, dname)].into_iter().flatten().collect()
            }
            _ => op.inode().into_iter().collect(),
        }
    }

    /// Replays one op (journal replay: single-threaded, takes its own locks).
    pub fn replay(&self, op: &Op) -> Result<()> {
        let mut l = self.lock(&self.involved(op));
        self.apply(op, &mut l)
    }

    /// Applies an op to inodes the caller has locked. The live path validates
    /// under the same locks first, so a failure here means corrupt meta-data.
    pub fn apply(&self, op: &Op, l: &mut Locked) -> Result<()> {
        match op {
            // Read by recovery (`Fs::open`), not applied.
            Op::Verify { .. } | Op::LogHead { .. } => {}
            Op::Create(n) => {
                let body = match n.mode & S_IFMT {
                    S_IFREG => Body::File(FileLayout::new_file(n.layout.clone())?),
                    S_IFDIR => Body::Dir(Box::new(Dir::new(n.parent))),
                    S_IFLNK => Body::Symlink(n.target.clone()),
                    _ => Body::Special,
                };
                let size = if n.mode & S_IFMT == S_IFLNK { n.target.len() as u64 } else { 0 };
                let t = n.time;
                let data = InodeData {
                    mode: n.mode,
                    uid: n.uid,
                    gid: n.gid,
                    // A directory's own "." is its first link; entries add the rest.
                    nlink: u32::from(n.mode & S_IFMT == S_IFDIR),
                    size,
                    atime: t,
                    mtime: t,
                    ctime: t,
                    btime: t,
                    rdev: n.rdev,
                    xattrs: Default::default(),
                    body,
                };
                self.insert(n.ino, data);
            }
            Op::Link { dir, name, ino, time } => {
                let child = l.get(*ino)?;
                let kind = child.kind();
                child.nlink += 1;
                child.ctime = *time;
                let is_dir = child.is_dir();
                if is_dir {
                    if let Some(d) = child.dir_mut() {
                        d.parent = *dir;
                    }
                }
                let p = l.get(*dir)?;
                let pd =
                    p.dir_mut().ok_or_else(|| Error::corrupt("journal", format!("link into non-directory {dir}")))?;
                pd.insert(name.clone(), *ino, kind)?;
                if is_dir {
                    p.nlink += 1;
                }
                p.mtime = *time;
                p.ctime = *time;
            }
            Op::Unlink { dir, name, time } => {
                let p = l.get(*dir)?;
                let pd =
                    p.dir_mut().ok_or_else(|| Error::corrupt("journal", format!("unlink in non-directory {dir}")))?;
                let e = pd
                    .remove(name)?
                    .ok_or_else(|| Error::corrupt("journal", format!("unlink of missing entry in {dir}")))?;
                p.mtime = *time;
                p.ctime = *time;
                let child_is_dir = e.kind == S_IFDIR;
                if child_is_dir {
                    p.nlink = p.nlink.saturating_sub(1);
                }
                let c = l.get(e.ino)?;
                c.nlink = if child_is_dir { 0 } else { c.nlink.saturating_sub(1) };
                c.ctime = *time;
                if c.nlink == 0 {
                    self.unlinked.lock().insert(e.ino);
                }
            }
            Op::Rename { sdir, sname, ddir, dname, exchange, time } => {
                let src = l
                    .get(*sdir)?
                    .dir()
                    .map(|d| d.get(sname))
                    .transpose()?
                    .flatten()
                    .ok_or_else(|| Error::corrupt("journal", "rename of a missing entry"))?;
                let dst = l.get(*ddir)?.dir().map(|d| d.get(dname)).transpose()?.flatten();
                if *exchange {
                    let dst = dst.ok_or_else(|| Error::corrupt("journal", "exchange with a missing entry"))?;
                    dir_of(l, *sdir)?.insert(sname.clone(), dst.ino, dst.kind)?;
                    dir_of(l, *ddir)?.insert(dname.clone(), src.ino, src.kind)?;
                    if sdir != ddir {
                        relink_dir(l, src, *sdir, *ddir)?;
                        relink_dir(l, dst, *ddir, *sdir)?;
                    }
                } else {
                    if let Some(t) = dst {
                        if t.ino == src.ino {
                            // Renaming a link onto another link of the same inode: POSIX says do nothing.
                            return Ok(());
                        }
                        // (The name stays, and keeps its readdir place:
                        // the insert below replaces its entry.)
                        let victim = l.get(t.ino)?;
                        if t.kind == S_IFDIR {
                            victim.nlink = 0;
                            let dd = l.get(*ddir)?;
                            dd.nlink = dd.nlink.saturating_sub(1);
                        } else {
                            victim.nlink = victim.nlink.saturating_sub(1);
                        }
                        if l.get(t.ino)?.nlink == 0 {
                            self.unlinked.lock().insert(t.ino);
                        }
                        l.get(t.ino)?.ctime = *time;
                    }
                    // Within one directory the entry keeps its readdir
                    // place under its new name (unless it replaced one,
                    // whose place it takes).
                    let gone = dir_of(l, *sdir)?.remove(sname)?;
                    let place = gone.filter(|_| sdir == ddir).map(|e| e.cookie);
                    dir_of(l, *ddir)?.insert_at(dname.clone(), src.ino, src.kind, place)?;
                    if sdir != ddir {
                        relink_dir(l, src, *sdir, *ddir)?;
                    }
                }
                for d in [*sdir, *ddir] {
                    let p = l.get(d)?;
                    p.mtime = *time;
                    p.ctime = *time;
                }
                l.get(src.ino)?.ctime = *time;
            }
            Op::Free { ino } => self.free(*ino),
            Op::SetAttr { ino, mode, uid, gid, atime, mtime, ctime } => {
                let n = l.get(*ino)?;
                if let Some(m) = mode {
                    n.mode = (n.mode & S_IFMT) | (m & !S_IFMT);
                }
                if let Some(u) = uid {
                    n.uid = *u;
                }
                if let Some(g) = gid {
                    n.gid = *g;
                }
                if let Some(t) = atime {
                    n.atime = *t;
                }
                if let Some(t) = mtime {
                    n.mtime = *t;
                }
                n.ctime = *ctime;
            }
            Op::SetSize { ino, size, mtime } => {
                let n = l.get(*ino)?;
                n.size = *size;
                n.mtime = *mtime;
                n.ctime = *mtime;
            }
            Op::Map { ino, change } => {
                let n = l.get(*ino)?;
                let lay =
                    n.layout()?.ok_or_else(|| Error::corrupt("journal", format!("map change for non-file {ino}")))?;
                lay.apply(change)?;
            }
            Op::SetXattr { ino, name, value, time } => {
                let n = l.get(*ino)?;
                n.xattrs.insert(name.clone(), value.clone());
                n.ctime = *time;
            }
            Op::RemoveXattr { ino, name, time } => {
                let n = l.get(*ino)?;
                n.xattrs.remove(name);
                n.ctime = *time;
            }
            Op::SetLayout { ino, layout } => {
                let n = l.get(*ino)?;
                // Only an empty file's tree is replaced.
                n.body = Body::File(FileLayout::new_file(layout.clone())?);
            }
            Op::SetDirLayout { ino, spec } => {
                let n = l.get(*ino)?;
                let d = n
                    .dir_mut()
                    .ok_or_else(|| Error::corrupt("journal", format!("dir layout on non-directory {ino}")))?;
                d.layout = spec.clone();
            }
            Op::Times { ino, atime, mtime, ctime } => {
                // The inode may be gone by the time lazy times are applied.
                if l.has(*ino) {
                    let n = l.get(*ino)?;
                    n.atime = *atime;
                    n.mtime = *mtime;
                    n.ctime = *ctime;
                }
            }
        }
        Ok(())
    }

    /// Takes what changed since the last checkpoint into `delta` (called
    /// with the journal gate closed: a consistent cut). What it took stays
    /// in memory until [`State::settle`] after the commit.
    pub fn take(&self, delta: &mut Delta) -> Taken {
        let generation = self.generation.fetch_add(1, Ordering::AcqRel);
        let mut dirs = Vec::new();
        for s in self.shards.iter() {
            // Inodes are read after the shard lock is let go: a thread
            // that holds an inode's lock may be waiting for the shard's.
            type Changed = Vec<(Ino, Option<Arc<Inode>>)>;
            let (freed, dirty): (Vec<Ino>, Changed) = {
                let s = s.read();
                (s.freed.keys().copied().collect(), s.dirty.keys().map(|i| (*i, s.map.get(i).cloned())).collect())
            };
            delta.inodes.reserve(freed.len() + dirty.len());
            delta.orphans.reserve(freed.len() + dirty.len());
            for ino in freed {
                delta.remove_inode(ino);
                delta.orphans.push((ino, false));
            }
            for (ino, n) in dirty {
                let Some(n) = n else { continue };
                let d = n.data.read();
                delta.put_inode(ino, |e| d.encode(e));
                delta.orphans.push((ino, d.nlink == 0 && ino != ROOT && self.was_unlinked(ino)));
                if let Some(dir) = d.dir().filter(|x| x.has_changes()) {
                    let c = dir.changes();
                    delta.names.reserve(c.names.len());
                    delta.cookies.reserve(c.cookies.len());
                    for (name, e) in &c.names {
                        let e = e.map(|e| StoredEntry { ino: e.ino, kind: e.kind, cookie: e.cookie });
                        delta.names.push((ino, name.clone(), e));
                    }
                    for (cookie, name) in &c.cookies {
                        let v = name.as_ref().and_then(|n| {
                            let e = dir.names_entry(n).filter(|e| e.cookie == *cookie)?;
                            Some((n.clone(), StoredEntry { ino: e.ino, kind: e.kind, cookie: e.cookie }))
                        });
                        delta.cookies.push((ino, *cookie, v));
                    }
                    dirs.push((ino, c));
                }
            }
        }
        delta.sys.next_ino = self.next_ino();
        delta.sys.inodes = self.inodes.load(Ordering::Relaxed);
        Taken { generation, dirs }
    }

    /// After the checkpoint that took `t` committed: what it wrote is in
    /// the store, so unchanged inodes may be evicted again and directories
    /// forget the changes it covered.
    pub fn settle(&self, t: Taken) {
        for (ino, c) in &t.dirs {
            // The shard's lock is let go before the inode's is taken (a
            // thread holding an inode's lock may wait for the shard's).
            let n = self.shard(*ino).read().map.get(ino).cloned();
            if let Some(n) = n {
                if let Some(d) = n.data.write().dir_mut() {
                    d.settle(c);
                }
            }
        }
        for s in self.shards.iter() {
            let mut s = s.write();
            let before = s.dirty.len() + s.freed.len();
            s.dirty.retain(|_, g| *g > t.generation);
            s.freed.retain(|_, g| *g > t.generation);
            self.dirty_total.fetch_sub((before - s.dirty.len() - s.freed.len()) as u64, Ordering::Relaxed);
            self.evict(&mut s);
        }
    }
}

fn dir_of(l: &mut Locked, ino: Ino) -> Result<&mut Dir> {
    l.get(ino)?.dir_mut().ok_or_else(|| Error::corrupt("journal", format!("inode {ino} is not a directory")))
}

/// A directory moved from `from` to `to` changes its ".." and both link counts.
fn relink_dir(l: &mut Locked, e: DirEntry, from: Ino, to: Ino) -> Result<()> {
    if e.kind != S_IFDIR {
        return Ok(());
    }
    if let Some(d) = l.get(e.ino)?.dir_mut() {
        d.parent = to;
    }
    let f = l.get(from)?;
    f.nlink = f.nlink.saturating_sub(1);
    l.get(to)?.nlink += 1;
    Ok(())
}
