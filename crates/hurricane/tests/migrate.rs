//! Online re-layout: a file moved to a new layout while another thread
//! writes, truncates, punches and zeroes it ends up with exactly the bytes
//! those changes give, under the new layout, before and after a reopen; a
//! power cut anywhere in a migration leaves the file whole under one of
//! its two layouts; a deleted or stopped migration gives its space back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::{check_clean, pattern, MemPool, MB};
use hurricane::device::CrashMode;
use hurricane::fs::MigrateOptions;
use hurricane::Fs;
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE;

/// One random change to `ino`, made to the file and to `model`.
fn change(fs: &Fs, ino: u64, rng: &mut StdRng, model: &mut Vec<u8>, seed: u64) {
    let size = model.len();
    match rng.gen_range(0..10) {
        0..=4 => {
            let off = rng.gen_range(0..=size + 8192);
            let len = rng.gen_range(1..200_000);
            let data = pattern(seed, len);
            fs.write(ino, off as u64, &data).unwrap();
            if model.len() < off + len {
                model.resize(off + len, 0);
            }
            model[off..off + len].copy_from_slice(&data);
        }
        5 => {
            let to = rng.gen_range(size / 2..=size + 100_000);
            fs.truncate(ino, to as u64).unwrap();
            model.resize(to, 0);
        }
        6 | 7 => {
            let off = rng.gen_range(0..=size);
            let len = rng.gen_range(1..300_000);
            let mode = if rng.gen_bool(0.5) { PUNCH } else { ZERO };
            fs.fallocate(ino, off as u64, len as u64, mode).unwrap();
            let end = (off + len).min(size);
            if off < end {
                model[off..end].fill(0);
            }
        }
        _ => {
            // Space reserved past the end: nothing to see.
            let off = rng.gen_range(0..=size);
            fs.fallocate(ino, off as u64, rng.gen_range(1..100_000), libc::FALLOC_FL_KEEP_SIZE).unwrap();
        }
    }
}

#[test]
fn changes_during_a_migration_reach_the_new_layout() {
    for (round, (from, to)) in [
        ("extent@0", "stripe(unit=64K)[extent@1,extent@2,extent@3]"),
        ("stripe(unit=16K,width=2)", "replicate[extent@2,extent@3]"),
        ("replicate[extent@0,extent@1]", "parity(data=2,parity=1)"),
        ("extent@3", "compress(chunk=16K)[extent@0]"),
    ]
    .into_iter()
    .enumerate()
    {
        let p = MemPool::new(4, 96 * MB);
        let fs = p.open().unwrap();
        let mut model = pattern(round as u64, 6 << 20);
        fs.write_file("/f", &model, Some(from)).unwrap();
        let ino = fs.resolve("/f").unwrap();
        fs.sync().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let chunks = Arc::new(AtomicU64::new(0));
        let mover = {
            let (fs, done, chunks) = (fs.clone(), done.clone(), chunks.clone());
            std::thread::spawn(move || {
                // Slow enough for many changes to land mid-copy.
                let opts = MigrateOptions { rate: Some(12 << 20), chunk_blocks: 64, ..Default::default() };
                let r = fs.migrate(ino, to, &opts, &|_| {
                    chunks.fetch_add(1, Ordering::Relaxed);
                });
                done.store(true, Ordering::Release);
                r
            })
        };
        let mut rng = StdRng::seed_from_u64(round as u64);
        let mut n = 0u64;
        let mut during = 0u64;
        while !done.load(Ordering::Acquire) || n < 20 {
            change(&fs, ino, &mut rng, &mut model, 100 + n);
            if !done.load(Ordering::Acquire) && chunks.load(Ordering::Relaxed) > 0 {
                during += 1;
            }
            n += 1;
        }
        let r = mover.join().unwrap().unwrap();
        assert!(r.complete && !r.unchanged, "round {round}: {r:?}");
        assert!(during >= 5, "round {round}: only {during} changes landed during the copy");
        let lay = fs.layout_of("/f").unwrap();
        let kind = to.split(['(', '[']).next().unwrap();
        assert!(lay.starts_with(kind), "round {round}: layout {lay}, wanted {to}");
        assert!(fs.migration_status(ino).is_none());
        let got = fs.read_file("/f").unwrap();
        assert!(
            got == model,
            "round {round}: content differs after the migration ({} vs {} bytes)",
            got.len(),
            model.len()
        );
        check_clean(&fs, &format!("round {round}, live"));
        fs.close().unwrap();
        let fs = p.open().unwrap();
        assert_eq!(fs.layout_of("/f").unwrap(), lay);
        assert!(fs.read_file("/f").unwrap() == model, "round {round}: content differs after a reopen");
        check_clean(&fs, &format!("round {round}, reopened"));
        fs.close().unwrap();
    }
}

