//! `colocate` through the native API: a directory default that keeps its
//! small files together, group reads after a reopen, keys by owner,
//! growth past the group, and freed space that comes back to another file
//! never showing what it held.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::{check_clean, pattern, MemPool, MB};
use hurricane::xattr::DIR_LAYOUT as DIR_LAYOUT_XATTR;
use hurricane::{Creds, Fs};

const BS: usize = 4096;

fn dir_with_default(fs: &Fs, path: &str, spec: &str) -> u64 {
    let ino = fs.mkdir_all(path, 0o777).unwrap();
    fs.setxattr(&Creds::root(), ino, DIR_LAYOUT_XATTR.as_bytes(), spec.as_bytes(), 0).unwrap();
    ino
}

/// First device block of each file, by path.
fn first_blocks(fs: &Fs, paths: &[String]) -> Vec<(u32, u64)> {
    paths
        .iter()
        .map(|p| {
            let e = fs.device_extents_of(p).unwrap();
            assert_eq!(e.len(), 1, "{p}: {e:?}");
            (e[0].0, e[0].1)
        })
        .collect()
}

#[test]
fn small_files_of_a_directory_lie_together_and_read_back_a_group_at_a_time() {
    let p = MemPool::new(1, 64 * MB);
    let fs = p.open().unwrap();
    let dirs: Vec<String> = (0..4).map(|d| format!("/d{d}")).collect();
    for d in &dirs {
        dir_with_default(&fs, d, "colocate");
    }
    // Files created round robin over the directories, as an unpacked
    // archive or a mail spool interleaves them.
    let mut files: Vec<Vec<String>> = vec![Vec::new(); dirs.len()];
    for i in 0..40 {
        for (d, dir) in dirs.iter().enumerate() {
            let path = format!("{dir}/f{i}");
            fs.write_file(&path, &pattern((d * 1000 + i) as u64, BS), None).unwrap();
            files[d].push(path);
        }
    }
    assert_eq!(fs.layout_of(&files[0][0]).unwrap(), "checksum[colocate@0]");
    for (d, fl) in files.iter().enumerate() {
        let blocks = first_blocks(&fs, fl);
        // One directory's files are consecutive blocks, 16 to a group.
        for w in blocks.windows(2) {
            let (a, b) = (w[0].1, w[1].1);
            assert!(b == a + 1 || (b % 16 == 0 && a % 16 == 15), "dir {d}: {blocks:?}");
        }
    }
    fs.close().unwrap();
    drop(fs);
    let fs = p.open().unwrap();
    let before = fs.group_stats();
    for (d, fl) in files.iter().enumerate() {
        for (i, path) in fl.iter().enumerate() {
            assert_eq!(fs.read_file(path).unwrap(), pattern((d * 1000 + i) as u64, BS), "{path}");
        }
    }
    let s = fs.group_stats();
    // 40 files a directory, 16 to a group: 3 group reads each.
    assert_eq!(s.group_reads - before.group_reads, 4 * 3, "{s:?}");
    assert_eq!(s.cache_hits - before.cache_hits, 160 - 12, "{s:?}");
    check_clean(&fs, "after the reads");
}

#[test]
fn keyed_by_owner_two_users_files_in_one_directory_keep_apart() {
    let p = MemPool::new(1, 64 * MB);
    let fs = p.open().unwrap();
    let dir = dir_with_default(&fs, "/shared", "colocate(key=owner)");
    let mut by_user: Vec<Vec<String>> = vec![Vec::new(), Vec::new()];
    for i in 0..10 {
        for (u, files) in by_user.iter_mut().enumerate() {
            let cred = Creds::user(1000 + u as u32, 1000);
            let name = format!("u{u}-{i}");
            let a = fs.mknod(&cred, dir, name.as_bytes(), libc::S_IFREG | 0o644, 0, None, None).unwrap();
            fs.write(a.ino, 0, &pattern(i as u64, BS)).unwrap();
            files.push(format!("/shared/{name}"));
        }
    }
    for files in &by_user {
        let blocks = first_blocks(&fs, files);
        assert!(blocks.windows(2).all(|w| w[1].1 == w[0].1 + 1), "{blocks:?}");
    }
    check_clean(&fs, "owner keys");
}

