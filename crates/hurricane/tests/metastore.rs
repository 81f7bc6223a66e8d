//! The meta-data store under the engine: inodes read back past a small
//! cache, directories listed and looked up from the store, checkpoints that
//! write what changed, opens that load nothing.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use hurricane::{Creds, Fs, Options, SetAttr};
use std::collections::{BTreeMap, BTreeSet};

const MB: u64 = 1 << 20;

fn small_cache() -> Options {
    Options { inode_cache: 64, ..quiet() }
}

fn written(fs: &Fs) -> u64 {
    fs.device_stats().iter().map(|(_, s)| s.write_bytes).sum()
}

fn list(fs: &Fs, dir: &str) -> Vec<(String, u64)> {
    let ino = fs.resolve(dir).unwrap();
    let mut v = Vec::new();
    fs.readdir(&Creds::root(), ino, 0, |it| {
        v.push((String::from_utf8_lossy(&it.name).into_owned(), it.next));
        true
    })
    .unwrap();
    v
}

#[test]
fn inodes_beyond_the_cache_are_read_back_whole() {
    let p = MemPool::new(2, 64 * MB);
    let fs = Fs::open(p.devs.iter().map(|d| d.clone() as _).collect(), small_cache()).unwrap();
    let mut want = BTreeMap::new();
    for d in 0..8 {
        fs.mkdir_all(&format!("/d{d}"), 0o755).unwrap();
        for i in 0..150 {
            let path = format!("/d{d}/f{i}");
            let data = pattern(d * 1000 + i, (i as usize * 37) % 5000);
            let layout = if i % 3 == 0 { Some("inline") } else { None };
            fs.write_file(&path, &data, layout).unwrap();
            fs.set_attr_path(&path, &SetAttr { mode: Some(0o600 + (i as u32 % 64)), ..Default::default() }).unwrap();
            want.insert(path, (data, 0o600 + (i as u32 % 64)));
        }
        // Half the directories are checkpointed, half live in the journal
        // and the cache's changed inodes.
        if d % 2 == 0 {
            fs.checkpoint().unwrap();
        }
    }
    let check = |fs: &Fs| {
        for (path, (data, mode)) in &want {
            assert_eq!(&fs.read_file(path).unwrap(), data, "{path}");
            let a = fs.getattr(fs.resolve(path).unwrap()).unwrap();
            assert_eq!(a.mode & 0o7777, *mode, "{path}");
        }
    };
    check(&fs);
    let c = fs.meta_cache_stats().inodes;
    assert!(c.evictions > 0 && c.misses > 0, "{c:?}");
    fs.checkpoint().unwrap();
    check(&fs);
    let c = fs.meta_cache_stats().inodes;
    assert!(c.resident <= 64 + 32, "the cache holds its bound once nothing is changed: {c:?}");
    fs.close().unwrap();
    let fs = Fs::open(p.devs.iter().map(|d| d.clone() as _).collect(), small_cache()).unwrap();
    check(&fs);
}

#[test]
fn opening_a_pool_reads_no_inode_and_a_crash_replays_only_the_journal() {
    let p = MemPool::new(2, 64 * MB);
    let fs = p.open().unwrap();
    fs.mkdir_all("/many", 0o755).unwrap();
    for i in 0..3000 {
        fs.write_file(&format!("/many/e{i}"), b"", None).unwrap();
    }
    fs.close().unwrap();
    let fs = p.open().unwrap();
    let c = fs.meta_cache_stats().inodes;
    assert!(c.resident <= 2, "an open reads the root at most: {c:?}");
    assert_eq!(fs.statfs().files, 3002, "the root, /many and its entries");
    for i in 0..10 {
        fs.write_file(&format!("/many/late{i}"), b"x", None).unwrap();
    }
    fs.sync().unwrap();
    let c = p.crash(hurricane::device::CrashMode::DropAll);
    let fs = c.open().unwrap();
    let r = fs.report();
    assert!(r.replayed_records <= 2 && r.replayed_ops <= 10 * 8, "only the ten late files are replayed: {r:?}");
    assert_eq!(list(&fs, "/many").len(), 2 + 3010, ". and .. and the entries");
    assert_eq!(fs.read_file("/many/late9").unwrap(), b"x");
    assert!(fs.meta_cache_stats().inodes.resident < 100);
}

