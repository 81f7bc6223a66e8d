//! The application layer (HFS 3.1, the Alloc Stream Facility): an open file
//! instance composed of transient building blocks.
//!
//! An [`OpenFile`] is a cursor, a prefetch policy and an advisory lock
//! policy over an inode, chosen per open by an [`OpenSpec`] and changeable
//! while the file is open ([`OpenFile::set_prefetch`],
//! [`OpenFile::set_cursor`], [`OpenFile::set_locks`]). Clones share the
//! instance, so the threads of a program use one instance the way HFS's
//! Figure 3 shows: per-thread cursors over per-thread prefetchers over one
//! lock block.
//!
//! ```
//! use hurricane::{Fs, FormatOptions, Options, device::{Device, MemDevice}};
//! use hurricane::open::{OpenFile, OpenSpec, Prefetch};
//! use std::sync::Arc;
//!
//! let devs: Vec<Arc<dyn Device>> = (0..2).map(|i| Arc::new(MemDevice::new(format!("m{i}"), 32 << 20)) as _).collect();
//! Fs::format(devs.clone(), &FormatOptions::default())?;
//! let fs = Fs::open(devs, Options::default())?;
//! fs.write_file("/matrix", &vec![1u8; 1 << 20], Some("regions(size=512K,width=2)"))?;
//!
//! // Two threads, each reading its own half with a cursor and a prefetcher of its own.
//! let spec: OpenSpec = "cursor=per-thread,prefetch=distance(d=8,a=2,per=thread)".parse()?;
//! let f = OpenFile::options().spec(spec).open(&fs, "/matrix")?;
//! std::thread::scope(|s| {
//!     for half in 0..2u64 {
//!         let f = f.clone();
//!         s.spawn(move || {
//!             f.seek(std::io::SeekFrom::Start(half << 19)).unwrap();
//!             let mut buf = vec![0u8; 4096];
//!             for _ in 0..128 {
//!                 assert_eq!(f.read(&mut buf).unwrap(), 4096);
//!             }
//!         });
//!     }
//! });
//! // A later phase reads the file as one shared stream.
//! f.set_prefetch(Prefetch::Adaptive);
//! assert!(fs.cache_stats().hits > 0);
//!
//! // The default composition for a file is kept in an extended attribute.
//! let ino = fs.resolve("/matrix")?;
//! fs.setxattr(&hurricane::Creds::root(), ino, b"user.hurricane.open", b"prefetch=next", 0)?;
//! assert_eq!(fs.default_open_spec(ino)?.prefetch, Prefetch::NextBlock);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Default compositions (`user.hurricane.open`)
//!
//! The creator of a file or directory records the composition used when it
//! is opened without an explicit spec, as the value of the extended
//! attribute `user.hurricane.open` (an [`OpenSpec`], checked when set and
//! stored canonical). The default for a file is its own attribute, else that
//! of the nearest directory above the path it was opened by, else the pool
//! default (`cursor=shared,prefetch=adaptive,locks=none`).
//!
//! # For the FUSE mount
//!
//! The kernel hands the mount inodes, not paths. Per open file handle the
//! mount calls [`Fs::open_policy_for`] and keeps an [`OpenFile::from_ino`];
//! its reads go through [`OpenFile::read_at`] with the kernel's offsets,
//! which drives the prefetcher, and the instance is dropped on release.
//! A mounted file without its own attribute gets no engine prefetch: the
//! kernel's readahead already streams it in large requests and its page
//! cache keeps what was read, so a second prefetcher under them would only
//! copy every block once more through the block cache. With `cache=none`
//! the mount opens the handle without the page cache (`FOPEN_DIRECT_IO`):
//! every read and write arrives as the program made it, and the
//! instance's prefetch policy is the only one reading ahead.

mod locks;
mod prefetch;

pub use crate::open_spec::{
    check_xattr, CursorKind, LockPolicy, OpenSpec, PageCache, Prefetch, Scope, MAX_AMOUNT, MAX_DISTANCE,
};
pub use locks::{LockMode, RangeGuard, RangeLocks};
pub use prefetch::{Pattern, PrefetchState, Request};

