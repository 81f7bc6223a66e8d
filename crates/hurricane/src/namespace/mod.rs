//! The namespace and its meta-data state: a sharded table of inodes (Tam
//! 8.1: no global lock or list on the lookup and getattr path; each shard is
//! cache-padded and locked on its own), directories held in their inodes,
//! and [`State::apply`], the one place a journal [`Op`] changes the state.

pub mod inode;
pub mod perm;

pub use inode::{Body, Dir, DirEntry, Inode, InodeData};
pub use perm::Creds;

use crate::blocks::Layout;
use crate::codec::{Decoder, Encoder};
use crate::error::{Error, Result};
use crate::journal::{Ino, Op};
use crossbeam_utils::CachePadded;
use inode::{S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};
use parking_lot::lock_api::ArcRwLockWriteGuard;
use parking_lot::{RawRwLock, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub const ROOT: Ino = 1;

type Shard = CachePadded<RwLock<HashMap<Ino, Arc<Inode>>>>;

pub struct State {
    shards: Box<[Shard]>,
    next_ino: CachePadded<AtomicU64>,
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
    pub fn new(shards: usize) -> Self {
        let n = shards.max(1).next_power_of_two();
        State {
            shards: (0..n).map(|_| CachePadded::new(RwLock::new(HashMap::new()))).collect(),
            next_ino: CachePadded::new(AtomicU64::new(ROOT + 1)),
        }
    }

    fn shard(&self, ino: Ino) -> &Shard {
        // Fibonacci hashing spreads consecutive inode numbers over shards.
        let h = ino.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        &self.shards[h as usize & (self.shards.len() - 1)]
    }

    pub fn get(&self, ino: Ino) -> Option<Arc<Inode>> {
        self.shard(ino).read().get(&ino).cloned()
    }

    pub fn inode(&self, ino: Ino) -> Result<Arc<Inode>> {
        self.get(ino).ok_or_else(|| Error::NotFound(format!("inode {ino}")))
    }

    pub fn insert(&self, ino: Ino, data: InodeData) -> Arc<Inode> {
        let node = Arc::new(Inode::new(ino, data));
        self.shard(ino).write().insert(ino, node.clone());
        self.next_ino.fetch_max(ino.saturating_add(1), Ordering::Relaxed);
        node
    }

    pub fn alloc_ino(&self) -> Ino {
        self.next_ino.fetch_add(1, Ordering::Relaxed)
    }

    pub fn next_ino(&self) -> Ino {
        self.next_ino.load(Ordering::Relaxed)
    }

    pub fn count(&self) -> usize {
        self.shards.iter().map(|s| s.read().len()).sum()
    }

    /// Every inode, for checkpoints, fsck and mount-time scans.
    pub fn all(&self) -> Vec<Arc<Inode>> {
        let mut v: Vec<Arc<Inode>> =
            self.shards.iter().flat_map(|s| s.read().values().cloned().collect::<Vec<_>>()).collect();
        v.sort_unstable_by_key(|i| i.ino);
        v
    }

    /// Write-locks the given inodes in inode order (duplicates and missing
    /// inodes are skipped; `Locked::get` reports the missing).
    pub fn lock(&self, inos: &[Ino]) -> Locked {
        let mut v: Vec<Ino> = inos.to_vec();
        v.sort_unstable();
        v.dedup();
        let guards = v.into_iter().filter_map(|i| self.get(i).map(|n| (i, n.data.write_arc()))).collect();
        Locked { guards }
    }

    /// The inodes an op touches, read from the current state.
    pub fn involved(&self, op: &Op) -> Vec<Ino> {
        let entry =
            |dir: Ino, name: &[u8]| -> Option<Ino> { self.get(dir)?.data.read().dir()?.get(name).map(|e| e.ino) };
        match op {
            Op::Create(_) => vec![],
            Op::Link { dir, ino, .. } => vec![*dir, *ino],
            Op::Unlink { dir, name, .. } => [Some(*dir), entry(*dir, name)].into_iter().flatten().collect(),
            Op::Rename { sdir, sname, ddir, dname, .. } => {
                [Some(*sdir), Some(*ddir), entry(*sdir, sname), entry(*ddir, dname)].into_iter().flatten().collect()
            }
            Op::Free { ino }
            | Op::SetAttr { ino, .. }
            | Op::SetSize { ino, .. }
            | Op::Map { ino, .. }
            | Op::SetXattr { ino, .. }
            | Op::RemoveXattr { ino, .. }
            | Op::SetLayout { ino, .. }
            | Op::SetDirLayout { ino, .. }
            | Op::Times { ino, .. } => vec![*ino],
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
            Op::Create(n) => {
                let body = match n.mode & S_IFMT {
                    S_IFREG => {
                        let mut d = Decoder::new(&n.layout, "layout");
                        Body::File(Arc::new(Layout::decode(&mut d)?))
                    }
                    S_IFDIR => Body::Dir(Dir::new(n.parent)),
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
                pd.insert(name.clone(), *ino, kind);
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
                    .remove(name)
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
            }
            Op::Rename { sdir, sname, ddir, dname, exchange, time } => {
                let src = l
                    .get(*sdir)?
                    .dir()
                    .and_then(|d| d.get(sname))
                    .ok_or_else(|| Error::corrupt("journal", "rename of a missing entry"))?;
                let dst = l.get(*ddir)?.dir().and_then(|d| d.get(dname));
                if *exchange {
                    let dst = dst.ok_or_else(|| Error::corrupt("journal", "exchange with a missing entry"))?;
                    dir_of(l, *sdir)?.insert(sname.clone(), dst.ino, dst.kind);
                    dir_of(l, *ddir)?.insert(dname.clone(), src.ino, src.kind);
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
                        dir_of(l, *ddir)?.remove(dname);
                        let victim = l.get(t.ino)?;
                        if t.kind == S_IFDIR {
                            victim.nlink = 0;
                            let dd = l.get(*ddir)?;
                            dd.nlink = dd.nlink.saturating_sub(1);
                        } else {
                            victim.nlink = victim.nlink.saturating_sub(1);
                        }
                        l.get(t.ino)?.ctime = *time;
                    }
                    dir_of(l, *sdir)?.remove(sname);
                    dir_of(l, *ddir)?.insert(dname.clone(), src.ino, src.kind);
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
            Op::Free { ino } => {
                self.shard(*ino).write().remove(ino);
            }
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
                    n.layout().ok_or_else(|| Error::corrupt("journal", format!("map change for non-file {ino}")))?;
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
                let mut d = Decoder::new(layout, "layout");
                n.body = Body::File(Arc::new(Layout::decode(&mut d)?));
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

    /// Serialises the whole state: the meta-file checkpoint. Called with the
    /// journal gate closed, so it is a consistent cut.
    pub fn encode(&self, e: &mut Encoder) {
        let all = self.all();
        e.u64(CKPT_MAGIC).u32(CKPT_VERSION).u64(self.next_ino()).u64(all.len() as u64);
        let mut dirs = Vec::new();
        for n in &all {
            let d = n.data.read();
            e.u64(n.ino);
            let mut rec = Encoder::new();
            d.encode(&mut rec);
            e.bytes(&rec.buf);
            if d.is_dir() {
                dirs.push(n.clone());
            }
        }
        // Directory blocks: entries of each directory. Each entry starts with
        // a kind byte; 0 = reference to an inode record (embedded inode
        // records, C-FFS style, are reserved as kind 1).
        e.u64(dirs.len() as u64);
        for n in dirs {
            let d = n.data.read();
            let dir = d.dir().map(|x| x.entries.iter().collect::<Vec<_>>()).unwrap_or_default();
            e.u64(n.ino).u32(dir.len() as u32);
            for (name, ent) in dir {
                e.u8(0).bytes(name).u64(ent.ino).u32(ent.kind);
            }
        }
    }

    /// Loads a checkpoint into an empty state.
    pub fn decode(&self, buf: &[u8]) -> Result<()> {
        let mut d = Decoder::new(buf, "meta-file checkpoint");
        if d.u64()? != CKPT_MAGIC {
            return Err(d.err("bad magic"));
        }
        let v = d.u32()?;
        if v > CKPT_VERSION {
            return Err(d.err(format!("checkpoint version {v} is newer than this build")));
        }
        let next = d.u64()?;
        let count = d.u64()?;
        if count.saturating_mul(12) > d.remaining() as u64 {
            return Err(d.err("inode count exceeds the checkpoint"));
        }
        for _ in 0..count {
            let ino = d.u64()?;
            if ino == 0 || ino == u64::MAX {
                return Err(d.err(format!("inode number {ino} out of range")));
            }
            let rec = d.bytes()?;
            let mut rd = Decoder::new(rec, "inode record");
            let data = InodeData::decode(&mut rd)?;
            rd.expect_end()?;
            self.insert(ino, data);
        }
        let ndirs = d.u64()?;
        for _ in 0..ndirs {
            let ino = d.u64()?;
            let n = d.count(17)?;
            let node = self.get(ino).ok_or_else(|| d.err(format!("directory block for missing inode {ino}")))?;
            let mut g = node.data.write();
            let dir = g.dir_mut().ok_or_else(|| d.err(format!("directory block for non-directory {ino}")))?;
            for _ in 0..n {
                match d.u8()? {
                    0 => {}
                    k => return Err(d.err(format!("directory entry kind {k} not supported by this build"))),
                }
                let name = d.bytes()?.to_vec();
                let child = d.u64()?;
                let kind = d.u32()?;
                dir.insert(name, child, kind);
            }
        }
        d.expect_end()?;
        self.next_ino.fetch_max(next, Ordering::Relaxed);
        Ok(())
    }
}

pub const CKPT_MAGIC: u64 = u64::from_le_bytes(*b"HCMETA01");
pub const CKPT_VERSION: u32 = 1;

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
