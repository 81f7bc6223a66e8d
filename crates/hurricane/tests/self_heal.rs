//! Self-healing `replicate` through the engine: reads that rewrite a bad
//! copy, writes that go on with a copy failing and whose missed ranges
//! survive journal replay and checkpoints, and a read policy changed on a
//! file holding data.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use hurricane::device::{CrashMode, Device, DeviceState, MemDevice};
use hurricane::{FormatOptions, Fs};
use std::collections::BTreeSet;
use std::sync::Arc;

const BS: u64 = 4096;
/// A file on devices 2 and 3 (the journal and meta-file live on 0 and 1);
/// copy 0, on device 2, serves reads first.
const LAYOUT: &str = "replicate(read=primary)[extent@2,extent@3]";

/// Memory device whose chosen blocks fail to read until they are written
/// again (as a disk remaps a bad sector on write).
struct BadBlocks {
    inner: MemDevice,
    bad: parking_lot::Mutex<BTreeSet<u64>>,
}

impl Device for BadBlocks {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> hurricane::Result<()> {
        let (s, e) = (offset / BS, (offset + buf.len() as u64).div_ceil(BS));
        if self.bad.lock().range(s..e).next().is_some() {
            return Err(hurricane::Error::Device(format!("{}: unreadable block in {s}..{e}", self.name())));
        }
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> hurricane::Result<()> {
        let (s, e) = (offset / BS, (offset + buf.len() as u64).div_ceil(BS));
        let mut bad = self.bad.lock();
        let fixed: Vec<u64> = bad.range(s..e).copied().collect();
        for b in fixed {
            bad.remove(&b);
        }
        drop(bad);
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> hurricane::Result<()> {
        self.inner.flush()
    }
}

#[test]
fn a_read_rewrites_the_bad_copy() {
    let size = 32 * MB;
    let flaky = Arc::new(BadBlocks { inner: MemDevice::new("mem2", size), bad: Default::default() });
    let devs: Vec<Arc<dyn Device>> = vec![
        Arc::new(MemDevice::new("mem0", size)),
        Arc::new(MemDevice::new("mem1", size)),
        flaky.clone(),
        Arc::new(MemDevice::new("mem3", size)),
    ];
    Fs::format(devs.clone(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(devs, quiet()).unwrap();
    let data = pattern(1, 300_000);
    fs.write_file("/f", &data, Some(LAYOUT)).unwrap();
    fs.sync().unwrap();
    // Every block of device 2 goes bad: copy 0 can no longer be read.
    flaky.bad.lock().extend(0..size / BS);
    fs.drop_caches();
    assert_eq!(fs.read_file("/f").unwrap(), data);
    let healed = fs.storage().devs[2].repaired();
    assert_eq!(healed, 300_000u64.div_ceil(BS), "every block of the file's copy 0 rewritten");
    assert!(fs.storage().devs[2].errors().read > 0);
    assert_eq!(fs.storage().devs[3].repaired(), 0);
    // With copy 1 gone, copy 0 alone serves the file: the repair was real.
    fs.storage().devs[3].set_state(DeviceState::Missing);
    fs.drop_caches();
    assert_eq!(fs.read_file("/f").unwrap(), data);
    fs.storage().devs[3].set_state(DeviceState::Online);
    fs.close().unwrap();
}

#[test]
fn missed_ranges_survive_replay_and_checkpoints() {
    let pool = MemPool::new(4, 32 * MB);
    let fs = pool.open().unwrap();
    let old = pattern(2, 256 * 1024);
    fs.write_file("/f", &old, Some(LAYOUT)).unwrap();
    fs.sync().unwrap();
    // Device 2 fails every write: the write still succeeds on copy 1.
    pool.devs[2].fail_after_writes(0);
    let new = pattern(3, 64 * 1024);
    let f = fs.open_with("/f", hurricane::OpenOptions::new().write(true)).unwrap();
    f.write_at(&new, 64 * 1024).unwrap();
    drop(f);
    fs.sync().unwrap();
    let mut want = old.clone();
    want[64 * 1024..128 * 1024].copy_from_slice(&new);
    fs.drop_caches();
    assert_eq!(fs.read_file("/f").unwrap(), want);
    // Two power cuts now: device 2 comes back (its images take writes) with
    // copy 0, the primary, holding the old bytes of the range it missed.
    let replayed = pool.crash(CrashMode::KeepAll);
    let checkpointed = pool.crash(CrashMode::KeepAll);
    drop(fs);
    // The journal replays the missed range: the stale copy is not read, and
    // the read resyncs it.
    let fs = replayed.open().unwrap();
    assert_eq!(fs.read_file("/f").unwrap(), want);
    fs.close().unwrap();
    // A checkpoint before any read stores the missed range in the file's state.
    let fs = checkpointed.open().unwrap();
    fs.checkpoint().unwrap();
    fs.close().unwrap();
    let fs = checkpointed.open().unwrap();
    assert_eq!(fs.read_file("/f").unwrap(), want);
    // As stored: the pool puts a checksum block above every leaf.
    assert_eq!(fs.layout_of("/f").unwrap(), "replicate(read=primary)[checksum[extent@2],checksum[extent@3]]");
    // That read resynced copy 0: with copy 1 gone it serves the new bytes.
    fs.sync().unwrap();
    fs.storage().devs[3].set_state(DeviceState::Missing);
    fs.drop_caches();
    assert_eq!(fs.read_file("/f").unwrap(), want);
    assert!(fs.storage().devs[2].repaired() >= 16);
    fs.storage().devs[3].set_state(DeviceState::Online);
    fs.close().unwrap();
}

#[test]
fn read_policy_changes_on_a_file_holding_data() {
    let pool = MemPool::new(4, 32 * MB);
    let fs = pool.open().unwrap();
    let data = pattern(4, 100_000);
    fs.write_file("/f", &data, Some(LAYOUT)).unwrap();
    let rr = "replicate(read=round-robin)[extent@2,extent@3]";
    fs.set_layout("/f", rr).unwrap();
    // As stored: the pool puts a checksum block above every leaf.
    let rr_stored = "replicate(read=round-robin)[checksum[extent@2],checksum[extent@3]]";
    assert_eq!(fs.layout_of("/f").unwrap(), rr_stored);
    assert_eq!(fs.read_file("/f").unwrap(), data);
    // Anything but the read policy would move the data (a migration), not
    // change the tree in place.
    assert!(fs.layout_changes_in_place("/f", "replicate(read=primary)[extent@2,extent@3]").unwrap());
    for other in ["replicate(read=primary)[extent@2,extent@1]", "stripe[extent@2,extent@3]"] {
        assert!(!fs.layout_changes_in_place("/f", other).unwrap(), "{other}");
    }
    assert_eq!(fs.layout_of("/f").unwrap(), rr_stored);
    fs.sync().unwrap();
    // Journalled: replay keeps it; so does a checkpoint.
    let cut = pool.crash(CrashMode::KeepAll);
    drop(fs);
    let fs = cut.open().unwrap();
    assert_eq!(fs.layout_of("/f").unwrap(), rr_stored);
    fs.set_layout("/f", "replicate[extent@2,extent@3]").unwrap();
    fs.checkpoint().unwrap();
    fs.close().unwrap();
    let fs = cut.open().unwrap();
    assert_eq!(fs.layout_of("/f").unwrap(), "replicate[checksum[extent@2],checksum[extent@3]]");
    assert_eq!(fs.read_file("/f").unwrap(), data);
}
