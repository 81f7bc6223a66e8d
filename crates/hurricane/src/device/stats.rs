use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Per-device counters. Each counter sits on its own cache line: every I/O
/// thread updates them, and false sharing would serialise the devices.
#[derive(Default)]
pub struct DeviceStats {
    reads: CachePadded<AtomicU64>,
    writes: CachePadded<AtomicU64>,
    read_bytes: CachePadded<AtomicU64>,
    write_bytes: CachePadded<AtomicU64>,
    flushes: CachePadded<AtomicU64>,
    /// Requests in flight: the load that `least-loaded` policies compare.
    in_flight: CachePadded<AtomicU64>,
    /// Recent time a request took, in ns (a moving average: each request
    /// counts 1/8); 0 until one has finished.
    service_ns: CachePadded<AtomicU64>,
    /// Service time held where it is (tests of the policies that read it).
    service_pinned: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub flushes: u64,
    pub in_flight: u64,
}

/// A request in flight on a device, from [`DeviceStats::begin`] until it is
/// dropped, when its time joins the device's service time.
pub struct InFlight<'a> {
    stats: &'a DeviceStats,
    since: std::time::Instant,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let took = self.since.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        let s = &self.stats.service_ns;
        // Racing updates may lose a sample: an average needs no more.
        if !self.stats.service_pinned.load(Relaxed) {
            let old = s.load(Relaxed);
            s.store(if old == 0 { took.max(1) } else { (old - old / 8 + took / 8).max(1) }, Relaxed);
        }
        self.stats.in_flight.fetch_sub(1, Relaxed);
    }
}

impl DeviceStats {
    pub fn begin(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Relaxed);
        InFlight { stats: self, since: std::time::Instant::now() }
    }
    /// Holds the service time at `ns` from now on (0: none known), so a
    /// test of a policy that reads it does not depend on the host's timing.
    #[cfg(test)]
    pub(crate) fn pin_service_ns(&self, ns: u64) {
        self.service_pinned.store(true, Relaxed);
        self.service_ns.store(ns, Relaxed);
    }
    /// The recent time a request took (ns), None before any finished.
    pub fn service_ns(&self) -> Option<u64> {
        Some(self.service_ns.load(Relaxed)).filter(|&n| n > 0)
    }
    pub fn read(&self, bytes: usize) {
        self.reads.fetch_add(1, Relaxed);
        self.read_bytes.fetch_add(bytes as u64, Relaxed);
    }
    pub fn write(&self, bytes: usize) {
        self.writes.fetch_add(1, Relaxed);
        self.write_bytes.fetch_add(bytes as u64, Relaxed);
    }
    pub fn flush(&self) {
        self.flushes.fetch_add(1, Relaxed);
    }
    pub fn load(&self) -> u64 {
        self.in_flight.load(Relaxed)
    }
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            reads: self.reads.load(Relaxed),
            writes: self.writes.load(Relaxed),
            read_bytes: self.read_bytes.load(Relaxed),
            write_bytes: self.write_bytes.load(Relaxed),
            flushes: self.flushes.load(Relaxed),
            in_flight: self.in_flight.load(Relaxed),
        }
    }
}
