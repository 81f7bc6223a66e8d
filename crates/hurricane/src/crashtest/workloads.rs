//! The workloads the crash harness records. Each runs operations on the
//! pool and mirrors them in a [`Model`]; after every operation the model's
//! tree is kept, with the log positions the operation started and ended at
//! and the files whose data it changed in place, so the checker can tell
//! which states a crash at any point may legally show.

use super::model::{MFile, Model, Node, Tree};
use super::record::{Mark, Recorder};
use crate::error::{Error, Result};
use crate::namespace::Creds;
use crate::{Fs, OpenOptions, RenameFlags, SetAttr};
use parking_lot::Mutex;
use rand::{rngs::StdRng, seq::SliceRandom, Rng};
use std::sync::Arc;

/// Name and one-line description of every workload (`crashtest --list`).
pub(crate) const WORKLOADS: &[(&str, &str)] = &[
    ("posix", "POSIX mix: create, write, overwrite, truncate, rename, unlink, mkdir, rmdir, link, symlink, chmod, xattrs, mixed layouts"),
    ("renames", "rename storm: files and directories renamed across directories, over existing targets, and exchanged"),
    ("appends", "appends to log files, each followed by fsync most of the time"),
    ("extent", "create, overwrite, append, truncate, punch holes in, zero ranges of and remove files with the extent layout"),
    ("stripe", "the same on stripe(unit=16K,width=3)"),
    ("regions", "the same on regions(size=32K,width=3)"),
    ("replicate", "the same on replicate(copies=2) and replicate(copies=3)"),
    ("inline", "the same on inline files, some outgrowing inline and moving to the default layout"),
    ("parity", "the same on parity(data=2,parity=1) and parity(data=1,parity=2,unit=8K): copy-on-write stripes, partial-stripe overwrites"),
    ("compress", "the same on compress (zstd and lz4, 4K to 64K chunks, over extent, stripe and replicate) with compressible, random and zero data: chunks rewritten copy-on-write"),
    ("nested", "the same on nested compositions (replicate of stripes, stripe of replicates, regions of stripes, a table over an extent and a stripe, write-mostly over extents and a stripe)"),
    ("txn", "4 threads running overlapping transactions over 5 protected files (extent, stripe, checksum, replicate, log): reads and writes in random order, partial blocks, records of one block updated side by side, and appends, some aborted, some deadlock victims; each committed transaction wholly present or absent"),
    ("concurrent", "4 threads, each in its own directory, syncing on their own while the background committer also commits"),
    ("full", "devices filled to their last block: writes failing with ENOSPC (each refused write commits and tries again), removals, truncations, meta-data operations on a full pool"),
    ("resilver", "device 1 replaced by a blank device and resilvered in steps between creates, writes, truncations and removals, to online"),
    ("evacuate", "files on every device, then device 1 (journal mirror, meta-file copy) removed: marked evacuating, its files moved off one per step between creates, writes, truncations and removals, then its journal mirror and meta-file copy moved, to removed"),
    ("migrate", "files of every layout moved online to other layouts (extent, stripe, replicate, parity, compress, regions) in chunks of 8K to 64K, some migrations stopped part way, between writes, truncations, punched holes, collapsed and inserted ranges, creates and removals"),
    ("log", "the same on log files (alone, two segment sizes, striped over logs, replicated with an extent): every write goes to the device's log head; the engine may clean and commit before any write, so every operation is one journal group"),
    ("cleaner", "small overwrites, truncations and punched holes on log files with 64K segments, with cleaning passes (cost-benefit and greedy) between them moving live blocks to the head"),
    ("directory", "many entries in few directories, created, removed, renamed, chmodded and given xattrs, with checkpoints between: entries and inodes read back from the meta-data store past a small inode cache, changes since the checkpoint from memory"),
    ("colocate", "small files under colocate directory defaults (by directory, by owner, 16K groups, replicated, striped) created across directories, overwritten, grown past their group, shrunk, punched, renamed between directories, regrouped and removed, read back through group reads with the caches dropped between; bursts of small files of one directory made, changed and read before a sync (group writes held until the commit)"),
    ("degraded", "files on every device, then device 2 goes missing at a random request (fault injection) while work, commits and checkpoints go on with files on devices 0 and 1"),
];

/// One operation of one thread, as the checker needs it.
pub(crate) struct OpRec {
    pub start: Mark,
    pub end: Mark,
    /// Files whose data this operation changed (in place or by size).
    pub mods: Vec<u64>,
}

/// One workload thread: its subtree and its history.
pub(crate) struct ThreadHist {
    /// The thread's directory ("" = the whole pool).
    pub prefix: String,
    /// `states[i]` = the thread's tree after its first `i` operations.
    pub states: Vec<Arc<Tree>>,
    pub ops: Vec<OpRec>,
}

/// A completed `sync` (or `fsync`, which is the same in this engine).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SyncRec {
    pub start: Mark,
    pub end: Mark,
}

/// How big a workload is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Size {
    pub ops: usize,
}

/// Runs one thread's operations against the pool and the model.
pub(crate) struct Driver<'a> {
    pub fs: &'a Fs,
    rec: &'a Recorder,
    syncs: &'a Mutex<Vec<SyncRec>>,
    pub rng: StdRng,
    pub m: Model,
    pub hist: ThreadHist,
    id_base: u64,
    next: u64,
    start: Option<Mark>,
    mods: Vec<u64>,
    /// Open handles of unlinked files.
    held: Vec<crate::File>,
    /// Print each operation (HURRICANE_CRASHTEST_TRACE=1).
    trace: bool,
    /// Write data that compresses (most writes), beside random data and
    /// zeros, rather than random data alone.
    pub compressible: bool,
    /// The engine may commit on its own between any two journal groups
    /// (the log cleans, and commits, when a write finds its clean segments
    /// gone; a write refused for space commits before it tries again):
    /// every operation is one group, a file made with contents is a create
    /// and then a write.
    pub atomic_only: bool,
}

/// Deterministic pseudo-random bytes, the same for the same seed.
pub(crate) fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Bytes that compress several times over yet differ from seed to seed:
/// runs of a letter the seed picks, with a random byte every 64.
fn text_pattern(seed: u64, len: usize) -> Vec<u8> {
    let noise = pattern(seed, len.div_ceil(64));
    (0..len).map(|i| if i % 64 == 0 { noise[i / 64] } else { b'a' + ((seed + (i / 256) as u64) % 26) as u8 }).collect()
}

fn parent(path: &str) -> &str {
    path.rfind('/').map(|i| &path[..i]).unwrap_or("")
}

impl<'a> Driver<'a> {
    pub fn new(
        fs: &'a Fs,
        rec: &'a Recorder,
        syncs: &'a Mutex<Vec<SyncRec>>,
        rng: StdRng,
        thread: u64,
        prefix: String,
        m: Model,
    ) -> Self {
        let t = Arc::new(m.tree());
        Driver {
            fs,
            rec,
            syncs,
            rng,
            m,
            hist: ThreadHist { prefix, states: vec![t], ops: Vec::new() },
            id_base: thread << 40,
            next: 0,
            start: None,
            mods: Vec::new(),
            held: Vec::new(),
            trace: std::env::var_os("HURRICANE_CRASHTEST_TRACE").is_some(),
            compressible: false,
            atomic_only: false,
        }
    }

