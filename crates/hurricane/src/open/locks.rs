//! Advisory byte-range locks among the threads of an open instance (the
//! HFS advisory-locking building block that the prefetchers of Figure 3
//! reference): shared or exclusive, blocking or not. They are advisory: a
//! read or write that takes no lock is not stopped by them.

use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    Shared,
    Exclusive,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    id: u64,
    start: u64,
    end: u64,
    mode: LockMode,
    owner: u64,
}

#[derive(Default)]
struct Inner {
    held: Mutex<Vec<Held>>,
    cv: Condvar,
    next: AtomicU64,
}

/// The lock table of one open instance. Clones share it.
#[derive(Clone, Default)]
pub struct RangeLocks {
    inner: Arc<Inner>,
}

/// A held lock; dropping it releases the range.
#[must_use = "the lock is released when the guard is dropped"]
pub struct RangeGuard {
    inner: Arc<Inner>,
    id: u64,
    pub start: u64,
    /// Exclusive end (u64::MAX: to the end of any file).
    pub end: u64,
    pub mode: LockMode,
}

impl std::fmt::Debug for RangeGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RangeGuard({:?} {}..{})", self.mode, self.start, self.end)
    }
}

impl Drop for RangeGuard {
    fn drop(&mut self) {
        self.inner.held.lock().retain(|h| h.id != self.id);
        self.inner.cv.notify_all();
    }
}

fn range(start: u64, len: u64) -> (u64, u64) {
    // Length 0 means "to the end", as with fcntl.
    (start, if len == 0 { u64::MAX } else { start.saturating_add(len) })
}

fn conflicts(h: &Held, start: u64, end: u64, mode: LockMode) -> bool {
    h.start < end && start < h.end && (mode == LockMode::Exclusive || h.mode == LockMode::Exclusive)
}

impl RangeLocks {
    pub fn new() -> Self {
        Self::default()
    }

    /// Locks bytes [start, start+len) (len 0: to the end), waiting for
    /// conflicting locks of other threads. Waiting on a conflicting lock the
    /// calling thread holds itself would never end: that is refused.
    pub fn lock(&self, start: u64, len: u64, mode: LockMode) -> Result<RangeGuard> {
        let (start, end) = range(start, len);
        let me = super::thread_key();
        let mut held = self.inner.held.lock();
        loop {
            let mut blocked = false;
            for h in held.iter().filter(|h| conflicts(h, start, end, mode)) {
                if h.owner == me {
                    return Err(Error::Invalid(format!(
                        "range lock {start}..{end}: this thread holds a conflicting lock on {}..{} (would deadlock)",
                        h.start, h.end
                    )));
                }
                blocked = true;
            }
            if !blocked {
                return Ok(self.grant(&mut held, start, end, mode, me));
            }
            self.inner.cv.wait(&mut held);
        }
    }

    /// Locks the range if no other lock conflicts; else `WouldBlock`.
    pub fn try_lock(&self, start: u64, len: u64, mode: LockMode) -> Result<RangeGuard> {
        let (start, end) = range(start, len);
        let mut held = self.inner.held.lock();
        if let Some(h) = held.iter().find(|h| conflicts(h, start, end, mode)) {
            return Err(Error::WouldBlock(format!(
                "range {start}..{end} (held {:?} on {}..{})",
                h.mode, h.start, h.end
            )));
        }
        Ok(self.grant(&mut held, start, end, mode, super::thread_key()))
    }

    fn grant(&self, held: &mut Vec<Held>, start: u64, end: u64, mode: LockMode, owner: u64) -> RangeGuard {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        held.push(Held { id, start, end, mode, owner });
        RangeGuard { inner: self.inner.clone(), id, start, end, mode }
    }

    /// Every lock held now: (start, end, mode).
    pub fn held(&self) -> Vec<(u64, u64, LockMode)> {
        self.inner.held.lock().iter().map(|h| (h.start, h.end, h.mode)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn shared_locks_share_and_exclusive_ones_exclude() {
        let l = RangeLocks::new();
        let a = l.lock(0, 100, LockMode::Shared).unwrap();
        let b = l.try_lock(50, 100, LockMode::Shared).unwrap();
        assert!(matches!(l.try_lock(90, 20, LockMode::Exclusive), Err(Error::WouldBlock(_))));
        let c = l.try_lock(150, 10, LockMode::Exclusive).unwrap();
        assert_eq!(l.held().len(), 3);
        drop((a, b, c));
        assert!(l.held().is_empty());
        let _all = l.try_lock(0, 0, LockMode::Exclusive).unwrap();
        assert!(l.try_lock(u64::MAX - 10, 5, LockMode::Shared).is_err());
    }

    #[test]
    fn blocking_lock_waits_for_release() {
        let l = RangeLocks::new();
        let g = l.lock(10, 10, LockMode::Exclusive).unwrap();
        let l2 = l.clone();
        let t = std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            let _g = l2.lock(15, 1, LockMode::Shared).unwrap();
            t0.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        drop(g);
        assert!(t.join().unwrap() >= Duration::from_millis(40));
    }

    #[test]
    fn waiting_on_ones_own_lock_is_refused() {
        let l = RangeLocks::new();
        let _g = l.lock(0, 10, LockMode::Exclusive).unwrap();
        assert!(l.lock(5, 1, LockMode::Shared).unwrap_err().to_string().contains("deadlock"));
    }
}
