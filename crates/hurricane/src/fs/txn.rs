//! Embedded transactions (Seltzer, ch. 5-6): reads and writes of any number
//! of files that commit all together or not at all.
//!
//! ```no_run
//! # fn main() -> hurricane::Result<()> {
//! # let fs: hurricane::Fs = todo!();
//! let a = fs.create("/a", None)?;
//! let b = fs.create("/b", None)?;
//! for f in [&a, &b] {
//!     fs.setxattr(&hurricane::Creds::root(), f.ino(), hurricane::xattr::TXN.as_bytes(), b"1", 0)?;
//! }
//! let t = fs.begin()?;
//! t.write(&a, 0, b"debit")?;
//! t.write(&b, 0, b"credit")?;
//! t.commit()?; // both or neither, durable when it returns
//! # Ok(())
//! # }
//! ```
//!
//! * **Protection.** Only files whose `user.hurricane.txn` is "1" may be
//!   written in a transaction. Every other write to such a file takes the
//!   same range locks for its duration, so it never interleaves with a
//!   transaction's locked ranges; other files pay nothing.
//! * **Locking** (strict two-phase): a transactional read locks its file
//!   block range shared, a write exclusive (`locks.rs`); locks are released
//!   only at commit or abort. A request that would close a cycle of waiting
//!   transactions fails with [`Error::Deadlock`] and aborts its transaction.
//! * **No steal.** Writes are buffered in memory, whole file blocks per
//!   file (partial blocks read and merged at the first write); reads see the
//!   transaction's own writes. Nothing reaches a device before commit.
//! * **Commit.** Under the files' I/O locks and inside one entry of the
//!   journal gate, each run of written blocks is punched (the old mapping
//!   dropped; its space is freed only once the batch commits, so the old
//!   data stays on disk untouched) and written again into fresh space; the
//!   node records of every file and every size change are logged as one
//!   journal group, and the journal is forced (group commit). A crash
//!   before that record is durable leaves the new blocks unreferenced and
//!   the old mappings in force; after it, the new ones. Only layouts made
//!   of nodes that write punched ranges out of place (`extent`, `stripe`,
//!   `regions`, `checksum`, `replicate`) can be written in a transaction.

mod locks;

pub use locks::{LockTable, Mode, Owner};

use super::io::MAX_FILE_SIZE;
use super::{now, File, Fs};
use crate::blocks::{IoCtx, Layout, NodeRecord, BLOCK_SIZE};
use crate::error::{Error, Result};
use crate::journal::{Ino, Op};
use crate::xattr::TXN;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

const BS: u64 = BLOCK_SIZE as u64;
/// Bytes a transaction may buffer (its written blocks).
pub const MAX_TXN_BYTES: u64 = 256 << 20;
/// Block types whose punch drops a mapping (space freed when the batch
/// commits) and whose write of a hole goes to fresh space: a commit that
/// punches and rewrites a range through them never overwrites data in place.
const OUT_OF_PLACE: &[&str] = &["extent", "log", "stripe", "regions", "checksum", "replicate"];

/// The written blocks of one file in a transaction.
#[derive(Default)]
struct TxnFile {
    /// Whole file blocks as they will be after the commit.
    blocks: BTreeMap<u64, Box<[u8]>>,
    /// One past the last byte written (the file grows to it at commit).
    end: u64,
}

#[derive(Default)]
struct TxnState {
    files: BTreeMap<Ino, TxnFile>,
    bytes: u64,
    /// Why the transaction can no longer be used (a deadlock or failure
    /// aborted it).
    dead: Option<String>,
}

/// A transaction: reads and writes of files that commit atomically
/// (see the module documentation). Dropping one that was not committed
/// aborts it.
pub struct Transaction {
    fs: Fs,
    owner: Owner,
    st: Mutex<TxnState>,
    done: bool,
}

/// Whether a file's `user.hurricane.txn` is "1".
pub(crate) fn protected(d: &crate::namespace::InodeData) -> bool {
    !d.xattrs.is_empty() && d.xattrs.get(TXN.as_bytes()).is_some_and(|v| v == b"1")
}

