//! Helper threads for the parts of a request that run side by side, kept
//! from one request to the next.
//!
//! A request its building blocks split over several devices runs the
//! pieces at the same time: a stripe's children, a replica's copies, a
//! parity stripe's columns, the two journal copies, the flushes of a
//! commit. Each started threads of its own (`std::thread::scope`), and
//! starting and ending a thread costs 30 to 40 µs on a virtual machine, 55
//! to 65 µs for three: more than reading a 64 KiB piece from the host's
//! page cache. [`scope`] keeps the contract of `std::thread::scope` (every
//! helper it spawned has ended when it returns, so helpers may borrow from
//! the caller's stack, and a helper's panic comes back through its
//! handle's `join`), but a helper is a thread kept idle after an earlier
//! piece when there is one: handing it the piece is one wake-up.
//!
//! Nothing waits for a helper to be free. A spawn that finds none idle
//! starts a thread, so helpers that block (on a slow disk, on a lock, in a
//! nested scope) never hold up another request's pieces, as they would in
//! a pool of fixed size; and a thread waiting for its helpers never runs
//! another request's piece meanwhile (no work stealing), which could need
//! a lock the waiting thread holds. A helper idle for [`IDLE`] ends; at
//! most [`MAX_IDLE`] wait. A process made by `fork` keeps none of its
//! parent's threads, so it starts with no idle helpers.
//!
//! Helpers run on every CPU the process may use (`affinity::widen` when
//! they start) and read from the media when the thread that spawned them
//! does (`base::from_media`). This module depends on nothing else in the
//! crate but `affinity` and `base`.

use parking_lot::{Condvar, Mutex, MutexGuard};
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long an idle helper waits for a piece before it ends.
pub const IDLE: Duration = Duration::from_secs(10);
/// Most helpers kept idle; one finding this many already idle ends.
pub const MAX_IDLE: usize = 256;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// An idle or working helper thread: the slot its next piece is put in.
struct Helper {
    job: Mutex<Option<Job>>,
    wake: Condvar,
}

/// The helpers waiting for a piece, the most recently idle last, and the
/// process they were started in.
struct Idle {
    pid: u32,
    helpers: Vec<Arc<Helper>>,
}

static IDLE_HELPERS: Mutex<Idle> = Mutex::new(Idle { pid: 0, helpers: Vec::new() });

/// Runs `job` on an idle helper, or on a new one when none is idle (on the
/// calling thread when no thread can be started).
fn run(job: Job) {
    let idle = {
        let mut idle = IDLE_HELPERS.lock();
        let pid = std::process::id();
        if idle.pid != pid {
            // Helpers of the process this one was forked from: their
            // threads did not come along.
            idle.helpers.clear();
            idle.pid = pid;
        }
        idle.helpers.pop()
    };
    match idle {
        Some(h) => {
            *h.job.lock() = Some(job);
            h.wake.notify_one();
        }
        None => start(job),
    }
}

/// Starts a helper thread with `first` as its first piece.
fn start(first: Job) {
    // The piece waits in the helper's slot, where the thread takes it; when
    // no thread can be made, it is still there to run on the caller.
    let me = Arc::new(Helper { job: Mutex::new(Some(first)), wake: Condvar::new() });
    let theirs = me.clone();
    let started = std::thread::Builder::new().name("hurricane-helper".into()).spawn(move || {
        crate::affinity::widen();
        while let Some(job) = next(&theirs) {
            job();
            let mut idle = IDLE_HELPERS.lock();
            if idle.helpers.len() >= MAX_IDLE {
                return;
            }
            idle.helpers.push(theirs.clone());
        }
    });
    if let Err(e) = started {
        tracing::debug!("cannot start a helper thread ({e}): the piece runs on the calling thread");
        if let Some(job) = me.job.lock().take() {
            job();
        }
    }
}

/// Waits for the next piece put in a helper's slot; `None` when it waited
/// [`IDLE`] and left the idle list.
fn next(me: &Arc<Helper>) -> Option<Job> {
    let mut slot = me.job.lock();
    loop {
        if let Some(j) = slot.take() {
            return Some(j);
        }
        if me.wake.wait_for(&mut slot, IDLE).timed_out() && slot.is_none() {
            // Leave, unless a spawner took this helper from the list (its
            // piece is then on the way).
            let left = MutexGuard::unlocked(&mut slot, || {
                let mut idle = IDLE_HELPERS.lock();
                let at = idle.helpers.iter().position(|h| Arc::ptr_eq(h, me));
                at.map(|i| idle.helpers.remove(i)).is_some()
            });
            if left {
                return None;
            }
        }
    }
}

/// Runs `f` on a helper thread and returns at once: work a thread that
/// takes requests hands over so it can take the next one (the mount's
/// fsync, which waits for the devices).
pub fn detach(f: impl FnOnce() + Send + 'static) {
    run(Box::new(f));
}

