//! Scrub and device replacement through the engine API: what a scrub
//! verifies, repairs and reports (with paths), its rate limit and resume
//! point, and replacing a device by copy or by rebuild, interrupted or not.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use hurricane::device::{Device, DeviceState, MemDevice};
use hurricane::fs::{ReplaceOptions, ScrubOptions, ScrubPos};
use hurricane::{FormatOptions, Fs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

const BS: usize = 4096;

fn repair() -> ScrubOptions {
    ScrubOptions { repair: true, ..Default::default() }
}

/// Flips one byte in the first block of `dev` that holds `block` exactly.
fn flip_copy_of(dev: &dyn Device, block: &[u8]) -> bool {
    let mut buf = vec![0u8; BS];
    for b in 2..dev.size() / BS as u64 {
        dev.read_at(&mut buf, b * BS as u64).unwrap();
        if buf == block {
            buf[100] ^= 0x5a;
            dev.write_at(&buf, b * BS as u64).unwrap();
            return true;
        }
    }
    false
}

#[test]
fn healthy_pool_scrubs_clean() {
    let pool = MemPool::new(3, 64 * MB);
    let fs = pool.open().unwrap();
    fs.mkdir_all("/d", 0o755).unwrap();
    fs.write_file("/d/striped", &pattern(1, 3 * MB as usize + 100), Some("stripe(unit=64K,width=3)")).unwrap();
    fs.write_file("/d/mirrored", &pattern(2, MB as usize), Some("replicate(copies=2)[extent@1,extent@2]")).unwrap();
    fs.write_file("/small", b"tiny", None).unwrap();
    let r = fs.scrub(&repair(), &|_| {}).unwrap();
    assert!(r.complete);
    assert_eq!(r.files, 3);
    assert_eq!(r.repaired_blocks, 0);
    assert!(r.lost.is_empty(), "{:?}", r.lost);
    // Every block of every file was verified at least once.
    let blocks = (3 * MB as usize + 100).div_ceil(BS) + MB as usize / BS + 1;
    assert!(r.checked_blocks >= blocks as u64, "{} < {blocks}", r.checked_blocks);
    assert!(r.bytes_read >= (blocks * BS) as u64 - BS as u64);
}

#[test]
fn a_lost_device_is_reported_with_paths_and_exact_ranges() {
    let pool = MemPool::new(3, 64 * MB);
    let fs = pool.open().unwrap();
    fs.mkdir_all("/a/b", 0o755).unwrap();
    // 6 units of 64 KiB: units 1 and 4 are on device 1.
    fs.write_file("/a/b/striped", &pattern(3, 6 * 65536), Some("stripe(unit=64K)[extent@0,extent@1,extent@2]"))
        .unwrap();
    fs.hard_link("/a/b/striped", "/a/other-name").unwrap();
    fs.write_file("/a/safe", &pattern(4, 65536), Some("extent@2")).unwrap();
    fs.storage().devs[1].set_state(DeviceState::Faulted);
    let r = fs.scrub(&repair(), &|_| {}).unwrap();
    assert_eq!(r.lost.len(), 1, "{:?}", r.lost);
    let f = &r.lost[0];
    assert_eq!(f.paths, vec!["/a/b/striped".to_string(), "/a/other-name".to_string()]);
    assert_eq!(f.ranges, vec![(65536, 65536), (4 * 65536, 65536)]);
    assert_eq!(r.lost_blocks(), 32);
}

#[test]
fn flipped_bytes_in_a_copy_are_repaired_and_on_one_copy_reported() {
    let pool = MemPool::new(3, 64 * MB);
    let fs = pool.open().unwrap();
    let data = pattern(5, 256 * 1024);
    fs.write_file("/m", &data, Some("replicate(copies=2)[checksum[extent@1],checksum[extent@2]]")).unwrap();
    let plain = pattern(6, 64 * 1024);
    fs.write_file("/p", &plain, Some("checksum[extent@0]")).unwrap();
    fs.sync().unwrap();
    fs.drop_caches();
    assert!(flip_copy_of(&*pool.devs[1], &data[BS..2 * BS]));
    assert!(flip_copy_of(&*pool.devs[0], &plain[..BS]));
    let r = fs.scrub(&repair(), &|_| {}).unwrap();
    assert!(r.repaired_blocks >= 1);
    assert_eq!(r.lost.len(), 1);
    assert_eq!(r.lost[0].paths, vec!["/p".to_string()]);
    assert_eq!(r.lost[0].ranges, vec![(0, BS as u64)]);
    // A second pass finds the mirror clean.
    let again = fs.scrub(&repair(), &|_| {}).unwrap();
    assert_eq!(again.repaired_blocks, 0);
    assert_eq!(fs.read_file("/m").unwrap(), data);
}

#[test]
fn the_rate_limit_is_never_exceeded() {
    let pool = MemPool::new(2, 64 * MB);
    let fs = pool.open().unwrap();
    fs.write_file("/f", &pattern(7, 4 * MB as usize), Some("extent@1")).unwrap();
    let rate = 8 * MB;
    let t = Instant::now();
    let r = fs.scrub(&ScrubOptions { repair: true, rate: Some(rate), ..Default::default() }, &|_| {}).unwrap();
    let took = t.elapsed().as_secs_f64();
    let verified = (r.checked_blocks * BS as u64) as f64;
    assert!(verified >= (4 * MB) as f64);
    // The scrub waits until the time taken covers what it verified.
    assert!(took >= verified / rate as f64, "{verified} bytes in {took} s at {rate} B/s");
}

#[test]
fn an_interrupted_scrub_resumes_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let posf = dir.path().join("scrub.pos");
    let pool = MemPool::new(2, 128 * MB);
    let fs = pool.open().unwrap();
    for i in 0..4 {
        fs.write_file(&format!("/f{i}"), &pattern(10 + i, 20 * MB as usize), Some("extent@1")).unwrap();
    }
    let full = fs.scrub(&repair(), &|_| {}).unwrap().checked_blocks;
    let stop = Arc::new(AtomicBool::new(false));
    let opts = ScrubOptions {
        repair: true,
        position_file: Some(posf.clone()),
        resume: true,
        stop: Some(stop.clone()),
        ..Default::default()
    };
    // Stopped after the second chunk.
    let chunks = std::sync::atomic::AtomicU32::new(0);
    let first = fs
        .scrub(&opts, &|_| {
            if chunks.fetch_add(1, Ordering::SeqCst) == 1 {
                stop.store(true, Ordering::SeqCst);
            }
        })
        .unwrap();
    assert!(!first.complete);
    let at = first.next.unwrap();
    assert!(at > ScrubPos::default());
    assert!(posf.exists());
    stop.store(false, Ordering::SeqCst);
    // A later run (after a reopen) continues from the saved point.
    fs.close().unwrap();
    let fs = pool.open().unwrap();
    let second = fs.scrub(&opts, &|_| {}).unwrap();
    assert!(second.complete);
    assert_eq!(second.resumed_from, Some(at));
    assert_eq!(first.checked_blocks + second.checked_blocks, full);
    assert!(!posf.exists(), "a completed scrub removes its position");
    // Without `resume` a scrub starts over.
    let third = fs.scrub(&ScrubOptions { repair: true, ..Default::default() }, &|_| {}).unwrap();
    assert_eq!(third.resumed_from, None);
    assert_eq!(third.checked_blocks, full);
}

