//! The engine: an open pool with its namespace, journal and committer.
//!
//! [`Fs`] is cheap to clone and safe to share between threads. Its inode-level
//! methods (in `ops.rs` and `io.rs`) are what the FUSE front end calls; the
//! path-level API with [`File`] handles (in `path.rs`) is for programs that
//! link the engine in-process.

mod add;
mod evacuate;
mod health;
mod io;
mod ops;
mod path;
mod replace;
mod scrub;

pub use add::{add_device_path, AddOptions, MIN_DEVICE_BLOCKS};
pub use evacuate::{RemoveOptions, RemoveProgress, RemoveReport};
pub use health::PoolHealth;
pub use ops::{open_mask, Attr, DirItem, RenameFlags, SetAttr, StatFs, O_EXEC_OPEN};
pub use path::{File, OpenOptions};
pub use replace::{
    prepare_offline_replacement, prepare_replacement, set_device_path, ReplaceOptions, ReplaceProgress, ReplaceReport,
};
pub use scrub::{
    load_position, save_position, LostFile, PositionRecord, ScrubOptions, ScrubPos, ScrubProgress, ScrubReport,
};

use crate::blocks::{IoCtx, Layout, NodeRecord};
use crate::codec::{crc, Decoder, Encoder};
use crate::device::{Device, DeviceState, StatsSnapshot, BLOCK_SIZE};
use crate::error::{Error, Result};
use crate::journal::{self, Batch, Cursor, Gate, Ino, Op, Region};
use crate::layout::{self, PoolInfo};
use crate::namespace::{inode::S_IFDIR, Body, Dir, InodeData, State, ROOT};
use crate::pool::{self, Allocator, Storage, Superblock, FORMAT_VERSION, RESERVED_BLOCKS};
use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options for making a pool.
#[derive(Debug, Clone)]
pub struct FormatOptions {
    /// Journal size in bytes (default: 1/32 of device 0, between 4 MiB and 256 MiB).
    pub journal_size: Option<u64>,
    /// Default layout for new files (default: stripe over every device).
    pub default_layout: Option<String>,
    /// Layout of the meta-file (default: replicated on devices 0 and 1).
    pub meta_layout: Option<String>,
    /// New files get a `checksum` block above every per-device leaf of
    /// their layout (default: on).
    pub checksum: bool,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions { journal_size: None, default_layout: None, meta_layout: None, checksum: true }
    }
}

/// Options for opening a pool.
#[derive(Debug, Clone)]
pub struct Options {
    /// How often the committer writes the journal without being asked.
    pub commit_interval: Duration,
    pub read_only: bool,
    /// Run the background committer (tests of crash states turn it off).
    pub background_commit: bool,
    /// Memory bound of the file-data block cache in bytes (0: no cache).
    pub cache_bytes: u64,
    /// Threads that run prefetch requests (0: four per device, 4 to 64).
    pub io_threads: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            commit_interval: Duration::from_secs(1),
            read_only: false,
            background_commit: true,
            cache_bytes: crate::cache::DEFAULT_CACHE_BYTES,
            io_threads: 0,
        }
    }
}

/// What opening found and did: for `fsck`, mount logs and tests.
#[derive(Debug, Clone, Default)]
pub struct OpenReport {
    pub replayed_records: usize,
    pub replayed_ops: usize,
    pub replay_time: Duration,
    pub was_clean: bool,
    pub orphans_freed: usize,
    /// Blocks claimed by more than one owner (fsck reports these).
    pub double_claims: Vec<String>,
    /// Devices of the pool that were not there (index, name): the pool
    /// opened degraded.
    pub missing_devices: Vec<(u32, String)>,
    /// Which journal copy replay used (the mirror when device 0 was
    /// unreadable or its copy ended sooner).
    pub journal_copy: journal::JournalCopy,
}

struct MetaState {
    sb: Superblock,
    cursor: Cursor,
    meta: Layout,
    /// Groups a failed commit took out of the gate: the next commit writes
    /// them first, so what is durable is always a prefix of what was done.
    unwritten: Vec<Vec<u8>>,
    /// A new layout for the meta-file (its copies moved off a device being
    /// removed): the next checkpoint writes it there.
    relayout: Option<crate::blocks::Spec>,
}