/// What a [`scope`] waits for: its helpers still running, and whether one
/// panicked with nobody joining it.
struct ScopeState {
    running: Mutex<usize>,
    done: Condvar,
    panicked: AtomicBool,
}

impl ScopeState {
    fn finish(&self) {
        let mut n = self.running.lock();
        *n -= 1;
        if *n == 0 {
            self.done.notify_all();
        }
    }
}

/// The helpers of one call of [`scope`]; `'scope` is how long they may
/// run, `'env` what they may borrow (as in `std::thread::Scope`).
pub struct Scope<'scope, 'env: 'scope> {
    state: Arc<ScopeState>,
    scope: PhantomData<&'scope mut &'scope ()>,
    env: PhantomData<&'env mut &'env ()>,
}

/// Where a helper's result waits for [`Handle::join`].
struct Packet<'scope, T> {
    result: Mutex<Option<std::thread::Result<T>>>,
    done: Condvar,
    scope: Arc<ScopeState>,
    _scope: PhantomData<&'scope ()>,
}

impl<T> Drop for Packet<'_, T> {
    fn drop(&mut self) {
        if matches!(self.result.get_mut(), Some(Err(_))) {
            self.scope.panicked.store(true, Ordering::Relaxed);
        }
    }
}

/// A helper's piece; [`Handle::join`] waits for its result.
pub struct Handle<'scope, T> {
    packet: Arc<Packet<'scope, T>>,
}

impl<T> Handle<'_, T> {
    /// Waits for the helper's piece to end: its result, or what it
    /// panicked with.
    pub fn join(self) -> std::thread::Result<T> {
        let mut r = self.packet.result.lock();
        loop {
            if let Some(v) = r.take() {
                return v;
            }
            self.packet.done.wait(&mut r);
        }
    }
}

/// Runs `f` with a [`Scope`] whose helpers may borrow what `f` can; returns
/// once every helper spawned in it has ended. Panics as `f` did, or, when
/// a helper panicked and nobody joined it, once they all ended.
pub fn scope<'env, F, T>(f: F) -> T
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
{
    let s = Scope {
        state: Arc::new(ScopeState { running: Mutex::new(0), done: Condvar::new(), panicked: AtomicBool::new(false) }),
        scope: PhantomData,
        env: PhantomData,
    };
    let r = catch_unwind(AssertUnwindSafe(|| f(&s)));
    // Nothing `f` lent its helpers may go before every one has ended.
    {
        let mut n = s.state.running.lock();
        while *n > 0 {
            s.state.done.wait(&mut n);
        }
    }
    match r {
        Err(p) => resume_unwind(p),
        Ok(_) if s.state.panicked.load(Ordering::Relaxed) => panic!("a helper thread panicked"),
        Ok(v) => v,
    }
}