    fn fresh(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    fn begin(&mut self) {
        self.start = Some(self.rec.mark());
    }

    fn end(&mut self) {
        let end = self.rec.mark();
        let start = self.start.take().unwrap_or(end);
        // Data changes may move a file to another layout (an inline file
        // outgrowing its block, by a write or a truncate): the model follows.
        for id in self.mods.clone() {
            let path = self.m.paths.iter().find(|(_, n)| **n == Node::File(id)).map(|(p, _)| p.clone());
            if let Some(path) = path {
                if let (Ok(l), Some(f)) = (self.live_layout(&path), self.m.files.get_mut(&id)) {
                    f.layout = l;
                }
            }
        }
        self.hist.ops.push(OpRec { start, end, mods: std::mem::take(&mut self.mods) });
        self.hist.states.push(Arc::new(self.m.tree()));
    }

    /// Runs one operation: `f` does it on the pool and in the model.
    fn op(&mut self, what: String, f: impl FnOnce(&mut Self) -> Result<()>) -> Result<()> {
        self.begin();
        let r = f(self);
        self.end();
        let i = self.hist.ops.len();
        if self.trace {
            let o = &self.hist.ops[i - 1];
            eprintln!("{}op {i}: {what} [events {}..{}]", self.hist.prefix, o.start.pos, o.end.pos);
        }
        r.map_err(|e| Error::Invalid(format!("workload operation {i} ({what}) failed: {e}")))
    }

    pub fn sync(&mut self) -> Result<()> {
        let start = self.rec.mark();
        self.fs.sync()?;
        let end = self.rec.mark();
        if self.trace {
            eprintln!("{}sync after op {} [events {}..{}]", self.hist.prefix, self.hist.ops.len(), start.pos, end.pos);
        }
        self.syncs.lock().push(SyncRec { start, end });
        Ok(())
    }

    /// Runs an engine call that is not a sync but may commit on its own
    /// (a resilver that completes checkpoints before it marks its device
    /// online). When `committed` says it did, the call counts as a sync:
    /// a crash from its start on may show any operation done before it
    /// ended, and one after it must show every operation done before it
    /// began.
    pub fn may_commit<R>(&mut self, f: impl FnOnce(&Fs) -> Result<R>, committed: impl FnOnce(&R) -> bool) -> Result<R> {
        let start = self.rec.mark();
        let r = f(self.fs)?;
        let end = self.rec.mark();
        if committed(&r) {
            if self.trace {
                eprintln!(
                    "{}commit (not a sync) after op {} [events {}..{}]",
                    self.hist.prefix,
                    self.hist.ops.len(),
                    start.pos,
                    end.pos
                );
            }
            self.syncs.lock().push(SyncRec { start, end });
        }
        Ok(r)
    }

    /// An operation that may commit on its own (the step that completes a
    /// device's removal syncs and checkpoints): `f` does it and says
    /// whether it committed; if so, the operation also counts as a sync
    /// spanning it (as [`Driver::may_commit`]).
    pub fn op_may_commit(&mut self, what: String, f: impl FnOnce(&mut Self) -> Result<bool>) -> Result<()> {
        let start = self.rec.mark();
        let mut committed = false;
        self.op(what, |d| {
            committed = f(d)?;
            Ok(())
        })?;
        if committed {
            let end = self.rec.mark();
            self.syncs.lock().push(SyncRec { start, end });
        }
        Ok(())
    }

    /// The layout the live pool gives `path` now (a file's, or a
    /// directory's default for new files): what must survive a crash.
    fn live_layout(&self, path: &str) -> Result<String> {
        let ino = self.fs.resolve(path)?;
        if self.fs.getattr(ino)?.is_dir() {
            self.fs.dir_layout_get(ino)
        } else {
            self.fs.layout_get(ino)
        }
    }

    /// Re-reads every file's layout into the model (files moved to other devices).
    fn refresh_all_layouts(&mut self) -> Result<()> {
        let files: Vec<String> =
            self.m.paths.iter().filter(|(_, n)| matches!(n, Node::File(_))).map(|(p, _)| p.clone()).collect();
        for p in files {
            self.refresh_layout(&p)?;
        }
        Ok(())
    }

    /// Re-reads a file's layout into the model (creation, inline promotion).
    fn refresh_layout(&mut self, path: &str) -> Result<()> {
        let l = self.live_layout(path)?;
        if let Some((_, f)) = self.m.file(path) {
            f.layout = l;
        }
        Ok(())
    }

    fn name(&mut self, tag: &str) -> String {
        let n = self.fresh();
        format!("{tag}{n}")
    }

    /// A random existing directory of this thread (its prefix included).
    pub fn dir(&mut self) -> String {
        let mut v: Vec<String> =
            self.m.paths.iter().filter(|(_, n)| matches!(n, Node::Dir { .. })).map(|(p, _)| p.clone()).collect();
        v.push(self.hist.prefix.clone());
        v.choose(&mut self.rng).cloned().unwrap_or_default()
    }

    pub fn pick(&mut self, f: impl Fn(&Node) -> bool) -> Option<String> {
        let v: Vec<&String> = self.m.paths.iter().filter(|(_, n)| f(n)).map(|(p, _)| p).collect();
        v.choose(&mut self.rng).map(|s| s.to_string())
    }

    pub fn pick_file(&mut self) -> Option<String> {
        self.pick(|n| matches!(n, Node::File(_)))
    }

    fn data(&mut self, len: usize) -> Vec<u8> {
        let seed = self.id_base + self.fresh();
        if self.compressible {
            match self.rng.gen_range(0..8) {
                0 => return vec![0; len],
                1 => {}
                _ => return text_pattern(seed, len),
            }
        }
        pattern(seed, len)
    }

    /// Creates (or replaces) a file with contents, in one call to the native
    /// API (several journal groups: create, then write).
    pub fn create_file(&mut self, layout: Option<&str>, len: usize) -> Result<String> {
        if self.atomic_only {
            let path = self.create_tagged(layout, "f")?;
            if len > 0 {
                self.write_at(&path, 0, len)?;
            }
            return Ok(path);
        }
        let dir = self.dir();
        self.create_file_in(&dir, layout, len)
    }

    /// [`Driver::create_file`] in a given directory.
    pub fn create_file_in(&mut self, dir: &str, layout: Option<&str>, len: usize) -> Result<String> {
        let path = format!("{dir}/{}", self.name("f"));
        let data = self.data(len);
        self.op(format!("create_file {path} {len} bytes {layout:?}"), |d| {
            d.fs.write_file(&path, &data, layout)?;
            let id = d.id_base + d.fresh();
            d.m.files.insert(id, MFile::new(data, d.live_layout(&path)?));
            d.m.paths.insert(path.clone(), Node::File(id));
            Ok(())
        })?;
        Ok(path)
    }

    /// Creates an empty file: one journal group.
    pub fn create_empty(&mut self, layout: Option<&str>) -> Result<String> {
        self.create_tagged(layout, "e")
    }

    fn create_tagged(&mut self, layout: Option<&str>, tag: &str) -> Result<String> {
        let dir = self.dir();
        let path = format!("{dir}/{}", self.name(tag));
        self.op(format!("create {path} {layout:?}"), |d| {
            drop(d.fs.create(&path, layout)?);
            let id = d.id_base + d.fresh();
            d.m.files.insert(id, MFile::new(Vec::new(), d.live_layout(&path)?));
            d.m.paths.insert(path.clone(), Node::File(id));
            Ok(())
        })?;
        Ok(path)
    }

    /// One positioned write (one journal group).
    pub fn write_at(&mut self, path: &str, off: usize, len: usize) -> Result<()> {
        let data = self.data(len);
        self.op(format!("write {path} at {off}, {len} bytes"), |d| {
            let f = d.fs.open_with(path, OpenOptions::new().write(true))?;
            let n = f.write_at(&data, off as u64)?;
            if n != data.len() {
                return Err(Error::Invalid(format!("short write {n} of {}", data.len())));
            }
            if let Some((id, mf)) = d.m.file(path) {
                mf.write(off, &data);
                d.mods.push(id);
            }
            d.refresh_layout(path)
        })
    }

    /// A write that may fail with ENOSPC: then whatever part of it the
    /// layout managed to place is read back from the pool into the model.
    pub fn write_or_full(&mut self, path: &str, off: usize, len: usize) -> Result<bool> {
        let data = self.data(len);
        let mut full = false;
        self.op(format!("write {path} at {off}, {len} bytes (may fill)"), |d| {
            let f = d.fs.open_with(path, OpenOptions::new().write(true))?;
            let r = f.write_at(&data, off as u64);
            let Some((id, mf)) = d.m.file(path) else { return Ok(()) };
            d.mods.push(id);
            match r {
                Ok(_) => mf.write(off, &data),
                Err(Error::NoSpace(_)) => {
                    full = true;
                    let now = d.fs.read_file(path)?;
                    if let Some((_, mf)) = d.m.file(path) {
                        mf.set(now);
                    }
                }
                Err(e) => return Err(e),
            }
            d.refresh_layout(path)
        })?;
        Ok(full)
    }

    /// Appends through an O_APPEND handle; with `fsync`, syncs it.
    pub fn append(&mut self, path: &str, len: usize, fsync: bool) -> Result<()> {
        let data = self.data(len);
        self.op(format!("append {path} {len} bytes"), |d| {
            use std::io::Write;
            let mut f = d.fs.open_with(path, OpenOptions::new().append(true))?;
            f.write_all(&data).map_err(Error::RawIo)?;
            if let Some((id, mf)) = d.m.file(path) {
                let off = mf.data.len();
                mf.write(off, &data);
                d.mods.push(id);
            }
            d.refresh_layout(path)
        })?;
        if fsync {
            // fsync of the handle: the same as a sync of the pool here.
            let start = self.rec.mark();
            self.fs.open_file(path)?.sync_all()?;
            let end = self.rec.mark();
            self.syncs.lock().push(SyncRec { start, end });
        }
        Ok(())
    }

    pub fn truncate(&mut self, path: &str, len: usize) -> Result<()> {
        self.op(format!("truncate {path} to {len}"), |d| {
            d.fs.open_with(path, OpenOptions::new().write(true))?.set_len(len as u64)?;
            if let Some((id, mf)) = d.m.file(path) {
                mf.truncate(len);
                d.mods.push(id);
            }
            Ok(())
        })
    }

    /// Preallocates [off, off+len) (mode 0: the size grows to cover it);
    /// what was there reads as before, the rest as zeros.
    pub fn fallocate(&mut self, path: &str, off: usize, len: usize) -> Result<()> {
        self.op(format!("fallocate {path} {off}+{len}"), |d| {
            let ino = d.fs.resolve(path)?;
            d.fs.fallocate(ino, off as u64, len as u64, 0)?;
            if let Some((id, mf)) = d.m.file(path) {
                if off + len > mf.data.len() {
                    mf.truncate(off + len);
                }
                d.mods.push(id);
            }
            Ok(())
        })
    }

    /// Collapses [off, off+len) out of the file (`insert`: opens a hole of
    /// `len` bytes at `off`), both in whole blocks; a layout that cannot
    /// move its mappings by that much refuses, and nothing changes.
    pub fn move_range(&mut self, path: &str, off: usize, len: usize, insert: bool) -> Result<()> {
        let what = if insert { "insert" } else { "collapse" };
        self.op(format!("{what} {path} {off}+{len}"), |d| {
            let ino = d.fs.resolve(path)?;
            let mode = if insert { libc::FALLOC_FL_INSERT_RANGE } else { libc::FALLOC_FL_COLLAPSE_RANGE };
            match d.fs.fallocate(ino, off as u64, len as u64, mode) {
                Err(Error::NotSupported(_)) => return Ok(()),
                r => r?,
            }
            if let Some((id, mf)) = d.m.file(path) {
                let mut data = mf.data.clone();
                if insert {
                    data.splice(off..off, std::iter::repeat_n(0u8, len));
                } else {
                    data.drain(off..off + len);
                }
                mf.set(data);
                d.mods.push(id);
            }
            Ok(())
        })
    }

    /// Punches a hole in [off, off+len) (`zero`: zeroes the range, space
    /// allocated, the size growing to cover it): the range reads as zeros.
    pub fn punch(&mut self, path: &str, off: usize, len: usize, zero: bool) -> Result<()> {
        let what = if zero { "zero range" } else { "punch" };
        self.op(format!("{what} {path} {off}+{len}"), |d| {
            let ino = d.fs.resolve(path)?;
            let mode =
                if zero { libc::FALLOC_FL_ZERO_RANGE } else { libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE };
            d.fs.fallocate(ino, off as u64, len as u64, mode)?;
            if let Some((id, mf)) = d.m.file(path) {
                let end = if zero { off + len } else { (off + len).min(mf.data.len()) };
                if end > off {
                    mf.write(off, &vec![0u8; end - off]);
                }
                d.mods.push(id);
            }
            d.refresh_layout(path)
        })
    }

    pub fn rename(&mut self, from: &str, to: &str) -> Result<()> {
        self.op(format!("rename {from} {to}"), |d| {
            d.fs.rename_path(from, to)?;
            d.m.rename(from, to);
            Ok(())
        })
    }

    pub fn exchange(&mut self, a: &str, b: &str) -> Result<()> {
        self.op(format!("exchange {a} {b}"), |d| {
            let (pa, pb) = (parent(a), parent(b));
            let ia = d.fs.resolve(if pa.is_empty() { "/" } else { pa })?;
            let ib = d.fs.resolve(if pb.is_empty() { "/" } else { pb })?;
            let na = &a[pa.len() + 1..];
            let nb = &b[pb.len() + 1..];
            d.fs.rename(
                &Creds::root(),
                ia,
                na.as_bytes(),
                ib,
                nb.as_bytes(),
                RenameFlags { exchange: true, noreplace: false, ..Default::default() },
            )?;
            d.m.exchange(a, b);
            Ok(())
        })
    }

    pub fn remove(&mut self, path: &str) -> Result<()> {
        self.op(format!("remove {path}"), |d| {
            d.fs.remove(path)?;
            d.m.remove(path);
            Ok(())
        })
    }

    pub fn mkdir(&mut self) -> Result<String> {
        let dir = self.dir();
        let path = format!("{dir}/{}", self.name("d"));
        self.op(format!("mkdir {path}"), |d| {
            d.fs.mkdir_path(&path, 0o755)?;
            let layout = d.live_layout(&path)?;
            d.m.paths.insert(path.clone(), Node::Dir { perm: 0o755, layout });
            Ok(())
        })?;
        Ok(path)
    }

    pub fn link(&mut self, existing: &str) -> Result<()> {
        let dir = self.dir();
        let path = format!("{dir}/{}", self.name("h"));
        self.op(format!("link {existing} {path}"), |d| {
            d.fs.hard_link(existing, &path)?;
            if let Some(n) = d.m.paths.get(existing).cloned() {
                d.m.paths.insert(path.clone(), n);
            }
            Ok(())
        })
    }

    pub fn symlink(&mut self) -> Result<()> {
        let dir = self.dir();
        let path = format!("{dir}/{}", self.name("s"));
        let target = format!("target-{}", self.fresh());
        self.op(format!("symlink {path}"), |d| {
            d.fs.symlink_path(&target, &path)?;
            d.m.paths.insert(path.clone(), Node::Symlink(target.into_bytes()));
            Ok(())
        })
    }

    pub fn chmod(&mut self, path: &str, perm: u32) -> Result<()> {
        self.op(format!("chmod {path} {perm:o}"), |d| {
            d.fs.set_attr_path(path, &SetAttr { mode: Some(perm), ..Default::default() })?;
            match d.m.paths.get_mut(path) {
                Some(Node::Dir { perm: p, .. }) => *p = perm,
                Some(Node::File(id)) => {
                    let id = *id;
                    if let Some(f) = d.m.files.get_mut(&id) {
                        f.perm = perm;
                    }
                }
                _ => {}
            }
            Ok(())
        })
    }

    pub fn setxattr(&mut self, path: &str, name: &str, len: usize) -> Result<()> {
        let value = self.data(len);
        self.op(format!("setxattr {path} {name} {len} bytes"), |d| {
            let ino = d.fs.resolve(path)?;
            d.fs.setxattr(&Creds::root(), ino, name.as_bytes(), &value, 0)?;
            if let Some((_, f)) = d.m.file(path) {
                f.xattrs.insert(name.as_bytes().to_vec(), value);
            }
            Ok(())
        })
    }

    pub fn removexattr(&mut self, path: &str, name: &[u8]) -> Result<()> {
        self.op(format!("removexattr {path}"), |d| {
            let ino = d.fs.resolve(path)?;
            d.fs.removexattr(&Creds::root(), ino, name)?;
            if let Some((_, f)) = d.m.file(path) {
                f.xattrs.remove(name);
            }
            Ok(())
        })
    }

    /// Gives an empty file a layout (`user.hurricane.layout`).
    pub fn set_layout(&mut self, path: &str, spec: &str) -> Result<()> {
        self.op(format!("set_layout {path} {spec}"), |d| {
            d.fs.set_layout(path, spec)?;
            d.refresh_layout(path)
        })
    }

    /// Sets a directory's default layout (`user.hurricane.dir_layout`).
    pub fn dir_layout(&mut self, path: &str, spec: &str) -> Result<()> {
        self.op(format!("dir_layout {path} {spec}"), |d| {
            let ino = d.fs.resolve(path)?;
            d.fs.dir_layout_set(&Creds::root(), ino, spec)?;
            let l = d.live_layout(path)?;
            if let Some(Node::Dir { layout, .. }) = d.m.paths.get_mut(path) {
                *layout = l;
            }
            Ok(())
        })
    }

    /// Opens a file, unlinks it and writes through the still-open handle,
    /// which is kept until `drop_held`: a crash meanwhile leaves an orphan
    /// inode that recovery must free.
    pub fn unlink_open(&mut self, path: &str) -> Result<()> {
        let data = self.data(5000);
        self.op(format!("unlink_open {path}"), |d| {
            let f = d.fs.open_with(path, OpenOptions::new().read(true).write(true))?;
            let id = d.m.file(path).map(|(id, _)| id);
            d.fs.remove(path)?;
            d.m.remove(path);
            f.write_at(&data, 0)?;
            if let Some(id) = id {
                // In place: a crash state from before the unlink may show it.
                d.mods.push(id);
                // Other hard links still show the file and what was written.
                if let Some(mf) = d.m.files.get_mut(&id) {
                    mf.write(0, &data);
                }
            }
            d.held.push(f);
            Ok(())
        })
    }

    /// Closes the handles `unlink_open` kept (freeing orphans).
    pub fn drop_held(&mut self) -> Result<()> {
        self.op(format!("close {} unlinked files", self.held.len()), |d| {
            d.held.clear();
            Ok(())
        })
    }

    /// Empty directories of this thread.
    fn empty_dirs(&self) -> Vec<String> {
        self.m
            .paths
            .iter()
            .filter(|(p, n)| matches!(n, Node::Dir { .. }) && self.m.under(p).is_empty())
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// A rename target for `from` that POSIX allows: a new name, or an
    /// existing one of a compatible type not beneath `from`.
    fn rename_target(&mut self, from: &str) -> Option<String> {
        let from_dir = self.m.is_dir(from);
        if self.rng.gen_bool(0.6) {
            let mut d = self.dir();
            for _ in 0..8 {
                if !(d == from || d.starts_with(&format!("{from}/"))) {
                    break;
                }
                d = self.dir();
            }
            if d == from || d.starts_with(&format!("{from}/")) {
                return None;
            }
            return Some(format!("{d}/{}", self.name("r")));
        }
        let empties = self.empty_dirs();
        let cands: Vec<String> = self
            .m
            .paths
            .iter()
            .filter(|(p, n)| {
                *p != from
                    && !p.starts_with(&format!("{from}/"))
                    && !from.starts_with(&format!("{p}/"))
                    && if from_dir {
                        matches!(n, Node::Dir { .. }) && empties.contains(p)
                    } else {
                        !matches!(n, Node::Dir { .. })
                    }
            })
            .map(|(p, _)| p.clone())
            .collect();
        cands.choose(&mut self.rng).cloned()
    }
}

// ---------------------------------------------------------------- workloads

const MIX_LAYOUTS: &[&str] = &[
    "extent",
    "extent@1",
    "stripe(unit=16K,width=3)",
    "regions(size=32K,width=2)",
    "replicate[extent,extent]",
    "inline",
    "replicate[stripe(unit=8K,width=2),extent@2]",
];

/// The POSIX mix.
pub(crate) fn posix(d: &mut Driver, size: Size) -> Result<()> {
    for _ in 0..size.ops {
        let r = d.rng.gen_range(0..100);
        match r {
            0..=17 => {
                let lay = *MIX_LAYOUTS.choose(&mut d.rng).unwrap_or(&"extent");
                let len = if lay == "inline" { d.rng.gen_range(0..2048) } else { d.rng.gen_range(0..40_000) };
                d.create_file(Some(lay), len)?;
            }
            18..=33 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let off = d.rng.gen_range(0..cur + 3000);
                    let len = d.rng.gen_range(1..20_000);
                    d.write_at(&p, off, len)?;
                }
            }
            34..=38 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let len = d.rng.gen_range(0..cur + 6000);
                    d.truncate(&p, len)?;
                }
            }
            39..=40 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let off = d.rng.gen_range(0..cur + 6000);
                    let len = d.rng.gen_range(1..40_000);
                    d.fallocate(&p, off, len)?;
                }
            }
            41..=50 => {
                if let Some(p) = d.pick(|_| true) {
                    if let Some(to) = d.rename_target(&p) {
                        d.rename(&p, &to)?;
                    }
                }
            }
            51..=57 => {
                if let Some(p) = d.pick(|n| !matches!(n, Node::Dir { .. })) {
                    d.remove(&p)?;
                }
            }
            58..=65 => {
                d.mkdir()?;
            }
            66..=69 => {
                let e = d.empty_dirs();
                if let Some(p) = e.choose(&mut d.rng).cloned() {
                    d.remove(&p)?;
                }
            }
            70..=74 => {
                if let Some(p) = d.pick_file() {
                    d.link(&p)?;
                }
            }
            75..=78 => d.symlink()?,
            79..=82 => {
                if let Some(p) = d.pick(|n| !matches!(n, Node::Symlink(_))) {
                    let perm = *[0o600u32, 0o644, 0o700, 0o755, 0o640].choose(&mut d.rng).unwrap_or(&0o644);
                    d.chmod(&p, perm)?;
                }
            }
            83..=86 => {
                if let Some(p) = d.pick_file() {
                    let name = format!("user.k{}", d.rng.gen_range(0..4));
                    let len = d.rng.gen_range(0..300);
                    d.setxattr(&p, &name, len)?;
                }
            }
            87..=88 => {
                if let Some(p) = d.pick_file() {
                    let names: Vec<Vec<u8>> =
                        d.m.file(&p).map(|(_, f)| f.xattrs.keys().cloned().collect()).unwrap_or_default();
                    if let Some(n) = names.choose(&mut d.rng).cloned() {
                        d.removexattr(&p, &n)?;
                    }
                }
            }
            89..=90 => {
                // A synced then overwritten file: old data must not leak.
                if let Some(p) = d.pick_file() {
                    d.create_over(&p)?;
                }
            }
            91 => {
                // An xattr too big for the small journal: the commit becomes a checkpoint.
                if let Some(p) = d.pick_file() {
                    let len = d.rng.gen_range(20_000..65_536);
                    d.setxattr(&p, "user.big", len)?;
                }
            }
            92..=93 => {
                if let Some(p) = d.pick_file() {
                    d.unlink_open(&p)?;
                }
            }
            94 if !d.held.is_empty() => d.drop_held()?,
            95..=96 => {
                let p = d.create_empty(None)?;
                let spec = *MIX_LAYOUTS.choose(&mut d.rng).unwrap_or(&"extent");
                d.set_layout(&p, spec)?;
                let len = d.rng.gen_range(0..9000);
                d.write_at(&p, 0, len)?;
            }
            97..=98 => {
                let dir = d.dir();
                if !dir.is_empty() {
                    let spec = *MIX_LAYOUTS.choose(&mut d.rng).unwrap_or(&"extent");
                    d.dir_layout(&dir, spec)?;
                }
            }
            _ => {}
        }
        if d.rng.gen_bool(0.2) {
            d.sync()?;
        }
    }
    if !d.held.is_empty() {
        d.drop_held()?;
    }
    d.sync()
}

