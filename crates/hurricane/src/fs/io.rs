//! File data: read, write, truncate, preallocation and hole search.
//!
//! Requests are cut into whole file blocks for the layout tree; partial
//! blocks at either end are read, merged and written back. Bytes past the end
//! of a file inside its last block are kept zero, so extending a file never
//! exposes old data.

use super::{now, Fs};
use crate::blocks::{IoCtx, Layout, NodeRecord, BLOCK_SIZE};
use crate::cache::{BlockCache, Claim, Lookup};
use crate::codec::Encoder;
use crate::error::{Error, Result};
use crate::journal::{Ino, Op};
use crate::namespace::flags;
use parking_lot::Mutex;
use std::sync::Arc;

const BS: u64 = BLOCK_SIZE as u64;
/// File blocks `fallocate` zeroes per journal group (64 MiB).
const FALLOCATE_STEP: u64 = 16384;

/// The per-inode I/O lock, held shared or exclusive.
enum IoGuard<'a> {
    Shared(#[allow(dead_code)] parking_lot::RwLockReadGuard<'a, ()>),
    Excl(#[allow(dead_code)] parking_lot::RwLockWriteGuard<'a, ()>),
}
/// Largest file: the block arithmetic stays far from overflow.
pub const MAX_FILE_SIZE: u64 = 1 << 50;
/// Reads at least this large that miss the cache bypass it.
const STREAM_BYTES: usize = 256 << 10;
/// Longest run of blocks read from a layout in one request through the cache.
const MAX_RUN: u64 = 1024;
/// Times a reader waits for a block another thread is loading before it
/// reads the block itself.
const MAX_WAITS: u32 = 16;

/// Blocks [start, start+n) claimed in the cache: filled together, or given
/// up when dropped unfilled (an error or a panic), so no reader waits on
/// them forever.
struct Claims<'a> {
    cache: &'a BlockCache,
    ino: Ino,
    start: u64,
    n: u64,
    filled: bool,
}

impl Claims<'_> {
    fn fill(mut self, data: &[u8]) {
        for (i, block) in data.chunks(BLOCK_SIZE).take(self.n as usize).enumerate() {
            self.cache.fill(self.ino, self.start + i as u64, block);
        }
        self.filled = true;
    }
}

impl Drop for Claims<'_> {
    fn drop(&mut self) {
        if !self.filled {
            for b in self.start..self.start + self.n {
                self.cache.abort(self.ino, b);
            }
        }
    }
}

impl Fs {
    /// Where `ino` belongs, for the block types that place data by it: the
    /// directory it was created in or last reached through, and its owner.
    pub(crate) fn origin(&self, ino: Ino) -> crate::blocks::Origin {
        self.state().get(ino).map_or(crate::blocks::Origin::NONE, |n| crate::blocks::Origin {
            dir: n.parent_hint.load(std::sync::atomic::Ordering::Relaxed),
            uid: n.data.read().uid,
        })
    }

