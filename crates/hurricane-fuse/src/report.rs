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
    /// The meta-data caches: inodes in memory, and the store's pages.
    #[serde(default)]
    pub meta: MetaCacheReport,
    /// Request counters by operation name.
    pub ops: BTreeMap<String, OpReport>,
    /// What `compress` nodes stored and the time they took.
    #[serde(default)]
    pub compress: CompressReport,
    /// Each device's `log`: segments, live blocks, cleaner work.
    #[serde(default)]
    pub log: Vec<LogReport>,
    /// `colocate`: groups of small files and the reads that took them whole.
    #[serde(default)]
    pub groups: GroupReport,
    /// Transactions begun through the mount's ioctls, and their bounds.
    #[serde(default)]
    pub transactions: TxnReport,
    /// Walks of the whole pool made to serve `user.hurricane.status`.
    #[serde(default)]
    pub status_walks: u64,
    /// Whether the pool takes changes now (not mounted or remounted
    /// read-only).
    #[serde(default)]
    pub writable: bool,
    /// Whether the pool was opened read-only (`-o ro`): a remount
    /// read-write cannot make it writable.
    #[serde(default)]
    pub opened_read_only: bool,
}

/// Open transactions and what they buffer, against the mount's bounds
/// (`txn_*` options), and the requests waiting off the serving threads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TxnReport {
    pub open: usize,
    pub buffered_bytes: u64,
    /// Users with a transaction open.
    pub users: usize,
    pub max_open: usize,
    pub max_open_per_user: usize,
    pub max_bytes: u64,
    pub max_bytes_per_user: u64,
    pub max_bytes_per_txn: u64,
    pub lock_wait_s: f64,
    /// Requests waiting for a lock (or a pool-wide report) off the serving
    /// threads now.
    pub waiting_requests: usize,
}

/// The `colocate` nodes' counters, every device summed (since the mount).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupReport {
    pub groups_opened: u64,
    /// Free ends of groups a key took over from the key before it.
    #[serde(default)]
    pub groups_taken_over: u64,
    /// Blocks placed in a key's group.
    pub placed_blocks: u64,
    /// Device reads of a group's used run on a miss, the blocks they
    /// brought in beside the one asked for, and later reads served by them.
    pub group_reads: u64,
    pub blocks_read_ahead: u64,
    pub cache_hits: u64,
    /// Blocks the group caches hold now.
    pub cached_blocks: u64,
    /// Small-file block writes held for a group write, the device writes
    /// that took them out and the blocks those carried, the blocks held
    /// now, and those given up with a device that stopped taking writes.
    #[serde(default)]
    pub held_blocks: u64,
    #[serde(default)]
    pub group_writes: u64,
    #[serde(default)]
    pub blocks_drained: u64,
    #[serde(default)]
    pub dirty_blocks: u64,
    #[serde(default)]
    pub blocks_lost: u64,
}

/// One device's log and cleaner counters (since the mount).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LogReport {
    pub device: u32,
    /// Segments in the usage table and the live blocks in them.
    pub segments: u64,
    pub live_blocks: u64,
    /// Blocks files wrote, blocks the cleaner moved, segments it emptied.
    pub written_blocks: u64,
    pub moved_blocks: u64,
    pub cleaned_segments: u64,
    /// Of those, the segments the background cleaner emptied.
    #[serde(default)]
    pub background_segments: u64,
    /// Summary blocks written in front of plain writes.
    #[serde(default)]
    pub summary_blocks: u64,
    /// (written + moved + summaries) / written.
    pub write_amplification: f64,
}

/// The `compress` nodes' counters (every file of the mount).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompressReport {
    pub chunks_compressed: u64,
    /// Stored raw: compression saved less than a block.
    pub chunks_raw: u64,
    /// All zeros: stored as nothing.
    pub chunks_zero: u64,
    /// Bytes of the chunks stored, and the bytes they took on the child.
    pub bytes_in: u64,
    pub bytes_stored: u64,
    pub ratio: f64,
    pub compress_ms: f64,
    pub decompress_ms: f64,
    pub bytes_decompressed: u64,
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
    /// Position in the pool.
    #[serde(default)]
    pub index: u32,
    /// online, missing, faulted, resilvering or removed.
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub read_errors: u64,
    #[serde(default)]
    pub write_errors: u64,
    #[serde(default)]
    pub checksum_errors: u64,
    /// Bytes (for a missing device, the largest present device's size).
    #[serde(default)]
    pub size: u64,
    /// Bytes allocated on it.
    #[serde(default)]
    pub used: u64,
}