#[test]
fn replacing_a_readable_device_copies_it_and_survives_a_reopen() {
    let pool = MemPool::new(3, 64 * MB);
    let fs = pool.open().unwrap();
    let a = pattern(20, 5 * MB as usize + 7);
    let b = pattern(21, MB as usize);
    fs.write_file("/a", &a, Some("stripe(unit=64K,width=3)")).unwrap();
    fs.write_file("/b", &b, Some("extent@1")).unwrap();
    let new = Arc::new(MemDevice::new("new1", 80 * MB));
    let r = fs.replace_device(1, new.clone(), &ReplaceOptions::default(), &|_| {}).unwrap();
    assert!(r.copied_bytes >= b.len() as u64);
    assert!(r.rebuild.is_none());
    assert_eq!(fs.storage().devs[1].name(), "new1");
    // Writes after the switch reach the new device only.
    fs.write_file("/c", &pattern(22, 100_000), Some("extent@1")).unwrap();
    fs.close().unwrap();
    let devs: Vec<Arc<dyn Device>> = vec![pool.devs[0].clone(), new, pool.devs[2].clone()];
    let fs = Fs::open(devs, quiet()).unwrap();
    assert_eq!(fs.read_file("/a").unwrap(), a);
    assert_eq!(fs.read_file("/b").unwrap(), b);
    assert_eq!(fs.read_file("/c").unwrap(), pattern(22, 100_000));
    let s = fs.scrub(&repair(), &|_| {}).unwrap();
    assert!(s.lost.is_empty());
}

