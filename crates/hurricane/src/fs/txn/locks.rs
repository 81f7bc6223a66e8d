//! The lock manager of embedded transactions: byte-range locks on
//! (inode, `[start, end)` bytes of the file), shared for reads and exclusive
//! for writes, held by an owner (a transaction, or one non-transactional
//! write, truncate or fallocate of a protected file) until it releases all
//! of them at once. Two ranges conflict when they share a byte and one of
//! them is exclusive: transactions that change different records of one
//! file block hold their locks side by side (their commits merge onto the
//! block one after the other, `txn.rs`).
//!
//! A request that conflicts with locks of other owners waits on a condition
//! variable. Before it waits it records which owners it waits for (the
//! waits-for graph); if one of them waits, directly or through others, for
//! the requester, waiting would never end: the request fails at once with
//! [`Error::Deadlock`] and the requester (the victim) is expected to release
//! its locks. Every release wakes the waiters, which look again.
//!
//! Every wait is bounded. A table waits at most its `max_wait` (the pool's
//! `Options::txn_limits.lock_wait`), then the request fails with
//! [`Error::WouldBlock`] (EAGAIN) holding nothing new. A thread may lower
//! that bound for the calls it makes inside [`waiting_at_most`]: a mount's
//! serving threads wait not at all (`Duration::ZERO`), so a request that
//! would wait fails at once with [`Error::LockWait`], before it changed
//! anything, and the mount runs it again on a thread of its own, where it
//! may wait out the table's bound. No serving thread ever waits for a lock
//! that another request or a transaction holds.
//!
//! One mutex covers the whole table. Lock requests come once per
//! transactional read or write (or write to a protected file), never per
//! byte or block, and an owner's ranges of one mode that touch are kept as
//! one, so the table is not a point of contention next to the I/O.

use crate::error::{Error, Result};
use crate::journal::Ino;
use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a lock request waits when nothing lowers it (`LockTable::new`).
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(30);

thread_local! {
    /// This thread's bound on lock waits, when lower than the table's
    /// (set by [`waiting_at_most`]).
    static WAIT: Cell<Option<Duration>> = const { Cell::new(None) };
}

/// Whether this thread's lock requests may wait (they may not inside
/// `waiting_at_most(Duration::ZERO, ..)`).
pub fn may_wait() -> bool {
    WAIT.with(Cell::get) != Some(Duration::ZERO)
}

/// Runs `f` with this thread's lock requests waiting at most `bound` (or the
/// table's bound, if lower). With `Duration::ZERO` a request that would wait
/// fails at once with [`Error::LockWait`] before it changed anything, and
/// the caller may run it again where waiting is allowed.
pub fn waiting_at_most<T>(bound: Duration, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Duration>);
    impl Drop for Restore {
        fn drop(&mut self) {
            WAIT.with(|w| w.set(self.0));
        }
    }
    let _restore = Restore(WAIT.with(|w| w.replace(Some(bound))));
    f()
}

/// Who holds or asks for locks.
pub type Owner = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Shared,
    Exclusive,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    owner: Owner,
    start: u64,
    end: u64,
    mode: Mode,
}

#[derive(Default)]
struct Table {
    /// Locks held, by inode.
    held: HashMap<Ino, Vec<Held>>,
    /// The inodes each owner holds locks on.
    by_owner: HashMap<Owner, HashSet<Ino>>,
    /// Waits-for graph: a waiting owner and the owners it waits for.
    waits: HashMap<Owner, Vec<Owner>>,
}

