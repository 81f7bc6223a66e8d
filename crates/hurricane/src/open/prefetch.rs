//! Prefetch policies of an open instance (HFS 5.4.3): which blocks to
//! request ahead of the reader. A policy sees each access as a run of file
//! blocks and answers with requests `(first block, count)`; the instance
//! hands them to the I/O threads, which read them into the block cache.
//!
//! - **next**: on a read ending at block e-1, request block e (per thread).
//! - **distance(d, a)**: keep every block up to `d` past the last block read
//!   requested, in requests of `a` blocks; one window per thread or one for
//!   the file (threads sharing a file pointer read one stream).
//! - **adaptive**: a detector per thread classifies its accesses as
//!   sequential, strided or random, and a detector per file sees several
//!   threads taking turns along one stream (a shared file pointer) or
//!   working in separate regions. Sequential and region-partitioned threads
//!   get a window of their own; a shared stream gets one window for the
//!   file, as deep as the file's device count needs to keep every device
//!   busy; strided threads get the next few strides. A distance grows
//!   whenever the reader catches up with its prefetches.

use crate::open_spec::{Prefetch, Scope};
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::collections::HashMap;

/// Blocks [.0, .0 + .1) to read ahead.
pub type Request = (u64, u64);

/// What the adaptive detector sees in a thread's accesses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Too few accesses yet (or not the adaptive policy).
    Unknown,
    Random,
    /// This thread reads consecutive blocks.
    Sequential,
    /// This thread reads at a constant stride of `stride` blocks.
    Strided {
        stride: i64,
    },
    /// This thread reads its own region sequentially while other threads
    /// read theirs elsewhere in the file (HFS access pattern A).
    Partitioned,
    /// Several threads take turns along one sequential stream, as with a
    /// shared file pointer (HFS access pattern B).
    SharedSequential,
}

/// The distance-and-amount window of one stream: `issued` is one past the
/// last block requested.
#[derive(Debug, Default, Clone, Copy)]
struct Window {
    issued: u64,
}

impl Window {
    fn advance(&mut self, b: u64, n: u64, d: u64, a: u64, out: &mut Vec<Request>) {
        let e = b.saturating_add(n);
        // A seek backwards restarts the window at the reader.
        if self.issued > e.saturating_add(d).saturating_add(a) {
            self.issued = e;
        }
        let want = (e - 1).saturating_add(d);
        let mut lo = self.issued.max(e);
        while lo <= want {
            out.push((lo, a));
            lo = lo.saturating_add(a);
        }
        self.issued = lo;
    }
}

/// Per-thread classification of accesses.
#[derive(Debug, Default, Clone, Copy)]
struct Detector {
    seen: u32,
    last_b: u64,
    last_e: u64,
    stride: i64,
    /// Consecutive accesses that continued the previous one.
    seq: u32,
    /// Consecutive accesses at the same stride.
    strided: u32,
}

impl Detector {
    fn observe(&mut self, b: u64, n: u64) {
        if self.seen > 0 {
            let s = b as i64 - self.last_b as i64;
            if b == self.last_e || (b >= self.last_b && b < self.last_e) {
                self.seq += 1;
                self.strided = 0;
            } else if s == self.stride && s != 0 {
                self.strided += 1;
                self.seq = 0;
            } else {
                self.stride = s;
                self.seq = 0;
                self.strided = 0;
            }
        }
        self.seen = self.seen.saturating_add(1);
        self.last_b = b;
        self.last_e = b.saturating_add(n);
    }

