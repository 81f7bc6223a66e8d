//! The meta-data store: the inode table and the directories as B-trees
//! (redb) in the meta-file, the file of building blocks the superblock
//! names (HFS 3.2: block records live in a regular file that is itself
//! stored by building blocks, so meta-data is replicated and placed like
//! data).
//!
//! Nothing here is loaded whole: the inode table and directories are read
//! a record at a time through redb's bounded page cache, and a checkpoint
//! writes only what changed since the last one (a [`Delta`]) as one redb
//! transaction whose commit is the checkpoint's commit point. The journal
//! cursor the checkpoint covers is stored in the same transaction, so the
//! store and the journal replay that follows it can never disagree.
//!
//! Tables (docs/FORMAT.md, "The meta-data store"):
//! - `inodes`: inode number → inode record (`InodeData::encode`).
//! - `names`: (directory, name) → (inode, type bits, cookie).
//! - `cookies`: (directory, cookie) → (inode, type bits, name): the readdir order, stable
//!   across inserts and deletes (cookies only grow).
//! - `free`: (device, start) → length: each device's free extents at the
//!   checkpoint, so an open does not walk every file's extents.
//! - `orphans`: inodes with no links at the checkpoint (open files that
//!   were unlinked), freed by the next open.
//! - `errors`: inode → permanent error record (`fs::DataError::encode`):
//!   files with data no copy could supply, written whole when it changed.
//! - `sys`: the journal cursor, the next inode number, the inode count.
//!
//! The meta-file's length and tree change when redb grows it; the backend
//! writes the superblocks with the new tree during the commit's first sync
//! (redb commits in two phases: pages, sync, header, sync), so the header
//! of a commit never names space the superblock does not.

use super::entry_cache::{EntryCache, EntryCounters};
use crate::base::{Cursor, Ino, BLOCK_SIZE};
use crate::blocks::{Block, IoCtx, Layout, NodeRecord};
use crate::codec::{Decoder, Encoder};
use crate::error::{Error, Result};
use crate::pool::{Storage, Superblock};
use parking_lot::{Mutex, RwLock};
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

const INODES: TableDefinition<u64, &[u8]> = TableDefinition::new("inodes");
const NAMES: TableDefinition<(u64, &[u8]), (u64, u32, u64)> = TableDefinition::new("names");
const COOKIES: TableDefinition<(u64, u64), (u64, u32, &[u8])> = TableDefinition::new("cookies");
const FREE: TableDefinition<(u32, u64), u64> = TableDefinition::new("free");
const ORPHANS: TableDefinition<u64, ()> = TableDefinition::new("orphans");
const LOG_USAGE: TableDefinition<(u32, u64, u64), (u64, i64)> = TableDefinition::new("log_usage");
const ERRORS: TableDefinition<u64, &[u8]> = TableDefinition::new("errors");
const SYS: TableDefinition<&str, &[u8]> = TableDefinition::new("sys");

/// The meta-file's block checksums: entry `b % 1024` of checksum page
/// `b / 1024`, kept at file block `SUMS_BASE + b / 1024` (far past any
/// meta-data, so the pages never meet it). An entry is the block's CRC-32C
/// with 0 taken as 1; 0 is a block never written, which no block within the
/// file's length is.
const SUMS_PER_PAGE: u64 = (BLOCK_SIZE / 4 - 1) as u64;
const SUMS_BASE: u64 = 1 << 36;

fn sum_of(b: &[u8]) -> u32 {
    crc32c::crc32c(b).max(1)
}

/// Every block within the file's length has an entry (growth writes the
/// zeros' checksum), so 0 is never right: a checksum page lost with its
/// blocks (both read as zeros) is damage, not an empty block.
fn sum_ok(entry: u32, b: &[u8]) -> bool {
    entry != 0 && sum_of(b) == entry
}

/// A checksum page's entries, if the page is whole: its last word is the
/// checksum of the others (so a page one copy lost or got wrong is known,
/// and taken from another copy).
fn valid_page(b: &[u8]) -> Option<Box<[u32]>> {
    let n = SUMS_PER_PAGE as usize * 4;
    let own = u32::from_le_bytes([b[n], b[n + 1], b[n + 2], b[n + 3]]);
    (own == crc32c::crc32c(&b[..n]).max(1)).then(|| page_entries(&b[..n]))
}

fn page_entries(b: &[u8]) -> Box<[u32]> {
    b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn page_bytes(p: &[u32]) -> Vec<u8> {
    let mut b: Vec<u8> = p.iter().take(SUMS_PER_PAGE as usize).flat_map(|x| x.to_le_bytes()).collect();
    b.resize(SUMS_PER_PAGE as usize * 4, 0);
    let own = crc32c::crc32c(&b).max(1);
    b.extend_from_slice(&own.to_le_bytes());
    b
}

/// Bytes zeroed at a time when the meta-file grows.
const GROW_STEP: usize = 16 << 20;

/// The version of the store's tables and records, kept in `sys`. Version 2
/// adds the journal epoch to `sys`; version 1 (no epoch: 0) is read too.
pub const STORE_VERSION: u32 = 2;

fn store_err(e: impl fmt::Display) -> Error {
    Error::corrupt("meta-data store", e.to_string())
}

/// Runs a store operation, turning a panic inside redb (its own assertions
/// on what it reads, which damaged meta-data can break) into an error: bad
/// input never takes the process down.
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(Error::corrupt("meta-data store", format!("{what}: the store failed its own checks ({msg})")))
        }
    }
}

/// The `sys` record of a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sys {
    /// The journal position the checkpoint covers: replay starts here.
    pub cursor: Cursor,
    pub next_ino: Ino,
    pub inodes: u64,
    /// The epoch of the open that wrote the checkpoint: replay takes no
    /// record of an older epoch from where it starts (a record a copy kept
    /// from a history the pool abandoned), `journal::replay`.
    pub epoch: u64,
}

impl Sys {
    fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        e.u32(STORE_VERSION).u64(self.cursor.tail).u64(self.cursor.head).u64(self.cursor.seq);
        e.u64(self.next_ino).u64(self.inodes).u64(self.epoch);
        e.into_inner()
    }

    /// Strict: the version, every field, nothing after.
    pub fn decode(buf: &[u8]) -> Result<Sys> {
        let mut d = Decoder::new(buf, "meta-data store sys record");
        let v = d.u32()?;
        if v != STORE_VERSION && v != 1 {
            return Err(d.err(format!("store version {v} is not 1 or {STORE_VERSION}, the ones this build reads")));
        }
        let cursor = Cursor { tail: d.u64()?, head: d.u64()?, seq: d.u64()? };
        let next_ino = d.u64()?;
        let inodes = d.u64()?;
        let epoch = if v >= 2 { d.u64()? } else { 0 };
        d.expect_end()?;
        if next_ino < 2 || next_ino == u64::MAX {
            return Err(Error::corrupt("meta-data store sys record", format!("next inode {next_ino} out of range")));
        }
        Ok(Sys { cursor, next_ino, inodes, epoch })
    }
}

impl Default for Sys {
    fn default() -> Self {
        Sys { cursor: Cursor { tail: 0, head: 0, seq: 0 }, next_ino: 2, inodes: 0, epoch: 0 }
    }
}

/// A directory entry as the store keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredEntry {
    pub ino: Ino,
    pub kind: u32,
    pub cookie: u64,
}

/// An entry with its name, as the cookie table keeps it.
pub type NamedEntry = (super::inode::Name, StoredEntry);

/// What [`MetaStore::entries_from`] hands each entry: its cookie, name,
/// inode and type bits; it returns whether to go on.
pub type EntryVisitor<'a> = dyn FnMut(u64, &[u8], Ino, u32) -> Result<bool> + 'a;

/// What a checkpoint writes: every change since the last one.
///
/// It is filled while every writer waits (the journal gate is closed for a
/// consistent cut), so it allocates as little as it can there: inode
/// records go one after another into one buffer, and the committer hands
/// the same `Delta` to the next checkpoint ([`Delta::recycle`]) with its
/// memory. Grown afresh each time, its pages were new to the process at
/// every checkpoint, and zeroing them by page faults was most of the
/// writers' wait.
#[derive(Default)]
pub struct Delta {
    /// Inode records to put (their bytes in `record_bytes`) or delete (`None`).
    pub inodes: Vec<(Ino, Option<Range<usize>>)>,
    /// The inode records, one after another.
    pub record_bytes: Vec<u8>,
    pub names: Vec<(Ino, super::inode::Name, Option<StoredEntry>)>,
    pub cookies: Vec<(Ino, u64, Option<NamedEntry>)>,
    /// Orphans to add (`true`) or remove (`false`).
    pub orphans: Vec<(Ino, bool)>,
    /// Every device's free extents (device, start, length), replacing the
    /// old ones (`None` leaves them as they are).
    pub free: Option<Vec<(u32, u64, u64)>>,
    /// Segment usage entries of the logs that changed: (device, segment
    /// size, first block) -> (live blocks, last write time) to put, or
    /// `None` to delete.
    pub log_usage: Vec<(LogSegment, Option<(u64, i64)>)>,
    /// The permanent error list, replacing the `errors` table (`None`
    /// leaves it as it is): (inode, record).
    pub errors: Option<Vec<(Ino, Vec<u8>)>>,
    pub sys: Sys,
}