pub(crate) struct Inner {
    pub(crate) storage: Storage,
    pub(crate) state: State,
    pub(crate) gate: Gate,
    meta: Mutex<MetaState>,
    committed: Mutex<u64>,
    committed_cv: Condvar,
    salt: u64,
    read_only: bool,
    pub(crate) default_layout: parking_lot::RwLock<String>,
    /// New files' layouts get checksum blocks (superblock `checksum`).
    pub(crate) checksum: bool,
    /// Inodes whose times changed since the last commit (sharded lists).
    dirty: Box<[CachePadded<Mutex<Vec<Ino>>>]>,
    /// Serialises cross-directory renames of directories, so two of them
    /// cannot together move a directory under itself.
    rename_lock: Mutex<()>,
    shutdown: Mutex<bool>,
    shutdown_cv: Condvar,
    closed: AtomicBool,
    committer: Mutex<Option<std::thread::JoinHandle<()>>>,
    report: Mutex<OpenReport>,
    commits: AtomicU64,
    checkpoints: AtomicU64,
    /// File-data blocks (see `cache`).
    pub(crate) cache: crate::cache::BlockCache,
    /// Threads running prefetch requests into `cache`.
    pub(crate) io_pool: crate::cache::IoPool,
}

/// An open pool. Clones share it.
#[derive(Clone)]
pub struct Fs {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

fn shards() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(4).clamp(4, 64) * 4
}

/// A sink for requests that record nothing (reads, meta-file writes).
pub(crate) fn ignore(_: NodeRecord) {}

impl Fs {
    /// Makes a new pool on `devs` (erasing what they held).
    pub fn format(devs: Vec<Arc<dyn Device>>, opts: &FormatOptions) -> Result<()> {
        if devs.is_empty() {
            return Err(Error::Device("a pool needs at least one device".into()));
        }
        let n = devs.len() as u32;
        let handles: Vec<_> =
            devs.into_iter().enumerate().map(|(i, d)| crate::device::DeviceHandle::new(i as u32, d)).collect();
        let dev0 = handles[0].blocks();
        let jblocks = match opts.journal_size {
            Some(b) => b / BLOCK_SIZE as u64,
            None => (dev0 / 32).clamp(1024, 65536),
        };
        let min_blocks = RESERVED_BLOCKS + 64;
        // Device 1 holds the journal's mirror in pools of two or more.
        for h in &handles {
            let need = if h.index <= 1 { min_blocks + jblocks } else { min_blocks };
            if h.blocks() < need {
                return Err(Error::Device(format!(
                    "{}: too small: {} KiB, needs at least {} KiB",
                    h.name(),
                    h.blocks() * 4,
                    need * 4
                )));
            }
        }
        if jblocks < 16 {
            return Err(Error::Invalid(format!("journal of {jblocks} blocks is too small")));
        }
        let journal = Region { dev: 0, start: RESERVED_BLOCKS, blocks: jblocks };
        let journal_mirror = (n >= 2).then_some(Region { dev: 1, ..journal });
        let allocs = handles.iter().map(|h| Allocator::new(RESERVED_BLOCKS, h.blocks())).collect();
        let storage = Storage { devs: handles.into(), allocs };
        for j in std::iter::once(&journal).chain(journal_mirror.as_ref()) {
            storage.allocs[j.dev as usize].mark_used(j.start, j.blocks);
        }
        // Wipe both superblock slots and the journal head of a reused device.
        let zero = vec![0u8; BLOCK_SIZE * RESERVED_BLOCKS as usize];
        for d in &storage.devs {
            d.write_blocks(0, &zero)?;
        }
        for j in std::iter::once(&journal).chain(journal_mirror.as_ref()) {
            storage.devs[j.dev as usize].write_blocks(j.start, &vec![0u8; BLOCK_SIZE * 4])?;
        }

        let default_layout = match &opts.default_layout {
            Some(s) => s.clone(),
            None => default_pool_layout(n),
        };
        let info = pool_info(&storage);
        layout::resolve(&layout::parse(&default_layout)?, &info)?;
        let meta_spec = match &opts.meta_layout {
            Some(s) => s.clone(),
            None if n >= 2 => "replicate(copies=2)[extent@0,extent@1]".into(),
            None => "extent@0".into(),
        };
        let meta = Layout::build(&layout::resolve(&layout::parse(&meta_spec)?, &info)?)?;

        let state = State::new(4);
        let t = now();
        let (uid, gid) = (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw());
        state.insert(
            ROOT,
            InodeData {
                mode: S_IFDIR | 0o755,
                uid,
                gid,
                nlink: 2,
                size: 0,
                atime: t,
                mtime: t,
                ctime: t,
                btime: t,
                rdev: 0,
                xattrs: Default::default(),
                body: Body::Dir(Dir::new(ROOT)),
            },
        );
        let pool_id = pool::new_pool_id();
        let sb = Superblock {
            version: FORMAT_VERSION,
            pool_id,
            dev_index: 0,
            dev_count: n,
            block_size: BLOCK_SIZE as u32,
            dev_blocks: 0,
            generation: 0,
            journal,
            cursor: Cursor { tail: 0, head: 0, seq: 1 },
            meta_layout: Vec::new(),
            meta_len: 0,
            meta_crc: 0,
            clean: true,
            default_layout,
            journal_mirror,
            checksum: opts.checksum,
            dev_states: Vec::new(),
        };
        let mut e = Encoder::new();
        state.encode(&mut e);
        let mut ms =
            MetaState { sb, cursor: Cursor { tail: 0, head: 0, seq: 1 }, meta, unwritten: Vec::new(), relayout: None };
        write_checkpoint(&storage, &mut ms, &e.buf, true)?;
        Ok(())
    }