impl Table {
    fn conflicts(&self, owner: Owner, ino: Ino, start: u64, end: u64, mode: Mode) -> Vec<Owner> {
        let mut v: Vec<Owner> = self
            .held
            .get(&ino)
            .into_iter()
            .flatten()
            .filter(|h| {
                h.owner != owner
                    && h.start < end
                    && start < h.end
                    && (mode == Mode::Exclusive || h.mode == Mode::Exclusive)
            })
            .map(|h| h.owner)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Whether `from` reaches `to` in the waits-for graph.
    fn reaches(&self, from: &[Owner], to: Owner) -> bool {
        let mut seen: HashSet<Owner> = HashSet::new();
        let mut stack: Vec<Owner> = from.to_vec();
        while let Some(o) = stack.pop() {
            if o == to {
                return true;
            }
            if seen.insert(o) {
                if let Some(next) = self.waits.get(&o) {
                    stack.extend(next.iter().copied());
                }
            }
        }
        false
    }
}

/// The lock table of an open pool.
pub struct LockTable {
    table: Mutex<Table>,
    cv: Condvar,
    next: AtomicU64,
    /// The longest any request waits.
    max_wait: Duration,
}

impl Default for LockTable {
    fn default() -> Self {
        LockTable::new(DEFAULT_LOCK_WAIT)
    }
}

impl LockTable {
    /// A table whose requests wait at most `max_wait`.
    pub fn new(max_wait: Duration) -> LockTable {
        LockTable { table: Mutex::default(), cv: Condvar::new(), next: AtomicU64::new(0), max_wait }
    }

