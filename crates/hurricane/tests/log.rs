//! The `log` block and its cleaner, through the native API: random
//! changes to log files (alone and under stripe, replicate and checksum)
//! read back exactly after cleaning passes and reopens; a nearly full log
//! keeps taking overwrites because writers clean first; a full one says
//! so at the write, losing nothing (an overwrite it refuses included).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::{check_clean, pattern, MemPool, MB};
use hurricane::fs::{CleanOptions, CleanPolicy};
use hurricane::{Error, Fs};
use rand::{rngs::StdRng, Rng, SeedableRng};

const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;

fn change(fs: &Fs, ino: u64, rng: &mut StdRng, model: &mut Vec<u8>, seed: u64) {
    let size = model.len();
    match rng.gen_range(0..10) {
        0..=6 => {
            // Mostly small overwrites, as a database makes.
            let off = rng.gen_range(0..=size + 4096);
            let len = if rng.gen_bool(0.8) { 4096 } else { rng.gen_range(1..100_000) };
            let data = pattern(seed, len);
            fs.write(ino, off as u64, &data).unwrap();
            if model.len() < off + len {
                model.resize(off + len, 0);
            }
            model[off..off + len].copy_from_slice(&data);
        }
        7 => {
            let to = rng.gen_range(size * 3 / 4..=size + 50_000);
            fs.truncate(ino, to as u64).unwrap();
            model.resize(to, 0);
        }
        _ => {
            let off = rng.gen_range(0..=size);
            let len = rng.gen_range(1..60_000);
            fs.fallocate(ino, off as u64, len as u64, PUNCH).unwrap();
            let end = (off + len).min(size);
            if off < end {
                model[off..end].fill(0);
            }
        }
    }
}

#[test]
fn random_changes_to_log_files_survive_cleaning_and_reopens() {
    let p = MemPool::new(2, 64 * MB);
    let fs = p.open().unwrap();
    let layouts = [
        "log@0",
        "log(segment=64K)@1",
        "stripe(unit=16K)[log@0,log@1]",
        "replicate[log@1,extent@0]",
        "checksum[log(segment=256K)@0]",
    ];
    let mut models = Vec::new();
    let mut inos = Vec::new();
    for (i, l) in layouts.iter().enumerate() {
        let m = pattern(i as u64, 600_000 + i * 10_000);
        fs.write_file(&format!("/f{i}"), &m, Some(l)).unwrap();
        inos.push(fs.resolve(&format!("/f{i}")).unwrap());
        models.push(m);
    }
    let mut rng = StdRng::seed_from_u64(5);
    let check = |fs: &Fs, models: &[Vec<u8>], what: &str| {
        for (i, m) in models.iter().enumerate() {
            let got = fs.read_file(&format!("/f{i}")).unwrap();
            assert!(got == *m, "{what}: /f{i} ({}) differs ({} vs {} bytes)", layouts[i], got.len(), m.len());
        }
    };
    for round in 0..3 {
        for n in 0..300 {
            let i = rng.gen_range(0..layouts.len());
            change(&fs, inos[i], &mut rng, &mut models[i], round * 1000 + n);
        }
        let policy = if round % 2 == 0 { CleanPolicy::CostBenefit } else { CleanPolicy::Greedy };
        let r = fs.clean(&CleanOptions { policy, ..Default::default() }, &mut |_| {}).unwrap();
        assert!(r.segments > 0 && r.moved_blocks > 0, "round {round}: {r:?}");
        check(&fs, &models, &format!("round {round}, cleaned"));
        check_clean(&fs, &format!("round {round}"));
    }
    let stats = fs.log_stats();
    assert!(stats.iter().any(|s| s.cleaned_segments > 0 && s.write_amplification > 1.0), "{stats:?}");
    fs.close().unwrap();
    // After a reopen the cleaner first finds every log block's owner.
    let fs = p.open().unwrap();
    check(&fs, &models, "reopened");
    for n in 0..200 {
        let i = rng.gen_range(0..layouts.len());
        change(&fs, inos[i], &mut rng, &mut models[i], 9000 + n);
    }
    let r = fs.clean(&CleanOptions::default(), &mut |_| {}).unwrap();
    assert!(r.segments > 0, "after reopen: {r:?}");
    check(&fs, &models, "cleaned after reopen");
    check_clean(&fs, "cleaned after reopen");
    fs.close().unwrap();
    let fs = p.open().unwrap();
    check(&fs, &models, "reopened again");
    check_clean(&fs, "reopened again");
}