#[test]
fn a_replacement_is_refused_when_too_small() {
    let pool = MemPool::new(2, 64 * MB);
    let fs = pool.open().unwrap();
    let e = fs.replace_device(1, Arc::new(MemDevice::new("tiny", 32 * MB)), &ReplaceOptions::default(), &|_| {});
    let msg = e.unwrap_err().to_string();
    assert!(msg.contains("tiny") && msg.contains("smaller"), "{msg}");
    let e = fs.replace_device(5, Arc::new(MemDevice::new("x", 64 * MB)), &ReplaceOptions::default(), &|_| {});
    assert!(e.unwrap_err().to_string().contains("device 5"));
}

#[test]
fn rebuilding_a_lost_device_reports_unprotected_files_and_ends_online() {
    let pool = MemPool::new(3, 64 * MB);
    let fs = pool.open().unwrap();
    fs.write_file("/plain", &pattern(30, 200_000), Some("extent@1")).unwrap();
    fs.write_file("/elsewhere", &pattern(31, 200_000), Some("extent@2")).unwrap();
    fs.sync().unwrap();
    fs.storage().devs[1].set_state(DeviceState::Missing);
    let new = Arc::new(MemDevice::new("new1", 64 * MB));
    let r = fs.replace_device(1, new.clone(), &ReplaceOptions::default(), &|_| {}).unwrap();
    let s = r.rebuild.unwrap();
    assert!(s.complete);
    assert_eq!(s.rebuilt, vec![1]);
    assert_eq!(s.lost.len(), 1);
    assert_eq!(s.lost[0].paths, vec!["/plain".to_string()]);
    assert_eq!(fs.storage().devs[1].state(), DeviceState::Online);
    assert!(fs.resilvering().is_empty());
    fs.close().unwrap();
    let devs: Vec<Arc<dyn Device>> = vec![pool.devs[0].clone(), new, pool.devs[2].clone()];
    let fs = Fs::open(devs, quiet()).unwrap();
    assert!(fs.resilvering().is_empty(), "the superblocks no longer say resilvering");
    assert_eq!(fs.read_file("/elsewhere").unwrap(), pattern(31, 200_000));
}

#[test]
fn an_interrupted_resilver_stays_resilvering_and_a_scrub_finishes_it() {
    let pool = MemPool::new(3, 64 * MB);
    let fs = pool.open().unwrap();
    fs.write_file("/m", &pattern(40, MB as usize), Some("replicate(copies=2)[extent@1,extent@2]")).unwrap();
    fs.sync().unwrap();
    fs.storage().devs[1].set_state(DeviceState::Missing);
    let new = Arc::new(MemDevice::new("new1", 64 * MB));
    let stop = Arc::new(AtomicBool::new(true));
    let opts = ReplaceOptions { scrub: ScrubOptions { stop: Some(stop), ..Default::default() }, ..Default::default() };
    let r = fs.replace_device(1, new.clone(), &opts, &|_| {}).unwrap();
    assert!(!r.rebuild.unwrap().complete);
    assert_eq!(fs.resilvering(), vec![1]);
    // Writes go on meanwhile, and reach the new device.
    fs.write_file("/later", &pattern(41, 100_000), Some("replicate(copies=2)[extent@1,extent@2]")).unwrap();
    fs.close().unwrap();
    let devs: Vec<Arc<dyn Device>> = vec![pool.devs[0].clone(), new.clone(), pool.devs[2].clone()];
    let fs = Fs::open(devs.clone(), quiet()).unwrap();
    assert_eq!(fs.resilvering(), vec![1], "a reopened pool keeps the device resilvering");
    assert_eq!(fs.storage().devs[1].state(), DeviceState::Resilvering);
    // fsck reads the resilvering device's superblocks too.
    let rep = hurricane::fsck::check(&fs, false, &mut |_: &str, _: u64, _: u64| {}).unwrap();
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert_eq!(fs.read_file("/m").unwrap(), pattern(40, MB as usize));
    let s = fs.scrub(&repair(), &|_| {}).unwrap();
    assert!(s.complete && s.lost.is_empty(), "{:?}", s.lost);
    assert!(fs.resilvering().is_empty());
    fs.close().unwrap();
    let fs = Fs::open(devs, quiet()).unwrap();
    assert!(fs.resilvering().is_empty());
    assert_eq!(fs.read_file("/later").unwrap(), pattern(41, 100_000));
}