/// A log segment: (device, segment size in blocks, first block).
pub type LogSegment = (u32, u64, u64);

/// Memory a recycled [`Delta`] may keep for the next checkpoint; one that
/// grew past it (a checkpoint far larger than the usual) is let go.
const DELTA_KEEP_BYTES: usize = 32 << 20;

impl Delta {
    pub fn records(&self) -> usize {
        self.inodes.len() + self.names.len() + self.cookies.len() + self.orphans.len()
    }

    /// An empty `Delta` with its memory taken and touched for a checkpoint
    /// of `inodes` new inodes, so that the first checkpoint does not pay
    /// for it with every writer waiting either.
    pub fn with_room(inodes: usize) -> Delta {
        const RECORD: usize = 192;
        let mut d = Delta::default();
        d.record_bytes.resize(inodes * RECORD, 0);
        d.record_bytes.clear();
        d.inodes.resize(inodes, (0, None));
        d.orphans.resize(inodes, (0, false));
        d.cookies.resize(inodes, (0, 0, None));
        let none: super::inode::Name = Arc::from(&[][..]);
        d.names.resize(inodes, (0, none, None));
        d.recycle()
    }

    /// Adds the record `encode` writes for inode `ino`.
    pub fn put_inode(&mut self, ino: Ino, encode: impl FnOnce(&mut Encoder)) {
        let mut e = Encoder { buf: std::mem::take(&mut self.record_bytes) };
        let start = e.buf.len();
        encode(&mut e);
        let end = e.buf.len();
        self.record_bytes = e.buf;
        self.inodes.push((ino, Some(start..end)));
    }

    /// Adds the removal of inode `ino`'s record.
    pub fn remove_inode(&mut self, ino: Ino) {
        self.inodes.push((ino, None));
    }

    /// The bytes of a record [`put_inode`](Self::put_inode) added.
    pub fn record(&self, r: &Range<usize>) -> &[u8] {
        &self.record_bytes[r.clone()]
    }

    /// Empties it for the next checkpoint, keeping its memory unless that
    /// grew past [`DELTA_KEEP_BYTES`].
    pub fn recycle(mut self) -> Delta {
        let bytes = self.record_bytes.capacity()
            + self.inodes.capacity() * std::mem::size_of::<(Ino, Option<Range<usize>>)>()
            + self.names.capacity() * std::mem::size_of::<(Ino, super::inode::Name, Option<StoredEntry>)>()
            + self.cookies.capacity() * std::mem::size_of::<(Ino, u64, Option<NamedEntry>)>()
            + self.orphans.capacity() * std::mem::size_of::<(Ino, bool)>();
        if bytes > DELTA_KEEP_BYTES {
            return Delta::default();
        }
        self.inodes.clear();
        self.record_bytes.clear();
        self.names.clear();
        self.cookies.clear();
        self.orphans.clear();
        self.free = None;
        self.log_usage.clear();
        self.errors = None;
        self.sys = Sys::default();
        self
    }
}

/// Counters of the store (reads that reached redb) for `hurricane stats`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StoreStats {
    pub inode_reads: u64,
    pub name_reads: u64,
    pub page_hits: u64,
    pub page_misses: u64,
    pub page_evictions: u64,
    pub commits: u64,
    pub bytes: u64,
    /// The directory-entry cache in front of the store.
    pub entries: EntryCounters,
}

/// The meta-file as redb's storage: byte ranges over the file's building
/// blocks.
pub struct MetaFile {
    inner: Arc<FileInner>,
}

struct FileInner {
    storage: Arc<Storage>,
    layout: RwLock<Arc<Layout>>,
    len: AtomicU64,
    /// The length at the last sync, and the length the superblocks record.
    synced_len: AtomicU64,
    recorded_len: AtomicU64,
    /// The tree or the length changed since the superblocks last named them.
    changed: AtomicBool,
    /// A read-only open keeps redb's writes (its open-time bookkeeping) in
    /// memory, by block.
    scratch: Option<Mutex<HashMap<u64, Box<[u8]>>>>,
    /// The checksums of the meta-file's blocks, by checksum page (each page
    /// holds 1,024 entries), as written: loaded from the file on first use.
    sums: Mutex<HashMap<u64, Box<[u32]>>>,
    /// Whether reads are checked against the checksums.
    verify: bool,
    /// Held by a write from its checksum update to its last page write.
    writing: Mutex<()>,
    /// Checksum pages changed in memory since they were last written: the
    /// next sync writes them, before its flush (nothing committed uses the
    /// blocks they cover until then).
    unwritten: Mutex<std::collections::BTreeSet<u64>>,
    /// The copy redb's header is read from (`usize::MAX`: whichever the
    /// replicated tree picks).
    header_from: AtomicUsize,
    /// A copy was found damaged: the next checkpoint copies the file whole
    /// to a fresh tree from the good blocks.
    damaged: AtomicBool,
    /// The superblock the next sync writes when `changed` is set; the
    /// meta-data commit path arms it and takes it back after the commit.
    sb: Mutex<Option<Superblock>>,
    /// Blocks read ahead of redb (see [`ReadAhead`]).
    ahead: Mutex<ReadAhead>,
    /// The pool was closed: nothing is written any more ([`MetaFile::seal`]).
    sealed: AtomicBool,
}

/// Blocks read along with one redb asked for: a page redb misses is read
/// with the rest of its aligned run of [`READ_AHEAD_BLOCKS`], so the pages
/// beside it (inodes made together, a directory's entries) cost no request
/// of their own when redb asks for them next.
///
/// Where a request costs its bytes rather than a wait (image files in the
/// host's page cache, flash), only a miss near a recent one reads its run:
/// a stat of a random file among millions misses pages nowhere near each
/// other, and a run read for each would be fifteen blocks read, verified
/// and kept for nothing (a random stat of ten million files read and
/// checked 64 KiB a page, at a third of the rate). Where a request costs a
/// wait (a disk's seek, a cluster's round trip: `Device::seeks`), every
/// miss reads its run, as a second request for a neighbour would cost a
/// second wait. Blocks come in verified; a write or a change of length
/// drops them and counts a generation, and a read that began before the
/// last count keeps nothing.
#[derive(Default)]
struct ReadAhead {
    generation: u64,
    blocks: HashMap<u64, Box<[u8]>>,
    order: std::collections::VecDeque<u64>,
    /// The last [`RECENT_MISSES`] blocks redb missed, oldest overwritten.
    recent: [u64; RECENT_MISSES],
    /// Where the next miss goes in `recent`.
    next: usize,
}

/// Blocks the meta-file reads at once on a miss (64 KiB).
const READ_AHEAD_BLOCKS: u64 = 16;

thread_local! {
    /// Each thread's buffer for a run read ahead (`read_block_ahead`).
    static RUN: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}
/// Blocks kept read ahead (4 MiB).
const READ_AHEAD_KEEP: usize = 1024;
/// Misses remembered to tell a walk through neighbouring pages (several at
/// once: a cold read of small files walks inodes and entries together)
/// from random lookups.
const RECENT_MISSES: usize = 32;

impl ReadAhead {
    /// Records a miss of `f` and says whether its run is worth reading: on
    /// devices whose requests cost a wait (`seeks`), always; else when the
    /// miss is within a run's length of a recent one (a walk through
    /// neighbouring pages). Block 0 (never read ahead) stands for no miss.
    fn missed(&mut self, f: u64, seeks: bool) -> bool {
        let near = self.recent.iter().any(|&b| b != 0 && b.abs_diff(f) <= READ_AHEAD_BLOCKS);
        self.recent[self.next] = f;
        self.next = (self.next + 1) % RECENT_MISSES;
        near || seeks
    }

    fn drop_range(&mut self, first: u64, n: u64) {
        self.generation += 1;
        if n as usize > self.blocks.len() {
            self.blocks.retain(|&b, _| b < first || b >= first + n);
        } else {
            for b in first..first + n {
                self.blocks.remove(&b);
            }
        }
    }
}

impl fmt::Debug for MetaFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetaFile").field("len", &self.inner.len.load(Ordering::Relaxed)).finish()
    }
}

fn io_err(e: Error) -> io::Error {
    io::Error::other(e.to_string())
}

/// What a check of every copy of the meta-file found
/// ([`MetaFile::check_copies`]).
#[derive(Debug, Clone, Default)]
pub struct CopyCheck {
    /// Blocks read and verified, every copy counted.
    pub checked: u64,
    /// Blocks (data or checksum pages) a copy got wrong or could not read
    /// while another copy holds them.
    pub damaged: u64,
    /// Blocks no copy holds as written (checksum pages at
    /// `2^36 + page`).
    pub lost: Vec<u64>,
}

