//! The pool's permanent error list and the attribution of checksum errors,
//! through the engine, against a model: which files hold a block no copy
//! supplies, and which device each bad block sits on. Bits are flipped in
//! device blocks of files of several layouts; reads, scrubs, a replacement
//! and `fsck --data` must record exactly the model's damaged files and
//! ranges, keep them across opens, and drop an entry when its file is
//! deleted, its damaged blocks written again or truncated away, a scrub
//! reads it clean, or the list is cleared; every checksum error must be
//! counted against the device that held the bad block and no other.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use hurricane::device::{Device, MemDevice};
use hurricane::fs::{ErrorSource, ReplaceOptions, ScrubOptions};
use hurricane::{Fs, OpenOptions};
use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const BS: u64 = 4096;

fn repair() -> ScrubOptions {
    ScrubOptions { repair: true, ..Default::default() }
}

/// Each device's checksum error count.
fn checksum_errors(fs: &Fs) -> Vec<u64> {
    fs.storage().devs.iter().map(|d| d.errors().checksum).collect()
}

/// The list as (path, damaged file blocks).
fn listed(fs: &Fs) -> BTreeMap<String, BTreeSet<u64>> {
    let paths = fs.paths_of(&fs.data_errors().iter().map(|e| e.ino).collect());
    fs.data_errors()
        .into_iter()
        .map(|e| {
            let p = paths.get(&e.ino).and_then(|v| v.first().cloned()).unwrap_or_else(|| format!("<{}>", e.ino));
            let blocks = e.ranges.iter().flat_map(|&(o, l)| o / BS..(o + l).div_ceil(BS)).collect();
            (p, blocks)
        })
        .collect()
}

/// Flips a bit in device block `b` of `dev`.
fn flip(dev: &MemDevice, b: u64, rng: &mut StdRng) {
    let mut buf = vec![0u8; BS as usize];
    dev.read_at(&mut buf, b * BS).unwrap();
    let bit = rng.gen_range(0..BS as usize * 8);
    buf[bit / 8] ^= 1 << (bit % 8);
    dev.write_at(&buf, b * BS).unwrap();
}

/// The file block whose data device block `b` of `dev` holds (the data is
/// random, so each block's bytes are found once).
fn file_block_at(dev: &MemDevice, b: u64, data: &[u8]) -> u64 {
    let mut buf = vec![0u8; BS as usize];
    dev.read_at(&mut buf, b * BS).unwrap();
    let i = data
        .chunks(BS as usize)
        .position(|c| c.len() == BS as usize && c == &buf[..])
        .unwrap_or_else(|| panic!("device block {b} holds no whole block of the file"));
    i as u64
}

/// A pool with files of plain and redundant layouts and bits flipped in
/// some of their blocks; the model is what each file lost.
struct Damaged {
    pool: MemPool,
    files: BTreeMap<String, Vec<u8>>,
    /// Non-redundant files with flipped blocks: the file blocks.
    lost: BTreeMap<String, BTreeSet<u64>>,
    /// Flipped blocks by device.
    flips: Vec<u64>,
}

const LAYOUTS: &[(&str, bool)] = &[
    ("extent", false),
    ("stripe(unit=16K,width=3)", false),
    ("replicate(copies=2)", true),
    ("parity(data=2,parity=1)", true),
];