#[test]
fn growth_shrinking_and_renames_keep_every_byte() {
    let p = MemPool::new(2, 64 * MB);
    let fs = p.open().unwrap();
    dir_with_default(&fs, "/a", "colocate(group=32K)");
    dir_with_default(&fs, "/b", "colocate(group=32K)");
    let mut model = Vec::new();
    for i in 0..12 {
        let data = pattern(i, 1000 + i as usize * 3000);
        fs.write_file(&format!("/a/f{i}"), &data, None).unwrap();
        model.push((format!("/a/f{i}"), data));
    }
    // One grows far past its group, one shrinks, one moves to /b.
    let big = pattern(99, 3 * MB as usize);
    fs.write_file("/a/f3", &big, None).unwrap();
    model[3].1 = big;
    let f5 = fs.open_file("/a/f5").unwrap();
    fs.truncate(f5.ino(), 100).unwrap();
    model[5].1.truncate(100);
    fs.rename_path("/a/f7", "/b/f7").unwrap();
    model[7].0 = "/b/f7".into();
    fs.write_file("/b/new", &pattern(7, 5000), None).unwrap();
    model.push(("/b/new".into(), pattern(7, 5000)));
    for (path, data) in &model {
        assert_eq!(&fs.read_file(path).unwrap(), data, "{path}");
    }
    check_clean(&fs, "after growth");
    fs.close().unwrap();
    drop(fs);
    let fs = p.open().unwrap();
    for (path, data) in &model {
        assert_eq!(&fs.read_file(path).unwrap(), data, "{path} after reopen");
    }
    check_clean(&fs, "after reopen");
}

#[test]
fn space_a_cached_file_gave_back_never_shows_its_old_data() {
    let p = MemPool::new(1, 64 * MB);
    let fs = p.open().unwrap();
    dir_with_default(&fs, "/d", "colocate");
    let secret = vec![0x5Au8; BS];
    for i in 0..8 {
        fs.write_file(&format!("/d/s{i}"), &secret, None).unwrap();
    }
    fs.close().unwrap();
    drop(fs);
    let fs = p.open().unwrap();
    // Read once: the whole group is now in the group cache.
    assert_eq!(fs.read_file("/d/s0").unwrap(), secret);
    assert!(fs.group_stats().cached_blocks >= 8);
    for i in 0..8 {
        fs.remove(&format!("/d/s{i}")).unwrap();
    }
    fs.sync().unwrap();
    // New files take the same blocks: preallocated ones read as zeros,
    // written ones as what was written, never the cached secret.
    for i in 0..8 {
        let path = format!("/d/n{i}");
        let f = fs.create(&path, None).unwrap();
        if i % 2 == 0 {
            fs.fallocate(f.ino(), 0, BS as u64, 0).unwrap();
            assert_eq!(fs.read_file(&path).unwrap(), vec![0u8; BS], "{path}");
        } else {
            fs.write(f.ino(), 0, &pattern(i, BS)).unwrap();
            assert_eq!(fs.read_file(&path).unwrap(), pattern(i, BS), "{path}");
        }
    }
    check_clean(&fs, "after reuse");
}

#[test]
fn a_directory_picks_one_device_for_its_small_files() {
    let p = MemPool::new(4, 64 * MB);
    let fs = p.open().unwrap();
    let mut devices = std::collections::BTreeSet::new();
    for d in 0..8 {
        dir_with_default(&fs, &format!("/d{d}"), "colocate");
    }
    for i in 0..6 {
        for d in 0..8 {
            fs.write_file(&format!("/d{d}/f{i}"), &pattern(i, BS), None).unwrap();
        }
    }
    for d in 0..8 {
        let files: Vec<String> = (0..6).map(|i| format!("/d{d}/f{i}")).collect();
        let blocks = first_blocks(&fs, &files);
        assert!(blocks.iter().all(|b| b.0 == blocks[0].0), "dir {d}: {blocks:?}");
        assert!(blocks.windows(2).all(|w| w[1].1 == w[0].1 + 1), "dir {d}: {blocks:?}");
        devices.insert(blocks[0].0);
    }
    assert!(devices.len() > 1, "directories spread over the devices: {devices:?}");
    check_clean(&fs, "four devices");
}

/// Whether `path`'s blocks are one run inside one aligned group of `group`
/// blocks (for files of at most a group).
fn together(fs: &Fs, path: &str, group: u64) -> bool {
    let e = fs.device_extents_of(path).unwrap();
    e.len() == 1 && e[0].1 / group == (e[0].1 + e[0].2 - 1) / group
}

/// Appends `data` to the file at `path`.
fn append(fs: &Fs, path: &str, data: &[u8]) {
    let ino = fs.resolve(path).unwrap();
    let size = fs.getattr(ino).unwrap().size;
    fs.write(ino, size, data).unwrap();
}

