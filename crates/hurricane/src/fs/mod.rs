//! The engine: an open pool with its namespace, journal and committer.
//!
//! [`Fs`] is cheap to clone and safe to share between threads. Its inode-level
//! methods (in `ops.rs` and `io.rs`) are what the FUSE front end calls; the
//! path-level API with [`File`] handles (in `path.rs`) is for programs that
//! link the engine in-process.

mod add;
mod atime;
mod clean;
mod errors;
mod evacuate;
mod health;
mod io;
mod meta_copies;
mod migrate;
mod ops;
mod path;
mod recover;
mod regroup;
mod replace;
mod rollforward;
mod scrub;
#[cfg(test)]
mod tests;
mod txn;
mod write_errors;

pub use add::{add_device_path, AddOptions, MIN_DEVICE_BLOCKS};
pub use clean::{CleanOptions, CleanPolicy, CleanProgress, CleanReport, LogStatsSnapshot};
pub use errors::{DataError, ErrorSource};
pub use evacuate::{RemoveOptions, RemoveProgress, RemoveReport};
pub use health::PoolHealth;
pub use meta_copies::MetaRedundancy;
pub use migrate::{MigrateOptions, MigrateProgress, MigrateReport, MigrationStatus, TreeProgress, TreeReport};
pub use ops::{open_mask, Attr, DirItem, RenameFlags, SetAttr, StatFs, O_EXEC_OPEN};
pub use path::{File, OpenOptions};
pub use regroup::{RegroupProgress, RegroupReport};
pub use replace::{
    prepare_offline_replacement, prepare_replacement, set_device_path, ReplaceOptions, ReplaceProgress, ReplaceReport,
};
pub use rollforward::RolledForward;
pub use scrub::{
    load_position, save_position, LostFile, PositionRecord, ScrubOptions, ScrubPos, ScrubProgress, ScrubReport,
};
pub use txn::{may_wait, waiting_at_most, Transaction, TxnLimits, TxnUsage, DEFAULT_LOCK_WAIT, MAX_TXN_BYTES};

use crate::blocks::Layout;
use crate::codec::{Decoder, Encoder};
use crate::device::{Device, DeviceState, StatsSnapshot, BLOCK_SIZE};
use crate::error::{Error, Result};
use crate::journal::{self, Batch, Cursor, Gate, Ino, Op, Region};
use crate::layout::{self, PoolInfo};
use crate::namespace::store::{Delta, MetaFile, MetaStore, Sys};
use crate::namespace::{inode::S_IFDIR, Body, Dir, InodeData, State, Taken, ROOT};
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
    /// Layout of the meta-file, kept as given (default: a copy on each of
    /// the first three devices, more where the default layout survives
    /// more failures, placed anew when a device fails).
    pub meta_layout: Option<String>,
    /// New files get a `checksum` block above every per-device leaf of
    /// their layout (default: on).
    pub checksum: bool,
    /// The pool's name in its Ceph cluster, for a pool with rados devices
    /// (`pool::published`): other hosts find it as
    /// `rados:CEPHPOOL/NAME?conf=PATH`. Default: the pool directory's name.
    pub name: Option<String>,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions { journal_size: None, default_layout: None, meta_layout: None, checksum: true, name: None }
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
    /// Inodes the meta-data cache holds (changed ones stay until the next
    /// checkpoint, which comes when half the cache is changed, or sooner
    /// when the changes would outgrow a tenth of the store's pages).
    pub inode_cache: usize,
    /// Memory for the meta-data store's page cache (directory and inode
    /// table blocks), counted as the pages occupy it in the allocator.
    pub meta_cache_bytes: usize,
    /// Directory entries read from the store that are kept for the next
    /// lookup of the same name (0: none).
    pub entry_cache: usize,
    /// Threads that run prefetch requests (0: four per device, 4 to 64).
    pub io_threads: usize,
    /// How long the writer's lease of a pool with devices in a Ceph
    /// cluster lasts without renewal (docs/FORMAT.md, "Devices in RADOS"):
    /// how soon another host may take over once this one dies. Renewed
    /// every third of it.
    pub lease_duration: Duration,
    /// Bounds on transactions: bytes buffered and transactions open, per
    /// user and for the pool, and how long a lock is waited for.
    pub txn_limits: txn::TxnLimits,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            commit_interval: Duration::from_secs(1),
            read_only: false,
            background_commit: true,
            cache_bytes: crate::cache::DEFAULT_CACHE_BYTES,
            inode_cache: DEFAULT_INODE_CACHE,
            meta_cache_bytes: DEFAULT_META_CACHE_BYTES,
            entry_cache: DEFAULT_ENTRY_CACHE,
            io_threads: 0,
            lease_duration: crate::device::DEFAULT_LEASE_DURATION,
            txn_limits: txn::TxnLimits::default(),
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
    /// Devices of the journal copies that lacked records replay read from
    /// another copy (torn, damaged, or away when they were written), and
    /// were rewritten from it.
    pub journal_repaired: Vec<u32>,
    /// Devices of the journal copies replay could not read.
    pub journal_unreadable: Vec<u32>,
    /// Journal records recovery dropped (0 or 1): the last, written in
    /// verified mode, whose data a crash kept from the disk.
    pub dropped_records: usize,
    /// Plain writes to `log` files found after the journal's last record
    /// and written again.
    pub rolled_forward: rollforward::RolledForward,
}

struct MetaState {
    sb: Superblock,
    cursor: Cursor,
    /// The epoch of this open's journal records ([`journal::Copies`]).
    epoch: u64,
    /// Groups a failed commit took out of the gate: the next commit writes
    /// them first, so what is durable is always a prefix of what was done.
    unwritten: Vec<Vec<u8>>,
    /// A new layout for the meta-file (its copies moved off a device being
    /// removed): the next checkpoint writes it there.
    relayout: Option<crate::blocks::Spec>,
    /// The last checkpoint's [`Delta`], emptied, for the next to fill
    /// with its memory (store.rs: why).
    spare: Delta,
    /// The op groups of checkpoints written since the last durable commit
    /// and not durable themselves (`commit_as`), in order: a journal
    /// record written before the next durable checkpoint carries them
    /// first, so that what the journal holds still follows the last
    /// durable state with nothing missing.
    unsynced: Vec<Vec<u8>>,
    /// Their bytes.
    unsynced_bytes: usize,
    /// A checkpoint since the last durable commit is not durable.
    unsynced_state: bool,
    /// When the last durable commit ended.
    synced_at: Instant,
}

impl MetaState {
    /// The checkpoints left unsynced are covered (by a durable commit, or
    /// by a journal record that carries their ops).
    fn covered(&mut self) {
        self.unsynced.clear();
        self.unsynced_bytes = 0;
        self.unsynced_state = false;
    }
}

/// The most op bytes checkpoints left unsynced may hold in memory before
/// one is made durable (a journal record may have to carry them).
const UNSYNCED_MAX_BYTES: usize = 16 << 20;

