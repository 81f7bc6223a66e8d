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
//!   same range locks for its duration (a plain write its bytes, a
//!   truncate everything from the smaller of the old and new sizes on, a
//!   fallocate the whole file), so it never interleaves with a
//!   transaction's locked ranges; other files pay nothing.
//! * **Locking** (strict two-phase, record level): a transactional read
//!   locks the bytes it asks for shared, a write the bytes it writes
//!   exclusive (`locks.rs`); locks are released only at commit or abort.
//!   Transactions that touch different bytes of one file block do not wait
//!   for each other. A request that would close a cycle of waiting
//!   transactions fails with [`Error::Deadlock`] and aborts its transaction.
//! * **No steal.** Writes are buffered in memory as byte patches per file
//!   (ranges that overlap or touch merged, later bytes winning); nothing is
//!   read to buffer them. Reads see the committed file with the
//!   transaction's own patches laid over it. Nothing reaches a device before
//!   commit.
//! * **Commit.** Under the files' I/O locks and inside one entry of the
//!   journal gate, each run of file blocks the patches touch is read as
//!   committed now (zeros past the end of the file; blocks the patches
//!   cover whole are not read), the patches are laid over it, and the run
//!   is punched (the old mapping dropped; its space is freed only once the
//!   batch commits, so the old data stays on disk untouched) and written
//!   again into fresh space; the node records of every file and every size
//!   change are logged as one journal group, and the journal is forced
//!   (group commit). Reading at commit is what makes record locks safe:
//!   two transactions that changed different bytes of one block commit one
//!   after the other under the file's I/O lock, each merging its bytes onto
//!   what the other committed, so neither update is lost. A crash before
//!   the record is durable leaves the new blocks unreferenced and the old
//!   mappings in force; after it, the new ones (and every group logged
//!   before it, among them those of the commits it merged onto). Only
//!   layouts made of nodes that write punched ranges out of place
//!   (`extent`, `log`, `stripe`, `regions`, `checksum`, `replicate`) can be
//!   written in a transaction.
//! * **One flush.** When every file of the commit is checksummed and keeps
//!   one copy of each block ([`verifiable`]), its data is written for
//!   recovery to verify: the group names the runs (`Op::Verify`), the
//!   record goes out in the journal's verified mode together with the data,
//!   and one flush of every device makes both durable; a crash that kept
//!   part of the data from the disk is found at recovery, which drops the
//!   record whole (`fs/recover.rs`). Other commits flush the data first
//!   (ordered mode).
//! * **Cleaning.** A commit first waits for the log cleaner when a device's
//!   log is down to its reserve of clean segments, as a plain write does.
//! * **Bounds.** Every lock wait is bounded ([`TxnLimits::lock_wait`];
//!   `locks.rs`). What transactions buffer is counted per account (the user
//!   a mount begins one for, [`Fs::begin_as`]; the process for
//!   [`Fs::begin`]) and for the pool: a transaction past
//!   [`TxnLimits::bytes`], an account past `user_bytes` or `user_open`, or
//!   the pool past `pool_bytes` or `pool_open` is refused with
//!   [`Error::NoMemory`] (ENOMEM), and the transaction stays usable.

mod locks;

pub use locks::{may_wait, waiting_at_most, LockTable, Mode, Owner, DEFAULT_LOCK_WAIT};

use super::io::MAX_FILE_SIZE;
use super::{now, File, Fs};
use crate::blocks::{IoCtx, Layout, NodeRecord, BLOCK_SIZE};
use crate::error::{Error, Result};
use crate::journal::{Ino, Op};
use crate::xattr::TXN;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

const BS: u64 = BLOCK_SIZE as u64;
/// Cleaning passes a commit refused for space runs before it gives up.
const MAX_CLEAN_RETRIES: usize = 8;
/// Bytes a transaction may buffer (its patches, overlaps counted once), by
/// default.
pub const MAX_TXN_BYTES: u64 = 256 << 20;