impl Driver<'_> {
    /// O_TRUNC re-creation of an existing file with new contents.
    fn create_over(&mut self, path: &str) -> Result<()> {
        let len = self.rng.gen_range(0..30_000);
        let data = self.data(len);
        self.op(format!("rewrite {path} {len} bytes"), |d| {
            d.fs.write_file(path, &data, None)?;
            if let Some((id, f)) = d.m.file(path) {
                f.set(data);
                d.mods.push(id);
            }
            d.refresh_layout(path)
        })
    }
}

/// Rename storm: a fixed population renamed over and over.
pub(crate) fn renames(d: &mut Driver, size: Size) -> Result<()> {
    for _ in 0..3 {
        d.mkdir()?;
    }
    for _ in 0..12 {
        let len = d.rng.gen_range(0..12_000);
        d.create_file(Some("extent"), len)?;
    }
    for _ in 0..2 {
        d.mkdir()?;
    }
    d.sync()?;
    for _ in 0..size.ops {
        match d.rng.gen_range(0..10) {
            0..=5 => {
                if let Some(p) = d.pick(|_| true) {
                    if let Some(to) = d.rename_target(&p) {
                        d.rename(&p, &to)?;
                    }
                }
            }
            6..=7 => {
                let a = d.pick(|_| true);
                let b = d.pick(|_| true);
                if let (Some(a), Some(b)) = (a, b) {
                    let nested = a == b || a.starts_with(&format!("{b}/")) || b.starts_with(&format!("{a}/"));
                    if !nested {
                        d.exchange(&a, &b)?;
                    }
                }
            }
            8 => {
                if d.m.paths.len() < 40 {
                    let len = d.rng.gen_range(0..8_000);
                    d.create_file(Some("extent"), len)?;
                }
            }
            _ => {
                if let Some(p) = d.pick_file() {
                    d.link(&p)?;
                }
            }
        }
        if d.rng.gen_bool(0.25) {
            d.sync()?;
        }
    }
    d.sync()
}