#[test]
fn a_nearly_full_log_keeps_taking_overwrites() {
    let p = MemPool::new(1, 40 * MB);
    let fs = p.open().unwrap();
    // About 70% of the device live, then overwrites worth four devices.
    let size = 20 * MB as usize;
    let mut model = pattern(1, size);
    fs.write_file("/db", &model, Some("log@0")).unwrap();
    let ino = fs.resolve("/db").unwrap();
    fs.sync().unwrap();
    let mut rng = StdRng::seed_from_u64(9);
    let blocks = size / 4096;
    for n in 0..(4 * 40 * MB as usize / 4096) {
        let b = rng.gen_range(0..blocks);
        let data = pattern(n as u64 + 100, 4096);
        if let Err(e) = fs.write(ino, (b * 4096) as u64, &data) {
            let free: Vec<u64> = fs.storage().allocs.iter().map(|a| a.free_blocks()).collect();
            panic!("write {n}: {e}; free {free:?}; {:?}", fs.log_stats());
        }
        model[b * 4096..(b + 1) * 4096].copy_from_slice(&data);
        // (Replaced blocks are free once their batch commits.)
        if n % 256 == 0 {
            fs.sync().unwrap();
        }
    }
    let s = fs.log_stats();
    assert!(s[0].cleaned_segments > 0 && s[0].moved_blocks > 0, "{s:?}");
    assert!(fs.read_file("/db").unwrap() == model);
    check_clean(&fs, "after the overwrites");
    fs.close().unwrap();
    let fs = p.open().unwrap();
    assert!(fs.read_file("/db").unwrap() == model);
}