/// Bounds on transactions (`Options::txn_limits`; a mount's `txn_*`
/// options). An *account* is whom a transaction is counted against: the
/// user a mount began it for ([`Fs::begin_as`]), or the process itself
/// ([`Fs::begin`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnLimits {
    /// Bytes one transaction may buffer.
    pub bytes: u64,
    /// Bytes the open transactions of one account may buffer together.
    pub user_bytes: u64,
    /// Bytes all open transactions may buffer together.
    pub pool_bytes: u64,
    /// Transactions one account may have open at once.
    pub user_open: usize,
    /// Transactions open at once in the pool.
    pub pool_open: usize,
    /// The longest a request waits for a range lock (then EAGAIN).
    pub lock_wait: Duration,
}

impl Default for TxnLimits {
    fn default() -> Self {
        TxnLimits {
            bytes: MAX_TXN_BYTES,
            user_bytes: MAX_TXN_BYTES,
            pool_bytes: 4 * MAX_TXN_BYTES,
            user_open: 64,
            pool_open: 1024,
            lock_wait: DEFAULT_LOCK_WAIT,
        }
    }
}

/// What open transactions hold now, and their bounds (`Fs::txn_usage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnUsage {
    /// Transactions open.
    pub open: usize,
    /// Bytes they buffer.
    pub bytes: u64,
    /// Accounts with a transaction open.
    pub accounts: usize,
    pub limits: TxnLimits,
}

/// Who a transaction is counted against: a user, or the process (None).
type Account = Option<u32>;

/// The counts behind [`TxnLimits`]: open transactions and buffered bytes,
/// per account and for the pool.
pub(crate) struct TxnBudget {
    limits: TxnLimits,
    inner: Mutex<BudgetState>,
}

#[derive(Default)]
struct BudgetState {
    open: usize,
    bytes: u64,
    /// Per account: (open, bytes); absent once both are 0.
    accounts: HashMap<Account, (usize, u64)>,
}

fn who(a: Account) -> String {
    a.map_or_else(|| "this process".to_string(), |u| format!("uid {u}"))
}

impl TxnBudget {
    pub(crate) fn new(limits: TxnLimits) -> TxnBudget {
        TxnBudget { limits, inner: Mutex::default() }
    }

    /// Counts a new transaction of `a`, or refuses it.
    fn open(&self, a: Account) -> Result<()> {
        let mut b = self.inner.lock();
        let mine = b.accounts.get(&a).map_or(0, |x| x.0);
        if mine >= self.limits.user_open {
            return Err(Error::NoMemory(format!(
                "{}: {mine} transactions open, the most one user may have (txn_open_per_user)",
                who(a)
            )));
        }
        if b.open >= self.limits.pool_open {
            return Err(Error::NoMemory(format!(
                "{} transactions open in the pool, the most it allows (txn_open)",
                b.open
            )));
        }
        b.open += 1;
        b.accounts.entry(a).or_default().0 += 1;
        Ok(())
    }

    /// Counts `n` more buffered bytes of `a` (`had` already), or refuses them.
    fn charge(&self, a: Account, had: u64, n: u64) -> Result<()> {
        if had + n > self.limits.bytes {
            return Err(Error::NoMemory(format!(
                "a transaction of {} would buffer more than {} bytes (txn_bytes): commit it and start another",
                who(a),
                self.limits.bytes
            )));
        }
        let mut b = self.inner.lock();
        let mine = b.accounts.get(&a).map_or(0, |x| x.1);
        if mine + n > self.limits.user_bytes {
            return Err(Error::NoMemory(format!(
                "{}: its transactions would buffer more than {} bytes (txn_bytes_per_user)",
                who(a),
                self.limits.user_bytes
            )));
        }
        if b.bytes + n > self.limits.pool_bytes {
            return Err(Error::NoMemory(format!(
                "the pool's transactions would buffer more than {} bytes (txn_bytes_total)",
                self.limits.pool_bytes
            )));
        }
        b.bytes += n;
        b.accounts.entry(a).or_default().1 += n;
        Ok(())
    }

    /// Gives back `bytes` of `a`, and its transaction too when `close`.
    fn refund(&self, a: Account, bytes: u64, close: bool) {
        let mut b = self.inner.lock();
        b.bytes = b.bytes.saturating_sub(bytes);
        if close {
            b.open = b.open.saturating_sub(1);
        }
        if let Some(x) = b.accounts.get_mut(&a) {
            x.1 = x.1.saturating_sub(bytes);
            if close {
                x.0 = x.0.saturating_sub(1);
            }
            if *x == (0, 0) {
                b.accounts.remove(&a);
            }
        }
    }