/// Appends with fsync.
pub(crate) fn appends(d: &mut Driver, size: Size) -> Result<()> {
    let mut logs = Vec::new();
    for _ in 0..3 {
        logs.push(d.create_empty(Some("extent"))?);
    }
    logs.push(d.create_empty(Some("stripe(unit=8K,width=3)"))?);
    d.sync()?;
    for i in 0..size.ops {
        let p = logs.choose(&mut d.rng).cloned().unwrap_or_default();
        let len = if d.rng.gen_bool(0.7) { d.rng.gen_range(1..600) } else { d.rng.gen_range(600..20_000) };
        let fsync = d.rng.gen_bool(0.8);
        d.append(&p, len, fsync)?;
        if i % 25 == 24 {
            // Rotate: the oldest log is removed, a new one started.
            let old = logs.remove(0);
            d.remove(&old)?;
            logs.push(d.create_empty(Some("extent"))?);
        }
    }
    d.sync()
}

/// File operations on one family of layouts.
pub(crate) fn layouts(d: &mut Driver, size: Size, specs: &[&str], max_len: usize) -> Result<()> {
    // Live data stays well under the pool (three copies of 3 MiB with
    // `replicate(copies=3)`): filling devices is the `full` workload's job.
    const BUDGET: usize = 3 << 20;
    for _ in 0..size.ops {
        let spec = *specs.choose(&mut d.rng).unwrap_or(&"extent");
        let live: usize = d.m.files.values().map(|f| f.data.len()).sum();
        let pick = if live > BUDGET { 80 } else { d.rng.gen_range(0..100) };
        match pick {
            0..=24 => {
                let len = d.rng.gen_range(0..max_len);
                d.create_file(Some(spec), len)?;
            }
            25..=49 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let off = d.rng.gen_range(0..cur + 1);
                    let len = d.rng.gen_range(1..max_len / 2 + 2);
                    d.write_at(&p, off, len)?;
                }
            }
            50..=64 => {
                if let Some(p) = d.pick_file() {
                    let len = d.rng.gen_range(1..max_len / 4 + 2);
                    d.append(&p, len, false)?;
                }
            }
            65..=71 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let len = d.rng.gen_range(0..cur + max_len / 4 + 1);
                    d.truncate(&p, len)?;
                }
            }
            72..=76 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let off = d.rng.gen_range(0..cur + 1);
                    let len = d.rng.gen_range(1..max_len / 2 + 2);
                    let zero = d.rng.gen_bool(0.3);
                    d.punch(&p, off, len, zero)?;
                }
            }
            77..=86 => {
                if let Some(p) = d.pick_file() {
                    d.remove(&p)?;
                }
            }
            87..=92 => {
                if let Some(p) = d.pick_file() {
                    let to = format!("/{}", d.name("m"));
                    d.rename(&p, &to)?;
                }
            }
            _ => {
                if let Some(p) = d.pick_file() {
                    if d.atomic_only {
                        let len = d.rng.gen_range(1..max_len / 2 + 2);
                        d.write_at(&p, 0, len)?;
                    } else {
                        d.create_over(&p)?;
                    }
                }
            }
        }
        if d.rng.gen_bool(0.3) {
            d.sync()?;
        }
    }
    d.sync()
}