use crate::cache::Presence;
use crate::device::BLOCK_SIZE;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::journal::Ino;
use crate::namespace::ROOT;
use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::io::SeekFrom;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// The extended attribute holding a file's or directory's default open spec.
pub const OPEN_XATTR: &str = crate::xattr::OPEN;

const BS: u64 = BLOCK_SIZE as u64;
const SHARDS: usize = 16;

/// Per-thread state, sharded by thread key so threads rarely share a lock.
pub(crate) type Sharded<T> = Box<[CachePadded<Mutex<HashMap<u64, T>>>]>;

/// A small number naming the calling thread (cheaper than hashing ThreadId).
pub(crate) fn thread_key() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static KEY: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    KEY.with(|k| *k)
}

impl Fs {
    /// The spec recorded on inode `ino` itself, if any (an unreadable one is
    /// ignored with a warning: it was checked when set).
    fn own_open_spec(&self, ino: Ino) -> Result<(Option<OpenSpec>, Option<Ino>)> {
        let n = self.state().inode(ino)?;
        let d = n.data.read();
        let parent = d.dir().map(|dir| dir.parent);
        let spec = d.xattrs.get(OPEN_XATTR.as_bytes()).and_then(|v| {
            let text = String::from_utf8_lossy(v);
            OpenSpec::parse(&text).map_err(|e| tracing::warn!("inode {ino}: ignoring {OPEN_XATTR}: {e}")).ok()
        });
        Ok((spec, parent))
    }

    /// The nearest spec on `dir` or a directory above it.
    fn dir_open_spec(&self, mut dir: Ino) -> Result<Option<OpenSpec>> {
        for _ in 0..4096 {
            let (spec, parent) = self.own_open_spec(dir)?;
            if spec.is_some() {
                return Ok(spec);
            }
            match parent {
                Some(p) if dir != ROOT && p != dir => dir = p,
                _ => break,
            }
        }
        Ok(None)
    }

    /// The composition an open of `ino` gets by default: its own
    /// `user.hurricane.open`; for a directory, else the nearest directory
    /// above; else the pool default (adaptive prefetch).
    pub fn default_open_spec(&self, ino: Ino) -> Result<OpenSpec> {
        let (own, parent) = self.own_open_spec(ino)?;
        if let Some(s) = own {
            return Ok(s);
        }
        if let Some(p) = parent.filter(|_| ino != ROOT) {
            return Ok(self.dir_open_spec(p)?.unwrap_or_default());
        }
        Ok(OpenSpec::default())
    }

    /// The default composition for `ino` opened by a path whose last
    /// directory is `dir`: its own spec, else the nearest directory's.
    pub fn open_spec_in(&self, dir: Ino, ino: Ino) -> Result<OpenSpec> {
        match self.own_open_spec(ino)?.0 {
            Some(s) => Ok(s),
            None => Ok(self.dir_open_spec(dir)?.unwrap_or_default()),
        }
    }

    /// For the mount: the composition of a file handle, its own attribute,
    /// else that of the nearest directory above the one it was last reached
    /// through (looked up, created, linked or renamed into), else
    /// [`OpenSpec::mounted`] (never fails: an inode that vanished gets that
    /// too).
    pub fn open_policy_for(&self, ino: Ino) -> OpenSpec {
        match self.own_open_spec(ino) {
            Ok((Some(s), _)) => return s,
            Err(_) => return OpenSpec::mounted(),
            Ok((None, _)) => {}
        }
        let parent = self.state().get(ino).map_or(0, |n| n.parent_hint.load(Ordering::Relaxed));
        if parent != 0 {
            if let Ok(Some(s)) = self.dir_open_spec(parent) {
                return s;
            }
        }
        OpenSpec::mounted()
    }