#[test]
fn a_rebuilt_device_holds_a_full_copy() {
    let pool = MemPool::new(3, 64 * MB);
    let fs = pool.open().unwrap();
    let data = pattern(50, 3 * MB as usize + 5);
    fs.write_file("/m", &data, Some("replicate(copies=2)[extent@1,extent@2]")).unwrap();
    fs.sync().unwrap();
    fs.storage().devs[1].set_state(DeviceState::Missing);
    let new = Arc::new(MemDevice::new("new1", 64 * MB));
    let r = fs.replace_device(1, new.clone(), &ReplaceOptions::default(), &|_| {}).unwrap();
    assert!(r.rebuild.unwrap().repaired_blocks >= (data.len() / BS) as u64);
    // The other copy gone: everything reads from the rebuilt one.
    fs.storage().devs[2].set_state(DeviceState::Missing);
    fs.drop_caches();
    assert_eq!(fs.read_file("/m").unwrap(), data);
}

#[test]
fn a_replacement_rebuilds_what_the_device_held_and_reads_no_more() {
    let pool = MemPool::new(4, 64 * MB);
    let fs = pool.open().unwrap();
    let (on, off, par) = (pattern(60, 2 * MB as usize), pattern(61, 2 * MB as usize), pattern(62, 3 * MB as usize));
    fs.write_file("/on1", &on, Some("replicate(copies=2)[extent@1,extent@2]")).unwrap();
    fs.write_file("/off1", &off, Some("replicate(copies=2)[extent@2,extent@3]")).unwrap();
    fs.write_file("/par", &par, Some("parity(data=2,parity=2)[extent@0,extent@1,extent@2,extent@3]")).unwrap();
    fs.sync().unwrap();
    fs.storage().devs[1].set_state(DeviceState::Missing);
    let new = Arc::new(MemDevice::new("new1", 64 * MB));
    let r = fs.replace_device(1, new, &ReplaceOptions::default(), &|_| {}).unwrap().rebuild.unwrap();
    assert!(r.complete && r.lost.is_empty(), "{:?}", r.lost);
    // One copy of /on1, nothing of /off1, two of the four units of each
    // stripe of /par.
    let blocks = |n: usize| (n / BS) as u64;
    assert_eq!(r.checked_blocks, blocks(on.len()) + blocks(par.len()));
    assert_eq!(r.repaired_blocks, blocks(on.len()) + blocks(par.len()) / 2);
    // Nothing was left for a scrub to do.
    let s = fs.scrub(&repair(), &|_| {}).unwrap();
    assert_eq!(s.repaired_blocks, 0);
    assert!(s.checked_blocks > r.checked_blocks);
    // With devices 2 and 3 gone, the rebuilt device and device 0 hold it all.
    fs.storage().devs[2].set_state(DeviceState::Missing);
    fs.storage().devs[3].set_state(DeviceState::Missing);
    fs.drop_caches();
    assert_eq!(fs.read_file("/par").unwrap(), par);
    fs.storage().devs[2].set_state(DeviceState::Online);
    fs.drop_caches();
    assert_eq!(fs.read_file("/on1").unwrap(), on);
}

#[test]
fn offline_replacement_of_a_deleted_image() {
    let dir = tempfile::tempdir().unwrap();
    let pooldir = dir.path().join("pool");
    let paths = Fs::mkfs_dir(&pooldir, 3, 64 * MB, &FormatOptions::default()).unwrap();
    let fs = Fs::open_dir(&pooldir, quiet()).unwrap();
    fs.write_file("/m", &pattern(60, MB as usize), Some("replicate(copies=2)[extent@1,extent@2]")).unwrap();
    fs.write_file("/lost", &pattern(61, 50_000), Some("extent@1")).unwrap();
    fs.close().unwrap();
    drop(fs);
    std::fs::remove_file(&paths[1]).unwrap();
    let new = dir.path().join("new1.img");
    hurricane::device::FileDevice::create(&new, 64 * MB).unwrap();
    hurricane::fs::prepare_offline_replacement(&pooldir, 1, &new).unwrap();
    assert!(std::fs::read_to_string(pooldir.join("pool.conf")).unwrap().contains("new1.img"));
    let fs = Fs::open_dir(&pooldir, quiet()).unwrap();
    assert_eq!(fs.resilvering(), vec![1]);
    assert_eq!(fs.read_file("/m").unwrap(), pattern(60, MB as usize));
    let s = fs.scrub(&repair(), &|_| {}).unwrap();
    assert_eq!(s.lost.iter().map(|f| f.paths.clone()).collect::<Vec<_>>(), vec![vec!["/lost".to_string()]]);
    assert!(fs.resilvering().is_empty());
    fs.close().unwrap();
}