/// The per-layout workloads: (name, specs, largest file).
pub(crate) fn layout_family(name: &str) -> Option<(&'static [&'static str], usize)> {
    Some(match name {
        "extent" => (&["extent", "extent@0", "extent@2"], 90_000),
        "stripe" => (&["stripe(unit=16K,width=3)", "stripe(unit=4K,width=2)"], 90_000),
        "regions" => (&["regions(size=32K,width=3)", "regions(size=8K,width=2)"], 90_000),
        "replicate" => (&["replicate(copies=2)[extent@0,extent@2]", "replicate(copies=3)"], 60_000),
        "inline" => (&["inline", "inline(max=4K)"], 3_000),
        "parity" => (&["parity(data=2,parity=1)", "parity(data=1,parity=2,unit=8K)"], 60_000),
        "compress" => (
            &[
                "compress[extent@0]",
                "compress(algo=lz4,chunk=16K)[stripe(unit=8K,width=2)]",
                "compress(chunk=4K)[extent@2]",
                "replicate[compress(chunk=8K)[extent@0],compress(algo=lz4)[extent@1]]",
            ],
            90_000,
        ),
        "log" => (
            &[
                "log@0",
                "log(segment=64K)@1",
                "stripe(unit=8K)[log@0,log@1,log@2]",
                "replicate[log(segment=64K)@0,extent@1]",
            ],
            90_000,
        ),
        "nested" => (
            &[
                "replicate[stripe(unit=8K,width=2),extent@2]",
                "stripe(unit=8K)[replicate[extent@0,extent@1],replicate[extent@1,extent@2]]",
                "regions(size=16K)[stripe(unit=4K,width=2),extent@2]",
                "table(map=0-16K:0;16K-48K:1;48K-:0)[extent@0,stripe(unit=8K)[extent@1,extent@2]]",
                "write-mostly(unit=8K)[extent@0,stripe(unit=4K)[extent@1,extent@2]]",
                "write-mostly(unit=4K,width=3)",
            ],
            60_000,
        ),
        _ => return None,
    })
}

/// One thread of the concurrent workload: only atomic (single journal
/// group) operations, in its own directory, syncing on its own.
pub(crate) fn concurrent_thread(d: &mut Driver, size: Size) -> Result<()> {
    for _ in 0..size.ops {
        match d.rng.gen_range(0..100) {
            0..=19 => {
                let lay = *["extent", "stripe(unit=8K,width=3)", "replicate[extent@0,extent@1]"]
                    .choose(&mut d.rng)
                    .unwrap_or(&"extent");
                d.create_empty(Some(lay))?;
            }
            20..=54 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let off = d.rng.gen_range(0..cur + 1);
                    let len = d.rng.gen_range(1..20_000);
                    d.write_at(&p, off, len)?;
                }
            }
            55..=64 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let len = d.rng.gen_range(0..cur + 1);
                    d.truncate(&p, len)?;
                }
            }
            65..=74 => {
                if let Some(p) = d.pick(|n| !matches!(n, Node::Dir { .. })) {
                    if let Some(to) = d.rename_target(&p) {
                        d.rename(&p, &to)?;
                    }
                }
            }
            75..=82 => {
                if let Some(p) = d.pick_file() {
                    d.remove(&p)?;
                }
            }
            83..=89 => {
                d.mkdir()?;
            }
            _ => {
                if let Some(p) = d.pick_file() {
                    let name = format!("user.t{}", d.rng.gen_range(0..3));
                    d.setxattr(&p, &name, 40)?;
                }
            }
        }
        if d.rng.gen_bool(0.15) {
            d.sync()?;
        }
    }
    d.sync()
}

/// Fills the devices: big writes until ENOSPC, then removals and
/// truncations that free space, and meta-data work on the full pool.
pub(crate) fn full(d: &mut Driver, size: Size) -> Result<()> {
    const SPECS: &[&str] = &["extent@1", "extent@2", "stripe(unit=64K,width=2)", "extent@0"];
    let mut fulls = 0;
    d.sync()?;
    // First fill every device, a few syncs along the way.
    for spec in SPECS {
        let p = d.create_empty(Some(spec))?;
        for i in 0..200 {
            let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
            if d.write_or_full(&p, cur, 256 << 10)? {
                fulls += 1;
                break;
            }
            if i % 6 == 5 {
                d.sync()?;
            }
        }
    }
    // Files a write may fill: not the inline ones, whose growth is two
    // journal groups (the move to another layout, then the write), and
    // the engine may commit between them when the write is refused for
    // space (every operation here must be one group).
    let growable = |d: &mut Driver| {
        let v: Vec<String> =
            d.m.paths
                .iter()
                .filter(|(_, n)| match n {
                    Node::File(id) => d.m.files.get(id).is_some_and(|f| !f.layout.starts_with("inline")),
                    _ => false,
                })
                .map(|(p, _)| p.clone())
                .collect();
        v.choose(&mut d.rng).cloned()
    };
    for _ in 0..size.ops / 2 {
        match d.rng.gen_range(0..10) {
            0..=5 => {
                let p = match growable(d) {
                    Some(p) if d.rng.gen_bool(0.6) => p,
                    _ => {
                        let spec = *SPECS.choose(&mut d.rng).unwrap_or(&"extent@1");
                        d.create_empty(Some(spec))?
                    }
                };
                let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                let len = d.rng.gen_range(64 << 10..512 << 10);
                fulls += d.write_or_full(&p, cur, len)? as usize;
            }
            6..=7 => {
                if let Some(p) = d.pick_file() {
                    d.remove(&p)?;
                }
            }
            8 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    d.truncate(&p, cur / 2)?;
                }
            }
            _ => {
                d.mkdir()?;
                d.create_file(Some("inline"), 500)?;
            }
        }
        if d.rng.gen_bool(0.3) {
            d.sync()?;
        }
    }
    if fulls == 0 {
        return Err(Error::Invalid("the full workload never filled a device".into()));
    }
    d.sync()
}

