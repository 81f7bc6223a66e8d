//! Degraded pools: devices missing at open or going away while in use,
//! failing writes, the journal mirror, and injected faults.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use hurricane::blocks::Health;
use hurricane::device::{CrashMode, Device, DeviceState, FaultDevice, FaultPlan, FaultSpec, MemDevice, BLOCK_SIZE};
use hurricane::{FormatOptions, Fs};
use std::sync::Arc;

fn images(p: &MemPool, mode: CrashMode) -> Vec<Vec<u8>> {
    p.devs.iter().map(|d| d.crash_image(mode)).collect()
}

/// Memory devices from images, leaving out the devices in `skip`.
fn devs_without(imgs: &[Vec<u8>], skip: &[usize]) -> Vec<Arc<dyn Device>> {
    imgs.iter()
        .enumerate()
        .filter(|(i, _)| !skip.contains(i))
        .map(|(i, img)| Arc::new(MemDevice::from_image(format!("mem{i}"), img.clone())) as Arc<dyn Device>)
        .collect()
}

/// What each device of an open pool holds now (empty for one not there).
fn live_images(fs: &Fs) -> Vec<Vec<u8>> {
    fs.storage()
        .devs
        .iter()
        .map(|d| {
            let dev = d.dev();
            let mut b = vec![0u8; dev.size() as usize];
            if dev.read_at(&mut b, 0).is_err() {
                b.clear();
            }
            b
        })
        .collect()
}

fn state(fs: &Fs, d: usize) -> DeviceState {
    fs.storage().devs[d].state()
}

#[test]
fn replicated_file_reads_with_a_device_missing() {
    let p = MemPool::new(3, 16 * MB);
    let fs = p.open().unwrap();
    fs.write_file("/r", &pattern(1, 300_000), Some("replicate[extent@1,extent@2]")).unwrap();
    fs.write_file("/on2", &pattern(2, 50_000), Some("extent@2")).unwrap();
    fs.write_file("/on0", &pattern(3, 70_000), Some("extent@0")).unwrap();
    fs.close().unwrap();
    let imgs = images(&p, CrashMode::KeepAll);

    let fs = Fs::open(devs_without(&imgs, &[2]), quiet()).unwrap();
    assert_eq!(fs.report().missing_devices.iter().map(|m| m.0).collect::<Vec<_>>(), vec![2]);
    assert_eq!(state(&fs, 2), DeviceState::Missing);
    // Every byte of the replicated file has a surviving copy.
    for _ in 0..4 {
        assert_eq!(fs.read_file("/r").unwrap(), pattern(1, 300_000));
    }
    assert_eq!(fs.read_file("/on0").unwrap(), pattern(3, 70_000));
    // A file wholly on the missing device: EIO naming the device, never garbage.
    let e = fs.read_file("/on2").unwrap_err();
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert!(e.to_string().contains("device 2") && e.to_string().contains("missing"), "{e}");
    // Nothing is allocated on the missing device.
    let e = fs.write_file("/new2", b"x", Some("extent@2")).unwrap_err();
    assert!(e.to_string().contains("device 2") && e.to_string().contains("missing"), "{e}");
    fs.remove("/new2").unwrap();
    let h = fs.health(10);
    assert_eq!(h.healthy, 1, "{h:?}");
    assert!(h.lost_paths.contains(&"/on2".to_string()), "{h:?}");
    assert!(h.degraded_paths.contains(&"/r".to_string()) || h.lost_paths.contains(&"/r".to_string()), "{h:?}");
    assert_eq!(h.degraded + h.lost, 2, "{h:?}");
    assert_eq!(h.meta, Health::Degraded, "the meta-file has a copy on device 2");
    // The pool goes on: new files, commits, a checkpoint and a clean close.
    fs.write_file("/later", &pattern(4, 20_000), Some("extent@1")).unwrap();
    fs.sync().unwrap();
    fs.checkpoint().unwrap();
    fs.close().unwrap();

    // Device 2 back (as it was when it went away): everything reads, the
    // new file too.
    let mut back = live_images(&fs);
    back[2] = imgs[2].clone();
    drop(fs);
    let fs = Fs::open(devs_without(&back, &[]), quiet()).unwrap();
    assert!(fs.report().missing_devices.is_empty());
    assert_eq!(fs.read_file("/r").unwrap(), pattern(1, 300_000));
    assert_eq!(fs.read_file("/on2").unwrap(), pattern(2, 50_000));
    assert_eq!(fs.read_file("/later").unwrap(), pattern(4, 20_000));
    let h = fs.health(10);
    assert_eq!((h.healthy, h.degraded, h.lost), (4, 0, 0), "{h:?}");
}