impl MetaFile {
    /// The context of the meta-file's own requests (no file, no journal
    /// batch: its tree is the superblocks'), its records to `sink`.
    fn io<'a>(&'a self, sink: &'a (dyn Fn(NodeRecord) + Sync)) -> IoCtx<'a> {
        IoCtx {
            owner: 0,
            origin: crate::blocks::Origin::NONE,
            storage: &self.inner.storage,
            epoch: 0,
            sink,
            repair: false,
        }
    }

    /// The meta-file of `len` bytes stored by `layout`.
    pub fn new(storage: Arc<Storage>, layout: Layout, len: u64, read_only: bool) -> MetaFile {
        Self::with(storage, layout, len, read_only, true)
    }

    /// A read-only meta-file over an image of its data alone (no checksum
    /// pages): what the fuzz target and image tests open.
    pub fn unchecked(storage: Arc<Storage>, layout: Layout, len: u64) -> MetaFile {
        Self::with(storage, layout, len, true, false)
    }

    fn with(storage: Arc<Storage>, layout: Layout, len: u64, read_only: bool, verify: bool) -> MetaFile {
        MetaFile {
            inner: Arc::new(FileInner {
                storage,
                layout: RwLock::new(Arc::new(layout)),
                len: AtomicU64::new(len),
                synced_len: AtomicU64::new(len),
                recorded_len: AtomicU64::new(len),
                changed: AtomicBool::new(false),
                scratch: read_only.then(|| Mutex::new(HashMap::new())),
                sums: Mutex::new(HashMap::new()),
                verify,
                writing: Mutex::new(()),
                unwritten: Mutex::new(Default::default()),
                header_from: AtomicUsize::new(usize::MAX),
                damaged: AtomicBool::new(false),
                sb: Mutex::new(None),
                ahead: Mutex::new(ReadAhead::default()),
                sealed: AtomicBool::new(false),
            }),
        }
    }

    fn handle(&self) -> MetaFile {
        MetaFile { inner: self.inner.clone() }
    }

    pub fn layout(&self) -> Arc<Layout> {
        self.inner.layout.read().clone()
    }

    /// Whether a device of the pool pays a wait for each request
    /// (`Device::seeks`): then every miss reads its run ([`ReadAhead`]).
    fn seeks(&self) -> bool {
        self.inner.storage.devs.iter().any(|d| d.dev().seeks())
    }