    /// Notes that `ino` was reached through directory `parent` (see
    /// [`Fs::open_policy_for`]).
    pub(crate) fn note_parent(&self, ino: Ino, parent: Ino) {
        if let Some(n) = self.state().get(ino) {
            n.parent_hint.store(parent, Ordering::Relaxed);
        }
    }

    /// Whether block `fblk` of `ino` is in the data cache (loaded, not loading).
    pub fn is_cached(&self, ino: Ino, fblk: u64) -> bool {
        self.inner.cache.presence(ino, fblk) == Presence::Present
    }

    /// Distinct devices holding a file (the width its prefetch must cover).
    fn file_devices(&self, ino: Ino) -> u64 {
        let Some(n) = self.state().get(ino) else { return 1 };
        let d = n.data.read();
        let Ok(Some(l)) = d.layout() else { return 1 };
        let mut devs: Vec<u32> = l.nodes().iter().filter_map(|b| b.device()).collect();
        devs.sort_unstable();
        devs.dedup();
        devs.len().max(1) as u64
    }
}

/// Counters of one open instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenStats {
    pub reads: u64,
    /// Prefetch requests the policy made, and blocks they asked for.
    pub prefetch_requests: u64,
    pub prefetch_blocks: u64,
    /// Blocks actually sent to the devices (the rest were cached or loading).
    pub prefetch_issued: u64,
}

struct Instance {
    fs: Fs,
    ino: Ino,
    readable: bool,
    writable: bool,
    append: bool,
    cursor: AtomicU8,
    /// The shared offset; held across a read or write so each is atomic
    /// with its offset update.
    shared_pos: Mutex<u64>,
    /// Where a thread's own cursor starts.
    seed: AtomicU64,
    thread_pos: Sharded<u64>,
    prefetch: RwLock<Arc<PrefetchState>>,
    devices: u64,
    locks: RangeLocks,
    lock_auto: AtomicBool,
    /// `cache=none` (the mount reads this at open; nothing else does).
    no_page_cache: AtomicBool,
    reads: AtomicU64,
    prefetch_requests: AtomicU64,
    prefetch_blocks: AtomicU64,
    prefetch_issued: AtomicU64,
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Err(e) = self.fs.release_inode(self.ino) {
            tracing::warn!("closing inode {}: {e}", self.ino);
        }
    }
}

/// An open file instance of the native API. Clones share it (cursor,
/// prefetcher, locks): hand one to each thread.
#[derive(Clone)]
pub struct OpenFile {
    inner: Arc<Instance>,
}

/// How to open an [`OpenFile`]: access, creation, layout and composition.
#[derive(Debug, Clone, Default)]
pub struct OpenFileOptions {
    read: bool,
    write: bool,
    append: bool,
    create: bool,
    create_new: bool,
    truncate: bool,
    mode: Option<u32>,
    layout: Option<String>,
    spec: Option<OpenSpec>,
}

impl OpenFileOptions {
    pub fn read(&mut self, v: bool) -> &mut Self {
        self.read = v;
        self
    }
    pub fn write(&mut self, v: bool) -> &mut Self {
        self.write = v;
        self
    }
    pub fn append(&mut self, v: bool) -> &mut Self {
        self.append = v;
        self
    }
    pub fn create(&mut self, v: bool) -> &mut Self {
        self.create = v;
        self
    }
    pub fn truncate(&mut self, v: bool) -> &mut Self {
        self.truncate = v;
        self
    }
    /// Create the file, failing if it exists.
    pub fn create_new(&mut self, v: bool) -> &mut Self {
        self.create_new = v;
        self
    }
    /// Permission bits of a file this open creates (default 0o644).
    pub fn mode(&mut self, m: u32) -> &mut Self {
        self.mode = Some(m);
        self
    }
    /// Layout of a file this open creates.
    pub fn layout(&mut self, spec: &str) -> &mut Self {
        self.layout = Some(spec.to_string());
        self
    }
    /// The composition (default: the file's recorded one, see the module docs).
    pub fn spec(&mut self, spec: OpenSpec) -> &mut Self {
        self.spec = Some(spec);
        self
    }

