//! Request counters per FUSE operation: count, errors, total and maximum
//! latency. Each serving thread writes its own cache-padded shard, so the
//! counters add no shared cache line to the request path; a snapshot sums
//! the shards.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

macro_rules! ops {
    ($($v:ident => $n:literal),* $(,)?) => {
        /// The FUSE operations that are counted.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Op { $($v),* }
        impl Op {
            pub const ALL: &'static [Op] = &[$(Op::$v),*];
            pub fn name(self) -> &'static str {
                match self { $(Op::$v => $n),* }
            }
        }
    };
}

ops! {
    Lookup => "lookup", Forget => "forget", Getattr => "getattr", Setattr => "setattr",
    Readlink => "readlink", Mknod => "mknod", Mkdir => "mkdir", Unlink => "unlink",
    Rmdir => "rmdir", Symlink => "symlink", Rename => "rename", Link => "link",
    Open => "open", Read => "read", Write => "write", Flush => "flush",
    Release => "release", Fsync => "fsync", Opendir => "opendir", Readdir => "readdir",
    Readdirplus => "readdirplus", Releasedir => "releasedir", Fsyncdir => "fsyncdir",
    Statfs => "statfs", Setxattr => "setxattr", Getxattr => "getxattr",
    Listxattr => "listxattr", Removexattr => "removexattr", Access => "access",
    Create => "create", Fallocate => "fallocate",
    Lseek => "lseek", CopyFileRange => "copy_file_range", Ioctl => "ioctl",
}

const N_OPS: usize = Op::ALL.len();

#[derive(Default)]
struct Counter {
    count: AtomicU64,
    errors: AtomicU64,
    total_ns: AtomicU64,
    max_ns: AtomicU64,
}

/// Totals of one operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpTotals {
    pub count: u64,
    pub errors: u64,
    pub total_ns: u64,
    pub max_ns: u64,
}

pub struct Stats {
    shards: Box<[CachePadded<[Counter; N_OPS]>]>,
}

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static SHARD: usize = NEXT_SHARD.fetch_add(1, Relaxed);
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl Stats {
    pub fn new() -> Self {
        let n = hurricane::affinity::cpus().clamp(4, 64) * 2;
        Stats { shards: (0..n).map(|_| CachePadded::new(std::array::from_fn(|_| Counter::default()))).collect() }
    }

    /// Records one request of `op` that started at `t0`.
    pub fn record(&self, op: Op, t0: Instant, failed: bool) {
        let ns = t0.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        let shard = SHARD.with(|s| *s) % self.shards.len();
        let c = &self.shards[shard][op as usize];
        c.count.fetch_add(1, Relaxed);
        c.total_ns.fetch_add(ns, Relaxed);
        if failed {
            c.errors.fetch_add(1, Relaxed);
        }
        if ns > c.max_ns.load(Relaxed) {
            c.max_ns.fetch_max(ns, Relaxed);
        }
    }

    pub fn totals(&self, op: Op) -> OpTotals {
        let mut t = OpTotals::default();
        for s in self.shards.iter() {
            let c = &s[op as usize];
            t.count += c.count.load(Relaxed);
            t.errors += c.errors.load(Relaxed);
            t.total_ns += c.total_ns.load(Relaxed);
            t.max_ns = t.max_ns.max(c.max_ns.load(Relaxed));
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_sum_over_threads() {
        let s = std::sync::Arc::new(Stats::new());
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        s.record(Op::Getattr, Instant::now(), i % 10 == 0);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let t = s.totals(Op::Getattr);
        assert_eq!(t.count, 8000);
        assert_eq!(t.errors, 800);
        assert_eq!(s.totals(Op::Read).count, 0);
        assert_eq!(Op::ALL.iter().filter(|o| o.name() == "getattr").count(), 1);
    }
}