#[test]
fn readdir_cookies_stay_valid_across_inserts_deletes_and_checkpoints() {
    let p = MemPool::new(1, 64 * MB);
    let fs = Fs::open(p.devs.iter().map(|d| d.clone() as _).collect(), small_cache()).unwrap();
    fs.mkdir_all("/d", 0o755).unwrap();
    for i in 0..400 {
        fs.write_file(&format!("/d/a{i:03}"), b"", None).unwrap();
    }
    fs.checkpoint().unwrap();
    let ino = fs.resolve("/d").unwrap();
    // The first page of a listing.
    let mut seen = Vec::new();
    let mut next = 0;
    fs.readdir(&Creds::root(), ino, 0, |it| {
        next = it.next;
        seen.push(String::from_utf8_lossy(&it.name).into_owned());
        seen.len() < 150
    })
    .unwrap();
    // Meanwhile: entries not yet listed are removed, new ones added, some
    // checkpointed and some not.
    let mut removed = BTreeSet::new();
    for i in (200..400).step_by(3) {
        fs.remove(&format!("/d/a{i:03}")).unwrap();
        removed.insert(format!("a{i:03}"));
    }
    for i in 0..50 {
        fs.write_file(&format!("/d/b{i:03}"), b"", None).unwrap();
    }
    fs.checkpoint().unwrap();
    for i in 50..80 {
        fs.write_file(&format!("/d/b{i:03}"), b"", None).unwrap();
    }
    fs.remove("/d/b010").unwrap();
    // The listing goes on from its cookie.
    fs.readdir(&Creds::root(), ino, next, |it| {
        seen.push(String::from_utf8_lossy(&it.name).into_owned());
        true
    })
    .unwrap();
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no entry listed twice");
    for i in 0..400 {
        let n = format!("a{i:03}");
        assert_eq!(seen.contains(&n), !removed.contains(&n), "{n}");
    }
    assert!(!seen.contains(&"b010".to_string()));
    assert!(seen.contains(&"b079".to_string()) && seen.contains(&"b000".to_string()));
    // Cookies only grow along a listing.
    let cookies: Vec<u64> = list(&fs, "/d").iter().map(|(_, c)| *c).collect();
    assert!(cookies.windows(2).all(|w| w[0] < w[1]), "{cookies:?}");
    assert_eq!(cookies.len(), 2 + 400 - removed.len() + 79);
}

#[test]
fn a_checkpoint_writes_what_changed_not_the_whole_state() {
    let p = MemPool::new(2, 64 * MB);
    let fs = p.open().unwrap();
    for d in 0..10 {
        fs.mkdir_all(&format!("/d{d}"), 0o755).unwrap();
        for i in 0..500 {
            fs.write_file(&format!("/d{d}/f{i}"), b"", None).unwrap();
        }
    }
    fs.checkpoint().unwrap();
    let store = fs.meta_cache_stats().store.bytes;
    // Once settled (the first checkpoints grow the store), one change costs
    // a few pages, not the 5,000 inodes.
    fs.set_attr_path("/d3/f7", &SetAttr { mode: Some(0o640), ..Default::default() }).unwrap();
    fs.checkpoint().unwrap();
    fs.set_attr_path("/d4/f8", &SetAttr { mode: Some(0o640), ..Default::default() }).unwrap();
    let before = written(&fs);
    fs.checkpoint().unwrap();
    let cost = written(&fs) - before;
    assert!(cost < store / 8, "a one-inode checkpoint wrote {cost} bytes of a {store}-byte store");
    fs.close().unwrap();
    let fs = p.open().unwrap();
    assert_eq!(fs.getattr(fs.resolve("/d4/f8").unwrap()).unwrap().mode & 0o777, 0o640);
}

#[test]
fn unlinked_open_files_are_freed_by_the_next_open_from_the_orphan_table() {
    let p = MemPool::new(1, 64 * MB);
    let fs = p.open().unwrap();
    fs.write_file("/held", &pattern(3, 300_000), None).unwrap();
    let free0 = fs.statfs().bfree;
    let f = fs.open_file("/held").unwrap();
    fs.remove("/held").unwrap();
    fs.checkpoint().unwrap();
    drop(f);
    // A crash while it was open: the checkpoint recorded it as an orphan.
    let c = p.crash(hurricane::device::CrashMode::DropAll);
    let fs = c.open().unwrap();
    assert_eq!(fs.report().orphans_freed, 1);
    fs.sync().unwrap();
    assert!(fs.statfs().bfree >= free0 + 300_000 / 4096, "its 300 KB are free again");
    assert!(fs.resolve("/held").is_err());
}