    pub fn open(&self, fs: &Fs, path: &str) -> Result<OpenFile> {
        let mut o = crate::fs::OpenOptions::new();
        o.read(self.read).write(self.write).append(self.append).create(self.create).truncate(self.truncate);
        o.create_new(self.create_new);
        if let Some(m) = self.mode {
            o.mode(m);
        }
        if let Some(l) = &self.layout {
            o.layout(l);
        }
        // The path-level open does creation, truncation and the checks.
        let file = fs.open_with(path, &o)?;
        let ino = file.ino();
        let spec = match self.spec {
            Some(s) => s,
            None => {
                let trimmed = path.trim_end_matches('/');
                let dir = match trimmed.rfind('/') {
                    Some(0) | None => ROOT,
                    Some(i) => fs.resolve(&trimmed[..i])?,
                };
                fs.open_spec_in(dir, ino)?
            }
        };
        let writable = self.write || self.append;
        let f = OpenFile::build(fs, ino, self.read || !writable, writable, self.append, spec)?;
        drop(file);
        Ok(f)
    }
}

impl OpenFile {
    pub fn options() -> OpenFileOptions {
        OpenFileOptions::default()
    }

    /// Opens an existing file for reading with its default composition.
    pub fn open(fs: &Fs, path: &str) -> Result<OpenFile> {
        Self::options().read(true).open(fs, path)
    }

    /// An instance over an inode (the mount's file handles). Counts as an
    /// open handle until the last clone is dropped.
    pub fn from_ino(fs: &Fs, ino: Ino, readable: bool, writable: bool, spec: OpenSpec) -> Result<OpenFile> {
        Self::build(fs, ino, readable, writable, false, spec)
    }

    fn build(fs: &Fs, ino: Ino, readable: bool, writable: bool, append: bool, spec: OpenSpec) -> Result<OpenFile> {
        let a = fs.getattr(ino)?;
        if a.is_dir() {
            return Err(Error::IsDir(format!("inode {ino}")));
        }
        fs.open_inode(ino)?;
        let devices = fs.file_devices(ino);
        let inner = Instance {
            fs: fs.clone(),
            ino,
            readable,
            writable,
            append,
            cursor: AtomicU8::new(spec.cursor as u8),
            shared_pos: Mutex::new(0),
            seed: AtomicU64::new(0),
            thread_pos: (0..SHARDS).map(|_| CachePadded::new(Mutex::new(HashMap::new()))).collect(),
            prefetch: RwLock::new(Arc::new(PrefetchState::new(spec.prefetch, devices))),
            devices,
            locks: RangeLocks::new(),
            lock_auto: AtomicBool::new(spec.locks == LockPolicy::Auto),
            no_page_cache: AtomicBool::new(spec.cache == PageCache::None),
            reads: AtomicU64::new(0),
            prefetch_requests: AtomicU64::new(0),
            prefetch_blocks: AtomicU64::new(0),
            prefetch_issued: AtomicU64::new(0),
        };
        Ok(OpenFile { inner: Arc::new(inner) })
    }

    pub fn ino(&self) -> Ino {
        self.inner.ino
    }

    pub fn fs(&self) -> &Fs {
        &self.inner.fs
    }

    pub fn len(&self) -> Result<u64> {
        Ok(self.inner.fs.state().inode(self.inner.ino)?.data.read().size)
    }

    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// The composition now in force.
    pub fn spec(&self) -> OpenSpec {
        OpenSpec {
            cursor: self.cursor_kind(),
            prefetch: self.inner.prefetch.read().policy(),
            locks: if self.inner.lock_auto.load(Ordering::Relaxed) { LockPolicy::Auto } else { LockPolicy::None },
            cache: if self.inner.no_page_cache.load(Ordering::Relaxed) { PageCache::None } else { PageCache::Page },
        }
    }