    /// Opens a pool from its devices (in any order): checks their identity,
    /// loads the last checkpoint and replays the journal after it.
    pub fn open(devs: Vec<Arc<dyn Device>>, opts: Options) -> Result<Fs> {
        let (sb, handles) = pool::identify(devs)?;
        // Superblock::decode refused formats older than version 2 (which
        // framed layout state differently, docs/FORMAT.md); a version-2
        // superblock is rewritten as version 3 by the next superblock write.
        let mut sb = sb;
        sb.version = FORMAT_VERSION;
        let allocs: Vec<Allocator> = handles.iter().map(|h| Allocator::new(RESERVED_BLOCKS, h.blocks())).collect();
        let storage = Storage { devs: handles.into(), allocs: allocs.into() };
        let mut report = OpenReport { was_clean: sb.clean, ..Default::default() };
        for d in &storage.devs {
            if d.state() == crate::device::DeviceState::Missing {
                report.missing_devices.push((d.index, d.name()));
            }
        }
        let j = sb.journal;
        let mirror = sb.journal_mirror;
        for r in std::iter::once(&j).chain(mirror.as_ref()) {
            // pool::identify checked the regions against the devices there;
            // checked again here because the allocator below trusts them.
            let jdev = storage.devs.get(r.dev as usize);
            if jdev.is_none_or(|d| {
                d.state().readable() && r.start.checked_add(r.blocks).is_none_or(|end| end > d.blocks())
            }) {
                return Err(Error::corrupt("superblock", "journal region outside its device"));
            }
            storage.allocs[r.dev as usize].mark_used(r.start, r.blocks);
        }
        let meta = Layout::decode(&mut Decoder::new(&sb.meta_layout, "meta-file layout"))?;
        let claim = |d: u32, s: u64, l: u64, what: &str, report: &mut OpenReport| {
            let end = s.checked_add(l);
            // The size of a device that is not there is a guess: what lies
            // past it is not a claim on another owner's blocks.
            let guessed = storage.devs.get(d as usize).is_some_and(|h| !h.state().readable());
            let ok = storage.allocs.get(d as usize).is_some_and(|a| {
                end.is_some_and(|e| e <= a.total_blocks()) && a.mark_used(s, l) || guessed && end.is_some()
            });
            if !ok {
                report.double_claims.push(format!("{what}: device {d} blocks {s}+{l}"));
            }
        };
        meta.extents(&mut |d, s, l| claim(d, s, l, "meta-file", &mut report));
        set_meta_reserve(&storage, &meta, &j);

        // The checkpoint, read through the meta-file's own building blocks.
        // Its length is held to what the meta-file's extents on the real
        // devices can hold before a buffer is sized by it.
        let mut room = 0u64;
        meta.extents(&mut |d, s, l| {
            if storage.devs.get(d as usize).is_some_and(|dev| s.checked_add(l).is_some_and(|e| e <= dev.blocks())) {
                room = room.saturating_add(l.saturating_mul(BLOCK_SIZE as u64));
            }
        });
        if sb.meta_len > room {
            return Err(Error::corrupt(
                "superblock",
                format!("meta-file length {} bytes is more than its extents hold ({room} bytes)", sb.meta_len),
            ));
        }
        let nblk = (sb.meta_len as usize).div_ceil(BLOCK_SIZE);
        let io = IoCtx { storage: &storage, epoch: 0, sink: &ignore, repair: false };
        let read_copy = |b: &Arc<dyn crate::blocks::Block>| -> Result<Vec<u8>> {
            let mut buf = vec![0u8; nblk * BLOCK_SIZE];
            b.read(&io, 0, &mut buf)?;
            buf.truncate(sb.meta_len as usize);
            if crc(&buf) != sb.meta_crc {
                return Err(Error::corrupt("meta-file checkpoint", "checksum mismatch"));
            }
            Ok(buf)
        };
        // A damaged copy of a replicated meta-file: each child of a
        // replicate root holds a whole copy, and any intact one will do.
        let buf = match read_copy(meta.root()) {
            Ok(b) => b,
            Err(e) => meta.root().children().iter().find_map(|c| read_copy(c).ok()).ok_or(e)?,
        };
        let state = State::new(shards());
        state.decode(&buf)?;
        drop(buf);

        let salt = salt_of(&sb.pool_id);
        let t0 = Instant::now();
        let (records, cursor, copy) = journal::replay_mirrored(&storage, &j, mirror.as_ref(), salt, sb.cursor)?;
        report.journal_copy = copy;
        // The copy that fell behind (or lay on a device that was away) gets
        // the records replay took from the other, so the two agree again.
        if let (false, Some(m)) = (opts.read_only, mirror) {
            let (from, to) = match copy {
                journal::JournalCopy::Primary => (j, m),
                journal::JournalCopy::Mirror => (m, j),
            };
            let live = Cursor { tail: sb.cursor.tail, head: cursor.head, seq: cursor.seq };
            if storage.devs.get(to.dev as usize).is_some_and(|d| d.state().writable()) {
                if let Err(e) = journal::resync(&storage, &from, &to, &live) {
                    tracing::warn!("journal copy on device {} not brought up to date: {e}", to.dev);
                }
            }
        }
        for rec in &records {
            for group in journal::decode_payload(rec)? {
                for op in &group {
                    state.replay(op)?;
                    report.replayed_ops += 1;
                }
            }
        }
        report.replayed_records = records.len();
        report.replay_time = t0.elapsed();
        // A replacement being resilvered stays so until its resilver ends
        // (set after replay: the journal may be on it).
        scrub::apply_resilvering(&storage, &sb);

        // Allocation state is rebuilt from the tree.
        for n in state.all() {
            if let Some(l) = n.data.read().layout() {
                let ino = n.ino;
                l.extents(&mut |d, s, len| claim(d, s, len, &format!("inode {ino}"), &mut report));
            }
        }
        if state.get(ROOT).is_none_or(|r| !r.data.read().is_dir()) {
            return Err(Error::corrupt("meta-data", "root directory missing"));
        }
        let default_layout = sb.default_layout.clone();
        let checksum = sb.checksum;
        let storage_devices = storage.devs.len();
        let ms = MetaState {
            cursor: Cursor { tail: sb.cursor.tail, head: cursor.head, seq: cursor.seq },
            sb,
            meta,
            unwritten: Vec::new(),
            relayout: None,
        };
        let inner = Arc::new(Inner {
            storage,
            state,
            gate: Gate::new(shards()),
            meta: Mutex::new(ms),
            committed: Mutex::new(0),
            committed_cv: Condvar::new(),
            salt,
            read_only: opts.read_only,
            default_layout: parking_lot::RwLock::new(default_layout),
            checksum,
            dirty: (0..shards()).map(|_| CachePadded::new(Mutex::new(Vec::new()))).collect(),
            rename_lock: Mutex::new(()),
            shutdown: Mutex::new(false),
            shutdown_cv: Condvar::new(),
            closed: AtomicBool::new(false),
            committer: Mutex::new(None),
            report: Mutex::new(report),
            commits: AtomicU64::new(0),
            checkpoints: AtomicU64::new(0),
            cache: crate::cache::BlockCache::new(opts.cache_bytes),
            io_pool: crate::cache::IoPool::new(match opts.io_threads {
                0 => (4 * storage_devices).clamp(4, 64),
                n => n,
            }),
        });
        let fs = Fs { inner };
        if !opts.read_only {
            // Inodes with no links are orphans of open-then-unlinked files.
            let all = fs.inner.state.all();
            let mut orphans: Vec<Ino> =
                all.iter().filter(|n| n.ino != ROOT && n.data.read().nlink == 0).map(|n| n.ino).collect();
            if !orphans.is_empty() {
                // A link count of 0 on an inode some entry still names is
                // damage for fsck to fix, not a file to free.
                let named: std::collections::HashSet<Ino> = all
                    .iter()
                    .filter_map(|n| n.data.read().dir().map(|d| d.entries.values().map(|e| e.ino).collect::<Vec<_>>()))
                    .flatten()
                    .collect();
                orphans.retain(|i| !named.contains(i));
            }
            drop(all);
            for ino in &orphans {
                fs.free_inode(*ino)?;
            }
            if !orphans.is_empty() {
                tracing::info!("freed {} orphaned inodes", orphans.len());
            }
            let mut m = fs.inner.meta.lock();
            m.sb.clean = false;
            m.sb.generation += 1;
            let sb = m.sb.clone();
            fs.inner.storage.write_superblocks(&sb)?;
            drop(m);
            if opts.background_commit {
                fs.start_committer(opts.commit_interval);
            }
            fs.set_orphans_freed(orphans.len());
        }
        Ok(fs)
    }