/// The blocks of each copy of a closed pool's meta-file that disagree with
/// that copy's own checksum page.
fn disagreeing_blocks(p: &MemPool) -> Vec<(usize, Vec<u64>)> {
    use hurricane::blocks::{IoCtx, Layout, NodeRecord};
    use hurricane::codec::Decoder;
    use hurricane::device::{Device, DeviceHandle};
    use hurricane::pool::{Allocator, Storage, Superblock};
    let storage = Storage {
        devs: p.devs.iter().enumerate().map(|(i, d)| DeviceHandle::new(i as u32, d.clone())).collect(),
        allocs: p.devs.iter().map(|d| Allocator::new(0, d.size() / 4096)).collect(),
    };
    let img = p.devs[0].image();
    let sb = (0..2)
        .filter_map(|s| Superblock::decode(&img[s * 4096..(s + 1) * 4096], "d").ok().flatten())
        .max_by_key(|s| s.generation)
        .unwrap();
    let meta = Layout::decode(&mut Decoder::new(&sb.meta_layout, "meta")).unwrap();
    let sink = |_: NodeRecord| {};
    let io = IoCtx {
        owner: 0,
        origin: hurricane::blocks::Origin::NONE,
        storage: &storage,
        epoch: 0,
        sink: &sink,
        repair: false,
    };
    let blocks = sb.meta_len.div_ceil(4096);
    let mut out = Vec::new();
    for (c, child) in meta.root().children().iter().enumerate() {
        let mut bad = Vec::new();
        for b in 1..blocks {
            let mut data = vec![0u8; 4096];
            let mut page = vec![0u8; 4096];
            child.read(&io, b, &mut data).unwrap();
            // Checksum pages hold 1,023 entries and their own checksum.
            child.read(&io, (1 << 36) + b / 1023, &mut page).unwrap();
            let own = u32::from_le_bytes([page[4092], page[4093], page[4094], page[4095]]);
            assert_eq!(own, crc32c::crc32c(&page[..4092]).max(1), "copy {c}: checksum page of block {b}");
            let i = (b % 1023) as usize * 4;
            let entry = u32::from_le_bytes([page[i], page[i + 1], page[i + 2], page[i + 3]]);
            if !(entry != 0 && crc32c::crc32c(&data).max(1) == entry) {
                bad.push(b);
            }
        }
        out.push((c, bad));
    }
    out
}

/// Every block of each copy of the meta-file agrees with that copy's own
/// checksum page after a clean close (so either copy alone can serve it),
/// on large pools and on small ones whose devices are mostly journal.
#[test]
fn each_copy_of_the_meta_file_agrees_with_its_checksums() {
    let p = MemPool::new(2, 8 * MB);
    let fs = p.open().unwrap();
    fs.write_file("/x", b"on disk", None).unwrap();
    fs.close().unwrap();
    drop(fs);
    for (c, bad) in disagreeing_blocks(&p) {
        assert!(bad.is_empty(), "small pool, copy {c}: {bad:?}");
    }
    let p = MemPool::new(3, 32 * MB);
    let fs = p.open().unwrap();
    fs.mkdir_all("/d", 0o755).unwrap();
    for i in 0..3000 {
        fs.write_file(&format!("/d/f{i}"), &pattern(i, (i as usize * 7) % 900), Some("inline")).unwrap();
        if i % 700 == 0 {
            fs.checkpoint().unwrap();
        }
    }
    fs.close().unwrap();
    drop(fs);
    for (c, bad) in disagreeing_blocks(&p) {
        assert!(bad.is_empty(), "copy {c}: {} blocks disagree: {:?}", bad.len(), &bad[..bad.len().min(20)]);
    }
}

/// Creates, lookups and removals from several threads in one directory
/// while the background committer checkpoints through a small inode cache:
/// they all finish (no lock-order deadlock between a checkpoint settling a
/// directory and a create locking it) and leave what they did.
#[test]
fn concurrent_work_and_background_checkpoints_finish() {
    use std::sync::mpsc;
    use std::time::Duration;
    let p = MemPool::new(2, 64 * MB);
    let opts = Options {
        inode_cache: 64,
        background_commit: true,
        commit_interval: Duration::from_millis(1),
        ..Options::default()
    };
    let fs = Fs::open(p.devs.iter().map(|d| d.clone() as _).collect(), opts).unwrap();
    fs.mkdir_all("/d", 0o755).unwrap();
    let (tx, rx) = mpsc::channel();
    for t in 0..4 {
        let fs = fs.clone();
        let tx = tx.clone();
        std::thread::spawn(move || {
            for i in 0..600 {
                let path = format!("/d/t{t}-{i}");
                fs.write_file(&path, b"", None).unwrap();
                assert!(fs.resolve(&path).is_ok());
                if i % 3 == 0 {
                    fs.remove(&path).unwrap();
                }
            }
            tx.send(t).unwrap();
        });
    }
    for _ in 0..4 {
        rx.recv_timeout(Duration::from_secs(120)).expect("a worker thread did not finish: deadlock");
    }
    assert!(fs.commit_counts().1 > 0, "checkpoints ran meanwhile");
    assert_eq!(list(&fs, "/d").len(), 2 + 4 * 400);
    fs.close().unwrap();
}