    /// Replaces every building block of the composition.
    pub fn set_spec(&self, spec: OpenSpec) {
        self.set_cursor(spec.cursor);
        self.set_prefetch(spec.prefetch);
        self.set_locks(spec.locks);
        // Recorded only: the mount chose the kernel's caching at open.
        self.inner.no_page_cache.store(spec.cache == PageCache::None, Ordering::Relaxed);
    }

    /// Changes the prefetch policy (its windows start afresh).
    pub fn set_prefetch(&self, p: Prefetch) {
        *self.inner.prefetch.write() = Arc::new(PrefetchState::new(p, self.inner.devices));
    }

    /// Changes the cursor. Going per-thread, each thread starts at the
    /// shared offset; going shared, the offset is the calling thread's.
    pub fn set_cursor(&self, c: CursorKind) {
        let old = self.cursor_kind();
        if old == c {
            return;
        }
        let mut shared = self.inner.shared_pos.lock();
        match c {
            CursorKind::PerThread => {
                for s in self.inner.thread_pos.iter() {
                    s.lock().clear();
                }
                self.inner.seed.store(*shared, Ordering::Relaxed);
            }
            CursorKind::Shared => *shared = self.thread_position(),
        }
        self.inner.cursor.store(c as u8, Ordering::Release);
    }

    pub fn set_locks(&self, l: LockPolicy) {
        self.inner.lock_auto.store(l == LockPolicy::Auto, Ordering::Relaxed);
    }

    fn cursor_kind(&self) -> CursorKind {
        if self.inner.cursor.load(Ordering::Acquire) == CursorKind::PerThread as u8 {
            CursorKind::PerThread
        } else {
            CursorKind::Shared
        }
    }

    fn thread_position(&self) -> u64 {
        let k = thread_key();
        let shard = self.inner.thread_pos[k as usize % SHARDS].lock();
        shard.get(&k).copied().unwrap_or_else(|| self.inner.seed.load(Ordering::Relaxed))
    }

    fn set_thread_position(&self, pos: u64) {
        let k = thread_key();
        let mut shard = self.inner.thread_pos[k as usize % SHARDS].lock();
        if shard.len() > 4096 {
            shard.clear();
        }
        shard.insert(k, pos);
    }

    /// The calling thread's offset (per-thread cursor) or the shared one.
    pub fn position(&self) -> u64 {
        match self.cursor_kind() {
            CursorKind::Shared => *self.inner.shared_pos.lock(),
            CursorKind::PerThread => self.thread_position(),
        }
    }

    /// Moves the calling thread's cursor (or the shared one).
    pub fn seek(&self, to: SeekFrom) -> Result<u64> {
        let base = |cur: u64| -> Result<u64> {
            let p = match to {
                SeekFrom::Start(o) => Some(o),
                SeekFrom::End(d) => self.len()?.checked_add_signed(d),
                SeekFrom::Current(d) => cur.checked_add_signed(d),
            };
            p.ok_or_else(|| Error::Invalid(format!("seek to {to:?}")))
        };
        match self.cursor_kind() {
            CursorKind::Shared => {
                let mut pos = self.inner.shared_pos.lock();
                *pos = base(*pos)?;
                Ok(*pos)
            }
            CursorKind::PerThread => {
                let p = base(self.thread_position())?;
                self.set_thread_position(p);
                Ok(p)
            }
        }
    }

    /// Reads at the cursor and moves it.
    pub fn read(&self, buf: &mut [u8]) -> Result<usize> {
        match self.cursor_kind() {
            CursorKind::Shared => {
                let mut pos = self.inner.shared_pos.lock();
                let n = self.read_at(buf, *pos)?;
                *pos += n as u64;
                Ok(n)
            }
            CursorKind::PerThread => {
                let pos = self.thread_position();
                let n = self.read_at(buf, pos)?;
                self.set_thread_position(pos + n as u64);
                Ok(n)
            }
        }
    }

