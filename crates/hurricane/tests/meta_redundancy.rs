//! The meta-data is as safe as the data: a pool keeps more copies of its
//! meta-file and journal than its most tolerant file layout needs, places
//! them anew when a device holding one fails, merges journal copies damaged
//! in different places, never replays a history the pool abandoned, and
//! opens with a device whose superblocks are garbage taken as faulted.
//! Each test compares what the pool serves against what was acknowledged.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::rng::Rng;
use common::*;
use hurricane::blocks::Layout;
use hurricane::codec::Decoder;
use hurricane::device::{CrashMode, Device, DeviceState, FaultDevice, FaultPlan, MemDevice, MissingDevice, BLOCK_SIZE};
use hurricane::pool::Superblock;
use hurricane::{FormatOptions, Fs};
use std::collections::BTreeMap;
use std::sync::Arc;

const PARITY: &str = "parity(data=4,parity=2)";

fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(seed);
    (0..len).map(|_| r.next() as u8).collect()
}

/// Memory devices from images; `None` stands for a device that is gone.
fn devs_of(imgs: &[Option<Vec<u8>>]) -> Vec<Arc<dyn Device>> {
    imgs.iter()
        .enumerate()
        .map(|(i, img)| match img {
            Some(img) => Arc::new(MemDevice::from_image(format!("mem{i}"), img.clone())) as Arc<dyn Device>,
            None => Arc::new(MissingDevice::new(format!("mem{i}"), 0)) as Arc<dyn Device>,
        })
        .collect()
}

fn check_files(fs: &Fs, want: &BTreeMap<String, Vec<u8>>, what: &str) {
    for (path, data) in want {
        match fs.read_file(path) {
            Ok(got) => assert!(got == *data, "{what}: {path}: wrong bytes"),
            Err(e) => panic!("{what}: {path}: {e}"),
        }
    }
}

/// What each device of an open pool holds now (None: it reads nothing).
fn live_images(fs: &Fs) -> Vec<Option<Vec<u8>>> {
    fs.storage()
        .devs
        .iter()
        .map(|d| {
            let mut b = vec![0u8; d.dev().size() as usize];
            d.dev().read_at(&mut b, 0).ok().map(|_| b)
        })
        .collect()
}

fn state(fs: &Fs, d: usize) -> DeviceState {
    fs.storage().devs[d].state()
}