fn damage(seed: u64) -> Damaged {
    let pool = MemPool::new(4, 64 * MB);
    let fs = pool.open().unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut files = BTreeMap::new();
    for (li, (spec, _)) in LAYOUTS.iter().enumerate() {
        fs.mkdir_all(&format!("/l{li}"), 0o755).unwrap();
        for i in 0..4 {
            let path = format!("/l{li}/f{i}");
            // Whole blocks: every device block of a plain file is file data.
            let data = pattern(seed * 100 + files.len() as u64, rng.gen_range(4..40) * BS as usize);
            fs.write_file(&path, &data, Some(spec)).unwrap();
            files.insert(path, data);
        }
    }
    fs.close().unwrap();
    drop(fs);
    let fs = pool.open().unwrap();
    let mut lost: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    let mut flips = vec![0u64; 4];
    for (li, (_, redundant)) in LAYOUTS.iter().enumerate() {
        for i in 0..4 {
            let path = format!("/l{li}/f{i}");
            // One file of each layout is left alone.
            if i == 0 {
                continue;
            }
            let ext = fs.device_extents_of(&path).unwrap();
            let devs: BTreeSet<u32> = ext.iter().map(|e| e.0).collect();
            let d = *devs.iter().collect::<Vec<_>>().choose(&mut rng).unwrap();
            let mut blocks: Vec<u64> = ext.iter().filter(|e| e.0 == *d).flat_map(|&(_, s, l)| s..s + l).collect();
            blocks.shuffle(&mut rng);
            for &b in &blocks[..rng.gen_range(1..=3usize).min(blocks.len())] {
                let dev = &pool.devs[*d as usize];
                if !redundant {
                    let fb = file_block_at(dev, b, &files[&path]);
                    lost.entry(path.clone()).or_default().insert(fb);
                }
                flip(dev, b, &mut rng);
                flips[*d as usize] += 1;
            }
        }
    }
    fs.close().unwrap();
    Damaged { pool, files, lost, flips }
}

#[test]
fn checksum_errors_count_against_the_device_that_holds_the_bad_block() {
    let pool = MemPool::new(3, 64 * MB);
    let fs = pool.open().unwrap();
    let data = pattern(9, 1 << 20);
    fs.write_file("/s", &data, Some("stripe(unit=64K,width=3)")).unwrap();
    fs.close().unwrap();
    drop(fs);
    let fs = pool.open().unwrap();
    let ext = fs.device_extents_of("/s").unwrap();
    assert_eq!(ext.iter().map(|e| e.0).collect::<BTreeSet<_>>().len(), 3, "{ext:?}");
    let on1: Vec<u64> = ext.iter().filter(|e| e.0 == 1).flat_map(|&(_, s, l)| s..s + l).collect();
    let mut rng = StdRng::seed_from_u64(1);
    let fb = file_block_at(&pool.devs[1], on1[3], &data);
    flip(&pool.devs[1], on1[3], &mut rng);
    let e = fs.read_file("/s").unwrap_err();
    assert_eq!(e.errno(), 5, "{e}");
    let c = checksum_errors(&fs);
    assert!(c[1] > 0 && c[0] == 0 && c[2] == 0, "counted against {c:?}, the bad block is on device 1");
    assert!(e.to_string().contains("device 1") && !e.to_string().contains("device 0"), "{e}");
    // The read put the file on the list, with the one bad block.
    assert_eq!(listed(&fs), BTreeMap::from([("/s".to_string(), BTreeSet::from([fb]))]));
    assert_eq!(fs.data_errors()[0].source, ErrorSource::Read);
}

