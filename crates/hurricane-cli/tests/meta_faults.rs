//! The meta-data survives what the files survive, tried as an operator
//! would through a mount and the CLI: a six-device pool of
//! `parity(data=4,parity=2)` files loses two devices while mounted (one
//! overwritten with random bytes, one deleted), takes new files, is
//! scrubbed, has both devices replaced, and after an unmount passes fsck
//! and mounts again with every file whole.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuse_util;

use fuse_util::*;
use hurricane_fuse::report::StatusReport;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::FileExt;

fn status(target: &std::path::Path) -> (i32, StatusReport) {
    let (code, json, err) = run(&["status", "--json", s(target)]);
    (code, StatusReport::from_json(json.as_bytes()).unwrap_or_else(|e| panic!("{e}: {json}{err}")))
}

fn check_all(m: &Mounted, want: &BTreeMap<String, Vec<u8>>, what: &str) {
    for (name, bytes) in want {
        let got = fs::read(m.path(name)).unwrap_or_else(|e| panic!("{what}: {name}: {e}"));
        assert!(got == *bytes, "{what}: {name}: wrong bytes");
    }
}

#[test]
fn two_devices_lost_while_mounted_leave_a_parity_pool_whole() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pool");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    hurricane(&["mkfs", s(&dir), "--devices", "6", "--device-size", "64M", "--layout", "parity(data=4,parity=2)"]);
    let (code, rep) = status(&dir);
    assert_eq!(code, 0, "{rep:?}");
    assert_eq!((rep.meta_copies.wanted, rep.meta_copies.meta_file.len(), rep.meta_copies.journal.len()), (4, 4, 4));

    let m = Mounted::new(&dir, &mnt, &[]);
    let mut want = BTreeMap::new();
    fs::create_dir(m.path("d")).unwrap();
    for i in 0..30u64 {
        let name = format!("d/f{i}");
        let bytes = data(5000 + (i as usize * 7919) % 200_000, i);
        fs::write(m.path(&name), &bytes).unwrap();
        want.insert(name, bytes);
    }
    ok("sync", &[]);

    // Device 0 overwritten with random bytes, device 1 deleted, in use.
    let img0 = dir.join("dev0.img");
    let len = fs::metadata(&img0).unwrap().len() as usize;
    let f = fs::OpenOptions::new().write(true).open(&img0).unwrap();
    for (k, chunk) in data(len, 99).chunks(1 << 20).enumerate() {
        f.write_all_at(chunk, (k << 20) as u64).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    fs::remove_file(dir.join("dev1.img")).unwrap();
    let _ = fs::write("/proc/sys/vm/drop_caches", "3\n");
    check_all(&m, &want, "after the failures");
    for i in 0..10u64 {
        let name = format!("d/new{i}");
        let bytes = data(40_000, 1000 + i);
        fs::write(m.path(&name), &bytes).unwrap();
        want.insert(name, bytes);
    }
    ok("sync", &[]);
    // The scrub rebuilds what device 0's garbage spoiled; nothing is lost.
    let (code, out, err) = run(&["scrub", s(&mnt)]);
    assert_ne!(code, 4, "scrub: {out}{err}");
    assert!(out.contains(" 0 unrecoverable"), "{out}{err}");
    check_all(&m, &want, "after the scrub");

    // Both devices replaced while mounted.
    for d in [0, 1] {
        let new = tmp.path().join(format!("new{d}.img"));
        let (code, out, err) = run(&["device", "replace", s(&mnt), &d.to_string(), s(&new)]);
        assert_eq!(code, 0, "replace {d}: {out}{err}");
    }
    check_all(&m, &want, "after the replacements");
    let (code, rep) = status(&mnt);
    assert_eq!(code, 0, "{rep:?}");
    assert!(!rep.meta_copies.degraded, "{rep:?}");
    m.unmount();

    // Offline: fsck finds it consistent, and it mounts with every file.
    let out = hurricane(&["fsck", s(&dir)]);
    assert!(out.contains("consistent"), "{out}");
    let m = Mounted::new(&dir, &mnt, &[]);
    check_all(&m, &want, "mounted again");
    m.unmount();
}

#[test]
fn a_device_lost_offline_with_its_superblocks_garbage_mounts_degraded() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pool");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    hurricane(&["mkfs", s(&dir), "--devices", "4", "--device-size", "64M", "--layout", "replicate(copies=2)"]);
    let m = Mounted::new(&dir, &mnt, &[]);
    let bytes = data(300_000, 7);
    fs::write(m.path("f"), &bytes).unwrap();
    m.unmount();
    // Device 2 entirely random: its superblocks say nothing.
    let img = dir.join("dev2.img");
    let len = fs::metadata(&img).unwrap().len() as usize;
    fs::write(&img, data(len, 5)).unwrap();
    let (code, rep) = status(&dir);
    assert_ne!(code, 0);
    assert_eq!(rep.devices[2].state, "faulted", "{rep:?}");
    let m = Mounted::new(&dir, &mnt, &[]);
    assert_eq!(fs::read(m.path("f")).unwrap(), bytes);
    // The meta-data's copy there moves to the device without one.
    fs::write(m.path("g"), b"after").unwrap();
    ok("sync", &[]);
    let placed = |r: &StatusReport| {
        let m = &r.meta_copies;
        m.journal.len() == 3
            && m.meta_file.len() == 3
            && m.journal.iter().chain(&m.meta_file).all(|(d, up)| *d != 2 && *up)
    };
    let t0 = std::time::Instant::now();
    let mut rep = status(&mnt).1;
    while !placed(&rep) && t0.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(300));
        rep = status(&mnt).1;
    }
    assert!(placed(&rep), "{rep:?}");
    m.unmount();
    // The pool opens without device 2 at all, from the copies placed.
    let f = fs::read_to_string(dir.join("pool.conf")).unwrap();
    fs::write(dir.join("pool.conf"), f.replace("dev2.img", "gone.img")).unwrap();
    let m = Mounted::new(&dir, &mnt, &[]);
    assert_eq!(fs::read(m.path("f")).unwrap(), bytes);
    assert_eq!(fs::read(m.path("g")).unwrap(), b"after");
    m.unmount();
}