#[test]
fn a_new_pool_keeps_three_copies_and_a_more_tolerant_layout_raises_them() {
    let p = MemPool::new(6, 32 * MB);
    let fs = p.open().unwrap();
    let r = fs.meta_redundancy();
    assert_eq!(r.wanted, Some(3), "{r:?}");
    assert_eq!(r.meta_file.iter().map(|c| c.0).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(r.journal.iter().map(|c| c.0).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!((r.survives(), r.degraded()), (2, false), "{r:?}");
    // Files that survive two failures: the meta-data keeps a copy more.
    fs.write_file("/p", &pattern(1, 100_000), Some(PARITY)).unwrap();
    fs.sync().unwrap();
    fs.checkpoint().unwrap();
    let r = fs.meta_redundancy();
    assert_eq!((r.wanted, r.data_survives), (Some(4), Some(2)), "{r:?}");
    assert_eq!(r.meta_file.len(), 4, "{r:?}");
    assert_eq!(r.journal.len(), 4, "{r:?}");
    assert_eq!((r.survives(), r.degraded()), (3, false), "{r:?}");
    fs.close().unwrap();
    // Kept across opens, and the pool opens from any one journal copy.
    let imgs: Vec<Vec<u8>> = p.devs.iter().map(|d| d.crash_image(CrashMode::KeepAll)).collect();
    let fs = Fs::open(devs_of(&imgs.iter().cloned().map(Some).collect::<Vec<_>>()), quiet()).unwrap();
    assert_eq!(fs.meta_redundancy().wanted, Some(4));
    assert_eq!(fs.read_file("/p").unwrap(), pattern(1, 100_000));
    // A one-device pool keeps one; a pool made with its own meta layout
    // keeps that.
    let one = MemPool::new(1, 32 * MB).open().unwrap();
    assert_eq!(one.meta_redundancy().wanted, Some(1));
    let own = MemPool::with(3, 32 * MB, &FormatOptions { meta_layout: Some("extent@2".into()), ..Default::default() });
    let r = own.open().unwrap().meta_redundancy();
    assert_eq!((r.wanted, r.meta_file.len()), (None, 1), "{r:?}");
}

/// The operator's trial of the issue: a six-device pool of
/// `parity(data=4,parity=2)` files, device 0 overwritten with random
/// bytes and device 1 gone while in use, new files written and synced,
/// then a power cut, and the pool opened without both.
#[test]
fn two_dead_devices_leave_a_pool_of_parity_files_whole() {
    let mems: Vec<Arc<MemDevice>> = (0..6).map(|i| Arc::new(MemDevice::new(format!("mem{i}"), 48 * MB))).collect();
    let plans: Vec<Arc<FaultPlan>> = (0..6).map(|_| Arc::new(FaultPlan::default())).collect();
    let devs = || -> Vec<Arc<dyn Device>> {
        mems.iter()
            .zip(&plans)
            .map(|(m, p)| Arc::new(FaultDevice::new(m.clone(), p.clone())) as Arc<dyn Device>)
            .collect()
    };
    Fs::format(devs(), &FormatOptions { default_layout: Some(PARITY.into()), ..Default::default() }).unwrap();
    let fs = Fs::open(devs(), quiet()).unwrap();
    let mut want = BTreeMap::new();
    fs.mkdir_path("/d", 0o755).unwrap();
    for i in 0..40u64 {
        let data = pattern(i, 3000 + (i as usize * 7919) % 90_000);
        let path = format!("/d/f{i}");
        fs.write_file(&path, &data, None).unwrap();
        want.insert(path, data);
    }
    fs.sync().unwrap();
    fs.checkpoint().unwrap();
    assert_eq!(fs.meta_redundancy().meta_file.len(), 4);

    // Device 0 is overwritten with garbage, device 1 goes away.
    let size = mems[0].size() as usize;
    for (k, chunk) in random_bytes(7, size).chunks(1 << 20).enumerate() {
        mems[0].write_at(chunk, (k << 20) as u64).unwrap();
    }
    plans[1].go_missing();
    fs.drop_caches();
    check_files(&fs, &want, "after the failures");
    for i in 0..10u64 {
        let data = pattern(100 + i, 20_000);
        let path = format!("/d/new{i}");
        fs.write_file(&path, &data, None).unwrap();
        fs.sync().unwrap();
        want.insert(path, data);
    }
    assert_eq!(state(&fs, 1), DeviceState::Missing);
    // The copy on device 1 was placed anew on a healthy device.
    fs.checkpoint().unwrap();
    let r = fs.meta_redundancy();
    assert!(r.journal.iter().all(|c| c.0 != 1) && r.meta_file.iter().all(|c| c.0 != 1), "{r:?}");
    assert_eq!(r.journal_online(), 4, "{r:?}");

    // A power cut; device 0 garbage again (its superblocks too), device 1 gone.
    let mut imgs: Vec<Option<Vec<u8>>> = mems.iter().map(|m| Some(m.crash_image(CrashMode::DropAll))).collect();
    drop(fs);
    imgs[0] = Some(random_bytes(8, size));
    imgs[1] = None;
    let fs = Fs::open(devs_of(&imgs), quiet()).unwrap();
    assert_eq!(state(&fs, 0), DeviceState::Faulted);
    assert_eq!(state(&fs, 1), DeviceState::Missing);
    check_files(&fs, &want, "reopened without devices 0 and 1");
    // The copies on device 0 go to the one healthy device left without one.
    fs.write_file("/after", b"x", None).unwrap();
    fs.sync().unwrap();
    fs.checkpoint().unwrap();
    let r = fs.meta_redundancy();
    assert_eq!(r.journal.iter().filter(|c| c.1).count(), 4, "{r:?}");
    assert_eq!(r.meta_file.iter().filter(|c| c.1).count(), 4, "{r:?}");
    assert!(!r.degraded(), "{r:?}");
    fs.close().unwrap();
}

/// The meta-file's extents on device `dev` (from the newest superblock).
fn meta_blocks(img: &[u8]) -> Vec<(u32, u64, u64)> {
    let sb = newest_superblock(img);
    let lay = Layout::decode(&mut Decoder::new(&sb.meta_layout, "meta")).unwrap();
    let mut v = Vec::new();
    lay.extents(&mut |d, s, l| v.push((d, s, l)));
    v
}

/// One bit flipped in the same meta-file block on two of its three
/// copies, for many blocks and seeds: every file still reads, fsck finds
/// the pool consistent, and the bad copies are rewritten.
#[test]
fn meta_data_rot_in_two_of_three_copies_loses_nothing() {
    let p = MemPool::new(3, 32 * MB);
    let fs = p.open().unwrap();
    let mut want = BTreeMap::new();
    for d in 0..10 {
        fs.mkdir_path(&format!("/d{d}"), 0o755).unwrap();
        for i in 0..60 {
            let data = pattern(d * 1000 + i, 200 + (i as usize * 31) % 3000);
            let path = format!("/d{d}/f{i}");
            fs.write_file(&path, &data, Some("inline")).unwrap();
            want.insert(path, data);
        }
    }
    fs.close().unwrap();
    let imgs: Vec<Vec<u8>> = p.devs.iter().map(|d| d.crash_image(CrashMode::KeepAll)).collect();
    let runs = meta_blocks(&imgs[0]);
    // Blocks of the meta-file by content: the same block in two copies.
    let blocks_on =
        |dev: u32| -> Vec<u64> { runs.iter().filter(|r| r.0 == dev).flat_map(|&(_, s, l)| s..s + l).collect() };
    let on0 = blocks_on(0);
    let on1 = blocks_on(1);
    let content = |img: &[u8], b: u64| img[b as usize * BLOCK_SIZE..(b as usize + 1) * BLOCK_SIZE].to_vec();
    let mut rng = Rng(0x5eed);
    let mut trials = 0;
    while trials < 12 {
        let b0 = on0[rng.below(on0.len() as u64) as usize];
        let c = content(&imgs[0], b0);
        if c.iter().all(|&x| x == 0) {
            continue;
        }
        let Some(&b1) = on1.iter().find(|&&b| content(&imgs[1], b) == c) else { continue };
        trials += 1;
        let bit = rng.below(BLOCK_SIZE as u64 * 8) as usize;
        let mut t = imgs.clone();
        t[0][b0 as usize * BLOCK_SIZE + bit / 8] ^= 1 << (bit % 8);
        t[1][b1 as usize * BLOCK_SIZE + bit / 8] ^= 1 << (bit % 8);
        let fs = Fs::open(devs_of(&t.into_iter().map(Some).collect::<Vec<_>>()), quiet()).unwrap();
        check_files(&fs, &want, &format!("block {b0}/{b1} bit {bit}"));
        check_clean(&fs, "after rot in two copies");
        // A scrub finds the bad copies and rewrites them from the good
        // one: the first two copies alone now serve.
        let r = fs.scrub(&hurricane::fs::ScrubOptions { repair: true, ..Default::default() }, &|_| {}).unwrap();
        assert_eq!(r.meta_lost_blocks, 0, "{r:?}");
        fs.checkpoint().unwrap();
        let mut now = live_images(&fs);
        now[2] = None;
        fs.close().unwrap();
        let fs = Fs::open(devs_of(&now), quiet()).unwrap();
        check_files(&fs, &want, "the repaired copies alone");
    }
}

use common::journal_records as records;

/// A power cut after many fsync'd creates, then the journal's copies
/// damaged in disjoint ranges (the first copy's second half, the second's
/// first half, the third gone): replay takes each record from a copy that
/// holds it, nothing acknowledged is lost, and later opens agree.
#[test]
fn journal_copies_damaged_in_disjoint_ranges_replay_every_record() {
    for seed in [1u64, 2, 3] {
        let p = MemPool::with(3, 32 * MB, &FormatOptions { journal_size: Some(4 << 20), ..Default::default() });
        let fs = p.open().unwrap();
        let mut want = BTreeMap::new();
        let mut rng = Rng(seed);
        for i in 0..150u64 {
            let path = format!("/f{i}");
            let data = pattern(seed * 10_000 + i, 1 + rng.below(5000) as usize);
            let layout = if i % 3 == 0 && data.len() < 2000 { "inline" } else { "replicate[extent@0,extent@1]" };
            fs.write_file(&path, &data, Some(layout)).unwrap();
            fs.sync().unwrap();
            want.insert(path, data);
        }
        let imgs: Vec<Vec<u8>> = p.devs.iter().map(|d| d.crash_image(CrashMode::DropAll)).collect();
        drop(fs);
        let mut seqs: Vec<u64> = records(&imgs[0]).into_iter().map(|r| r.1).collect();
        seqs.sort_unstable();
        let mid = seqs[seqs.len() / 2];
        let mut t: Vec<Option<Vec<u8>>> = imgs.iter().cloned().map(Some).collect();
        for (dev, second_half) in [(0usize, true), (1, false)] {
            let img = t[dev].as_mut().unwrap();
            for (b, seq) in records(img) {
                if (seq >= mid) == second_half {
                    img[b * BLOCK_SIZE + 100] ^= 0x20;
                }
            }
        }
        t[2] = None;
        let fs = Fs::open(devs_of(&t), quiet()).unwrap();
        assert_eq!(fs.report().journal_repaired, [0, 1], "seed {seed}");
        check_files(&fs, &want, &format!("seed {seed}: replayed"));
        // More fsync'd work, a clean close, and two opens that agree.
        for i in 0..30u64 {
            let path = format!("/g{i}");
            let data = pattern(seed * 20_000 + i, 3000);
            fs.write_file(&path, &data, Some("extent@1")).unwrap();
            fs.sync().unwrap();
            want.insert(path, data);
        }
        fs.close().unwrap();
        let live = live_images(&fs);
        for round in 0..2 {
            let fs = Fs::open(devs_of(&live), quiet()).unwrap();
            check_files(&fs, &want, &format!("seed {seed}: open {round} after the close"));
            assert_eq!(fs.read_dir("/").unwrap().len(), want.len(), "seed {seed}");
            check_clean(&fs, "after the close");
            drop(fs);
        }
    }
}

/// Two histories of one pool: a two-device pool written with device 1
/// away, then (after a power cut) with device 0 away, then opened whole.
/// Each copy holds records the other lacks, at the same places and with
/// the same sequence numbers: replay takes one history whole, never a mix
/// of the two, and every later open agrees with it.
#[test]
fn a_history_the_pool_abandoned_is_never_replayed() {
    // Which history an open takes depends on the epochs the two opens
    // drew: enough rounds see both.
    for seed in 0..16u64 {
        let p = MemPool::new(2, 32 * MB);
        let fs = p.open().unwrap();
        for i in 0..5 {
            fs.write_file(&format!("/a{i}"), b"a", Some("inline")).unwrap();
            fs.sync().unwrap();
        }
        let base: Vec<Vec<u8>> = p.devs.iter().map(|d| d.crash_image(CrashMode::DropAll)).collect();
        drop(fs);
        // History B: device 1 away.
        let run = |imgs: Vec<Option<Vec<u8>>>, prefix: &str, n: u64| -> Vec<Option<Vec<u8>>> {
            let devs: Vec<Option<Arc<MemDevice>>> = imgs
                .iter()
                .enumerate()
                .map(|(i, im)| im.as_ref().map(|im| Arc::new(MemDevice::from_image(format!("mem{i}"), im.clone()))))
                .collect();
            let dyn_devs: Vec<Arc<dyn Device>> = devs
                .iter()
                .enumerate()
                .map(|(i, d)| match d {
                    Some(d) => d.clone() as Arc<dyn Device>,
                    None => Arc::new(MissingDevice::new(format!("mem{i}"), 0)) as Arc<dyn Device>,
                })
                .collect();
            let fs = Fs::open(dyn_devs, quiet()).unwrap();
            for i in 0..n {
                fs.write_file(&format!("/{prefix}{i}"), prefix.as_bytes(), Some("inline")).unwrap();
                fs.sync().unwrap();
            }
            let out = devs.iter().map(|d| d.as_ref().map(|d| d.crash_image(CrashMode::DropAll))).collect();
            drop(fs);
            out
        };
        let b = run(vec![Some(base[0].clone()), None], "b", 4 + seed);
        let c = run(vec![None, Some(base[1].clone())], "c", 4 + (seed * 3) % 5);
        let both = vec![b[0].clone(), c[1].clone()];
        let names = |fs: &Fs| -> Vec<String> {
            let mut v: Vec<String> =
                fs.read_dir("/").unwrap().into_iter().map(|e| String::from_utf8_lossy(&e.name).into_owned()).collect();
            v.sort();
            v
        };
        let fs = Fs::open(devs_of(&both), quiet()).unwrap();
        let seen = names(&fs);
        let has = |p: char| seen.iter().any(|n| n.starts_with(p));
        assert!(has('a') && has('b') != has('c'), "seed {seed}: a mix of histories: {seen:?}");
        check_clean(&fs, "the histories merged");
        fs.close().unwrap();
        let live = live_images(&fs);
        for alone in 0..2 {
            let mut one = live.clone();
            one[1 - alone] = None;
            let fs = Fs::open(devs_of(&one), hurricane::Options { read_only: true, ..quiet() }).unwrap();
            assert_eq!(names(&fs), seen, "seed {seed}: device {alone} alone");
        }
    }
}

/// A member device whose superblocks are garbage, or another pool's, is
/// taken as faulted: the pool opens degraded instead of refusing, and the
/// device's data comes from redundancy.
#[test]
fn a_garbage_or_foreign_superblock_faults_its_device_only() {
    let p = MemPool::new(3, 32 * MB);
    let fs = p.open().unwrap();
    fs.write_file("/r", &pattern(3, 200_000), Some("replicate[extent@0,extent@1,extent@2]")).unwrap();
    fs.close().unwrap();
    let imgs: Vec<Vec<u8>> = p.devs.iter().map(|d| d.crash_image(CrashMode::KeepAll)).collect();
    let other = MemPool::new(1, 32 * MB);
    other.open().unwrap().close().unwrap();
    let foreign = other.devs[0].crash_image(CrashMode::KeepAll);
    for (what, bad) in [
        ("zeros", vec![0u8; imgs[1].len()]),
        ("random bytes", random_bytes(11, imgs[1].len())),
        ("another pool's device", foreign),
    ] {
        let mut t: Vec<Option<Vec<u8>>> = imgs.iter().cloned().map(Some).collect();
        t[1] = Some(bad);
        let fs = Fs::open(devs_of(&t), quiet()).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(state(&fs, 1), DeviceState::Faulted, "{what}");
        assert_eq!(fs.read_file("/r").unwrap(), pattern(3, 200_000), "{what}");
        drop(fs);
    }
    // Without a majority there is no telling which pool is meant.
    let t: Vec<Option<Vec<u8>>> = vec![Some(imgs[0].clone()), Some(other.devs[0].crash_image(CrashMode::KeepAll))];
    let e = Fs::open(devs_of(&t), quiet()).err().unwrap().to_string();
    assert!(e.contains("another pool"), "{e}");
}

/// A pool of format 5 (two copies of the meta-file and journal, records
/// without epochs) opens with its files, is marked 6, and from then on
/// keeps three copies like a pool made now.
#[test]
fn a_format_5_pool_opens_and_gets_its_third_copies() {
    let p = MemPool::with(
        3,
        32 * MB,
        &FormatOptions {
            meta_layout: Some("replicate(copies=2)[extent(max=1T)@0,extent(max=1T)@1]".into()),
            ..Default::default()
        },
    );
    let fs = p.open().unwrap();
    fs.write_file("/old", &pattern(5, 50_000), None).unwrap();
    fs.close().unwrap();
    let versions = |p: &MemPool, set: Option<u32>| -> Vec<u32> {
        p.devs
            .iter()
            .map(|d| {
                let mut newest = 0;
                for slot in 0..2u64 {
                    let mut b = vec![0u8; BLOCK_SIZE];
                    d.read_at(&mut b, slot * BLOCK_SIZE as u64).unwrap();
                    let Some(mut sb) = Superblock::decode(&b, "d").unwrap() else { continue };
                    if let Some(v) = set {
                        sb.version = v;
                        d.write_at(&sb.encode().unwrap(), slot * BLOCK_SIZE as u64).unwrap();
                    }
                    newest = newest.max(sb.version);
                }
                newest
            })
            .collect()
    };
    versions(&p, Some(5));
    let fs = p.open().unwrap();
    assert_eq!(versions(&p, None), [6, 6, 6]);
    assert_eq!(fs.read_file("/old").unwrap(), pattern(5, 50_000));
    fs.write_file("/new", b"n", None).unwrap();
    fs.sync().unwrap();
    fs.checkpoint().unwrap();
    let r = fs.meta_redundancy();
    assert_eq!((r.wanted, r.meta_file.len(), r.journal.len()), (Some(3), 3, 3), "{r:?}");
    fs.close().unwrap();
    let fs = Fs::open(
        devs_of(&[None, None, Some(p.devs[2].crash_image(CrashMode::KeepAll))]),
        hurricane::Options { read_only: true, ..quiet() },
    )
    .unwrap();
    assert_eq!(fs.read_file("/old").unwrap(), pattern(5, 50_000));
    assert_eq!(fs.read_file("/new").unwrap(), b"n");
}