    pub(crate) fn usage(&self) -> TxnUsage {
        let b = self.inner.lock();
        TxnUsage { open: b.open, bytes: b.bytes, accounts: b.accounts.len(), limits: self.limits }
    }
}
/// Block types whose punch drops a mapping (space freed when the batch
/// commits) and whose write of a hole goes to fresh space: a commit that
/// punches and rewrites a range through them never overwrites data in place.
const OUT_OF_PLACE: &[&str] = &["extent", "log", "stripe", "regions", "checksum", "replicate"];

/// The writes of one file in a transaction.
#[derive(Default)]
struct TxnFile {
    /// Byte patches by offset: the bytes written, as they will be after the
    /// commit. Patches neither overlap nor touch (such writes merge).
    patches: BTreeMap<u64, Vec<u8>>,
    /// One past the last byte written (the file grows to it at commit).
    end: u64,
}

impl TxnFile {
    /// The patches that hold bytes of [off, end), in order: (offset, bytes).
    fn overlapping(&self, off: u64, end: u64) -> impl Iterator<Item = (u64, &[u8])> {
        let before = self.patches.range(..off).next_back().filter(|(&s, v)| s + v.len() as u64 > off);
        before.into_iter().chain(self.patches.range(off..end)).map(|(&s, v)| (s, v.as_slice()))
    }

    /// Bytes of [off, end) that no patch holds yet (what writing them adds).
    fn uncovered(&self, off: u64, end: u64) -> u64 {
        let covered: u64 = self.overlapping(off, end).map(|(s, v)| (s + v.len() as u64).min(end) - s.max(off)).sum();
        end - off - covered
    }

    /// Lays `data` at `off` over the patches: the patches it overlaps or
    /// touches become one, its bytes winning. A patch it extends keeps its
    /// buffer, so a run of appending writes copies each byte about once.
    fn put(&mut self, off: u64, data: &[u8]) {
        let end = off + data.len() as u64;
        let (start, mut buf) = match self.patches.range(..=off).next_back() {
            Some((&s, v)) if s + v.len() as u64 >= off => (s, self.patches.remove(&s).unwrap_or_default()),
            _ => (off, Vec::with_capacity(data.len())),
        };
        if (buf.len() as u64) < end - start {
            buf.resize((end - start) as usize, 0);
        }
        // Later patches that start inside the write or right after it: only
        // what reaches past the write survives.
        let later: Vec<u64> = self.patches.range(off..=end).map(|(&s, _)| s).collect();
        for s in later {
            let Some(v) = self.patches.remove(&s) else { continue };
            let ve = s + v.len() as u64;
            if ve > end {
                buf.resize((ve - start) as usize, 0);
                buf[(end - start) as usize..].copy_from_slice(&v[(end - s) as usize..]);
            }
        }
        buf[(off - start) as usize..(end - start) as usize].copy_from_slice(data);
        self.patches.insert(start, buf);
        self.end = self.end.max(end);
    }

    /// Copies the patched bytes of [off, off + buf.len()) into `buf`.
    fn overlay(&self, off: u64, buf: &mut [u8]) {
        let end = off + buf.len() as u64;
        for (s, v) in self.overlapping(off, end) {
            let (bs, be) = (s.max(off), (s + v.len() as u64).min(end));
            buf[(bs - off) as usize..(be - off) as usize].copy_from_slice(&v[(bs - s) as usize..(be - s) as usize]);
        }
    }

    /// Whether one patch covers file block `b` whole.
    fn covers_block(&self, b: u64) -> bool {
        self.patches.range(..=b * BS).next_back().is_some_and(|(&s, v)| s + v.len() as u64 >= (b + 1) * BS)
    }
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
    /// Whom its buffered bytes count against.
    account: Account,
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
    /// Starts a transaction (see [`Transaction`]), counted against this
    /// process.
    pub fn begin(&self) -> Result<Transaction> {
        self.begin_for(None)
    }

    /// Starts a transaction counted against user `uid` (a mount's caller):
    /// refused with [`Error::NoMemory`] when that user, or the pool, has
    /// as many open as [`TxnLimits`] allows.
    pub fn begin_as(&self, uid: u32) -> Result<Transaction> {
        self.begin_for(Some(uid))
    }