/// The pool opened with a 64-inode cache and a committer that never wakes
/// on its own during a test: only changed inodes past the limit wake it.
fn open_with_a_woken_committer(p: &MemPool) -> Fs {
    let opts = Options {
        inode_cache: 64,
        background_commit: true,
        commit_interval: std::time::Duration::from_secs(3600),
        ..quiet()
    };
    Fs::open(p.devs.iter().map(|d| d.clone() as _).collect(), opts).unwrap()
}

fn flushes(fs: &Fs) -> u64 {
    fs.device_stats().iter().map(|(_, s)| s.flushes).sum()
}

/// A checkpoint that changed inodes bring on, which nobody waits to be
/// durable, is written without flushing a device; a crash then goes back to
/// the last sync, whose files are all there and nothing after them.
#[test]
fn checkpoints_nobody_waits_for_flush_nothing_and_a_crash_keeps_the_last_sync() {
    let p = MemPool::new(2, 64 * MB);
    let fs = open_with_a_woken_committer(&p);
    fs.mkdir_all("/d", 0o755).unwrap();
    for i in 0..600 {
        fs.write_file(&format!("/d/a{i}"), b"", None).unwrap();
    }
    fs.sync().unwrap();
    let (k0, u0, f0) = (fs.commit_counts().1, fs.unsynced_checkpoints(), flushes(&fs));
    // (Enough creates that, however the committer is scheduled on a busy
    // machine, it writes many checkpoints: 600 once brought only 9.)
    const LATER: usize = 1500;
    for i in 0..LATER {
        fs.write_file(&format!("/d/b{i}"), b"", None).unwrap();
    }
    let (k1, u1, f1) = (fs.commit_counts().1, fs.unsynced_checkpoints(), flushes(&fs));
    assert!(k1 - k0 >= 10, "{} checkpoints for {LATER} creates", k1 - k0);
    assert_eq!(u1 - u0, k1 - k0, "every checkpoint since the sync was left unsynced");
    // (A growth of the meta-file writes the superblocks, with a flush.)
    assert!(f1 - f0 < k1 - k0, "{} flushes for {} checkpoints", f1 - f0, k1 - k0);
    // The new files are read back from the store, not held in memory.
    assert!(fs.meta_cache_stats().inodes.dirty <= 200, "{:?}", fs.meta_cache_stats().inodes);
    assert_eq!(list(&fs, "/d").len(), 2 + 600 + LATER);
    for mode in [hurricane::device::CrashMode::DropAll, hurricane::device::CrashMode::KeepAll] {
        let fs = p.crash(mode).open().unwrap();
        let names: BTreeSet<String> = list(&fs, "/d").into_iter().map(|(n, _)| n).collect();
        assert_eq!(names.len(), 2 + 600, "{mode:?}: the files of the last sync, and only them");
        assert!((0..600).all(|i| names.contains(&format!("a{i}"))), "{mode:?}");
        check_clean(&fs, &format!("{mode:?}"));
    }
    // A sync makes them durable: a crash then keeps them all.
    fs.sync().unwrap();
    let fs = p.crash(hurricane::device::CrashMode::DropAll).open().unwrap();
    assert_eq!(list(&fs, "/d").len(), 2 + 600 + LATER);
    check_clean(&fs, "after the sync");
}