    fn set_orphans_freed(&self, n: usize) {
        self.inner.report.lock().orphans_freed = n;
    }

    /// Makes a pool of `n` image files of `size` bytes in `dir`.
    pub fn mkfs_dir(dir: &Path, n: u32, size: u64, opts: &FormatOptions) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir.display().to_string(), e))?;
        let paths: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("dev{i}.img"))).collect();
        let mut devs: Vec<Arc<dyn Device>> = Vec::new();
        for p in &paths {
            devs.push(Arc::new(crate::device::FileDevice::create(p, size)?));
        }
        Fs::format(devs, opts)?;
        pool::write_pool_file(dir, &paths)?;
        Ok(paths)
    }

    /// Makes a pool on the given files or block devices; records them in `dir`.
    pub fn mkfs_devices(dir: &Path, paths: &[PathBuf], size: Option<u64>, opts: &FormatOptions) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir.display().to_string(), e))?;
        let mut devs: Vec<Arc<dyn Device>> = Vec::new();
        let mut abs = Vec::new();
        for p in paths {
            let dev = match size {
                Some(s) if !p.exists() || std::fs::metadata(p).map(|m| m.is_file()).unwrap_or(false) => {
                    crate::device::FileDevice::create(p, s)?
                }
                _ => crate::device::FileDevice::open(p, true)?,
            };
            devs.push(Arc::new(dev));
            abs.push(std::fs::canonicalize(p).map_err(|e| Error::io(p.display().to_string(), e))?);
        }
        Fs::format(devs, opts)?;
        pool::write_pool_file(dir, &abs)
    }

    /// Opens the pool described by a pool directory.
    pub fn open_dir(dir: &Path, opts: Options) -> Result<Fs> {
        let paths = pool::device_paths(dir)?;
        let devs = pool::open_paths(&paths, !opts.read_only)?;
        // A pool made with `--sim` keeps its disk model in pool.conf.
        let mut devs = match pool::sim_params(dir)? {
            Some(p) => crate::device::SimDevice::wrap_all(devs, &p),
            None => devs,
        };
        // Faults to inject (tests): `fault = DEV SPEC` lines.
        for (i, spec) in pool::fault_specs(dir)? {
            let n = devs.len();
            let slot = devs.get_mut(i as usize).ok_or_else(|| {
                Error::Invalid(format!(
                    "{}: fault on device {i}, but the pool lists {n}",
                    dir.join(pool::POOL_FILE).display()
                ))
            })?;
            let plan = Arc::new(crate::device::FaultPlan::new(spec));
            *slot = Arc::new(crate::device::FaultDevice::new(slot.clone(), plan));
        }
        Fs::open(devs, opts)
    }

    pub fn report(&self) -> OpenReport {
        self.inner.report.lock().clone()
    }

    pub fn storage(&self) -> &Storage {
        &self.inner.storage
    }

    pub(crate) fn state(&self) -> &State {
        &self.inner.state
    }

    /// Hit rates and occupancy of the file-data block cache.
    pub fn cache_stats(&self) -> crate::cache::CacheStats {
        self.inner.cache.stats()
    }

    /// Empties the data cache (benchmarks start each run cold).
    pub fn drop_caches(&self) {
        self.inner.cache.clear()
    }

    /// Per-device I/O statistics.
    pub fn device_stats(&self) -> Vec<(String, StatsSnapshot)> {
        self.inner.storage.devs.iter().map(|d| (d.name(), d.stats.snapshot())).collect()
    }

    /// (commits, checkpoints) since open.
    pub fn commit_counts(&self) -> (u64, u64) {
        (self.inner.commits.load(Ordering::Relaxed), self.inner.checkpoints.load(Ordering::Relaxed))
    }

    pub fn default_layout(&self) -> String {
        self.inner.default_layout.read().clone()
    }

    pub(crate) fn check_writable(&self) -> Result<()> {
        if self.inner.read_only || self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::ReadOnly("pool".into()));
        }
        Ok(())
    }

    pub(crate) fn mark_dirty(&self, ino: Ino) {
        if let Some(n) = self.inner.state.get(ino) {
            if !n.dirty_times.swap(true, Ordering::AcqRel) {
                let i = (ino as usize) % self.inner.dirty.len();
                self.inner.dirty[i].lock().push(ino);
            }
        }
    }

    /// Makes everything done so far durable (group commit: concurrent
    /// callers share one journal write).
    pub fn sync(&self) -> Result<()> {
        if self.inner.read_only {
            return Ok(());
        }
        let target = self.inner.gate.current_epoch();
        self.commit(target, false)
    }

    /// Writes a full checkpoint of the meta-data and empties the journal.
    pub fn checkpoint(&self) -> Result<()> {
        self.check_writable()?;
        let target = self.inner.gate.current_epoch();
        self.commit(target, true)
    }

    fn commit(&self, target: u64, checkpoint: bool) -> Result<()> {
        let inner = &*self.inner;
        inner.storage.probe();
        let mut m = inner.meta.lock();
        if !checkpoint && *inner.committed.lock() >= target {
            return Ok(());
        }
        let half = m.sb.journal.blocks / 2;
        let want_ckpt = checkpoint || m.cursor.used(&m.sb.journal) > half;
        let (mut batch, mut snap) = self.capture(want_ckpt);
        if !m.unwritten.is_empty() {
            let mut groups = std::mem::take(&mut m.unwritten);
            groups.append(&mut batch.groups);
            batch.groups = groups;
        }
        if !want_ckpt && !journal::fits(&m.sb.journal, &m.cursor, batch.encode().len()) {
            // Too big for the journal's free space: a checkpoint covers it.
            let (mut b2, s2) = self.capture(true);
            batch.epoch = b2.epoch;
            batch.groups.append(&mut b2.groups);
            snap = s2;
        }
        if let Err(e) = self.write_batch(&mut m, &batch, snap, checkpoint) {
            // Nothing of this batch may be dropped: later records would then
            // depend on ops that never reach the disk.
            m.unwritten = std::mem::take(&mut batch.groups);
            return Err(e);
        }
        inner.commits.fetch_add(1, Ordering::Relaxed);
        for a in &inner.storage.allocs {
            a.release(batch.epoch);
        }
        let mut c = inner.committed.lock();
        *c = (*c).max(batch.epoch);
        inner.committed_cv.notify_all();
        Ok(())
    }

    /// Writes a captured batch: as a checkpoint when `snap` is given (or, if
    /// the meta devices have no room for a new meta-file and the checkpoint
    /// was not `required`, as a journal record when it fits), else as a
    /// journal record.
    fn write_batch(&self, m: &mut MetaState, batch: &Batch, snap: Option<Vec<u8>>, required: bool) -> Result<()> {
        let inner = &*self.inner;
        // Ordered mode: data first, then the meta-data that points at it.
        inner.storage.flush_all()?;
        if let Some(bytes) = snap {
            match write_checkpoint_staged(&inner.storage, m, &bytes, false) {
                Ok(()) => {
                    inner.checkpoints.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                // No room for a new meta-file, or a device it needs is down
                // (degraded pool): the batch goes to the journal while it
                // fits, and a later checkpoint tries again.
                // Only when it failed before its superblock write: after
                // it, the checkpoint may be in force, and the batch in it.
                Err((e, true)) if !required && journal::fits(&m.sb.journal, &m.cursor, batch.encode().len()) => {
                    if !matches!(e, Error::NoSpace(_)) {
                        tracing::warn!("checkpoint failed, committing to the journal instead: {e}");
                    }
                }
                Err((e, _)) => return Err(e),
            }
        }
        if !batch.is_empty() {
            let payload = batch.encode();
            let mut c = m.cursor;
            let (j, mirror) = (m.sb.journal, m.sb.journal_mirror);
            journal::append_mirrored(&inner.storage, &j, mirror.as_ref(), inner.salt, &mut c, &payload)?;
            m.cursor = c;
        }
        Ok(())
    }

    /// Takes the pending ops (and lazy time updates) out of the gate, with a
    /// snapshot of the whole state when asked.
    fn capture(&self, snapshot: bool) -> (Batch, Option<Vec<u8>>) {
        let inner = &*self.inner;
        inner.gate.capture(|batch| {
            let mut times = Vec::new();
            for d in inner.dirty.iter() {
                for ino in std::mem::take(&mut *d.lock()) {
                    if let Some(n) = inner.state.get(ino) {
                        if n.dirty_times.swap(false, Ordering::AcqRel) {
                            let g = n.data.read();
                            times.push(Op::Times { ino, atime: g.atime, mtime: g.mtime, ctime: g.ctime });
                        }
                    }
                }
            }
            if !times.is_empty() {
                batch.push(&times);
            }
            snapshot.then(|| {
                let mut e = Encoder::with_capacity(1 << 16);
                inner.state.encode(&mut e);
                e.into_inner()
            })
        })
    }

    fn start_committer(&self, every: Duration) {
        let weak = Arc::downgrade(&self.inner);
        let h = std::thread::Builder::new().name("hurricane-commit".into()).spawn(move || loop {
            let Some(inner) = weak.upgrade() else { return };
            {
                let mut stop = inner.shutdown.lock();
                if *stop {
                    return;
                }
                inner.shutdown_cv.wait_for(&mut stop, every);
                if *stop {
                    return;
                }
            }
            let fs = Fs { inner };
            let target = fs.inner.gate.current_epoch();
            if let Err(e) = fs.commit(target, false) {
                tracing::error!("background commit failed: {e}");
            }
        });
        match h {
            Ok(h) => *self.inner.committer.lock() = Some(h),
            Err(e) => tracing::error!("cannot start the committer thread: {e}; commits happen on sync only"),
        }
    }

    /// Checkpoints, marks the pool clean and stops the committer. Further
    /// changes are refused.
    pub fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        *self.inner.shutdown.lock() = true;
        self.inner.shutdown_cv.notify_all();
        if let Some(h) = self.inner.committer.lock().take() {
            let _ = h.join();
        }
        if self.inner.read_only {
            return Ok(());
        }
        let target = self.inner.gate.current_epoch();
        if let Err(e) = self.commit(target, true) {
            // A degraded pool may be unable to write a whole new meta-file:
            // what was done still reaches the journal, and the next open
            // replays it.
            if self.inner.storage.degraded_devices().is_empty() {
                return Err(e);
            }
            tracing::warn!("closing a degraded pool without a checkpoint: {e}");
            self.commit(target, false)?;
        }
        let mut m = self.inner.meta.lock();
        m.sb.clean = true;
        m.sb.generation += 1;
        let sb = m.sb.clone();
        self.inner.storage.write_superblocks(&sb)
    }

    /// Pool geometry for the layout resolver.
    pub fn pool_info(&self) -> PoolInfo {
        pool_info(&self.inner.storage)
    }

    /// Whether new files get checksum blocks (the pool's checksum option).
    pub fn checksum(&self) -> bool {
        self.inner.checksum
    }

    /// The layout a new file's spec text stands for in this pool: resolved
    /// against the pool, with the pool's checksum option applied.
    pub(crate) fn file_spec(&self, text: &str) -> Result<layout::Spec> {
        let spec = layout::resolve(&layout::parse(text)?, &self.pool_info())?;
        Ok(if self.inner.checksum { layout::with_checksums(spec) } else { spec })
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        *self.shutdown.lock() = true;
        self.shutdown_cv.notify_all();
    }
}