/// A power cut at any chunk of a migration, or between its switch and the
/// next sync, leaves the file whole under its old or its new layout, and
/// no space lost or shared.
#[test]
fn a_power_cut_anywhere_in_a_migration_leaves_the_file_whole() {
    let p = MemPool::new(3, 64 * MB);
    let fs = p.open().unwrap();
    let data = pattern(7, 3 << 20);
    fs.write_file("/f", &data, Some("extent@0")).unwrap();
    fs.write_file("/g", &pattern(8, 100_000), Some("extent@1")).unwrap();
    fs.sync().unwrap();
    let to = "stripe(unit=32K)[extent@1,extent@2]";
    let images = parking_lot::Mutex::new(Vec::new());
    let k = AtomicU64::new(0);
    let opts = MigrateOptions { chunk_blocks: 32, ..Default::default() };
    let r = fs
        .migrate(fs.resolve("/f").unwrap(), to, &opts, &|_| {
            let i = k.fetch_add(1, Ordering::Relaxed);
            // A checkpoint mid-copy records the new tree's space as free.
            if i == 4 {
                fs.checkpoint().unwrap();
            }
            if i.is_multiple_of(5) {
                images.lock().push((i, p.crash(CrashMode::Random(i))));
            }
        })
        .unwrap();
    assert!(r.complete);
    images.lock().push((1000, p.crash(CrashMode::Random(1000))));
    fs.sync().unwrap();
    images.lock().push((2000, p.crash(CrashMode::Random(2000))));
    let images = images.into_inner();
    assert!(images.len() >= 5, "{} crash images", images.len());
    let mut new_seen = false;
    for (i, img) in images {
        let fs = img.open().unwrap();
        let lay = fs.layout_of("/f").unwrap();
        let is_new = lay.starts_with("stripe");
        assert!(is_new || lay.contains("extent@0"), "cut {i}: layout {lay}");
        new_seen |= is_new;
        assert!(fs.read_file("/f").unwrap() == data, "cut {i}: /f differs under {lay}");
        assert_eq!(fs.read_file("/g").unwrap(), pattern(8, 100_000), "cut {i}: /g");
        if i == 2000 {
            assert!(is_new, "the migration was synced, yet the old layout came back");
        }
        check_clean(&fs, &format!("cut {i}"));
        // The pool goes on: writes land and the space adds up.
        fs.write_file("/h", &pattern(9, 500_000), None).unwrap();
        check_clean(&fs, &format!("cut {i}, after a write"));
        fs.close().unwrap();
    }
    assert!(new_seen);
}