/// Space freed by a checkpoint left unsynced is not given to new files
/// until a durable commit: a crash goes back to a state whose files still
/// own it, and their data must still be theirs, even when every write the
/// devices were given reached them.
#[test]
fn space_freed_under_an_unsynced_checkpoint_is_not_reused_before_it_is_durable() {
    let p = MemPool::new(2, 16 * MB);
    let fs = open_with_a_woken_committer(&p);
    fs.mkdir_all("/d", 0o755).unwrap();
    // The old files take three fifths of the free space: the new ones,
    // as large, do not fit beside them.
    let st = fs.statfs();
    let len = (st.bfree * st.bsize as u64 * 3 / 5 / 200) as usize / 4096 * 4096;
    for i in 0..200 {
        fs.write_file(&format!("/d/old{i}"), &pattern(i, len), None).unwrap();
    }
    fs.sync().unwrap();
    let u0 = fs.unsynced_checkpoints();
    for i in 0..200 {
        fs.remove(&format!("/d/old{i}")).unwrap();
        // Full while the old files' space waits for a durable commit: a
        // writer refused for space would make one (`Fs::with_room`), so
        // stop while each device has room for twice its share of a file.
        let room = fs.storage().allocs.iter().map(|a| a.free_for_data()).min().unwrap_or(0) * 4096;
        if room < len as u64 {
            break;
        }
        fs.write_file(&format!("/d/new{i}"), &pattern(1000 + i, len), None).unwrap();
    }
    assert!(fs.unsynced_checkpoints() - u0 >= 2, "{} unsynced checkpoints", fs.unsynced_checkpoints() - u0);
    let fs2 = p.crash(hurricane::device::CrashMode::KeepAll).open().unwrap();
    for i in 0..200 {
        assert_eq!(fs2.read_file(&format!("/d/old{i}")).unwrap(), pattern(i, len), "old{i}");
    }
    check_clean(&fs2, "after the crash");
    drop(fs2);
    // Once durable, the space is free again: as many files as the old
    // ones fit in place of the new ones.
    for (name, _) in list(&fs, "/d").into_iter().skip(2) {
        fs.remove(&format!("/d/{name}")).unwrap();
    }
    fs.sync().unwrap();
    for i in 0..200 {
        fs.write_file(&format!("/d/more{i}"), &pattern(2000 + i, len), None).unwrap();
    }
    fs.close().unwrap();
    let fs = p.open().unwrap();
    for i in 0..200 {
        assert_eq!(fs.read_file(&format!("/d/more{i}")).unwrap(), pattern(2000 + i, len), "more{i}");
    }
    check_clean(&fs, "after the close");
}

fn check_clean(fs: &Fs, what: &str) {
    let r = hurricane::fsck::check(fs, false, &mut |_, _, _| {}).unwrap();
    assert!(r.problems.is_empty(), "{what}: {:?}", r.problems);
}

/// Removing files counts toward the next checkpoint as changing them does:
/// a long run of deletes is checkpointed along the way (the committer is
/// woken, or the deleting thread waits for it) instead of holding every
/// freed inode in memory until the end.
#[test]
fn deleting_many_files_checkpoints_along_the_way() {
    let p = MemPool::new(2, 64 * MB);
    let fs = open_with_a_woken_committer(&p);
    fs.mkdir_all("/d", 0o755).unwrap();
    for i in 0..600 {
        fs.write_file(&format!("/d/f{i}"), b"", None).unwrap();
    }
    fs.checkpoint().unwrap();
    let before = fs.commit_counts().1;
    for i in 0..600 {
        fs.remove(&format!("/d/f{i}")).unwrap();
        // Never more than twice the trigger (32 inodes) outstanding.
        assert!(fs.meta_cache_stats().inodes.dirty <= 200, "{:?}", fs.meta_cache_stats().inodes.dirty);
    }
    assert!(fs.commit_counts().1 >= before + 5, "{} checkpoints during 600 removals", fs.commit_counts().1 - before);
    assert_eq!(list(&fs, "/d").len(), 2);
    fs.close().unwrap();
}

#[test]
fn bulk_changes_are_checkpointed_without_a_journal_copy() {
    let p = MemPool::new(2, 64 * MB);
    // Every commit is one the changed inodes asked for, and each should be
    // a checkpoint (a journal write of changes a checkpoint then writes
    // again doubles what reaches the disk).
    let fs = open_with_a_woken_committer(&p);
    fs.mkdir_all("/d", 0o755).unwrap();
    let (c0, k0) = fs.commit_counts();
    for i in 0..3000 {
        fs.write_file(&format!("/d/f{i}"), b"", None).unwrap();
    }
    let (c1, k1) = fs.commit_counts();
    assert!(k1 - k0 >= 20, "{} checkpoints for 3,000 creates", k1 - k0);
    assert_eq!(c1 - c0, k1 - k0, "{} commits were journal writes", (c1 - c0) - (k1 - k0));
    fs.close().unwrap();
    let fs = p.open().unwrap();
    assert_eq!(list(&fs, "/d").len(), 3002);
}