/// Files by health: how many survive the devices that are down, and which
/// do not.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthReport {
    pub healthy: u64,
    pub degraded: u64,
    pub lost: u64,
    /// Paths of lost files, at most [`LISTED_PATHS`].
    pub lost_paths: Vec<String>,
    /// Paths of degraded files, at most [`LISTED_PATHS`].
    pub degraded_paths: Vec<String>,
    /// The meta-data checkpoint: ok, degraded or lost.
    pub meta: String,
    /// Files on the pool's permanent error list: data a read, scrub,
    /// replacement or `fsck --data` found no copy of (absent from older
    /// reports).
    #[serde(default)]
    pub error_files: u64,
    /// Those files, at most [`LISTED_PATHS`] (their paths only for root on
    /// a mount).
    #[serde(default)]
    pub errors: Vec<ErrorReport>,
}

/// One file on the permanent error list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorReport {
    pub ino: u64,
    /// Every name of the file (empty: none left, or not shown).
    pub paths: Vec<String>,
    /// Damaged byte ranges (offset, length).
    pub ranges: Vec<(u64, u64)>,
    /// What found it last: read, scrub, replace or fsck.
    pub source: String,
    /// When it was first and last found (seconds since the Unix epoch).
    pub first_s: i64,
    pub last_s: i64,
    pub detail: String,
}

/// The meta-data's copies (`Fs::meta_redundancy`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaCopiesReport {
    /// Copies the pool keeps of the meta-file and of the journal (0: it
    /// keeps the meta-file layout made with `mkfs --meta-layout`).
    pub wanted: u32,
    /// Devices holding a copy of the meta-file, and of the journal, with
    /// whether each is online.
    pub meta_file: Vec<(u32, bool)>,
    pub journal: Vec<(u32, bool)>,
    /// Device failures the meta-data survives as the devices stand.
    pub survives: u32,
    /// The copies the last journal record reached, of those it was
    /// written to.
    pub last_record: (u32, u32),
    /// Fewer copies than kept, or fewer than the files need.
    pub degraded: bool,
}

impl MetaCopiesReport {
    pub fn of(fs: &hurricane::Fs) -> MetaCopiesReport {
        let r = fs.meta_redundancy();
        MetaCopiesReport {
            wanted: r.wanted.unwrap_or(0),
            survives: r.survives(),
            degraded: r.degraded(),
            meta_file: r.meta_file,
            journal: r.journal,
            last_record: r.last_record,
        }
    }
}

/// How many paths of lost (and of degraded) files a report lists.
pub const LISTED_PATHS: usize = 50;

/// What `hurricane status` shows: every device with its state and error
/// counts, and the files by health. Built the same way for a pool opened
/// offline and for a mount (which serves it as `user.hurricane.status`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    pub pool: String,
    /// Mount point, when read from a mount.
    pub mountpoint: String,
    pub devices: Vec<DeviceReport>,
    pub health: HealthReport,
    pub meta_copies: MetaCopiesReport,
}