fn pool_info(s: &Storage) -> PoolInfo {
    // No space is offered on a device that takes no new data.
    let free = s.allocs.iter().zip(&s.devs).map(|(a, d)| if d.state().placeable() { a.free_blocks() } else { 0 });
    let retired = s
        .devs
        .iter()
        .filter(|d| matches!(d.state(), DeviceState::Removed | DeviceState::Evacuating))
        .map(|d| (d.index, d.state().name()))
        .collect();
    PoolInfo { devices: s.device_count(), free_blocks: free.collect(), retired }
}

fn salt_of(id: &[u8; 16]) -> u64 {
    u64::from_le_bytes(id[..8].try_into().unwrap_or_default())
        ^ u64::from_le_bytes(id[8..].try_into().unwrap_or_default())
}

/// The default layout of a new pool: one extent, or a stripe over every
/// device that takes new data when a file is made (no width: a device added
/// later is used at once, one removed is left out).
pub fn default_pool_layout(devices: u32) -> String {
    if devices <= 1 {
        "extent".into()
    } else {
        "stripe(unit=1M)".into()
    }
}

/// Keeps room on the meta-file's devices for the next checkpoint's new copy
/// (its size now, twice over, plus what half a journal of changes may add):
/// data allocations leave it free, so a pool full of data still commits.
fn set_meta_reserve(storage: &Storage, meta: &Layout, journal: &Region) {
    let mut per_dev = vec![0u64; storage.allocs.len()];
    meta.extents(&mut |d, _, l| {
        if let Some(x) = per_dev.get_mut(d as usize) {
            *x = x.saturating_add(l);
        }
    });
    for (a, used) in storage.allocs.iter().zip(per_dev) {
        a.set_reserve(if used == 0 { 0 } else { used.saturating_mul(2).saturating_add(journal.blocks / 2 + 16) });
    }
}