#[test]
fn fsck_notes_files_scattered_by_growth_and_renames_and_repair_regroups_them() {
    let p = MemPool::new(1, 64 * MB);
    let fs = p.open().unwrap();
    dir_with_default(&fs, "/a", "colocate");
    dir_with_default(&fs, "/b", "colocate");
    let mut model: Vec<(String, Vec<u8>)> = Vec::new();
    // One block each, the two directories alternately.
    for i in 0..6 {
        for d in ["a", "b"] {
            let path = format!("/{d}/f{i}");
            let data = pattern(model.len() as u64, BS);
            fs.write_file(&path, &data, None).unwrap();
            model.push((path, data));
        }
    }
    // Each grows by a block after the others were created: the block after
    // its first is taken, so its second goes further on in the group.
    for (k, (path, data)) in model.iter_mut().enumerate() {
        let more = pattern(100 + k as u64, BS);
        append(&fs, path, &more);
        data.extend_from_slice(&more);
    }
    // One moves to /b and grows there: now over two groups.
    fs.rename_path("/a/f0", "/b/moved").unwrap();
    model[0].0 = "/b/moved".into();
    let more = pattern(200, 1000);
    append(&fs, "/b/moved", &more);
    model[0].1.extend_from_slice(&more);
    // Written in one go: together from the start.
    let whole = pattern(300, 3 * BS);
    fs.write_file("/a/whole", &whole, None).unwrap();
    assert!(together(&fs, "/a/whole", 16));
    let scattered = model.iter().filter(|(path, _)| !together(&fs, path, 16)).count();
    assert_eq!(scattered, model.len(), "every grown file is scattered");
    model.push(("/a/whole".into(), whole));
    fs.sync().unwrap();

    // Without repair: a note, not a problem, and nothing moves.
    let before: Vec<_> = model.iter().map(|(path, _)| fs.device_extents_of(path).unwrap()).collect();
    let r = hurricane::fsck::check(&fs, false, &mut |_, _, _| {}).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    assert_eq!((r.scattered, r.regrouped), (scattered as u64, 0), "{r:?}");
    assert!(r.notes.iter().any(|n| n.contains("12 files have their small-file blocks scattered")), "{:?}", r.notes);
    let after: Vec<_> = model.iter().map(|(path, _)| fs.device_extents_of(path).unwrap()).collect();
    assert_eq!(before, after);
    for (path, data) in &model {
        assert_eq!(&fs.read_file(path).unwrap(), data, "{path}");
    }

    // With repair: each file one run in one group, every byte kept.
    let r = hurricane::fsck::check(&fs, true, &mut |_, _, _| {}).unwrap();
    assert!(r.is_clean(), "{:?}", r.remaining);
    assert!(r.problems.is_empty() && r.repaired.is_empty(), "{r:?}");
    assert_eq!((r.scattered, r.regrouped), (12, 12), "{r:?}");
    assert!(r.notes.iter().any(|n| n.contains("regrouped 12 of 12 files")), "{:?}", r.notes);
    for (path, _) in &model {
        assert!(together(&fs, path, 16), "{path}: {:?}", fs.device_extents_of(path).unwrap());
    }
    // The moved file went to a group of the directory it is in now (the
    // one /b was filling; its other files, regrouped after it, found that
    // full and went on in a new one), none of /a's.
    let group_of = |path: &str| fs.device_extents_of(path).unwrap()[0].1 / 16;
    let mut b_groups: Vec<u64> = before[1..12].iter().step_by(2).map(|e| e[0].1 / 16).collect();
    b_groups.extend((1..6).map(|i| group_of(&format!("/b/f{i}"))));
    let mut a_groups: Vec<u64> = before[2..12].iter().step_by(2).map(|e| e[0].1 / 16).collect();
    a_groups.extend((1..6).map(|i| group_of(&format!("/a/f{i}"))));
    let moved = group_of("/b/moved");
    assert!(b_groups.contains(&moved) && !a_groups.contains(&moved), "{moved}: /a {a_groups:?}, /b {b_groups:?}");
    for (path, data) in &model {
        assert_eq!(&fs.read_file(path).unwrap(), data, "{path}");
    }
    fs.close().unwrap();
    drop(fs);
    let fs = p.open().unwrap();
    for (path, data) in &model {
        assert_eq!(&fs.read_file(path).unwrap(), data, "{path} after reopen");
        assert!(together(&fs, path, 16), "{path} after reopen");
    }
    let r = hurricane::fsck::check(&fs, false, &mut |_, _, _| {}).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    assert_eq!(r.scattered, 0, "{:?}", r.notes);
    assert!(!r.notes.iter().any(|n| n.contains("scattered")), "{:?}", r.notes);
    check_clean(&fs, "after regrouping");
}

