//! Random bit flips in the device blocks of many files of several layouts,
//! then a scrub: every flip on a redundant layout is repaired, and on a
//! non-redundant one the scrub names exactly the files that hold a flipped
//! block, which then fail to read (EIO) rather than return the garbage.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use hurricane::device::Device;
use hurricane::fs::ScrubOptions;
use hurricane::Fs;
use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};

const BS: u64 = 4096;

/// A layout under test and how many of a file's devices may be damaged at
/// once without losing data (0: none, the layout is not redundant).
const LAYOUTS: &[(&str, &str, usize)] = &[
    ("rep2", "replicate(copies=2)", 1),
    ("rep3", "replicate(copies=3)", 2),
    ("par31", "parity(data=3,parity=1)", 1),
    ("par22", "parity(data=2,parity=2)", 2),
    ("par43", "parity(data=4,parity=3)", 3),
    ("ext", "extent", 0),
    ("stripe", "stripe(unit=64K,width=3)", 0),
];

/// Flips one random bit in device block `b`.
fn flip_bit(dev: &dyn Device, b: u64, rng: &mut StdRng) {
    let mut buf = vec![0u8; BS as usize];
    dev.read_at(&mut buf, b * BS).unwrap();
    let bit = rng.gen_range(0..BS as usize * 8);
    buf[bit / 8] ^= 1 << (bit % 8);
    dev.write_at(&buf, b * BS).unwrap();
}

/// Every device block of the file on `dev`.
fn blocks_on(ext: &[(u32, u64, u64)], dev: u32) -> Vec<u64> {
    ext.iter().filter(|e| e.0 == dev).flat_map(|&(_, s, l)| s..s + l).collect()
}

struct Flipped {
    /// Files written, with their data.
    files: BTreeMap<String, (Vec<u8>, usize)>,
    /// Non-redundant files holding a flipped block, with how many.
    damaged: BTreeMap<String, u64>,
    /// Flips on redundant files.
    redundant_flips: u64,
    /// Devices that got at least one flip.
    devices_hit: BTreeSet<u32>,
}

/// Writes `per_layout` files of every layout and flips random bits in
/// random blocks of their device extents, never more devices of one file
/// than its layout survives.
fn write_and_flip(pool: &MemPool, fs: &Fs, seed: u64, per_layout: usize) -> Flipped {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut files = BTreeMap::new();
    for (name, spec, tol) in LAYOUTS {
        fs.mkdir_all(&format!("/{name}"), 0o755).unwrap();
        for i in 0..per_layout {
            let len = rng.gen_range(1..=400_000usize);
            let path = format!("/{name}/f{i}");
            let data = pattern(seed.wrapping_mul(1000) + files.len() as u64, len);
            fs.write_file(&path, &data, Some(spec)).unwrap();
            files.insert(path, (data, *tol));
        }
    }
    fs.sync().unwrap();
    fs.drop_caches();
    let mut out = Flipped { files, damaged: BTreeMap::new(), redundant_flips: 0, devices_hit: BTreeSet::new() };
    for (path, (data, tol)) in &out.files {
        let ext = fs.device_extents_of(path).unwrap();
        let mut devs: Vec<u32> = ext.iter().map(|e| e.0).collect::<BTreeSet<_>>().into_iter().collect();
        assert!(!devs.is_empty(), "{path}: no device extents");
        if *tol == 0 {
            // Every block of a non-redundant file is file data, so a
            // flipped block is a damaged block of the file.
            let held: u64 = ext.iter().map(|e| e.2).sum();
            assert_eq!(held, (data.len() as u64).div_ceil(BS), "{path}: {ext:?}");
            // About half the plain files are left alone: they must not be
            // reported.
            if rng.gen_bool(0.5) {
                continue;
            }
        }
        devs.shuffle(&mut rng);
        // Devices without a flip yet first, so every device gets some.
        devs.sort_by_key(|d| out.devices_hit.contains(d));
        let bad_devs = if *tol == 0 { 1 } else { rng.gen_range(1..=*tol) };
        for &d in devs.iter().take(bad_devs) {
            let mut blocks = blocks_on(&ext, d);
            blocks.shuffle(&mut rng);
            let n = rng.gen_range(1..=3usize).min(blocks.len());
            for &b in &blocks[..n] {
                flip_bit(&*pool.devs[d as usize], b, &mut rng);
                out.devices_hit.insert(d);
                if *tol == 0 {
                    *out.damaged.entry(path.clone()).or_default() += 1;
                } else {
                    out.redundant_flips += 1;
                }
            }
        }
    }
    out
}