    pub fn len(&self) -> u64 {
        self.inner.len.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Gives the backend the superblock to write if the meta-file grows
    /// during the commit that follows.
    pub fn arm(&self, sb: Superblock) {
        *self.inner.sb.lock() = Some(sb);
    }

    /// Takes the armed superblock back (as last written, if it was).
    pub fn disarm(&self) -> Option<Superblock> {
        self.inner.sb.lock().take()
    }

    /// Puts a copy of the meta-file's content on a new tree (moving the
    /// meta-data off a device), then stores through it. The caller holds
    /// the commit lock, so nothing writes meanwhile; readers go on reading
    /// the old tree until the switch.
    pub fn copy_to(&self, fresh: Layout) -> Result<Arc<Layout>> {
        if let Err(e) = self.fill(&fresh) {
            // Nothing names the fresh tree: its space goes straight back.
            fresh.extents(&mut |d, s, l| {
                if let Some(a) = self.inner.storage.allocs.get(d as usize) {
                    a.free_now(s, l);
                }
            });
            return Err(e);
        }
        let old = self.layout();
        let fresh = Arc::new(fresh);
        *self.inner.layout.write() = fresh.clone();
        self.inner.changed.store(true, Ordering::Release);
        Ok(old)
    }

    /// Writes the meta-file's content and checksum pages through `fresh`.
    fn fill(&self, fresh: &Layout) -> Result<()> {
        let len = self.len();
        let old = self.layout();
        let io = self.io(&crate::blocks::ignore_records);
        let step = 256 * BLOCK_SIZE as u64;
        let mut buf = vec![0u8; step as usize];
        let mut off = 0;
        // Data read and checked block by block (a bad block comes from a
        // good copy), which also loads every checksum page it covers.
        while off < len {
            let n = (len - off).min(step).div_ceil(BLOCK_SIZE as u64) * BLOCK_SIZE as u64;
            let b = &mut buf[..n as usize];
            self.read_blocks(&old, off / BLOCK_SIZE as u64, b)?;
            fresh.root().write(&io, off / BLOCK_SIZE as u64, b)?;
            off += n;
        }
        let pages = (len.div_ceil(BLOCK_SIZE as u64)).div_ceil(SUMS_PER_PAGE);
        for p in 0..pages {
            let page = self.sum_page(&old, p)?;
            fresh.root().write(&io, SUMS_BASE + p, &page_bytes(&page))?;
        }
        self.inner.storage.flush_all()
    }

    /// Checksum page `p`, from memory or read from `layout` (the copy
    /// that is read may be stale or damaged: entries that disagree with
    /// their blocks are settled by [`MetaFile::recover`]).
    fn sum_page(&self, layout: &Layout, p: u64) -> Result<Box<[u32]>> {
        if let Some(v) = self.inner.sums.lock().get(&p) {
            return Ok(v.clone());
        }
        let io = self.io(&crate::blocks::ignore_records);
        let mut b = vec![0u8; BLOCK_SIZE];
        let mut page = match layout.root().read(&io, SUMS_BASE + p, &mut b) {
            Ok(()) => valid_page(&b),
            Err(_) => None,
        };
        if page.is_none() {
            // A copy lost or damaged it: another copy's will do.
            for child in Self::copies(layout) {
                if child.read(&io, SUMS_BASE + p, &mut b).is_ok() {
                    if let Some(v) = valid_page(&b) {
                        tracing::warn!("meta-file checksum page {p}: a copy had it wrong; read from another copy");
                        self.inner.damaged.store(true, Ordering::Release);
                        page = Some(v);
                        break;
                    }
                    self.count_bad(&child, SUMS_BASE + p);
                }
            }
        }
        let page = page.ok_or_else(|| {
            Error::Checksum(format!(
                "meta-file checksum page {p}: damaged on every copy (the meta-data store is damaged)"
            ))
        })?;
        Ok(self.inner.sums.lock().entry(p).or_insert(page).clone())
    }

    /// Block `f`'s checksum entry (its page read once, then kept).
    fn sum_entry(&self, layout: &Layout, f: u64) -> Result<u32> {
        let (p, i) = (f / SUMS_PER_PAGE, (f % SUMS_PER_PAGE) as usize);
        if let Some(v) = self.inner.sums.lock().get(&p) {
            return Ok(v[i]);
        }
        Ok(self.sum_page(layout, p)?[i])
    }

    /// A fresh checksum page (for blocks the file grows into).
    fn new_sum_page(&self, p: u64) -> Box<[u32]> {
        self.inner.sums.lock().entry(p).or_insert_with(|| vec![0u32; SUMS_PER_PAGE as usize].into()).clone()
    }

    /// Block `fblk` read from each copy of a replicated meta-file until
    /// one agrees with its own checksum page; that copy's block and
    /// checksum page are taken (and the block written back over the copies
    /// that had it wrong, when not read-only).
    fn recover(&self, layout: &Layout, fblk: u64, out: &mut [u8]) -> Result<()> {
        let io = self.io(&crate::blocks::ignore_records);
        let p = fblk / SUMS_PER_PAGE;
        let copies = Self::copies(layout);
        let mut good = None;
        let mut bad = Vec::new();
        for (c, child) in copies.iter().enumerate() {
            let mut b = vec![0u8; BLOCK_SIZE];
            let mut sp = vec![0u8; BLOCK_SIZE];
            if child.read(&io, fblk, &mut b).is_err() || child.read(&io, SUMS_BASE + p, &mut sp).is_err() {
                continue;
            }
            let Some(page) = valid_page(&sp) else {
                bad.push(c);
                continue;
            };
            if sum_ok(page[(fblk % SUMS_PER_PAGE) as usize], &b) {
                if good.is_none() {
                    good = Some((b, page));
                }
            } else {
                bad.push(c);
            }
        }
        let Some((b, page)) = good else {
            return Err(Error::Checksum(format!(
                "meta-file block {fblk}: no copy agrees with its checksum (the meta-data store is damaged)"
            )));
        };
        tracing::warn!("meta-file block {fblk}: a copy disagreed with its checksum; read from another copy");
        self.inner.damaged.store(true, Ordering::Release);
        out.copy_from_slice(&b);
        // Only this block's entry is taken from the copy: the rest of the
        // page in memory may be newer than any copy's.
        let i = (fblk % SUMS_PER_PAGE) as usize;
        if let Some(m) = self.inner.sums.lock().get_mut(&p) {
            m[i] = page[i];
        }
        for &c in &bad {
            self.count_bad(&copies[c], fblk);
        }
        if self.inner.scratch.is_none() {
            for c in bad {
                if copies[c].write(&io, fblk, &b).is_ok() {
                    crate::blocks::each_device_of(&copies[c], fblk, 1, &mut |d, k| {
                        if let Some(h) = self.inner.storage.devs.get(d as usize) {
                            h.count_repaired(k);
                        }
                    });
                }
            }
        }
        Ok(())
    }

    /// Counts block `fblk` of a copy that disagreed with its checksum as a
    /// checksum error of the device holding it.
    fn count_bad(&self, copy: &Arc<dyn Block>, fblk: u64) {
        crate::blocks::each_device_of(copy, fblk, 1, &mut |d, k| {
            if let Some(h) = self.inner.storage.devs.get(d as usize) {
                h.count_checksum_errors(k);
            }
        });
    }

    /// The copies of the meta-file: the children of its root, or the root
    /// itself when it keeps one copy.
    fn copies(layout: &Layout) -> Vec<Arc<dyn Block>> {
        let root = layout.root();
        if root.children().is_empty() {
            vec![root.clone()]
        } else {
            root.children().to_vec()
        }
    }

    /// Whether every device under a copy serves reads now.
    fn copy_readable(&self, copy: &dyn Block) -> bool {
        let mut ok = true;
        let mut stack: Vec<&dyn Block> = vec![copy];
        while let Some(b) = stack.pop() {
            if let Some(d) = b.device() {
                ok &= self.inner.storage.devs.get(d as usize).is_some_and(|h| h.state().readable());
            }
            stack.extend(b.children().iter().map(|c| &**c));
        }
        ok
    }

    /// The meta-file's blocks (its length in blocks): what
    /// [`MetaFile::check_copies`] walks.
    pub fn blocks(&self) -> u64 {
        self.len().div_ceil(BLOCK_SIZE as u64)
    }

    /// Reads blocks [first, first + n) of every copy whose devices serve
    /// reads, and checks each against its checksum; with `first` 0 the
    /// checksum pages are checked too, each against the page as written.
    /// A block a copy gets wrong (or cannot read) while another holds it
    /// marks the file damaged, so the next checkpoint copies it whole from
    /// the good blocks; a block no copy holds is counted lost. Block 0,
    /// redb's header, is left to redb: it is rewritten on every copy at
    /// every commit and carries its own checksums. The caller keeps
    /// commits out meanwhile (they write the blocks checked).
    pub fn check_copies(&self, first: u64, n: u64, out: &mut CopyCheck) -> Result<()> {
        let _w = self.inner.writing.lock();
        let layout = self.layout();
        let copies: Vec<Arc<dyn Block>> =
            Self::copies(&layout).into_iter().filter(|c| self.copy_readable(&**c)).collect();
        let io = self.io(&crate::blocks::ignore_records);
        let end = (first + n).min(self.blocks());
        let first = first.max(1);
        // A read-only open keeps the store's own writes in memory, their
        // checksums with them: those blocks, and the checksum pages they
        // changed, are not on the devices to check.
        let kept: std::collections::HashSet<u64> =
            self.inner.scratch.as_ref().map(|s| s.lock().keys().copied().collect()).unwrap_or_default();
        if first < end {
            let nb = (end - first) as usize;
            let mut good = vec![false; nb];
            let mut bad = vec![false; nb];
            let mut buf = vec![0u8; nb * BLOCK_SIZE];
            let sums = (first..end).map(|f| self.sum_entry(&layout, f)).collect::<Result<Vec<u32>>>()?;
            for copy in &copies {
                let whole = copy.read(&io, first, &mut buf).is_ok();
                for (i, b) in buf.chunks_mut(BLOCK_SIZE).enumerate() {
                    if kept.contains(&(first + i as u64)) {
                        good[i] = true;
                        continue;
                    }
                    let read = whole || copy.read(&io, first + i as u64, b).is_ok();
                    out.checked += 1;
                    if read && sum_ok(sums[i], b) {
                        good[i] = true;
                    } else {
                        bad[i] = true;
                        if read {
                            self.count_bad(copy, first + i as u64);
                        }
                    }
                }
            }
            for i in 0..nb {
                if !good[i] {
                    out.lost.push(first + i as u64);
                } else if bad[i] {
                    out.damaged += 1;
                }
            }
        }
        if first <= 1 {
            let unwritten = self.inner.unwritten.lock().clone();
            let pages = self.blocks().div_ceil(SUMS_PER_PAGE);
            let mut b = vec![0u8; BLOCK_SIZE];
            let kept_pages: std::collections::HashSet<u64> = kept.iter().map(|f| f / SUMS_PER_PAGE).collect();
            for p in (0..pages).filter(|p| !unwritten.contains(p) && !kept_pages.contains(p)) {
                // As written: from memory, or from a copy whose page is whole.
                let want = match self.sum_page(&layout, p) {
                    Ok(page) => page_bytes(&page),
                    Err(_) => {
                        out.lost.push(SUMS_BASE + p);
                        continue;
                    }
                };
                for copy in &copies {
                    out.checked += 1;
                    match copy.read(&io, SUMS_BASE + p, &mut b) {
                        Err(_) => out.damaged += 1,
                        Ok(()) if b != want => {
                            out.damaged += 1;
                            self.count_bad(copy, SUMS_BASE + p);
                        }
                        Ok(()) => {}
                    }
                }
            }
        }
        if out.damaged > 0 {
            self.mark_damaged();
        }
        Ok(())
    }

    /// Marks the file as having a damaged copy (kept for a later checkpoint).
    pub fn mark_damaged(&self) {
        self.inner.damaged.store(true, Ordering::Release);
    }

    /// Refuses every later write, length change and sync: the pool was
    /// closed (`Fs::close`), its last checkpoint is the store's state, and
    /// the store's own writes when it is dropped (redb's allocator state
    /// and header) must not land on devices another open may be using by
    /// then. The next open recovers redb's header from that checkpoint, as
    /// after any commit (quick repair).
    pub fn seal(&self) {
        self.inner.sealed.store(true, Ordering::Release);
    }

    fn check_open(&self) -> io::Result<()> {
        if self.inner.sealed.load(Ordering::Acquire) {
            return Err(io::Error::other("the pool was closed: the meta-file takes no more writes"));
        }
        Ok(())
    }

    /// Whether a damaged copy was met and not yet made whole.
    pub fn is_damaged(&self) -> bool {
        self.inner.damaged.load(Ordering::Acquire)
    }

    /// Whether reads are checked against the meta-file's checksums (not on
    /// an image opened without them).
    pub fn verifies(&self) -> bool {
        self.inner.verify
    }

    /// Whether a damaged copy was met since the last call.
    pub fn take_damaged(&self) -> bool {
        self.inner.damaged.swap(false, Ordering::AcqRel)
    }

    /// The encoded tree and length for a superblock.
    pub fn describe(&self) -> (Vec<u8>, u64) {
        let mut e = Encoder::new();
        self.layout().encode(&mut e);
        (e.into_inner(), self.len())
    }

    /// Writes the superblocks with the meta-file's tree and length when
    /// either changed since they were last written. The length recorded is
    /// never less than at the previous call: a shorter length is recorded
    /// one sync later, once the header that stopped reaching past it is
    /// durable (redb refuses a file shorter than its header says).
    fn persist(&self) -> Result<()> {
        let len = self.len();
        let floor = self.inner.synced_len.swap(len, Ordering::AcqRel);
        let record = len.max(floor);
        let changed = self.inner.changed.swap(false, Ordering::AcqRel);
        if !changed && record == self.inner.recorded_len.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut armed = self.inner.sb.lock();
        let Some(sb) = armed.as_mut() else {
            self.inner.changed.store(true, Ordering::Release);
            tracing::debug!("meta-file: length {record} not recorded (no commit armed)");
            return Err(Error::Device("the meta-file changed shape outside a meta-data commit".into()));
        };
        let mut e = Encoder::new();
        self.layout().encode(&mut e);
        sb.meta_layout = e.into_inner();
        sb.meta_len = record;
        sb.generation += 1;
        if let Err(e) = self.inner.storage.write_superblocks(sb) {
            self.inner.changed.store(true, Ordering::Release);
            return Err(e);
        }
        self.inner.recorded_len.store(record, Ordering::Release);
        Ok(())
    }

    /// Reads whole blocks, each checked against its checksum: a block that
    /// disagrees is read from another copy, and is an error (never data)
    /// when none agrees.
    fn read_blocks(&self, layout: &Layout, fblk: u64, buf: &mut [u8]) -> Result<()> {
        let io = self.io(&crate::blocks::ignore_records);
        layout.root().read(&io, fblk, buf)?;
        let scratch = self.inner.scratch.as_ref().map(|s| s.lock());
        for (i, b) in buf.chunks_mut(BLOCK_SIZE).enumerate() {
            let f = fblk + i as u64;
            if let Some(v) = scratch.as_ref().and_then(|s| s.get(&f)) {
                b.copy_from_slice(v);
                continue;
            }
            if f == 0 {
                // redb's header, the one block it rewrites in place (each
                // commit, between syncs): a checksum kept apart from it
                // could not be written atomically with it, so the header is
                // checked by redb (its commit slots carry their own
                // checksums), and a header a copy got wrong is read from
                // another copy (`MetaStore::open`).
                let from = self.inner.header_from.load(Ordering::Acquire);
                if let Some(child) = layout.root().children().get(from) {
                    let io = self.io(&crate::blocks::ignore_records);
                    child.read(&io, 0, b)?;
                }
                continue;
            }
            if !self.inner.verify {
                continue;
            }
            if !sum_ok(self.sum_entry(layout, f)?, b) {
                self.recover(layout, f, b)?;
            }
        }
        Ok(())
    }

    fn write_blocks(&self, fblk: u64, data: &[u8]) -> Result<()> {
        let r = self.write_blocks_through(fblk, data);
        // After the write: a read ahead that raced it keeps nothing.
        self.inner.ahead.lock().drop_range(fblk, (data.len() / BLOCK_SIZE) as u64);
        r
    }

    /// One block redb asked for, from what was read ahead or with the rest
    /// of its aligned run.
    fn read_block_ahead(&self, layout: &Layout, f: u64, out: &mut [u8]) -> Result<()> {
        // Asked before the lock: the devices' slots are not taken under it.
        let seeks = self.seeks();
        let gen = {
            let mut a = self.inner.ahead.lock();
            if let Some(b) = a.blocks.get(&f) {
                out.copy_from_slice(b);
                return Ok(());
            }
            if !a.missed(f, seeks) {
                drop(a);
                return self.read_blocks(layout, f, out);
            }
            a.generation
        };
        let len = MetaFile::len(self) / BLOCK_SIZE as u64;
        let first = f - f % READ_AHEAD_BLOCKS;
        let end = (first + READ_AHEAD_BLOCKS).min(len).max(f + 1);
        // The thread's run buffer, kept from one miss to the next: a new
        // zeroed 64 KiB at each miss was memory new to the process, paid
        // for in page faults by the lookup that missed.
        let mut run = RUN.with(|r| r.take());
        run.resize((end - first) as usize * BLOCK_SIZE, 0);
        let r = self.read_blocks(layout, first, &mut run);
        let r = r.map(|()| self.keep_ahead(f, first, gen, &run, out));
        RUN.with(|r| r.replace(run));
        if r.is_err() {
            // A bad block beside it must not fail this one.
            return self.read_blocks(layout, f, out);
        }
        Ok(())
    }

    /// Hands `out` its block of a run read ahead from `first`, and keeps
    /// the others unless a write came since `gen`.
    fn keep_ahead(&self, f: u64, first: u64, gen: u64, run: &[u8], out: &mut [u8]) {
        let at = (f - first) as usize * BLOCK_SIZE;
        out.copy_from_slice(&run[at..at + BLOCK_SIZE]);
        let mut a = self.inner.ahead.lock();
        if a.generation != gen {
            return;
        }
        // Block 0 is redb's header, rewritten in place and read apart.
        for (i, b) in run.chunks(BLOCK_SIZE).enumerate() {
            let blk = first + i as u64;
            if blk != 0 && blk != f && a.blocks.insert(blk, b.into()).is_none() {
                a.order.push_back(blk);
            }
        }
        while a.blocks.len() > READ_AHEAD_KEEP {
            let Some(old) = a.order.pop_front() else { break };
            a.blocks.remove(&old);
        }
    }

    fn write_blocks_through(&self, fblk: u64, data: &[u8]) -> Result<()> {
        // One writer at a time from here to the checksum pages' writes, so
        // a page written is never older than the entries another wrote.
        let _w = self.inner.writing.lock();
        let layout = self.layout();
        // The checksums first in memory, then the data, then the checksum
        // pages: a crash between leaves blocks no committed state uses.
        let mut touched = Vec::new();
        // An image opened unchecked has no checksum pages to keep.
        let keep = if self.inner.verify { data.len() } else { 0 };
        let mut held: Option<(u64, Box<[u32]>)> = None;
        for (i, b) in data[..keep].chunks(BLOCK_SIZE).enumerate() {
            let f = fblk + i as u64;
            let p = f / SUMS_PER_PAGE;
            if held.as_ref().is_none_or(|h| h.0 != p) {
                if let Some((q, page)) = held.take() {
                    self.inner.sums.lock().insert(q, page);
                }
                held = Some((p, self.sum_page(&layout, p)?));
                touched.push(p);
            }
            if let Some(h) = held.as_mut() {
                h.1[(f % SUMS_PER_PAGE) as usize] = sum_of(b);
            }
        }
        if let Some((q, page)) = held {
            self.inner.sums.lock().insert(q, page);
        }
        if let Some(s) = &self.inner.scratch {
            let mut s = s.lock();
            for (i, b) in data.chunks(BLOCK_SIZE).enumerate() {
                s.insert(fblk + i as u64, b.into());
            }
            return Ok(());
        }
        let changed = &self.inner.changed;
        let sink = move |_: NodeRecord| changed.store(true, Ordering::Release);
        let io = self.io(&sink);
        layout.root().write(&io, fblk, data)?;
        self.inner.unwritten.lock().extend(touched);
        Ok(())
    }

    /// Writes the checksum pages changed since the last sync.
    fn write_sum_pages(&self) -> Result<()> {
        let _w = self.inner.writing.lock();
        let pages: Vec<u64> = std::mem::take(&mut *self.inner.unwritten.lock()).into_iter().collect();
        if pages.is_empty() {
            return Ok(());
        }
        let layout = self.layout();
        let changed = &self.inner.changed;
        let sink = move |_: NodeRecord| changed.store(true, Ordering::Release);
        let io = self.io(&sink);
        // Neighbouring pages go in one write.
        let mut i = 0;
        while i < pages.len() {
            let mut j = i + 1;
            while j < pages.len() && pages[j] == pages[j - 1] + 1 {
                j += 1;
            }
            let mut buf = Vec::with_capacity((j - i) * BLOCK_SIZE);
            for &p in &pages[i..j] {
                buf.extend_from_slice(&page_bytes(&self.sum_page(&layout, p)?));
            }
            if let Err(e) = layout.root().write(&io, SUMS_BASE + pages[i], &buf) {
                self.inner.unwritten.lock().extend(&pages[i..]);
                return Err(e);
            }
            i = j;
        }
        Ok(())
    }

    /// Writes `data` at a byte offset, merging partial blocks.
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        let bs = BLOCK_SIZE as u64;
        let end = offset + data.len() as u64;
        if offset.is_multiple_of(bs) && end.is_multiple_of(bs) {
            return self.write_blocks(offset / bs, data);
        }
        let first = offset / bs;
        let nblk = end.div_ceil(bs) - first;
        let mut buf = vec![0u8; (nblk * bs) as usize];
        let layout = self.layout();
        self.read_blocks(&layout, first, &mut buf)?;
        let at = (offset - first * bs) as usize;
        buf[at..at + data.len()].copy_from_slice(data);
        self.write_blocks(first, &buf)
    }
}