#[test]
fn the_permanent_error_list_follows_the_model() {
    for seed in 1..=3u64 {
        let d = damage(seed);
        let fs = d.pool.open().unwrap();
        assert!(!d.lost.is_empty(), "seed {seed}");

        // Reads: every damaged file fails and is listed with blocks it lost.
        for (path, data) in &d.files {
            match fs.read_file(path) {
                Ok(got) => {
                    assert!(!d.lost.contains_key(path), "seed {seed}: {path} read despite a flipped block");
                    assert!(got == *data, "seed {seed}: {path}");
                }
                Err(e) => assert!(d.lost.contains_key(path), "seed {seed}: {path}: {e}"),
            }
        }
        let after_reads = listed(&fs);
        assert_eq!(after_reads.keys().collect::<Vec<_>>(), d.lost.keys().collect::<Vec<_>>(), "seed {seed}");
        for (p, blocks) in &after_reads {
            assert!(!blocks.is_empty() && blocks.is_subset(&d.lost[p]), "seed {seed}: {p}: {blocks:?}");
        }

        // A scrub: exactly the model, by block; every error on its device.
        let r = fs.scrub(&repair(), &|_| {}).unwrap();
        assert_eq!(r.lost.len(), d.lost.len(), "seed {seed}");
        assert_eq!(listed(&fs), d.lost, "seed {seed}");
        assert!(fs.data_errors().iter().all(|e| e.source == ErrorSource::Scrub));
        let c = checksum_errors(&fs);
        for (dev, &n) in d.flips.iter().enumerate() {
            assert_eq!(c[dev] > 0, n > 0, "seed {seed}: device {dev}: {n} flips, {} checksum errors", c[dev]);
        }
        assert_eq!(fs.health(10).error_files, d.lost.len() as u64);

        // Kept across opens.
        fs.close().unwrap();
        drop(fs);
        let fs = d.pool.open().unwrap();
        assert_eq!(listed(&fs), d.lost, "seed {seed}: after a reopen");

        // Each way out of the list, on one damaged file each.
        let mut model = d.lost.clone();
        let mut damaged: Vec<String> = model.keys().cloned().collect();
        damaged.sort();
        let rewrite = &damaged[0];
        for &b in &model[rewrite] {
            let f = OpenOptions::new().write(true).open(&fs, rewrite).unwrap();
            let at = (b * BS) as usize;
            f.write_at(&d.files[rewrite][at..at + BS as usize], b * BS).unwrap();
        }
        model.remove(rewrite);
        assert_eq!(listed(&fs), model, "seed {seed}: {rewrite} written again");
        assert_eq!(fs.read_file(rewrite).unwrap(), d.files[rewrite]);
        if let Some(gone) = damaged.get(1) {
            fs.remove(gone).unwrap();
            model.remove(gone);
            assert_eq!(listed(&fs), model, "seed {seed}: {gone} deleted");
        }
        if let Some(cut) = damaged.get(2) {
            let first = *model[cut].first().unwrap();
            OpenOptions::new().write(true).open(&fs, cut).unwrap().set_len(first * BS).unwrap();
            model.remove(cut);
            assert_eq!(listed(&fs), model, "seed {seed}: {cut} truncated before its damage");
        }
        // Durable with the next checkpoint.
        fs.close().unwrap();
        drop(fs);
        let fs = d.pool.open().unwrap();
        assert_eq!(listed(&fs), model, "seed {seed}: after a reopen");

        // A scrub that reads a file clean (its blocks written back as
        // they were, behind the pool's back) drops it.
        if let Some((healed, blocks)) = model.iter().next().map(|(p, b)| (p.clone(), b.clone())) {
            let ext = fs.device_extents_of(&healed).unwrap();
            for (dev, s, l) in ext {
                for b in s..s + l {
                    let mut buf = vec![0u8; BS as usize];
                    let m = &d.pool.devs[dev as usize];
                    m.read_at(&mut buf, b * BS).unwrap();
                    // The block of the file this device block held before the flip.
                    let data = &d.files[&healed];
                    let best = data
                        .chunks(BS as usize)
                        .enumerate()
                        .filter(|(i, _)| blocks.contains(&(*i as u64)))
                        .find(|(_, c)| c.iter().zip(&buf).filter(|(x, y)| x != y).count() == 1);
                    if let Some((_, c)) = best {
                        m.write_at(c, b * BS).unwrap();
                    }
                }
            }
            fs.drop_caches();
            fs.scrub(&ScrubOptions::default(), &|_| {}).unwrap();
            model.remove(&healed);
            assert_eq!(listed(&fs), model, "seed {seed}: {healed} scrubbed clean");
        }

        // Cleared, durably.
        assert_eq!(fs.clear_data_errors().unwrap(), model.len());
        assert!(fs.data_errors().is_empty());
        fs.close().unwrap();
        drop(fs);
        let fs = d.pool.open().unwrap();
        assert!(fs.data_errors().is_empty(), "seed {seed}: cleared list after a reopen");
        // A file still damaged comes back with the next scrub.
        let r = fs.scrub(&repair(), &|_| {}).unwrap();
        assert_eq!(r.lost.len(), model.len());
        assert_eq!(listed(&fs), model, "seed {seed}: found again");
        check_clean(&fs, "after the error list's changes");
        fs.close().unwrap();
    }
}

