//! POSIX record locks (fcntl F_GETLK / F_SETLK / F_SETLKW) held for the
//! whole mount: a table of ranges per inode, sharded by inode number so
//! lock traffic on different files never meets on one mutex.
//!
//! Ranges are inclusive byte ranges as FUSE sends them (`end` is
//! `OFFSET_MAX` for "to the end of the file"). A lock owner is the
//! kernel's lock-owner id: one per process for POSIX locks. Blocking
//! requests wait on their shard's condition variable; a wait that would
//! close a cycle of owners waiting for each other fails with EDEADLK.

use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;

pub const F_RDLCK: i32 = libc::F_RDLCK;
pub const F_WRLCK: i32 = libc::F_WRLCK;
pub const F_UNLCK: i32 = libc::F_UNLCK;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockRange {
    pub owner: u64,
    pub pid: u32,
    pub start: u64,
    pub end: u64,
    pub typ: i32,
}

impl LockRange {
    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start <= end && start <= self.end
    }
}

#[derive(Default)]
struct Shard {
    files: Mutex<HashMap<u64, Vec<LockRange>>>,
    changed: Condvar,
}

pub struct LockTable {
    shards: Box<[CachePadded<Shard>]>,
    /// Who each blocked owner waits for (only touched on the blocking path).
    waits: Mutex<HashMap<u64, u64>>,
}

impl Default for LockTable {
    fn default() -> Self {
        Self::new()
    }
}

fn conflict(locks: &[LockRange], owner: u64, start: u64, end: u64, typ: i32) -> Option<LockRange> {
    locks.iter().find(|l| l.owner != owner && l.overlaps(start, end) && (l.typ == F_WRLCK || typ == F_WRLCK)).copied()
}

/// Replaces `owner`'s coverage of [start, end] by `typ` (F_UNLCK: none),
/// splitting the owner's ranges that stick out on either side.
fn apply(locks: &mut Vec<LockRange>, new: LockRange) {
    let mut out = Vec::with_capacity(locks.len() + 2);
    for &l in locks.iter() {
        if l.owner != new.owner || !l.overlaps(new.start, new.end) {
            out.push(l);
            continue;
        }
        if l.start < new.start {
            out.push(LockRange { end: new.start - 1, ..l });
        }
        if l.end > new.end {
            out.push(LockRange { start: new.end + 1, ..l });
        }
    }
    if new.typ != F_UNLCK {
        // Merge with the owner's adjacent ranges of the same type.
        let mut m = new;
        out.retain(|l| {
            let touches = l.owner == m.owner
                && l.typ == m.typ
                && (l.end.checked_add(1) == Some(m.start) || m.end.checked_add(1) == Some(l.start));
            if touches {
                m.start = m.start.min(l.start);
                m.end = m.end.max(l.end);
            }
            !touches
        });
        out.push(m);
    }
    *locks = out;
}

impl LockTable {
    pub fn new() -> Self {
        let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(4).clamp(4, 64) * 4;
        LockTable {
            shards: (0..n).map(|_| CachePadded::new(Shard::default())).collect(),
            waits: Mutex::new(HashMap::new()),
        }
    }

    fn shard(&self, ino: u64) -> &Shard {
        &self.shards[(ino as usize) % self.shards.len()]
    }

    /// F_GETLK: the first lock that would block `typ` on [start, end].
    pub fn test(&self, ino: u64, owner: u64, start: u64, end: u64, typ: i32) -> Option<LockRange> {
        let files = self.shard(ino).files.lock();
        files.get(&ino).and_then(|l| conflict(l, owner, start, end, typ))
    }

    /// F_SETLK(W): takes, changes or releases a lock. Without `wait`, a
    /// conflict gives EAGAIN; with it, waits (EDEADLK for a cycle).
    #[allow(clippy::too_many_arguments)]
    pub fn set(&self, ino: u64, owner: u64, pid: u32, start: u64, end: u64, typ: i32, wait: bool) -> Result<(), i32> {
        if start > end || !matches!(typ, F_RDLCK | F_WRLCK | F_UNLCK) {
            return Err(libc::EINVAL);
        }
        let new = LockRange { owner, pid, start, end, typ };
        let shard = self.shard(ino);
        let mut files = shard.files.lock();
        loop {
            let locks = files.entry(ino).or_default();
            let blocker = if typ == F_UNLCK { None } else { conflict(locks, owner, start, end, typ) };
            let Some(blocker) = blocker else {
                apply(locks, new);
                if locks.is_empty() {
                    files.remove(&ino);
                }
                // Unlocks and downgrades may let waiters in.
                shard.changed.notify_all();
                return Ok(());
            };
            if locks.is_empty() {
                files.remove(&ino);
            }
            if !wait {
                return Err(libc::EAGAIN);
            }
            {
                let mut waits = self.waits.lock();
                let mut cur = blocker.owner;
                for _ in 0..=waits.len() {
                    if cur == owner {
                        return Err(libc::EDEADLK);
                    }
                    match waits.get(&cur) {
                        Some(&next) => cur = next,
                        None => break,
                    }
                }
                waits.insert(owner, blocker.owner);
            }
            shard.changed.wait(&mut files);
            self.waits.lock().remove(&owner);
        }
    }