impl StatusReport {
    /// Every device online (or removed from the pool), every file with
    /// all its copies, and no permanent errors.
    pub fn healthy(&self) -> bool {
        self.devices.iter().all(|d| d.state == "online" || d.state == "removed")
            && self.health.degraded == 0
            && self.health.lost == 0
            && self.health.meta == "ok"
            && self.health.error_files == 0
            && !self.meta_copies.degraded
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// Reads a report; a clear error for anything else.
    pub fn from_json(raw: &[u8]) -> Result<StatusReport, String> {
        serde_json::from_slice(raw).map_err(|e| format!("not a status report of this version: {e}"))
    }

    /// The status of an open pool.
    pub fn of(fs: &hurricane::Fs, pool: &str) -> StatusReport {
        Self::listing(fs, pool, LISTED_PATHS)
    }

    /// The status of an open pool, naming up to `paths` lost and as many
    /// degraded files (0: counts only, and the paths are not looked up).
    pub fn listing(fs: &hurricane::Fs, pool: &str, paths: usize) -> StatusReport {
        StatusReport {
            pool: pool.to_string(),
            mountpoint: String::new(),
            devices: device_reports(fs),
            health: health_report(fs, paths),
            meta_copies: MetaCopiesReport::of(fs),
        }
    }
}

/// Every device of an open pool: I/O counters, state, errors and space.
pub fn device_reports(fs: &hurricane::Fs) -> Vec<DeviceReport> {
    let st = fs.storage();
    st.probe_now();
    let bs = hurricane::device::BLOCK_SIZE as u64;
    st.devs
        .iter()
        .zip(&st.allocs)
        .map(|(d, a)| {
            let s = d.stats.snapshot();
            let e = d.errors();
            DeviceReport {
                name: d.name(),
                reads: s.reads,
                read_bytes: s.read_bytes,
                writes: s.writes,
                write_bytes: s.write_bytes,
                flushes: s.flushes,
                in_flight: s.in_flight,
                index: d.index,
                state: d.state().name().to_string(),
                read_errors: e.read,
                write_errors: e.write,
                checksum_errors: e.checksum,
                size: d.blocks().saturating_mul(bs),
                used: a.total_blocks().saturating_sub(a.free_blocks()).saturating_mul(bs),
            }
        })
        .collect()
}

/// Files of an open pool by health, naming up to `paths` of each kind.
pub fn health_report(fs: &hurricane::Fs, paths: usize) -> HealthReport {
    let h = fs.health(paths);
    let word = |x: hurricane::blocks::Health| match x {
        hurricane::blocks::Health::Ok => "ok",
        hurricane::blocks::Health::Degraded => "degraded",
        hurricane::blocks::Health::Lost => "lost",
    };
    HealthReport {
        healthy: h.healthy,
        degraded: h.degraded,
        lost: h.lost,
        lost_paths: h.lost_paths,
        degraded_paths: h.degraded_paths,
        meta: word(h.meta).to_string(),
        error_files: h.error_files,
        errors: h
            .errors
            .into_iter()
            .map(|(e, paths)| ErrorReport {
                ino: e.ino,
                paths,
                ranges: e.ranges,
                source: e.source.name().to_string(),
                first_s: e.first / 1_000_000_000,
                last_s: e.last / 1_000_000_000,
                detail: e.detail,
            })
            .collect(),
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JournalReport {
    pub commits: u64,
    pub checkpoints: u64,
    /// Checkpoints written without a sync of their own, made durable by
    /// the next durable commit (absent from older reports).
    #[serde(default)]
    pub unsynced_checkpoints: u64,
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

/// The meta-data caches, per kind of record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetaCacheReport {
    /// Inodes: in memory (of them changed since the last checkpoint), and
    /// lookups served from memory, read from the store, dropped.
    pub inodes: KindReport,
    pub inodes_resident: u64,
    pub inodes_dirty: u64,
    /// Directory entries read from the store, served again from memory.
    #[serde(default)]
    pub entries: KindReport,
    /// Directory entries and inode records read from the store.
    pub entry_reads: u64,
    pub record_reads: u64,
    /// The store's pages (B-tree blocks of directories and the inode table).
    pub pages: KindReport,
    pub store_bytes: u64,
    pub store_commits: u64,
}

/// Hits, misses and evictions of one kind of cached record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindReport {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
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

    #[test]
    fn status_round_trips_and_reads_older_stats() {
        let mut r = StatusReport { pool: "/p".into(), ..Default::default() };
        r.devices.push(DeviceReport { index: 2, state: "missing".into(), read_errors: 3, ..Default::default() });
        r.health = HealthReport {
            healthy: 1,
            lost: 1,
            lost_paths: vec!["/x".into()],
            meta: "ok".into(),
            ..Default::default()
        };
        assert_eq!(StatusReport::from_json(&r.to_json()).unwrap(), r);
        assert!(!r.healthy());
        r.devices[0].state = "online".into();
        r.health.lost = 0;
        assert!(r.healthy());
        assert!(StatusReport::from_json(b"[]").is_err());
        // A statistics report without the device fields (and one of a
        // version that carried the files' health) still reads.
        let old = br#"{"pool":"/p","mountpoint":"/m","pid":1,"uptime_s":0.0,"threads":1,"kernel_features":[],
            "transport":{"io_uring":false,"ring_requests":[]},"space":{"block_size":4096,"blocks":1,"free_blocks":1,"inodes":1},
            "devices":[{"name":"d","reads":0,"read_bytes":0,"writes":0,"write_bytes":0,"flushes":0,"in_flight":0}],
            "journal":{"commits":0,"checkpoints":0,"replayed_ops_at_mount":0,"was_clean_at_mount":true},
            "cache":{"capacity":0,"bytes":0,"blocks":0,"hits":0,"misses":0,"waits":0,"hit_rate":0.0,"prefetched":0,
            "prefetch_used":0,"evictions":0,"invalidations":0},"ops":{}}"#;
        let s = StatsReport::from_json(old).unwrap();
        assert_eq!(s.devices[0].state, "");
        let with_health = String::from_utf8_lossy(old).replace(r#""ops":{}}"#, r#""ops":{},"health":{"healthy":3}}"#);
        assert_eq!(StatsReport::from_json(with_health.as_bytes()).unwrap().pool, "/p");
    }
}