    /// Writes at the cursor (at the end when opened for appending) and moves it.
    pub fn write(&self, data: &[u8]) -> Result<usize> {
        match self.cursor_kind() {
            CursorKind::Shared => {
                let mut pos = self.inner.shared_pos.lock();
                let at = if self.inner.append { self.len()? } else { *pos };
                let n = self.write_at(data, at)?;
                *pos = at + n as u64;
                Ok(n)
            }
            CursorKind::PerThread => {
                let at = if self.inner.append { self.len()? } else { self.thread_position() };
                let n = self.write_at(data, at)?;
                self.set_thread_position(at + n as u64);
                Ok(n)
            }
        }
    }

    /// Reads at `off` without moving any cursor; the prefetcher sees it.
    pub fn read_at(&self, buf: &mut [u8], off: u64) -> Result<usize> {
        let s = &*self.inner;
        if !s.readable {
            return Err(Error::Access("file not open for reading".into()));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let _lock = if s.lock_auto.load(Ordering::Relaxed) {
            Some(s.locks.lock(off, buf.len() as u64, LockMode::Shared)?)
        } else {
            None
        };
        s.reads.fetch_add(1, Ordering::Relaxed);
        let pf = s.prefetch.read().clone();
        if pf.policy() != Prefetch::None {
            let size = self.len()?;
            if off < size {
                let b = off / BS;
                let n = (off + buf.len() as u64).min(size).div_ceil(BS) - b;
                // Not even requested yet: the prefetcher is not far enough
                // ahead. (A block still loading means the devices are the
                // limit, which a deeper window would not help.)
                let late = pf.policy() == Prefetch::Adaptive && s.fs.inner.cache.presence(s.ino, b) == Presence::Absent;
                // Ask ahead first, so the devices work while this read waits.
                for (start, count) in pf.on_access(thread_key(), b, n, late) {
                    s.prefetch_requests.fetch_add(1, Ordering::Relaxed);
                    s.prefetch_blocks.fetch_add(count, Ordering::Relaxed);
                    match s.fs.prefetch(s.ino, start, count) {
                        Ok(k) => {
                            s.prefetch_issued.fetch_add(k, Ordering::Relaxed);
                        }
                        Err(e) => tracing::debug!("prefetch of inode {}: {e}", s.ino),
                    }
                }
            }
        }
        s.fs.read(s.ino, off, buf)
    }

    /// Writes at `off` without moving any cursor.
    pub fn write_at(&self, data: &[u8], off: u64) -> Result<usize> {
        let s = &*self.inner;
        if !s.writable {
            return Err(Error::Access("file not open for writing".into()));
        }
        let _lock = if s.lock_auto.load(Ordering::Relaxed) && !data.is_empty() {
            Some(s.locks.lock(off, data.len() as u64, LockMode::Exclusive)?)
        } else {
            None
        };
        s.fs.write(s.ino, off, data)
    }

    /// Advisory lock on bytes [start, start+len) (len 0: to the end),
    /// waiting for other threads' conflicting locks.
    pub fn lock(&self, start: u64, len: u64, mode: LockMode) -> Result<RangeGuard> {
        self.inner.locks.lock(start, len, mode)
    }

    /// Advisory lock without waiting (`WouldBlock` on conflict).
    pub fn try_lock(&self, start: u64, len: u64, mode: LockMode) -> Result<RangeGuard> {
        self.inner.locks.try_lock(start, len, mode)
    }

    pub fn locks(&self) -> &RangeLocks {
        &self.inner.locks
    }

    /// What the adaptive policy sees in the calling thread's reads.
    pub fn pattern(&self) -> Pattern {
        self.inner.prefetch.read().pattern(thread_key())
    }

    pub fn stats(&self) -> OpenStats {
        let s = &*self.inner;
        OpenStats {
            reads: s.reads.load(Ordering::Relaxed),
            prefetch_requests: s.prefetch_requests.load(Ordering::Relaxed),
            prefetch_blocks: s.prefetch_blocks.load(Ordering::Relaxed),
            prefetch_issued: s.prefetch_issued.load(Ordering::Relaxed),
        }
    }
}