#[test]
fn no_device_or_no_journal_copy_is_a_clear_error() {
    // One device: losing it leaves nothing to open.
    let p = MemPool::new(1, 16 * MB);
    p.open().unwrap().close().unwrap();
    let gone: Vec<Arc<dyn Device>> = vec![Arc::new(hurricane::device::MissingDevice::new("/x/dev0.img", 0))];
    let e = Fs::open(gone, quiet()).err().unwrap().to_string();
    assert!(e.contains("/x/dev0.img") && e.contains("missing"), "{e}");
    // Devices 0, 1 and 2 hold the journal's copies: without all three the
    // pool cannot replay, and says which devices it needs.
    let p = MemPool::new(4, 16 * MB);
    p.open().unwrap().close().unwrap();
    let imgs = images(&p, CrashMode::KeepAll);
    let e = Fs::open(devs_without(&imgs, &[0, 1, 2]), quiet()).err().unwrap().to_string();
    assert!(e.contains("journal") && e.contains("device 0") && e.contains("device 2"), "{e}");
    // Any one copy opens it.
    for keep in 0..3 {
        let gone: Vec<usize> = (0..3).filter(|&d| d != keep).collect();
        Fs::open(devs_without(&imgs, &gone), hurricane::Options { read_only: true, ..quiet() }).unwrap();
    }
}

#[test]
fn device0_missing_opens_through_the_journal_mirror() {
    let p = MemPool::new(3, 16 * MB);
    let fs = p.open().unwrap();
    fs.mkdir_path("/d", 0o755).unwrap();
    fs.write_file("/d/a", &pattern(5, 100_000), Some("replicate[extent@1,extent@2]")).unwrap();
    fs.write_file("/d/small", b"inline data", Some("inline")).unwrap();
    fs.sync().unwrap();
    fs.write_file("/d/b", &pattern(6, 40_000), Some("extent@2")).unwrap();
    fs.sync().unwrap();
    // Committed to the journal only (no checkpoint since): device 0 goes.
    let imgs = images(&p, CrashMode::DropAll);
    drop(fs);
    let fs = Fs::open(devs_without(&imgs, &[0]), quiet()).unwrap();
    let r = fs.report();
    assert_eq!(r.journal_unreadable, [0]);
    assert!(r.replayed_records >= 2, "{r:?}");
    assert_eq!(fs.read_file("/d/a").unwrap(), pattern(5, 100_000));
    assert_eq!(fs.read_file("/d/small").unwrap(), b"inline data");
    assert_eq!(fs.read_file("/d/b").unwrap(), pattern(6, 40_000));
    // It keeps committing to the mirror alone, and that survives a crash.
    fs.write_file("/d/c", b"after", Some("extent@1")).unwrap();
    fs.sync().unwrap();
    let now = live_images(&fs);
    drop(fs);
    let fs = Fs::open(devs_without(&now, &[0]), quiet()).unwrap();
    assert_eq!(fs.read_file("/d/c").unwrap(), b"after");
    assert_eq!(fs.read_file("/d/b").unwrap(), pattern(6, 40_000));
}

use common::journal_records as records;