#[test]
fn regroup_moves_a_renamed_file_into_its_new_directorys_group_and_replays() {
    let p = MemPool::new(1, 64 * MB);
    let fs = p.open().unwrap();
    // Groups of eight blocks.
    dir_with_default(&fs, "/a", "colocate(group=32K)");
    dir_with_default(&fs, "/b", "colocate(group=32K)");
    fs.write_file("/a/f", &pattern(1, BS), None).unwrap();
    fs.write_file("/a/g", &pattern(2, BS), None).unwrap();
    fs.write_file("/b/h", &pattern(3, BS), None).unwrap();
    fs.rename_path("/a/f", "/b/f").unwrap();
    let mut data = pattern(1, BS);
    data.extend_from_slice(&pattern(4, 2 * BS));
    append(&fs, "/b/f", &pattern(4, 2 * BS));
    let ino = fs.resolve("/b/f").unwrap();
    assert!(!together(&fs, "/b/f", 8), "{:?}", fs.device_extents_of("/b/f").unwrap());
    // A file that is together, or not colocate at all, has nothing to move.
    assert_eq!(fs.regroup(fs.resolve("/b/h").unwrap()).unwrap(), 0);
    fs.write_file("/plain", &pattern(5, 3 * BS), Some("extent@0")).unwrap();
    assert_eq!(fs.regroup(fs.resolve("/plain").unwrap()).unwrap(), 0);

    assert_eq!(fs.regroup(ino).unwrap(), 3);
    assert_eq!(fs.regroup(ino).unwrap(), 0, "nothing left to move");
    assert!(together(&fs, "/b/f", 8), "{:?}", fs.device_extents_of("/b/f").unwrap());
    assert_eq!(fs.read_file("/b/f").unwrap(), data);
    let at = |path: &str| fs.device_extents_of(path).unwrap()[0];
    // Beside /b's other file, in its group.
    assert_eq!(at("/b/f").1 / 8, at("/b/h").1 / 8, "{:?} {:?}", at("/b/f"), at("/b/h"));
    check_clean(&fs, "after a regroup");
    let extents = fs.device_extents_of("/b/f").unwrap();
    // The moves are in the journal: a crash after the commit replays them.
    fs.sync().unwrap();
    let crashed = p.crash(hurricane::device::CrashMode::DropAll);
    drop(fs);
    let fs = crashed.open().unwrap();
    assert_eq!(fs.read_file("/b/f").unwrap(), data);
    assert_eq!(fs.device_extents_of("/b/f").unwrap(), extents);
    assert_eq!(fs.read_file("/a/g").unwrap(), pattern(2, BS));
    assert_eq!(fs.read_file("/b/h").unwrap(), pattern(3, BS));
    check_clean(&fs, "after replay");
}

/// Device write requests made so far, summed over the pool.
fn device_writes(fs: &Fs) -> u64 {
    fs.device_stats().iter().map(|(_, s)| s.writes).sum()
}

#[test]
fn small_files_written_together_leave_in_a_few_group_writes_at_sync() {
    let p = MemPool::new(1, 64 * MB);
    let fs = p.open().unwrap();
    dir_with_default(&fs, "/d", "colocate");
    fs.sync().unwrap();
    let (w0, g0) = (device_writes(&fs), fs.group_stats());
    let n = 64;
    for i in 0..n {
        fs.write_file(&format!("/d/f{i}"), &pattern(i, BS), None).unwrap();
    }
    // Held: nothing reached the device yet, and reads see every file.
    assert_eq!(device_writes(&fs), w0, "no device write before the commit");
    let g = fs.group_stats();
    assert_eq!(g.held_blocks - g0.held_blocks, n);
    assert_eq!(g.dirty_blocks, n);
    for i in 0..n {
        assert_eq!(fs.read_file(&format!("/d/f{i}")).unwrap(), pattern(i, BS), "f{i} before the sync");
    }
    fs.drop_caches();
    assert_eq!(fs.read_file("/d/f7").unwrap(), pattern(7, BS), "dropping caches keeps held blocks");
    fs.sync().unwrap();
    let g = fs.group_stats();
    let (writes, group_writes) = (device_writes(&fs) - w0, g.group_writes - g0.group_writes);
    // 64 blocks side by side: one request (groups are opened one after
    // another up the device), and the journal's own writes.
    assert!(group_writes <= 4, "{g:?}");
    assert_eq!(g.blocks_drained - g0.blocks_drained, n);
    assert_eq!(g.dirty_blocks, 0);
    assert!(writes < n / 4, "{writes} device writes for {n} files");
    // Overwrites (copy-on-write under the pool's checksums) group the same way.
    let w1 = device_writes(&fs);
    for i in 0..n {
        fs.write_file(&format!("/d/f{i}"), &pattern(1000 + i, BS), None).unwrap();
    }
    fs.sync().unwrap();
    assert!(device_writes(&fs) - w1 < n / 4, "overwrites: {} device writes", device_writes(&fs) - w1);
    // A power cut now keeps everything synced.
    let after = p.crash(hurricane::device::CrashMode::DropAll);
    drop(fs);
    let fs = after.open().unwrap();
    for i in 0..n {
        assert_eq!(fs.read_file(&format!("/d/f{i}")).unwrap(), pattern(1000 + i, BS), "f{i} after the cut");
    }
    check_clean(&fs, "after the cut");
}