    fn begin_for(&self, account: Account) -> Result<Transaction> {
        self.check_writable()?;
        self.inner.txn_budget.open(account)?;
        Ok(Transaction {
            fs: self.clone(),
            owner: self.inner.txn_locks.owner(),
            account,
            st: Mutex::new(TxnState::default()),
            done: false,
        })
    }

    /// Open transactions, what they buffer, and the bounds.
    pub fn txn_usage(&self) -> TxnUsage {
        self.inner.txn_budget.usage()
    }

    /// The lock a non-transactional change of bytes [start, end) of a
    /// protected file holds while it runs (None for other files).
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
        self.fs.inner.txn_budget.refund(self.account, std::mem::take(&mut st.bytes), false);
        self.fs.inner.txn_locks.release(self.owner);
    }

    /// Whether the transaction has read or written file `ino` (holds a lock
    /// on it or buffers bytes of it).
    pub fn touches(&self, ino: Ino) -> bool {
        self.st.lock().files.contains_key(&ino) || self.fs.inner.txn_locks.holds(self.owner, ino)
    }

    /// The files the transaction has written to (its commit changes their
    /// times, and sizes).
    pub fn written(&self) -> Vec<Ino> {
        self.st.lock().files.keys().copied().collect()
    }

    /// This transaction's id (the owner named in deadlock errors).
    pub fn id(&self) -> u64 {
        self.owner
    }

    /// Writes `data` at `off` of `file` (open for writing, protected) in the
    /// transaction: locks those bytes exclusively and buffers them.
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
        let adds = st.files.get(&ino).map_or(end - off, |f| f.uncovered(off, end));
        // Counted before the lock is taken: a write refused for memory
        // holds no lock it never used.
        self.fs.inner.txn_budget.charge(self.account, st.bytes, adds)?;
        if let Err(e) = self.lock(&mut st, ino, off, end, Mode::Exclusive) {
            self.fs.inner.txn_budget.refund(self.account, adds, false);
            return Err(e);
        }
        st.bytes += adds;
        st.files.entry(ino).or_default().put(off, data);
        Ok(data.len())
    }

    /// Reads up to `buf.len()` bytes at `off` of `file` as the transaction
    /// sees it (its own writes included): locks the bytes asked for shared.
    /// Returns the count (0 at the end of the file).
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
        self.read_as(ino, off, buf, true)
    }

    /// Reads like [`Transaction::read_ino`] but takes no lock: what a
    /// caller who may not write the file reads (a mount serves such a
    /// caller's reads this way, so no reader can hold off the file's
    /// writers). It sees committed data with the transaction's own
    /// writes laid over it, with no guarantee that the bytes stay as read.
    pub fn read_ino_unlocked(&self, ino: Ino, off: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_as(ino, off, buf, false)
    }

    fn read_as(&self, ino: Ino, off: u64, buf: &mut [u8], lock: bool) -> Result<usize> {
        let mut st = self.live()?;
        if buf.is_empty() {
            return Ok(0);
        }
        let end = off.saturating_add(buf.len() as u64);
        if lock {
            self.lock(&mut st, ino, off, end, Mode::Shared)?;
        }
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
            f.overlay(off, buf);
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
        let mut r = self.apply(&st);
        // Refused for space before anything changed (`check_space`): other
        // writers may have taken what the cleaner freed. Clean (holding no
        // I/O lock) and try again while passes free something.
        for _ in 0..MAX_CLEAN_RETRIES {
            if !matches!(r, Err(Error::NoSpace(_))) || !self.fs.clean_for_space() {
                break;
            }
            r = self.apply(&st);
        }
        let r = r.and_then(|logged| if logged { self.fs.commit_all() } else { Ok(()) });
        self.fs.inner.txn_locks.release(self.owner);
        self.fs.inner.txn_budget.refund(self.account, st.bytes, false);
        r
    }

    /// Drops every write of the transaction and releases its locks.
    pub fn abort(mut self) {
        self.done = true;
        self.fs.inner.txn_locks.release(self.owner);
    }

    /// Merges the patches onto the committed blocks, writes those out of
    /// place and logs them as one group. Returns whether anything was
    /// logged.
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
        // Committed sizes, under the I/O locks: bytes at or past one read as
        // zeros when a block is merged.
        let mut sizes = Vec::with_capacity(nodes.len());
        for (node, (&ino, f)) in nodes.iter().zip(&st.files) {
            let (lay, still, size) = {
                let d = node.data.read();
                (d.layout()?.cloned().ok_or_else(|| Error::Stale(format!("inode {ino}")))?, protected(&d), d.size)
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
            fs.end_migration(ino, || Error::Stale(format!("inode {ino}: a transaction wrote it during the migration")));
            lays.push(lay);
            sizes.push(size);
        }
        self.check_space(st, &lays)?;
        let g = fs.inner.gate.enter();
        let mut ops: Vec<Op> = Vec::new();
        let mut failed = None;
        // Whether any block was punched or written (a failure before that
        // changed no file).
        let mut touched = false;
        for ((lay, &size), (&ino, f)) in lays.iter().zip(&sizes).zip(&st.files) {
            let changes = Mutex::new(Vec::new());
            let sink = |c: NodeRecord| changes.lock().push(c);
            let io = fs.writer_io(ino, g.epoch(), &sink, true);
            // Writes recovery can check need no flush ahead of the journal
            // record (verified mode, journal/mod.rs): the record names them.
            let r = if verifiable(lay) {
                ops.extend(runs(f).into_iter().map(|(start, blocks)| Op::Verify { ino, start, blocks }));
                crate::device::verified_by_recovery(|| self.write_runs(ino, lay, &io, f, size, &mut touched))
            } else {
                self.write_runs(ino, lay, &io, f, size, &mut touched)
            };
            for (b, n) in runs(f) {
                fs.inner.cache.invalidate(ino, b, n);
                if r.is_ok() {
                    // Written whole: no longer damaged.
                    fs.inner.errors.written(ino, b * BS, n * BS);
                }
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
            // (A commit that wrote no block changed no file.)
            for (&ino, f) in st.files.iter().filter(|_| touched) {
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
            // (A merge read failed before anything was written: what was
            // logged is at most the repairs of reads; the files are as they
            // were.)
            Some(e) if !touched => Err(e),
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
            let blocks: u64 = runs(f).iter().map(|&(_, n)| n).sum();
            for n in lay.nodes() {
                if let Some(dev) = n.device() {
                    *need.entry(dev).or_default() += blocks;
                }
            }
        }
        let storage = self.fs.storage();
        for (dev, blocks) in need {
            // Data never takes the allocator's reserve (the meta-file's),
            // nor a log's writers the room its cleaner keeps; a log's head
            // has room of its own.
            let log = storage.devs.get(dev as usize).and_then(|h| h.shared_if::<crate::blocks::log::LogSpace>());
            let alloc = storage.allocs.get(dev as usize);
            let (keep, head) = match (log, alloc) {
                (Some(s), Some(a)) => (s.cleaner_reserve(a), s.head_room()),
                _ => (0, 0),
            };
            let (free, reserved) = alloc.map_or((0, 0), |a| (a.free_blocks(), a.reserved_blocks()));
            let usable = free.saturating_sub(reserved).saturating_sub(keep) + head;
            if usable < blocks {
                return Err(Error::NoSpace(format!(
                    "device {dev}: transaction {} needs up to {blocks} free blocks to commit, {usable} are free to \
                     it ({free} free, {reserved} kept for the meta-file, {keep} for the log's cleaner, {head} at the \
                     log's heads)",
                    self.owner
                )));
            }
        }
        Ok(())
    }
}

/// Runs of consecutive file blocks the patches touch: (first, count).
fn runs(f: &TxnFile) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (&off, v) in &f.patches {
        let (first, last) = (off / BS, (off + v.len() as u64).div_ceil(BS));
        match out.last_mut() {
            // (Two patches may share a block; they never overlap.)
            Some((s, n)) if *s + *n >= first => *n = (*n).max(last - *s),
            _ => out.push((first, last - first)),
        }
    }
    out
}