fn repair() -> ScrubOptions {
    ScrubOptions { repair: true, ..Default::default() }
}

fn check_scrub_result(seed: u64) {
    let pool = MemPool::new(8, 96 * MB);
    let fs = pool.open().unwrap();
    let f = write_and_flip(&pool, &fs, seed, 6);
    assert_eq!(f.devices_hit.len(), 8, "seed {seed}: every device gets flips: {:?}", f.devices_hit);
    assert!(f.redundant_flips > 0 && !f.damaged.is_empty(), "seed {seed}");

    let r = fs.scrub(&repair(), &|_| {}).unwrap();
    assert!(r.complete);
    let lost: BTreeMap<String, u64> = r
        .lost
        .iter()
        .map(|l| {
            assert_eq!(l.paths.len(), 1, "{l:?}");
            (l.paths[0].clone(), l.ranges.iter().map(|r| r.1.div_ceil(BS)).sum())
        })
        .collect();
    // Exactly the damaged plain files, each with as many blocks as were flipped.
    assert_eq!(lost, f.damaged, "seed {seed}");
    assert!(r.repaired_blocks >= 1, "seed {seed}: {} flips on redundant files", f.redundant_flips);

    // A second pass repairs nothing more and reports the same loss.
    let again = fs.scrub(&repair(), &|_| {}).unwrap();
    assert_eq!(again.repaired_blocks, 0, "seed {seed}");
    assert_eq!(again.lost.len(), f.damaged.len(), "seed {seed}");

    fs.drop_caches();
    for (path, (data, tol)) in &f.files {
        match fs.read_file(path) {
            Ok(got) => {
                assert!(!f.damaged.contains_key(path), "seed {seed}: {path} read back despite a flipped block");
                assert!(got == *data, "seed {seed}: {path} (tolerance {tol}) reads back different bytes");
            }
            Err(e) => {
                assert!(f.damaged.contains_key(path), "seed {seed}: {path}: {e}");
                assert_eq!(e.errno(), libc_eio(), "seed {seed}: {path}: {e}");
            }
        }
    }
    // The repairs are on the devices, not only in memory.
    fs.close().unwrap();
    let fs = pool.open().unwrap();
    for (path, (data, tol)) in &f.files {
        if *tol > 0 {
            assert!(fs.read_file(path).unwrap() == *data, "seed {seed}: {path} after a reopen");
        }
    }
    let third = fs.scrub(&ScrubOptions::default(), &|_| {}).unwrap();
    assert_eq!(third.repaired_blocks, 0);
    assert_eq!(third.lost.len(), f.damaged.len());
}

fn libc_eio() -> i32 {
    5
}

#[test]
fn random_bit_flips_are_repaired_or_reported_exactly() {
    for seed in 1..=4u64 {
        check_scrub_result(seed);
    }
}

#[test]
fn without_repair_a_scrub_reports_and_changes_nothing() {
    let pool = MemPool::new(8, 96 * MB);
    let fs = pool.open().unwrap();
    let f = write_and_flip(&pool, &fs, 7, 2);
    let r = fs.scrub(&ScrubOptions::default(), &|_| {}).unwrap();
    assert_eq!(r.repaired_blocks, 0);
    let paths: BTreeSet<String> = r.lost.iter().flat_map(|l| l.paths.clone()).collect();
    assert_eq!(paths, f.damaged.keys().cloned().collect());
    // Reads still return good data from the redundancy (and may repair).
    fs.drop_caches();
    for (path, (data, tol)) in &f.files {
        if *tol > 0 {
            assert!(fs.read_file(path).unwrap() == *data, "{path}");
        }
    }
}