#[test]
fn truncates_unlinks_and_punches_before_the_sync_drop_held_blocks() {
    let p = MemPool::new(1, 64 * MB);
    let fs = p.open().unwrap();
    dir_with_default(&fs, "/d", "colocate");
    let mut model: Vec<(String, Option<Vec<u8>>)> = Vec::new();
    for i in 0..24u64 {
        let path = format!("/d/f{i}");
        fs.write_file(&path, &pattern(i, 3 * BS + 100), None).unwrap();
        model.push((path, Some(pattern(i, 3 * BS + 100))));
    }
    assert_eq!(fs.group_stats().dirty_blocks, 24 * 4);
    for m in model.iter_mut().take(8) {
        fs.remove(&m.0).unwrap();
        m.1 = None;
    }
    for (i, m) in model.iter_mut().enumerate().skip(8).take(8) {
        let f = fs.open_file(&m.0).unwrap();
        fs.truncate(f.ino(), (i % 3) as u64 * BS as u64).unwrap();
        m.1.as_mut().unwrap().truncate((i % 3) * BS);
    }
    // The removed files' blocks and the truncated tails are held no more.
    let kept: usize = model.iter().filter_map(|m| m.1.as_ref()).map(|d| d.len().div_ceil(BS)).sum();
    assert_eq!(fs.group_stats().dirty_blocks, kept as u64);
    // New files take the space back only after the sync: nothing of the
    // removed files' held data ever lands on them.
    for (path, data) in model.iter().filter_map(|(p, d)| d.as_ref().map(|d| (p, d))) {
        assert_eq!(&fs.read_file(path).unwrap(), data, "{path} before the sync");
    }
    fs.sync().unwrap();
    for i in 0..8u64 {
        let path = format!("/d/n{i}");
        fs.write_file(&path, &pattern(500 + i, BS), None).unwrap();
        model.push((path, Some(pattern(500 + i, BS))));
    }
    fs.sync().unwrap();
    let after = p.crash(hurricane::device::CrashMode::DropAll);
    drop(fs);
    let fs = after.open().unwrap();
    for (path, data) in &model {
        match data {
            Some(d) => assert_eq!(&fs.read_file(path).unwrap(), d, "{path} after the cut"),
            None => assert!(fs.read_file(path).is_err(), "{path} was removed"),
        }
    }
    check_clean(&fs, "after truncates and unlinks");
}

/// A memory device whose writes time out while `stalled` is set, as a
/// device in a Ceph cluster does when its OSD does not answer: an error
/// the device calls transient, so the pool does not fault it.
struct Stalling {
    mem: std::sync::Arc<hurricane::device::MemDevice>,
    stalled: std::sync::atomic::AtomicBool,
}