#[test]
fn fsck_data_records_what_it_finds() {
    let d = damage(11);
    let fs = d.pool.open().unwrap();
    let r = hurricane::fsck::check_data(&fs, &mut |_, _, _| {}).unwrap();
    assert_eq!(r.damaged.len(), d.lost.len());
    assert_eq!(listed(&fs), d.lost);
    assert!(fs.data_errors().iter().all(|e| e.source == ErrorSource::Fsck));
    fs.close().unwrap();
    drop(fs);
    assert_eq!(listed(&d.pool.open().unwrap()), d.lost, "written with the checkpoint");
}

/// A device overwritten with garbage under a running pool, then replaced
/// while it still reads: what it held wrong is rebuilt from the other
/// copies, and what had no other copy is reported and listed.
#[test]
fn replace_verifies_what_it_copies_and_rebuilds_bad_blocks() {
    let pool = MemPool::new(3, 64 * MB);
    let fs = pool.open().unwrap();
    let mirrored = pattern(21, 3 << 20);
    let plain = pattern(22, 256 << 10);
    let other = pattern(23, 256 << 10);
    fs.write_file("/m", &mirrored, Some("replicate(copies=2)[extent@0,extent@1]")).unwrap();
    fs.write_file("/p", &plain, Some("extent@0")).unwrap();
    fs.write_file("/q", &other, Some("extent@2")).unwrap();
    fs.sync().unwrap();
    // Garbage over every block of device 0 that holds file data.
    let mut rng = StdRng::seed_from_u64(5);
    let mut garbage = 0u64;
    for path in ["/m", "/p"] {
        for (d, s, l) in fs.device_extents_of(path).unwrap() {
            if d != 0 {
                continue;
            }
            for b in s..s + l {
                let mut junk = vec![0u8; BS as usize];
                rng.fill(&mut junk[..]);
                pool.devs[0].write_at(&junk, b * BS).unwrap();
                garbage += 1;
            }
        }
    }
    fs.drop_caches();
    let new = Arc::new(MemDevice::new("new0", 64 * MB));
    let r = fs.replace_device(0, new.clone(), &ReplaceOptions::default(), &|_| {}).unwrap();
    assert!(r.copied_bytes > 0);
    let v = r.verify.expect("a copy is verified");
    assert!(v.complete);
    // Every mirrored block on the device was rebuilt; /p had no other copy.
    assert_eq!(v.repaired_blocks, mirrored.len() as u64 / BS, "{garbage} blocks of garbage");
    assert_eq!(v.lost.len(), 1, "{:?}", v.lost);
    assert_eq!(v.lost[0].paths, vec!["/p".to_string()]);
    assert_eq!(v.lost[0].ranges, vec![(0, plain.len() as u64)]);
    // /q, on another device, was not read.
    assert_eq!(v.files, 2);
    let c = checksum_errors(&fs);
    assert!(c[0] > 0 && c[1] == 0 && c[2] == 0, "{c:?}");
    let errs = fs.data_errors();
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].source, ErrorSource::Replace);
    // The new device holds the mirror's copy as written.
    fs.drop_caches();
    assert_eq!(fs.read_file("/m").unwrap(), mirrored);
    let again = fs.scrub(&ScrubOptions::default(), &|_| {}).unwrap();
    assert_eq!(again.repaired_blocks, 0);
    assert_eq!(again.lost.len(), 1);
    fs.close().unwrap();
}