/// Checks a value given to `user.hurricane.txn` ("1" or "0", a trailing
/// newline or NUL allowed) and returns it as kept.
pub(crate) fn check_flag(value: &[u8]) -> Result<&'static [u8]> {
    let end = value.iter().rposition(|&c| c != b'\n' && c != 0).map_or(0, |i| i + 1);
    match &value[..end] {
        b"1" => Ok(b"1"),
        b"0" => Ok(b"0"),
        _ => Err(Error::Invalid(format!("{TXN} must be \"1\" or \"0\", not {:?}", String::from_utf8_lossy(value)))),
    }
}

/// Block types through which a read finds each block in one place only (no
/// copies a read could fall back on, which recovery would not all see).
const SINGLE_COPY: &[&str] = &["checksum", "extent", "log", "stripe", "regions"];

/// Whether recovery can tell by reading whether a commit's data reached the
/// disk: every node keeps one copy of each block, and every per-device leaf
/// lies under a `checksum` node, so data that did not arrive fails its
/// checksum (`fs/recover.rs`).
fn verifiable(lay: &Layout) -> bool {
    fn walk(b: &Arc<dyn crate::blocks::Block>, checked: bool) -> bool {
        let name = b.kind().name;
        let checked = checked || name == "checksum";
        SINGLE_COPY.contains(&name)
            && (b.device().is_none() || checked)
            && b.children().iter().all(|c| walk(c, checked))
    }
    walk(lay.root(), false)
}

/// Refuses a layout a commit could not write out of place.
fn check_layout(ino: Ino, lay: &Layout) -> Result<()> {
    if let Some(n) = lay.nodes().iter().find(|n| !OUT_OF_PLACE.contains(&n.kind().name)) {
        return Err(Error::NotSupported(format!(
            "inode {ino}: transactions need a layout that can rewrite a range out of place ({}), and its layout {} \
             has a {} node",
            OUT_OF_PLACE.join(", "),
            lay.spec(),
            n.kind().name
        )));
    }
    Ok(())
}

impl Fs {
    /// Starts a transaction (see [`Transaction`]).
    pub fn begin(&self) -> Result<Transaction> {
        self.check_writable()?;
        Ok(Transaction {
            fs: self.clone(),
            owner: self.inner.txn_locks.owner(),
            st: Mutex::new(TxnState::default()),
            done: false,
        })
    }

    /// The lock a non-transactional write of file blocks [start, end) of a
    /// protected file holds while it writes (None for other files).
    pub(crate) fn protect_write(
        &self,
        node: &crate::namespace::Inode,
        ino: Ino,
        start: u64,
        end: u64,
    ) -> Result<Option<locks::Guard<'_>>> {
        if !protected(&node.data.read()) {
            return Ok(None);
        }
        locks::Guard::exclusive(&self.inner.txn_locks, ino, start, end).map(Some)
    }

    /// Whether `ino` is a protected file (`user.hurricane.txn` = "1").
    pub fn txn_protected(&self, ino: Ino) -> bool {
        self.state().get(ino).is_some_and(|n| protected(&n.data.read()))
    }

    /// Range locks held now (by transactions and protected writes).
    pub fn txn_locks_held(&self) -> usize {
        self.inner.txn_locks.held()
    }
}

