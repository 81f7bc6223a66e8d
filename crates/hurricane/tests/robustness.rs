//! Bad input gives a clear error and loses nothing committed: corrupt
//! superblocks, truncated images, missing and foreign devices, full devices.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use hurricane::device::{CrashMode, Device, MemDevice};
use hurricane::{FormatOptions, Fs, Options};
use std::sync::Arc;

fn open_err(devs: Vec<Arc<dyn Device>>) -> String {
    match Fs::open(devs, quiet()) {
        Ok(_) => panic!("open should have failed"),
        Err(e) => e.to_string(),
    }
}

fn images(p: &MemPool) -> Vec<Vec<u8>> {
    p.devs.iter().map(|d| d.crash_image(CrashMode::KeepAll)).collect()
}

fn devs_from(imgs: &[Vec<u8>]) -> Vec<Arc<dyn Device>> {
    imgs.iter()
        .enumerate()
        .map(|(i, img)| Arc::new(MemDevice::from_image(format!("mem{i}"), img.clone())) as Arc<dyn Device>)
        .collect()
}

fn pool_with_data() -> MemPool {
    let p = MemPool::new(3, 16 * MB);
    let fs = p.open().unwrap();
    // Striped over every device: a device gone takes part of it.
    fs.write_file("/keep", &pattern(9, 200_000), Some("stripe(unit=64K,width=3)")).unwrap();
    fs.close().unwrap();
    p
}

#[test]
fn corrupt_superblocks() {
    let p = pool_with_data();
    let mut imgs = images(&p);
    // One corrupt slot on one device: the other copies still open the pool.
    imgs[0][100] ^= 0xff;
    let fs = Fs::open(devs_from(&imgs), quiet()).unwrap();
    assert_eq!(fs.read_file("/keep").unwrap(), pattern(9, 200_000));
    drop(fs);
    // Every slot of a device corrupt: the device is taken as faulted, and
    // what lived on it fails naming it.
    let mut imgs = images(&p);
    for s in [0usize, 4096] {
        imgs[1][s + 50] ^= 0x55;
    }
    let fs = Fs::open(devs_from(&imgs), quiet()).unwrap();
    assert_eq!(fs.storage().devs[1].state(), hurricane::device::DeviceState::Faulted);
    let e = fs.read_file("/keep").unwrap_err().to_string();
    assert!(e.contains("device 1"), "{e}");
    drop(fs);
    // Nothing written: the original still opens with its data.
    let fs = p.open().unwrap();
    assert_eq!(fs.read_file("/keep").unwrap(), pattern(9, 200_000));
}

#[test]
fn truncated_missing_foreign_and_duplicated_devices() {
    let p = pool_with_data();
    let imgs = images(&p);
    let mut t = imgs.clone();
    let half = t[2].len() / 2;
    t[2].truncate(half);
    let e = open_err(devs_from(&t));
    assert!(e.contains("mem2") && e.contains("truncated"), "{e}");
    // A device not given: the pool opens degraded, naming it missing
    // (tests/degraded.rs covers what works then).
    let fs = Fs::open(devs_from(&imgs[..2]), quiet()).unwrap();
    assert_eq!(fs.report().missing_devices.iter().map(|m| m.0).collect::<Vec<_>>(), vec![2]);
    let e = fs.read_file("/keep").unwrap_err().to_string();
    assert!(e.contains("device 2") && e.contains("missing"), "{e}");
    drop(fs);
    // Another pool's device in a slot of this one: faulted there, while
    // the others agree on the pool; with no majority, refused.
    let other = MemPool::new(1, 16 * MB);
    let mut mixed = devs_from(&imgs[..2]);
    mixed.push(other.devs[0].clone());
    let fs = Fs::open(mixed, quiet()).unwrap();
    assert_eq!(fs.storage().devs[2].state(), hurricane::device::DeviceState::Faulted);
    drop(fs);
    let mut mixed = devs_from(&imgs[..1]);
    mixed.push(other.devs[0].clone());
    let e = open_err(mixed);
    assert!(e.contains("another pool"), "{e}");
    let e = open_err(devs_from(&[imgs[0].clone(), imgs[1].clone(), imgs[1].clone()]));
    assert!(e.contains("both device 1"), "{e}");
    let e = open_err(devs_from(&[vec![0u8; 1 << 20]]));
    assert!(e.contains("not a Hurricane device"), "{e}");
    // A corrupt checkpoint is refused, not half-loaded.
    let fs = p.open().unwrap();
    drop(fs);
}

#[test]
fn full_device_refuses_writes_and_keeps_committed_data() {
    let p = MemPool::with(2, 8 * MB, &FormatOptions { journal_size: Some(512 << 10), ..Default::default() });
    let fs = p.open().unwrap();
    fs.write_file("/a", &pattern(1, 1_000_000), Some("extent@1")).unwrap();
    fs.sync().unwrap();
    let f = fs.create("/big", Some("extent@1")).unwrap();
    let chunk = pattern(2, 1 << 20);
    let mut written = 0u64;
    let err = loop {
        match f.write_at(&chunk, written) {
            Ok(n) => written += n as u64,
            Err(e) => break e,
        }
        assert!(written < 64 * MB, "device never filled");
    };
    assert_eq!(err.errno(), libc::ENOSPC, "{err}");
    assert!(err.to_string().contains("no space"), "{err}");
    drop(f);
    // Committed data intact, the pool still works, and space comes back.
    assert_eq!(fs.read_file("/a").unwrap(), pattern(1, 1_000_000));
    fs.remove("/big").unwrap();
    fs.sync().unwrap();
    fs.write_file("/after", b"ok", Some("extent@1")).unwrap();
    fs.close().unwrap();
    let fs = p.open().unwrap();
    assert_eq!(fs.read_file("/a").unwrap(), pattern(1, 1_000_000));
    assert_eq!(fs.read_file("/after").unwrap(), b"ok");
}

#[test]
fn read_only_open_changes_nothing() {
    let p = pool_with_data();
    let before = images(&p);
    let fs = Fs::open(devs_from(&before), Options { read_only: true, ..quiet() }).unwrap();
    assert_eq!(fs.read_file("/keep").unwrap(), pattern(9, 200_000));
    assert_eq!(fs.write_file("/x", b"y", None).unwrap_err().errno(), libc::EROFS);
}

#[test]
fn garbage_after_the_journal_is_ignored() {
    let p = MemPool::new(2, 16 * MB);
    let fs = p.open().unwrap();
    fs.write_file("/one", b"1", None).unwrap();
    fs.sync().unwrap();
    drop(fs);
    let mut imgs: Vec<Vec<u8>> = p.devs.iter().map(|d| d.crash_image(CrashMode::DropAll)).collect();
    // Scribble over the journal area after the valid records.
    let j = 2 * 4096;
    for b in imgs[0][j + 8 * 4096..j + 16 * 4096].iter_mut() {
        *b = 0xAB;
    }
    let fs = Fs::open(devs_from(&imgs), quiet()).unwrap();
    assert_eq!(fs.read_file("/one").unwrap(), b"1");
}