impl hurricane::device::Device for Stalling {
    fn name(&self) -> &str {
        self.mem.name()
    }
    fn size(&self) -> u64 {
        self.mem.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> hurricane::Result<()> {
        self.mem.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> hurricane::Result<()> {
        if self.stalled.load(std::sync::atomic::Ordering::SeqCst) {
            let e = std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in time");
            return Err(hurricane::Error::io(format!("{} (write at {offset})", self.mem.name()), e));
        }
        self.mem.write_at(buf, offset)
    }
    fn flush(&self) -> hurricane::Result<()> {
        self.mem.flush()
    }
    fn transient(&self, e: &hurricane::Error) -> bool {
        e.is_timed_out()
    }
}

/// `n` memory devices of 32 MiB: the memories (to cut power on), and
/// devices over them for the pool, each behind a fault plan; device
/// `stalling`, if any, also behind a [`Stalling`] switch.
#[allow(clippy::type_complexity)]
fn fault_pool(
    n: usize,
    stalling: Option<usize>,
) -> (
    Vec<std::sync::Arc<hurricane::device::MemDevice>>,
    Vec<std::sync::Arc<hurricane::device::FaultPlan>>,
    Option<std::sync::Arc<Stalling>>,
    Fs,
) {
    use hurricane::device::{Device, FaultDevice, FaultPlan, MemDevice};
    use std::sync::Arc;
    let mems: Vec<Arc<MemDevice>> = (0..n).map(|i| Arc::new(MemDevice::new(format!("mem{i}"), 32 * MB))).collect();
    let plans: Vec<Arc<FaultPlan>> = (0..n).map(|_| Arc::new(FaultPlan::default())).collect();
    let stall = stalling.map(|i| Arc::new(Stalling { mem: mems[i].clone(), stalled: Default::default() }));
    let devs: Vec<Arc<dyn Device>> = (0..n)
        .map(|i| {
            let under: Arc<dyn Device> = match &stall {
                Some(s) if stalling == Some(i) => s.clone(),
                _ => mems[i].clone(),
            };
            Arc::new(FaultDevice::new(under, plans[i].clone())) as Arc<dyn Device>
        })
        .collect();
    Fs::format(devs.clone(), &hurricane::FormatOptions::default()).unwrap();
    let fs = Fs::open(devs, common::quiet()).unwrap();
    (mems, plans, stall, fs)
}

/// The pool as a power cut now leaves it, reopened on plain memory
/// devices (each device back as it was).
fn cut_and_open(mems: &[std::sync::Arc<hurricane::device::MemDevice>]) -> Fs {
    use hurricane::device::{CrashMode, Device, MemDevice};
    let after: Vec<std::sync::Arc<dyn Device>> = mems
        .iter()
        .enumerate()
        .map(|(i, m)| {
            std::sync::Arc::new(MemDevice::from_image(format!("mem{i}"), m.crash_image(CrashMode::DropAll)))
                as std::sync::Arc<dyn Device>
        })
        .collect();
    Fs::open(after, common::quiet()).unwrap()
}

#[test]
fn a_device_dying_with_held_writes_fails_its_files_once_and_commits_go_on() {
    use hurricane::device::{DeviceState, FaultSpec};
    let (mems, plans, _, fs) = fault_pool(2, None);
    dir_with_default(&fs, "/d", "colocate@1");
    dir_with_default(&fs, "/e", "extent@0");
    for i in 0..16 {
        fs.write_file(&format!("/d/a{i}"), &pattern(i, BS), None).unwrap();
    }
    fs.sync().unwrap();
    // The next files are held; in the same interval, a file on the
    // healthy device and a new directory.
    for i in 0..16 {
        fs.write_file(&format!("/d/b{i}"), &pattern(100 + i, BS), None).unwrap();
    }
    fs.write_file("/e/h", &pattern(5, 5 * BS), None).unwrap();
    fs.mkdir_path("/e/m", 0o755).unwrap();
    assert_eq!(fs.group_stats().dirty_blocks, 16);
    let (a0, b0, b1) = (
        fs.open_file("/d/a0").unwrap().ino(),
        fs.open_file("/d/b0").unwrap().ino(),
        fs.open_file("/d/b1").unwrap().ino(),
    );
    // Read while held: the pool's block cache keeps a copy.
    assert_eq!(fs.read_file("/d/b0").unwrap(), pattern(100, BS));
    // Device 1 fails every write (EIO) from now on.
    plans[1].set(FaultSpec { write_error_rate: 1.0, ..Default::default() });
    let e = fs.sync().expect_err("the pool's sync reports the lost group write");
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert!(e.to_string().contains("device 1"), "{e}");
    assert_eq!(fs.storage().devs[1].state(), DeviceState::Faulted);
    // That sync committed everything else: a power cut now keeps the
    // file on device 0 and the new directory.
    {
        let cut = cut_and_open(&mems);
        assert_eq!(cut.read_file("/e/h").unwrap(), pattern(5, 5 * BS), "written beside the lost files");
        assert!(cut.stat("/e/m").is_ok());
        assert_eq!(cut.read_file("/d/a5").unwrap(), pattern(5, BS));
        let e = cut.read_file("/d/b5").expect_err("never on its device: fails its checksum");
        assert!(matches!(e, hurricane::Error::Checksum(_)), "{e}");
        check_clean(&cut, "cut after the loss");
    }
    // Given up: nothing is held for a device that takes no writes, and the
    // files fail naming the device, never with other bytes (not even the
    // copy read while it was held).
    let g = fs.group_stats();
    assert_eq!((g.dirty_blocks, g.blocks_lost), (0, 16), "{g:?}");
    for i in 0..16 {
        let e = fs.read_file(&format!("/d/b{i}")).expect_err("a lost file reads as an error");
        assert_eq!(e.errno(), libc::EIO, "b{i}: {e}");
        assert!(e.to_string().contains("1 (mem1)"), "b{i}: {e}");
    }
    // Each file's fsync says so once; files with nothing lost, and the
    // pool's next sync, have nothing to say.
    let e = fs.fsync(b0).expect_err("b0's fsync reports its lost writes");
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert!(e.to_string().contains("device 1"), "{e}");
    fs.fsync(b0).unwrap();
    fs.fsync(a0).unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.fsync(b1).expect_err("b1's own report waited for it").errno(), libc::EIO);
    fs.fsync(b1).unwrap();
    // New writes to the dead device fail when made; the rest of the pool
    // commits as before: a file on device 0, a new directory, a rename.
    assert!(fs.write_file("/d/c", &pattern(9, BS), None).is_err());
    fs.write_file("/e/x", &pattern(7, 3 * BS), None).unwrap();
    fs.mkdir_path("/e/sub", 0o755).unwrap();
    fs.rename_path("/d/a3", "/d/a3-renamed").unwrap();
    fs.sync().unwrap();
    // A power cut, then device 1 back as it was: everything committed is
    // there; the lost files fail their checksums, never show old contents;
    // no space is leaked or claimed twice.
    let fs2 = cut_and_open(&mems);
    drop(fs);
    let fs = fs2;
    for i in (0..16).filter(|&i| i != 3) {
        assert_eq!(fs.read_file(&format!("/d/a{i}")).unwrap(), pattern(i, BS), "synced a{i}");
    }
    assert_eq!(fs.read_file("/d/a3-renamed").unwrap(), pattern(3, BS));
    assert_eq!(fs.read_file("/e/x").unwrap(), pattern(7, 3 * BS));
    assert_eq!(fs.read_file("/e/h").unwrap(), pattern(5, 5 * BS));
    assert!(fs.stat("/e/sub").is_ok());
    for i in 0..16 {
        let e = fs.read_file(&format!("/d/b{i}")).expect_err("never written: fails its checksum");
        assert!(matches!(e, hurricane::Error::Checksum(_)), "b{i}: {e}");
    }
    check_clean(&fs, "reopened after the loss");
    // Removing the lost files gives their space back, and new files on it
    // read as what they were written with.
    for i in 0..16 {
        fs.remove(&format!("/d/b{i}")).unwrap();
    }
    fs.sync().unwrap();
    for i in 0..16 {
        fs.write_file(&format!("/d/n{i}"), &pattern(300 + i, BS), None).unwrap();
    }
    fs.sync().unwrap();
    for i in 0..16 {
        assert_eq!(fs.read_file(&format!("/d/n{i}")).unwrap(), pattern(300 + i, BS), "n{i}");
    }
    check_clean(&fs, "after the lost files were removed");
}

#[test]
fn a_dead_devices_lost_writes_are_reported_even_when_another_device_fails_the_commit() {
    use hurricane::device::{DeviceState, FaultSpec};
    use std::sync::atomic::Ordering::SeqCst;
    let (mems, plans, stall, fs) = fault_pool(3, Some(1));
    let stall = stall.unwrap();
    dir_with_default(&fs, "/slow", "colocate@1");
    dir_with_default(&fs, "/dead", "colocate@2");
    fs.sync().unwrap();
    for i in 0..4 {
        fs.write_file(&format!("/slow/f{i}"), &pattern(i, BS), None).unwrap();
        fs.write_file(&format!("/dead/f{i}"), &pattern(50 + i, BS), None).unwrap();
    }
    assert_eq!(fs.group_stats().dirty_blocks, 8);
    let dead0 = fs.open_file("/dead/f0").unwrap().ino();
    let slow0 = fs.open_file("/slow/f0").unwrap().ino();
    // Device 1 times out, device 2 dies: the commit fails for device 1,
    // and device 2's blocks are given up all the same.
    stall.stalled.store(true, SeqCst);
    plans[2].set(FaultSpec { write_error_rate: 1.0, ..Default::default() });
    let e = fs.sync().expect_err("device 1's held writes did not get out");
    assert!(e.is_timed_out(), "{e}");
    assert_eq!(fs.storage().devs[1].state(), DeviceState::Online);
    assert_eq!(fs.storage().devs[2].state(), DeviceState::Faulted);
    let g = fs.group_stats();
    assert_eq!((g.dirty_blocks, g.blocks_lost), (4, 4), "{g:?}");
    // The dead device's files hear of it, however the commit ended.
    let e = fs.fsync(dead0).expect_err("the commit itself fails while device 1 stalls");
    assert!(e.is_timed_out(), "{e}");
    stall.stalled.store(false, SeqCst);
    let e = fs.fsync(dead0).expect_err("dead0's writes were lost");
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert!(e.to_string().contains("device 2"), "{e}");
    fs.fsync(dead0).unwrap();
    fs.fsync(slow0).unwrap();
    let e = fs.sync().expect_err("the pool's sync reports the loss once");
    assert!(e.to_string().contains("device 2"), "{e}");
    fs.sync().unwrap();
    assert_eq!(fs.group_stats().dirty_blocks, 0);
    let fs2 = cut_and_open(&mems);
    drop(fs);
    for i in 0..4 {
        assert_eq!(fs2.read_file(&format!("/slow/f{i}")).unwrap(), pattern(i, BS), "slow f{i}");
        assert!(fs2.read_file(&format!("/dead/f{i}")).is_err(), "dead f{i}");
    }
    check_clean(&fs2, "after the cut");
}

#[test]
fn a_device_timing_out_at_commit_fails_the_sync_loses_nothing_and_the_next_sync_writes_everything() {
    use hurricane::device::DeviceState;
    use std::sync::atomic::Ordering::SeqCst;
    let (mems, _, stall, fs) = fault_pool(2, Some(1));
    let stall = stall.unwrap();
    dir_with_default(&fs, "/d", "colocate@1");
    dir_with_default(&fs, "/e", "extent@0");
    for i in 0..16 {
        fs.write_file(&format!("/d/a{i}"), &pattern(i, BS), None).unwrap();
    }
    fs.sync().unwrap();
    for i in 0..16 {
        fs.write_file(&format!("/d/b{i}"), &pattern(100 + i, BS), None).unwrap();
    }
    fs.write_file("/e/x", &pattern(7, 2 * BS), None).unwrap();
    let b0 = fs.open_file("/d/b0").unwrap().ino();
    // Device 1 stops answering in time: a transient error. The commit
    // fails, nothing held is dropped, the device is not faulted.
    stall.stalled.store(true, SeqCst);
    let e = fs.sync().expect_err("the commit must report the failed group write");
    assert!(e.is_timed_out(), "{e}");
    assert_eq!(fs.storage().devs[1].state(), DeviceState::Online);
    let g = fs.group_stats();
    assert_eq!((g.dirty_blocks, g.blocks_lost), (16, 0), "nothing held is dropped: {g:?}");
    for i in 0..16 {
        assert_eq!(fs.read_file(&format!("/d/b{i}")).unwrap(), pattern(100 + i, BS), "b{i} still readable");
    }
    assert!(fs.fsync(b0).unwrap_err().is_timed_out());
    // A power cut now: everything synced is there; nothing names the
    // files whose data never reached the device, and nothing of the
    // failed commit is half there.
    {
        let cut = cut_and_open(&mems);
        for i in 0..16 {
            assert_eq!(cut.read_file(&format!("/d/a{i}")).unwrap(), pattern(i, BS), "synced a{i}");
            assert!(cut.read_file(&format!("/d/b{i}")).is_err(), "b{i} was never committed");
        }
        assert!(cut.read_file("/e/x").is_err(), "/e/x was in the failed commit");
        check_clean(&cut, "after the cut");
    }
    // The device answers again: the next commit writes what was held, and
    // no file has a loss to report.
    stall.stalled.store(false, SeqCst);
    fs.sync().unwrap();
    assert_eq!(fs.group_stats().dirty_blocks, 0);
    fs.fsync(b0).unwrap();
    let fs2 = cut_and_open(&mems);
    drop(fs);
    for i in 0..16 {
        assert_eq!(fs2.read_file(&format!("/d/a{i}")).unwrap(), pattern(i, BS), "a{i}");
        assert_eq!(fs2.read_file(&format!("/d/b{i}")).unwrap(), pattern(100 + i, BS), "b{i} after the retry");
    }
    assert_eq!(fs2.read_file("/e/x").unwrap(), pattern(7, 2 * BS));
    check_clean(&fs2, "after the retry");
}

#[test]
fn small_files_are_held_only_under_a_checksum() {
    // Checksums off: a held write given up with a dead device could read
    // back as the block's old contents, so nothing is held.
    let opts = hurricane::FormatOptions { checksum: false, ..Default::default() };
    let p = MemPool::with(2, 64 * MB, &opts);
    let fs = p.open().unwrap();
    dir_with_default(&fs, "/plain", "colocate");
    dir_with_default(&fs, "/checked", "checksum[colocate]");
    dir_with_default(&fs, "/striped", "stripe(unit=4K)[checksum[colocate],checksum[colocate]]");
    fs.sync().unwrap();
    for (dir, held) in [("/plain", false), ("/checked", true), ("/striped", true)] {
        let before = fs.group_stats().held_blocks;
        let w0 = device_writes(&fs);
        fs.write_file(&format!("{dir}/f"), &pattern(1, 2 * BS), None).unwrap();
        assert_eq!(fs.layout_of(&format!("{dir}/f")).unwrap().contains("checksum"), held, "{dir}");
        assert_eq!(fs.group_stats().held_blocks - before, if held { 2 } else { 0 }, "{dir}");
        assert_eq!(device_writes(&fs) > w0, !held, "{dir}: device writes before the sync");
        fs.sync().unwrap();
        assert_eq!(fs.read_file(&format!("{dir}/f")).unwrap(), pattern(1, 2 * BS));
    }
}

#[test]
fn replicated_small_files_are_written_when_made() {
    let p = MemPool::new(3, 64 * MB);
    let fs = p.open().unwrap();
    dir_with_default(&fs, "/r", "replicate[colocate@0,colocate@2]");
    fs.sync().unwrap();
    let w0 = device_writes(&fs);
    for i in 0..8 {
        fs.write_file(&format!("/r/f{i}"), &pattern(i, BS), None).unwrap();
    }
    // Each copy's write is judged by its parent when made: none is held.
    assert_eq!(fs.group_stats().dirty_blocks, 0);
    assert!(device_writes(&fs) - w0 >= 16);
}
