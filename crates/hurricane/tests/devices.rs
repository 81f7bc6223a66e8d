//! Growing and shrinking a pool through the engine API: `Fs::add_device`
//! and `Fs::remove_device` (evacuation), with the pool in use, with a
//! device missing, stopped and resumed, and across reopening.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use hurricane::device::{CrashMode, Device, DeviceState, MemDevice, MissingDevice};
use hurricane::fs::{AddOptions, RemoveOptions};
use hurricane::Fs;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn mem(name: &str, size: u64) -> Arc<MemDevice> {
    Arc::new(MemDevice::new(name, size))
}

fn all(devs: &[Arc<MemDevice>]) -> Vec<Arc<dyn Device>> {
    devs.iter().map(|d| d.clone() as Arc<dyn Device>).collect()
}

/// The devices a file's layout names.
fn devices_of(fs: &Fs, path: &str) -> Vec<u32> {
    let ino = fs.resolve(path).unwrap();
    let text = fs.layout_get(ino).unwrap();
    let mut out: Vec<u32> = text
        .split('@')
        .skip(1)
        .map(|t| t.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap())
        .collect();
    out.sort_unstable();
    out
}

const LAYOUTS: [(&str, Option<&str>, usize); 6] = [
    ("/mirror", Some("replicate(copies=2)[extent@1,extent@2]"), 700_000),
    ("/mirror3", Some("replicate(copies=3)[extent@0,extent@2,extent@3]"), 300_000),
    ("/parity", Some("parity(data=2,parity=1)[extent@2,extent@0,extent@1]"), 1_500_000),
    ("/striped", Some("stripe(unit=64K)[extent@0,extent@2,extent@1]"), 900_000),
    ("/plain", Some("extent@2"), 123_457),
    ("/d/default", None, 2_000_000),
];

fn fill(fs: &Fs) -> BTreeMap<&'static str, Vec<u8>> {
    fs.mkdir_all("/d", 0o755).unwrap();
    let mut model = BTreeMap::new();
    for (i, (p, l, n)) in LAYOUTS.iter().enumerate() {
        let data = pattern(i as u64 + 1, *n);
        fs.write_file(p, &data, *l).unwrap();
        model.insert(*p, data);
    }
    model
}

fn check(fs: &Fs, model: &BTreeMap<&'static str, Vec<u8>>) {
    for (p, want) in model {
        assert!(fs.read_file(p).unwrap() == *want, "{p} differs");
    }
}

#[test]
fn an_added_device_takes_new_data_and_stays_after_reopening() {
    let pool = MemPool::new(2, 64 * MB);
    let fs = pool.open().unwrap();
    fs.write_file("/before", &pattern(1, 500_000), None).unwrap();
    let d2 = mem("mem2", 64 * MB);
    assert_eq!(fs.add_device(d2.clone(), &AddOptions::default()).unwrap(), 2);
    assert_eq!(fs.storage().device_count(), 3);
    // The emptiest device is picked first: new data reaches the new one.
    fs.write_file("/after", &pattern(2, 3 * MB as usize), Some("stripe(unit=1M,width=2)")).unwrap();
    assert!(devices_of(&fs, "/after").contains(&2), "{:?}", devices_of(&fs, "/after"));
    fs.write_file("/on2", &pattern(3, 10_000), Some("extent@2")).unwrap();
    // Adding it twice is refused, naming it.
    let e = fs.add_device(d2.clone(), &AddOptions::default()).unwrap_err().to_string();
    assert!(e.contains("already device 2"), "{e}");
    // Too small is refused.
    assert!(fs
        .add_device(mem("tiny", 50 * 4096), &AddOptions::default())
        .unwrap_err()
        .to_string()
        .contains("too small"));
    fs.close().unwrap();

    let mut devs = pool.devs.clone();
    devs.push(d2.clone());
    let fs = Fs::open(all(&devs), quiet()).unwrap();
    assert_eq!(fs.storage().device_count(), 3);
    assert_eq!(fs.read_file("/before").unwrap(), pattern(1, 500_000));
    assert_eq!(fs.read_file("/after").unwrap(), pattern(2, 3 * MB as usize));
    assert_eq!(fs.read_file("/on2").unwrap(), pattern(3, 10_000));
    assert!(fs.report().double_claims.is_empty());
    fs.close().unwrap();
    // Opened without the new device, the pool knows it is missing.
    let fs = Fs::open(all(&pool.devs), quiet()).unwrap();
    assert_eq!(fs.storage().devs[2].state(), DeviceState::Missing);
    assert_eq!(fs.read_file("/before").unwrap(), pattern(1, 500_000));
    assert!(fs.read_file("/on2").is_err());
}