impl redb::StorageBackend for MetaFile {
    fn len(&self) -> io::Result<u64> {
        Ok(MetaFile::len(self))
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let end = offset.checked_add(out.len() as u64).ok_or_else(|| io::Error::other("read past the end"))?;
        if end > MetaFile::len(self) {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end of the meta-file"));
        }
        let bs = BLOCK_SIZE as u64;
        let layout = self.layout();
        if offset.is_multiple_of(bs) && end.is_multiple_of(bs) {
            if out.len() == BLOCK_SIZE && offset != 0 {
                return self.read_block_ahead(&layout, offset / bs, out).map_err(io_err);
            }
            return self.read_blocks(&layout, offset / bs, out).map_err(io_err);
        }
        let first = offset / bs;
        let nblk = end.div_ceil(bs) - first;
        let mut buf = vec![0u8; (nblk * bs) as usize];
        self.read_blocks(&layout, first, &mut buf).map_err(io_err)?;
        let at = (offset - first * bs) as usize;
        out.copy_from_slice(&buf[at..at + out.len()]);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_open()?;
        // Blocks past a shrunk end are zeroed when it grows again.
        self.inner.ahead.lock().drop_range(0, u64::MAX / 2);
        let old = self.inner.len.load(Ordering::Acquire);
        if len <= old {
            tracing::debug!("meta-file shrinks from {old} to {len} bytes");
            // Space past a shrunk end stays with the meta-file (the state
            // committed before may still use it) and is reused when it
            // grows again; the superblocks learn the shorter length once
            // a header that no longer reaches past it is durable.
            self.inner.len.store(len, Ordering::Release);
            return Ok(());
        }
        if self.inner.scratch.is_some() {
            self.inner.len.store(len, Ordering::Release);
            return Ok(());
        }
        // The new part is written with zeros now: its space is taken in
        // long runs (the tree stays small enough for a superblock to
        // record), and whatever a longer file left there before it shrank,
        // or before a crash, reads as the zeros redb expects of new length.
        // The checksum pages covering it go first, in one run too.
        let bs = BLOCK_SIZE as u64;
        if !old.is_multiple_of(bs) {
            return Err(io::Error::other(format!("meta-file length {old} is not a whole number of blocks")));
        }
        let (first, end) = (old / bs, len.div_ceil(bs));
        tracing::debug!("meta-file grows from {old} to {len} bytes");
        let w = self.inner.writing.lock();
        let layout = self.layout();
        let zero_sum = sum_of(&[0u8; BLOCK_SIZE]);
        let (p0, p1) = (first / SUMS_PER_PAGE, end.div_ceil(SUMS_PER_PAGE));
        let mut pages = Vec::with_capacity(((p1 - p0) as usize) * BLOCK_SIZE);
        for p in p0..p1 {
            let mut page = if p * SUMS_PER_PAGE < first {
                self.sum_page(&layout, p).map_err(io_err)?
            } else {
                self.new_sum_page(p)
            };
            for f in (p * SUMS_PER_PAGE).max(first)..((p + 1) * SUMS_PER_PAGE).min(end) {
                page[(f % SUMS_PER_PAGE) as usize] = zero_sum;
            }
            pages.extend_from_slice(&page_bytes(&page));
            self.inner.sums.lock().insert(p, page);
        }
        let changed = &self.inner.changed;
        let sink = move |_: NodeRecord| changed.store(true, Ordering::Release);
        let io = self.io(&sink);
        layout.root().write(&io, SUMS_BASE + p0, &pages).map_err(io_err)?;
        // Zeroed by the devices where they can (image files and block
        // devices both can), so growth costs no writes of its own.
        let mut f = first;
        while f < end {
            let n = (end - f).min((GROW_STEP / BLOCK_SIZE) as u64);
            layout.root().write_zeroes(&io, f, n).map_err(io_err)?;
            f += n;
        }
        drop(w);
        self.inner.len.store(len, Ordering::Release);
        // The superblocks name the longer file before redb can write a
        // header that reaches into it.
        self.inner.changed.store(true, Ordering::Release);
        self.persist().map_err(io_err)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.check_open()?;
        if self.inner.scratch.is_some() {
            return Ok(());
        }
        self.write_sum_pages().map_err(io_err)?;
        self.inner.storage.flush_all().map_err(io_err)?;
        self.persist().map_err(io_err)
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.check_open()?;
        let end = offset.checked_add(data.len() as u64).ok_or_else(|| io::Error::other("write past the end"))?;
        if end > MetaFile::len(self) {
            return Err(io::Error::other("write past the end of the meta-file"));
        }
        self.write_at(offset, data).map_err(io_err)
    }
}

