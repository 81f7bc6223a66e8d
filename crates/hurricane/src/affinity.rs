//! Helper threads run on every CPU the process may use.
//!
//! A mount serves requests on per-CPU queue threads, each pinned to its CPU,
//! and a new thread inherits the CPUs of the thread that starts it. Without
//! care, every helper a request starts (the children of a `parity` or
//! `replicate` read or write, the workers of a scrub or resilver started
//! through the mount's control file) would share the one CPU of the queue
//! that took the request, and work meant to run side by side would take
//! turns.
//!
//! Whoever pins threads calls [`remember`] first, on a thread not yet
//! pinned; helper threads (`helpers`) call [`widen`] when they start,
//! which puts them back on the remembered CPUs. Until something is
//! remembered (the library, the offline commands) it costs nothing.
//! [`cpus`] is how many CPUs the process may use, found once: a pinned
//! thread that asked the system would get its own one CPU (and each
//! asking reads the cgroup's quota files, some twenty system calls). This
//! module depends on nothing else in the crate.

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};
use std::sync::OnceLock;

/// The CPUs of the process before any of its threads was pinned.
static WIDE: OnceLock<CpuSet> = OnceLock::new();

/// How many CPUs the process may use (its affinity and cgroup quota).
static CPUS: OnceLock<usize> = OnceLock::new();

/// How many CPUs the process may use: what sizes per-CPU shards and how
/// many helpers a request splits its work over. Found at the first call
/// (or at [`remember`], before any thread is pinned) and kept.
pub fn cpus() -> usize {
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Remembers the calling thread's CPUs as the set helpers run on. Call it
/// on an unpinned thread before pinning others; later calls keep the first
/// set.
pub fn remember() {
    cpus();
    if WIDE.get().is_none() {
        if let Ok(set) = sched_getaffinity(None) {
            let _ = WIDE.set(set);
        }
    }
}

/// Puts the calling thread on the remembered CPUs (nothing when none were
/// remembered). A hint: when the kernel refuses, the thread stays where it
/// was and only runs slower.
pub fn widen() {
    if let Some(set) = WIDE.get() {
        if let Err(e) = sched_setaffinity(None, set) {
            tracing::debug!("cannot widen a helper thread's CPUs: {e}");
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn cpus(set: &CpuSet) -> Vec<usize> {
        (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect()
    }

    /// The CPUs the process may use, remembered; then `f` with them, on a
    /// thread pinned to the first one.
    pub(crate) fn pinned_to_one(f: impl FnOnce(&[usize]) + Send) {
        remember();
        let wide = cpus(&sched_getaffinity(None).unwrap());
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut one = CpuSet::new();
                one.set(wide[0]);
                sched_setaffinity(None, &one).unwrap();
                f(&wide);
            });
        });
    }

    #[test]
    fn a_pinned_thread_that_widens_runs_on_every_remembered_cpu() {
        pinned_to_one(|wide| {
            // A plain thread inherits the pin.
            let inherited = std::thread::scope(|t| t.spawn(|| sched_getaffinity(None).unwrap()).join().unwrap());
            assert_eq!(cpus(&inherited), [wide[0]]);
            // A thread that widens itself leaves it.
            widen();
            assert_eq!(cpus(&sched_getaffinity(None).unwrap()), wide);
        });
    }
}