    /// The context of a request that changes `ino`'s tree in journal batch
    /// `epoch`, the records it makes going to `sink`.
    pub(crate) fn writer_io<'a>(
        &'a self,
        ino: Ino,
        epoch: u64,
        sink: &'a (dyn Fn(NodeRecord) + Sync),
        repair: bool,
    ) -> IoCtx<'a> {
        IoCtx { owner: ino, origin: self.origin(ino), storage: self.storage(), epoch, sink, repair }
    }

    /// The context of a read of `ino` that records and repairs nothing.
    pub(crate) fn reader_io(&self, ino: Ino) -> IoCtx<'_> {
        IoCtx {
            owner: ino,
            origin: crate::blocks::Origin::NONE,
            storage: self.storage(),
            epoch: 0,
            sink: Fs::no_sink(),
            repair: false,
        }
    }

    pub(super) fn file_layout(&self, ino: Ino) -> Result<(Arc<crate::namespace::Inode>, Arc<Layout>, u64)> {
        let n = self.state().inode(ino)?;
        let (lay, size) = {
            let d = n.data.read();
            match d.layout()? {
                Some(l) => (l.clone(), d.size),
                None if d.is_dir() => return Err(Error::IsDir(format!("inode {ino}"))),
                None => return Err(Error::Invalid(format!("inode {ino} is not a regular file"))),
            }
        };
        Ok((n, lay, size))
    }

    /// Reads up to `buf.len()` bytes at `off`; returns the count (0 at EOF).
    pub fn read(&self, ino: Ino, off: u64, buf: &mut [u8]) -> Result<usize> {
        let (node, _, _) = self.file_layout(ino)?;
        let _io = node.io.read();
        // Layout and size again under the I/O lock (a truncate may have run).
        let (lay, size) = {
            let d = node.data.read();
            (d.layout()?.cloned().ok_or_else(|| Error::Stale(format!("inode {ino}")))?, d.size)
        };
        if off >= size || buf.is_empty() {
            return Ok(0);
        }
        let n = (buf.len() as u64).min(size - off) as usize;
        // A read that finds a bad copy rewrites it (self-heal); the shared
        // I/O lock keeps truncates out, and what the repair records (space
        // it mapped) is journalled below like a write's changes.
        let changes = Mutex::new(Vec::new());
        let sink = |c: NodeRecord| changes.lock().push(c);
        let io = IoCtx {
            owner: ino,
            origin: crate::blocks::Origin::NONE,
            storage: self.storage(),
            epoch: 0,
            sink: &sink,
            repair: !self.inner.read_only,
        };
        let r = self.read_cached(ino, &lay, &io, off, &mut buf[..n]);
        let changes = changes.into_inner();
        if !changes.is_empty() {
            let ops: Vec<Op> = changes.into_iter().map(|change| Op::Map { ino, change }).collect();
            let g = self.inner.gate.enter();
            self.log(&g, &ops);
            drop(g);
            self.mark_dirty(ino);
        }
        if let Err(e) = &r {
            if let Error::Checksum(_) = e {
                tracing::error!(ino, offset = off, len = n, error = %e, "file data failed checksum verification");
            }
            // Data no copy could supply: on the pool's permanent error list.
            self.note_read_error(ino, &lay, off, n as u64, e);
        }
        r?;
        Ok(n)
    }

    /// Reads bytes through the block cache: cached blocks are copied, blocks
    /// being loaded (by a prefetch or another reader) are waited for, and
    /// each run of missing blocks is read from the layout in one request and
    /// kept. The caller holds the file's I/O lock (either way).
    pub(super) fn read_cached(&self, ino: Ino, lay: &Layout, io: &IoCtx, off: u64, buf: &mut [u8]) -> Result<()> {
        let cache = &self.inner.cache;
        if !cache.enabled() {
            return read_range(lay, io, off, buf);
        }
        let end = off + buf.len() as u64;
        let last = end.div_ceil(BS);
        // A large read the cache holds nothing of (a stream, not prefetched)
        // goes straight to the layout: keeping it would only evict other
        // blocks, and the cache is write-through, so the device is current.
        if buf.len() >= STREAM_BYTES
            && cache.presence(ino, off / BS) == crate::cache::Presence::Absent
            && cache.presence(ino, last - 1) == crate::cache::Presence::Absent
        {
            return read_range(lay, io, off, buf);
        }
        // The part of `buf` that block `b` covers, and where it starts in the block.
        let piece = |b: u64| {
            let (bs, be) = (b * BS, b * BS + BS);
            let (s, e) = (bs.max(off), be.min(end));
            ((s - off) as usize, (e - off) as usize, (s - bs) as usize)
        };
        let mut b = off / BS;
        let mut waits = 0;
        while b < last {
            let (s, e, from) = piece(b);
            match cache.get(ino, b, from, &mut buf[s..e]) {
                Lookup::Hit => {
                    b += 1;
                    waits = 0;
                    continue;
                }
                // Someone is reading it: wait rather than read it twice.
                Lookup::Loading if waits < MAX_WAITS => {
                    cache.wait(ino, b);
                    waits += 1;
                    continue;
                }
                Lookup::Loading | Lookup::Miss => {}
            }
            match cache.claim(ino, b, false) {
                Claim::Claimed => {}
                // It appeared meanwhile: look again.
                Claim::Present if waits < MAX_WAITS => {
                    waits += 1;
                    continue;
                }
                // No room: read this block alone, uncached.
                _ => {
                    read_range(lay, io, b * BS + from as u64, &mut buf[s..e])?;
                    b += 1;
                    continue;
                }
            }
            let mut n = 1;
            while b + n < last && n < MAX_RUN && cache.claim(ino, b + n, false) == Claim::Claimed {
                n += 1;
            }
            let claims = Claims { cache, ino, start: b, n, filled: false };
            let run = n as usize * BLOCK_SIZE;
            if from == 0 && (b + n) * BS <= end {
                // Whole blocks inside the caller's buffer: read straight into it.
                let dst = &mut buf[s..s + run];
                lay.root().read(io, b, dst)?;
                claims.fill(dst);
            } else {
                let mut tmp = vec![0u8; run];
                lay.root().read(io, b, &mut tmp)?;
                claims.fill(&tmp);
                for i in 0..n {
                    let (s, e, from) = piece(b + i);
                    let at = i as usize * BLOCK_SIZE + from;
                    buf[s..e].copy_from_slice(&tmp[at..at + (e - s)]);
                }
            }
            b += n;
            waits = 0;
        }
        Ok(())
    }

    /// Starts reading blocks [fblk, fblk+n) of a file into the cache in the
    /// background (HFS: an asynchronous prefetch request). Blocks past the
    /// end of the file, cached or already loading are skipped, and so are
    /// blocks for which the cache has no room that is not in use. Returns
    /// the number of blocks requested from the devices.
    pub fn prefetch(&self, ino: Ino, fblk: u64, n: u64) -> Result<u64> {
        let cache = &self.inner.cache;
        if !cache.enabled() || n == 0 {
            return Ok(0);
        }
        let (_, _, size) = self.file_layout(ino)?;
        let end = fblk.saturating_add(n).min(size.div_ceil(BS));
        let mut total = 0;
        let mut run: Option<u64> = None;
        for b in fblk..end {
            let claimed = cache.claim(ino, b, true) == Claim::Claimed;
            if let Some(start) = run {
                if !claimed || b - start == MAX_RUN {
                    total += self.submit_prefetch(ino, start, b - start);
                    run = None;
                }
            }
            if claimed && run.is_none() {
                run = Some(b);
            }
        }
        if let Some(start) = run {
            total += self.submit_prefetch(ino, start, end - start);
        }
        Ok(total)
    }

    /// Hands claimed blocks to an I/O thread; gives them up if none takes them.
    fn submit_prefetch(&self, ino: Ino, start: u64, n: u64) -> u64 {
        let weak = Arc::downgrade(&self.inner);
        let job = Box::new(move || {
            if let Some(inner) = weak.upgrade() {
                Fs { inner }.run_prefetch(ino, start, n);
            }
        });
        match self.inner.io_pool.submit(job) {
            Ok(()) => n,
            Err(_) => {
                for b in start..start + n {
                    self.inner.cache.abort(ino, b);
                }
                0
            }
        }
    }

    /// On an I/O thread: reads claimed blocks and publishes them. Takes no
    /// inode lock: a truncate or write meanwhile marks them stale.
    fn run_prefetch(&self, ino: Ino, start: u64, n: u64) {
        let cache = &self.inner.cache;
        let claims = Claims { cache, ino, start, n, filled: false };
        let Some(node) = self.state().get(ino) else { return };
        let Ok(Some(lay)) = node.data.read().layout().map(|l| l.cloned()) else { return };
        let mut tmp = vec![0u8; n as usize * BLOCK_SIZE];
        let io = self.reader_io(ino);
        match lay.root().read(&io, start, &mut tmp) {
            Ok(()) => claims.fill(&tmp),
            Err(e) => tracing::debug!("prefetch of inode {ino} blocks {start}+{n}: {e}"),
        }
    }

    /// Writes `data` at `off`; returns the count written. Refused for
    /// space, it runs again once space is reclaimed ([`Fs::with_room`]).
    pub fn write(&self, ino: Ino, off: u64, data: &[u8]) -> Result<usize> {
        self.with_room(|| self.write_once(ino, off, data))
    }

    fn write_once(&self, ino: Ino, off: u64, data: &[u8]) -> Result<usize> {
        self.check_writable()?;
        if data.is_empty() {
            return Ok(0);
        }
        let end = off
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or_else(|| Error::TooBig(format!("inode {ino}: write past {MAX_FILE_SIZE} bytes")))?;
        // A log that ran out of clean segments is cleaned first.
        self.clean_if_low();
        for attempt in 0..2 {
            let (node, _, _) = self.file_layout(ino)?;
            // A file protected for transactions: the bytes are locked
            // against them while they are written.
            let _txn = self.protect_write(&node, ino, off, end)?;
            let aligned = off.is_multiple_of(BS) && (data.len() as u64).is_multiple_of(BS);
            // Whole-block writes run in parallel; partial blocks are
            // read-modify-write and must not interleave, nor may writes to
            // a migrating file (both trees must see them in one order).
            let mut guard = if aligned { IoGuard::Shared(node.io.read()) } else { IoGuard::Excl(node.io.write()) };
            if matches!(guard, IoGuard::Shared(_)) && self.migration(ino).is_some() {
                drop(guard);
                guard = IoGuard::Excl(node.io.write());
            }
            // Immutable and append-only files (checked under the inode's
            // I/O lock, against the size appends serialise on).
            flags::check_data_write(&node.data.read(), ino, off)?;
            let lay = node.data.read().layout()?.cloned().ok_or_else(|| Error::Stale(format!("inode {ino}")))?;
            let g = self.inner.gate.enter();
            let changes = Mutex::new(Vec::new());
            let sink = |c: NodeRecord| changes.lock().push(c);
            let io = self.writer_io(ino, g.epoch(), &sink, true);
            // Small-file blocks of a `colocate` file leave with their
            // neighbours at the next commit (a group write).
            let r = if crate::blocks::colocate::may_hold(&lay) {
                crate::blocks::colocate::holding(|| write_range(&lay, &io, off, data))
            } else {
                write_range(&lay, &io, off, data)
            };
            if r.is_ok() {
                // The part the migration has copied already goes to its tree too.
                self.mirror(ino, g.epoch(), &|fresh, io, mark| match end.min(mark * BS) {
                    stop if stop > off => write_range(fresh, io, off, &data[..(stop - off) as usize]),
                    _ => Ok(()),
                });
            }
            // Written through: cached copies (and loads racing the write) go.
            self.inner.cache.invalidate(ino, off / BS, end.div_ceil(BS) - off / BS);
            let mut ops: Vec<Op> = changes.into_inner().into_iter().map(|change| Op::Map { ino, change }).collect();
            let mut l = self.state().lock(&[ino]);
            let d = l.get(ino)?;
            let t = now();
            match r {
                Ok(()) => {
                    let (size, mode, atime) = (d.size, d.mode, d.atime);
                    let mut meta = Vec::new();
                    if end > size {
                        meta.push(Op::SetSize { ino, size: end, mtime: t });
                    } else {
                        // Lazy: applied now, journalled as Times by the
                        // committer (`mark_dirty` below).
                        self.state().apply(&Op::Times { ino, atime, mtime: t, ctime: t }, &mut l)?;
                    }
                    // Clear set-id bits on write, as the kernel does.
                    if mode & (libc::S_ISUID | libc::S_ISGID) != 0 && mode & 0o010 != 0 {
                        meta.push(Op::SetAttr {
                            ino,
                            mode: Some(mode & 0o7777 & !(libc::S_ISUID | libc::S_ISGID)),
                            uid: None,
                            gid: None,
                            atime: None,
                            mtime: None,
                            ctime: t,
                        });
                    }
                    // The same apply as replay (the Map records were applied
                    // by their nodes as the write made them).
                    for op in &meta {
                        self.state().apply(op, &mut l)?;
                    }
                    ops.extend(meta);
                    let logged_size = ops.iter().any(|o| matches!(o, Op::SetSize { .. }));
                    self.log(&g, &ops);
                    drop(l);
                    drop(g);
                    if !logged_size {
                        self.mark_dirty(ino);
                    }
                    // Every block the write touched was written whole (a
                    // partial one read, changed and written back).
                    let (first, last) = (off / BS * BS, end.div_ceil(BS) * BS);
                    self.inner.errors.written(ino, first, last - first);
                    return Ok(data.len());
                }
                Err(e) => {
                    // Whatever was allocated before the failure is still recorded.
                    self.log(&g, &ops);
                    drop(l);
                    drop(g);
                    match e {
                        Error::TooBig(_) if attempt == 0 && lay.root().holds_data_in_metadata() => {
                            drop(guard);
                            self.promote(ino)?;
                            continue;
                        }
                        e => return Err(e),
                    }
                }
            }
        }
        Err(Error::TooBig(format!("inode {ino}")))
    }

    /// Makes sure a file's layout can hold `end` bytes: an inline file that
    /// would outgrow its block moves to the default layout first.
    fn ensure_capacity(&self, ino: Ino, end: u64) -> Result<()> {
        let (_, lay, _) = self.file_layout(ino)?;
        if end.div_ceil(BS) <= lay.root().capacity() {
            return Ok(());
        }
        if lay.root().holds_data_in_metadata() {
            return self.promote(ino);
        }
        Err(Error::TooBig(format!("inode {ino}: {end} bytes exceed what its layout can hold")))
    }

    /// A small file outgrew its inline layout: move its data to the pool's
    /// default layout.
    fn promote(&self, ino: Ino) -> Result<()> {
        let node = self.state().inode(ino)?;
        let _io = node.io.write();
        let (old, size) = {
            let d = node.data.read();
            (d.layout()?.cloned().ok_or_else(|| Error::Stale(format!("inode {ino}")))?, d.size)
        };
        if !old.root().holds_data_in_metadata() {
            return Ok(());
        }
        let fresh = Arc::new(Layout::build(&self.file_spec(&self.default_layout())?)?);
        let mut e = Encoder::new();
        fresh.encode(&mut e);
        let rio = self.reader_io(ino);
        let mut buf = vec![0u8; size.div_ceil(BS) as usize * BLOCK_SIZE];
        old.root().read(&rio, 0, &mut buf)?;
        let g = self.inner.gate.enter();
        let changes = Mutex::new(Vec::new());
        let sink = |c: NodeRecord| changes.lock().push(c);
        let io = self.writer_io(ino, g.epoch(), &sink, true);
        if !buf.is_empty() {
            fresh.root().write(&io, 0, &buf)?;
        }
        self.install_layout(&g, ino, e.into_inner(), changes.into_inner())?;
        tracing::debug!("inode {ino}: inline data moved to the default layout");
        Ok(())
    }

    /// Gives file `ino` a new tree, the way replay installs it: `SetLayout`
    /// with the tree as encoded before it was written, then the records its
    /// writes made (`changes`), applied and logged as one group in `g`'s
    /// batch. The caller holds the file's I/O lock exclusively.
    pub(crate) fn install_layout(
        &self,
        g: &crate::journal::Entered,
        ino: Ino,
        encoded: Vec<u8>,
        changes: Vec<NodeRecord>,
    ) -> Result<()> {
        let mut ops = vec![Op::SetLayout { ino, layout: encoded }];
        ops.extend(changes.into_iter().map(|change| Op::Map { ino, change }));
        let mut l = self.state().lock(&[ino]);
        for op in &ops {
            self.state().apply(op, &mut l)?;
        }
        self.log(g, &ops);
        Ok(())
    }

    /// Sets a file's size: frees blocks past it or leaves a hole before it.
    /// Refused for space (the rewrite of a partial last block goes to
    /// fresh space), it runs again once space is reclaimed: the blocks it
    /// dropped are free once the batch that dropped them commits.
    pub fn truncate(&self, ino: Ino, size: u64) -> Result<()> {
        self.with_room(|| self.truncate_once(ino, size))
    }

    fn truncate_once(&self, ino: Ino, size: u64) -> Result<()> {
        self.check_writable()?;
        if size > MAX_FILE_SIZE {
            return Err(Error::TooBig(format!("inode {ino}: size {size}")));
        }
        self.ensure_capacity(ino, size)?;
        let (node, _, mut from) = self.file_layout(ino)?;
        flags::check_change(&node.data.read(), ino, "truncate")?;
        // A file protected for transactions: the bytes from the smaller of
        // the old and new sizes on change (cut off, or come to read as
        // zeros), and are locked against them. Once the lock is held, the
        // size cannot drop below its start (whatever shrinks or grows the
        // file locks bytes there too); it may have meanwhile.
        let _txn = loop {
            from = from.min(size);
            let g = self.protect_write(&node, ino, from, u64::MAX)?;
            let now = node.data.read().size;
            if g.is_none() || now >= from {
                break g;
            }
            from = now;
        };
        let _io = node.io.write();
        let (lay, old) = {
            let d = node.data.read();
            (d.layout()?.cloned().ok_or_else(|| Error::Stale(format!("inode {ino}")))?, d.size)
        };
        let g = self.inner.gate.enter();
        let changes = Mutex::new(Vec::new());
        let sink = |c: NodeRecord| changes.lock().push(c);
        let io = self.writer_io(ino, g.epoch(), &sink, true);
        if size < old {
            let keep = size.div_ceil(BS);
            let cut = |lay: &Layout, io: &IoCtx| -> Result<()> {
                lay.root().truncate(io, keep)?;
                // Zero the tail of a partial last block that holds data.
                let tail = (size % BS) as usize;
                if tail != 0 && lay.root().next_data(keep - 1) == Some(keep - 1) {
                    let mut b = vec![0u8; BLOCK_SIZE];
                    lay.root().read(io, keep - 1, &mut b)?;
                    b[tail..].fill(0);
                    lay.root().write(io, keep - 1, &b)?;
                }
                Ok(())
            };
            let r = cut(&lay, &io);
            if let Err(e) = r {
                // What was dropped stays dropped, and is recorded: the
                // size is the old one, the blocks past the new end gone. A
                // migration under way ends (its tree still has them).
                self.end_migration(ino, || {
                    Error::Stale(format!("inode {ino}: a truncate failed during the migration"))
                });
                self.inner.cache.invalidate_from(ino, size / BS);
                let ops: Vec<Op> = changes.into_inner().into_iter().map(|change| Op::Map { ino, change }).collect();
                self.log(&g, &ops);
                return Err(e);
            }
            self.mirror(ino, g.epoch(), &|fresh, io, _| cut(fresh, io));
        }
        // The last block may have been zeroed past the new end.
        self.inner.cache.invalidate_from(ino, size.min(old) / BS);
        let t = now();
        let mut ops: Vec<Op> = changes.into_inner().into_iter().map(|change| Op::Map { ino, change }).collect();
        let set = Op::SetSize { ino, size, mtime: t };
        let mut l = self.state().lock(&[ino]);
        self.state().apply(&set, &mut l)?;
        ops.push(set);
        self.log(&g, &ops);
        // Damage past the new end went with it (a partial last block was
        // read, cut and written back above).
        self.inner.errors.truncated(ino, size.div_ceil(BS) * BS);
        Ok(())
    }

    /// `fallocate(2)`: mode 0 allocates space for [off, off+len) and may
    /// extend the size, FALLOC_FL_KEEP_SIZE does not extend it;
    /// FALLOC_FL_PUNCH_HOLE (with KEEP_SIZE) makes the range read as zeros
    /// and gives whole blocks' space back where the layout can drop them;
    /// FALLOC_FL_ZERO_RANGE makes it read as zeros with its space allocated
    /// (and, without KEEP_SIZE, may extend the size). FALLOC_FL_COLLAPSE_RANGE
    /// and FALLOC_FL_INSERT_RANGE move what follows a range, where the
    /// layout can ([`Fs::move_range`]).
    pub fn fallocate(&self, ino: Ino, off: u64, len: u64, mode: i32) -> Result<()> {
        // Refused for space, it runs again once space is reclaimed (each
        // step is recorded as it goes; a range done again is the same).
        self.with_room(|| self.fallocate_once(ino, off, len, mode))
    }

    fn fallocate_once(&self, ino: Ino, off: u64, len: u64, mode: i32) -> Result<()> {
        self.check_writable()?;
        const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        let end = off
            .checked_add(len)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or_else(|| Error::TooBig(format!("inode {ino}")))?;
        if len == 0 {
            return Err(Error::Invalid(format!("inode {ino}: fallocate of 0 bytes")));
        }
        // Immutable: nothing; append-only: only space beyond what it holds.
        if let Ok(node) = self.state().inode(ino) {
            let d = node.data.read();
            if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
                flags::check_change(&d, ino, "fallocate")?;
            } else {
                flags::check_write(&d, ino, "fallocate")?;
            }
        }
        // A file protected for transactions: locked against them throughout.
        let _txn = match self.state().inode(ino) {
            Ok(node) => self.protect_write(&node, ino, 0, u64::MAX)?,
            Err(_) => None,
        };
        match mode {
            0 | libc::FALLOC_FL_KEEP_SIZE => {}
            PUNCH => return self.zero_range(ino, off, end, true, false),
            libc::FALLOC_FL_ZERO_RANGE => return self.zero_range(ino, off, end, false, true),
            m if m == libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE => {
                return self.zero_range(ino, off, end, false, false)
            }
            libc::FALLOC_FL_COLLAPSE_RANGE => return self.move_range(ino, off, len, false),
            libc::FALLOC_FL_INSERT_RANGE => return self.move_range(ino, off, len, true),
            _ => return Err(Error::NotSupported(format!("fallocate mode {mode:#x}"))),
        }
        self.preallocate(ino, off, end, mode & libc::FALLOC_FL_KEEP_SIZE != 0)
    }

    /// FALLOC_FL_COLLAPSE_RANGE (`insert` false): bytes [off, off+len) go
    /// and what follows moves down, the file shrinking by `len`;
    /// FALLOC_FL_INSERT_RANGE: a hole of `len` bytes opens at `off`, what
    /// follows moving up. Both whole blocks, inside the file (a collapse
    /// must leave something after the range, as on Linux), and only where
    /// the layout can move its mappings (`Block::can_shift`: extents, with
    /// checksums, and stripes or regions by whole rows); one journal group,
    /// so a crash shows the file before or after. A migration under way
    /// ends (run it again).
    fn move_range(&self, ino: Ino, off: u64, len: u64, insert: bool) -> Result<()> {
        let what = if insert { "insert" } else { "collapse" };
        if !off.is_multiple_of(BS) || !len.is_multiple_of(BS) {
            return Err(Error::Invalid(format!("inode {ino}: {what} of {len} bytes at {off}: not whole 4 KiB blocks")));
        }
        let (node, _, _) = self.file_layout(ino)?;
        let _io = node.io.write();
        let (lay, size) = {
            let d = node.data.read();
            (d.layout()?.cloned().ok_or_else(|| Error::Stale(format!("inode {ino}")))?, d.size)
        };
        let new_size = if insert {
            if off >= size {
                return Err(Error::Invalid(format!("inode {ino}: insert at {off}, at or past the end ({size})")));
            }
            size.checked_add(len)
                .filter(|&n| n <= MAX_FILE_SIZE)
                .ok_or_else(|| Error::TooBig(format!("inode {ino}: inserting {len} bytes into {size}")))?
        } else {
            if off.checked_add(len).is_none_or(|e| e >= size) {
                return Err(Error::Invalid(format!(
                    "inode {ino}: collapse of [{off}, {off}+{len}) reaches the end of the file ({size})"
                )));
            }
            size - len
        };
        let (from, delta) =
            if insert { (off / BS, (len / BS) as i64) } else { ((off + len) / BS, -((len / BS) as i64)) };
        if !lay.root().can_shift(from, delta) || (insert && new_size.div_ceil(BS) > lay.root().capacity()) {
            return Err(Error::NotSupported(format!(
                "inode {ino}: its layout {} cannot {what} {len} bytes at {off} (extents can, with checksums; \
                 stripes and regions by whole rows of units)",
                lay.spec()
            )));
        }
        self.end_migration(ino, || Error::Stale(format!("inode {ino}: a range was {what}ed during the migration")));
        let g = self.inner.gate.enter();
        let changes = Mutex::new(Vec::new());
        let sink = |c: NodeRecord| changes.lock().push(c);
        let io = self.writer_io(ino, g.epoch(), &sink, true);
        let r = lay.root().shift(&io, from, delta);
        self.inner.cache.invalidate_from(ino, off / BS);
        let mut ops: Vec<Op> = changes.into_inner().into_iter().map(|change| Op::Map { ino, change }).collect();
        if r.is_ok() {
            let set = Op::SetSize { ino, size: new_size, mtime: now() };
            let mut l = self.state().lock(&[ino]);
            self.state().apply(&set, &mut l)?;
            ops.push(set);
        }
        self.log(&g, &ops);
        r
    }

    /// Runs `f` on the layout `lay` of `ino` as one journal group: the
    /// records it makes are logged together, whether it succeeds or not.
    /// A migrating file gets the same change in its new tree. The caller
    /// holds the file's I/O lock (exclusively while it migrates) and read
    /// `lay` under it.
    fn layout_step(&self, ino: Ino, lay: &Layout, f: &dyn Fn(&Layout, &IoCtx) -> Result<()>) -> Result<()> {
        let g = self.inner.gate.enter();
        let changes = Mutex::new(Vec::new());
        let sink = |c: NodeRecord| changes.lock().push(c);
        let io = self.writer_io(ino, g.epoch(), &sink, true);
        let r = f(lay, &io);
        if r.is_ok() {
            self.mirror(ino, g.epoch(), &|fresh, io, _| f(fresh, io));
        }
        let ops: Vec<Op> = changes.into_inner().into_iter().map(|change| Op::Map { ino, change }).collect();
        self.log(&g, &ops);
        r
    }

    /// Allocates zeroed space for the holes of [off, end) (existing data
    /// stays), and unless `keep_size` grows the file to `end`.
    fn preallocate(&self, ino: Ino, off: u64, end: u64, keep_size: bool) -> Result<()> {
        self.ensure_capacity(ino, end)?;
        let (node, _, size) = self.file_layout(ino)?;
        let first = off / BS;
        let last = end.div_ceil(BS);
        let mut b = first;
        while b < last {
            // Steps run in parallel with whole-block writes, but not while
            // the file migrates (both trees must see them in one order).
            let shared = node.io.read();
            let _io = if self.migration(ino).is_some() {
                drop(shared);
                IoGuard::Excl(node.io.write())
            } else {
                IoGuard::Shared(shared)
            };
            // The tree as it is under the lock: a migration may have
            // switched the file to its new tree since the last step, and
            // space put in the old one, dropped at the switch, would be
            // owned by nothing.
            let lay = node.data.read().layout()?.cloned().ok_or_else(|| Error::Stale(format!("inode {ino}")))?;
            // Data already there stays; at most a step's worth is skipped
            // per hold of the lock.
            let skip_end = last.min(b + FALLOCATE_STEP);
            let hole_end = loop {
                if b == skip_end {
                    break None;
                }
                match lay.root().next_data(b) {
                    Some(d) if d == b => b += 1,
                    d => break Some(d.unwrap_or(u64::MAX).min(last)),
                }
            };
            let Some(hole_end) = hole_end else { continue };
            let n = (hole_end - b).min(FALLOCATE_STEP);
            // Zeroed space, not zeros sent: image files keep it as
            // unwritten extents, checksums record zero blocks.
            let r = self.layout_step(ino, &lay, &|lay, io| lay.root().write_zeroes(io, b, n));
            self.inner.cache.invalidate(ino, b, n);
            r?;
            b += n;
        }
        if !keep_size && end > size {
            let g = self.inner.gate.enter();
            let mut l = self.state().lock(&[ino]);
            if end > l.get(ino)?.size {
                let op = Op::SetSize { ino, size: end, mtime: now() };
                self.state().apply(&op, &mut l)?;
                self.log(&g, &[op]);
            }
        }
        Ok(())
    }

    /// Bytes [off, end) read as zeros afterwards. Inside the file, partial
    /// blocks at either end are read, zeroed in part and written back; a
    /// punch (`punch`) drops whole blocks through the layout
    /// (`Block::punch`, their space freed when the batch commits), writing
    /// zeros where the layout cannot drop them, and a zero-range writes
    /// zeroed space for them. A punch stops at the end of the file; a
    /// zero-range preallocates past it, growing the file to `end` with
    /// `extend`. Changes mtime and ctime.
    fn zero_range(&self, ino: Ino, off: u64, end: u64, punch: bool, extend: bool) -> Result<()> {
        let size = {
            let (node, _, _) = self.file_layout(ino)?;
            let _io = node.io.write();
            let (lay, size) = {
                let d = node.data.read();
                (d.layout()?.cloned().ok_or_else(|| Error::Stale(format!("inode {ino}")))?, d.size)
            };
            // Past the end of the file there is nothing to zero (a partial
            // last block is already zero past it).
            let stop = end.min(size);
            // A block holding data, zeroed in [from, to) of its bytes.
            let partial = |b: u64, from: usize, to: usize| -> Result<()> {
                self.layout_step(ino, &lay, &|lay, io| {
                    if lay.root().next_data(b) != Some(b) {
                        return Ok(());
                    }
                    let mut buf = vec![0u8; BLOCK_SIZE];
                    lay.root().read(io, b, &mut buf)?;
                    buf[from..to].fill(0);
                    lay.root().write(io, b, &buf)
                })
            };
            if off < stop {
                let (first, last) = (off / BS, (stop - 1) / BS);
                let head = (off % BS) as usize;
                let tail = match stop % BS {
                    0 => BLOCK_SIZE,
                    t => t as usize,
                };
                // Whole blocks: [full0, full1).
                let full0 = if head == 0 { first } else { first + 1 };
                let full1 = if tail == BLOCK_SIZE { last + 1 } else { last };
                if first == last && (head != 0 || tail != BLOCK_SIZE) {
                    partial(first, head, tail)?;
                } else {
                    if head != 0 {
                        partial(first, head, BLOCK_SIZE)?;
                    }
                    if tail != BLOCK_SIZE {
                        partial(last, 0, tail)?;
                    }
                }
                let mut b = full0;
                while b < full1 {
                    let n = (full1 - b).min(FALLOCATE_STEP);
                    self.layout_step(ino, &lay, &|lay, io| {
                        if !punch {
                            return lay.root().write_zeroes(io, b, n);
                        }
                        match lay.root().punch(io, b, n) {
                            Err(Error::NotSupported(_)) => lay.root().write_zeroes(io, b, n),
                            r => r,
                        }
                    })?;
                    b += n;
                }
                self.inner.cache.invalidate(ino, first, last + 1 - first);
                // Every block of the range holds what was written now.
                self.inner.errors.written(ino, first * BS, (last + 1 - first) * BS);
            }
            let g = self.inner.gate.enter();
            let mut l = self.state().lock(&[ino]);
            let t = now();
            let atime = l.get(ino)?.atime;
            self.state().apply(&Op::Times { ino, atime, mtime: t, ctime: t }, &mut l)?;
            drop(l);
            drop(g);
            self.mark_dirty(ino);
            size
        };
        // Zeroes past the end of the file: holes there, so preallocated
        // as mode 0 or KEEP_SIZE would.
        if !punch && end > size {
            self.preallocate(ino, size, end, !extend)?;
        }
        Ok(())
    }

    /// SEEK_DATA (`data` = true) or SEEK_HOLE from `off`; None = ENXIO.
    pub fn seek_data_hole(&self, ino: Ino, off: u64, data: bool) -> Result<Option<u64>> {
        let (_, lay, size) = self.file_layout(ino)?;
        if off >= size {
            return Ok(None);
        }
        let mut b = off / BS;
        if data {
            return Ok(lay.root().next_data(b).map(|x| (x * BS).max(off)).filter(|&x| x < size));
        }
        // The next block with no data, or the end of the file.
        let last = size.div_ceil(BS);
        while b < last {
            match lay.root().next_data(b) {
                Some(x) if x == b => b += 1,
                _ => return Ok(Some((b * BS).max(off).min(size))),
            }
        }
        Ok(Some(size))
    }
}

