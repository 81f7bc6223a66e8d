//! Transactions for programs that cannot link the library (docs/TXN.md):
//! three ioctls any file or directory of the mount takes, `_IO('h', 1)`
//! begin, `_IO('h', 2)` commit and `_IO('h', 3)` abort. A transaction
//! belongs to the thread that began it: from then until it commits or
//! aborts, that thread's reads and writes of files of the mount are the
//! transaction's (writes only to protected files, `user.hurricane.txn` =
//! "1", which the mount opens without page cache so every read and write
//! reaches it as it is made). Other threads see nothing of it until commit.
//! A deadlock victim's next request fails with EDEADLK; it aborts and
//! begins again.
//!
//! **Whose it is.** A thread id alone is no identity: it is reused once its
//! thread is gone, and any user may fork until it gets one. A transaction
//! is keyed by the thread's id, the thread's start time (clock ticks since
//! boot, `/proc/TID/stat`) and the caller's uid, and a request joins it only
//! when all three match. A request whose thread id names a transaction of
//! a thread that is gone finds an orphan, and aborts it; so does the
//! reaper, a thread that looks at every open transaction's thread a few
//! times a second while any is open, so the locks of a transaction whose
//! program died go within a fraction of a second, whatever else happens.
//! Every open one is aborted at unmount.

use hurricane::{Error, Fs, Result, Transaction};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `_IO('h', 1)`: begin a transaction for the calling thread.
pub const TXN_BEGIN: u32 = (b'h' as u32) << 8 | 1;
/// `_IO('h', 2)`: commit it (durable when the call returns).
pub const TXN_COMMIT: u32 = (b'h' as u32) << 8 | 2;
/// `_IO('h', 3)`: abort it.
pub const TXN_ABORT: u32 = (b'h' as u32) << 8 | 3;

/// How often the reaper looks for transactions whose thread is gone.
const REAP_EVERY: Duration = Duration::from_millis(100);

type Slot = Arc<Mutex<Option<Transaction>>>;

/// Who began a transaction: a thread, known by its id and start time, and
/// the user it ran as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub tid: u32,
    /// Clock ticks since boot when the thread started.
    pub start: u64,
    pub uid: u32,
}