/// New files' records, names and readdir entries go at the ends of their
/// B-trees; a checkpoint that added them one after the other would leave
/// every leaf half empty (the store splits a full leaf at its middle) and
/// write about twice the pages they need.
#[test]
fn a_checkpoint_of_new_files_fills_the_leaves_it_writes() {
    let p = MemPool::new(1, 256 * MB);
    let opts = Options { inode_cache: 1 << 16, ..quiet() };
    let fs = Fs::open(p.devs.iter().map(|d| d.clone() as _).collect(), opts).unwrap();
    let cred = Creds::root();
    fs.mkdir_all("/d", 0o755).unwrap();
    let d = fs.resolve("/d").unwrap();
    fs.checkpoint().unwrap();
    let n = 12_000u64;
    let before = written(&fs);
    for i in 0..n {
        fs.mknod(&cred, d, format!("file{i:06}").as_bytes(), libc::S_IFREG | 0o644, 0, None, None).unwrap();
    }
    fs.checkpoint().unwrap();
    // Measured: 519 bytes a create; 1,036 with the changes added in key
    // order in one pass.
    let per_create = (written(&fs) - before) / n;
    assert!(per_create < 700, "{per_create} bytes written a create");
    fs.close().unwrap();
    let fs = p.open().unwrap();
    let names = list(&fs, "/d");
    assert_eq!(names.len() as u64, n + 2);
    for i in (0..n).step_by(997) {
        fs.stat(&format!("/d/file{i:06}")).unwrap();
    }
    fs.close().unwrap();
}

#[test]
fn a_fragmented_free_map_is_not_rewritten_by_each_checkpoint() {
    let p = MemPool::new(1, 256 * MB);
    let fs = p.open().unwrap();
    fs.mkdir_all("/d", 0o755).unwrap();
    let n = 12_000;
    for i in 0..n {
        fs.write_file(&format!("/d/f{i}"), &[i as u8; 4096], Some("extent@0")).unwrap();
    }
    fs.checkpoint().unwrap();
    // Every other file gone: thousands of one-block free extents.
    for i in (0..n).step_by(2) {
        fs.remove(&format!("/d/f{i}")).unwrap();
    }
    fs.checkpoint().unwrap();
    let free = fs.statfs().bfree;
    // One block freed more: the free map changes by one entry or three.
    fs.remove("/d/f1").unwrap();
    fs.checkpoint().unwrap();
    fs.set_attr_path("/d/f3", &SetAttr { mode: Some(0o600), ..Default::default() }).unwrap();
    let before = written(&fs);
    fs.checkpoint().unwrap();
    let cost = written(&fs) - before;
    // The map's 6,000 entries take over 150 KB of store pages.
    assert!(cost < 96 * 1024, "a one-inode checkpoint wrote {cost} bytes");
    assert_eq!(fs.statfs().bfree, free + 1);
    fs.close().unwrap();
    // What the open claims from the map is what was free, no more, no less:
    // new files take freed blocks and the survivors read back whole.
    let fs = p.open().unwrap();
    assert_eq!(fs.statfs().bfree, free + 1);
    for i in 0..1000 {
        fs.write_file(&format!("/d/g{i}"), &[0xEE; 4096], Some("extent@0")).unwrap();
    }
    for i in (3..n).step_by(2) {
        assert_eq!(fs.read_file(&format!("/d/f{i}")).unwrap(), vec![i as u8; 4096], "f{i}");
    }
    fs.close().unwrap();
}

/// A pool with an entry cache whose directory /d holds `n` one-byte files
/// `{prefix}{i}`, checkpointed: (pool, open fs, /d's inode).
fn checkpointed_dir(n: usize, prefix: &str) -> (MemPool, Fs, u64) {
    let p = MemPool::new(2, 64 * MB);
    let fs = Fs::open(p.devs.iter().map(|d| d.clone() as _).collect(), Options { entry_cache: 1000, ..small_cache() })
        .unwrap();
    fs.mkdir_all("/d", 0o755).unwrap();
    for i in 0..n {
        fs.write_file(&format!("/d/{prefix}{i}"), &[i as u8], None).unwrap();
    }
    fs.checkpoint().unwrap();
    let d = fs.resolve("/d").unwrap();
    (p, fs, d)
}

/// Directory entries read from the store's B-tree so far.
fn name_reads(fs: &Fs) -> u64 {
    fs.meta_cache_stats().store.name_reads
}