#[test]
fn the_background_cleaner_runs_before_writers_must_wait() {
    let p = MemPool::new(1, 40 * MB);
    let fs = p.open_with(hurricane::Options::default()).unwrap();
    let size = 20 * MB as usize;
    let mut model = pattern(1, size);
    fs.write_file("/db", &model, Some("log@0")).unwrap();
    let ino = fs.resolve("/db").unwrap();
    fs.sync().unwrap();
    let space = hurricane::blocks::log::LogSpace::of(&fs.storage().devs[0]);
    let mut rng = StdRng::seed_from_u64(3);
    let blocks = size / 4096;
    // Overwrite a hot 4 MiB until clean segments fall under the cleaner's
    // start mark: the segments the overwrites fill then die in part, and
    // become worth cleaning.
    let mut n = 0u64;
    while !space.wants_cleaning() || n < 3000 {
        assert!(n < 40 * MB / 4096, "the log never asked for cleaning: {:?}", fs.log_stats());
        let b = rng.gen_range(0..blocks.min(1024));
        let data = pattern(n + 100, 4096);
        fs.write(ino, (b * 4096) as u64, &data).unwrap();
        model[b * 4096..(b + 1) * 4096].copy_from_slice(&data);
        n += 1;
        if n.is_multiple_of(256) {
            fs.sync().unwrap();
        }
    }
    fs.sync().unwrap();
    // The log asked for cleaning and no writer is left to do it: the
    // cleaner's own thread empties segments (it may have done so already,
    // while the writes went on).
    let t0 = std::time::Instant::now();
    while fs.log_stats()[0].background_segments == 0 {
        assert!(t0.elapsed() < std::time::Duration::from_secs(20), "no background pass: {:?}", fs.log_stats());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let s = fs.log_stats()[0];
    assert!(s.background_segments <= s.cleaned_segments, "{s:?}");
    assert!(fs.read_file("/db").unwrap() == model);
    fs.close().unwrap();
    let fs = p.open().unwrap();
    assert!(fs.read_file("/db").unwrap() == model);
    check_clean(&fs, "after background cleaning");
}

#[test]
fn a_full_log_says_so_at_the_write_and_loses_nothing() {
    let p = MemPool::new(1, 24 * MB);
    let fs = p.open().unwrap();
    fs.write_file("/a", &pattern(1, 4 * MB as usize), Some("log@0")).unwrap();
    let ino = fs.create("/big", Some("log@0")).unwrap().ino();
    fs.sync().unwrap();
    let chunk = pattern(2, MB as usize);
    let mut off = 0u64;
    let err = loop {
        match fs.write(ino, off, &chunk) {
            Ok(_) => off += MB,
            Err(e) => break e,
        }
        assert!(off < 64 * MB, "a 24 MB device took {off} bytes");
    };
    assert!(matches!(err, Error::NoSpace(_)), "{err}");
    assert_eq!(fs.read_file("/a").unwrap(), pattern(1, 4 * MB as usize));
    // An overwrite that finds the log full fails and leaves the old data
    // (the checksum node above the log punches nothing first: the log
    // never overwrites in place).
    let a = fs.resolve("/a").unwrap();
    let err = fs.write(a, 0, &pattern(9, MB as usize)).unwrap_err();
    assert!(matches!(err, Error::NoSpace(_)), "{err}");
    assert_eq!(fs.read_file("/a").unwrap(), pattern(1, 4 * MB as usize));
    let got = fs.read_file("/big").unwrap();
    for k in 0..(off / MB) as usize {
        assert!(got[k * MB as usize..(k + 1) * MB as usize] == chunk[..], "chunk {k} of /big");
    }
    // Space freed is space the log takes again.
    fs.remove("/big").unwrap();
    fs.sync().unwrap();
    fs.write_file("/c", &pattern(3, 4 * MB as usize), Some("log@0")).unwrap();
    check_clean(&fs, "after the full device");
}

#[test]
fn a_file_migrated_off_the_log_leaves_its_index() {
    let p = MemPool::new(2, 64 * MB);
    let fs = p.open().unwrap();
    let data = pattern(4, 3 << 20);
    fs.write_file("/f", &data, Some("log@0")).unwrap();
    let ino = fs.resolve("/f").unwrap();
    fs.sync().unwrap();
    let live = |fs: &Fs| fs.log_stats().iter().filter(|s| s.device == 0).map(|s| s.live_blocks).sum::<u64>();
    assert_eq!(live(&fs), 768);
    fs.migrate(ino, "extent@1", &hurricane::fs::MigrateOptions::default(), &|_| {}).unwrap();
    assert_eq!(live(&fs), 0, "{:?}", fs.log_stats());
    fs.migrate(ino, "log@1", &hurricane::fs::MigrateOptions::default(), &|_| {}).unwrap();
    assert_eq!(fs.read_file("/f").unwrap(), data);
    let r = fs.clean(&CleanOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(r.moved_blocks, 0, "nothing of the old tree is left to move: {r:?}");
    check_clean(&fs, "after the migrations");
}

/// A pool with no background commit: only `sync` commits.
fn quiet(p: &MemPool) -> Fs {
    p.open_with(hurricane::Options { background_commit: false, ..Default::default() }).unwrap()
}

#[test]
fn writes_that_reached_the_disk_after_the_last_commit_are_rolled_forward() {
    let p = MemPool::new(2, 64 * MB);
    let fs = quiet(&p);
    let layouts = [
        "log@0",
        "checksum[log(segment=256K)@1]",
        "stripe(unit=16K)[log@0,log@1]",
        "replicate[log@1,log@0]",
        "extent@0",
    ];
    let mut committed = Vec::new();
    for (i, l) in layouts.iter().enumerate() {
        let m = pattern(i as u64, 300_000 + i * 1000);
        fs.write_file(&format!("/f{i}"), &m, Some(l)).unwrap();
        committed.push(m);
    }
    // A protected file: its plain writes count only through commits.
    fs.write_file("/t", &pattern(9, 100_000), Some("log@0")).unwrap();
    let t = fs.resolve("/t").unwrap();
    fs.setxattr(&hurricane::Creds::root(), t, hurricane::xattr::TXN.as_bytes(), b"1", 0).unwrap();
    fs.sync().unwrap();

    // After the commit: overwrites inside each file (whole blocks, a
    // partial one, one across the end), and a new file.
    let mut want = committed.clone();
    for (i, w) in want.iter_mut().enumerate() {
        let ino = fs.resolve(&format!("/f{i}")).unwrap();
        for (k, (off, len)) in
            [(8192usize, 4096usize), (40_000, 100), (100_000, 70_000), (w.len() - 1000, 5000)].into_iter().enumerate()
        {
            let data = pattern(100 + 10 * i as u64 + k as u64, len);
            fs.write(ino, off as u64, &data).unwrap();
            // Only bytes inside the committed size come back.
            let end = (off + len).min(w.len());
            w[off..end].copy_from_slice(&data[..end - off]);
        }
    }
    fs.write(t, 0, &[7u8; 8192]).unwrap();
    fs.write_file("/new", b"made after the commit", Some("log@0")).unwrap();
    let images: Vec<Vec<u8>> = p.devs.iter().map(|d| d.crash_image(hurricane::device::CrashMode::KeepAll)).collect();
    let lost: Vec<Vec<u8>> = p.devs.iter().map(|d| d.crash_image(hurricane::device::CrashMode::DropAll)).collect();
    drop(fs);

    // Every write arrived: the log files get their overwrites back, the
    // extent file (written copy-on-write under the pool's checksum) and
    // the protected file do not, and no size or file comes from the data.
    let q = MemPool::from_images(images);
    let fs = quiet(&q);
    let r = fs.report().rolled_forward;
    assert!(r.found >= 16 && r.applied >= 12 && r.blocks > 0, "{r:?}");
    for i in 0..4 {
        assert!(fs.read_file(&format!("/f{i}")).unwrap() == want[i], "/f{i} ({}) not rolled forward", layouts[i]);
    }
    assert!(fs.read_file("/f4").unwrap() == committed[4], "the extent file changed");
    assert!(fs.read_file("/t").unwrap() == pattern(9, 100_000), "the protected file changed");
    assert!(matches!(fs.resolve("/new"), Err(Error::NotFound(_))));
    check_clean(&fs, "rolled forward");
    // What roll-forward wrote was committed: the next crash keeps it.
    let again = q.crash(hurricane::device::CrashMode::DropAll);
    drop(fs);
    let fs = quiet(&again);
    for (i, w) in want.iter().enumerate().take(4) {
        assert!(fs.read_file(&format!("/f{i}")).unwrap() == *w, "/f{i} lost after the second open");
    }
    check_clean(&fs, "after the second open");
    drop(fs);

    // Nothing arrived: nothing to roll forward, the committed state stands.
    let q = MemPool::from_images(lost);
    let fs = quiet(&q);
    assert_eq!(fs.report().rolled_forward.applied, 0);
    for (i, c) in committed.iter().enumerate() {
        assert!(fs.read_file(&format!("/f{i}")).unwrap() == *c, "/f{i} changed with nothing to roll forward");
    }
    check_clean(&fs, "nothing arrived");
}

#[test]
fn roll_forward_stops_at_a_torn_piece() {
    use hurricane::blocks::log::Summary;
    let p = MemPool::new(1, 32 * MB);
    let fs = quiet(&p);
    fs.write_file("/f", &pattern(1, 64 * 4096), Some("log@0")).unwrap();
    fs.sync().unwrap();
    let ino = fs.resolve("/f").unwrap();
    // Ten overwrites of distinct blocks, in this order.
    let blocks = [3u64, 40, 7, 22, 60, 1, 33, 50, 12, 28];
    for (k, &b) in blocks.iter().enumerate() {
        fs.write(ino, b * 4096, &pattern(50 + k as u64, 4096)).unwrap();
    }
    let mut image = p.devs[0].crash_image(hurricane::device::CrashMode::KeepAll);
    drop(fs);
    // The summaries of the ten: the last ten placed.
    let mut sums: Vec<(u64, Summary)> =
        image.chunks(4096).enumerate().filter_map(|(i, b)| Summary::decode(b).map(|s| (i as u64, s))).collect();
    sums.sort_by_key(|(_, s)| s.order);
    let ours = &sums[sums.len() - blocks.len()..];
    assert!(ours.iter().zip(blocks).all(|((_, s), b)| s.fblk == b && s.len == 1), "{ours:?}");
    // The sixth write's data did not all arrive.
    let torn = (ours[5].0 + 1) as usize * 4096;
    image[torn..torn + 4096].fill(0);
    let q = MemPool::from_images(vec![image]);
    let fs = quiet(&q);
    let r = fs.report().rolled_forward;
    assert_eq!((r.found, r.applied, r.blocks), (5, 5, 5), "{r:?}");
    let mut want = pattern(1, 64 * 4096);
    for (k, &b) in blocks.iter().enumerate().take(5) {
        want[b as usize * 4096..(b as usize + 1) * 4096].copy_from_slice(&pattern(50 + k as u64, 4096));
    }
    assert!(fs.read_file("/f").unwrap() == want, "not the first five writes alone");
    check_clean(&fs, "torn piece");
}

#[test]
fn the_usage_table_is_stored_and_segment_ages_survive_a_reopen() {
    use hurricane::blocks::log::LogSpace;
    // (live blocks, the segments holding any: size, start, live, time).
    let table = |fs: &Fs| {
        let s = fs.storage().devs[0].shared_if::<LogSpace>().expect("a log space");
        let c: Vec<(u64, u64, u64, i64)> = s
            .usage_table()
            .into_iter()
            .filter(|e| e.2.live > 0)
            .map(|(seg, st, u)| (seg, st, u.live, u.mtime))
            .collect();
        (s.totals().1, c)
    };
    let p = MemPool::new(1, 64 * MB);
    let fs = quiet(&p);
    fs.write_file("/old", &pattern(1, 3 * MB as usize), Some("log(segment=256K)@0")).unwrap();
    fs.sync().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs.write_file("/young", &pattern(2, 3 * MB as usize), Some("log(segment=256K)@0")).unwrap();
    // Overwrites leave segments of both partly live.
    for (name, seed) in [("/old", 3), ("/young", 4)] {
        let ino = fs.resolve(name).unwrap();
        for k in 0..40u64 {
            fs.write(ino, k * 3 * 4096, &pattern(seed + k, 4096)).unwrap();
        }
    }
    fs.sync().unwrap();
    let before = table(&fs);
    assert!(before.1.len() >= 10, "{before:?}");
    let ages: std::collections::BTreeSet<i64> = before.1.iter().map(|c| c.3).collect();
    assert!(ages.len() >= 2, "segments written at different times share one age: {before:?}");
    fs.close().unwrap();

    // A clean reopen finds the table the checkpoint stored: live counts and
    // ages as they were (the open time would make every segment as young).
    let fs = quiet(&p);
    assert_eq!(table(&fs), before, "the usage table after a reopen");
    // After a crash, the table is the checkpoint's moved on by replay.
    let ino = fs.resolve("/old").unwrap();
    for k in 0..30u64 {
        fs.write(ino, (500 + k * 2) * 4096, &pattern(90 + k, 4096)).unwrap();
    }
    fs.truncate(fs.resolve("/young").unwrap(), MB).unwrap();
    fs.sync().unwrap();
    let synced = table(&fs);
    let crashed = p.crash(hurricane::device::CrashMode::DropAll);
    drop(fs);
    let fs = quiet(&crashed);
    let after = table(&fs);
    assert_eq!(after.0, synced.0, "segments and live blocks after replay");
    let live: Vec<(u64, u64, u64)> = after.1.iter().map(|c| (c.0, c.1, c.2)).collect();
    assert_eq!(live, synced.1.iter().map(|c| (c.0, c.1, c.2)).collect::<Vec<_>>());
    // The walk before a cleaning pass counts the same.
    fs.clean(&CleanOptions { max_segments: Some(0), ..Default::default() }, &mut |_| {}).unwrap();
    assert_eq!(table(&fs).0, synced.0, "the walk counts what the stored table said");
    check_clean(&fs, "after the walk");
}

#[test]
fn a_piece_left_out_never_reaches_a_file_made_later_under_its_number() {
    let p = MemPool::new(1, 64 * MB);
    let fs = quiet(&p);
    fs.write_file("/a", &pattern(1, 100_000), Some("log@0")).unwrap();
    fs.sync().unwrap();
    // Made after the commit: lost in the crash, its pieces left out.
    fs.write_file("/lost", &pattern(2, 200_000), Some("log@0")).unwrap();
    let lost = fs.resolve("/lost").unwrap();
    let crashed = p.crash(hurricane::device::CrashMode::KeepAll);
    drop(fs);
    let fs = quiet(&crashed);
    let r = fs.report().rolled_forward;
    assert!(r.found > 0 && r.applied == 0, "{r:?}");
    // A file made now gets the lost file's number, and a size that would
    // take the pieces; it lives on another layout, so no head moves.
    fs.write_file("/new", &[0u8; 200_000], Some("extent@0")).unwrap();
    assert_eq!(fs.resolve("/new").unwrap(), lost, "the test needs the number again");
    fs.sync().unwrap();
    let again = crashed.crash(hurricane::device::CrashMode::DropAll);
    drop(fs);
    let fs = quiet(&again);
    assert_eq!(fs.report().rolled_forward.found, 0);
    assert!(fs.read_file("/new").unwrap() == vec![0u8; 200_000], "the lost file's data reached the new one");
    check_clean(&fs, "after the second open");
}

/// Free blocks data may take on device `d`, and those waiting for a commit.
fn free_on(fs: &Fs, d: usize) -> (u64, u64) {
    let a = &fs.storage().allocs[d];
    (a.free_for_data(), a.pending_frees())
}

/// One 8 MiB device with a 96 KiB journal, the crash harness's geometry:
/// about 6.3 MiB free for data.
fn small_pool() -> MemPool {
    MemPool::with(1, 8 * MB, &hurricane::FormatOptions { journal_size: Some(96 << 10), ..Default::default() })
}

/// An 8 MiB device with 1 MiB segments (the crash harness's geometry):
/// a log file fills it up to the one segment its writers leave the
/// cleaner (not four: half the device), then is removed and written
/// again without a sync between, each time to the same point. Every write
/// acknowledged reads back, and the pool reopens clean.
#[test]
fn a_small_device_fills_its_log_and_takes_as_much_again_after_a_removal() {
    let p = small_pool();
    let fs = p.open().unwrap();
    let chunk = 64 << 10;
    let fill = |fs: &Fs, name: &str, seed: u64| -> Vec<u8> {
        let ino = fs.create(name, Some("log@0")).unwrap().ino();
        let mut model = Vec::new();
        loop {
            let data = pattern(seed + model.len() as u64, chunk);
            match fs.write(ino, model.len() as u64, &data) {
                Ok(_) => model.extend_from_slice(&data),
                Err(Error::NoSpace(_)) => break,
                Err(e) => panic!("{name} at {}: {e}", model.len()),
            }
            assert!(model.len() < 8 * MB as usize, "an 8 MiB device took {} bytes", model.len());
        }
        model
    };
    let a = fill(&fs, "/a", 1);
    // Refused only with the cleaner's segment (256 blocks) and less than
    // a chunk left, nothing waiting for a commit.
    let (free, pending) = free_on(&fs, 0);
    assert!(
        free < 256 + 2 * (chunk as u64 / 4096) && pending == 0,
        "full at {} bytes: {free} free, {pending} pending, {:?}",
        a.len(),
        fs.log_stats()
    );
    assert!(a.len() * 2 >= 9 * MB as usize, "full at {} bytes of 8 MiB", a.len());
    assert!(fs.read_file("/a").unwrap() == a);
    // Removed, and written again at once: its space is reclaimable (free
    // once the removal commits), so the new file gets as much.
    fs.remove("/a").unwrap();
    let b = fill(&fs, "/b", 2);
    assert!(b.len() + chunk >= a.len(), "{} bytes after the removal, {} before", b.len(), a.len());
    assert!(fs.read_file("/b").unwrap() == b);
    check_clean(&fs, "after the second fill");
    fs.close().unwrap();
    let fs = p.open().unwrap();
    assert!(fs.read_file("/b").unwrap() == b);
    assert!(fs.stat("/a").is_err());
    check_clean(&fs, "reopened");
}

/// Overwrites of a log file holding half of a small device, never synced:
/// the blocks they replace are dead but free only once a batch commits,
/// and the writer that runs out commits and cleans rather than fail. The
/// file reads back as the model after a power cut and a reopen.
#[test]
fn unsynced_overwrites_of_a_small_log_never_see_enospc() {
    let p = small_pool();
    let fs = p.open().unwrap();
    let size = 3 * MB as usize;
    let mut model = pattern(1, size);
    fs.write_file("/db", &model, Some("log@0")).unwrap();
    let ino = fs.resolve("/db").unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    // Four devices' worth of overwrites, 4 KiB to 64 KiB each.
    let mut written = 0;
    let mut n = 0u64;
    while written < 32 * MB as usize {
        let len = 4096 * rng.gen_range(1..=16);
        let off = 4096 * rng.gen_range(0..(size - len) / 4096);
        let data = pattern(n + 100, len);
        if let Err(e) = fs.write(ino, off as u64, &data) {
            panic!("overwrite {n} after {written} bytes: {e}; free {:?}; {:?}", free_on(&fs, 0), fs.log_stats());
        }
        model[off..off + len].copy_from_slice(&data);
        written += len;
        n += 1;
    }
    assert!(fs.read_file("/db").unwrap() == model);
    // The last overwrites were never synced, but every write the engine
    // committed on its own is whole after a power cut.
    let cut = p.crash(hurricane::device::CrashMode::KeepAll);
    let fs2 = cut.open().unwrap();
    assert_eq!(fs2.read_file("/db").unwrap().len(), size);
    check_clean(&fs2, "after a power cut");
    drop(fs2);
    fs.close().unwrap();
    let fs = p.open().unwrap();
    assert!(fs.read_file("/db").unwrap() == model);
    check_clean(&fs, "reopened");
}