#[test]
fn a_torn_record_in_one_journal_copy_is_read_from_the_other() {
    let p = MemPool::with(2, 16 * MB, &FormatOptions { journal_size: Some(1 << 20), ..Default::default() });
    let fs = p.open().unwrap();
    fs.write_file("/one", b"1", Some("inline")).unwrap();
    fs.sync().unwrap();
    fs.write_file("/two", b"2", Some("inline")).unwrap();
    fs.sync().unwrap();
    let imgs = images(&p, CrashMode::DropAll);
    drop(fs);
    let last = |img: &[u8]| records(img).into_iter().max_by_key(|r| r.1).unwrap().0;
    let tear = |img: &mut Vec<u8>| {
        let b = last(img);
        img[b * BLOCK_SIZE + 60] ^= 0x40; // in the payload: its checksum fails
    };
    assert_eq!(last(&imgs[0]), last(&imgs[1]), "the copies lie at the same offsets");

    // The primary copy torn: the mirror reaches further and is replayed.
    let mut t = imgs.clone();
    tear(&mut t[0]);
    let fs = Fs::open(devs_without(&t, &[]), quiet()).unwrap();
    assert_eq!(fs.report().journal_repaired, [0]);
    assert_eq!(fs.read_file("/two").unwrap(), b"2");
    // The open brought the torn copy up to date: alone it replays both.
    let healed = live_images(&fs);
    drop(fs);
    let fs = Fs::open(devs_without(&healed, &[1]), quiet()).unwrap();
    assert!(fs.report().journal_repaired.is_empty());
    assert_eq!(fs.read_file("/two").unwrap(), b"2");
    drop(fs);

    // The mirror torn: the primary is replayed.
    let mut t = imgs.clone();
    tear(&mut t[1]);
    let fs = Fs::open(devs_without(&t, &[]), quiet()).unwrap();
    assert_eq!(fs.report().journal_repaired, [1]);
    assert_eq!(fs.read_file("/two").unwrap(), b"2");
    drop(fs);

    // Both torn at the same record: the commit before it is what survives.
    let mut t = imgs.clone();
    tear(&mut t[0]);
    tear(&mut t[1]);
    let fs = Fs::open(devs_without(&t, &[]), quiet()).unwrap();
    assert_eq!(fs.read_file("/one").unwrap(), b"1");
    assert_eq!(fs.read_file("/two").unwrap_err().errno(), libc::ENOENT);
}

#[test]
fn failing_writes_fault_the_device_and_commits_go_on() {
    let p = MemPool::new(3, 16 * MB);
    let fs = p.open().unwrap();
    fs.write_file("/keep", &pattern(7, 30_000), Some("replicate[extent@0,extent@1]")).unwrap();
    fs.sync().unwrap();
    // Device 2 fails its writes: a write there faults it.
    p.devs[2].fail_after_writes(0);
    let e = fs.write_file("/x", &pattern(8, 8192), Some("extent@2")).unwrap_err();
    assert_eq!(e.errno(), libc::EIO);
    assert_eq!(state(&fs, 2), DeviceState::Faulted);
    assert_eq!(fs.storage().devs[2].errors().write, 1);
    // Superblocks skip it: a checkpoint commits.
    fs.checkpoint().unwrap();
    // Device 0 (the journal) fails too: the mirror on device 1 takes the commit.
    p.devs[0].fail_after_writes(0);
    fs.write_file("/after", b"committed to the mirror", Some("inline")).unwrap();
    fs.sync().unwrap();
    assert_eq!(state(&fs, 0), DeviceState::Faulted);
    assert_eq!(fs.storage().degraded_devices().len(), 2);
    // After a crash, the mirror's record is replayed.
    let c = p.crash(CrashMode::DropAll);
    drop(fs);
    let fs = c.open().unwrap();
    assert_eq!(fs.read_file("/after").unwrap(), b"committed to the mirror");
    assert_eq!(fs.read_file("/keep").unwrap(), pattern(7, 30_000));
    // With every journal copy failing, the commit fails.
    c.devs[0].fail_after_writes(0);
    c.devs[1].fail_after_writes(0);
    c.devs[2].fail_after_writes(0);
    fs.write_file("/lost", b"x", Some("inline")).unwrap();
    let e = fs.sync().unwrap_err().to_string();
    assert!(e.contains("journal"), "{e}");
}

/// A pool on fault-injecting memory devices, with the plans.
fn fault_pool(n: usize) -> (Vec<Arc<MemDevice>>, Vec<Arc<FaultPlan>>, Fs) {
    let mems: Vec<Arc<MemDevice>> = (0..n).map(|i| Arc::new(MemDevice::new(format!("mem{i}"), 16 * MB))).collect();
    let plans: Vec<Arc<FaultPlan>> = (0..n).map(|_| Arc::new(FaultPlan::default())).collect();
    let devs = || -> Vec<Arc<dyn Device>> {
        mems.iter()
            .zip(&plans)
            .map(|(m, p)| Arc::new(FaultDevice::new(m.clone(), p.clone())) as Arc<dyn Device>)
            .collect()
    };
    Fs::format(devs(), &FormatOptions::default()).unwrap();
    let fs = Fs::open(devs(), quiet()).unwrap();
    (mems, plans, fs)
}