/// Many entries in few directories, checkpointed often. Every workload runs
/// with an inode cache of a few dozen inodes, so entries and inodes are read
/// back from the meta-data store; here the directories are larger than the
/// cache and the checkpoints that settle their changes come between the
/// operations.
pub(crate) fn directory(d: &mut Driver, size: Size) -> Result<()> {
    d.mkdir()?;
    for _ in 0..60 {
        let len = d.rng.gen_range(0..300);
        d.create_file(Some("inline"), len)?;
    }
    d.may_commit(|fs| fs.checkpoint(), |_| true)?;
    for i in 0..size.ops {
        match d.rng.gen_range(0..10) {
            0..=3 => {
                let len = d.rng.gen_range(0..300);
                d.create_file(Some("inline"), len)?;
            }
            4..=5 => {
                if let Some(p) = d.pick_file() {
                    d.remove(&p)?;
                }
            }
            6 => {
                if let Some(p) = d.pick_file() {
                    if let Some(to) = d.rename_target(&p) {
                        d.rename(&p, &to)?;
                    }
                }
            }
            7 => {
                if let Some(p) = d.pick_file() {
                    let perm = d.rng.gen_range(0o400..0o777);
                    d.chmod(&p, perm)?;
                }
            }
            8 => {
                if let Some(p) = d.pick_file() {
                    d.setxattr(&p, &format!("user.x{}", i % 3), 40)?;
                }
            }
            _ => {
                d.create_empty(None)?;
            }
        }
        if d.rng.gen_bool(0.1) {
            d.may_commit(|fs| fs.checkpoint(), |_| true)?;
        } else if d.rng.gen_bool(0.2) {
            d.sync()?;
        }
    }
    d.sync()
}

/// Small files kept together by `colocate` directory defaults: files
/// created in random directories (some in the root, under the pool's
/// default), overwritten, grown past their group, shrunk, punched, renamed
/// between directories, regrouped (their scattered blocks moved back into
/// their directory's group) and removed; now and then the caches are
/// dropped and a file is read back against the model through group reads.
/// Bursts of small files made in one directory, some overwritten,
/// truncated, punched, read back or removed before a sync (or a crash)
/// exercise group writes: their blocks are held and leave together at the
/// commit.
pub(crate) fn colocate(d: &mut Driver, size: Size) -> Result<()> {
    const SPECS: &[&str] = &[
        "colocate",
        "colocate(group=16K)@1",
        "colocate(key=owner)",
        "replicate[colocate@0,colocate@2]",
        "stripe(unit=8K)[colocate@0,colocate@1]",
    ];
    let mut dirs = Vec::new();
    for spec in SPECS {
        let dir = d.mkdir()?;
        d.dir_layout(&dir, spec)?;
        dirs.push(dir);
    }
    let small =
        |d: &mut Driver| if d.rng.gen_bool(0.9) { d.rng.gen_range(0..12_000) } else { d.rng.gen_range(0..90_000) };
    for _ in 0..size.ops {
        match d.rng.gen_range(0..106) {
            100..=105 => {
                // A burst of small files of one directory between syncs
                // (group writes), changed and read before the sync.
                let dir = dirs[d.rng.gen_range(0..dirs.len())].clone();
                let mut made = Vec::new();
                for _ in 0..d.rng.gen_range(4..20) {
                    let len = d.rng.gen_range(1..12_000);
                    made.push(d.create_file_in(&dir, None, len)?);
                }
                for p in &made {
                    match d.rng.gen_range(0..12) {
                        0 | 1 => {
                            let len = d.rng.gen_range(1..8_000);
                            let off = d.rng.gen_range(0..8_000);
                            d.write_at(p, off, len)?;
                        }
                        2 => {
                            let len = d.rng.gen_range(0..10_000);
                            d.truncate(p, len)?;
                        }
                        3 => d.punch(p, 0, 4096, false)?,
                        4 => d.remove(p)?,
                        5 => {
                            let want = d.m.file(p).map(|(_, f)| f.data.clone()).unwrap_or_default();
                            if d.fs.read_file(p)? != want {
                                return Err(Error::Invalid(format!("{p}: read back before the sync differs")));
                            }
                        }
                        _ => {}
                    }
                }
                if d.rng.gen_bool(0.5) {
                    d.sync()?;
                }
                continue;
            }
            0..=34 => {
                let len = small(d);
                d.create_file(None, len)?;
            }
            35..=52 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let off = d.rng.gen_range(0..cur + 1);
                    let len = d.rng.gen_range(1..8_000);
                    d.write_at(&p, off, len)?;
                }
            }
            53..=60 => {
                if let Some(p) = d.pick_file() {
                    let len = small(d);
                    d.append(&p, len.max(1), false)?;
                }
            }
            61..=67 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let len = d.rng.gen_range(0..cur + 4_000);
                    d.truncate(&p, len)?;
                }
            }
            68..=71 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let off = d.rng.gen_range(0..cur + 1);
                    let len = d.rng.gen_range(1..12_000);
                    let zero = d.rng.gen_bool(0.3);
                    d.punch(&p, off, len, zero)?;
                }
            }
            72..=81 => {
                if let Some(p) = d.pick_file() {
                    d.remove(&p)?;
                }
            }
            82..=89 => {
                if let Some(p) = d.pick_file() {
                    if let Some(to) = d.rename_target(&p) {
                        d.rename(&p, &to)?;
                    }
                }
            }
            90..=94 => {
                // Group maintenance: the file's blocks move, its bytes stay.
                if let Some(p) = d.pick_file() {
                    d.op(format!("regroup {p}"), |d| {
                        let ino = d.fs.resolve(&p)?;
                        d.fs.regroup(ino)?;
                        Ok(())
                    })?;
                }
            }
            _ => {
                if d.rng.gen_bool(0.5) {
                    d.fs.drop_caches();
                }
                if let Some(p) = d.pick_file() {
                    let want = d.m.file(&p).map(|(_, f)| f.data.clone()).unwrap_or_default();
                    if d.fs.read_file(&p)? != want {
                        return Err(Error::Invalid(format!("{p}: read back differs from what was written")));
                    }
                }
            }
        }
        if d.rng.gen_bool(0.3) {
            d.sync()?;
        }
    }
    d.sync()
}

/// Device 1 fails and a blank device takes its slot: the replacement is
/// recorded as resilvering (superblocks), its old contents are wiped, and
/// the resilver runs a chunk at a time between ordinary operations until
/// the device is online. Every file keeps a copy off device 1, so every
/// crash state must read back whole; once the device is online its copies
/// are read too.
pub(crate) fn resilver(d: &mut Driver, size: Size) -> Result<()> {
    use crate::device::DeviceState;
    use crate::fs::{ReplaceOptions, ScrubOptions};
    use std::sync::atomic::{AtomicBool, Ordering};
    const SPECS: &[&str] = &[
        "replicate(copies=2)[extent@1,extent@2]",
        "replicate(copies=2)[extent@0,extent@1]",
        "extent@0",
        "stripe(unit=16K)[extent@0,extent@2]",
    ];
    let spec = |d: &mut Driver| *SPECS.choose(&mut d.rng).unwrap_or(&SPECS[0]);
    for _ in 0..16 {
        let s = spec(d);
        let len = d.rng.gen_range(1..160 << 10);
        d.create_file(Some(s), len)?;
    }
    d.sync()?;
    // The replacement: the slot's device taken as a new one.
    let slot = &d.fs.storage().devs[1];
    slot.set_state(DeviceState::Missing);
    let dev = slot.dev();
    let stop = Arc::new(AtomicBool::new(true));
    let opts = ReplaceOptions { scrub: ScrubOptions { stop: Some(stop), ..Default::default() }, ..Default::default() };
    d.fs.replace_device(1, dev.clone(), &opts, &|_| {})?;
    // Whatever it held before is not this pool's data any more.
    let zero = vec![0u8; 1 << 20];
    let mut at = 2 * crate::device::BLOCK_SIZE as u64;
    while at < dev.size() {
        let n = (dev.size() - at).min(zero.len() as u64) as usize;
        dev.write_at(&zero[..n], at)?;
        at += n as u64;
    }
    dev.flush()?;
    let mut pos = None;
    let mut online = false;
    for i in 0..size.ops / 2 {
        match d.rng.gen_range(0..10) {
            0..=2 => {
                let s = spec(d);
                let len = d.rng.gen_range(0..96 << 10);
                d.create_file(Some(s), len)?;
            }
            3..=4 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let off = d.rng.gen_range(0..=cur);
                    let len = d.rng.gen_range(1..48 << 10);
                    d.write_at(&p, off, len)?;
                }
            }
            5 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    d.truncate(&p, cur / 2)?;
                }
            }
            6 => {
                if let Some(p) = d.pick_file() {
                    d.remove(&p)?;
                }
            }
            _ if !online => {
                // One step of the resilver: a chunk, then stop.
                let stop = Arc::new(AtomicBool::new(false));
                let s2 = stop.clone();
                let o = ScrubOptions {
                    repair: true,
                    start: pos,
                    stop: Some(stop),
                    resilver_only: true,
                    ..Default::default()
                };
                // The step that completes the resilver checkpoints: a
                // commit of everything done so far.
                let r = d.may_commit(|fs| fs.scrub(&o, &|_| s2.store(true, Ordering::Relaxed)), |r| r.complete)?;
                if !r.lost.is_empty() {
                    return Err(Error::Invalid(format!("resilver lost data: {:?}", r.lost)));
                }
                pos = r.next;
                online = r.complete;
            }
            _ => {
                d.mkdir()?;
            }
        }
        if d.rng.gen_bool(0.2) || i % 16 == 15 {
            d.sync()?;
        }
    }
    while !online {
        let o = ScrubOptions { repair: true, start: pos, ..Default::default() };
        online = d.may_commit(|fs| fs.scrub(&o, &|_| {}), |r| r.complete)?.complete;
    }
    if !d.fs.resilvering().is_empty() {
        return Err(Error::Invalid("the resilver ended with device 1 still resilvering".into()));
    }
    for _ in 0..4 {
        let s = spec(d);
        d.create_file(Some(s), 20 << 10)?;
    }
    d.sync()
}