/// When thread `tid` started (field 22 of `/proc/TID/stat`), or None if it
/// is gone (or a zombie: it ran its last request).
pub fn thread_start(tid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{tid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold anything.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_ascii_whitespace();
    let state = f.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    // Fields 4 to 21 lie between the state (3) and the start time (22).
    f.nth(18)?.parse().ok()
}

impl Caller {
    /// The caller of a request from thread `tid` as user `uid`, if the
    /// thread is still there.
    pub fn of(tid: u32, uid: u32) -> Option<Caller> {
        thread_start(tid).map(|start| Caller { tid, start, uid })
    }
}

struct Entry {
    who: Caller,
    slot: Slot,
}

struct Inner {
    map: Mutex<HashMap<u32, Entry>>,
    /// Entries in `map` (read without its lock on every request).
    open: AtomicUsize,
    /// Wakes the reaper when the first transaction opens, or at unmount.
    wake: Condvar,
    reaper_started: AtomicBool,
    closed: AtomicBool,
    /// The longest a request waits for a transaction that another request
    /// of its thread is using (the pool's lock bound).
    wait: Duration,
}

/// The open transactions, by calling thread.
pub struct Txns(Arc<Inner>);

impl Txns {
    /// No transaction open yet; a request waits at most `wait` for its
    /// thread's transaction while another request uses it (the pool's
    /// lock bound, `TxnLimits::lock_wait`).
    pub fn new(wait: Duration) -> Txns {
        Txns(Arc::new(Inner {
            map: Mutex::default(),
            open: AtomicUsize::new(0),
            wake: Condvar::new(),
            reaper_started: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            wait,
        }))
    }
}

/// The transaction of one thread, while it is open.
pub struct Handle {
    slot: Slot,
    wait: Duration,
}

impl Handle {
    /// The transaction, for one request. Requests of one thread come one
    /// at a time, but asynchronous I/O may send several at once: a serving
    /// thread (which may not wait, `waiting_at_most` zero) fails with
    /// `LockWait` while another uses it, and the mount retries off the
    /// serving thread, where this waits at most the pool's lock bound.
    fn with<T>(&self, f: impl FnOnce(&Transaction) -> Result<T>) -> Result<T> {
        let g = match self.slot.try_lock() {
            Some(g) => g,
            None if hurricane::fs::may_wait() => self
                .slot
                .try_lock_for(self.wait)
                .ok_or_else(|| Error::WouldBlock("the thread's transaction is busy with another request".into()))?,
            None => return Err(Error::LockWait("the thread's transaction is busy with another request".into())),
        };
        match &*g {
            Some(t) => f(t),
            None => Err(Error::Invalid("the transaction has ended".into())),
        }
    }

    pub fn write(&self, ino: u64, off: u64, data: &[u8]) -> Result<usize> {
        self.with(|t| t.write_ino(ino, off, data))
    }
    /// The file's size as the transaction sees it (where an append goes).
    pub fn size(&self, ino: u64) -> Result<u64> {
        self.with(|t| t.size_ino(ino))
    }
    /// Reads as the transaction sees it; `lock`: shared locks on the bytes
    /// read (for a caller who may write the file; see `filesystem::read`).
    pub fn read(&self, ino: u64, off: u64, buf: &mut [u8], lock: bool) -> Result<usize> {
        self.with(|t| if lock { t.read_ino(ino, off, buf) } else { t.read_ino_unlocked(ino, off, buf) })
    }
    /// Whether the transaction has read or written `ino`.
    pub fn touches(&self, ino: u64) -> bool {
        // (Busy: another request of its thread is using it, on this file
        // or another; taken as touching, the safe answer.)
        self.slot.try_lock().is_none_or(|g| g.as_ref().is_some_and(|t| t.touches(ino)))
    }
}

fn abort(slot: &Slot, why: &str) {
    if let Some(t) = slot.lock().take() {
        tracing::info!("transaction {} aborted: {why}", t.id());
        t.abort();
    }
}

impl Txns {
    /// Open transactions.
    pub fn open(&self) -> usize {
        self.0.open.load(Ordering::Relaxed)
    }

    /// The open transaction of thread `tid` as user `uid`: only if the
    /// same thread (id and start time) began it as the same user. One
    /// whose thread is gone (its id now names another thread) is aborted.
    pub fn of(&self, tid: u32, uid: u32) -> Option<Handle> {
        if self.0.open.load(Ordering::Acquire) == 0 {
            return None;
        }
        let who = self.0.map.lock().get(&tid).map(|e| e.who)?;
        let now = thread_start(tid);
        if now != Some(who.start) {
            self.remove_if(who, "its thread is gone");
            return None;
        }
        if who.uid != uid {
            // The thread changed its uid: the transaction stays the old
            // user's, and this request is not part of it.
            return None;
        }
        let slot = self.0.map.lock().get(&tid).filter(|e| e.who == who).map(|e| e.slot.clone())?;
        Some(Handle { slot, wait: self.0.wait })
    }

    /// Takes the transaction of `who` out of the table, if it is there.
    fn remove(&self, who: Caller) -> Option<Slot> {
        let mut m = self.0.map.lock();
        if m.get(&who.tid).is_none_or(|e| e.who != who) {
            return None;
        }
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        m.remove(&who.tid).map(|e| e.slot)
    }

    /// Removes and aborts the transaction of `who`'s thread id if it is
    /// still `who`'s.
    fn remove_if(&self, who: Caller, why: &str) {
        if let Some(slot) = self.remove(who) {
            abort(&slot, why);
        }
    }

    /// Takes the transaction of `who` out of the table, for commit or abort.
    fn take(&self, who: Caller) -> Result<Slot> {
        self.remove(who).ok_or_else(|| Error::Invalid("no transaction is open on this thread".into()))
    }

    /// Begins a transaction for `who`, counted against its uid.
    pub fn begin(&self, fs: &Fs, who: Caller) -> Result<()> {
        // A transaction under this thread id whose thread is gone.
        if let Some(old) = self.0.map.lock().get(&who.tid).map(|e| e.who) {
            if old == who {
                return Err(Error::Invalid("a transaction is already open on this thread".into()));
            }
            self.remove_if(old, "its thread is gone");
        }
        let t = fs.begin_as(who.uid)?;
        {
            let mut m = self.0.map.lock();
            if m.contains_key(&who.tid) {
                // Another request of the same thread began one meanwhile.
                return Err(Error::Invalid("a transaction is already open on this thread".into()));
            }
            m.insert(who.tid, Entry { who, slot: Arc::new(Mutex::new(Some(t))) });
            self.0.open.fetch_add(1, Ordering::AcqRel);
        }
        self.start_reaper();
        self.0.wake.notify_all();
        Ok(())
    }

    /// Commits the transaction of `who` (durable when it returns): run off
    /// the serving threads, as it waits for the devices. Returns the files
    /// it wrote to, whose times (and sizes) the commit set.
    pub fn commit(&self, who: Caller) -> Result<Vec<u64>> {
        let slot = self.take(who)?;
        let t = slot.lock().take();
        match t {
            Some(t) => {
                let written = t.written();
                t.commit().map(|()| written)
            }
            None => Err(Error::Invalid("the transaction has ended".into())),
        }
    }

    /// Aborts the transaction of `who`.
    pub fn abort(&self, who: Caller) -> Result<()> {
        let slot = self.take(who)?;
        abort(&slot, "aborted by its thread");
        Ok(())
    }

    /// The reaper: while any transaction is open, aborts those whose
    /// thread is gone, every [`REAP_EVERY`]; sleeps while none is.
    fn start_reaper(&self) {
        if self.0.reaper_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = self.0.clone();
        let me = Txns(inner.clone());
        let spawned = std::thread::Builder::new().name("hurricane-txn-reaper".into()).spawn(move || loop {
            {
                let mut m = inner.map.lock();
                if inner.closed.load(Ordering::Acquire) {
                    return;
                }
                if m.is_empty() {
                    inner.wake.wait(&mut m);
                } else {
                    inner.wake.wait_for(&mut m, REAP_EVERY);
                }
                if inner.closed.load(Ordering::Acquire) {
                    return;
                }
            }
            me.reap();
        });
        if let Err(e) = spawned {
            // Orphans are still found by the next request of their thread
            // id and at the next begin.
            tracing::warn!("cannot start the transaction reaper: {e}");
            self.0.reaper_started.store(false, Ordering::Release);
        }
    }

    /// Aborts every transaction whose thread is gone.
    pub fn reap(&self) -> usize {
        let all: Vec<Caller> = self.0.map.lock().values().map(|e| e.who).collect();
        let mut n = 0;
        for who in all {
            if thread_start(who.tid) != Some(who.start) {
                self.remove_if(who, "its thread is gone");
                n += 1;
            }
        }
        n
    }

    /// Aborts every open transaction and stops the reaper (unmount).
    pub fn abort_all(&self) {
        let all: Vec<Slot> = {
            let mut m = self.0.map.lock();
            self.0.closed.store(true, Ordering::Release);
            self.0.open.store(0, Ordering::Release);
            m.drain().map(|(_, e)| e.slot).collect()
        };
        self.0.wake.notify_all();
        for s in all {
            abort(&s, "the pool is unmounted");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> Fs {
        use hurricane::device::{Device, MemDevice};
        let devs: Vec<Arc<dyn Device>> =
            (0..2).map(|i| Arc::new(MemDevice::new(format!("m{i}"), 64 << 20)) as Arc<dyn Device>).collect();
        Fs::format(devs.clone(), &Default::default()).unwrap();
        Fs::open(devs, hurricane::Options { background_commit: false, ..Default::default() }).unwrap()
    }

    /// A request joins a transaction only from the thread (id and start
    /// time) and the user that began it; one begun by a thread that is gone
    /// is aborted by the first request that comes with its id.
    #[test]
    fn a_request_joins_only_its_own_threads_transaction() {
        let fs = pool();
        let txns = Txns::new(Duration::from_secs(5));
        let me = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        let start = thread_start(me).unwrap();
        let who = Caller { tid: me, start, uid: 1000 };
        txns.begin(&fs, who).unwrap();
        assert!(txns.of(me, 1000).is_some());
        assert!(txns.of(me, 1001).is_none(), "another user never joins");
        assert!(matches!(txns.begin(&fs, who), Err(Error::Invalid(_))));
        // Another thread that had this id: it commits and aborts nothing.
        let earlier = Caller { start: start.saturating_sub(1), ..who };
        assert!(matches!(txns.commit(earlier), Err(Error::Invalid(_))));
        assert!(matches!(txns.abort(earlier), Err(Error::Invalid(_))));
        assert_eq!(txns.open(), 1);
        txns.abort(who).unwrap();
        assert_eq!((txns.open(), fs.txn_usage().open), (0, 0));
        // A transaction of a thread that is gone (its start time is not
        // this thread's): this thread's request does not join it, and it
        // is aborted.
        // (The reaper may find it first: either way it is gone, though the
        // reaper may still be aborting it.)
        let gone = || {
            let t0 = std::time::Instant::now();
            while txns.open() > 0 || fs.txn_usage().open > 0 {
                assert!(t0.elapsed() < Duration::from_secs(5), "an orphan was left open");
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        txns.begin(&fs, earlier).unwrap();
        assert!(txns.of(me, 1000).is_none());
        gone();
        // The reaper finds one with no request at all.
        txns.begin(&fs, earlier).unwrap();
        gone();
        txns.abort_all();
        fs.close().unwrap();
    }

    #[test]
    fn a_thread_is_known_by_its_start_time_and_a_gone_one_by_none() {
        let me = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        let a = thread_start(me).expect("this thread is there");
        assert_eq!(thread_start(me), Some(a), "the start time of a thread does not change");
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            tx.send(rustix::thread::gettid().as_raw_nonzero().get() as u32).unwrap();
        });
        let other = rx.recv().unwrap();
        h.join().unwrap();
        // A thread that ended is gone (its id is not reused this soon; the
        // kernel may take a moment to drop it after the join).
        let t0 = std::time::Instant::now();
        while thread_start(other).is_some() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(thread_start(other), None);
        assert_eq!(thread_start(u32::MAX), None);
    }
}