#[test]
fn a_device_going_missing_in_use_is_noticed() {
    let (_mems, plans, fs) = fault_pool(3);
    fs.write_file("/r", &pattern(9, 200_000), Some("replicate(read=primary)[extent@2,extent@1]")).unwrap();
    fs.write_file("/s", &pattern(10, 9000), Some("extent@2")).unwrap();
    fs.sync().unwrap();
    fs.drop_caches();
    plans[2].go_missing();
    // The primary copy is on device 2: the read falls back to device 1.
    assert_eq!(fs.read_file("/r").unwrap(), pattern(9, 200_000));
    assert_eq!(state(&fs, 2), DeviceState::Missing);
    let e = fs.read_file("/s").unwrap_err();
    assert!(e.to_string().contains("device 2") && e.to_string().contains("missing"), "{e}");
    let h = fs.health(10);
    assert!(h.lost_paths.contains(&"/s".to_string()), "{h:?}");
    assert_eq!((h.healthy, h.degraded + h.lost), (0, 2), "{h:?}");
    fs.sync().unwrap();
    fs.close().unwrap();
}

/// Small files' writes `colocate` holds for the next commit, on a device
/// that goes away before it: the commit goes on without them, only their
/// files fail (their fsync once, their reads), and the pool reopened
/// without the device has every other change and no space leaked or
/// claimed twice.
#[test]
fn a_device_going_missing_while_holding_small_file_writes_fails_only_its_files() {
    use hurricane::xattr::DIR_LAYOUT;
    let (mems, plans, fs) = fault_pool(3);
    for (d, layout) in [("/small", "colocate@2"), ("/big", "extent@0")] {
        let ino = fs.mkdir_all(d, 0o777).unwrap();
        fs.setxattr(&hurricane::Creds::root(), ino, DIR_LAYOUT.as_bytes(), layout.as_bytes(), 0).unwrap();
    }
    fs.write_file("/small/kept", &pattern(1, 4096), None).unwrap();
    fs.sync().unwrap();
    for i in 0..8 {
        fs.write_file(&format!("/small/f{i}"), &pattern(20 + i, 5000), None).unwrap();
    }
    fs.write_file("/big/x", &pattern(3, 100_000), None).unwrap();
    assert_eq!(fs.group_stats().dirty_blocks, 16, "two blocks a file, held");
    let f0 = fs.open_file("/small/f0").unwrap().ino();
    plans[2].go_missing();
    let e = fs.sync().expect_err("the pool's sync reports the loss once");
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert_eq!(state(&fs, 2), DeviceState::Missing);
    assert_eq!(fs.group_stats().blocks_lost, 16);
    fs.sync().unwrap();
    let e = fs.fsync(f0).expect_err("f0's fsync reports its lost writes");
    assert_eq!(e.errno(), libc::EIO, "{e}");
    fs.fsync(f0).unwrap();
    for i in 0..8 {
        let e = fs.read_file(&format!("/small/f{i}")).unwrap_err();
        assert_eq!(e.errno(), libc::EIO, "f{i}: {e}");
        assert!(e.to_string().contains("missing"), "f{i}: {e}");
    }
    assert_eq!(fs.read_file("/big/x").unwrap(), pattern(3, 100_000));
    // The pool goes on and closes.
    fs.write_file("/big/y", &pattern(4, 9000), None).unwrap();
    fs.close().unwrap();
    let mut now = live_images(&fs);
    drop(fs);
    let fs = Fs::open(devs_without(&now, &[2]), quiet()).unwrap();
    assert_eq!(fs.read_file("/big/x").unwrap(), pattern(3, 100_000));
    assert_eq!(fs.read_file("/big/y").unwrap(), pattern(4, 9000));
    assert_eq!(fs.read_file("/small/f3").unwrap_err().errno(), libc::EIO);
    check_clean(&fs, "reopened without device 2");
    drop(fs);
    // Device 2 back as it was before it went: the files whose writes it
    // never got fail their checksums; the one synced before is whole.
    now[2] = mems[2].crash_image(CrashMode::KeepAll);
    let fs = Fs::open(devs_without(&now, &[]), quiet()).unwrap();
    assert_eq!(fs.read_file("/small/kept").unwrap(), pattern(1, 4096));
    for i in 0..8 {
        let e = fs.read_file(&format!("/small/f{i}")).unwrap_err();
        assert!(matches!(e, hurricane::Error::Checksum(_)), "f{i}: {e}");
    }
    check_clean(&fs, "reopened with device 2 back");
}