#[test]
fn cached_entries_never_outlive_a_change() {
    let (p, fs, d) = checkpointed_dir(300, "f");
    let root = Creds::root();
    let ino = |n: &str| fs.lookup(&root, d, n.as_bytes()).map(|a| a.ino);
    let first: Vec<u64> = (0..300).map(|i| ino(&format!("f{i}")).unwrap()).collect();
    let h0 = fs.meta_cache_stats().store.entries.hits;
    for (i, want) in first.iter().enumerate() {
        assert_eq!(ino(&format!("f{i}")).unwrap(), *want);
    }
    assert!(fs.meta_cache_stats().store.entries.hits >= h0 + 300, "second lookups are served from the cache");
    // Changes over cached entries, looked up before and after the
    // checkpoint that writes them.
    let opts = hurricane::RenameFlags::default();
    fs.rename(&root, d, b"f1", d, b"g1", opts).unwrap();
    fs.rename(&root, d, b"f2", d, b"f3", opts).unwrap();
    fs.remove("/d/f4").unwrap();
    fs.write_file("/d/f4", b"new", None).unwrap();
    let check = |fs: &Fs| {
        let ino = |n: &str| fs.lookup(&root, d, n.as_bytes()).map(|a| a.ino);
        assert!(ino("f1").is_err());
        assert_eq!(ino("g1").unwrap(), first[1]);
        assert!(ino("f2").is_err());
        assert_eq!(ino("f3").unwrap(), first[2]);
        assert_ne!(ino("f4").unwrap(), first[4]);
        assert_eq!(fs.read_file("/d/f4").unwrap(), b"new");
        assert_eq!(fs.read_file("/d/f3").unwrap(), [2u8]);
        assert_eq!(ino("f5").unwrap(), first[5]);
    };
    check(&fs);
    fs.checkpoint().unwrap();
    check(&fs);
    fs.remove("/d/g1").unwrap();
    fs.checkpoint().unwrap();
    assert!(fs.lookup(&root, d, b"g1").is_err());
    fs.close().unwrap();
    check_after_reopen(&p, &first);
}

/// Names a checkpoint wrote are looked up again (an unlink after a
/// create) from the entry cache, not from the store's tree, and what it
/// removed is not served from there.
#[test]
fn names_a_checkpoint_wrote_are_found_without_reading_the_store() {
    let (p, fs, d) = checkpointed_dir(300, "f");
    let root = Creds::root();
    let before = name_reads(&fs);
    for i in 0..300 {
        assert!(fs.lookup(&root, d, format!("f{i}").as_bytes()).is_ok());
    }
    assert_eq!(name_reads(&fs), before, "every name came from the entry cache");
    // Removed and checkpointed: gone from the cache too.
    for i in 0..150 {
        fs.remove(&format!("/d/f{i}")).unwrap();
    }
    fs.checkpoint().unwrap();
    for i in 0..300 {
        assert_eq!(fs.lookup(&root, d, format!("f{i}").as_bytes()).is_ok(), i >= 150, "f{i}");
    }
    for i in 150..300 {
        fs.remove(&format!("/d/f{i}")).unwrap();
    }
    fs.close().unwrap();
    let fs = p.open().unwrap();
    assert_eq!(list(&fs, "/d").len(), 2);
}

/// A create searches the store once for its name: the insert after the
/// check that found it absent does not search again.
#[test]
fn a_create_searches_the_store_once_for_its_name() {
    let (p, fs, d) = checkpointed_dir(100, "old");
    let root = Creds::root();
    let before = name_reads(&fs);
    for i in 0..100 {
        fs.mknod(&root, d, format!("new{i}").as_bytes(), libc::S_IFREG | 0o644, 0, None, None).unwrap();
    }
    assert_eq!(name_reads(&fs) - before, 100, "one search of the store per create");
    // A name that is there is still found, whatever was looked up before.
    assert!(fs.mknod(&root, d, b"old7", libc::S_IFREG | 0o644, 0, None, None).is_err());
    assert!(fs.mknod(&root, d, b"new7", libc::S_IFREG | 0o644, 0, None, None).is_err());
    fs.close().unwrap();
    let fs = p.open().unwrap();
    assert_eq!(list(&fs, "/d").len(), 2 + 200);
}

