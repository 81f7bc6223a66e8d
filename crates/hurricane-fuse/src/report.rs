//! The statistics report of a mount: one typed structure that the mount
//! serves as JSON (`user.hurricane.stats` on the root) and `hurricane
//! stats` reads back, so both sides name every field the same way.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Everything `hurricane stats` shows about a mount.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatsReport {
    pub pool: String,
    pub mountpoint: String,
    pub pid: u32,
    pub uptime_s: f64,
    pub threads: usize,
    /// The capabilities the kernel agreed to at init.
    pub kernel_features: Vec<String>,
    pub transport: Transport,
    pub space: Space,
    pub devices: Vec<DeviceReport>,
    pub journal: JournalReport,
    pub cache: CacheReport,
    /// Request counters by operation name.
    pub ops: BTreeMap<String, OpReport>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Transport {
    /// Whether requests are served through io_uring queues.
    pub io_uring: bool,
    /// Requests served through each CPU's queue.
    pub ring_requests: Vec<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Space {
    pub block_size: u32,
    pub blocks: u64,
    pub free_blocks: u64,
    /// Inodes in use.
    pub inodes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    pub name: String,
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub flushes: u64,
    pub in_flight: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JournalReport {
    pub commits: u64,
    pub checkpoints: u64,
    pub replayed_ops_at_mount: u64,
    pub was_clean_at_mount: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheReport {
    pub capacity: u64,
    pub bytes: u64,
    pub blocks: u64,
    pub hits: u64,
    pub misses: u64,
    pub waits: u64,
    pub hit_rate: f64,
    pub prefetched: u64,
    pub prefetch_used: u64,
    pub evictions: u64,
    pub invalidations: u64,
}

/// Counters of one kind of request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpReport {
    pub count: u64,
    pub errors: u64,
    pub total_ns: u64,
    pub avg_ns: u64,
    pub max_ns: u64,
}

impl StatsReport {
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// Reads a report; a clear error for anything else.
    pub fn from_json(raw: &[u8]) -> Result<StatsReport, String> {
        serde_json::from_slice(raw).map_err(|e| format!("statistics are not a report of this version: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_garbage() {
        let mut r = StatsReport { pool: "/p".into(), pid: 7, uptime_s: 1.5, ..Default::default() };
        r.ops.insert("read".into(), OpReport { count: 2, errors: 1, total_ns: 10, avg_ns: 5, max_ns: 6 });
        r.transport.ring_requests = vec![1, 2];
        assert_eq!(StatsReport::from_json(&r.to_json()).unwrap(), r);
        assert!(StatsReport::from_json(b"{\"pool\": 1}").is_err());
        assert!(StatsReport::from_json(b"not json").is_err());
    }
}