/// Reads bytes [off, off+buf.len()) through the layout: a partial head
/// block, whole blocks straight into the caller's buffer, a partial tail.
pub(crate) fn read_range(lay: &Layout, io: &IoCtx, off: u64, buf: &mut [u8]) -> Result<()> {
    let root = lay.root();
    let end = off + buf.len() as u64;
    let mut pos = off;
    let mut done = 0usize;
    let mut tmp = vec![0u8; BLOCK_SIZE];
    if !pos.is_multiple_of(BS) {
        root.read(io, pos / BS, &mut tmp)?;
        let h = (pos % BS) as usize;
        let n = (BLOCK_SIZE - h).min(buf.len());
        buf[..n].copy_from_slice(&tmp[h..h + n]);
        pos += n as u64;
        done += n;
    }
    let full = ((end - pos) / BS) as usize * BLOCK_SIZE;
    if full > 0 {
        root.read(io, pos / BS, &mut buf[done..done + full])?;
        pos += full as u64;
        done += full;
    }
    if pos < end {
        root.read(io, pos / BS, &mut tmp)?;
        let n = (end - pos) as usize;
        buf[done..].copy_from_slice(&tmp[..n]);
    }
    Ok(())
}

/// Writes bytes at `off` through the layout; partial blocks at either end are
/// read, merged and written back.
pub(crate) fn write_range(lay: &Layout, io: &IoCtx, off: u64, data: &[u8]) -> Result<()> {
    let root = lay.root();
    let end = off + data.len() as u64;
    let mut pos = off;
    let mut done = 0usize;
    let mut tmp = vec![0u8; BLOCK_SIZE];
    if !pos.is_multiple_of(BS) || (end - pos) < BS {
        root.read(io, pos / BS, &mut tmp)?;
        let h = (pos % BS) as usize;
        let n = (BLOCK_SIZE - h).min(data.len());
        tmp[h..h + n].copy_from_slice(&data[..n]);
        root.write(io, pos / BS, &tmp)?;
        pos += n as u64;
        done += n;
    }
    let full = ((end - pos) / BS) as usize * BLOCK_SIZE;
    if full > 0 {
        root.write(io, pos / BS, &data[done..done + full])?;
        pos += full as u64;
        done += full;
    }
    if pos < end {
        root.read(io, pos / BS, &mut tmp)?;
        let n = (end - pos) as usize;
        tmp[..n].copy_from_slice(&data[done..]);
        root.write(io, pos / BS, &tmp)?;
    }
    Ok(())
}