    /// Drops every lock `owner` holds on `ino` (close of a descriptor).
    pub fn release_owner(&self, ino: u64, owner: u64) {
        let shard = self.shard(ino);
        let mut files = shard.files.lock();
        if let Some(locks) = files.get_mut(&ino) {
            let before = locks.len();
            locks.retain(|l| l.owner != owner);
            if locks.len() != before {
                if locks.is_empty() {
                    files.remove(&ino);
                }
                shard.changed.notify_all();
            }
        }
    }

    /// Locks held on `ino` (for tests and diagnostics).
    pub fn held(&self, ino: u64) -> Vec<LockRange> {
        self.shard(ino).files.lock().get(&ino).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    const MAX: u64 = i64::MAX as u64;

    #[test]
    fn conflicts_and_unlock() {
        let t = LockTable::new();
        t.set(5, 1, 100, 0, 99, F_WRLCK, false).unwrap();
        assert_eq!(t.set(5, 2, 200, 50, 60, F_RDLCK, false), Err(libc::EAGAIN));
        assert_eq!(t.test(5, 2, 50, 60, F_RDLCK).map(|l| l.pid), Some(100));
        // Same owner never conflicts with itself.
        assert!(t.test(5, 1, 0, MAX, F_WRLCK).is_none());
        // Other range is free.
        t.set(5, 2, 200, 100, MAX, F_WRLCK, false).unwrap();
        // Unlock the middle of owner 1's range: two pieces remain.
        t.set(5, 1, 100, 10, 19, F_UNLCK, false).unwrap();
        let mut mine: Vec<_> = t.held(5).into_iter().filter(|l| l.owner == 1).map(|l| (l.start, l.end)).collect();
        mine.sort();
        assert_eq!(mine, vec![(0, 9), (20, 99)]);
        t.set(5, 2, 200, 10, 19, F_WRLCK, false).unwrap();
        t.release_owner(5, 1);
        t.release_owner(5, 2);
        assert!(t.held(5).is_empty());
    }

    #[test]
    fn shared_locks_and_upgrade() {
        let t = LockTable::new();
        t.set(1, 1, 1, 0, MAX, F_RDLCK, false).unwrap();
        t.set(1, 2, 2, 0, MAX, F_RDLCK, false).unwrap();
        assert_eq!(t.set(1, 1, 1, 0, 0, F_WRLCK, false), Err(libc::EAGAIN));
        t.set(1, 2, 2, 0, MAX, F_UNLCK, false).unwrap();
        t.set(1, 1, 1, 0, 0, F_WRLCK, false).unwrap();
        let mut l: Vec<_> = t.held(1).into_iter().map(|l| (l.start, l.end, l.typ)).collect();
        l.sort();
        assert_eq!(l, vec![(0, 0, F_WRLCK), (1, MAX, F_RDLCK)]);
        // Adjacent ranges of one type merge.
        t.set(1, 1, 1, 1, 10, F_WRLCK, false).unwrap();
        assert!(t.held(1).iter().any(|l| (l.start, l.end, l.typ) == (0, 10, F_WRLCK)));
        assert_eq!(t.set(1, 1, 1, 5, 1, F_WRLCK, false), Err(libc::EINVAL));
    }

    #[test]
    fn blocking_wait_and_deadlock() {
        let t = Arc::new(LockTable::new());
        t.set(7, 1, 1, 0, 9, F_WRLCK, false).unwrap();
        t.set(8, 2, 2, 0, 9, F_WRLCK, false).unwrap();
        let t2 = t.clone();
        // Owner 2 waits for owner 1 on inode 7.
        let h = std::thread::spawn(move || t2.set(7, 2, 2, 0, 9, F_WRLCK, true));
        std::thread::sleep(Duration::from_millis(100));
        // Owner 1 waiting for owner 2 on inode 8 would deadlock.
        assert_eq!(t.set(8, 1, 1, 0, 9, F_WRLCK, true), Err(libc::EDEADLK));
        t.set(7, 1, 1, 0, 9, F_UNLCK, false).unwrap();
        assert_eq!(h.join().unwrap(), Ok(()));
        assert_eq!(t.held(7).iter().map(|l| l.owner).collect::<Vec<_>>(), vec![2]);
    }
}