/// A meta-file copy that rotted: the scrub's check of the copies counts
/// each bad block against the device of the copy that holds it, and the
/// checkpoint that follows makes the copy whole.
#[test]
fn meta_file_errors_count_against_the_copy_device() {
    use hurricane::blocks::Layout;
    use hurricane::codec::Decoder;
    use hurricane::pool::Superblock;
    let pool = MemPool::new(3, 64 * MB);
    let fs = pool.open().unwrap();
    for i in 0..300 {
        fs.write_file(&format!("/f{i}"), &pattern(i, 100), None).unwrap();
    }
    fs.close().unwrap();
    drop(fs);
    let sb = (0..2u64)
        .filter_map(|s| {
            let mut b = vec![0u8; BS as usize];
            pool.devs[0].read_at(&mut b, s * BS).unwrap();
            Superblock::decode(&b, "mem0").unwrap()
        })
        .max_by_key(|s| s.generation)
        .unwrap();
    let meta = Layout::decode(&mut Decoder::new(&sb.meta_layout, "meta")).unwrap();
    let mut ext = Vec::new();
    meta.extents(&mut |d, s, l| ext.push((d, s, l)));
    let devs: BTreeSet<u32> = ext.iter().map(|e| e.0).collect();
    assert!(devs.len() >= 2, "the meta-file keeps copies: {ext:?}");
    let bad_dev = *devs.iter().next().unwrap();
    // Blocks 1.. of the copy's first extent: the store's pages (block 0 is
    // redb's header, checked by redb).
    let &(_, s, l) = ext.iter().find(|e| e.0 == bad_dev).unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    let n = (l - 1).min(8);
    for b in s + 1..s + 1 + n {
        flip(&pool.devs[bad_dev as usize], b, &mut rng);
    }
    let fs = pool.open().unwrap();
    let r = fs.scrub(&repair(), &|_| {}).unwrap();
    assert!(r.complete && r.meta_lost_blocks == 0);
    let c = checksum_errors(&fs);
    for (d, &k) in c.iter().enumerate() {
        assert_eq!(k > 0, d as u32 == bad_dev, "device {d}: {k} checksum errors ({c:?}); copy on {bad_dev} rotted");
    }
    assert!(c[bad_dev as usize] >= n, "{c:?}: {n} blocks flipped");
    assert!(fs.data_errors().is_empty(), "meta-data with a good copy is no permanent error");
    // The copy was made whole: a second scrub finds nothing.
    let before = checksum_errors(&fs);
    fs.scrub(&repair(), &|_| {}).unwrap();
    assert_eq!(checksum_errors(&fs), before);
    fs.close().unwrap();
}

/// Zeroing or punching the damaged blocks (fallocate) leaves nothing
/// damaged: the entry goes, block by block.
#[test]
fn punched_or_zeroed_damage_leaves_the_list() {
    let pool = MemPool::new(1, 64 * MB);
    let fs = pool.open().unwrap();
    let data = pattern(31, 64 * BS as usize);
    fs.write_file("/f", &data, Some("extent@0")).unwrap();
    fs.close().unwrap();
    drop(fs);
    let fs = pool.open().unwrap();
    let ext = fs.device_extents_of("/f").unwrap();
    let blocks: Vec<u64> = ext.iter().flat_map(|&(_, s, l)| s..s + l).collect();
    let mut rng = StdRng::seed_from_u64(2);
    let mut bad = BTreeSet::new();
    for &b in &[blocks[3], blocks[40]] {
        bad.insert(file_block_at(&pool.devs[0], b, &data));
        flip(&pool.devs[0], b, &mut rng);
    }
    fs.scrub(&repair(), &|_| {}).unwrap();
    assert_eq!(listed(&fs), BTreeMap::from([("/f".to_string(), bad.clone())]));
    let ino = fs.resolve("/f").unwrap();
    let first = *bad.first().unwrap();
    fs.fallocate(ino, first * BS + 100, 10, libc_punch()).unwrap_err();
    assert_eq!(listed(&fs)["/f"], bad, "a partial punch reads the damaged block first, and fails");
    fs.fallocate(ino, first * BS, BS, libc_punch()).unwrap();
    bad.remove(&first);
    assert_eq!(listed(&fs), BTreeMap::from([("/f".to_string(), bad.clone())]));
    let last = *bad.first().unwrap();
    fs.fallocate(ino, last * BS, BS, 0x10 /* FALLOC_FL_ZERO_RANGE */).unwrap();
    assert!(fs.data_errors().is_empty());
    let mut want = data.clone();
    for b in [first, last] {
        want[(b * BS) as usize..((b + 1) * BS) as usize].fill(0);
    }
    assert_eq!(fs.read_file("/f").unwrap(), want);
}

/// FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE.
fn libc_punch() -> i32 {
    0x02 | 0x01
}
