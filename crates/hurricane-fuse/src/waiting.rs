//! Requests that wait, counted per user.
//!
//! A serving thread never waits for a lock that another request or a
//! transaction holds: a request that would (a write to a byte range a
//! transaction locked, a truncate of a protected file, a pool-wide report
//! another caller is building) goes to a helper thread of its own, where it
//! waits at most the pool's bound. Each such request holds a [`Permit`]
//! while it waits: one user may have at most [`PER_USER`] of them, the
//! mount [`TOTAL`], so no user can tie up threads and memory without bound;
//! past either, the request fails at once with EAGAIN.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Requests of one user that may wait off the serving threads at once.
pub const PER_USER: usize = 64;
/// Requests of all users that may wait off the serving threads at once.
pub const TOTAL: usize = 1024;

#[derive(Default)]
struct Counts {
    total: usize,
    by_uid: HashMap<u32, usize>,
}

/// The waiting requests of a mount, per user.
#[derive(Default, Clone)]
pub struct Waiters(Arc<Mutex<Counts>>);

/// One admitted waiting request; dropping it lets another in.
pub struct Permit {
    of: Waiters,
    uid: u32,
}

impl Waiters {
    /// Admits one more waiting request of `uid`, if both bounds allow.
    pub fn admit(&self, uid: u32) -> Option<Permit> {
        let mut c = self.0.lock();
        let mine = c.by_uid.get(&uid).copied().unwrap_or(0);
        if mine >= PER_USER || c.total >= TOTAL {
            return None;
        }
        c.total += 1;
        c.by_uid.insert(uid, mine + 1);
        Some(Permit { of: self.clone(), uid })
    }

    /// Requests waiting now.
    pub fn waiting(&self) -> usize {
        self.0.lock().total
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut c = self.of.0.lock();
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.by_uid.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                c.by_uid.remove(&self.uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_user_cannot_take_every_slot() {
        let w = Waiters::default();
        let mine: Vec<Permit> = (0..PER_USER).map(|_| w.admit(7).expect("within the bound")).collect();
        assert!(w.admit(7).is_none(), "one user past its bound");
        // Another user still gets in.
        let other = w.admit(8).expect("another user");
        assert_eq!(w.waiting(), PER_USER + 1);
        drop(mine);
        drop(other);
        assert_eq!(w.waiting(), 0);
        assert!(w.admit(7).is_some());
        // The total bound holds across users.
        let mut all = Vec::new();
        for uid in 0.. {
            match w.admit(100 + uid / PER_USER as u32) {
                Some(p) => all.push(p),
                None => break,
            }
        }
        assert_eq!(w.waiting(), TOTAL);
    }
}