/// Writes a new meta-file's contents. Each child of a `replicate` root holds
/// a whole copy and is written on its own: a copy whose devices take no
/// writes (a degraded pool) is left empty, and the checkpoint stands on the
/// others (open reads any copy whose checksum holds; the next checkpoint
/// writes every copy again). Any other failure fails the checkpoint.
fn write_meta(storage: &Storage, io: &IoCtx, fresh: &Layout, bytes: &[u8]) -> Result<()> {
    let root = fresh.root();
    if root.kind().name != "replicate" || root.children().len() < 2 {
        return root.write(io, 0, bytes);
    }
    let down = |d: u32| storage.devs.get(d as usize).is_none_or(|h| !h.state().writable());
    let mut written = 0;
    let mut first_err = None;
    for c in root.children() {
        match c.write(io, 0, bytes) {
            Ok(()) => written += 1,
            Err(e) if c.health(&down) == crate::blocks::Health::Lost => {
                tracing::warn!("meta-file copy left out, its device is down: {e}");
                first_err.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    match first_err {
        Some(e) if written == 0 => Err(e),
        _ => Ok(()),
    }
}

/// Writes a checkpoint into a freshly allocated meta-file (same layout as the
/// current one), then switches the superblocks to it and frees the old one.
/// The superblock write is the commit point: a crash before it leaves the
/// old checkpoint and journal in force.
fn write_checkpoint(storage: &Storage, m: &mut MetaState, bytes: &[u8], format: bool) -> Result<()> {
    write_checkpoint_staged(storage, m, bytes, format).map_err(|(e, _)| e)
}

/// [`write_checkpoint`], telling on failure whether it failed before the
/// superblock write (true: nothing of it can be in force after a crash, so
/// the batch may go to the journal instead).
fn write_checkpoint_staged(
    storage: &Storage,
    m: &mut MetaState,
    bytes: &[u8],
    format: bool,
) -> std::result::Result<(), (Error, bool)> {
    let spec = m.relayout.clone().unwrap_or_else(|| m.meta.spec());
    let fresh = Layout::build(&spec).map_err(|e| (e, true))?;
    let mut padded = bytes.to_vec();
    padded.resize(bytes.len().div_ceil(BLOCK_SIZE).max(1) * BLOCK_SIZE, 0);
    let io = IoCtx { storage, epoch: 0, sink: &ignore, repair: false };
    if let Err(e) = write_meta(storage, &io, &fresh, &padded) {
        fresh.extents(&mut |d, s, l| storage.allocs[d as usize].free_now(s, l));
        return Err((e, true));
    }
    storage.flush_all().map_err(|e| (e, true))?;
    let mut e = Encoder::new();
    fresh.encode(&mut e);
    let mut sb = m.sb.clone();
    sb.generation += 1;
    sb.meta_layout = e.into_inner();
    sb.meta_len = bytes.len() as u64;
    sb.meta_crc = crc(bytes);
    sb.cursor = Cursor { tail: m.cursor.head, head: m.cursor.head, seq: m.cursor.seq };
    storage.write_superblocks(&sb).map_err(|e| (e, false))?;
    if !format {
        m.meta.extents(&mut |d, s, l| storage.allocs[d as usize].free_now(s, l));
    }
    m.sb = sb;
    set_meta_reserve(storage, &fresh, &m.sb.journal);
    m.meta = fresh;
    m.relayout = None;
    m.cursor.tail = m.cursor.head;
    Ok(())
}