#[test]
fn an_add_cut_short_by_a_crash_opens_either_way() {
    // The new device's superblock is the commit point: a crash right after
    // it leaves the old devices one generation behind with the old count.
    let pool = MemPool::new(2, 32 * MB);
    let fs = pool.open().unwrap();
    fs.write_file("/f", &pattern(7, 200_000), None).unwrap();
    fs.sync().unwrap();
    let d2 = mem("mem2", 32 * MB);
    // The old devices' state as of before the add.
    let before = pool.crash(CrashMode::DropAll);
    let again = before.crash(CrashMode::DropAll);
    fs.add_device(d2.clone(), &AddOptions::default()).unwrap();
    drop(fs);
    let mut devs = before.devs.clone();
    devs.push(Arc::new(MemDevice::from_image("mem2", d2.crash_image(CrashMode::DropAll))));
    let fs = Fs::open(all(&devs), quiet()).unwrap();
    assert_eq!(fs.storage().device_count(), 3);
    assert_eq!(fs.read_file("/f").unwrap(), pattern(7, 200_000));
    fs.write_file("/g", &pattern(8, 10_000), Some("extent@2")).unwrap();
    fs.close().unwrap();
    // Without the new device's superblock the pool is as it was.
    let orphan = MemDevice::from_image("mem2", d2.crash_image(CrashMode::DropAll));
    let fs = Fs::open(all(&again.devs), quiet()).unwrap();
    assert_eq!(fs.storage().device_count(), 2);
    assert_eq!(fs.read_file("/f").unwrap(), pattern(7, 200_000));
    fs.close().unwrap();
    // The pool went on without it: listed again, it is refused by name
    // (it claims a slot the pool does not have).
    let mut devs = all(&again.devs);
    devs.push(Arc::new(orphan));
    let e = Fs::open(devs, quiet()).err().unwrap().to_string();
    assert!(e.contains("mem2") && e.contains("device 2, but the pool has 2 devices"), "{e}");
    assert!(Fs::open(all(&again.devs), quiet()).is_ok());
}