/// Files on every device, then device 2 (which holds neither the journal
/// nor the meta-file) goes missing at a random request while work goes on
/// with files on devices 0 and 1: commits and checkpoints skip it, reads of
/// files with a copy elsewhere return their data, files only there fail with
/// EIO. A crash state has device 2 back as it was when it went away.
pub(crate) fn degraded(d: &mut Driver, size: Size) -> Result<()> {
    use crate::device::{DeviceState, FaultDevice, FaultPlan, FaultSpec};
    const BEFORE: &[&str] = &[
        "extent@0",
        "extent@2",
        "replicate[extent@0,extent@2]",
        "stripe(unit=16K)[extent@1,extent@2]",
        "replicate[extent@0,extent@1]",
    ];
    const AFTER: &[&str] =
        &["extent@0", "extent@1", "replicate[extent@0,extent@1]", "stripe(unit=16K)[extent@0,extent@1]"];
    const MAX: usize = 60_000;
    // Files whose data lies on device 2 in part or whole: after it goes,
    // they are renamed and removed, never written.
    let on2 = |d: &Driver| -> std::collections::HashSet<u64> {
        d.m.files.iter().filter(|(_, f)| f.layout.contains("@2")).map(|(id, _)| *id).collect()
    };
    let step = |d: &mut Driver, specs: &[&str], writable: &dyn Fn(&Driver, &str) -> bool| -> Result<()> {
        let spec = *specs.choose(&mut d.rng).unwrap_or(&"extent@0");
        let pick_writable = |d: &mut Driver| {
            let p = d.pick_file()?;
            writable(d, &p).then_some(p)
        };
        match d.rng.gen_range(0..100) {
            0..=24 => {
                let len = d.rng.gen_range(0..MAX);
                d.create_file(Some(spec), len)?;
            }
            25..=49 => {
                if let Some(p) = pick_writable(d) {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let off = d.rng.gen_range(0..cur + 1);
                    let len = d.rng.gen_range(1..MAX / 2);
                    d.write_at(&p, off, len)?;
                }
            }
            50..=64 => {
                if let Some(p) = pick_writable(d) {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let len = d.rng.gen_range(0..cur + MAX / 4 + 1);
                    d.truncate(&p, len)?;
                }
            }
            65..=79 => {
                if let Some(p) = d.pick_file() {
                    d.remove(&p)?;
                }
            }
            80..=91 => {
                if let Some(p) = d.pick_file() {
                    let to = format!("/{}", d.name("m"));
                    d.rename(&p, &to)?;
                }
            }
            _ => {
                d.mkdir()?;
            }
        }
        if d.rng.gen_bool(0.3) {
            d.sync()?;
        }
        Ok(())
    };
    for _ in 0..size.ops / 3 {
        step(d, BEFORE, &|_, _| true)?;
    }
    d.sync()?;
    // Device 2 goes away a few requests from now: at a flush or superblock
    // write of some later commit.
    let fs = d.fs;
    let dev2 =
        fs.storage().devs.get(2).ok_or_else(|| Error::Invalid("the degraded workload needs 3 devices".into()))?;
    let plan = Arc::new(FaultPlan::new(FaultSpec { missing_after: Some(d.rng.gen_range(0..6)), ..Default::default() }));
    dev2.swap(Arc::new(FaultDevice::new(dev2.dev(), plan.clone())));
    for _ in size.ops / 3..size.ops {
        let skip = on2(d);
        let writable = move |d: &Driver, p: &str| match d.m.paths.get(p) {
            Some(Node::File(id)) => !skip.contains(id),
            _ => false,
        };
        step(d, AFTER, &writable)?;
    }
    plan.go_missing();
    d.sync()?;
    if dev2.state() != DeviceState::Missing {
        return Err(Error::Invalid(format!("device 2 is {} after it went away, not missing", dev2.state())));
    }
    // Every file reads back from the devices that are left (the data cache
    // dropped), or fails with EIO when its only copy was on device 2.
    fs.drop_caches();
    let files: Vec<(String, u64)> =
        d.m.paths
            .iter()
            .filter_map(|(p, n)| if let Node::File(id) = n { Some((p.clone(), *id)) } else { None })
            .collect();
    for (p, id) in files {
        let Some(f) = d.m.files.get(&id) else { continue };
        // A file whose only copy lies on device 2, whatever wraps its
        // leaf (the pool's default checksums make `extent@2` a
        // `checksum[extent@2]`): no mirror, no parity, no other device.
        let only2 = single_copy_on(&f.layout, 2);
        match fs.read_file(&p) {
            Ok(got) if !only2 || f.data.iter().all(|b| *b == 0) => {
                if got != f.data {
                    return Err(Error::Invalid(format!("{p} ({}) reads back wrong with device 2 missing", f.layout)));
                }
            }
            Err(e) if only2 && e.errno() == libc::EIO => {}
            Err(e) if f.layout.contains("stripe") && f.layout.contains("@2") && e.errno() == libc::EIO => {}
            Ok(_) => return Err(Error::Invalid(format!("{p} ({}) read with its only copy missing", f.layout))),
            Err(e) => return Err(Error::Invalid(format!("{p} ({}) with device 2 missing: {e}", f.layout))),
        }
    }
    d.sync()
}

/// Whether a file of layout `spec` keeps its data in one copy on device
/// `dev` alone: every leaf is on `dev`, and no node keeps a second copy
/// (a mirror) or parity. Wrappers (`checksum`, `compress`) change nothing.
pub(crate) fn single_copy_on(spec: &str, dev: u32) -> bool {
    let mut leaves = 0;
    let mut rest = spec;
    while let Some(i) = rest.find('@') {
        let digits: String = rest[i + 1..].chars().take_while(|c| c.is_ascii_digit()).collect();
        if digits.parse::<u32>().ok() != Some(dev) {
            return false;
        }
        leaves += 1;
        rest = &rest[i + 1 + digits.len()..];
    }
    leaves > 0 && !spec.contains("replicate") && !spec.contains("parity")
}

