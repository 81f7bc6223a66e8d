//! `parity` files through the engine API: copy-on-write stripes across
//! journal replay and checkpoints, devices lost while the pool is open,
//! degraded writes remembered across a reopen.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{pattern, MemPool, MB};
use hurricane::device::DeviceState;
use hurricane::{Fs, OpenOptions};

fn fsck_clean(fs: &Fs) {
    let r = hurricane::fsck::check(fs, false, &mut |_, _, _| {}).expect("fsck runs");
    assert!(r.is_clean(), "{r:?}");
}

/// Overwrites `len` bytes at `off` in the file and in the model.
fn overwrite(fs: &Fs, model: &mut Vec<u8>, path: &str, off: usize, len: usize, seed: u64) {
    let d = pattern(seed, len);
    let mut f = OpenOptions::new().read(true).write(true).open(fs, path).unwrap();
    f.write_all_at(&d, off as u64).unwrap();
    if model.len() < off + len {
        model.resize(off + len, 0);
    }
    model[off..off + len].copy_from_slice(&d);
}

#[test]
fn parity_files_survive_replay_and_checkpoints() {
    let pool = MemPool::new(4, 64 * MB);
    let mut model = pattern(1, 3 * MB as usize + 12345);
    {
        let fs = pool.open().unwrap();
        fs.write_file("/p", &model, Some("parity(data=3,parity=1)")).unwrap();
        let l = fs.layout_of("/p").unwrap();
        assert!(l.starts_with("parity(data=3)[") && l.matches("extent@").count() == 4, "{l}");
        // Unaligned overwrites: partial stripes, read-merge-write.
        for (i, (off, len)) in [(5, 100), (4096 * 7 - 3, 9000), (1 << 20, 12288), (3 << 20, 20000)].iter().enumerate() {
            overwrite(&fs, &mut model, "/p", *off, *len, 10 + i as u64);
        }
        fs.sync().unwrap();
        overwrite(&fs, &mut model, "/p", 777, 5000, 20);
        fs.close().unwrap();
    }
    {
        // Journal replay.
        let fs = pool.open().unwrap();
        assert!(fs.read_file("/p").unwrap() == model);
        fsck_clean(&fs);
        fs.checkpoint().unwrap();
        let f = OpenOptions::new().write(true).open(&fs, "/p").unwrap();
        f.set_len(2 * MB + 5).unwrap();
        model.truncate(2 * MB as usize + 5);
        fs.close().unwrap();
    }
    let fs = pool.open().unwrap();
    assert!(fs.read_file("/p").unwrap() == model);
    fsck_clean(&fs);
}

#[test]
fn a_lost_device_is_rebuilt_from_parity_and_degraded_writes_persist() {
    let pool = MemPool::new(5, 64 * MB);
    let mut model = pattern(2, 2 * MB as usize);
    {
        let fs = pool.open().unwrap();
        fs.write_file("/p", &model, Some("parity(data=3,parity=2,unit=8K)")).unwrap();
        fs.sync().unwrap();
        fs.storage().devs[1].set_state(DeviceState::Missing);
        fs.storage().devs[3].set_state(DeviceState::Missing);
        assert!(fs.read_file("/p").unwrap() == model, "two of five devices gone");
        // Writes go on with one device gone; the missed units are recorded.
        fs.storage().devs[1].set_state(DeviceState::Online);
        overwrite(&fs, &mut model, "/p", 100_000, 300_000, 3);
        overwrite(&fs, &mut model, "/p", 0, 10, 4);
        assert!(fs.read_file("/p").unwrap() == model);
        // A third device gone is too many for the stripes written degraded.
        fs.storage().devs[0].set_state(DeviceState::Missing);
        fs.storage().devs[2].set_state(DeviceState::Missing);
        let f = fs.open_file("/p").unwrap();
        let mut buf = vec![0u8; 300_000];
        let e = f.read_at(&mut buf, 100_000).unwrap_err().to_string();
        assert!(e.contains("device 0 (mem0)") && e.contains("device 2 (mem2)"), "{e}");
        for d in 0..5 {
            fs.storage().devs[d].set_state(DeviceState::Online);
        }
        fs.close().unwrap();
    }
    // Device 3 is back with holes where the degraded writes went: the
    // reopened pool knows them from the journal and never reads them.
    let fs = pool.open().unwrap();
    assert!(fs.read_file("/p").unwrap() == model);
    fs.checkpoint().unwrap();
    fs.close().unwrap();
    let fs = pool.open().unwrap();
    fs.storage().devs[4].set_state(DeviceState::Missing);
    assert!(fs.read_file("/p").unwrap() == model, "after a checkpoint, another device gone");
    fs.storage().devs[4].set_state(DeviceState::Online);
    fsck_clean(&fs);
}

#[test]
fn the_resolver_gives_a_childless_spec_data_plus_parity_children() {
    use hurricane::layout::{parse, resolve, PoolInfo};
    let r = resolve(&parse("parity(data=3,parity=2)").unwrap(), &PoolInfo::new(vec![1000; 7])).unwrap();
    assert_eq!(r.children.len(), 5);
    hurricane::blocks::Layout::build(&r).unwrap();
    let r = resolve(&parse("parity(data=4)").unwrap(), &PoolInfo::new(vec![1000; 7])).unwrap();
    assert_eq!(r.children.len(), 5);
    let e = resolve(&parse("parity(data=6,parity=2)").unwrap(), &PoolInfo::new(vec![1000; 7])).unwrap_err();
    assert!(e.to_string().contains("needs 8 distinct devices"), "{e}");
}