/// A migration stopped part way, or whose file is deleted under it, gives
/// the new tree's space back and leaves the file (if any) as it was.
#[test]
fn stopped_and_orphaned_migrations_give_their_space_back() {
    let p = MemPool::new(3, 64 * MB);
    let fs = p.open().unwrap();
    let data = pattern(3, 4 << 20);
    fs.write_file("/f", &data, Some("extent@0")).unwrap();
    fs.sync().unwrap();
    let free0 = fs.statfs().bfree;
    let ino = fs.resolve("/f").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let opts = MigrateOptions { stop: Some(stop.clone()), chunk_blocks: 64, ..Default::default() };
    let n = AtomicU64::new(0);
    let r = fs
        .migrate(ino, "extent@1", &opts, &|_| {
            if n.fetch_add(1, Ordering::Relaxed) == 3 {
                stop.store(true, Ordering::Relaxed);
            }
        })
        .unwrap();
    assert!(!r.complete);
    assert!(fs.layout_of("/f").unwrap().contains("extent@0"));
    assert_eq!(fs.read_file("/f").unwrap(), data);
    fs.sync().unwrap();
    // 4 chunks of 64 blocks were copied; the meta-data may have moved a little.
    let now = fs.statfs().bfree;
    assert!(now + 64 > free0, "a stopped migration kept space: {now} free blocks, {free0} before");
    check_clean(&fs, "stopped");

    // Deleted mid-copy: the migration ends with an error, its space back.
    let opts = MigrateOptions { chunk_blocks: 64, ..Default::default() };
    let n = AtomicU64::new(0);
    let r = fs.migrate(ino, "extent@2", &opts, &|_| {
        if n.fetch_add(1, Ordering::Relaxed) == 2 {
            fs.remove("/f").unwrap();
        }
    });
    assert!(r.is_err(), "{r:?}");
    fs.sync().unwrap();
    let free1 = fs.statfs().bfree;
    assert!(free1 > free0, "the deleted file's space came back: {free1} vs {free0}");
    check_clean(&fs, "deleted");
    fs.close().unwrap();
    let fs = p.open().unwrap();
    assert!(fs.statfs().bfree + 64 > free1);
    check_clean(&fs, "reopened");
}

/// A file already laid out so is left alone; a bad spec or a directory is
/// refused with a clear error and nothing changes.
#[test]
fn no_op_and_refused_migrations() {
    let p = MemPool::new(3, 32 * MB);
    let fs = p.open().unwrap();
    fs.write_file("/f", &pattern(1, 100_000), Some("stripe(unit=16K)[extent@0,extent@1]")).unwrap();
    fs.mkdir_path("/d", 0o755).unwrap();
    let opts = MigrateOptions::default();
    let r = fs.migrate_path("/f", "stripe(unit=16K)[extent@0,extent@1]", &opts, &|_| {}).unwrap();
    assert!(r.unchanged && r.complete && r.copied_bytes == 0, "{r:?}");
    for bad in ["nonsense", "stripe(width=0)", "extent@9"] {
        assert!(fs.migrate_path("/f", bad, &opts, &|_| {}).is_err(), "{bad}");
    }
    assert!(fs.migrate_tree("/d", "extent@0", false, &opts, &|_| {}).is_err());
    assert_eq!(fs.read_file("/f").unwrap(), pattern(1, 100_000));
    // A tree: every regular file moves, then a rerun finds nothing to do.
    for i in 0..5 {
        fs.write_file(&format!("/d/{i}"), &pattern(i, 50_000 * (i as usize + 1)), Some("extent@0")).unwrap();
    }
    let r = fs.migrate_tree("/d", "extent@2", true, &opts, &|_| {}).unwrap();
    assert!(r.complete && r.migrated == 5 && r.unchanged == 0, "{r:?}");
    let r = fs.migrate_tree("/d", "extent@2", true, &opts, &|_| {}).unwrap();
    assert!(r.complete && r.migrated == 0 && r.unchanged == 5, "{r:?}");
    for i in 0..5 {
        assert_eq!(fs.read_file(&format!("/d/{i}")).unwrap(), pattern(i, 50_000 * (i as usize + 1)));
        assert!(fs.layout_of(&format!("/d/{i}")).unwrap().contains("extent@2"));
    }
    check_clean(&fs, "tree");
}