/// Files on every device, then device 1 (which holds the journal's mirror
/// and a copy of the meta-file as well) is removed: marked evacuating, its
/// files moved off one per operation between creates, writes, truncations
/// and removals, then its meta-file copy and journal mirror moved to device
/// 2, until it is removed. Every crash state must open (device 1 online,
/// evacuating or removed) and show each file whole, with its layout before
/// or after its move.
pub(crate) fn evacuate(d: &mut Driver, size: Size) -> Result<()> {
    use crate::device::DeviceState;
    use crate::fs::RemoveOptions;
    use std::sync::atomic::{AtomicBool, Ordering};
    const BEFORE: &[&str] = &[
        "replicate(copies=2)[extent@0,extent@1]",
        "replicate(copies=2)[extent@1,extent@2]",
        "stripe(unit=16K)[extent@1,extent@0]",
        "parity(data=1,parity=1,unit=8K)[extent@1,extent@2]",
        "extent@1",
        "extent@2",
    ];
    // What may be created once device 1 takes no new data.
    const AFTER: &[&str] = &["replicate(copies=2)[extent@0,extent@2]", "extent@2", "stripe(unit=16K,width=2)"];
    for _ in 0..16 {
        let s = *BEFORE.choose(&mut d.rng).unwrap_or(&BEFORE[0]);
        let len = d.rng.gen_range(1..96 << 10);
        d.create_file(Some(s), len)?;
    }
    d.sync()?;
    let mut removed = false;
    for i in 0..size.ops / 2 {
        match d.rng.gen_range(0..10) {
            0..=1 => {
                let s = *AFTER.choose(&mut d.rng).unwrap_or(&AFTER[0]);
                let len = d.rng.gen_range(0..64 << 10);
                d.create_file(Some(s), len)?;
            }
            2..=3 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let off = d.rng.gen_range(0..=cur);
                    let len = d.rng.gen_range(1..32 << 10);
                    d.write_at(&p, off, len)?;
                }
            }
            4 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    d.truncate(&p, cur / 2)?;
                }
            }
            5 => {
                if let Some(p) = d.pick_file() {
                    d.remove(&p)?;
                }
            }
            _ if !removed => {
                // One step of the removal: one file moved (the first step
                // also marks the device evacuating; the last one removes it).
                d.op_may_commit("evacuate device 1 by one file".into(), |d| {
                    let stop = Arc::new(AtomicBool::new(false));
                    let s2 = stop.clone();
                    let r = d.fs.remove_device(1, &RemoveOptions { stop: Some(stop) }, &|p| {
                        if p.files_done >= 1 {
                            s2.store(true, Ordering::Relaxed);
                        }
                    })?;
                    removed = r.complete;
                    d.refresh_all_layouts()?;
                    Ok(r.complete)
                })?;
            }
            _ => {
                d.mkdir()?;
            }
        }
        if d.rng.gen_bool(0.2) || i % 16 == 15 {
            d.sync()?;
        }
    }
    while !removed {
        d.op_may_commit("evacuate the rest of device 1".into(), |d| {
            removed = d.fs.remove_device(1, &RemoveOptions::default(), &|_| {})?.complete;
            d.refresh_all_layouts()?;
            Ok(removed)
        })?;
    }
    if d.fs.storage().devs[1].state() != DeviceState::Removed {
        return Err(Error::Invalid("the removal ended with device 1 not removed".into()));
    }
    if let Some(f) = d.m.files.values().find(|f| f.layout.contains("@1")) {
        return Err(Error::Invalid(format!("a file still on device 1 after its removal: {}", f.layout)));
    }
    for _ in 0..4 {
        let s = *AFTER.choose(&mut d.rng).unwrap_or(&AFTER[0]);
        d.create_file(Some(s), 20 << 10)?;
    }
    d.sync()
}

/// Log files overwritten in small pieces with cleaning passes between:
/// a crash anywhere in a pass (a block moved, its old copy freed) shows
/// the files' data unchanged.
pub(crate) fn cleaner(d: &mut Driver, size: Size) -> Result<()> {
    use crate::fs::{CleanOptions, CleanPolicy};
    const SPECS: &[&str] = &[
        "log(segment=64K)@0",
        "log(segment=64K)@1",
        "stripe(unit=8K)[log(segment=64K)@0,log(segment=64K)@2]",
        "replicate[log(segment=64K)@1,log(segment=64K)@2]",
    ];
    for _ in 0..8 {
        let s = *SPECS.choose(&mut d.rng).unwrap_or(&SPECS[0]);
        let len = d.rng.gen_range(4096..128 << 10);
        d.create_file(Some(s), len)?;
    }
    d.sync()?;
    for _ in 0..size.ops {
        match d.rng.gen_range(0..10) {
            0..=5 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let off = d.rng.gen_range(0..=cur);
                    let len = d.rng.gen_range(1..16 << 10);
                    d.write_at(&p, off, len)?;
                }
            }
            6 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let len = d.rng.gen_range(cur / 2..=cur);
                    d.truncate(&p, len)?;
                }
            }
            7 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let off = d.rng.gen_range(0..=cur);
                    let len = d.rng.gen_range(1..32 << 10);
                    d.punch(&p, off, len, false)?;
                }
            }
            _ => {
                let policy = if d.rng.gen_bool(0.5) { CleanPolicy::CostBenefit } else { CleanPolicy::Greedy };
                let max_segments = Some(d.rng.gen_range(1..8));
                // A pass that moved anything ends with a commit.
                d.op_may_commit(format!("clean ({policy:?}, {max_segments:?} segments)"), |d| {
                    let opts = CleanOptions { policy, max_segments, ..Default::default() };
                    let r = d.fs.clean(&opts, &mut |_| {})?;
                    Ok(r.moved_blocks > 0 || r.segments > 0)
                })?;
            }
        }
        if d.rng.gen_bool(0.3) {
            d.sync()?;
        }
    }
    d.sync()
}

/// Online re-layout: each migration is one operation, its copy cut at
/// every chunk; a crash inside it must leave the file whole under its old
/// layout or its new one.
pub(crate) fn migrate(d: &mut Driver, size: Size) -> Result<()> {
    use crate::fs::MigrateOptions;
    use std::sync::atomic::{AtomicBool, Ordering};
    const SPECS: &[&str] = &[
        "extent@0",
        "extent@2",
        "stripe(unit=8K,width=3)",
        "replicate[extent@0,extent@1]",
        "parity(data=2,parity=1,unit=8K)",
        "compress(chunk=8K)[extent@1]",
        "regions(size=16K,width=2)",
    ];
    let spec = |d: &mut Driver| *SPECS.choose(&mut d.rng).unwrap_or(&SPECS[0]);
    for _ in 0..10 {
        let s = spec(d);
        let len = d.rng.gen_range(0..160 << 10);
        d.create_file(Some(s), len)?;
    }
    d.sync()?;
    for _ in 0..size.ops {
        match d.rng.gen_range(0..10) {
            0..=3 => {
                let Some(p) = d.pick_file() else { continue };
                let to = spec(d);
                let chunk_blocks = *[2u64, 4, 16].choose(&mut d.rng).unwrap_or(&4);
                // Some are stopped after a few chunks: the old layout stays.
                let stop_after = d.rng.gen_bool(0.2).then(|| d.rng.gen_range(1..4u64));
                d.op(format!("migrate {p} to {to}"), |d| {
                    let stop = Arc::new(AtomicBool::new(false));
                    let chunks = std::sync::atomic::AtomicU64::new(0);
                    let opts = MigrateOptions { stop: Some(stop.clone()), chunk_blocks, ..Default::default() };
                    d.fs.migrate_path(&p, to, &opts, &|_| {
                        let n = chunks.fetch_add(1, Ordering::Relaxed) + 1;
                        if stop_after.is_some_and(|k| n >= k) {
                            stop.store(true, Ordering::Relaxed);
                        }
                    })?;
                    d.refresh_layout(&p)
                })?;
            }
            4..=5 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let off = d.rng.gen_range(0..=cur);
                    let len = d.rng.gen_range(1..48 << 10);
                    d.write_at(&p, off, len)?;
                }
            }
            6 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let len = d.rng.gen_range(0..=cur);
                    d.truncate(&p, len)?;
                }
            }
            7 => {
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let off = d.rng.gen_range(0..=cur);
                    let len = d.rng.gen_range(1..64 << 10);
                    let zero = d.rng.gen_bool(0.5);
                    d.punch(&p, off, len, zero)?;
                }
            }
            8 => {
                let s = spec(d);
                let len = d.rng.gen_range(0..96 << 10);
                d.create_file(Some(s), len)?;
            }
            9 if d.rng.gen_bool(0.5) => {
                // Collapse or insert whole blocks (extents, and stripes or
                // regions by whole rows, move; other layouts refuse).
                if let Some(p) = d.pick_file() {
                    let cur = d.m.file(&p).map(|(_, f)| f.data.len()).unwrap_or(0);
                    let blocks = cur / 4096;
                    if blocks >= 2 {
                        let insert = d.rng.gen_bool(0.5);
                        let off = d.rng.gen_range(0..blocks - 1) * 4096;
                        let max = if insert { 16 } else { (cur - off - 1) / 4096 };
                        let len = d.rng.gen_range(1..=max.clamp(1, 16)) * 4096;
                        if insert || off + len < cur {
                            d.move_range(&p, off, len, insert)?;
                        }
                    }
                }
            }
            _ => {
                if let Some(p) = d.pick_file() {
                    d.remove(&p)?;
                }
            }
        }
        if d.rng.gen_bool(0.25) {
            d.sync()?;
        }
    }
    d.sync()
}

#[cfg(test)]
mod tests {
    use super::single_copy_on;

    /// The degraded workload's test of which files lose their data with
    /// device 2: wrapped leaves count as the leaf (the pool's default
    /// checksums wrap every one), a mirror, parity or a
    /// stripe over other devices never does.
    #[test]
    fn a_single_copy_on_a_device_is_seen_through_wrappers() {
        for spec in ["extent@2", "checksum[extent@2]", "compress[checksum[extent@2]]"] {
            assert!(single_copy_on(spec, 2), "{spec}");
        }
        for spec in [
            "checksum[extent@0]",
            "extent@12",
            "replicate[checksum[extent@0],checksum[extent@2]]",
            "stripe(unit=16K)[checksum[extent@1],checksum[extent@2]]",
            "parity(data=1,parity=1)[extent@2,extent@2]",
            "inline",
        ] {
            assert!(!single_copy_on(spec, 2), "{spec}");
        }
    }
}