impl Transaction {
    fn live(&self) -> Result<parking_lot::MutexGuard<'_, TxnState>> {
        let st = self.st.lock();
        if let Some(why) = &st.dead {
            return Err(Error::Invalid(format!("transaction {}: aborted ({why})", self.owner)));
        }
        Ok(st)
    }

    /// Takes a lock; a deadlock aborts the transaction (its locks go at once,
    /// so the others can go on) and is returned.
    fn lock(&self, st: &mut TxnState, ino: Ino, start: u64, end: u64, mode: Mode) -> Result<()> {
        match self.fs.inner.txn_locks.lock(self.owner, ino, start, end, mode) {
            Err(e @ Error::Deadlock(_)) => {
                self.kill(st, &e);
                Err(e)
            }
            r => r,
        }
    }

    fn kill(&self, st: &mut TxnState, why: &Error) {
        st.dead = Some(why.to_string());
        st.files.clear();
        st.bytes = 0;
        self.fs.inner.txn_locks.release(self.owner);
    }

    /// This transaction's id (the owner named in deadlock errors).
    pub fn id(&self) -> u64 {
        self.owner
    }

    /// Writes `data` at `off` of `file` (open for writing, protected) in the
    /// transaction: locks the blocks exclusively and buffers them.
    pub fn write(&self, file: &File, off: u64, data: &[u8]) -> Result<usize> {
        file.check_can_write()?;
        self.write_ino(file.ino(), off, data)
    }

    /// [`Transaction::write`] by inode number.
    pub fn write_ino(&self, ino: Ino, off: u64, data: &[u8]) -> Result<usize> {
        self.fs.check_writable()?;
        let mut st = self.live()?;
        if data.is_empty() {
            return Ok(0);
        }
        let end = off
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or_else(|| Error::TooBig(format!("inode {ino}: write past {MAX_FILE_SIZE} bytes")))?;
        if !st.files.contains_key(&ino) {
            let (node, lay, _) = self.fs.file_layout(ino)?;
            if !protected(&node.data.read()) {
                return Err(Error::Invalid(format!(
                    "inode {ino}: not protected for transactions (set {TXN} to \"1\" to write it in one)"
                )));
            }
            check_layout(ino, &lay)?;
        }
        let (first, last) = (off / BS, end.div_ceil(BS));
        let new_blocks = (first..last).filter(|b| st.files.get(&ino).is_none_or(|f| !f.blocks.contains_key(b))).count();
        if st.bytes + new_blocks as u64 * BS > MAX_TXN_BYTES {
            return Err(Error::TooBig(format!(
                "transaction {}: more than {MAX_TXN_BYTES} bytes written (commit it and start another)",
                self.owner
            )));
        }
        self.lock(&mut st, ino, first, last, Mode::Exclusive)?;
        let st = &mut *st;
        // Blocks written in part and not yet buffered are read first (zeros
        // past the end of the file), before anything changes, so a failed
        // read leaves the transaction as it was.
        let mut edges: Vec<(u64, Box<[u8]>)> = Vec::new();
        for b in [first, last - 1] {
            let partial = off > b * BS || end < (b + 1) * BS;
            let held = st.files.get(&ino).is_some_and(|f| f.blocks.contains_key(&b));
            if partial && !held && edges.iter().all(|(e, _)| *e != b) {
                let mut blk = vec![0u8; BLOCK_SIZE];
                self.fs.read(ino, b * BS, &mut blk)?;
                edges.push((b, blk.into_boxed_slice()));
            }
        }
        let f = st.files.entry(ino).or_default();
        let mut pos = off;
        while pos < end {
            let b = pos / BS;
            let at = (pos % BS) as usize;
            let n = (BLOCK_SIZE - at).min((end - pos) as usize);
            let buf = f.blocks.entry(b).or_insert_with(|| {
                st.bytes += BS;
                match edges.iter().position(|(e, _)| *e == b) {
                    Some(i) => std::mem::take(&mut edges[i].1),
                    None => vec![0u8; BLOCK_SIZE].into_boxed_slice(),
                }
            });
            let d = (pos - off) as usize;
            buf[at..at + n].copy_from_slice(&data[d..d + n]);
            pos += n as u64;
        }
        f.end = f.end.max(end);
        Ok(data.len())
    }

    /// Reads up to `buf.len()` bytes at `off` of `file` as the transaction
    /// sees it (its own writes included): locks the blocks shared. Returns
    /// the count (0 at the end of the file).
    pub fn read(&self, file: &File, off: u64, buf: &mut [u8]) -> Result<usize> {
        file.check_can_read()?;
        self.read_ino(file.ino(), off, buf)
    }

    /// The size of file `ino` as this transaction sees it: the committed
    /// size, or the end of what it wrote past it (where an append goes).
    pub fn size_ino(&self, ino: Ino) -> Result<u64> {
        let st = self.live()?;
        let (_, _, size) = self.fs.file_layout(ino)?;
        Ok(size.max(st.files.get(&ino).map_or(0, |f| f.end)))
    }

    /// [`Transaction::read`] by inode number.
    pub fn read_ino(&self, ino: Ino, off: u64, buf: &mut [u8]) -> Result<usize> {
        let mut st = self.live()?;
        if buf.is_empty() {
            return Ok(0);
        }
        let end = off.saturating_add(buf.len() as u64);
        self.lock(&mut st, ino, off / BS, end.div_ceil(BS), Mode::Shared)?;
        let (_, _, size) = self.fs.file_layout(ino)?;
        let mine = st.files.get(&ino);
        let size = size.max(mine.map_or(0, |f| f.end));
        if off >= size {
            return Ok(0);
        }
        let n = (buf.len() as u64).min(size - off) as usize;
        let buf = &mut buf[..n];
        let got = self.fs.read(ino, off, buf)?;
        buf[got..].fill(0);
        if let Some(f) = mine {
            let end = off + n as u64;
            for (&b, data) in f.blocks.range(off / BS..end.div_ceil(BS)) {
                let (bs, be) = ((b * BS).max(off), (b * BS + BS).min(end));
                buf[(bs - off) as usize..(be - off) as usize]
                    .copy_from_slice(&data[(bs - b * BS) as usize..(be - b * BS) as usize]);
            }
        }
        Ok(n)
    }

    /// Makes every write of the transaction durable and visible, all
    /// together, and releases its locks. On an error before anything was
    /// logged the transaction is aborted and nothing changed.
    pub fn commit(mut self) -> Result<()> {
        self.done = true;
        // Writers wait for the cleaner when a log has run out of clean
        // segments (before any I/O lock is taken), as plain writes do.
        self.fs.clean_if_low();
        let st = std::mem::take(&mut *self.live()?);
        let r = self.apply(&st);
        let r = r.and_then(|logged| if logged { self.fs.sync() } else { Ok(()) });
        self.fs.inner.txn_locks.release(self.owner);
        r
    }

    /// Drops every write of the transaction and releases its locks.
    pub fn abort(mut self) {
        self.done = true;
        self.fs.inner.txn_locks.release(self.owner);
    }

    /// Writes the buffered blocks out of place and logs them as one group.
    /// Returns whether anything was logged.
    fn apply(&self, st: &TxnState) -> Result<bool> {
        let fs = &self.fs;
        if st.files.is_empty() {
            return Ok(false);
        }
        fs.check_writable()?;
        // Every file's I/O lock, exclusive, in inode order (the map's).
        let nodes = st.files.keys().map(|&ino| fs.state().inode(ino)).collect::<Result<Vec<_>>>()?;
        let _io: Vec<_> = nodes.iter().map(|n| n.io.write()).collect();
        let mut lays = Vec::with_capacity(nodes.len());
        for (node, (&ino, f)) in nodes.iter().zip(&st.files) {
            let (lay, still) = {
                let d = node.data.read();
                (d.layout()?.cloned().ok_or_else(|| Error::Stale(format!("inode {ino}")))?, protected(&d))
            };
            // Unprotected meanwhile: plain writes may have gone around the locks.
            if !still {
                return Err(Error::Invalid(format!(
                    "inode {ino}: {TXN} was cleared during the transaction, which is aborted"
                )));
            }
            check_layout(ino, &lay)?;
            if f.end.div_ceil(BS) > lay.root().capacity() {
                return Err(Error::TooBig(format!("inode {ino}: {} bytes exceed what its layout can hold", f.end)));
            }
            if fs.migration(ino).is_some() {
                fs.end_migration(
                    ino,
                    Error::Stale(format!("inode {ino}: a transaction wrote it during the migration")),
                );
            }
            lays.push(lay);
        }
        self.check_space(st, &lays)?;
        let g = fs.inner.gate.enter();
        let mut ops: Vec<Op> = Vec::new();
        let mut failed = None;
        for (lay, (&ino, f)) in lays.iter().zip(&st.files) {
            let changes = Mutex::new(Vec::new());
            let sink = |c: NodeRecord| changes.lock().push(c);
            let io = IoCtx { owner: ino, storage: fs.storage(), epoch: g.epoch(), sink: &sink, repair: true };
            // Writes recovery can check need no flush ahead of the journal
            // record (verified mode, journal/mod.rs): the record names them.
            let r = if verifiable(lay) {
                ops.extend(runs(f).into_iter().map(|(start, blocks)| Op::Verify { ino, start, blocks }));
                crate::device::verified_by_recovery(|| write_runs(lay, &io, f))
            } else {
                write_runs(lay, &io, f)
            };
            for (b, n) in runs(f) {
                fs.inner.cache.invalidate(ino, b, n);
            }
            ops.extend(changes.into_inner().into_iter().map(|change| Op::Map { ino, change }));
            if let Err(e) = r {
                failed = Some(e);
                break;
            }
        }
        let t = now();
        let mut lazy = Vec::new();
        {
            let inos: Vec<Ino> = st.files.keys().copied().collect();
            let mut l = fs.state().lock(&inos);
            for (&ino, f) in &st.files {
                // (Errors are kept, not returned: what was written is logged.)
                let (size, atime) = match l.get(ino) {
                    Ok(d) => (d.size, d.atime),
                    Err(e) => {
                        failed.get_or_insert(e);
                        continue;
                    }
                };
                let r = if failed.is_none() && f.end > size {
                    let op = Op::SetSize { ino, size: f.end, mtime: t };
                    let r = fs.state().apply(&op, &mut l);
                    ops.push(op);
                    r
                } else {
                    lazy.push(ino);
                    fs.state().apply(&Op::Times { ino, atime, mtime: t, ctime: t }, &mut l)
                };
                if let Err(e) = r {
                    failed.get_or_insert(e);
                }
            }
            // One group: every file's records and sizes commit together.
            // (After a failure part way, what was done is logged as it was
            // done, as a failed write's allocations are.)
            fs.log(&g, &ops);
        }
        drop(g);
        for ino in lazy {
            fs.mark_dirty(ino);
        }
        match failed {
            Some(e) => Err(Error::Device(format!(
                "transaction {}: commit failed part way, its files may hold part of it: {e}",
                self.owner
            ))),
            None => Ok(true),
        }
    }

    /// Refuses a commit the devices have no room for, before anything
    /// changes: each run needs fresh space on every device a leaf of its
    /// file's layout has (an upper bound), while the space it replaces is
    /// freed only after the commit.
    fn check_space(&self, st: &TxnState, lays: &[Arc<Layout>]) -> Result<()> {
        let mut need: BTreeMap<u32, u64> = BTreeMap::new();
        for (lay, f) in lays.iter().zip(st.files.values()) {
            let blocks = f.blocks.len() as u64;
            for n in lay.nodes() {
                if let Some(dev) = n.device() {
                    *need.entry(dev).or_default() += blocks;
                }
            }
        }
        let storage = self.fs.storage();
        for (dev, blocks) in need {
            // Data never takes the allocator's reserve (the meta-file's).
            let free =
                storage.allocs.get(dev as usize).map_or(0, |a| a.free_blocks().saturating_sub(a.reserved_blocks()));
            if free < blocks {
                return Err(Error::NoSpace(format!(
                    "device {dev}: transaction {} needs up to {blocks} free blocks to commit, {free} are free",
                    self.owner
                )));
            }
        }
        Ok(())
    }
}