#[test]
fn removing_a_device_moves_every_file_and_keeps_its_data() {
    let pool = MemPool::new(5, 64 * MB);
    let fs = pool.open().unwrap();
    let model = fill(&fs);
    fs.sync().unwrap();
    let seen = std::sync::Mutex::new(Vec::new());
    let r = fs
        .remove_device(2, &RemoveOptions::default(), &|p| seen.lock().unwrap().push((p.done_bytes, p.total_bytes)))
        .unwrap();
    assert!(r.complete && !r.resumed);
    // Every file with a piece on device 2 moved (the default stripe may or
    // may not have used it).
    assert!(r.files_moved >= 5, "{r:?}");
    let seen = seen.into_inner().unwrap();
    assert!(!seen.is_empty() && seen.iter().all(|(d, t)| d <= t), "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0), "{seen:?}");
    assert_eq!(fs.storage().devs[2].state(), DeviceState::Removed);
    // It no longer counts in the pool's size nor its free space.
    let st = fs.statfs();
    let others: Vec<usize> = vec![0, 1, 3, 4];
    assert_eq!(st.blocks, others.iter().map(|&i| fs.storage().allocs[i].total_blocks()).sum::<u64>());
    assert_eq!(st.bfree, others.iter().map(|&i| fs.storage().allocs[i].free_blocks()).sum::<u64>());
    for (p, _, _) in LAYOUTS {
        let devs = devices_of(&fs, p);
        assert!(!devs.contains(&2), "{p}: {devs:?}");
    }
    // Redundancy groups kept their pieces on distinct devices.
    for p in ["/mirror", "/mirror3", "/parity"] {
        let d = devices_of(&fs, p);
        let mut u = d.clone();
        u.dedup();
        assert_eq!(u, d, "{p}");
    }
    check(&fs, &model);
    // Nothing is placed on it any more, and naming it is refused.
    let e = fs.write_file("/new", b"x", Some("extent@2")).unwrap_err().to_string();
    assert!(e.contains("device 2 is removed"), "{e}");
    fs.write_file("/new", &pattern(9, 2 * MB as usize), Some("stripe(unit=64K,width=4)")).unwrap();
    assert!(!devices_of(&fs, "/new").contains(&2));
    let e = fs.remove_device(2, &RemoveOptions::default(), &|_| {}).unwrap_err().to_string();
    assert!(e.contains("already removed"), "{e}");
    fs.close().unwrap();

    // Its space is not claimed by anything, and the pool opens without it.
    let mut devs = all(&pool.devs);
    devs[2] = Arc::new(MissingDevice::new("mem2", 0));
    let fs = Fs::open(devs, quiet()).unwrap();
    assert_eq!(fs.storage().devs[2].state(), DeviceState::Removed);
    assert!(fs.report().double_claims.is_empty());
    check(&fs, &model);
    let h = fs.health(10);
    assert_eq!((h.degraded, h.lost), (0, 0), "{h:?}");
    let r = fs.scrub(&hurricane::fs::ScrubOptions { repair: true, ..Default::default() }, &|_| {}).unwrap();
    assert!(r.lost.is_empty() && r.repaired_blocks == 0, "{r:?}");
}

#[test]
fn a_missing_device_is_removed_by_rebuilding_from_redundancy() {
    let pool = MemPool::new(5, 64 * MB);
    let fs = pool.open().unwrap();
    let mut model = fill(&fs);
    fs.close().unwrap();
    let mut devs = all(&pool.devs);
    devs[2] = Arc::new(MissingDevice::new("mem2", 0));
    let fs = Fs::open(devs, quiet()).unwrap();
    // Files whose data was only there cannot move: nothing starts.
    let e = fs.remove_device(2, &RemoveOptions::default(), &|_| {}).unwrap_err().to_string();
    assert!(e.contains("/plain") && e.contains("missing"), "{e}");
    assert_eq!(fs.storage().devs[2].state(), DeviceState::Missing);
    fs.remove("/plain").unwrap();
    fs.remove("/striped").unwrap();
    model.remove("/plain");
    model.remove("/striped");
    // Unplaced default stripes may have a piece there too.
    if devices_of(&fs, "/d/default").contains(&2) {
        fs.remove("/d/default").unwrap();
        model.remove("/d/default");
    }
    let r = fs.remove_device(2, &RemoveOptions::default(), &|_| {}).unwrap();
    assert!(r.complete);
    check(&fs, &model);
    let h = fs.health(10);
    assert_eq!((h.degraded, h.lost), (0, 0), "{h:?}");
    fs.close().unwrap();
}

#[test]
fn a_stopped_removal_keeps_the_device_evacuating_and_resumes() {
    let pool = MemPool::new(5, 64 * MB);
    let fs = pool.open().unwrap();
    let model = fill(&fs);
    let stop = Arc::new(AtomicBool::new(false));
    let opts = RemoveOptions { stop: Some(stop.clone()) };
    let r = fs
        .remove_device(3, &opts, &|p| {
            if p.files_done >= 1 {
                stop.store(true, Ordering::Relaxed);
            }
        })
        .unwrap();
    assert!(!r.complete);
    assert_eq!(fs.storage().devs[3].state(), DeviceState::Evacuating);
    // Evacuating: still read, never picked for new data.
    check(&fs, &model);
    for i in 0..8 {
        let p = format!("/n{i}");
        fs.write_file(&p, &pattern(50 + i, 100_000), Some("stripe(unit=4K,width=4)")).unwrap();
        assert!(!devices_of(&fs, &p).contains(&3), "{p}");
    }
    fs.close().unwrap();

    let fs = pool.open().unwrap();
    assert_eq!(fs.storage().devs[3].state(), DeviceState::Evacuating);
    let r = fs.remove_device(3, &RemoveOptions::default(), &|_| {}).unwrap();
    assert!(r.complete && r.resumed);
    assert_eq!(fs.storage().devs[3].state(), DeviceState::Removed);
    check(&fs, &model);
    fs.close().unwrap();
}

#[test]
fn writers_and_readers_go_on_while_a_device_is_removed() {
    let pool = MemPool::new(4, 128 * MB);
    let fs = pool.open().unwrap();
    let n = 6;
    for i in 0..n {
        fs.write_file(&format!("/f{i}"), &pattern(i, 2 * MB as usize), Some("replicate(copies=2)[extent@2,extent@3]"))
            .unwrap();
    }
    let done = AtomicBool::new(false);
    let finals: Vec<Vec<u8>> = std::thread::scope(|s| {
        let writers: Vec<_> = (0..n)
            .map(|i| {
                let (fs, done) = (&fs, &done);
                s.spawn(move || {
                    let mut cur = pattern(i, 2 * MB as usize);
                    let mut k = 0u64;
                    while !done.load(Ordering::Relaxed) || k < 3 {
                        let off = ((k * 7919 + i * 131) % 500) as usize * 4096 + (k as usize % 7);
                        let chunk = pattern(1000 + k + i * 100, 5000);
                        let ino = fs.resolve(&format!("/f{i}")).unwrap();
                        fs.write(ino, off as u64, &chunk).unwrap();
                        cur[off..off + chunk.len()].copy_from_slice(&chunk);
                        let mut back = vec![0u8; 5000];
                        fs.read(ino, off as u64, &mut back).unwrap();
                        assert!(back == chunk, "f{i} read back at {off}");
                        k += 1;
                    }
                    cur
                })
            })
            .collect();
        let r = fs.remove_device(2, &RemoveOptions::default(), &|_| {}).unwrap();
        assert!(r.complete && r.files_moved == n);
        done.store(true, Ordering::Relaxed);
        writers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, want) in finals.iter().enumerate() {
        assert!(fs.read_file(&format!("/f{i}")).unwrap() == *want, "f{i}");
        assert!(!devices_of(&fs, &format!("/f{i}")).contains(&2));
    }
    fs.close().unwrap();
    let fs = pool.open().unwrap();
    for (i, want) in finals.iter().enumerate() {
        assert!(fs.read_file(&format!("/f{i}")).unwrap() == *want, "f{i} after reopening");
    }
}

#[test]
fn the_journal_and_meta_data_devices_can_be_removed_too() {
    let pool = MemPool::new(4, 64 * MB);
    let fs = pool.open().unwrap();
    let model = fill_small(&fs);
    // Device 0 holds the journal and a meta-file copy, device 1 the
    // journal's mirror and the other copy.
    for dev in [1, 0] {
        let r = fs.remove_device(dev, &RemoveOptions::default(), &|_| {}).unwrap();
        assert!(r.complete);
        assert_eq!(fs.storage().devs[dev as usize].state(), DeviceState::Removed);
        check(&fs, &model);
        fs.write_file(&format!("/after{dev}"), &pattern(40 + dev as u64, 300_000), None).unwrap();
        fs.sync().unwrap();
    }
    fs.close().unwrap();
    // Both images gone: the pool opens from devices 2 and 3 alone, with its
    // journal, mirror and meta-data there, and nothing is missing.
    let mut devs = all(&pool.devs);
    devs[0] = Arc::new(MissingDevice::new("mem0", 0));
    devs[1] = Arc::new(MissingDevice::new("mem1", 0));
    let fs = Fs::open(devs, quiet()).unwrap();
    check(&fs, &model);
    assert_eq!(fs.read_file("/after0").unwrap(), pattern(40, 300_000));
    assert_eq!(fs.read_file("/after1").unwrap(), pattern(41, 300_000));
    let h = fs.health(10);
    assert_eq!((h.degraded, h.lost, h.meta), (0, 0, hurricane::blocks::Health::Ok), "{h:?}");
    assert!(fs.report().double_claims.is_empty());
    // Work goes on and survives another reopening (journal replay included).
    fs.write_file("/later", &pattern(50, 100_000), None).unwrap();
    fs.sync().unwrap();
    drop(fs);
    let mut devs = all(&pool.devs);
    devs[0] = Arc::new(MissingDevice::new("mem0", 0));
    devs[1] = Arc::new(MissingDevice::new("mem1", 0));
    let fs = Fs::open(devs, quiet()).unwrap();
    assert!(fs.report().replayed_ops > 0);
    assert_eq!(fs.read_file("/later").unwrap(), pattern(50, 100_000));
    // With two devices left, neither journal copy has anywhere to go.
    let e = fs.remove_device(2, &RemoveOptions::default(), &|_| {}).unwrap_err().to_string();
    assert!(e.contains("journal") || e.contains("meta-data"), "{e}");
}

fn fill_small(fs: &Fs) -> BTreeMap<&'static str, Vec<u8>> {
    let mut model = BTreeMap::new();
    for (p, l, n) in [
        ("/m01", "replicate(copies=2)[extent@0,extent@1]", 400_000),
        ("/m23", "replicate(copies=2)[extent@2,extent@3]", 300_000),
        ("/s", "stripe(unit=64K,width=2)", 700_000),
    ] {
        let d = pattern(n as u64, n);
        fs.write_file(p, &d, Some(l)).unwrap();
        model.insert(p, d);
    }
    model
}

#[test]
fn devices_with_nowhere_to_go_or_no_room_left_are_refused() {
    let pool = MemPool::new(2, 32 * MB);
    let fs = pool.open().unwrap();
    for d in [0, 1] {
        let e = fs.remove_device(d, &RemoveOptions::default(), &|_| {}).unwrap_err().to_string();
        assert!(e.contains("journal") || e.contains("meta-data"), "{e}");
    }
    let pool = MemPool::new(3, 32 * MB);
    let fs = pool.open().unwrap();
    let e = fs.remove_device(7, &RemoveOptions::default(), &|_| {}).unwrap_err().to_string();
    assert!(e.contains("has 3 devices"), "{e}");
    // A group as wide as the pool has nowhere to go: refused before
    // anything changes, naming the file.
    fs.write_file("/wide", &pattern(1, 100_000), Some("parity(data=2,parity=1)[extent@0,extent@1,extent@2]")).unwrap();
    let e = fs.remove_device(2, &RemoveOptions::default(), &|_| {}).unwrap_err().to_string();
    assert!(e.contains("cannot be emptied: /wide") && e.contains("no device to move"), "{e}");
    assert_eq!(fs.storage().devs[2].state(), DeviceState::Online);
    assert_eq!(fs.read_file("/wide").unwrap(), pattern(1, 100_000));
    // More data than the others can take is refused before anything moves.
    let pool = MemPool::new(3, 48 * MB);
    let fs = pool.open().unwrap();
    fs.write_file("/big", &pattern(2, 30 * MB as usize), Some("extent@2")).unwrap();
    fs.write_file("/fill0", &pattern(3, 30 * MB as usize), Some("extent@0")).unwrap();
    fs.write_file("/fill1", &pattern(4, 30 * MB as usize), Some("extent@1")).unwrap();
    let e = fs.remove_device(2, &RemoveOptions::default(), &|_| {}).unwrap_err().to_string();
    assert!(e.contains("free"), "{e}");
    assert_eq!(fs.storage().devs[2].state(), DeviceState::Online);
}

#[test]
fn the_default_layout_follows_the_devices() {
    // The default stripe has no width: it spans the devices there are.
    let pool = MemPool::new(2, 64 * MB);
    let fs = pool.open().unwrap();
    fs.add_device(mem("mem2", 64 * MB), &AddOptions::default()).unwrap();
    fs.write_file("/big", &pattern(1, 4 * MB as usize), None).unwrap();
    assert_eq!(devices_of(&fs, "/big"), vec![0, 1, 2]);
    // A default written with a width the pool can no longer give loses it.
    let opts =
        hurricane::FormatOptions { default_layout: Some("stripe(unit=64K,width=4)".into()), ..Default::default() };
    let pool = MemPool::with(4, 64 * MB, &opts);
    let fs = pool.open().unwrap();
    fs.write_file("/a", &pattern(2, MB as usize), None).unwrap();
    fs.remove_device(3, &RemoveOptions::default(), &|_| {}).unwrap();
    assert_eq!(fs.default_layout(), "stripe(unit=64K)");
    fs.write_file("/b", &pattern(3, MB as usize), None).unwrap();
    assert_eq!(devices_of(&fs, "/b"), vec![0, 1, 2]);
    fs.close().unwrap();
    let fs = pool.open().unwrap();
    assert_eq!(fs.default_layout(), "stripe(unit=64K)");
    assert_eq!(fs.read_file("/a").unwrap(), pattern(2, MB as usize));
}