#[test]
fn probe_notices_a_device_no_request_touched() {
    let (_mems, plans, fs) = fault_pool(3);
    fs.write_file("/a", b"x", Some("inline")).unwrap();
    plans[2].update(|s| s.missing_after = Some(0));
    assert_eq!(state(&fs, 2), DeviceState::Online);
    fs.sync().unwrap();
    assert_eq!(state(&fs, 2), DeviceState::Missing, "the commit probes every device");
}

#[test]
fn injected_read_errors_and_flips_through_the_engine() {
    let (mems, plans, fs) = fault_pool(2);
    fs.write_file("/f", &pattern(11, 64 * 1024), Some("extent@1")).unwrap();
    fs.sync().unwrap();
    fs.drop_caches();
    // Find the file's blocks: a read error on all of device 1 fails the read.
    plans[1].set(FaultSpec { read_error_rate: 1.0, ..Default::default() });
    let e = fs.read_file("/f").unwrap_err();
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert!(e.to_string().contains("mem1"), "{e}");
    // Read errors are counted, they do not fault the device.
    assert!(fs.storage().devs[1].errors().read >= 1);
    assert_eq!(state(&fs, 1), DeviceState::Online);
    plans[1].restore();
    assert_eq!(fs.read_file("/f").unwrap(), pattern(11, 64 * 1024));
    // A flipped bit never reaches the caller: the pool's checksum block
    // (on by default) turns it into an I/O error naming the device, and
    // the stored data stays intact.
    fs.drop_caches();
    plans[1].set(FaultSpec { flip_rate: 1.0, seed: 5, ..Default::default() });
    let e = fs.read_file("/f").unwrap_err();
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert!(e.to_string().contains("checksum") && e.to_string().contains("mem1"), "{e}");
    assert!(fs.storage().devs[1].errors().checksum >= 1);
    assert!(plans[1].injected().2 >= 1);
    plans[1].restore();
    fs.drop_caches();
    assert_eq!(fs.read_file("/f").unwrap(), pattern(11, 64 * 1024));
    drop(mems);
}

#[test]
fn device1_missing_checkpoints_and_closes() {
    // Device 1 holds the journal mirror and a meta-file copy.
    let p = MemPool::with(3, 16 * MB, &FormatOptions { journal_size: Some(256 << 10), ..Default::default() });
    let fs = p.open().unwrap();
    fs.write_file("/a", &pattern(12, 50_000), Some("replicate[extent@0,extent@2]")).unwrap();
    fs.close().unwrap();
    let imgs = images(&p, CrashMode::KeepAll);
    let fs = Fs::open(devs_without(&imgs, &[1]), quiet()).unwrap();
    // Enough changes to need checkpoints (the journal is small).
    for i in 0..200 {
        fs.write_file(&format!("/f{i}"), &pattern(i, 3000), Some("extent@0")).unwrap();
        if i % 20 == 0 {
            fs.sync().unwrap();
        }
    }
    fs.checkpoint().unwrap();
    assert!(fs.commit_counts().1 >= 1);
    fs.close().unwrap();
    let mut now = live_images(&fs);
    drop(fs);
    // Still without device 1, then with it back as it was.
    let fs = Fs::open(devs_without(&now, &[1]), quiet()).unwrap();
    assert_eq!(fs.read_file("/f199").unwrap(), pattern(199, 3000));
    drop(fs);
    now[1] = imgs[1].clone();
    let fs = Fs::open(devs_without(&now, &[]), quiet()).unwrap();
    assert!(fs.report().missing_devices.is_empty());
    assert_eq!(fs.read_file("/a").unwrap(), pattern(12, 50_000));
    assert_eq!(fs.read_file("/f150").unwrap(), pattern(150, 3000));
    // A checkpoint with every device back writes both copies again.
    fs.checkpoint().unwrap();
    fs.close().unwrap();
    let now = live_images(&fs);
    drop(fs);
    let fs = Fs::open(devs_without(&now, &[0]), quiet()).unwrap();
    assert_eq!(fs.read_file("/f7").unwrap_err().errno(), libc::EIO, "its only copy is on device 0");
    assert_eq!(fs.read_file("/a").unwrap(), pattern(12, 50_000));
}