pub(crate) struct Inner {
    pub(crate) storage: Arc<Storage>,
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
    /// The committer was woken early: enough inodes changed for a checkpoint.
    kicked: AtomicBool,
    closed: AtomicBool,
    /// Writing is stopped for now (`set_writable(false)`: the mount was
    /// remounted read-only); every change is refused until it resumes.
    held: AtomicBool,
    /// Set once the checkpoint that stopping writes is written (cleared on
    /// resuming); `set_writable` calls take turns.
    stopped: AtomicBool,
    holding: Mutex<()>,
    /// The lease of a pool with devices in a Ceph cluster (taken by
    /// `open_dir`, released by `close`), and the flag set if it is lost.
    lease: Mutex<Option<crate::device::PoolLease>>,
    lease_lost: std::sync::OnceLock<Arc<AtomicBool>>,
    /// The connections to Ceph clusters the lease and the rados devices
    /// share (`open_dir`): a device added later opens on them too, so the
    /// next writer's fencing covers it.
    rados: Mutex<crate::device::RadosConnections>,
    committer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The background cleaner of `log` blocks (`clean.rs`).
    cleaner: Mutex<Option<std::thread::JoinHandle<()>>>,
    report: Mutex<OpenReport>,
    commits: AtomicU64,
    checkpoints: AtomicU64,
    /// Checkpoints written without a sync of their own (`commit_as`).
    unsynced_checkpoints: AtomicU64,
    /// How long a change may wait to become durable with no sync asked for.
    commit_interval: Duration,
    /// Changed inodes that call for a checkpoint.
    dirty_limit: usize,
    /// File-data blocks (see `cache`).
    pub(crate) cache: crate::cache::BlockCache,
    /// Threads running prefetch requests into `cache`.
    pub(crate) io_pool: crate::cache::IoPool,
    /// Files being re-laid out online (`migrate`), by inode.
    pub(crate) migrations: parking_lot::RwLock<std::collections::HashMap<Ino, Arc<migrate::Migration>>>,
    /// Held by the log cleaner's pass (one at a time).
    pub(crate) cleaning: Mutex<()>,
    /// The log's owner index holds every log block (the walk of the files
    /// after open is done; blocks written since are in it as they go).
    pub(crate) logs_indexed: AtomicBool,
    /// Range locks of transactions and of writes to protected files (`txn`).
    pub(crate) txn_locks: txn::LockTable,
    /// What open transactions hold, against their bounds (`txn`).
    pub(crate) txn_budget: txn::TxnBudget,
    /// Held writes lost with their device, until fsync and sync report them.
    write_errors: write_errors::WriteErrors,
    /// The most device failures a file layout in use survives
    /// (`meta_copies::UNMANAGED`: the meta-file layout is kept as made).
    meta_survives: std::sync::atomic::AtomicU32,
    /// Copies the last journal record reached (high half) of those it was
    /// written to (low half).
    last_record_copies: AtomicU64,
    /// Files with data no copy could supply (`errors.rs`).
    pub(crate) errors: errors::ErrorList,
}

/// An open pool. Clones share it.
#[derive(Clone)]
pub struct Fs {
    pub(crate) inner: Arc<Inner>,
}

/// The meta-data caches' counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetaCacheStats {
    pub inodes: crate::namespace::CacheCounters,
    pub store: crate::namespace::store::StoreStats,
}

/// Inodes the meta-data cache holds by default. A clean inode in the cache
/// costs about 400 bytes (a 100,000-file run through the mount peaked 13
/// MiB higher keeping 35,000 more), so this is about 100 MiB; changed
/// inodes cost more (about 2.5 KiB with their directory's change and the
/// store's transaction) and are bounded apart, by the checkpoint they
/// bring on (`dirty_limit`: half the cache, or fewer when what they would
/// write outgrows a tenth of the pages `meta_cache_bytes` holds: 10,485 by
/// default). A quarter million is a directory tree that an `rm -r`, a
/// `find` or a build walks again after making it without reading inodes
/// back (BENCHMARKS.md, "Meta-data at scale").
pub const DEFAULT_INODE_CACHE: usize = 262_144;
/// Directory entries cached by default (about 100 bytes each: 25 MiB),
/// the names of as many files as the inode cache holds.
pub const DEFAULT_ENTRY_CACHE: usize = 262_144;
/// Bytes of the meta-data store's page cache by default.
pub const DEFAULT_META_CACHE_BYTES: usize = 128 << 20;
/// Store pages a changed inode dirties in a checkpoint, on average, for
/// creates (its record, its name and its readdir entry, with the tree's
/// share of splits and branch pages).
const DIRTY_BYTES_PER_INODE: usize = 1024;

pub(crate) fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

fn shards() -> usize {
    crate::affinity::cpus().clamp(4, 64) * 4
}

/// A sink for requests that record nothing (reads, meta-file writes).
pub(crate) use crate::blocks::ignore_records as ignore;

impl Fs {
    /// Makes a new pool on `devs` (erasing what they held).
    pub fn format(devs: Vec<Arc<dyn Device>>, opts: &FormatOptions) -> Result<()> {
        Self::format_as(devs, opts, pool::new_pool_id())
    }