impl Transaction {
    /// For each run of blocks the patches of file `ino` touch, in steps:
    /// reads the committed blocks the patches do not cover whole (zeros
    /// from the committed `size` on), lays the patches over them, punches
    /// the blocks and writes them again. The caller holds the file's I/O
    /// lock exclusively. `touched` is set once a block was punched.
    fn write_runs(&self, ino: Ino, lay: &Layout, io: &IoCtx, f: &TxnFile, size: u64, touched: &mut bool) -> Result<()> {
        const STEP: u64 = 256;
        let mut buf = Vec::new();
        for (first, n) in runs(f) {
            let mut b = first;
            while b < first + n {
                let k = (first + n - b).min(STEP);
                buf.clear();
                buf.resize((k * BS) as usize, 0);
                // Read-modify-write: the committed bytes of every block not
                // covered whole, a run of them per read.
                let mut i = 0;
                while i < k {
                    if f.covers_block(b + i) {
                        i += 1;
                        continue;
                    }
                    let mut j = i + 1;
                    while j < k && !f.covers_block(b + j) {
                        j += 1;
                    }
                    let (from, to) = ((b + i) * BS, ((b + j) * BS).min(size));
                    if from < to {
                        let at = (i * BS) as usize;
                        self.fs.read_cached(ino, lay, io, from, &mut buf[at..at + (to - from) as usize])?;
                    }
                    i = j;
                }
                f.overlay(b * BS, &mut buf);
                *touched = true;
                lay.root().punch(io, b, k)?;
                lay.root().write(io, b, &buf)?;
                b += k;
            }
        }
        Ok(())
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if !self.done {
            self.fs.inner.txn_locks.release(self.owner);
        }
        // (A commit gave back the bytes it took; what is left is an
        // aborted or dropped transaction's.)
        let bytes = std::mem::take(&mut self.st.get_mut().bytes);
        self.fs.inner.txn_budget.refund(self.account, bytes, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touched_blocks_group_into_runs() {
        let mut f = TxnFile::default();
        // Blocks 0-2 (one patch), 5 (two patches sharing it), 7-8 (one
        // patch crossing the boundary).
        f.put(0, &[1; 3 * BLOCK_SIZE]);
        f.put(5 * BS + 10, b"a");
        f.put(5 * BS + 100, b"b");
        f.put(8 * BS - 2, b"cdef");
        assert_eq!(runs(&f), vec![(0, 3), (5, 1), (7, 2)]);
        assert!(runs(&TxnFile::default()).is_empty());
        assert!(f.covers_block(1) && !f.covers_block(3) && !f.covers_block(5) && !f.covers_block(7));
    }

    /// The file a sequence of writes makes, byte by byte.
    fn model(writes: &[(u64, Vec<u8>)]) -> Vec<Option<u8>> {
        let mut m = Vec::new();
        for (off, d) in writes {
            let end = *off as usize + d.len();
            if m.len() < end {
                m.resize(end, None);
            }
            for (i, &c) in d.iter().enumerate() {
                m[*off as usize + i] = Some(c);
            }
        }
        m
    }

    #[test]
    fn patches_merge_with_the_later_bytes_winning() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for round in 0..200u64 {
            let mut f = TxnFile::default();
            let mut writes = Vec::new();
            let mut bytes = 0;
            for k in 0..next(12) + 1 {
                let off = next(300);
                let d: Vec<u8> = (0..next(60) + 1).map(|i| (round + k * 7 + i) as u8 | 1).collect();
                bytes += f.uncovered(off, off + d.len() as u64);
                f.put(off, &d);
                writes.push((off, d));
            }
            let m = model(&writes);
            // Patches are disjoint, do not touch, and hold exactly the bytes written.
            let mut last_end = None;
            for (&s, v) in &f.patches {
                assert!(!v.is_empty() && last_end.is_none_or(|e| e < s), "round {round}: {:?}", f.patches.keys());
                last_end = Some(s + v.len() as u64);
            }
            assert_eq!(bytes, m.iter().filter(|c| c.is_some()).count() as u64, "round {round}");
            assert_eq!(f.end, m.len() as u64);
            let mut got = vec![0u8; m.len() + 10];
            f.overlay(0, &mut got);
            for (i, c) in m.iter().enumerate() {
                if let Some(c) = c {
                    assert_eq!(got[i], *c, "round {round} byte {i}");
                }
            }
            // A window of it overlays the same bytes.
            let (a, b) = (next(150), 150 + next(160));
            let mut w = vec![0u8; (b - a) as usize];
            f.overlay(a, &mut w);
            for (i, &c) in w.iter().enumerate() {
                let at = a as usize + i;
                if let Some(Some(want)) = m.get(at) {
                    assert_eq!(c, *want, "round {round} window byte {at}");
                }
            }
        }
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
