//! The crash harness in CI mode: every workload, a fixed number of crash
//! points, zero violations allowed. `hurricane crashtest --long` runs more.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hurricane::crashtest::{run, workloads, CrashOptions};

/// Crash points per workload in CI (each checked in up to 5 crash modes).
const POINTS: usize = 500;

fn ci(workload: &str) {
    let opts = CrashOptions { jobs: 2, ..CrashOptions::new(workload, POINTS, 7) };
    let r = run(&opts);
    eprintln!("{r}");
    assert!(r.error.is_none(), "{r}");
    assert_eq!(r.points, POINTS, "{r}");
    assert!(r.states >= POINTS, "{r}");
    assert!(r.syncs >= 10, "{r}");
    assert_eq!(r.violations, 0, "{r}");
}

#[test]
fn workload_list() {
    let names: Vec<&str> = workloads().iter().map(|(n, _)| *n).collect();
    for want in [
        "posix",
        "renames",
        "appends",
        "extent",
        "stripe",
        "regions",
        "replicate",
        "inline",
        "nested",
        "concurrent",
        "full",
        "resilver",
        "parity",
        "compress",
        "evacuate",
        "migrate",
        "directory",
        "log",
        "cleaner",
        "txn",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let r = run(&CrashOptions::new("nope", 10, 1));
    assert!(r.error.as_deref().is_some_and(|e| e.contains("unknown workload")), "{r}");
    assert!(!r.passed());
}

#[test]
fn parity() {
    ci("parity");
}
#[test]
fn compress() {
    ci("compress");
}
#[test]
fn posix() {
    ci("posix");
}
#[test]
fn txn() {
    ci("txn");
}
#[test]
fn renames() {
    ci("renames");
}
#[test]
fn appends() {
    ci("appends");
}
#[test]
fn extent() {
    ci("extent");
}
#[test]
fn stripe() {
    ci("stripe");
}
#[test]
fn regions() {
    ci("regions");
}
#[test]
fn replicate() {
    ci("replicate");
}
#[test]
fn inline() {
    ci("inline");
}
#[test]
fn nested() {
    ci("nested");
}
#[test]
fn concurrent() {
    ci("concurrent");
}
#[test]
fn full() {
    ci("full");
}
#[test]
fn resilver() {
    ci("resilver");
}
#[test]
fn evacuate() {
    ci("evacuate");
}
#[test]
fn migrate() {
    ci("migrate");
}
#[test]
fn log() {
    ci("log");
}
#[test]
fn cleaner() {
    ci("cleaner");
}

/// The checker has teeth: a disk that acknowledges flushes without doing
/// them loses synced data, and that is reported.
#[test]
fn lying_disks_are_caught() {
    // Device 0 holds the journal and a copy of the meta-file, device 1 their
    // mirrors: a rename storm lies on both (one lying copy of each is often
    // read around).
    for (workload, lying) in
        [("posix", vec![0]), ("extent", vec![1, 2]), ("renames", vec![0, 1]), ("appends", vec![1, 2])]
    {
        let opts = CrashOptions {
            jobs: 2,
            lying_devices: lying.clone(),
            max_reported: 3,
            ..CrashOptions::new(workload, 100, 3)
        };
        let r = run(&opts);
        eprintln!("lying {lying:?}: {r}");
        assert!(r.violations > 0, "{r}");
    }
}

/// Recovery time: a pool of 100,000 files whose journal is full of small
/// synced operations (as many one-block records as fit before the next
/// commit would checkpoint: half the journal), crashed, then opened. By hand:
/// `cargo test -p hurricane --test crashtest -- --ignored recovery_time --nocapture`
#[test]
#[ignore]
fn recovery_time() {
    use hurricane::{FormatOptions, Fs, Options};
    use std::time::Instant;
    let quiet = || Options { background_commit: false, ..Options::default() };
    let dir = std::env::var_os("RECOVERY_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("hurricane-recovery-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // 3 devices of 1 GiB and a 32 MiB journal (the default for that size;
    // RECOVERY_JOURNAL_MB changes it).
    let jmb: u64 = std::env::var("RECOVERY_JOURNAL_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(32);
    Fs::mkfs_dir(&dir, 3, 1 << 30, &FormatOptions { journal_size: Some(jmb << 20), ..Default::default() }).unwrap();
    let fs = Fs::open_dir(&dir, quiet()).unwrap();
    let t0 = Instant::now();
    let files = 100_000;
    for d in 0..100 {
        fs.mkdir_path(&format!("/d{d}"), 0o755).unwrap();
        for f in 0..files / 100 {
            fs.write_file(&format!("/d{d}/f{f}"), format!("file {d}/{f}").as_bytes(), None).unwrap();
        }
        fs.sync().unwrap();
    }
    fs.checkpoint().unwrap();
    let made = t0.elapsed();
    // Fill the journal: one small operation per sync, one block per record,
    // up to half the journal (the next commit would checkpoint instead).
    let (_, ckpts) = fs.commit_counts();
    let t1 = Instant::now();
    let records = (jmb << 20) as usize / 4096 / 2;
    for i in 0..records {
        // Each operation on a file of its own: /d{i % 100}/f{i / 100}.
        let (d, f) = (i % 100, i / 100);
        match i % 4 {
            0 => fs.write_file(&format!("/d{d}/new{i}"), b"new", None).unwrap(),
            1 => fs.rename_path(&format!("/d{d}/f{f}"), &format!("/d{d}/renamed{i}")).unwrap(),
            2 => fs.remove(&format!("/d{d}/f{f}")).unwrap(),
            _ => {
                let h = fs.open_with(&format!("/d{d}/f{f}"), hurricane::OpenOptions::new().write(true)).unwrap();
                h.write_at(b"overwritten", 0).unwrap();
            }
        }
        fs.sync().unwrap();
    }
    assert_eq!(fs.commit_counts().1, ckpts, "the journal filled without a checkpoint");
    let filled = t1.elapsed();
    // The crash: the process goes away without closing the pool.
    drop(fs);
    let t2 = Instant::now();
    let fs = Fs::open_dir(&dir, quiet()).unwrap();
    let open = t2.elapsed();
    let r = fs.report();
    assert!(!r.was_clean);
    assert!(r.replayed_records >= records, "{} records replayed", r.replayed_records);
    assert_eq!(fs.read_file("/d4/new4").unwrap(), b"new");
    assert_eq!(fs.read_file("/d5/renamed105").unwrap(), b"file 5/1");
    assert_eq!(fs.read_file("/d3/f0").unwrap(), b"overwritten");
    assert!(fs.stat("/d2/f0").is_err());
    let t3 = Instant::now();
    let f = hurricane::fsck::check(&fs, false, &mut |_, _, _| {}).unwrap();
    let fsck = t3.elapsed();
    assert!(f.is_clean(), "{:?}", f.remaining);
    eprintln!(
        "recovery: {} inodes; made in {:.1} s; journal filled with {records} synced operations in {:.1} s\n\
         open after the crash: {:.3} s (replay of {} records, {} ops: {:.3} s); fsck afterwards: {:.2} s",
        f.inodes,
        made.as_secs_f64(),
        filled.as_secs_f64(),
        open.as_secs_f64(),
        r.replayed_records,
        r.replayed_ops,
        r.replay_time.as_secs_f64(),
        fsck.as_secs_f64()
    );
    drop(fs);
    let _ = std::fs::remove_dir_all(&dir);
}
#[test]
fn degraded() {
    ci("degraded");
}

#[test]
fn directory() {
    ci("directory");
}

#[test]
fn colocate() {
    ci("colocate");
}

/// Seeds for [`many_seeds`]: `fixed` (each once found a failure), then
/// `CRASH_SEEDS` more (default 5) drawn from `CRASH_SEED` (default: a
/// fixed start, so CI runs the same ones; set it to explore). With
/// `CRASH_SEED_LIST` (seeds separated by commas), those seeds alone.
fn seeds(fixed: &[u64]) -> Vec<u64> {
    if let Ok(list) = std::env::var("CRASH_SEED_LIST") {
        return list
            .split(',')
            .map(|v| v.trim().parse().expect("CRASH_SEED_LIST: seeds separated by commas"))
            .collect();
    }
    let n: u64 = std::env::var("CRASH_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let start: u64 = std::env::var("CRASH_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(20_261_207);
    let mut out = fixed.to_vec();
    let mut x = start;
    for _ in 0..n {
        // splitmix64: seeds spread over 1..=1,000,000.
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.push((z ^ (z >> 31)) % 1_000_000 + 1);
    }
    out
}

/// A workload over many seeds with few crash points each (the CI runs
/// above check 500 points of seed 7; `CRASH_POINTS` changes how many):
/// every run must record (no engine error) and break no rule.
fn many_seeds(workload: &str, points: usize, fixed: &[u64]) {
    let points = std::env::var("CRASH_POINTS").ok().and_then(|v| v.parse().ok()).unwrap_or(points);
    let mut failed = Vec::new();
    for seed in seeds(fixed) {
        let r = run(&CrashOptions { jobs: 2, max_reported: 3, ..CrashOptions::new(workload, points, seed) });
        eprintln!("{r}");
        if !r.passed() {
            failed.push(format!("{r}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Log files on small devices: writers refused for space reclaim it
/// (commit, clean) and go on; the seeds listed all failed with "log:
/// device full" while half of a device was free.
#[test]
fn log_many_seeds() {
    many_seeds("log", 40, &[4127, 4128, 4129, 5000, 7002, 8003, 10005]);
}

/// Full devices: an overwrite of checksummed data with no room to copy is
/// refused, never written in place (seed 424242 once read synced data
/// back as checksum errors after a crash).
#[test]
fn full_many_seeds() {
    many_seeds("full", 40, &[424242]);
}

/// Device 2 lost: files whose only copy it held (wrapped in the pool's
/// default checksums) fail with EIO (seed 424242 once stopped the
/// workload there).
#[test]
fn degraded_many_seeds() {
    many_seeds("degraded", 40, &[424242]);
}