/// The open store.
pub struct MetaStore {
    db: Database,
    file: MetaFile,
    inode_reads: AtomicU64,
    name_reads: AtomicU64,
    commits: AtomicU64,
    /// The free map as the last checkpoint wrote it (sorted; `None` until a
    /// checkpoint of this open wrote one), so the next writes only what
    /// differs.
    free_written: Mutex<Option<Vec<(u32, u64, u64)>>>,
    /// Directory entries read from the store, kept for the next lookup.
    entries: EntryCache,
    /// The last commit's inode and name tables, opened once and shared by
    /// every lookup until the next commit (a read transaction and two
    /// table opens per lookup cost more than the lookup).
    snap: RwLock<Option<Arc<Snapshot>>>,
}

/// Tables of one committed state, for point reads.
struct Snapshot {
    inodes: redb::ReadOnlyTable<u64, &'static [u8]>,
    names: redb::ReadOnlyTable<(u64, &'static [u8]), (u64, u32, u64)>,
}

/// The items of `v` in the order that fills the B-tree's leaves: by `key`,
/// stably (equal keys keep the order they were recorded in), in two
/// passes.
///
/// The store splits a full leaf at its middle, so keys added one after the
/// other at a tree's end (the new files of a checkpoint: their inode
/// numbers, names and cookies all grow) would leave every leaf they fill
/// half empty, and a checkpoint would write twice the pages its records
/// need. The first pass adds three keys of every five, in order, filling
/// leaves to half; the second adds the other two between them, in order,
/// which brings those leaves to five sixths without splitting them again
/// (a leaf left at half plus one record gains two thirds of that: room to
/// spare in a 4 KiB page for records up to a few hundred bytes).
/// Keys scattered over the tree (changes of existing files) land in the
/// same leaves either way.
fn in_fill_order<'a, T, K: Ord>(v: &'a [T], key: impl Fn(&'a T) -> K) -> impl Iterator<Item = &'a T> {
    let mut order: Vec<&'a T> = v.iter().collect();
    order.sort_by_cached_key(|t| key(t));
    // Runs of equal keys stay whole, in one pass, in their order.
    let (mut first, mut then) = (Vec::with_capacity(order.len()), Vec::with_capacity(order.len() * 2 / 5 + 1));
    let mut run = 0usize;
    for (i, t) in order.iter().enumerate() {
        if i > 0 && key(order[i - 1]) != key(t) {
            run += 1;
        }
        if matches!(run % 5, 1 | 3) { &mut then } else { &mut first }.push(*t);
    }
    first.into_iter().chain(then)
}

impl MetaStore {
    /// The page bytes redb is given for a store cache of `cache_bytes` of
    /// memory. redb keeps each 4 KiB page in an allocation of 4,112 bytes
    /// (the page and its reference counts), which mimalloc and jemalloc
    /// serve from their 5 KiB size class: a cached page occupies 5 KiB. The
    /// store is given four fifths of its share so its pages occupy the
    /// memory configured, not a quarter more (at ten million files the
    /// 128 MiB default held 160 MiB).
    fn page_bytes(cache_bytes: usize) -> usize {
        cache_bytes.max(1 << 20) / 5 * 4
    }

    fn builder(cache_bytes: usize) -> redb::Builder {
        let mut b = Database::builder();
        b.set_cache_size(Self::page_bytes(cache_bytes));
        b
    }

    /// The part of a store cache of `cache_bytes` that holds a write
    /// transaction's changed pages until its commit (redb gives it a
    /// tenth of its pages); pages beyond it are written out early.
    pub fn write_buffer_bytes(cache_bytes: usize) -> usize {
        Self::page_bytes(cache_bytes) / 10
    }

    /// Makes the store of a new pool: empty tables and the `sys` record.
    pub fn create(
        file: MetaFile,
        cache_bytes: usize,
        entries: usize,
        sys: Sys,
        root: (Ino, Vec<u8>),
        free: Vec<(u32, u64, u64)>,
    ) -> Result<MetaStore> {
        let db = guarded("creating the store", || {
            Self::builder(cache_bytes).create_with_backend(file.handle()).map_err(store_err)
        })?;
        let s = MetaStore {
            db,
            file,
            inode_reads: AtomicU64::new(0),
            name_reads: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            free_written: Mutex::new(None),
            entries: EntryCache::new(entries, 16),
            snap: RwLock::new(None),
        };
        let mut delta = Delta { sys, free: Some(free), ..Default::default() };
        delta.put_inode(root.0, |e| e.buf.extend_from_slice(&root.1));
        s.commit(&delta, true)?;
        Ok(s)
    }

    /// Opens the store of a pool. redb checks its own header and, after a
    /// crash, recovers from the last commit (each commit saves its
    /// allocator state, so this is quick).
    /// `entries` directory entries are cached (0: none), in `entry_shards`
    /// shards.
    pub fn open(file: MetaFile, cache_bytes: usize, entries: usize, entry_shards: usize) -> Result<MetaStore> {
        let open = |from: usize| {
            file.inner.header_from.store(from, Ordering::Release);
            guarded("opening the store", || {
                let db = Self::builder(cache_bytes).create_with_backend(file.handle()).map_err(store_err)?;
                // The tables are read once here, so a header that names
                // damaged roots fails now, while another copy can be tried.
                let t = db.begin_read().map_err(store_err)?;
                t.open_table(SYS).map_err(store_err)?;
                t.open_table(INODES).map_err(store_err)?;
                drop(t);
                Ok(db)
            })
        };
        let copies = file.layout().root().children().len();
        let mut r = open(usize::MAX);
        for c in 0..copies {
            if r.is_ok() {
                break;
            }
            tracing::warn!(
                "meta-data store: {}; trying the header of copy {c}",
                r.as_ref().err().map(|e| e.to_string()).unwrap_or_default()
            );
            r = open(c);
            if r.is_ok() {
                file.inner.damaged.store(true, Ordering::Release);
            }
        }
        file.inner.header_from.store(usize::MAX, Ordering::Release);
        let db = r?;
        Ok(MetaStore {
            db,
            file,
            inode_reads: AtomicU64::new(0),
            name_reads: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            free_written: Mutex::new(None),
            entries: EntryCache::new(entries, entry_shards),
            snap: RwLock::new(None),
        })
    }

    /// A store on a memory device holding only a root directory record
    /// (`root`), for tests and fuzzing of what lies above the store.
    pub fn scratch(root: Vec<u8>) -> Result<MetaStore> {
        use crate::device::{Device, DeviceHandle, MemDevice};
        use crate::pool::Allocator;
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new("scratch", 256 << 20));
        let h = DeviceHandle::new(0, dev);
        let blocks = h.blocks();
        let storage = Arc::new(Storage { devs: vec![h].into(), allocs: vec![Allocator::new(2, blocks)].into() });
        let spec = crate::blocks::Spec { kind: "extent".into(), params: vec![], children: vec![], device: Some(0) };
        let file = MetaFile::new(storage, Layout::build(&spec)?, 0, false);
        file.arm(Superblock::scratch());
        let sys = Sys { cursor: Cursor { tail: 0, head: 0, seq: 1 }, next_ino: 2, inodes: 1, epoch: 0 };
        MetaStore::create(file, 4 << 20, 1024, sys, (1, root), Vec::new())
    }

    pub fn file(&self) -> &MetaFile {
        &self.file
    }

    fn read_txn(&self) -> Result<redb::ReadTransaction> {
        self.db.begin_read().map_err(store_err)
    }

    /// The tables of the last commit, opened on first use after it.
    fn snapshot(&self) -> Result<Arc<Snapshot>> {
        if let Some(s) = self.snap.read().as_ref() {
            return Ok(s.clone());
        }
        let mut w = self.snap.write();
        if let Some(s) = w.as_ref() {
            return Ok(s.clone());
        }
        let t = self.read_txn()?;
        let s = Arc::new(Snapshot {
            inodes: t.open_table(INODES).map_err(store_err)?,
            names: t.open_table(NAMES).map_err(store_err)?,
        });
        *w = Some(s.clone());
        Ok(s)
    }

    pub fn sys(&self) -> Result<Sys> {
        guarded("reading the sys record", || {
            let t = self.read_txn()?;
            let tab = t.open_table(SYS).map_err(store_err)?;
            let v = tab.get("sys").map_err(store_err)?.ok_or_else(|| store_err("no sys record"))?;
            Sys::decode(v.value())
        })
    }

    /// An inode's record, if the checkpoint has it.
    pub fn inode(&self, ino: Ino) -> Result<Option<Vec<u8>>> {
        guarded("reading an inode", || {
            self.inode_reads.fetch_add(1, Ordering::Relaxed);
            let s = self.snapshot()?;
            Ok(s.inodes.get(ino).map_err(store_err)?.map(|v| v.value().to_vec()))
        })
    }

    /// A directory entry as of the checkpoint.
    pub fn lookup(&self, dir: Ino, name: &[u8]) -> Result<Option<StoredEntry>> {
        guarded("looking up an entry", || {
            if let Some(e) = self.entries.get(dir, name) {
                return Ok(Some(e));
            }
            let generation = self.entries.generation();
            self.name_reads.fetch_add(1, Ordering::Relaxed);
            let s = self.snapshot()?;
            let e = s.names.get((dir, name)).map_err(store_err)?.map(|v| {
                let (ino, kind, cookie) = v.value();
                StoredEntry { ino, kind, cookie }
            });
            if let Some(e) = e {
                self.entries.put(generation, dir, name, e);
            }
            Ok(e)
        })
    }

    /// The checkpoint's entries of `dir` with cookies from `from`, in
    /// cookie order, until `f` returns false.
    pub fn entries_from(&self, dir: Ino, from: u64, f: &mut EntryVisitor<'_>) -> Result<()> {
        guarded("listing a directory", || {
            self.name_reads.fetch_add(1, Ordering::Relaxed);
            let t = self.read_txn()?;
            let tab = t.open_table(COOKIES).map_err(store_err)?;
            for r in tab.range((dir, from)..=(dir, u64::MAX)).map_err(store_err)? {
                let (k, v) = r.map_err(store_err)?;
                let (ino, kind, name) = v.value();
                if !f(k.value().1, name, ino, kind)? {
                    break;
                }
            }
            Ok(())
        })
    }

    /// The checkpoint's entries of `dir` in name order, from the names
    /// table: a second index of the entries the cookie table lists, so a
    /// directory whose cookie pages are damaged can still be listed
    /// (salvage). The entries read before an error are handed to `f`, and
    /// the error is returned.
    pub fn entries_by_name(&self, dir: Ino, f: &mut dyn FnMut(&[u8], StoredEntry)) -> Result<()> {
        guarded("listing a directory by name", || {
            let t = self.read_txn()?;
            let tab = t.open_table(NAMES).map_err(store_err)?;
            let from: (u64, &[u8]) = (dir, &[]);
            let range = match dir.checked_add(1) {
                Some(next) => tab.range(from..(next, &[][..])),
                None => tab.range(from..),
            };
            for r in range.map_err(store_err)? {
                let (k, v) = r.map_err(store_err)?;
                let (ino, kind, cookie) = v.value();
                f(k.value().1, StoredEntry { ino, kind, cookie });
            }
            Ok(())
        })
    }

    /// The checkpoint's inode numbers from `from`, in order, until `f`
    /// returns false; those read before an error are handed to `f`, and the
    /// error is returned (salvage steps over a damaged page with it).
    pub fn inos_from(&self, from: Ino, f: &mut dyn FnMut(Ino) -> bool) -> Result<()> {
        guarded("listing inodes", || {
            let t = self.read_txn()?;
            let tab = t.open_table(INODES).map_err(store_err)?;
            for r in tab.range(from..).map_err(store_err)? {
                if !f(r.map_err(store_err)?.0.value()) {
                    break;
                }
            }
            Ok(())
        })
    }

    /// Reads every record of every table (fsck: every page the committed
    /// state uses is read, and verified on the way); the records read.
    pub fn read_all(&self) -> Result<u64> {
        guarded("reading every table", || {
            let t = self.read_txn()?;
            let mut n = 0u64;
            macro_rules! all {
                ($def:expr) => {
                    match t.open_table($def) {
                        Ok(tab) => {
                            for r in tab.iter().map_err(store_err)? {
                                r.map_err(store_err)?;
                                n += 1;
                            }
                        }
                        Err(redb::TableError::TableDoesNotExist(_)) => {}
                        Err(e) => return Err(store_err(e)),
                    }
                };
            }
            all!(INODES);
            all!(NAMES);
            all!(COOKIES);
            all!(FREE);
            all!(ORPHANS);
            all!(LOG_USAGE);
            all!(SYS);
            Ok(n)
        })
    }

    /// Every inode number of the checkpoint, in order.
    pub fn inos(&self) -> Result<Vec<Ino>> {
        guarded("listing inodes", || {
            let t = self.read_txn()?;
            let tab = t.open_table(INODES).map_err(store_err)?;
            let mut v = Vec::with_capacity(tab.len().map_err(store_err)? as usize);
            for r in tab.iter().map_err(store_err)? {
                v.push(r.map_err(store_err)?.0.value());
            }
            Ok(v)
        })
    }

    pub fn orphans(&self) -> Result<Vec<Ino>> {
        guarded("listing orphans", || {
            let t = self.read_txn()?;
            let tab = t.open_table(ORPHANS).map_err(store_err)?;
            let mut v = Vec::new();
            for r in tab.iter().map_err(store_err)? {
                v.push(r.map_err(store_err)?.0.value());
            }
            Ok(v)
        })
    }

    /// The logs' segment usage table at the checkpoint (empty in a pool
    /// written before it was kept).
    pub fn log_usage(&self) -> Result<Vec<(LogSegment, u64, i64)>> {
        guarded("reading the log usage table", || {
            let t = self.read_txn()?;
            let tab = match t.open_table(LOG_USAGE) {
                Ok(tab) => tab,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(e) => return Err(store_err(e)),
            };
            let mut v = Vec::new();
            for r in tab.iter().map_err(store_err)? {
                let (k, u) = r.map_err(store_err)?;
                let (live, mtime) = u.value();
                v.push((k.value(), live, mtime));
            }
            Ok(v)
        })
    }

    /// The permanent error list at the checkpoint: (inode, record); empty
    /// in a pool written before it was kept.
    pub fn errors(&self) -> Result<Vec<(Ino, Vec<u8>)>> {
        guarded("reading the permanent error list", || {
            let t = self.read_txn()?;
            let tab = match t.open_table(ERRORS) {
                Ok(tab) => tab,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(e) => return Err(store_err(e)),
            };
            let mut v = Vec::new();
            for r in tab.iter().map_err(store_err)? {
                let (k, rec) = r.map_err(store_err)?;
                v.push((k.value(), rec.value().to_vec()));
            }
            Ok(v)
        })
    }

    /// The free extents of every device at the checkpoint.
    pub fn free_map(&self) -> Result<Vec<(u32, u64, u64)>> {
        guarded("reading the free map", || {
            let t = self.read_txn()?;
            let tab = t.open_table(FREE).map_err(store_err)?;
            let mut v = Vec::new();
            for r in tab.iter().map_err(store_err)? {
                let (k, l) = r.map_err(store_err)?;
                let (d, s) = k.value();
                v.push((d, s, l.value()));
            }
            Ok(v)
        })
    }

    /// Writes a checkpoint's changes as one transaction. Its commit is the
    /// checkpoint's commit point when `durable`; otherwise the changes are
    /// written to the meta-file and read from it from now on, but a crash
    /// before the next durable commit (which makes them durable with its
    /// own) leaves the store as that one before them.
    pub fn commit(&self, delta: &Delta, durable: bool) -> Result<()> {
        guarded("committing a checkpoint", || {
            let mut pending_free = None;
            let mut t = self.db.begin_write().map_err(store_err)?;
            t.set_quick_repair(true);
            if !durable {
                t.set_durability(redb::Durability::None).map_err(store_err)?;
            }
            {
                // Each table's changes go in in key order (two passes,
                // `in_fill_order`): inserts and removes then walk the
                // B-tree's leaves in order instead of descending to a
                // random leaf each. The sorts are stable: an inode freed
                // and reused within one checkpoint is removed, then
                // inserted, as recorded.
                let mut tab = t.open_table(INODES).map_err(store_err)?;
                for (ino, rec) in in_fill_order(&delta.inodes, |(ino, _)| *ino) {
                    match rec {
                        Some(r) => tab.insert(*ino, delta.record(r)).map_err(store_err)?,
                        None => tab.remove(*ino).map_err(store_err)?,
                    };
                }
                let mut tab = t.open_table(NAMES).map_err(store_err)?;
                for (dir, name, e) in in_fill_order(&delta.names, |(dir, name, _)| (*dir, &**name)) {
                    match e {
                        Some(e) => tab.insert((*dir, &**name), (e.ino, e.kind, e.cookie)).map_err(store_err)?,
                        None => tab.remove((*dir, &**name)).map_err(store_err)?,
                    };
                }
                let mut tab = t.open_table(COOKIES).map_err(store_err)?;
                for (dir, cookie, name) in in_fill_order(&delta.cookies, |(dir, cookie, _)| (*dir, *cookie)) {
                    match name {
                        Some((n, e)) => tab.insert((*dir, *cookie), (e.ino, e.kind, &**n)).map_err(store_err)?,
                        None => tab.remove((*dir, *cookie)).map_err(store_err)?,
                    };
                }
                let mut tab = t.open_table(ORPHANS).map_err(store_err)?;
                for (ino, add) in in_fill_order(&delta.orphans, |(ino, _)| *ino) {
                    if *add {
                        tab.insert(*ino, ()).map_err(store_err)?;
                    } else {
                        tab.remove(*ino).map_err(store_err)?;
                    }
                }
                let mut tab = t.open_table(LOG_USAGE).map_err(store_err)?;
                for (key, u) in &delta.log_usage {
                    match u {
                        Some(u) => tab.insert(*key, *u).map(drop),
                        None => tab.remove(*key).map(drop),
                    }
                    .map_err(store_err)?;
                }
                if let Some(errors) = &delta.errors {
                    let mut tab = t.open_table(ERRORS).map_err(store_err)?;
                    let keep: std::collections::HashSet<Ino> = errors.iter().map(|e| e.0).collect();
                    let mut gone = Vec::new();
                    for r in tab.iter().map_err(store_err)? {
                        let k = r.map_err(store_err)?.0.value();
                        if !keep.contains(&k) {
                            gone.push(k);
                        }
                    }
                    for k in gone {
                        tab.remove(k).map_err(store_err)?;
                    }
                    for (ino, rec) in errors {
                        tab.insert(*ino, rec.as_slice()).map_err(store_err)?;
                    }
                }
                let mut tab = t.open_table(FREE).map_err(store_err)?;
                if let Some(free) = &delta.free {
                    // Only the entries that differ from the last
                    // checkpoint's: a free map of a fragmented pool is not
                    // rewritten for every checkpoint.
                    let mut last = self.free_written.lock();
                    let old = match last.take() {
                        Some(v) => v,
                        None => {
                            let mut v = Vec::new();
                            for r in tab.iter().map_err(store_err)? {
                                let (k, l) = r.map_err(store_err)?;
                                let (d, s) = k.value();
                                v.push((d, s, l.value()));
                            }
                            v
                        }
                    };
                    let mut new = free.clone();
                    if !new.is_sorted() {
                        new.sort_unstable();
                    }
                    let r = free_changes(&old, &new, |key, len| {
                        match len {
                            Some(l) => tab.insert(key, l).map(drop),
                            None => tab.remove(key).map(drop),
                        }
                        .map_err(store_err)
                    });
                    // Until the commit is known good the table may hold
                    // either list: read it again next time.
                    r?;
                    pending_free = Some(new);
                }
                let mut tab = t.open_table(SYS).map_err(store_err)?;
                tab.insert("sys", delta.sys.encode().as_slice()).map_err(store_err)?;
            }
            let r = t.commit().map_err(store_err);
            // Lookups see this commit from here on: the changes it carries
            // leave memory once it returns.
            *self.snap.write() = None;
            r?;
            self.entries.committed(delta.names.iter().map(|(d, n, e)| (*d, n, *e)));
            if pending_free.is_some() {
                *self.free_written.lock() = pending_free;
            }
            self.commits.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
    }

    pub fn stats(&self) -> StoreStats {
        let (page_hits, page_misses, page_evictions) = self.page_stats();
        StoreStats {
            inode_reads: self.inode_reads.load(Ordering::Relaxed),
            name_reads: self.name_reads.load(Ordering::Relaxed),
            page_hits,
            page_misses,
            page_evictions,
            commits: self.commits.load(Ordering::Relaxed),
            bytes: self.file.len(),
            entries: self.entries.counters(),
        }
    }

    /// The page cache's (hits, misses, evictions). redb loads its hit and
    /// total counters one after the other while readers move them, so a hit
    /// counted between the two loads makes its misses negative: a panic
    /// where overflow is checked, a wrapped huge number where it is not. A
    /// few tries find a consistent pair; failing that, the figures read 0.
    fn page_stats(&self) -> (u64, u64, u64) {
        for _ in 0..8 {
            let c = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.db.cache_stats()));
            if let Ok(c) = c.as_ref().map(|c| (c.read_hits(), c.read_misses(), c.evictions())) {
                if c.1 < 1 << 62 {
                    return c;
                }
            }
        }
        (0, 0, 0)
    }
}

/// Walks two sorted free maps and calls `apply` with each entry to put
/// (`Some(length)`) or delete (`None`) to turn `old` into `new`.
fn free_changes(
    old: &[(u32, u64, u64)],
    new: &[(u32, u64, u64)],
    mut apply: impl FnMut((u32, u64), Option<u64>) -> Result<()>,
) -> Result<()> {
    let (mut i, mut j) = (0, 0);
    loop {
        match (old.get(i), new.get(j)) {
            (None, None) => return Ok(()),
            (Some(&(d, s, _)), None) => {
                apply((d, s), None)?;
                i += 1;
            }
            (None, Some(&(d, s, l))) => {
                apply((d, s), Some(l))?;
                j += 1;
            }
            (Some(&(d0, s0, l0)), Some(&(d1, s1, l1))) => match (d0, s0).cmp(&(d1, s1)) {
                std::cmp::Ordering::Less => {
                    apply((d0, s0), None)?;
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    apply((d1, s1), Some(l1))?;
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    if l0 != l1 {
                        apply((d1, s1), Some(l1))?;
                    }
                    i += 1;
                    j += 1;
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{in_fill_order, ReadAhead, READ_AHEAD_BLOCKS, RECENT_MISSES};

    #[test]
    fn read_ahead_follows_walks_through_neighbouring_pages_and_not_random_misses() {
        let mut a = ReadAhead::default();
        assert!(!a.missed(1000, false), "a first miss has no neighbour");
        assert!(a.missed(1001, false), "the next page is a walk");
        assert!(a.missed(1001 + READ_AHEAD_BLOCKS, false), "a run's length on is the walk going on");
        assert!(a.missed(990, false), "a walk backwards");
        assert!(!a.missed(5000, false), "far from every recent miss");
        assert!(!a.missed(90_000, false));
        assert!(a.missed(5003, false) && a.missed(89_990, false), "walks at once are each followed");
        for i in 0..RECENT_MISSES as u64 {
            a.missed(1_000_000 + i * 1000, false);
        }
        assert!(!a.missed(1002, false), "a miss is forgotten after {RECENT_MISSES} others");
        // Block 0 (redb's header, never read ahead) stands for an empty slot.
        let mut a = ReadAhead::default();
        assert!(!a.missed(3, false), "an empty slot is not a miss of block 0");
        // Devices whose requests cost a wait read every miss's run.
        assert!(a.missed(7_000_000, true));
    }

    #[test]
    fn fill_order_adds_every_change_once_equal_keys_together_in_their_order() {
        // (key, order recorded): keys 4 and 7 changed twice.
        let v: Vec<(u32, u32)> = vec![(9, 0), (4, 1), (7, 2), (1, 3), (4, 4), (2, 5), (7, 6), (3, 7), (8, 8), (5, 9)];
        let out: Vec<(u32, u32)> = in_fill_order(&v, |(k, _)| *k).copied().collect();
        let mut sorted = out.clone();
        sorted.sort();
        let mut all = v.clone();
        all.sort();
        assert_eq!(sorted, all, "every change once");
        let at = |x: (u32, u32)| out.iter().position(|&y| y == x).unwrap();
        assert_eq!(at((4, 4)), at((4, 1)) + 1, "{out:?}");
        assert_eq!(at((7, 6)), at((7, 2)) + 1, "{out:?}");
        // Two passes, each in key order: of the distinct keys 1, 2, 3, 4,
        // 5, 7, 8, 9, the second and fourth of every five go second.
        let keys: Vec<u32> = out.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, vec![1, 3, 5, 7, 7, 9, 2, 4, 4, 8]);
    }
}