fn check_after_reopen(p: &MemPool, first: &[u64]) {
    let fs = p.open().unwrap();
    let d = fs.resolve("/d").unwrap();
    let root = Creds::root();
    assert!(fs.lookup(&root, d, b"g1").is_err());
    assert_eq!(fs.lookup(&root, d, b"f3").unwrap().ino, first[2]);
    assert_eq!(list(&fs, "/d").len(), 2 + 300 - 2);
}

/// Lookups racing with changes and checkpoints never leave a stale entry
/// cached: a writer replaces files by name (each time a new inode) and
/// checkpoints, while readers look the same names up all along; after it
/// stops, each name resolves to the inode it was last given.
#[test]
fn lookups_racing_with_checkpoints_cache_no_stale_entry() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let p = MemPool::new(2, 64 * MB);
    let fs = Fs::open(p.devs.iter().map(|d| d.clone() as _).collect(), Options { entry_cache: 64, ..small_cache() })
        .unwrap();
    fs.mkdir_all("/d", 0o755).unwrap();
    let names = 16;
    for i in 0..names {
        fs.write_file(&format!("/d/f{i}"), b"", None).unwrap();
    }
    fs.checkpoint().unwrap();
    let d = fs.resolve("/d").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|t| {
            let fs = fs.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let root = Creds::root();
                let mut n = 0u64;
                while !stop.load(Ordering::Acquire) {
                    let _ = fs.lookup(&root, d, format!("f{}", (n + t) % names).as_bytes());
                    n += 1;
                }
            })
        })
        .collect();
    for round in 0..200u64 {
        let i = round % names;
        fs.remove(&format!("/d/f{i}")).unwrap();
        fs.write_file(&format!("/d/f{i}"), b"", None).unwrap();
        if round % 5 == 0 {
            fs.checkpoint().unwrap();
        }
    }
    fs.checkpoint().unwrap();
    stop.store(true, Ordering::Release);
    for r in readers {
        r.join().unwrap();
    }
    // The listing reads the store's tree, not the entry cache.
    let root = Creds::root();
    let mut listed = Vec::new();
    fs.readdir(&root, d, 0, |it| {
        listed.push((it.name.clone(), it.ino));
        true
    })
    .unwrap();
    let files: Vec<_> = listed.iter().filter(|(n, _)| n.starts_with(b"f")).collect();
    assert_eq!(files.len(), names as usize);
    let hits = fs.meta_cache_stats().store.entries.hits;
    for (name, ino) in &files {
        for _ in 0..2 {
            assert_eq!(fs.lookup(&root, d, name).unwrap().ino, *ino, "{}", String::from_utf8_lossy(name));
        }
    }
    assert!(fs.meta_cache_stats().store.entries.hits >= hits + names, "second lookups are served from the cache");
}

/// A closed pool writes nothing more, even when it is dropped: an open of
/// the same devices made after the close (here, or on another host once
/// the lease is let go) is not overwritten by what the store would write
/// on its way out.
#[test]
fn a_closed_pool_dropped_after_another_open_writes_nothing() {
    let p = MemPool::new(2, 64 * MB);
    let first = p.open_with(small_cache()).unwrap();
    for i in 0..200u64 {
        first.write_file(&format!("/a{i}"), &pattern(i, 3000), None).unwrap();
    }
    first.close().unwrap();
    let images: Vec<Vec<u8>> = p.devs.iter().map(|d| d.image()).collect();
    let second = p.open_with(small_cache()).unwrap();
    for i in 0..200u64 {
        second.write_file(&format!("/b{i}"), &pattern(1000 + i, 3000), None).unwrap();
    }
    second.checkpoint().unwrap();
    let before: Vec<Vec<u8>> = p.devs.iter().map(|d| d.image()).collect();
    drop(first);
    let after: Vec<Vec<u8>> = p.devs.iter().map(|d| d.image()).collect();
    assert!(before == after, "the closed pool wrote to the devices when dropped");
    assert!(images != after, "the second open wrote");
    second.close().unwrap();
    drop(second);
    let fs = p.open_with(small_cache()).unwrap();
    for i in 0..200u64 {
        assert_eq!(fs.read_file(&format!("/a{i}")).unwrap(), pattern(i, 3000));
        assert_eq!(fs.read_file(&format!("/b{i}")).unwrap(), pattern(1000 + i, 3000));
    }
    let r = fs.scrub(&hurricane::fs::ScrubOptions { repair: false, ..Default::default() }, &|_| {}).unwrap();
    assert_eq!((r.meta_lost_blocks, r.repaired_blocks), (0, 0));
    check_clean(&fs, "after both opens");
}