    fn pattern(&self) -> Pattern {
        if self.seq >= 2 {
            Pattern::Sequential
        } else if self.strided >= 1 {
            Pattern::Strided { stride: self.stride }
        } else if self.seen >= 3 {
            Pattern::Random
        } else {
            Pattern::Unknown
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct ThreadState {
    window: Window,
    det: Detector,
    /// Current distance of an adaptive per-thread window.
    d: u64,
    /// One past the farthest strided block requested (in stride order).
    stride_next: Option<u64>,
}

const RING: usize = 16;

/// Recent accesses to the file by every thread.
#[derive(Debug)]
struct FileState {
    window: Window,
    ring: [(u64, u64, u64); RING],
    len: usize,
    pos: usize,
    /// Current distance and amount of the adaptive file window.
    d: u64,
    a: u64,
    /// The threads share a stream (sticky: a lock that lets one thread
    /// take several turns in a row does not end it).
    shared: bool,
}

impl FileState {
    fn push(&mut self, tid: u64, b: u64, e: u64) {
        self.ring[self.pos] = (tid, b, e);
        self.pos = (self.pos + 1) % RING;
        self.len = (self.len + 1).min(RING);
    }

    fn recent(&self) -> &[(u64, u64, u64)] {
        &self.ring[..self.len]
    }

    fn threads(&self) -> usize {
        let mut t: Vec<u64> = self.recent().iter().map(|x| x.0).collect();
        t.sort_unstable();
        t.dedup();
        t.len()
    }

    /// The recent accesses lie in one short span.
    fn compact(&self) -> bool {
        if self.len < RING / 2 {
            return false;
        }
        let lo = self.recent().iter().map(|x| x.1).min().unwrap_or(0);
        let hi = self.recent().iter().map(|x| x.2).max().unwrap_or(0);
        let blocks: u64 = self.recent().iter().map(|x| x.2 - x.1).sum();
        hi - lo <= 2 * blocks + 8
    }

    /// Several threads take turns along one stream: entered when the recent
    /// accesses of two or more threads lie in one short span, left when they
    /// spread out.
    fn update_shared(&mut self) -> bool {
        let compact = self.compact();
        self.shared = if self.shared { compact } else { compact && self.threads() >= 2 };
        self.shared
    }

    /// Another thread worked recently far from block `b`.
    fn others_elsewhere(&self, tid: u64, b: u64) -> bool {
        self.recent().iter().any(|&(t, ob, _)| t != tid && ob.abs_diff(b) > 64)
    }
}

const SHARDS: usize = 16;
/// Adaptive per-thread windows start here and double up to the maximum.
const THREAD_D0: u64 = 4;
const THREAD_DMAX: u64 = 64;
/// Deeper windows than this only reorder requests at the disks.
const FILE_DMAX: u64 = 128;
/// Strides requested ahead of a strided reader.
const STRIDES_AHEAD: i64 = 4;

/// The prefetch building block of an open instance.
pub struct PrefetchState {
    policy: Prefetch,
    file: Mutex<FileState>,
    threads: super::Sharded<ThreadState>,
}

impl PrefetchState {
    /// `devices`: how many devices hold the file; the adaptive policy sizes
    /// a shared stream's window to keep each of them busy.
    pub fn new(policy: Prefetch, devices: u64) -> Self {
        let devices = devices.max(1);
        // About four requests queued per device, in requests spread over
        // most of them (HFS found d=30, a=5 for seven disks).
        let d = (4 * devices + 2).clamp(8, 64);
        let file = FileState {
            window: Window::default(),
            ring: [(0, 0, 0); RING],
            len: 0,
            pos: 0,
            d,
            a: (d / 6).max(1),
            shared: false,
        };
        PrefetchState {
            policy,
            file: Mutex::new(file),
            threads: (0..SHARDS).map(|_| CachePadded::new(Mutex::new(HashMap::new()))).collect(),
        }
    }

    pub fn policy(&self) -> Prefetch {
        self.policy
    }

    fn with_thread<R>(&self, tid: u64, f: impl FnOnce(&mut ThreadState) -> R) -> R {
        let mut m = self.threads[(tid as usize) % SHARDS].lock();
        if m.len() > 4096 {
            // Threads that ended leave their state behind: start over.
            m.clear();
        }
        f(m.entry(tid).or_default())
    }

    /// The calling thread read blocks [b, b+n); `late` says the first of
    /// them was not even requested yet (neither cached nor loading). Returns what to read ahead.
    pub fn on_access(&self, tid: u64, b: u64, n: u64, late: bool) -> Vec<Request> {
        let mut out = Vec::new();
        let n = n.max(1);
        match self.policy {
            Prefetch::None => {}
            Prefetch::NextBlock => self.with_thread(tid, |t| t.window.advance(b, n, 1, 1, &mut out)),
            Prefetch::Distance { d, a, scope: Scope::Thread } => {
                self.with_thread(tid, |t| t.window.advance(b, n, d as u64, a as u64, &mut out))
            }
            Prefetch::Distance { d, a, scope: Scope::File } => {
                self.file.lock().window.advance(b, n, d as u64, a as u64, &mut out)
            }
            Prefetch::Adaptive => self.adaptive(tid, b, n, late, &mut out),
        }
        out
    }

    fn adaptive(&self, tid: u64, b: u64, n: u64, late: bool, out: &mut Vec<Request>) {
        let shared = {
            let mut f = self.file.lock();
            f.push(tid, b, b + n);
            if f.update_shared() {
                // The file window was running and the reader caught up: deepen it.
                if late && f.window.issued > b {
                    f.d = (f.d * 3 / 2).min(FILE_DMAX);
                    f.a = (f.d / 6).max(1);
                }
                let (d, a) = (f.d, f.a);
                f.window.advance(b, n, d, a, out);
                true
            } else {
                false
            }
        };
        self.with_thread(tid, |t| {
            let was = t.det.pattern();
            t.det.observe(b, n);
            if shared {
                return;
            }
            match t.det.pattern() {
                Pattern::Sequential => {
                    if t.d == 0 {
                        t.d = THREAD_D0;
                    } else if late && was == Pattern::Sequential {
                        t.d = (t.d * 2).min(THREAD_DMAX);
                    }
                    t.window.advance(b, n, t.d, (t.d / 4).max(1), out);
                }
                Pattern::Strided { stride } => {
                    // Request the next few strides not yet requested.
                    for i in 1..=STRIDES_AHEAD {
                        let Some(x) = b.checked_add_signed(stride * i) else { break };
                        let ahead = match t.stride_next {
                            Some(nx) if stride > 0 => x >= nx,
                            Some(nx) => x <= nx,
                            None => true,
                        };
                        if ahead {
                            out.push((x, n));
                            t.stride_next = Some(if stride > 0 { x + 1 } else { x.saturating_sub(1) });
                        }
                    }
                }
                _ => {}
            }
        });
    }

    /// What the adaptive policy sees in the calling thread's accesses.
    pub fn pattern(&self, tid: u64) -> Pattern {
        if self.policy != Prefetch::Adaptive {
            return Pattern::Unknown;
        }
        let f = self.file.lock();
        let mine = self.threads[(tid as usize) % SHARDS].lock().get(&tid).map(|t| t.det);
        let Some(det) = mine else { return Pattern::Unknown };
        if f.shared {
            return Pattern::SharedSequential;
        }
        match det.pattern() {
            Pattern::Sequential if f.others_elsewhere(tid, det.last_b) => Pattern::Partitioned,
            p => p,
        }
    }

    /// (distance, amount) the adaptive policy uses for a shared stream now.
    pub fn file_window(&self) -> (u64, u64) {
        let f = self.file.lock();
        (f.d, f.a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(p: &PrefetchState, tid: u64, blocks: impl IntoIterator<Item = u64>) -> Vec<Request> {
        blocks.into_iter().flat_map(|b| p.on_access(tid, b, 1, false)).collect()
    }

    #[test]
    fn next_block_requests_the_following_block_once() {
        let p = PrefetchState::new(Prefetch::NextBlock, 1);
        assert_eq!(run(&p, 1, 0..4), vec![(1, 1), (2, 1), (3, 1), (4, 1)]);
        // Several reads within one block ask once.
        assert_eq!(run(&p, 1, [4, 4, 4]), vec![(5, 1)]);
        // Other threads have windows of their own.
        assert_eq!(run(&p, 2, [100]), vec![(101, 1)]);
    }

    #[test]
    fn distance_keeps_d_blocks_requested_in_amounts_of_a() {
        let p = PrefetchState::new(Prefetch::Distance { d: 30, a: 5, scope: Scope::File }, 7);
        let first = p.on_access(1, 0, 1, false);
        assert_eq!(first, vec![(1, 5), (6, 5), (11, 5), (16, 5), (21, 5), (26, 5)]);
        assert_eq!(p.on_access(2, 1, 1, false), vec![(31, 5)]);
        for b in 2..6 {
            assert!(p.on_access(3, b, 1, false).is_empty(), "block {b}");
        }
        assert_eq!(p.on_access(1, 6, 1, false), vec![(36, 5)]);
        // A seek backwards restarts the window.
        assert_eq!(p.on_access(1, 0, 1, false)[0], (1, 5));
    }

    #[test]
    fn per_thread_distance_windows_are_separate() {
        let p = PrefetchState::new(Prefetch::Distance { d: 2, a: 1, scope: Scope::Thread }, 1);
        assert_eq!(p.on_access(1, 0, 1, false), vec![(1, 1), (2, 1)]);
        assert_eq!(p.on_access(2, 1000, 1, false), vec![(1001, 1), (1002, 1)]);
        assert_eq!(p.on_access(1, 1, 1, false), vec![(3, 1)]);
    }

    #[test]
    fn adaptive_sees_sequential_and_prefetches() {
        let p = PrefetchState::new(Prefetch::Adaptive, 1);
        let reqs = run(&p, 1, 0..10);
        assert_eq!(p.pattern(1), Pattern::Sequential);
        assert!(reqs.iter().any(|r| r.0 > 10), "{reqs:?}");
        assert!(reqs.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0), "{reqs:?}");
    }

    #[test]
    fn adaptive_sees_strides() {
        let p = PrefetchState::new(Prefetch::Adaptive, 1);
        let reqs = run(&p, 1, (0..8).map(|i| 100 + i * 16));
        assert_eq!(p.pattern(1), Pattern::Strided { stride: 16 });
        assert!(reqs.contains(&(100 + 8 * 16, 1)), "{reqs:?}");
        // Each strided block is requested once.
        let mut b: Vec<u64> = reqs.iter().map(|r| r.0).collect();
        let len = b.len();
        b.dedup();
        assert_eq!(b.len(), len);
        let p = PrefetchState::new(Prefetch::Adaptive, 1);
        run(&p, 1, (0..8).map(|i| 1000 - i * 10));
        assert_eq!(p.pattern(1), Pattern::Strided { stride: -10 });
    }

    #[test]
    fn adaptive_sees_partitioned_regions_and_shared_streams() {
        let p = PrefetchState::new(Prefetch::Adaptive, 7);
        for i in 0..20 {
            for t in 0..4u64 {
                p.on_access(t + 1, t * 10_000 + i, 1, false);
            }
        }
        for t in 1..=4 {
            assert_eq!(p.pattern(t), Pattern::Partitioned);
        }
        let p = PrefetchState::new(Prefetch::Adaptive, 7);
        let mut reqs = Vec::new();
        for b in 0..40u64 {
            reqs.extend(p.on_access(b % 3 + 1, b, 1, false));
        }
        assert_eq!(p.pattern(1), Pattern::SharedSequential);
        assert_eq!(p.file_window(), (30, 5));
        assert!(reqs.iter().any(|r| r.0 >= 60), "{reqs:?}");
        let p = PrefetchState::new(Prefetch::Adaptive, 1);
        run(&p, 1, [5, 900, 17, 4000, 33, 2]);
        assert_eq!(p.pattern(1), Pattern::Random);
    }

    #[test]
    fn late_readers_get_deeper_windows() {
        let p = PrefetchState::new(Prefetch::Adaptive, 1);
        run(&p, 1, 0..5);
        let before = p.threads[1].lock()[&1].d;
        p.on_access(1, 5, 1, true);
        p.on_access(1, 6, 1, true);
        assert!(p.threads[1].lock()[&1].d > before);
    }
}