    /// `format` with the pool id chosen by the caller (mkfs names rados
    /// devices' objects after it before formatting).
    fn format_as(devs: Vec<Arc<dyn Device>>, opts: &FormatOptions, pool_id: [u8; 16]) -> Result<()> {
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
        let default_layout = match &opts.default_layout {
            Some(s) => s.clone(),
            None => default_pool_layout(n),
        };
        // The meta-data's copies: on the first devices, as many as the
        // default layout asks for (`meta_copies_wanted`), or as the meta
        // layout given has (the journal keeps two where it can).
        let info = PoolInfo {
            devices: n,
            free_blocks: handles.iter().map(|h| h.blocks().saturating_sub(RESERVED_BLOCKS)).collect(),
            retired: Vec::new(),
            prefer: None,
        };
        let survived = |text: &str| -> Result<u32> {
            Ok(Layout::build(&layout::resolve(&layout::parse(text)?, &info)?)?.failures_survived(MAX_META_COPIES))
        };
        let data_survives = survived(&default_layout)?;
        let copies = match &opts.meta_layout {
            Some(m) => (survived(m)? + 1).max(n.min(2)),
            None => meta_copies_wanted(n, data_survives),
        };
        let meta_survives = opts.meta_layout.is_none().then_some(data_survives as u8);
        for h in &handles {
            let need = if h.index < copies { min_blocks + jblocks } else { min_blocks };
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
        let journal_copies: Vec<Region> = (1..copies).map(|d| Region { dev: d, ..journal }).collect();
        let allocs = handles.iter().map(|h| Allocator::new(RESERVED_BLOCKS, h.blocks())).collect();
        let storage = Arc::new(Storage { devs: handles.into(), allocs });
        for j in std::iter::once(&journal).chain(&journal_copies) {
            storage.allocs[j.dev as usize].mark_used(j.start, j.blocks);
        }
        // Wipe both superblock slots and the journal head of a reused device.
        let zero = vec![0u8; BLOCK_SIZE * RESERVED_BLOCKS as usize];
        for d in &storage.devs {
            d.write_blocks(0, &zero)?;
        }
        for j in std::iter::once(&journal).chain(&journal_copies) {
            storage.devs[j.dev as usize].write_blocks(j.start, &vec![0u8; BLOCK_SIZE * 4])?;
        }

        let info = pool_info(&storage);
        // The meta-file's extents may be as long as extents go: its tree is
        // kept in the superblock, and with 128 MiB runs (the extent default)
        // a meta-file of about 7 GB (7 million files) no longer fits there.
        let meta_spec = match &opts.meta_layout {
            Some(s) => s.clone(),
            None => meta_layout_on(&(0..copies).collect::<Vec<_>>()),
        };
        let meta = Layout::build(&layout::resolve(&layout::parse(&meta_spec)?, &info)?)?;

        let t = now();
        let (uid, gid) = (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw());
        let root = InodeData {
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
            body: Body::Dir(Box::new(Dir::new(ROOT))),
        };
        let mut rec = Encoder::new();
        root.encode(&mut rec);
        let cursor = Cursor { tail: 0, head: 0, seq: 1 };
        let sb = Superblock {
            version: FORMAT_VERSION,
            pool_id,
            dev_index: 0,
            dev_count: n,
            block_size: BLOCK_SIZE as u32,
            dev_blocks: 0,
            generation: 0,
            journal,
            cursor,
            meta_layout: Vec::new(),
            meta_len: 0,
            meta_crc: 0,
            clean: true,
            default_layout,
            journal_copies,
            checksum: opts.checksum,
            dev_states: Vec::new(),
            meta_survives,
        };
        // The free map before the meta-file takes its space: an open claims
        // the meta-file's extents from the superblock.
        let mut free = Vec::new();
        for (d, a) in storage.allocs.iter().enumerate() {
            free.extend(free_entries(d as u32, a.free_extents()));
        }
        let file = MetaFile::new(storage.clone(), meta, 0, false);
        file.arm(sb);
        let sys = Sys { cursor, next_ino: ROOT + 1, inodes: 1, epoch: 0 };
        let store = MetaStore::create(file, 1 << 20, 0, sys, (ROOT, rec.into_inner()), free)?;
        let mut sb = store.file().disarm().ok_or_else(|| Error::Device("meta-file superblock lost".into()))?;
        let (layout, len) = store.file().describe();
        drop(store);
        sb.meta_layout = layout;
        sb.meta_len = len;
        sb.generation += 1;
        storage.flush_all()?;
        storage.write_superblocks(&sb)?;
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
        let upgrading = sb.version < FORMAT_VERSION;
        sb.version = FORMAT_VERSION;
        let allocs: Vec<Allocator> = handles.iter().map(|h| Allocator::new(RESERVED_BLOCKS, h.blocks())).collect();
        let storage = Arc::new(Storage { devs: handles.into(), allocs: allocs.into() });
        let mut report = OpenReport { was_clean: sb.clean, ..Default::default() };
        for d in &storage.devs {
            if d.state() == crate::device::DeviceState::Missing {
                report.missing_devices.push((d.index, d.name()));
            }
        }
        let j = sb.journal;
        let journals = sb.journals();
        for r in &journals {
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
        // The meta-file's length (its holes read as zeros) is held to what
        // the pool's devices could hold.
        let room: u64 = storage.devs.iter().map(|d| d.blocks().saturating_mul(BLOCK_SIZE as u64)).sum();
        if sb.meta_len > room {
            return Err(Error::corrupt(
                "superblock",
                format!("meta-file length {} bytes is more than the pool holds ({room} bytes)", sb.meta_len),
            ));
        }
        let meta_extents = {
            let mut v = Vec::new();
            meta.extents(&mut |d, s, l| v.push((d, s, l)));
            v
        };

        // A replacement being resilvered stays so until its resilver ends:
        // nothing is read from it (its copies of the meta-file and journal
        // are not whole yet) before then.
        scrub::apply_resilvering(&storage, &sb);
        // The meta-data store, read through the meta-file's own building
        // blocks. Nothing is loaded: inodes and directory entries are read
        // when asked for.
        let file = MetaFile::new(storage.clone(), meta, sb.meta_len, opts.read_only);
        file.arm(sb.clone());
        // Until the free map is read no space is handed out: the store's
        // open must not grow the meta-file, and space taken now could be
        // the meta-file's own or a file's (a growth fails loudly instead).
        let unknown: Vec<Vec<(u64, u64)>> = storage.allocs.iter().map(|a| a.free_extents()).collect();
        for a in storage.allocs.iter() {
            a.load_free(&[]).map_err(Error::Device)?;
        }
        let store = Arc::new(MetaStore::open(file, opts.meta_cache_bytes, opts.entry_cache, shards())?);
        if let Some(s2) = store.file().disarm() {
            sb = s2;
        }
        let sys = store.sys()?;
        tracing::debug!("meta-data store open");

        // Free space as of the checkpoint; the journal and the meta-file
        // (which may have grown after the free map was taken) are claimed
        // on top.
        let mut known = vec![false; storage.allocs.len()];
        let mut free: Vec<Vec<(u64, u64)>> = vec![Vec::new(); storage.allocs.len()];
        for (d, s, l) in store.free_map()? {
            let Some(k) = known.get_mut(d as usize) else {
                return Err(Error::corrupt(
                    "meta-data store",
                    format!("free space of device {d}, which the pool has not"),
                ));
            };
            *k = true;
            if s != u64::MAX {
                free[d as usize].push((s, l));
            }
        }
        for (d, a) in storage.allocs.iter().enumerate() {
            // A device the checkpoint did not know is free but for the journal.
            let f = if known[d] { &free[d] } else { &unknown[d] };
            a.load_free(f).map_err(|e| Error::corrupt("meta-data store", format!("device {d}: {e}")))?;
        }
        // The logs' segment usage table as the checkpoint left it (a count
        // is a hint the walk before cleaning takes again: one past its
        // segment's size is taken as full, not as damage).
        for ((d, seg, start), live, mtime) in store.log_usage()? {
            let live = live.min(seg);
            let h = storage.devs.get(d as usize).filter(|_| seg > 0 && start.is_multiple_of(seg));
            let Some(h) = h else {
                return Err(Error::corrupt(
                    "meta-data store",
                    format!("log usage of device {d} segment {start}+{seg}"),
                ));
            };
            crate::blocks::log::LogSpace::of(h).load_usage([(seg, start, crate::blocks::log::SegUse { live, mtime })]);
        }
        set_meta_reserve(&storage, &meta_extents, &j);
        // A pool of an earlier format keeps its meta-data copies from now
        // on as a new one does, if its meta-file is the shape mkfs made.
        if upgrading && sb.meta_survives.is_none() {
            let info = pool_info(&storage);
            if meta_copies::made_by_pool(&store.file().layout(), &info).is_some() {
                let t = meta_copies::layout_survives(&sb.default_layout, &info);
                sb.meta_survives = Some(t.min(u8::MAX as u32 - 1) as u8);
            }
        }
        let meta_survives = sb.meta_survives.map_or(meta_copies::UNMANAGED, u32::from);
        let state = State::new(store.clone(), shards(), opts.inode_cache)?;

        let salt = salt_of(&sb.pool_id);
        let t0 = Instant::now();
        let mut copies = journal::Copies { regions: journals.clone(), salt, epoch: 0 };
        let replayed = journal::replay(&storage, &copies, sys.cursor, sys.epoch)?;
        // This open's records are of an epoch above every one the pool
        // has written (`journal::next_epoch`).
        copies.epoch = journal::next_epoch(sb.generation, replayed.max_epoch);
        report.journal_unreadable = replayed.unreadable.clone();
        // A copy that lacks records another holds (torn, damaged, or away
        // when they were written) gets them, so every copy holds the
        // history replay took before anything is appended to it.
        let lagging = replayed.lagging(&copies);
        if !lagging.is_empty() {
            tracing::warn!("journal copies on devices {lagging:?} lack records the others hold");
            if !opts.read_only {
                match journal::resync(&storage, &copies, &replayed) {
                    Ok(fixed) => {
                        for d in &fixed {
                            if let Some(h) = storage.devs.get(*d as usize) {
                                let _ = h.flush();
                            }
                        }
                        report.journal_repaired = fixed;
                    }
                    Err(e) => tracing::warn!("journal copies not brought up to date: {e}"),
                }
            }
        }
        let (mut records, mut cursor) = (replayed.records, replayed.end);
        // Replay, noting the extents each file replay changes had at the
        // checkpoint: the free map knows those, and is moved on from them
        // to the files' extents after replay; and the log runs among them,
        // for the usage table.
        type Footprint = (Vec<(u32, u64, u64)>, Vec<crate::blocks::log::Run>);
        let footprint_of = |ino: Ino| -> Result<Footprint> {
            let (mut ext, mut log) = (Vec::new(), Vec::new());
            if let Some(n) = state.get(ino) {
                if let Some(l) = n.data.read().layout()? {
                    l.extents(&mut |d, s, len| ext.push((d, s, len)));
                    crate::blocks::log::runs(l, &mut |r| log.push(r));
                }
            }
            Ok((ext, log))
        };
        let mut before: std::collections::BTreeMap<Ino, Footprint> = Default::default();
        let mut touched: std::collections::BTreeSet<Ino> = Default::default();
        // The last place of each log head of plain writes (roll-forward).
        let mut anchors: std::collections::BTreeMap<(u32, u64), crate::blocks::log::Anchor> = Default::default();
        let last = records.len().saturating_sub(1);
        for (k, rec) in records.iter().enumerate() {
            let groups = journal::decode_payload(rec)?;
            if k == last && replayed.verify_last.is_some() && !recover::data_arrived(&state, &storage, &groups)? {
                report.dropped_records = 1;
                break;
            }
            for group in groups {
                for op in &group {
                    if let Some(ino) = op_space_owner(op) {
                        if let std::collections::btree_map::Entry::Vacant(e) = before.entry(ino) {
                            e.insert(footprint_of(ino)?);
                        }
                    }
                    touched.extend(state.involved(op));
                    if let Op::Create(n) = op {
                        touched.insert(n.ino);
                    }
                    if let Op::LogHead { dev, seg, next, end, then_start, then_len, nonce } = *op {
                        let then = (then_len > 0).then_some((then_start, then_len));
                        anchors.insert((dev, seg), crate::blocks::log::Anchor { dev, seg, next, end, then, nonce });
                    }
                    state.replay(op)?;
                    report.replayed_ops += 1;
                }
            }
        }
        if let (1, Some(before)) = (report.dropped_records, replayed.verify_last) {
            // Its data never all arrived, so it was never acknowledged: the
            // journal goes on from before it, and its first block is
            // cleared so no later replay finds it again.
            tracing::info!("the journal's last record was written with data that did not reach the disk: dropped");
            records.pop();
            cursor = before;
            if !opts.read_only {
                for r in &journals {
                    if let Some(d) = storage.devs.get(r.dev as usize).filter(|d| d.state().writable()) {
                        d.write_blocks(r.start + before.head, &[0u8; BLOCK_SIZE])?;
                        d.flush()?;
                    }
                }
            }
        }
        report.replayed_records = records.len();
        report.replay_time = t0.elapsed();
        for (v, _) in before.values() {
            for &(d, s, l) in v {
                if let Some(a) = storage.allocs.get(d as usize) {
                    a.free_now(s, l);
                }
            }
        }
        for (&ino, (_, log_was)) in &before {
            let (extents, log_now) = footprint_of(ino)?;
            crate::blocks::log::replayed(&storage, log_was, &log_now);
            for (d, s, l) in extents {
                let ok = storage
                    .allocs
                    .get(d as usize)
                    .is_some_and(|a| s.checked_add(l).is_some_and(|e| e <= a.total_blocks()) && a.mark_used(s, l));
                let guessed = storage.devs.get(d as usize).is_some_and(|h| !h.state().readable());
                if !ok && !guessed {
                    report.double_claims.push(format!("inode {ino}: device {d} blocks {s}+{l}"));
                }
            }
        }
        // The journal and the meta-file are claimed last: the free map
        // leaves them free (they are where the superblocks say), and a
        // file's space at the checkpoint may have gone to the meta-file
        // since.
        for r in &journals {
            storage.allocs[r.dev as usize].claim(r.start, r.blocks);
        }
        // The tree as it is now (the one the superblocks named, unless the
        // store's open changed it).
        let mut now = meta_extents;
        store.file().layout().extents(&mut |d, s, l| now.push((d, s, l)));
        for &(d, s, l) in &now {
            if let Some(a) = storage.allocs.get(d as usize) {
                a.claim(s, l);
            }
        }
        if state.get(ROOT).is_none_or(|r| !r.data.read().is_dir()) {
            return Err(Error::corrupt("meta-data", "root directory missing"));
        }
        let default_layout = sb.default_layout.clone();
        let checksum = sb.checksum;
        let storage_devices = storage.devs.len();
        // A checkpoint comes when half the inode cache is changed, or
        // sooner: when its pages would no longer fit the store's write
        // buffer (pages pushed out of it mid-checkpoint are written, read
        // and written again; measured: 1.2 KB written per create with
        // checkpoints that fit, 5 KB with checkpoints four times larger).
        let fits = MetaStore::write_buffer_bytes(opts.meta_cache_bytes) / DIRTY_BYTES_PER_INODE;
        let dirty_limit = (opts.inode_cache / 2).min(fits).max(16);
        let ms = MetaState {
            cursor: Cursor { tail: sys.cursor.tail, head: cursor.head, seq: cursor.seq },
            epoch: copies.epoch,
            sb,
            unwritten: Vec::new(),
            relayout: None,
            spare: if opts.read_only { Delta::default() } else { Delta::with_room(dirty_limit) },
            unsynced: Vec::new(),
            unsynced_bytes: 0,
            unsynced_state: false,
            synced_at: Instant::now(),
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
            kicked: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            held: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            holding: Mutex::new(()),
            lease: Mutex::new(None),
            lease_lost: std::sync::OnceLock::new(),
            rados: Mutex::new(crate::device::RadosConnections::default()),
            committer: Mutex::new(None),
            cleaner: Mutex::new(None),
            report: Mutex::new(report),
            commits: AtomicU64::new(0),
            checkpoints: AtomicU64::new(0),
            unsynced_checkpoints: AtomicU64::new(0),
            commit_interval: opts.commit_interval,
            dirty_limit,
            cache: crate::cache::BlockCache::new(opts.cache_bytes),
            io_pool: crate::cache::IoPool::new(match opts.io_threads {
                0 => (4 * storage_devices).clamp(4, 64),
                n => n,
            }),
            migrations: Default::default(),
            cleaning: Mutex::new(()),
            logs_indexed: AtomicBool::new(false),
            txn_locks: txn::LockTable::new(opts.txn_limits.lock_wait),
            txn_budget: txn::TxnBudget::new(opts.txn_limits),
            write_errors: Default::default(),
            meta_survives: std::sync::atomic::AtomicU32::new(meta_survives),
            last_record_copies: AtomicU64::new(0),
            errors: Default::default(),
        });
        let fs = Fs { inner };
        fs.inner.errors.load(fs.inner.state.store().errors()?);
        if !opts.read_only {
            // The superblocks say the pool is in use, with a generation
            // above the last, before this open appends anything to the
            // journal (`journal::next_epoch` relies on it).
            let mut m = fs.inner.meta.lock();
            m.sb.clean = false;
            m.sb.generation += 1;
            let sb = m.sb.clone();
            fs.inner.storage.write_superblocks(&sb)?;
        }
        // Plain log writes that reached the disk after the last record: a
        // writable pool writes them again, a read-only one counts them.
        if !anchors.is_empty() {
            let anchors: Vec<_> = anchors.into_values().collect();
            let r = fs.roll_forward(&anchors)?;
            if r.applied > 0 {
                tracing::info!("rolled forward {} writes ({} blocks) made after the last commit", r.applied, r.blocks);
            }
            fs.inner.report.lock().rolled_forward = r;
        }
        if !opts.read_only {
            // Inodes with no links are orphans of open-then-unlinked files:
            // those the checkpoint recorded, and those replay left so.
            let mut orphans: Vec<Ino> = fs.inner.state.store().orphans()?;
            orphans.extend(touched.iter().copied().filter(|&i| fs.inner.state.was_unlinked(i)));
            orphans.sort_unstable();
            orphans.dedup();
            orphans.retain(|&i| i != ROOT && fs.inner.state.get(i).is_some_and(|n| n.data.read().nlink == 0));
            for ino in &orphans {
                fs.free_inode(*ino)?;
            }
            if !orphans.is_empty() {
                tracing::info!("freed {} orphaned inodes", orphans.len());
            }
            // Permanent errors of files deleted since the checkpoint.
            fs.inner.errors.retain(|i| fs.inner.state.get(i).is_some());
            if opts.background_commit {
                fs.start_committer(opts.commit_interval);
                fs.start_cleaner();
            }
            fs.set_orphans_freed(orphans.len());
        }
        Ok(fs)
    }

    fn set_orphans_freed(&self, n: usize) {
        self.inner.report.lock().orphans_freed = n;
    }

    /// Makes a pool of `n` image files of `size` bytes in `dir`
    /// (`dev0.img`, `dev1.img`, ...), which must all be new: each is made
    /// relative to the directory's descriptor with `O_CREAT | O_EXCL |
    /// O_NOFOLLOW`, so a file or link already at one of those names (a
    /// link the directory's owner planted to a file of the caller's) is an
    /// error naming it, and nothing there is opened or written. On an
    /// error, the images made are removed again.
    pub fn mkfs_dir(dir: &Path, n: u32, size: u64, opts: &FormatOptions) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir.display().to_string(), e))?;
        let d = crate::dirfile::Dir::open(dir)?;
        let names: Vec<String> = (0..n).map(|i| format!("dev{i}.img")).collect();
        let paths: Vec<PathBuf> = names.iter().map(|name| dir.join(name)).collect();
        let mut made = 0;
        let r = (|| {
            let mut devs: Vec<Arc<dyn Device>> = Vec::new();
            for (name, p) in names.iter().zip(&paths) {
                let file = d.create_new_rw(name, crate::device::IMAGE_MODE)?;
                made += 1;
                devs.push(Arc::new(crate::device::FileDevice::from_file(file, p.display().to_string(), size)?));
            }
            Fs::format(devs, opts)?;
            pool::write_pool_file(dir, &paths, None)
        })();
        if let Err(e) = r {
            // Leave no half-made images behind (only those made here).
            for name in &names[..made] {
                let _ = d.remove(name);
            }
            return Err(e);
        }
        Ok(paths)
    }

    /// Makes a pool on the given files or block devices, or devices in a
    /// Ceph cluster (`rados:POOL[/PREFIX]?conf=PATH[&size=SIZE]`, with the
    /// `rados` feature); records them in `dir`. A pool with rados devices
    /// is also described in its cluster under its name (`opts.name`, else
    /// the directory's name), which must be free there.
    pub fn mkfs_devices(dir: &Path, paths: &[PathBuf], size: Option<u64>, opts: &FormatOptions) -> Result<()> {
        let home = paths.iter().filter_map(|p| p.to_str()).find(|n| crate::device::is_rados(n));
        let name = match home {
            Some(home) => {
                let name = match &opts.name {
                    Some(n) => n.clone(),
                    None => dir.file_name().and_then(|n| n.to_str()).map(str::to_string).ok_or_else(|| {
                        Error::Invalid(format!("{}: give the pool a name for its cluster", dir.display()))
                    })?,
                };
                let mut spec = crate::device::RadosSpec::parse(home)?;
                spec.conf =
                    std::fs::canonicalize(&spec.conf).map_err(|e| Error::io(spec.conf.display().to_string(), e))?;
                pool::published::check_free(&spec, &name)?;
                Some(name)
            }
            None => None,
        };
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir.display().to_string(), e))?;
        let mut devs: Vec<Arc<dyn Device>> = Vec::new();
        let mut abs = Vec::new();
        let pool_id = pool::new_pool_id();
        let mut rados = crate::device::RadosConnections::default();
        for (i, p) in paths.iter().enumerate() {
            // A device in a Ceph cluster: its objects named after the pool
            // id unless a prefix is given, its size given or --device-size,
            // and pool.conf names it with both and the config's full path.
            if let Some(name) = p.to_str().filter(|n| crate::device::is_rados(n)) {
                let mut spec = crate::device::RadosSpec::parse(name)?;
                spec.size = spec.size.or(size);
                if spec.size.is_none() {
                    return Err(Error::Invalid(format!("{name}: no size (size=SIZE, or a size for every device)")));
                }
                spec.prefix.get_or_insert_with(|| crate::device::rados_spec::object_prefix(&pool_id, i as u32));
                spec.conf =
                    std::fs::canonicalize(&spec.conf).map_err(|e| Error::io(spec.conf.display().to_string(), e))?;
                devs.push(rados.open_device(&spec)?);
                abs.push(PathBuf::from(spec.to_string()));
                continue;
            }
            let dev = match size {
                Some(s) if !p.exists() || std::fs::metadata(p).map(|m| m.is_file()).unwrap_or(false) => {
                    crate::device::FileDevice::create(p, s)?
                }
                _ => crate::device::FileDevice::open(p, true)?,
            };
            devs.push(Arc::new(dev));
            abs.push(std::fs::canonicalize(p).map_err(|e| Error::io(p.display().to_string(), e))?);
        }
        Fs::format_as(devs, opts, pool_id)?;
        pool::write_pool_file(dir, &abs, name.as_deref().map(|n| (n, &pool_id)))
    }

    /// Opens the pool described by a pool directory.
    pub fn open_dir(dir: &Path, opts: Options) -> Result<Fs> {
        // A pool found by name in its cluster: the device list as the
        // cluster has it now (another host may have added a device).
        // Through the connections the lease and the devices then use.
        let mut rados = crate::device::RadosConnections::default();
        if let Err(e) = pool::published::sync(dir, &mut rados) {
            tracing::warn!(
                "{}: the pool's description in its cluster: {e}; opened as the directory lists it",
                dir.display()
            );
        }
        let paths = pool::device_paths(dir)?;
        // One writer at a time for a pool in a cluster: the lease first,
        // before the journal is replayed or anything written.
        // On the connection the devices then use: a writer fenced by the
        // next one loses its devices' writes with its lease.
        let lease = crate::device::PoolLease::take(&paths, !opts.read_only, opts.lease_duration, &mut rados)?;
        let devs = pool::open_paths_with(&paths, !opts.read_only, &mut rados)?;
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
        let numa = pool::numa_nodes(dir)?;
        let fs = Fs::open(devs, opts)?;
        if let Some(flag) = lease.lost_flag() {
            let _ = fs.inner.lease_lost.set(flag);
        }
        *fs.inner.lease.lock() = Some(lease);
        *fs.inner.rados.lock() = rados;
        // Each device's NUMA node: pool.conf's, else what sysfs says.
        for (h, p) in fs.inner.storage.devs.iter().zip(&paths) {
            let node =
                numa.iter().rev().find(|(d, _)| *d == h.index).map(|x| x.1).or_else(|| crate::numa::node_of_path(p));
            h.set_numa_node(node);
        }
        Ok(fs)
    }

    pub fn report(&self) -> OpenReport {
        self.inner.report.lock().clone()
    }

    /// The connections to Ceph clusters this pool's lease and rados devices
    /// use: a device added to the pool opens on them
    /// (`device::rados_spec::new_device`).
    pub fn rados_connections(&self) -> parking_lot::MutexGuard<'_, crate::device::RadosConnections> {
        self.inner.rados.lock()
    }

    /// Whether the pool was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    /// Whether the pool takes changes: opened read-write, not closed, and
    /// writing not stopped by [`Fs::set_writable`] (false once the
    /// checkpoint that stops it is written).
    pub fn is_writable(&self) -> bool {
        !self.inner.read_only
            && !self.inner.closed.load(Ordering::Acquire)
            && !self.inner.stopped.load(Ordering::Acquire)
    }

    /// Stops writing the pool (`false`: its mount was remounted read-only)
    /// or resumes (`true`). Stopping refuses every later change with
    /// [`Error::ReadOnly`] (EROFS) and then writes a checkpoint: the
    /// devices hold the whole state and the journal is empty, so the
    /// committer and the cleaner find nothing to write, nor does a sync,
    /// until writing resumes. A pool opened read-only cannot resume: its
    /// devices are open for reading only.
    pub fn set_writable(&self, writable: bool) -> Result<()> {
        let inner = &*self.inner;
        if inner.read_only || inner.closed.load(Ordering::Acquire) {
            return if writable { Err(Error::ReadOnly("pool (opened read-only)".into())) } else { Ok(()) };
        }
        let _turn = inner.holding.lock();
        if writable {
            inner.stopped.store(false, Ordering::Release);
            inner.held.store(false, Ordering::Release);
            return Ok(());
        }
        if inner.stopped.load(Ordering::Acquire) {
            return Ok(());
        }
        inner.held.store(true, Ordering::Release);
        let target = inner.gate.current_epoch();
        match self.commit(target, true) {
            Ok(()) => {
                inner.stopped.store(true, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                inner.held.store(false, Ordering::Release);
                Err(e)
            }
        }
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

    /// The meta-data caches' counters: the inode cache and the store.
    pub fn meta_cache_stats(&self) -> MetaCacheStats {
        MetaCacheStats { inodes: self.inner.state.counters(), store: self.inner.state.store().stats() }
    }

    /// Empties the data cache (benchmarks start each run cold).
    pub fn drop_caches(&self) {
        self.inner.cache.clear();
        crate::blocks::colocate::drop_caches(&self.inner.storage);
    }

    /// Group placement and group reads of `colocate` files, all devices summed.
    pub fn group_stats(&self) -> crate::blocks::colocate::GroupStatsSnapshot {
        crate::blocks::colocate::stats(&self.inner.storage)
    }

    /// Per-device I/O statistics.
    pub fn device_stats(&self) -> Vec<(String, StatsSnapshot)> {
        self.inner.storage.devs.iter().map(|d| (d.name(), d.stats.snapshot())).collect()
    }

    /// (commits, checkpoints) since open.
    pub fn commit_counts(&self) -> (u64, u64) {
        (self.inner.commits.load(Ordering::Relaxed), self.inner.checkpoints.load(Ordering::Relaxed))
    }

    /// The checkpoints since open that were written without a sync of
    /// their own (each made durable by the next durable commit).
    pub fn unsynced_checkpoints(&self) -> u64 {
        self.inner.unsynced_checkpoints.load(Ordering::Relaxed)
    }

    pub fn default_layout(&self) -> String {
        self.inner.default_layout.read().clone()
    }

    /// Logs ops that commit together, marking the inodes they change (a
    /// data write changes a file's tree without locking its inode record),
    /// so the cache keeps them until a checkpoint writes them.
    pub(crate) fn log(&self, g: &journal::Entered<'_>, ops: &[Op]) {
        for op in ops {
            // (A freed inode is gone, not changed.)
            if let Some(ino) = op.inode().filter(|_| !matches!(op, Op::Free { .. })) {
                self.inner.state.touch(ino);
            }
        }
        g.log(ops);
    }

    /// Before every namespace or attribute change (on a pool that commits
    /// in the background): wakes the committer once a checkpoint is due,
    /// and holds the thread back while twice that many inodes are changed
    /// or freed. Changed inodes stay in memory until written, so changing
    /// faster than checkpoints write would grow memory without bound.
    /// Called before the journal gate is entered.
    pub(crate) fn throttle(&self) -> Result<()> {
        let inner = &*self.inner;
        let dirty = inner.state.dirty_count();
        if dirty > inner.dirty_limit && !inner.read_only && !inner.kicked.swap(true, Ordering::AcqRel) {
            // A checkpoint is due: the committer starts it now rather than
            // at its next tick, so writers rarely reach the limit below.
            // (Under its lock, so the wake-up cannot fall between the
            // committer's look at the flag and its wait.)
            let _g = inner.shutdown.lock();
            inner.shutdown_cv.notify_all();
        }
        if inner.read_only || dirty <= 2 * inner.dirty_limit {
            return Ok(());
        }
        // A pool opened without background commits commits only when its
        // user says (tests and the crash harness decide what is durable).
        if inner.committer.lock().is_none() {
            return Ok(());
        }
        let target = inner.gate.current_epoch();
        // A checkpoint being written settles the inodes it covers when it
        // ends: wait for it and look again, rather than follow it with a
        // journal write of changes the next checkpoint writes anyway.
        drop(inner.meta.lock());
        if inner.state.dirty_count() <= 2 * inner.dirty_limit {
            return Ok(());
        }
        self.checkpoint_if_due(target)
    }

    pub(crate) fn check_writable(&self) -> Result<()> {
        if self.inner.read_only || self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::ReadOnly("pool".into()));
        }
        if self.inner.held.load(Ordering::Acquire) {
            return Err(Error::ReadOnly("pool (remounted read-only)".into()));
        }
        self.check_lease()
    }

    /// A pool whose lease in the cluster was lost is written no more:
    /// another host may be writing it now.
    fn check_lease(&self) -> Result<()> {
        if self.inner.lease_lost.get().is_some_and(|f| f.load(Ordering::Acquire)) {
            return Err(Error::ReadOnly("pool: its lease in the cluster was lost (see the log)".into()));
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
    /// callers share one journal write). Fails, once, if held small-file
    /// writes were lost with their device since the last sync said so
    /// (`write_errors.rs`).
    pub fn sync(&self) -> Result<()> {
        self.commit_all()?;
        self.inner.write_errors.take_for_sync().map_or(Ok(()), Err)
    }

    /// Makes everything done so far durable, reporting no earlier loss.
    pub(crate) fn commit_all(&self) -> Result<()> {
        if self.inner.read_only || self.inner.held.load(Ordering::Acquire) {
            return Ok(());
        }
        let target = self.inner.gate.current_epoch();
        self.commit(target, false)
    }

    /// Fails, once, if held writes of `ino` were lost with their device.
    pub(crate) fn take_write_error(&self, ino: Ino) -> Result<()> {
        self.inner.write_errors.take_for(ino).map_or(Ok(()), Err)
    }

    /// Writes a full checkpoint of the meta-data and empties the journal.
    pub fn checkpoint(&self) -> Result<()> {
        self.check_writable()?;
        let target = self.inner.gate.current_epoch();
        self.commit(target, true)
    }

    fn commit(&self, target: u64, checkpoint: bool) -> Result<()> {
        self.commit_as(target, checkpoint, false)
    }

    /// A commit asked for because a checkpoint is due (a writer over the
    /// limit, the committer woken by one): if another thread's checkpoint
    /// got there first, nothing is written, as a journal write of changes
    /// the next checkpoint writes anyway would write them twice.
    fn checkpoint_if_due(&self, target: u64) -> Result<()> {
        self.commit_as(target, false, true)
    }

    fn commit_as(&self, target: u64, checkpoint: bool, only_if_due: bool) -> Result<()> {
        self.check_lease()?;
        let inner = &*self.inner;
        inner.storage.probe();
        let mut m = inner.meta.lock();
        if !checkpoint && *inner.committed.lock() >= target {
            return Ok(());
        }
        let half = m.sb.journal.blocks / 2;
        let dirty = inner.state.dirty_count();
        let journal_full = m.cursor.used(&m.sb.journal) > half;
        let due = journal_full || m.relayout.is_some() || dirty > inner.dirty_limit || self.copies_short(&mut m);
        if only_if_due && !due {
            return Ok(());
        }
        // After a checkpoint that is not durable the next commit is a
        // checkpoint too (or, when none can be written, a journal record
        // that carries the unsynced ones' ops first: `write_batch`).
        let want_ckpt = checkpoint || due || m.unsynced_state;
        let t0 = Instant::now();
        let (mut batch, mut snap) = self.capture(want_ckpt, &mut m.spare);
        let captured = t0.elapsed();
        if !m.unwritten.is_empty() {
            let mut groups = std::mem::take(&mut m.unwritten);
            groups.append(&mut batch.groups);
            batch.groups = groups;
        }
        if !want_ckpt && !journal::fits(&m.sb.journal, &m.cursor, batch.encode().len()) {
            // Too big for the journal's free space: a checkpoint covers it.
            let (mut b2, s2) = self.capture(true, &mut m.spare);
            batch.epoch = b2.epoch;
            batch.groups.append(&mut b2.groups);
            snap = s2;
        }
        // A checkpoint that changed inodes brought on, which nobody waits
        // to be durable, is written without the syncs that make it so
        // (three rounds: the data, then the store's two-phase commit)
        // while the last durable commit is recent and the ops it covers
        // would fit a journal record: the next durable commit (a sync, the
        // committer's tick, a checkpoint asked for) makes it durable with
        // its own. Memory stays bounded as with a durable one: the inodes
        // it wrote are read back from the store.
        let sync = !only_if_due
            || snap.is_none()
            || journal_full
            || m.relayout.is_some()
            || m.synced_at.elapsed() >= inner.commit_interval
            || !Self::may_leave_unsynced(&m, &batch);
        let durable = match self.write_batch(&mut m, &batch, snap, checkpoint, sync) {
            Ok(d) => d,
            Err(e) => {
                // Nothing of this batch may be dropped: later records would
                // then depend on ops that never reach the disk.
                m.unwritten = std::mem::take(&mut batch.groups);
                return Err(e);
            }
        };
        inner.commits.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            "commit of epoch {}: {} (changes held {:.1} ms, written in {:.1} ms, {dirty} inodes changed{})",
            batch.epoch,
            if want_ckpt { "checkpoint" } else { "journal" },
            captured.as_secs_f64() * 1e3,
            (t0.elapsed() - captured).as_secs_f64() * 1e3,
            if durable { "" } else { ", not synced" }
        );
        if !durable {
            // Its frees wait for the durable commit: until then a crash
            // goes back to a state whose files still own those blocks.
            m.unsynced_bytes += batch.groups.iter().map(Vec::len).sum::<usize>();
            m.unsynced.append(&mut batch.groups);
            m.unsynced_state = true;
            inner.unsynced_checkpoints.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        m.covered();
        m.synced_at = Instant::now();
        // Freed space goes back to the devices that want it (a Ceph
        // cluster's objects), now that the frees are durable.
        for (a, d) in inner.storage.allocs.iter().zip(inner.storage.devs.iter()) {
            let dev = d.dev();
            if d.state().writable() && dev.reclaims_freed() {
                let unit = (dev.discard_unit() / BLOCK_SIZE as u64).max(1);
                a.release_with(batch.epoch, unit, |s, l| {
                    if let Err(e) = dev.discard(s * BLOCK_SIZE as u64, l * BLOCK_SIZE as u64) {
                        tracing::debug!(device = d.index, "giving back freed space: {e}");
                    }
                });
            } else {
                a.release(batch.epoch);
            }
        }
        let mut c = inner.committed.lock();
        *c = (*c).max(batch.epoch);
        inner.committed_cv.notify_all();
        Ok(())
    }

    /// Whether the ops of the checkpoints left unsynced, with `batch`'s,
    /// stay within what memory and a journal record may take.
    fn may_leave_unsynced(m: &MetaState, batch: &Batch) -> bool {
        let bytes = m.unsynced_bytes + batch.groups.iter().map(|g| g.len() + 4).sum::<usize>() + 4 * m.unsynced.len();
        bytes <= UNSYNCED_MAX_BYTES && journal::fits(&m.sb.journal, &m.cursor, bytes + 64)
    }

    /// Writes a captured batch: as a checkpoint when `snap` is given (or, if
    /// the meta devices have no room for a new meta-file and the checkpoint
    /// was not `required`, as a journal record when it fits), else as a
    /// journal record. A checkpoint is made durable when `sync`; the
    /// result says whether what was written is durable.
    fn write_batch(
        &self,
        m: &mut MetaState,
        batch: &Batch,
        snap: Option<Snapshot>,
        required: bool,
        sync: bool,
    ) -> Result<bool> {
        let inner = &*self.inner;
        // Small-file writes held for a group write reach their devices
        // first (blocks/colocate.rs): a failure fails the commit, before
        // any record could point at data that is not there. What a device
        // that takes writes no more gave up fails its files instead.
        let mut lost = Vec::new();
        let drained = crate::blocks::colocate::drain_all(&inner.storage, &mut lost);
        if !lost.is_empty() {
            inner.write_errors.note(&lost);
            // Their files' blocks cached above the layout go too: a read
            // of a lost block fails from now on, never shows data no
            // device holds (a read under way claimed its slot before it
            // read the group cache, so it is marked stale here).
            for ino in lost.iter().flat_map(|l| l.owners.iter()) {
                inner.cache.invalidate_from(*ino, 0);
            }
        }
        drained?;
        // Ordered mode: data first, then the meta-data that points at it.
        // Verified mode when the batch's data writes were all made for
        // recovery to verify (journal/mod.rs): the record goes out with
        // them under one flush. The batch's writes completed before it was
        // captured, so a device they marked is seen here.
        // A checkpoint left unsynced orders nothing: the durable commit
        // after it flushes the data first.
        let verified = snap.is_none() && !batch.is_empty() && !inner.storage.has_unflushed();
        let mut flushed = false;
        if !verified && sync {
            inner.storage.flush_all()?;
            flushed = true;
        }
        if let Some((mut delta, taken)) = snap {
            let written = self.write_checkpoint(m, &mut delta, sync);
            if written.is_err() {
                self.log_usage_unsaved(&delta);
            }
            m.spare = delta.recycle();
            match written {
                Ok(()) => {
                    inner.state.settle(taken);
                    inner.checkpoints.fetch_add(1, Ordering::Relaxed);
                    return Ok(sync);
                }
                // A device the meta-file needs is down, or no room to grow
                // it: the batch goes to the journal while it fits, and a
                // later checkpoint takes the same changes again (they stay
                // marked until one commits).
                Err(e) if !required && journal::fits(&m.sb.journal, &m.cursor, Self::record(m, batch).len()) => {
                    if !matches!(e, Error::NoSpace(_)) {
                        tracing::warn!("checkpoint failed, committing to the journal instead: {e}");
                    }
                }
                Err(e) => return Err(e),
            }
        }
        if !batch.is_empty() || !m.unsynced.is_empty() {
            let order = if verified {
                journal::Order::Verified
            } else {
                if !flushed {
                    inner.storage.flush_all()?;
                }
                journal::Order::Ordered
            };
            let payload = Self::record(m, batch);
            let mut c = m.cursor;
            let copies = journal::Copies { regions: m.sb.journals(), salt: inner.salt, epoch: m.epoch };
            let durable = journal::append(&inner.storage, &copies, &mut c, &payload, order)?;
            m.cursor = c;
            self.note_record(durable, copies.regions.len());
            // The journal now follows the last durable state with nothing
            // missing: records may follow it again.
            m.covered();
        }
        Ok(true)
    }

    /// The journal record of `batch`, after the ops of the checkpoints left
    /// unsynced (their state is not durable: the record must carry them).
    fn record(m: &MetaState, batch: &Batch) -> Vec<u8> {
        if m.unsynced.is_empty() {
            return batch.encode();
        }
        Batch { epoch: batch.epoch, groups: m.unsynced.iter().chain(&batch.groups).cloned().collect() }.encode()
    }

    /// Takes the pending ops (and lazy time updates) out of the gate, with a
    /// snapshot of the whole state when asked.
    fn capture(&self, snapshot: bool, spare: &mut Delta) -> (Batch, Option<Snapshot>) {
        let inner = &*self.inner;
        inner.gate.capture(|batch| {
            let mut times = Vec::new();
            for d in inner.dirty.iter() {
                for ino in std::mem::take(&mut *d.lock()) {
                    if let Some(n) = inner.state.get(ino) {
                        if n.dirty_times.swap(false, Ordering::AcqRel) {
                            let g = n.data.read();
                            times.push(Op::Times { ino, atime: g.atime, mtime: g.mtime, ctime: g.ctime });
                            inner.state.touch(ino);
                        }
                    }
                }
            }
            if !times.is_empty() {
                batch.push(&times);
            }
            // Where the logs' heads of plain writes stand, for roll-forward
            // to walk from. A checkpoint empties the journal: the batch
            // after it records every head again.
            let mut heads = Vec::new();
            for (dev, space) in self.log_spaces() {
                if snapshot {
                    space.forget_anchors();
                    continue;
                }
                heads.extend(space.anchors(dev).into_iter().map(|a| Op::LogHead {
                    dev: a.dev,
                    seg: a.seg,
                    next: a.next,
                    end: a.end,
                    then_start: a.then.map_or(0, |t| t.0),
                    then_len: a.then.map_or(0, |t| t.1),
                    nonce: a.nonce,
                }));
            }
            if !heads.is_empty() {
                batch.push(&heads);
            }
            snapshot.then(|| {
                let mut delta = std::mem::take(spare);
                let taken = inner.state.take(&mut delta);
                // Free space at the cut: frees of this batch are free once it commits.
                let mut free = Vec::new();
                for (d, a) in inner.storage.allocs.iter().enumerate() {
                    free.extend(free_entries(d as u32, a.snapshot(batch.epoch)));
                }
                // The trees of migrations under way: nothing names them yet.
                let mut unnamed = Vec::new();
                self.migrating_extents(&mut unnamed);
                // Blocks the log heads took and have not handed out.
                self.log_unused(&mut unnamed);
                // The logs' usage entries that changed since the last one.
                for (dev, space) in self.log_spaces() {
                    delta.log_usage.extend(
                        space
                            .usage_changes()
                            .into_iter()
                            .map(|((seg, st), u)| ((dev, seg, st), u.map(|u| (u.live, u.mtime)))),
                    );
                }
                delta.free = Some(if unnamed.is_empty() { free } else { merge_free(free, unnamed) });
                delta.errors = inner.errors.take_changed();
                (delta, taken)
            })
        })
    }

    /// Writes a checkpoint: the changes since the last one as one store
    /// transaction, with the journal position they cover. A meta-file
    /// being moved (device removal or replacement) is copied to its new
    /// tree first, with the superblocks switched to it.
    fn write_checkpoint(&self, m: &mut MetaState, delta: &mut Delta, sync: bool) -> Result<()> {
        let inner = &*self.inner;
        let file = inner.state.store().file();
        // The meta-file's extents, before a move and after, are recorded
        // free: an open claims the ones the superblocks name.
        let mut meta_extents = Vec::new();
        file.layout().extents(&mut |d, s, l| meta_extents.push((d, s, l)));
        // A copy that missed writes while its device was away is made whole
        // again once every device of the meta-file takes writes: the file
        // is copied to a fresh tree (the copies' missed ranges go with the
        // old one).
        self.plan_meta_file(m);
        if m.relayout.is_none() {
            let lay = file.layout();
            let mut all_up = true;
            lay.extents(&mut |d, _, _| {
                all_up &=
                    inner.storage.devs.get(d as usize).is_some_and(|h| h.state().readable() && h.state().writable());
            });
            let damaged = file.take_damaged();
            if all_up && (damaged || lay.root().health(&|_| false) != crate::blocks::Health::Ok) {
                tracing::info!("meta-file: a copy missed writes or was damaged; copying it whole to a fresh tree");
                m.relayout = Some(lay.spec());
            } else if damaged {
                // Not while a device is away: the next checkpoint tries again.
                file.mark_damaged();
            }
        }
        if let Some(free) = delta.free.take() {
            // The journal and the meta-file are recorded free: an open
            // claims them from the superblocks, wherever they are by then.
            let mut extra = meta_extents;
            for r in m.sb.journals() {
                extra.push((r.dev, r.start, r.blocks));
            }
            delta.free = Some(merge_free(free, extra));
        }
        delta.sys.cursor = Cursor { tail: m.cursor.head, head: m.cursor.head, seq: m.cursor.seq };
        delta.sys.epoch = m.epoch;
        file.arm(m.sb.clone());
        let r = inner.state.store().commit(delta, sync);
        if let Some(sb) = file.disarm() {
            m.sb = sb;
        }
        if r.is_err() && delta.errors.is_some() {
            inner.errors.unwritten();
        }
        r?;
        // A checkpoint left unsynced keeps the journal's records (until a
        // durable commit covers them) and the meta-file where it is.
        if sync {
            m.cursor.tail = m.cursor.head;
            // A move of the meta-file comes after the commit, so both
            // copies of the old tree hold the header redb just wrote, and
            // a copy read whole from them is one the store can open. It
            // does not fail the checkpoint (which is in force): the next
            // one tries again.
            if let Some(spec) = m.relayout.clone() {
                if let Err(e) = self.move_meta_file(m, &spec) {
                    tracing::warn!("meta-file not moved to {spec}: {e}");
                }
            }
            if let Err(e) = self.place_journal(m) {
                tracing::warn!("journal copies not placed: {e}");
            }
        }
        let mut ext = Vec::new();
        file.layout().extents(&mut |d, s, l| ext.push((d, s, l)));
        set_meta_reserve(&inner.storage, &ext, &m.sb.journal);
        Ok(())
    }

    /// Copies the meta-file whole to a fresh tree built from `spec`, then
    /// switches the superblocks to it and frees the old one.
    fn move_meta_file(&self, m: &mut MetaState, spec: &crate::blocks::Spec) -> Result<()> {
        let inner = &*self.inner;
        let file = inner.state.store().file();
        let fresh = Layout::build(spec)?;
        let old = file.copy_to(fresh)?;
        let (layout, len) = file.describe();
        let mut sb = m.sb.clone();
        sb.generation += 1;
        sb.meta_layout = layout;
        sb.meta_len = len;
        inner.storage.write_superblocks(&sb)?;
        m.sb = sb;
        old.extents(&mut |d, s, l| inner.storage.allocs[d as usize].free_now(s, l));
        m.relayout = None;
        Ok(())
    }

    fn start_committer(&self, every: Duration) {
        let weak = Arc::downgrade(&self.inner);
        let mut due = Instant::now() + every;
        let h = std::thread::Builder::new().name("hurricane-commit".into()).spawn(move || loop {
            let Some(inner) = weak.upgrade() else { return };
            let mut timed = false;
            {
                let mut stop = inner.shutdown.lock();
                loop {
                    if *stop {
                        return;
                    }
                    let now = Instant::now();
                    if now >= due {
                        timed = true;
                        break;
                    }
                    // A kick is acted on only while a checkpoint is still
                    // due: one raised while the previous checkpoint was
                    // being written (its inodes still counted as changed)
                    // is stale, and a journal write of changes about to be
                    // checkpointed would write them twice.
                    if inner.kicked.swap(false, Ordering::AcqRel) && inner.state.dirty_count() > inner.dirty_limit {
                        break;
                    }
                    inner.shutdown_cv.wait_for(&mut stop, due - now);
                }
            }
            let fs = Fs { inner };
            let target = fs.inner.gate.current_epoch();
            // Writing is stopped (a read-only remount): nothing to commit.
            if fs.inner.held.load(Ordering::Acquire) {
                due = Instant::now() + every;
                continue;
            }
            // The tick makes the journal durable; a wake-up asks for a
            // checkpoint, which a writer may have written meanwhile.
            let r = if timed { fs.commit(target, false) } else { fs.checkpoint_if_due(target) };
            if let Err(e) = r {
                tracing::error!("background commit failed: {e}");
            }
            due = Instant::now() + every;
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
        if let Some(h) = self.inner.cleaner.lock().take() {
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
        self.inner.storage.write_superblocks(&sb)?;
        // The checkpoint above is the store's last state: what the store
        // would write when dropped is not written (another open, here or on
        // another host, may be using the devices by then).
        self.inner.state.store().file().seal();
        // Closed cleanly: another host may open the pool now.
        *self.inner.lease.lock() = None;
        Ok(())
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
        self.file_spec_in(text, &self.pool_info())
    }

    /// [`Fs::file_spec`] against a given view of the pool.
    pub(crate) fn file_spec_in(&self, text: &str, info: &PoolInfo) -> Result<layout::Spec> {
        let spec = layout::resolve(&layout::parse(text)?, info)?;
        Ok(if self.inner.checksum { layout::with_checksums(spec) } else { spec })
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        *self.shutdown.lock() = true;
        self.shutdown_cv.notify_all();
    }
}

/// The most copies of the meta-data a pool keeps.
pub const MAX_META_COPIES: u32 = 6;

/// How many copies of the meta-data a pool of `devices` keeps when the
/// most tolerant layout its files use survives `survived` device
/// failures: one more copy than that takes, as ZFS keeps its meta-data
/// one copy above its data (so losing the devices the data survives still
/// leaves a spare copy), and never fewer than three; as many as there are
/// devices, when there are fewer.
pub fn meta_copies_wanted(devices: u32, survived: u32) -> u32 {
    survived.saturating_add(2).clamp(3, MAX_META_COPIES).min(devices).max(1)
}

/// The meta-file's layout with a copy on each of `devs`: its extents may
/// be as long as extents go (its tree is kept in the superblock, and with
/// 128 MiB runs, the extent default, a meta-file of about 7 GB, 7 million
/// files, no longer fits there).
fn meta_layout_on(devs: &[u32]) -> String {
    let leaves: Vec<String> = devs.iter().map(|d| format!("extent(max=1T)@{d}")).collect();
    match leaves.as_slice() {
        [one] => one.clone(),
        _ => format!("replicate(copies={})[{}]", leaves.len(), leaves.join(",")),
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
    PoolInfo { devices: s.device_count(), free_blocks: free.collect(), retired, prefer: None }
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

/// Keeps room on the meta-file's devices for its growth (half its size
/// again, plus what half a journal of changes may add): data allocations
/// leave it free, so a pool full of data still checkpoints.
fn set_meta_reserve(storage: &Storage, meta: &[(u32, u64, u64)], journal: &Region) {
    let mut per_dev = vec![0u64; storage.allocs.len()];
    for &(d, _, l) in meta {
        if let Some(x) = per_dev.get_mut(d as usize) {
            *x = x.saturating_add(l);
        }
    }
    for (a, used) in storage.allocs.iter().zip(per_dev) {
        a.set_reserve(if used == 0 { 0 } else { (used / 2).saturating_add(journal.blocks / 2 + 16) });
    }
}

/// The free map entries of a device for the store, with the marker that
/// says the device's map is recorded (a device added after the checkpoint
/// has none, and is all free).
fn free_entries(dev: u32, free: Vec<(u64, u64)>) -> impl Iterator<Item = (u32, u64, u64)> {
    free.into_iter().map(move |(s, l)| (dev, s, l)).chain(std::iter::once((dev, u64::MAX, 0)))
}

/// Free map entries with `extra` extents added, merged per device (the
/// per-device markers kept).
fn merge_free(free: Vec<(u32, u64, u64)>, extra: Vec<(u32, u64, u64)>) -> Vec<(u32, u64, u64)> {
    let mut v: Vec<(u32, u64, u64)> = free.into_iter().chain(extra).collect();
    v.sort_unstable();
    let mut out: Vec<(u32, u64, u64)> = Vec::with_capacity(v.len());
    for (d, s, l) in v {
        if s == u64::MAX {
            out.push((d, s, l));
            continue;
        }
        match out.last_mut() {
            Some((pd, ps, pl)) if *pd == d && *ps != u64::MAX && *ps + *pl >= s => {
                *pl = (*pl).max(s + l - *ps);
            }
            _ => out.push((d, s, l)),
        }
    }
    out
}

/// The inode whose space an op changes (its extents are compared before
/// and after replay).
fn op_space_owner(op: &Op) -> Option<Ino> {
    match op {
        Op::Create(n) => Some(n.ino),
        Op::Map { .. } | Op::SetLayout { .. } | Op::Free { .. } | Op::SetSize { .. } => op.inode(),
        _ => None,
    }
}

/// A checkpoint's changes, and what to settle in the state once they commit.
type Snapshot = (Delta, Taken);