/// The device block of each unit of a one-stripe file with 4 KiB units:
/// (device, block, bytes), data units first in file order, then the parity
/// units.
fn units_of(pool: &MemPool, fs: &Fs, path: &str, data: &[u8]) -> Vec<(u32, u64, Vec<u8>)> {
    use hurricane::device::Device;
    let ext = fs.device_extents_of(path).unwrap();
    let mut units: Vec<(u32, u64, Vec<u8>)> = ext
        .iter()
        .map(|&(d, b, len)| {
            assert_eq!(len, 1, "{ext:?}");
            let mut buf = vec![0u8; 4096];
            pool.devs[d as usize].read_at(&mut buf, b * 4096).unwrap();
            (d, b, buf)
        })
        .collect();
    let pos = |u: &(u32, u64, Vec<u8>)| data.chunks(4096).position(|c| c == u.2.as_slice()).unwrap_or(usize::MAX);
    units.sort_by_key(pos);
    units
}

fn flip(pool: &MemPool, d: u32, b: u64) {
    use hurricane::device::Device;
    let mut buf = vec![0u8; 4096];
    pool.devs[d as usize].read_at(&mut buf, b * 4096).unwrap();
    buf[77] ^= 0x10;
    pool.devs[d as usize].write_at(&buf, b * 4096).unwrap();
}

fn block_at(pool: &MemPool, d: u32, b: u64) -> Vec<u8> {
    use hurricane::device::Device;
    let mut buf = vec![0u8; 4096];
    pool.devs[d as usize].read_at(&mut buf, b * 4096).unwrap();
    buf
}

/// The units' bytes, in the order `units_of` gives.
fn contents(units: &[(u32, u64, Vec<u8>)]) -> Vec<Vec<u8>> {
    units.iter().map(|u| u.2.clone()).collect()
}

fn repair() -> hurricane::fs::ScrubOptions {
    hurricane::fs::ScrubOptions { repair: true, ..Default::default() }
}

#[test]
fn a_reconstructing_read_rewrites_the_bad_parity_units_it_read() {
    let pool = MemPool::new(4, 64 * MB);
    let fs = pool.open().unwrap();
    let data = pattern(90, 8192);
    fs.write_file("/p", &data, Some("parity(data=2,parity=2,unit=4K)")).unwrap();
    fs.sync().unwrap();
    let units = units_of(&pool, &fs, "/p", &data);
    assert_eq!(units[0].2, data[..4096]);
    assert_eq!(units[1].2, data[4096..]);
    // Data unit 0 and parity unit 0 damaged: the read needs the other
    // parity unit and reads both.
    flip(&pool, units[0].0, units[0].1);
    flip(&pool, units[2].0, units[2].1);
    fs.drop_caches();
    assert_eq!(fs.read_file("/p").unwrap(), data);
    // Rewrites are copy-on-write under the checksum blocks: the units are
    // where the file's extents now say, holding what they held before.
    assert!(contents(&units_of(&pool, &fs, "/p", &data)) == contents(&units), "a unit is not repaired");
    // Nothing is left for a scrub.
    let r = fs.scrub(&repair(), &|_| {}).unwrap();
    assert_eq!(r.repaired_blocks, 0);
    assert!(r.lost.is_empty());
}

#[test]
fn with_one_parity_unit_the_checksums_tell_which_unit_is_bad() {
    let pool = MemPool::new(4, 64 * MB);
    let fs = pool.open().unwrap();
    let data = pattern(91, 3 * 4096);
    fs.write_file("/p", &data, Some("parity(data=3,parity=1,unit=4K)")).unwrap();
    fs.sync().unwrap();
    let units = units_of(&pool, &fs, "/p", &data);
    for bad in [3, 1] {
        flip(&pool, units[bad].0, units[bad].1);
        fs.drop_caches();
        let r = fs.scrub(&repair(), &|_| {}).unwrap();
        assert!(r.lost.is_empty(), "unit {bad}: {:?}", r.lost);
        assert_eq!(r.repaired_blocks, 1, "unit {bad}: only the bad unit is rewritten");
        assert!(contents(&units_of(&pool, &fs, "/p", &data)) == contents(&units), "unit {bad} is not repaired");
    }
    assert_eq!(fs.read_file("/p").unwrap(), data);
}

#[test]
fn with_one_parity_unit_and_no_checksums_a_mismatch_reports_the_stripe() {
    let opts = hurricane::FormatOptions { checksum: false, ..Default::default() };
    let pool = MemPool::with(4, 64 * MB, &opts);
    let fs = pool.open().unwrap();
    let data = pattern(92, 3 * 4096);
    fs.write_file("/p", &data, Some("parity(data=3,parity=1,unit=4K)")).unwrap();
    fs.sync().unwrap();
    let units = units_of(&pool, &fs, "/p", &data);
    flip(&pool, units[3].0, units[3].1);
    fs.drop_caches();
    // Nothing tells the bad unit: the stripe is reported, nothing rewritten.
    let r = fs.scrub(&repair(), &|_| {}).unwrap();
    assert_eq!(r.repaired_blocks, 0);
    assert_eq!(r.lost.len(), 1);
    assert_eq!(r.lost[0].paths, vec!["/p".to_string()]);
    assert_eq!(r.lost[0].ranges, vec![(0, 3 * 4096)]);
    for (d, b, good) in &units[..3] {
        assert!(block_at(&pool, *d, *b) == *good, "data on device {d} is left as it was");
    }
}