    /// A new owner id (never reused while the pool is open).
    pub fn owner(&self) -> Owner {
        self.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Locks bytes [start, end) of `ino` for `owner` in `mode`, waiting
    /// while other owners hold conflicting locks. Fails with
    /// [`Error::Deadlock`] (holding nothing new) when waiting would close a
    /// cycle of waiting owners, with [`Error::LockWait`] when this thread
    /// may not wait at all ([`waiting_at_most`] zero), and with
    /// [`Error::WouldBlock`] once it waited its bound. A range the owner
    /// holds already (in any mode for shared, exclusive for exclusive) is
    /// not asked for again; one that touches a range the owner holds in the
    /// same mode extends it.
    pub fn lock(&self, owner: Owner, ino: Ino, start: u64, end: u64, mode: Mode) -> Result<()> {
        if start >= end {
            return Ok(());
        }
        let bound = WAIT.with(Cell::get).map_or(self.max_wait, |w| w.min(self.max_wait));
        let deadline = Instant::now().checked_add(bound);
        let mut t = self.table.lock();
        loop {
            let c = t.conflicts(owner, ino, start, end, mode);
            if c.is_empty() {
                t.waits.remove(&owner);
                let covered = t.held.get(&ino).into_iter().flatten().any(|h| {
                    h.owner == owner
                        && h.start <= start
                        && end <= h.end
                        && (mode == Mode::Shared || h.mode == Mode::Exclusive)
                });
                if !covered {
                    let v = t.held.entry(ino).or_default();
                    // (Merging keeps the owner's set of bytes as it was:
                    // conflicts are the same, the list shorter.)
                    match v.iter_mut().find(|h| h.owner == owner && h.mode == mode && h.start <= end && start <= h.end)
                    {
                        Some(h) => {
                            h.start = h.start.min(start);
                            h.end = h.end.max(end);
                        }
                        None => v.push(Held { owner, start, end, mode }),
                    }
                    t.by_owner.entry(owner).or_default().insert(ino);
                }
                return Ok(());
            }
            if t.reaches(&c, owner) {
                t.waits.remove(&owner);
                // Others may have waited on a graph that had this edge.
                self.cv.notify_all();
                return Err(Error::Deadlock(format!(
                    "transaction {owner}, inode {ino} bytes {start}..{end}: waiting for transaction {} would close a \
                     cycle of waiting transactions",
                    c[0]
                )));
            }
            if bound.is_zero() {
                t.waits.remove(&owner);
                return Err(Error::LockWait(format!(
                    "inode {ino} bytes {start}..{end}: locked by transaction {}",
                    c[0]
                )));
            }
            let first = c[0];
            t.waits.insert(owner, c);
            let timed_out = match deadline {
                Some(d) => self.cv.wait_until(&mut t, d).timed_out(),
                None => {
                    self.cv.wait(&mut t);
                    false
                }
            };
            if timed_out && !t.conflicts(owner, ino, start, end, mode).is_empty() {
                t.waits.remove(&owner);
                // Others may have waited on a graph that had this edge.
                self.cv.notify_all();
                return Err(Error::WouldBlock(format!(
                    "inode {ino} bytes {start}..{end}: still locked by transaction {first} after {bound:?}"
                )));
            }
        }
    }

    /// Whether `owner` holds any lock on `ino`.
    pub fn holds(&self, owner: Owner, ino: Ino) -> bool {
        self.table.lock().by_owner.get(&owner).is_some_and(|s| s.contains(&ino))
    }

    /// Releases every lock of `owner` and wakes the waiters.
    pub fn release(&self, owner: Owner) {
        let mut t = self.table.lock();
        t.waits.remove(&owner);
        if let Some(inos) = t.by_owner.remove(&owner) {
            for ino in inos {
                if let Some(v) = t.held.get_mut(&ino) {
                    v.retain(|h| h.owner != owner);
                    if v.is_empty() {
                        t.held.remove(&ino);
                    }
                }
            }
        }
        drop(t);
        self.cv.notify_all();
    }

    /// Locks currently held (all owners): for tests and statistics.
    pub fn held(&self) -> usize {
        self.table.lock().held.values().map(Vec::len).sum()
    }
}

/// Locks of one owner, released when dropped.
pub struct Guard<'a> {
    table: &'a LockTable,
    owner: Owner,
}

impl<'a> Guard<'a> {
    /// Exclusive lock on bytes [start, end) for a fresh owner (a
    /// non-transactional write to a protected file).
    pub fn exclusive(table: &'a LockTable, ino: Ino, start: u64, end: u64) -> Result<Self> {
        let owner = table.owner();
        let g = Guard { table, owner };
        table.lock(owner, ino, start, end, Mode::Exclusive)?;
        Ok(g)
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.table.release(self.owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn shared_locks_share_and_exclusive_ones_exclude() {
        let t = LockTable::default();
        let (a, b) = (t.owner(), t.owner());
        t.lock(a, 1, 0, 10, Mode::Shared).unwrap();
        t.lock(b, 1, 5, 15, Mode::Shared).unwrap();
        // Other inodes and disjoint ranges never conflict.
        t.lock(b, 2, 0, 10, Mode::Exclusive).unwrap();
        t.lock(b, 1, 10, 20, Mode::Exclusive).unwrap();
        assert_eq!(t.table.lock().conflicts(a, 1, 0, 20, Mode::Exclusive), vec![b]);
        t.release(b);
        t.lock(a, 1, 0, 20, Mode::Exclusive).unwrap();
        t.release(a);
        assert_eq!(t.held(), 0);
    }

    #[test]
    fn byte_ranges_that_only_touch_do_not_conflict_and_an_owners_touching_ranges_merge() {
        let t = LockTable::default();
        let (a, b) = (t.owner(), t.owner());
        // Two records of one 4 KiB block: [0, 100) and [100, 200).
        t.lock(a, 1, 0, 8, Mode::Exclusive).unwrap();
        t.lock(a, 1, 8, 16, Mode::Shared).unwrap();
        t.lock(a, 1, 8, 16, Mode::Exclusive).unwrap();
        t.lock(b, 1, 100, 108, Mode::Exclusive).unwrap();
        t.lock(b, 1, 16, 100, Mode::Shared).unwrap();
        // a's exclusive [0, 8) and [8, 16) are one range now.
        let mine: Vec<(u64, u64, Mode)> =
            t.table.lock().held[&1].iter().filter(|h| h.owner == a).map(|h| (h.start, h.end, h.mode)).collect();
        assert_eq!(mine, vec![(0, 16, Mode::Exclusive), (8, 16, Mode::Shared)]);
        assert!(t.table.lock().conflicts(a, 1, 15, 17, Mode::Shared).is_empty());
        assert_eq!(t.table.lock().conflicts(a, 1, 15, 17, Mode::Exclusive), vec![b]);
        assert_eq!(t.table.lock().conflicts(b, 1, 15, 16, Mode::Shared), vec![a]);
        assert!(t.table.lock().conflicts(a, 1, 108, 4096, Mode::Exclusive).is_empty());
        t.release(a);
        t.release(b);
        assert_eq!(t.held(), 0);
    }

    #[test]
    fn a_waiter_gets_the_lock_when_the_holder_releases() {
        let t = Arc::new(LockTable::default());
        let (a, b) = (t.owner(), t.owner());
        t.lock(a, 7, 0, 4, Mode::Exclusive).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let t2 = t.clone();
        let h = std::thread::spawn(move || {
            t2.lock(b, 7, 2, 3, Mode::Shared).unwrap();
            tx.send(()).unwrap();
            t2.release(b);
        });
        // The waiter is blocked while a holds the range.
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        t.release(a);
        rx.recv().unwrap();
        h.join().unwrap();
        assert_eq!(t.held(), 0);
    }

    #[test]
    fn the_request_closing_a_cycle_fails_with_deadlock() {
        let t = Arc::new(LockTable::default());
        let (a, b) = (t.owner(), t.owner());
        t.lock(a, 1, 0, 1, Mode::Exclusive).unwrap();
        t.lock(b, 2, 0, 1, Mode::Exclusive).unwrap();
        let t2 = t.clone();
        // a waits for b ...
        let h = std::thread::spawn(move || t2.lock(a, 2, 0, 1, Mode::Exclusive));
        while !t.table.lock().waits.contains_key(&a) {
            std::thread::yield_now();
        }
        // ... so b asking for a's lock would wait forever.
        let e = t.lock(b, 1, 0, 1, Mode::Exclusive).unwrap_err();
        assert!(matches!(e, Error::Deadlock(_)), "{e}");
        assert_eq!(e.errno(), libc::EDEADLK);
        t.release(b);
        h.join().unwrap().unwrap();
        t.release(a);
        assert_eq!(t.held(), 0);
    }

    #[test]
    fn a_wait_is_bounded_and_a_thread_that_may_not_wait_fails_at_once() {
        let t = LockTable::new(Duration::from_millis(200));
        let (a, b) = (t.owner(), t.owner());
        t.lock(a, 1, 0, 10, Mode::Exclusive).unwrap();
        let t0 = Instant::now();
        let e = t.lock(b, 1, 5, 6, Mode::Shared).unwrap_err();
        assert!(matches!(e, Error::WouldBlock(_)), "{e}");
        assert_eq!(e.errno(), libc::EAGAIN);
        assert!(t0.elapsed() >= Duration::from_millis(200), "{:?}", t0.elapsed());
        let e = waiting_at_most(Duration::ZERO, || t.lock(b, 1, 0, 1, Mode::Exclusive)).unwrap_err();
        assert!(matches!(e, Error::LockWait(_)), "{e}");
        // Nothing was taken, and the thread's bound is back to the table's.
        assert!(!t.holds(b, 1) && t.holds(a, 1));
        assert!(t.table.lock().waits.is_empty());
        assert!(WAIT.with(Cell::get).is_none());
        // What does not conflict is granted whatever the bound.
        waiting_at_most(Duration::ZERO, || t.lock(b, 1, 10, 20, Mode::Exclusive)).unwrap();
        t.release(a);
        t.release(b);
        assert_eq!(t.held(), 0);
    }

    #[test]
    fn two_readers_upgrading_deadlock_one_of_them() {
        let t = Arc::new(LockTable::default());
        let (a, b) = (t.owner(), t.owner());
        t.lock(a, 1, 0, 8, Mode::Shared).unwrap();
        t.lock(b, 1, 0, 8, Mode::Shared).unwrap();
        let t2 = t.clone();
        let h = std::thread::spawn(move || t2.lock(a, 1, 0, 8, Mode::Exclusive));
        while !t.table.lock().waits.contains_key(&a) {
            std::thread::yield_now();
        }
        assert!(matches!(t.lock(b, 1, 0, 8, Mode::Exclusive), Err(Error::Deadlock(_))));
        t.release(b);
        h.join().unwrap().unwrap();
        t.release(a);
    }
}