/// Writes to a replicated file while one copy's device is missing go on,
/// and the copy catches up when the device is back.
#[test]
fn writes_with_a_copy_missing() {
    let p = MemPool::new(3, 16 * MB);
    let fs = p.open().unwrap();
    fs.write_file("/r", &pattern(20, 100_000), Some("replicate[extent@1,extent@2]")).unwrap();
    fs.close().unwrap();
    let imgs = images(&p, CrashMode::KeepAll);
    let fs = Fs::open(devs_without(&imgs, &[2]), quiet()).unwrap();
    fs.write_file("/r", &pattern(21, 120_000), None).unwrap();
    fs.write_file("/new", &pattern(22, 60_000), Some("replicate[extent@1,extent@2]")).unwrap();
    fs.close().unwrap();
    let mut now = live_images(&fs);
    drop(fs);
    now[2] = imgs[2].clone();
    let fs = Fs::open(devs_without(&now, &[]), quiet()).unwrap();
    for _ in 0..4 {
        assert_eq!(fs.read_file("/r").unwrap(), pattern(21, 120_000));
        assert_eq!(fs.read_file("/new").unwrap(), pattern(22, 60_000));
    }
    fs.close().unwrap();
    // Device 1 gone now: device 2's copy must hold the new data.
    let now = live_images(&fs);
    drop(fs);
    let fs = Fs::open(devs_without(&now, &[1]), quiet()).unwrap();
    assert_eq!(fs.read_file("/r").unwrap(), pattern(21, 120_000));
    assert_eq!(fs.read_file("/new").unwrap(), pattern(22, 60_000));
}

/// A replicated file with one copy on a missing device is degraded, not
/// lost: it reads in full.
#[test]
fn a_replicated_file_with_a_copy_missing_is_degraded() {
    let p = MemPool::new(3, 16 * MB);
    let fs = p.open().unwrap();
    fs.write_file("/r", &pattern(1, 30_000), Some("replicate[extent@1,extent@2]")).unwrap();
    fs.write_file("/on2", &pattern(2, 30_000), Some("extent@2")).unwrap();
    fs.close().unwrap();
    let fs = Fs::open(devs_without(&images(&p, CrashMode::KeepAll), &[2]), quiet()).unwrap();
    let h = fs.health(10);
    assert_eq!((h.healthy, h.degraded, h.lost), (0, 1, 1), "{h:?}");
    assert_eq!(h.degraded_paths, vec!["/r".to_string()]);
    assert_eq!(h.lost_paths, vec!["/on2".to_string()]);
}

#[test]
fn free_space_counts_only_devices_that_take_writes() {
    let pool = MemPool::new(3, 64 * MB);
    let fs = pool.open().unwrap();
    fs.write_file("/on1", &pattern(70, 3 * MB as usize), Some("extent@1")).unwrap();
    let free = |i: usize| fs.storage().allocs[i].free_blocks();
    let all = fs.statfs();
    assert_eq!(all.bfree, free(0) + free(1) + free(2));
    for state in [DeviceState::Missing, DeviceState::Faulted, DeviceState::Removed, DeviceState::Evacuating] {
        fs.storage().devs[1].set_state(state);
        let s = fs.statfs();
        assert_eq!(s.bfree, free(0) + free(2), "{state}");
        if state == DeviceState::Removed {
            let gone = fs.storage().allocs[1].total_blocks();
            assert_eq!(s.blocks, all.blocks - gone, "a removed device leaves the pool's size");
        } else {
            assert_eq!(s.blocks, all.blocks, "{state}: the pool's size stays");
        }
    }
    // A resilvering device takes new data: its space counts.
    fs.storage().devs[1].set_state(DeviceState::Resilvering);
    assert_eq!(fs.statfs().bfree, all.bfree);
    fs.storage().devs[1].set_state(DeviceState::Online);
    assert_eq!(fs.statfs().bfree, all.bfree);
}