impl<'scope> Scope<'scope, '_> {
    /// Runs `f` on a helper thread: one kept idle from an earlier piece,
    /// or a new one.
    pub fn spawn<F, T>(&'scope self, f: F) -> Handle<'scope, T>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        let packet = Arc::new(Packet {
            result: Mutex::new(None),
            done: Condvar::new(),
            scope: self.state.clone(),
            _scope: PhantomData,
        });
        *self.state.running.lock() += 1;
        let media = crate::base::reads_from_media();
        let theirs = packet.clone();
        let job = move || {
            let r = catch_unwind(AssertUnwindSafe(|| if media { crate::base::from_media(f) } else { f() }));
            *theirs.result.lock() = Some(r);
            theirs.done.notify_all();
            let state = theirs.scope.clone();
            // The result goes now if nobody holds the handle (it may
            // borrow for 'scope), before the scope may end.
            drop(theirs);
            state.finish();
        };
        let job: Box<dyn FnOnce() + Send + 'scope> = Box::new(job);
        // SAFETY: the job uses what it borrows for 'scope only until its
        // `finish`: `f` has run (or unwound) and the job's share of the
        // packet, with any result in it, is dropped before. `scope` does
        // not return, on a panic either, before every job it counted in
        // `running` has finished, and `'scope` cannot outlive that call.
        let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + 'scope>, Job>(job) };
        run(job);
        Handle { packet }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn helpers_borrow_the_callers_data_and_return_results() {
        let mut data = vec![1u64; 1000];
        let total: u64 = scope(|s| {
            let hs: Vec<_> = data
                .chunks_mut(100)
                .map(|c| {
                    s.spawn(move || {
                        c.iter_mut()
                            .map(|x| {
                                *x += 1;
                                *x
                            })
                            .sum::<u64>()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(total, 2000);
        assert!(data.iter().all(|&x| x == 2));
    }

    #[test]
    fn a_scope_waits_for_helpers_nobody_joined() {
        let done = AtomicUsize::new(0);
        scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    std::thread::sleep(Duration::from_millis(20));
                    done.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        assert_eq!(done.load(Ordering::SeqCst), 8);
    }

    #[test]
    fn idle_helpers_take_the_next_pieces() {
        let name = |_: ()| std::thread::current().id();
        let first = scope(|s| s.spawn(|| name(())).join().unwrap());
        assert_ne!(first, std::thread::current().id());
        // Tests run side by side and share the idle helpers: among a few
        // later pieces, one runs on a thread that ran an earlier one.
        let mut seen = std::collections::HashSet::new();
        seen.insert(first);
        let again = (0..50).any(|_| {
            // Time for the last helper to put itself on the idle list.
            std::thread::sleep(Duration::from_millis(1));
            !seen.insert(scope(|s| s.spawn(|| name(())).join().unwrap()))
        });
        assert!(again, "every piece started a thread of its own");
    }

    #[test]
    fn a_helpers_panic_comes_back_through_join_and_the_helper_stays() {
        let r = scope(|s| s.spawn(|| -> u32 { panic!("piece failed") }).join());
        let p = r.unwrap_err();
        assert_eq!(p.downcast_ref::<&str>(), Some(&"piece failed"));
        // Helpers still work afterwards.
        assert_eq!(scope(|s| s.spawn(|| 7).join().unwrap()), 7);
    }

    #[test]
    fn an_unjoined_panic_fails_the_scope_after_every_helper_ended() {
        let done = AtomicUsize::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            scope(|s| {
                s.spawn(|| panic!("unjoined"));
                s.spawn(|| {
                    std::thread::sleep(Duration::from_millis(30));
                    done.fetch_add(1, Ordering::SeqCst);
                });
            })
        }));
        assert!(r.is_err());
        assert_eq!(done.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_panic_of_the_body_waits_for_its_helpers_first() {
        let done = AtomicUsize::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            scope(|s| {
                s.spawn(|| {
                    std::thread::sleep(Duration::from_millis(30));
                    done.fetch_add(1, Ordering::SeqCst);
                });
                panic!("body");
            })
        }));
        assert!(r.is_err());
        assert_eq!(done.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn nested_scopes_do_not_wait_for_busy_helpers() {
        // Each level's helpers block until every level has started: with a
        // fixed number of helpers this would never end.
        let started = AtomicUsize::new(0);
        fn level(d: usize, started: &AtomicUsize) {
            started.fetch_add(1, Ordering::SeqCst);
            if d == 0 {
                while started.load(Ordering::SeqCst) < 1 + 2 + 4 + 8 {
                    std::thread::yield_now();
                }
                return;
            }
            scope(|s| {
                let hs: Vec<_> = (0..2).map(|_| s.spawn(|| level(d - 1, started))).collect();
                hs.into_iter().for_each(|h| h.join().unwrap());
            });
        }
        level(3, &started);
        assert_eq!(started.load(Ordering::SeqCst), 15);
    }

    #[test]
    fn a_helper_of_a_pinned_thread_runs_on_every_remembered_cpu() {
        use crate::affinity::tests::{cpus, pinned_to_one};
        use rustix::thread::sched_getaffinity;
        pinned_to_one(|wide| {
            // Whether the piece goes to an idle helper or a new one (which
            // inherits the pin, then widens).
            for _ in 0..3 {
                let helper = scope(|t| t.spawn(|| sched_getaffinity(None).unwrap()).join().unwrap());
                assert_eq!(cpus(&helper), wide);
            }
            // More pieces at once than helpers idle: some start threads.
            let n = IDLE_HELPERS.lock().helpers.len() + 4;
            let new = scope(|t| {
                let piece = || {
                    std::thread::sleep(Duration::from_millis(5));
                    sched_getaffinity(None).unwrap()
                };
                let hs: Vec<_> = (0..n).map(|_| t.spawn(piece)).collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
            });
            assert!(new.iter().all(|h| cpus(h) == wide));
        });
    }

    #[test]
    fn a_detached_piece_runs_while_its_caller_goes_on() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        detach(move || {
            go_rx.recv().unwrap();
            tx.send(std::thread::current().id()).unwrap();
        });
        // The caller was not held up by the piece, which waits for it.
        go_tx.send(()).unwrap();
        let ran_on = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_ne!(ran_on, std::thread::current().id());
    }

    #[test]
    fn helpers_read_from_the_media_when_their_spawner_does() {
        let inside = crate::base::from_media(|| scope(|s| s.spawn(crate::base::reads_from_media).join().unwrap()));
        assert!(inside);
        assert!(!scope(|s| s.spawn(crate::base::reads_from_media).join().unwrap()));
    }
}
