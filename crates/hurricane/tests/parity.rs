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