/// Runs of consecutive written blocks: (first, count).
fn runs(f: &TxnFile) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &b in f.blocks.keys() {
        match out.last_mut() {
            Some((s, n)) if *s + *n == b => *n += 1,
            _ => out.push((b, 1)),
        }
    }
    out
}

/// Punches and rewrites each run of a file's written blocks.
fn write_runs(lay: &Layout, io: &IoCtx, f: &TxnFile) -> Result<()> {
    const STEP: u64 = 256;
    let mut buf = Vec::new();
    for (first, n) in runs(f) {
        let mut b = first;
        while b < first + n {
            let k = (first + n - b).min(STEP);
            buf.clear();
            for (_, data) in f.blocks.range(b..b + k) {
                buf.extend_from_slice(data);
            }
            lay.root().punch(io, b, k)?;
            lay.root().write(io, b, &buf)?;
            b += k;
        }
    }
    Ok(())
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if !self.done {
            self.fs.inner.txn_locks.release(self.owner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_blocks_group_into_runs() {
        let mut f = TxnFile::default();
        for b in [0u64, 1, 2, 5, 7, 8] {
            f.blocks.insert(b, vec![0u8; BLOCK_SIZE].into_boxed_slice());
        }
        assert_eq!(runs(&f), vec![(0, 3), (5, 1), (7, 2)]);
        assert!(runs(&TxnFile::default()).is_empty());
    }

    #[test]
    fn the_flag_takes_one_and_zero_only() {
        assert_eq!(check_flag(b"1").unwrap(), b"1");
        assert_eq!(check_flag(b"0\n").unwrap(), b"0");
        assert_eq!(check_flag(b"1\0").unwrap(), b"1");
        for bad in [&b""[..], b"2", b"yes", b"11", b"\n"] {
            let e = check_flag(bad).unwrap_err();
            assert!(matches!(e, Error::Invalid(_)) && e.to_string().contains(TXN), "{e}");
        }
    }
}
