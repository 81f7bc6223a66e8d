//! `tpcb`: Seltzer's TPC-B experiment (thesis, Table 7-9) on Hurricane's
//! embedded transactions, with SQLite as the peer.
//!
//! The database: an account file of N accounts (1,000,000; `--quick`
//! 10,000), a teller file of 100 and a branch file of 10, every record 100
//! bytes (id, balance, filler), and a history file each transaction appends
//! a 50-byte record to. A transaction picks a random account, a random
//! teller and that teller's branch (10 tellers a branch) and a delta in
//! ±999,999; it updates the three balances and appends the history record,
//! then commits. Several clients (4 threads; `--quick` 2) run transactions
//! back to back for a time box after a warm-up (20 s after 3 s; `--quick`
//! 2 s after 0.3 s). A transaction aborted by a deadlock (or, in SQLite,
//! by a busy database) is run again and counted as a retry.
//!
//! Hurricane runs through the native API on a pool of one image file in a
//! scratch directory on the host disk (`HURRICANE_BENCH_DIR`, default
//! `/var/tmp`), written whole before it is formatted, as a device is (a
//! log writes where an overwrite in place would not, and a sparse image
//! would charge it the host file system's allocation): the journal, the
//! meta-file and every database file on the one device, as Seltzer's
//! systems had one disk. `TPCB_META_DEVICE=1` puts the journal and the
//! meta-file on a device of their own instead (every commit then also
//! writes the journal's mirror on the data device and syncs two files).
//! The pool is opened with its background committer as in production;
//! every database file is protected (`user.hurricane.txn`).
//! A record is locked
//! for update: the transaction first writes the record's unchanged id,
//! which locks those bytes exclusively (every updater of the record waits
//! there), then reads and rewrites the balance, so the clients lock
//! account, teller, branch and history in one order. Locks cover the bytes
//! read or written (record locks), not Seltzer's pages: the ten branch
//! records share one 4 KiB block, yet transactions on different branches
//! hold their locks side by side, and only two on the same branch (one
//! chance in ten) wait for each other from the branch update to the
//! commit. Their commits still write the shared blocks one after the other
//! (each merges its records onto the block as the last one left it), but
//! the journal forces of concurrent commits are shared (group commit).
//!
//! * `extent`: every file `extent@0`, on a device with room to spare
//!   (three times the database and 4 GiB; `--quick` 256 MiB).
//! * `log`: every file `log@0` on the same, big enough that the cleaner
//!   never runs (the row's `cleaned_segments` says so).
//! * `log+cleaner-70`, `log+cleaner-85`: `log@0` on a device whose
//!   space free to data after formatting (at least 48 MiB) is filled to 70%
//!   and 85% by the database and a filler file (also `log@0`), counted as
//!   the blocks the log's usage table holds live; the log wraps and the
//!   cleaner runs on its own (its background thread, and commits when clean
//!   segments run out).
//!   Should the device fill up regardless, the run ends there and the row's
//!   `note` says after how long.
//! * `sqlite`: SQLite (the system library) with `journal_mode=WAL` and
//!   `synchronous=FULL`, tables of the same records, each client its own
//!   connection running `BEGIN IMMEDIATE`, three `UPDATE`s, an `INSERT`
//!   and `COMMIT`. It runs on ext4 over a loop device whose image is in the
//!   same scratch directory (root needed); where that cannot be made, and
//!   in `--quick` runs, on the scratch directory itself (the row's `note`
//!   says which).
//!
//! After each run the database is checked (not timed): the sums of the
//! account, teller and branch balances and of the history deltas are
//! equal, and the history holds one record per committed transaction;
//! otherwise the experiment fails.
//!
//! Environment: `TPCB_SECONDS` (the time box, seconds), `TPCB_WARMUP`
//! (seconds), `TPCB_ACCOUNTS`, `TPCB_CLIENTS` and `TPCB_SYSTEMS` (a
//! comma-separated subset of the systems) change a run, and
//! `TPCB_META_DEVICE=1` (above); the JSON records the values used.

use super::{f2, Rng};
use crate::{plot, table, Outcome};
use hurricane::fs::LogStatsSnapshot;
use hurricane::{Creds, Error, File, FormatOptions, Fs, Options};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const RECORD: u64 = 100;
const HISTORY_RECORD: u64 = 50;
const TELLERS: u64 = 100;
const BRANCHES: u64 = 10;
const MAX_DELTA: u64 = 999_999;
/// Marks a history record as written (holes read as zeros).
const HISTORY_MARK: u8 = b'H';
const MIB: f64 = (1u64 << 20) as f64;
const BS: u64 = 4096;

/// Seltzer's Table 7-9 (TPS): FFS, EFS (extents), LFS without and with its
/// cleaner running.
const SELTZER_FFS: f64 = 14.2;
const SELTZER_EFS: f64 = 16.8;
const SELTZER_LFS: f64 = 19.3;
const SELTZER_LFS_CLEANER: (f64, f64) = (11.6, 12.4);

const SYSTEMS: &[&str] = &["extent", "log", "log+cleaner-70", "log+cleaner-85", "sqlite"];

/// One run's parameters.
#[derive(Debug, Clone, Copy)]
struct Params {
    accounts: u64,
    clients: usize,
    warmup: Duration,
    seconds: Duration,
    quick: bool,
    /// Meta-data and data on one device (unless `TPCB_META_DEVICE=1`).
    one_device: bool,
}

/// What one system's run measured.
#[derive(Debug, Clone, Default)]
struct Row {
    system: String,
    tps: f64,
    transactions: u64,
    seconds: f64,
    retries: u64,
    /// Log rows: (written + moved) / written over the timed run, segments
    /// cleaned, MiB moved.
    log: Option<(f64, u64, f64)>,
    fill: Option<f64>,
    /// Live share of the usable space measured after the filler.
    fill_measured: Option<f64>,
    /// The same at the end of the run (the history has grown).
    fill_end: Option<f64>,
    device_mib: Option<f64>,
    /// Free space after formatting (what the fill is a share of).
    usable_mib: Option<f64>,
    note: String,
}

impl Row {
    fn json(&self) -> Value {
        let mut v = json!({
            "system": self.system, "tps": self.tps, "transactions": self.transactions,
            "seconds": self.seconds, "retries": self.retries, "note": self.note,
        });
        if let Some((w, c, m)) = self.log {
            v["write_amplification"] = json!(w);
            v["cleaned_segments"] = json!(c);
            v["moved_mib"] = json!(m);
        }
        if let Some(f) = self.fill {
            v["fill"] = json!(f);
        }
        if let Some(f) = self.fill_measured {
            v["fill_measured"] = json!(f);
        }
        if let Some(f) = self.fill_end {
            v["fill_end"] = json!(f);
        }
        if let Some(d) = self.device_mib {
            v["device_mib"] = json!(d);
        }
        if let Some(u) = self.usable_mib {
            v["usable_mib"] = json!(u);
        }
        v
    }
}

fn env_f64(name: &str) -> Result<Option<f64>, String> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .map(Some)
            .ok_or_else(|| format!("{name}={v:?}: not a number of at least 0")),
        Err(_) => Ok(None),
    }
}

fn env_u64(name: &str, min: u64) -> Result<Option<u64>, String> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .replace([',', '_'], "")
            .parse::<u64>()
            .ok()
            .filter(|&x| x >= min)
            .map(Some)
            .ok_or_else(|| format!("{name}={v:?}: not a whole number of at least {min}")),
        Err(_) => Ok(None),
    }
}

/// A scratch directory on the host disk, so every system writes to the same disk.
fn scratch() -> Result<tempfile::TempDir, String> {
    let base = std::env::var_os("HURRICANE_BENCH_DIR").map(PathBuf::from).unwrap_or_else(|| "/var/tmp".into());
    tempfile::Builder::new().prefix("tpcb.").tempdir_in(&base).map_err(|e| format!("{}: {e}", base.display()))
}

/// A 100-byte record: id, balance 0, filler.
fn record(id: u64) -> [u8; RECORD as usize] {
    let mut r = [b'x'; RECORD as usize];
    r[..8].copy_from_slice(&id.to_le_bytes());
    r[8..16].copy_from_slice(&0i64.to_le_bytes());
    r
}

/// A 50-byte history record.
fn history_record(account: u64, teller: u64, branch: u64, delta: i64) -> [u8; HISTORY_RECORD as usize] {
    let mut r = [b'h'; HISTORY_RECORD as usize];
    r[0] = HISTORY_MARK;
    r[1..9].copy_from_slice(&account.to_le_bytes());
    r[9..13].copy_from_slice(&(teller as u32).to_le_bytes());
    r[13..17].copy_from_slice(&(branch as u32).to_le_bytes());
    r[17..25].copy_from_slice(&delta.to_le_bytes());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    r[25..33].copy_from_slice(&now.to_le_bytes());
    r
}

/// One transaction's choices.
#[derive(Debug, Clone, Copy)]
struct Pick {
    account: u64,
    teller: u64,
    branch: u64,
    delta: i64,
}

fn pick(rng: &mut Rng, accounts: u64) -> Pick {
    let teller = rng.below(TELLERS);
    Pick {
        account: rng.below(accounts),
        teller,
        branch: teller / (TELLERS / BRANCHES),
        delta: rng.below(2 * MAX_DELTA + 1) as i64 - MAX_DELTA as i64,
    }
}

/// What the clients count, shared.
#[derive(Default)]
struct Counters {
    commits: AtomicU64,
    retries: AtomicU64,
    stop: AtomicBool,
    /// Why a client stopped the run (out of space), with when.
    ended: parking_lot::Mutex<Option<(String, Instant)>>,
}

/// What [`drive`] measured.
struct Driven<S> {
    /// Transactions committed and retries in the timed box, its seconds.
    transactions: u64,
    retries: u64,
    seconds: f64,
    /// Every transaction committed, warm-up and stragglers included.
    committed: u64,
    note: String,
    /// What `at_mark` returned at the start and the end of the box.
    start: S,
    end: S,
}

/// Runs `client(i, counters)` on `p.clients` threads, times the box after
/// the warm-up and stops them. `at_mark` is called at the start and at the
/// end of the timed box.
fn drive<S: Send>(
    p: &Params,
    client: impl Fn(usize, &Counters) -> Result<(), String> + Sync,
    mut at_mark: impl FnMut() -> S,
) -> Result<Driven<S>, String> {
    let c = Counters::default();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..p.clients)
            .map(|i| {
                let (c, client) = (&c, &client);
                s.spawn(move || {
                    let r = client(i, c);
                    if r.is_err() {
                        c.stop.store(true, Ordering::Release);
                    }
                    r
                })
            })
            .collect();
        let wait = |d: Duration, c: &Counters| {
            let end = Instant::now() + d;
            while Instant::now() < end && !c.stop.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(10).min(end.saturating_duration_since(Instant::now())));
            }
        };
        wait(p.warmup, &c);
        let (n0, r0, t0, s0) =
            (c.commits.load(Ordering::Acquire), c.retries.load(Ordering::Acquire), Instant::now(), at_mark());
        wait(p.seconds, &c);
        let (n1, r1) = (c.commits.load(Ordering::Acquire), c.retries.load(Ordering::Acquire));
        let mut secs = t0.elapsed().as_secs_f64();
        let s1 = at_mark();
        c.stop.store(true, Ordering::Release);
        let mut first_err = None;
        for h in handles {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => first_err = first_err.or(Some(e)),
                Err(_) => first_err = first_err.or(Some("a client thread panicked".to_string())),
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        let mut note = String::new();
        if let Some((why, at)) = c.ended.lock().take() {
            let ran = at.saturating_duration_since(t0).as_secs_f64();
            secs = secs.min(ran);
            note = format!("run ended after {ran:.1} s of the {:.0} s box: {why}", p.seconds.as_secs_f64());
        }
        Ok(Driven {
            transactions: n1 - n0,
            retries: r1 - r0,
            seconds: secs,
            committed: c.commits.load(Ordering::Acquire),
            note,
            start: s0,
            end: s1,
        })
    })
}

// ---------------------------------------------------------------- Hurricane

/// The database's files in a pool.
struct Db {
    accounts: File,
    tellers: File,
    branches: File,
    history: File,
}

fn create_protected(fs: &Fs, path: &str, layout: &str) -> Result<File, String> {
    let f = fs.create(path, Some(layout)).map_err(|e| format!("{path}: {e}"))?;
    fs.setxattr(&Creds::root(), f.ino(), hurricane::xattr::TXN.as_bytes(), b"1", 0)
        .map_err(|e| format!("{path}: {e}"))?;
    Ok(f)
}

/// Writes `n` initial records into `f`, 1 MiB at a time.
fn load(f: &mut File, n: u64) -> Result<(), String> {
    let per = (1 << 20) / RECORD;
    let mut buf = Vec::with_capacity((per * RECORD) as usize);
    let mut id = 0;
    while id < n {
        buf.clear();
        let end = (id + per).min(n);
        for i in id..end {
            buf.extend_from_slice(&record(i));
        }
        f.write_all_at(&buf, id * RECORD).map_err(|e| format!("at record {id}: {e}"))?;
        id = end;
    }
    Ok(())
}

fn make_db(fs: &Fs, p: &Params, layout: &str) -> Result<Db, String> {
    let mut accounts = create_protected(fs, "/accounts", layout)?;
    let mut tellers = create_protected(fs, "/tellers", layout)?;
    let mut branches = create_protected(fs, "/branches", layout)?;
    let history = create_protected(fs, "/history", layout)?;
    load(&mut accounts, p.accounts).map_err(|e| {
        format!(
            "loading the accounts: {e} (free to data {} MiB; log {:?})",
            data_free(fs, 0).max(data_free(fs, 1)) >> 20,
            fs.log_stats()
        )
    })?;
    load(&mut tellers, TELLERS).map_err(|e| format!("loading the tellers: {e}"))?;
    load(&mut branches, BRANCHES).map_err(|e| format!("loading the branches: {e}"))?;
    fs.sync().map_err(|e| format!("syncing the loaded database: {e}"))?;
    Ok(Db { accounts, tellers, branches, history })
}

/// Locks record `id` of `f` for update (by rewriting its unchanged id),
/// adds `delta` to its balance.
fn update(t: &hurricane::Transaction, f: &File, id: u64, delta: i64) -> hurricane::Result<()> {
    let off = id * RECORD;
    t.write(f, off, &id.to_le_bytes())?;
    let mut b = [0u8; 8];
    t.read(f, off + 8, &mut b)?;
    let bal = i64::from_le_bytes(b).wrapping_add(delta);
    t.write(f, off + 8, &bal.to_le_bytes())?;
    Ok(())
}

fn txn(fs: &Fs, db: &Db, k: &Pick, slot: u64) -> hurricane::Result<()> {
    let t = fs.begin()?;
    update(&t, &db.accounts, k.account, k.delta)?;
    update(&t, &db.tellers, k.teller, k.delta)?;
    update(&t, &db.branches, k.branch, k.delta)?;
    t.write(&db.history, slot * HISTORY_RECORD, &history_record(k.account, k.teller, k.branch, k.delta))?;
    t.commit()
}

/// Sum of the balances of the first `n` records of `f`.
fn balance_sum(f: &File, n: u64) -> Result<i128, String> {
    let mut buf = vec![0u8; (10_000 * RECORD) as usize];
    let mut sum = 0i128;
    let mut id = 0;
    while id < n {
        let k = (n - id).min(10_000);
        let want = (k * RECORD) as usize;
        let got = read_full(f, &mut buf[..want], id * RECORD)?;
        if got < want {
            return Err(format!("inode {}: {} bytes where {want} were loaded", f.ino(), got));
        }
        for r in buf[..want].chunks_exact(RECORD as usize) {
            let mut b = [0u8; 8];
            b.copy_from_slice(&r[8..16]);
            sum += i64::from_le_bytes(b) as i128;
        }
        id += k;
    }
    Ok(sum)
}

fn read_full(f: &File, buf: &mut [u8], off: u64) -> Result<usize, String> {
    let mut got = 0;
    while got < buf.len() {
        let n = f.read_at(&mut buf[got..], off + got as u64).map_err(crate::err)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok(got)
}

/// TPC-B's consistency condition, and one history record per commit.
fn check_hurricane(fs: &Fs, db: &Db, p: &Params, committed: u64) -> Result<(), String> {
    let acc = balance_sum(&db.accounts, p.accounts)?;
    let tel = balance_sum(&db.tellers, TELLERS)?;
    let br = balance_sum(&db.branches, BRANCHES)?;
    let size = fs.stat_ino(db.history.ino())?;
    let mut buf = vec![0u8; size as usize];
    let got = read_full(&db.history, &mut buf, 0)?;
    let (mut hist, mut records) = (0i128, 0u64);
    for r in buf[..got].chunks_exact(HISTORY_RECORD as usize) {
        if r[0] == HISTORY_MARK {
            records += 1;
            let mut b = [0u8; 8];
            b.copy_from_slice(&r[17..25]);
            hist += i64::from_le_bytes(b) as i128;
        }
    }
    consistent(acc, tel, br, hist, records, committed)
}

fn consistent(acc: i128, tel: i128, br: i128, hist: i128, records: u64, committed: u64) -> Result<(), String> {
    if acc != tel || tel != br || br != hist {
        return Err(format!(
            "the database is inconsistent: balances of accounts {acc}, tellers {tel}, branches {br}; history deltas {hist}"
        ));
    }
    if records != committed {
        return Err(format!("the history holds {records} records for {committed} committed transactions"));
    }
    Ok(())
}

trait StatIno {
    fn stat_ino(&self, ino: u64) -> Result<u64, String>;
}

impl StatIno for Fs {
    fn stat_ino(&self, ino: u64) -> Result<u64, String> {
        self.getattr(ino).map(|a| a.size).map_err(crate::err)
    }
}

/// The log counters summed over the devices.
fn log_totals(fs: &Fs) -> (u64, u64, u64) {
    fs.log_stats().iter().fold((0, 0, 0), |(w, m, c), s: &LogStatsSnapshot| {
        (w + s.written_blocks, m + s.moved_blocks, c + s.cleaned_segments)
    })
}

/// Bytes free to data on device `dev`: its free blocks less those kept
/// for the meta-file.
fn data_free(fs: &Fs, dev: u32) -> u64 {
    fs.storage().allocs.get(dev as usize).map_or(0, |a| a.free_for_data()) * BS
}

/// Bytes the log's usage tables count live.
fn log_live(fs: &Fs) -> u64 {
    fs.log_stats().iter().map(|s| s.live_blocks).sum::<u64>() * BS
}

/// Where a Hurricane system keeps its data: the device its files' layouts
/// name, and whether the meta-data has a device of its own.
fn data_device(p: &Params) -> u32 {
    if p.one_device {
        0
    } else {
        1
    }
}

/// Makes the pool in `dir`: the data device of `size` bytes, after a small
/// meta-data device (the journal and the meta-file) when `meta_device`.
/// The image files are written whole first, as a device is: a log writes
/// where an overwrite in place would not, and a sparse image would charge
/// it the host file system's allocation.
fn make_pool(dir: &Path, p: &Params, size: u64, journal: u64) -> Result<Fs, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let write_whole = |path: &Path, len: u64| -> Result<(), String> {
        use std::io::Write;
        let err = |e: std::io::Error| format!("{}: {e}", path.display());
        let mut f = std::fs::File::create(path).map_err(err)?;
        let zeros = vec![0u8; 1 << 20];
        let mut left = len;
        while left > 0 {
            let n = left.min(zeros.len() as u64) as usize;
            f.write_all(&zeros[..n]).map_err(err)?;
            left -= n as u64;
        }
        f.sync_all().map_err(err)
    };
    let fo = FormatOptions { journal_size: Some(journal), ..FormatOptions::default() };
    if p.one_device {
        let path = dir.join("dev0.img");
        write_whole(&path, size)?;
        Fs::mkfs_devices(dir, &[path], None, &fo).map_err(crate::err)?;
    } else {
        let meta_size = journal + (256 << 20);
        let paths = [dir.join("meta.img"), dir.join("data.img")];
        for (path, len) in paths.iter().zip([meta_size, size]) {
            write_whole(path, len)?;
        }
        let fo = FormatOptions { meta_layout: Some("extent(max=1T)@0".into()), ..fo };
        Fs::mkfs_devices(dir, &paths, None, &fo).map_err(crate::err)?;
    }
    Fs::open_dir(dir, Options::default()).map_err(crate::err)
}

/// The Hurricane systems: layout type (`extent` or `log`) and fill (None:
/// room to spare).
fn hurricane_run(p: &Params, system: &str, kind: &str, fill: Option<f64>) -> Result<Row, String> {
    let tmp = scratch()?;
    let pool = tmp.path().join("pool");
    let dev = data_device(p);
    let layout = format!("{kind}@{dev}");
    let layout = layout.as_str();
    let db_bytes = p.accounts * RECORD + (TELLERS + BRANCHES) * RECORD;
    let journal: u64 = if p.quick { 8 << 20 } else { 16 << 20 };
    let size = match fill {
        // Sparse: only what is written takes room on the host.
        // Room to spare: three times the database and room for every block
        // the run writes, so that a log never wraps (4 GiB; `--quick`, two
        // seconds of up to 20,000 transactions a second of three 4 KiB
        // blocks each: 1 GiB).
        None => 3 * db_bytes + if p.quick { 1 << 30 } else { 4 << 30 },
        // Free space after formatting somewhat over what the fill needs
        // (the filler makes up the rest), and at least 48 MiB so the log
        // has segments enough to clean. The journal (or its mirror) takes
        // its room on the data device, and with the meta-data there half a
        // journal more is kept free for the meta-file.
        Some(f) => ((db_bytes as f64 / f) as u64).max(48 << 20) + journal + journal / 2 + (16 << 20),
    };
    let fs = make_pool(&pool, p, size, journal)?;
    let usable = data_free(&fs, dev);
    let db = make_db(&fs, p, layout)?;
    let mut note = String::new();
    let mut fill_got = None;
    if let Some(f) = fill {
        // Live: the blocks the log's usage table counts live (the database;
        // a head's unused rest is not), beside the space free after formatting.
        let live = log_live(&fs);
        let target = (f * usable as f64) as u64;
        let filler = target.saturating_sub(live);
        let mut file = fs.create("/filler", Some(layout)).map_err(crate::err)?;
        let chunk: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8 | 1).collect();
        let mut off = 0;
        while off < filler {
            let n = (filler - off).min(chunk.len() as u64) as usize;
            file.write_all_at(&chunk[..n], off).map_err(|e| format!("filler at {off}: {e}"))?;
            off += n as u64;
        }
        fs.sync().map_err(|e| format!("syncing the filler: {e}"))?;
        let now_live = log_live(&fs);
        fill_got = Some(now_live as f64 / usable as f64);
        eprintln!(
            "tpcb: {system}: {:.1} MiB usable, {:.1} MiB database, {:.1} MiB filler: {:.1}% live",
            usable as f64 / MIB,
            live as f64 / MIB,
            filler as f64 / MIB,
            100.0 * now_live as f64 / usable as f64
        );
    }
    let slots = AtomicU64::new(0);
    let accounts = p.accounts;
    let client = |i: usize, c: &Counters| -> Result<(), String> {
        let mut rng = Rng(0x7c_b000 + i as u64);
        while !c.stop.load(Ordering::Acquire) {
            let k = pick(&mut rng, accounts);
            let slot = slots.fetch_add(1, Ordering::AcqRel);
            loop {
                match txn(&fs, &db, &k, slot) {
                    Ok(()) => {
                        c.commits.fetch_add(1, Ordering::AcqRel);
                        break;
                    }
                    Err(Error::Deadlock(_)) => {
                        c.retries.fetch_add(1, Ordering::AcqRel);
                    }
                    Err(e @ Error::NoSpace(_)) => {
                        let mut ended = c.ended.lock();
                        if ended.is_none() {
                            *ended = Some((e.to_string(), Instant::now()));
                        }
                        c.stop.store(true, Ordering::Release);
                        return Ok(());
                    }
                    Err(e) => return Err(format!("{system}: client {i}: {e}")),
                }
            }
        }
        Ok(())
    };
    let d = drive(p, client, || log_totals(&fs))?;
    let (n, r, secs) = (d.transactions, d.retries, d.seconds);
    note.push_str(&d.note);
    fs.sync().map_err(|e| format!("{system}: syncing after the run: {e}"))?;
    let fill_end = fill.map(|_| log_live(&fs) as f64 / usable as f64);
    check_hurricane(&fs, &db, p, d.committed).map_err(|e| format!("{system}: {e}"))?;
    let log = layout.starts_with("log").then(|| {
        let (s0, s1) = (d.start, d.end);
        let (w, m, c) = (s1.0 - s0.0, s1.1 - s0.1, s1.2 - s0.2);
        (if w == 0 { 1.0 } else { (w + m) as f64 / w as f64 }, c, m as f64 * BS as f64 / MIB)
    });
    if fill.is_none() && log.is_some_and(|l| l.1 > 0) {
        note = format!("{note} the cleaner ran (the device was not big enough to avoid it)").trim().to_string();
    }
    drop(db);
    // The run and its check are done and everything committed is in the
    // journal: a failing final checkpoint is reported with the row.
    if let Err(e) = fs.close() {
        eprintln!("tpcb: {system}: closing the pool: {e}");
        note = format!("{note} closing the pool failed: {e}").trim().to_string();
    }
    Ok(Row {
        system: system.into(),
        tps: n as f64 / secs.max(1e-9),
        transactions: n,
        seconds: secs,
        retries: r,
        log,
        fill,
        fill_measured: fill_got,
        fill_end,
        device_mib: Some(size as f64 / MIB),
        usable_mib: Some(usable as f64 / MIB),
        note,
    })
}

// ------------------------------------------------------------------ SQLite

const SQL_SCHEMA: &str = "
    CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, filler TEXT NOT NULL);
    CREATE TABLE tellers (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, filler TEXT NOT NULL);
    CREATE TABLE branches (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, filler TEXT NOT NULL);
    CREATE TABLE history (account INTEGER NOT NULL, teller INTEGER NOT NULL, branch INTEGER NOT NULL,
                          delta INTEGER NOT NULL, time INTEGER NOT NULL, filler TEXT NOT NULL);";

fn sql_err(e: rusqlite::Error) -> String {
    format!("sqlite: {e}")
}

/// A connection set up as every client's is.
fn sql_open(path: &Path) -> Result<rusqlite::Connection, String> {
    let c = rusqlite::Connection::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    c.busy_timeout(Duration::from_secs(10)).map_err(sql_err)?;
    let mode: String = c.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).map_err(sql_err)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(format!("sqlite: journal_mode is {mode}, not wal"));
    }
    c.execute_batch("PRAGMA synchronous=FULL").map_err(sql_err)?;
    Ok(c)
}

fn sql_load(path: &Path, p: &Params) -> Result<(), String> {
    let mut c = sql_open(path)?;
    c.execute_batch(SQL_SCHEMA).map_err(sql_err)?;
    // id (8) + balance (8) + filler: 100 bytes a row, as the files' records.
    let filler = "x".repeat((RECORD - 16) as usize);
    let t = c.transaction().map_err(sql_err)?;
    for (table, n) in [("accounts", p.accounts), ("tellers", TELLERS), ("branches", BRANCHES)] {
        let mut st =
            t.prepare(&format!("INSERT INTO {table} (id, balance, filler) VALUES (?1, 0, ?2)")).map_err(sql_err)?;
        for id in 0..n {
            st.execute(rusqlite::params![id as i64, filler]).map_err(sql_err)?;
        }
    }
    t.commit().map_err(sql_err)?;
    c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").map_err(sql_err)?;
    Ok(())
}

fn sql_txn(c: &rusqlite::Connection, k: &Pick, filler: &str) -> rusqlite::Result<()> {
    c.execute_batch("BEGIN IMMEDIATE")?;
    let r = (|| -> rusqlite::Result<()> {
        c.prepare_cached("UPDATE accounts SET balance = balance + ?1 WHERE id = ?2")?
            .execute((k.delta, k.account as i64))?;
        c.prepare_cached("UPDATE tellers SET balance = balance + ?1 WHERE id = ?2")?
            .execute((k.delta, k.teller as i64))?;
        c.prepare_cached("UPDATE branches SET balance = balance + ?1 WHERE id = ?2")?
            .execute((k.delta, k.branch as i64))?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64);
        c.prepare_cached(
            "INSERT INTO history (account, teller, branch, delta, time, filler) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute((k.account as i64, k.teller as i64, k.branch as i64, k.delta, now, filler))?;
        c.execute_batch("COMMIT")
    })();
    if r.is_err() && !c.is_autocommit() {
        let _ = c.execute_batch("ROLLBACK");
    }
    r
}

fn busy(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy) | Some(rusqlite::ErrorCode::DatabaseLocked))
}

fn check_sqlite(path: &Path, committed: u64) -> Result<(), String> {
    let c = sql_open(path)?;
    let sum = |q: &str| -> Result<i128, String> {
        c.query_row(q, [], |r| r.get::<_, Option<i64>>(0)).map(|v| v.unwrap_or(0) as i128).map_err(sql_err)
    };
    let acc = sum("SELECT SUM(balance) FROM accounts")?;
    let tel = sum("SELECT SUM(balance) FROM tellers")?;
    let br = sum("SELECT SUM(balance) FROM branches")?;
    let hist = sum("SELECT SUM(delta) FROM history")?;
    let records = sum("SELECT COUNT(*) FROM history")? as u64;
    consistent(acc, tel, br, hist, records, committed)
}

/// Where SQLite's database lives: ext4 on a loop device (full runs, as
/// root), else the scratch directory. The loop device goes when dropped.
fn sqlite_place(tmp: &Path, p: &Params) -> (PathBuf, Option<crate::mounts::LoopFs>, String) {
    if p.quick {
        return (tmp.to_path_buf(), None, "plain scratch directory (--quick)".into());
    }
    // Sparse: the database, its WAL and room to grow.
    let size = (p.accounts * RECORD * 4).max(1 << 30) + (1 << 30);
    match crate::mounts::LoopFs::make("ext4", &tmp.join("ext4.img"), size, &tmp.join("mnt"), &[]) {
        Ok(l) => (l.mnt.clone(), Some(l), "ext4 on a loop device".into()),
        Err(e) => (tmp.to_path_buf(), None, format!("plain scratch directory: no ext4 on a loop device ({e})")),
    }
}

fn sqlite_run(p: &Params) -> Result<Row, String> {
    let tmp = scratch()?;
    let (dir, loop_fs, note) = sqlite_place(tmp.path(), p);
    let path = dir.join("tpcb.db");
    let r = (|| -> Result<Row, String> {
        sql_load(&path, p)?;
        let accounts = p.accounts;
        let filler = "h".repeat((HISTORY_RECORD - 40) as usize);
        let client = |i: usize, c: &Counters| -> Result<(), String> {
            let conn = sql_open(&path)?;
            let mut rng = Rng(0x7c_b000 + i as u64);
            while !c.stop.load(Ordering::Acquire) {
                let k = pick(&mut rng, accounts);
                loop {
                    match sql_txn(&conn, &k, &filler) {
                        Ok(()) => {
                            c.commits.fetch_add(1, Ordering::AcqRel);
                            break;
                        }
                        Err(e) if busy(&e) => {
                            c.retries.fetch_add(1, Ordering::AcqRel);
                        }
                        Err(e) => return Err(format!("sqlite: client {i}: {e}")),
                    }
                }
            }
            Ok(())
        };
        let d = drive(p, client, || ())?;
        check_sqlite(&path, d.committed)?;
        Ok(Row {
            system: "sqlite".into(),
            tps: d.transactions as f64 / d.seconds.max(1e-9),
            transactions: d.transactions,
            seconds: d.seconds,
            retries: d.retries,
            note: format!("{note} {}", d.note).trim().to_string(),
            ..Row::default()
        })
    })();
    // The loop device is unmounted and detached here, on errors too.
    drop(loop_fs);
    r
}

// -------------------------------------------------------------- experiment

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

pub fn run(quick: bool) -> Result<Outcome, String> {
    let p = Params {
        accounts: env_u64("TPCB_ACCOUNTS", 10)?.unwrap_or(if quick { 10_000 } else { 1_000_000 }),
        clients: env_u64("TPCB_CLIENTS", 1)?.unwrap_or(if quick { 2 } else { 4 }).min(256) as usize,
        warmup: Duration::from_secs_f64(env_f64("TPCB_WARMUP")?.unwrap_or(if quick { 0.3 } else { 3.0 })),
        seconds: Duration::from_secs_f64(env_f64("TPCB_SECONDS")?.unwrap_or(if quick { 2.0 } else { 20.0 }).max(0.1)),
        quick,
        one_device: !std::env::var("TPCB_META_DEVICE").is_ok_and(|v| v == "1"),
    };
    let systems: Vec<String> = match std::env::var("TPCB_SYSTEMS") {
        Ok(v) => {
            let list: Vec<String> = v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
            if let Some(bad) = list.iter().find(|s| !SYSTEMS.contains(&s.as_str())) {
                return Err(format!("TPCB_SYSTEMS: unknown system {bad:?} (known: {})", SYSTEMS.join(", ")));
            }
            list
        }
        Err(_) => SYSTEMS.iter().map(|s| s.to_string()).collect(),
    };
    let mut rows = Vec::new();
    for s in &systems {
        eprintln!(
            "tpcb: {s}: {} accounts, {} clients, {:.1} s after {:.1} s warm-up",
            p.accounts,
            p.clients,
            p.seconds.as_secs_f64(),
            p.warmup.as_secs_f64()
        );
        let row = match s.as_str() {
            "extent" => hurricane_run(&p, s, "extent", None),
            "log" => hurricane_run(&p, s, "log", None),
            "log+cleaner-70" => hurricane_run(&p, s, "log", Some(0.70)),
            "log+cleaner-85" => hurricane_run(&p, s, "log", Some(0.85)),
            _ => sqlite_run(&p),
        }
        .map_err(|e| if e.starts_with(s.as_str()) { e } else { format!("{s}: {e}") })?;
        eprintln!("tpcb: {s}: {:.1} TPS ({} transactions, {} retries)", row.tps, row.transactions, row.retries);
        rows.push(row);
    }
    let tps = |s: &str| rows.iter().find(|r| r.system == s).map(|r| r.tps);
    let loss = |s: &str| ratio(tps(s), tps("log")).map(|x| 1.0 - x);
    let ratios = json!({
        "log_over_extent": ratio(tps("log"), tps("extent")),
        "extent_over_sqlite": ratio(tps("extent"), tps("sqlite")),
        "log_over_sqlite": ratio(tps("log"), tps("sqlite")),
        "cleaner_loss_70": loss("log+cleaner-70"),
        "cleaner_loss_85": loss("log+cleaner-85"),
    });
    let seltzer_loss = (1.0 - SELTZER_LFS_CLEANER.1 / SELTZER_LFS, 1.0 - SELTZER_LFS_CLEANER.0 / SELTZER_LFS);
    let opt = |x: Option<f64>| x.map_or("-".to_string(), f2);
    let pct = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:.0}%", 100.0 * v));
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.system.clone(),
                format!("{:.1}", r.tps),
                r.transactions.to_string(),
                format!("{:.1}", r.seconds),
                r.retries.to_string(),
                r.log.map_or("-".into(), |l| f2(l.0)),
                r.log.map_or("-".into(), |l| l.1.to_string()),
                r.log.map_or("-".into(), |l| format!("{:.1}", l.2)),
                r.fill_measured.map_or("-".into(), |f| format!("{:.0}%", 100.0 * f)),
                r.note.clone(),
            ]
        })
        .collect();
    let mut text = format!(
        "TPC-B (Seltzer, Table 7-9): {} accounts, {} clients, {:.0} s after a {:.1} s warm-up\n",
        p.accounts,
        p.clients,
        p.seconds.as_secs_f64(),
        p.warmup.as_secs_f64()
    );
    text.push_str(&table(
        &["system", "TPS", "transactions", "s", "retries", "write amp", "cleaned segs", "moved MiB", "fill", "note"],
        &cells,
    ));
    text.push_str(&table(
        &["ratio", "here", "Seltzer"],
        &[
            vec!["log / extent".into(), opt(ratio(tps("log"), tps("extent"))), f2(SELTZER_LFS / SELTZER_EFS)],
            vec!["extent / sqlite".into(), opt(ratio(tps("extent"), tps("sqlite"))), "-".into()],
            vec!["log / sqlite".into(), opt(ratio(tps("log"), tps("sqlite"))), "-".into()],
            vec![
                "cleaner loss at 70%".into(),
                pct(loss("log+cleaner-70")),
                format!("{:.0}-{:.0}%", 100.0 * seltzer_loss.0, 100.0 * seltzer_loss.1),
            ],
            vec![
                "cleaner loss at 85%".into(),
                pct(loss("log+cleaner-85")),
                format!("{:.0}-{:.0}%", 100.0 * seltzer_loss.0, 100.0 * seltzer_loss.1),
            ],
        ],
    ));
    text.push_str(&format!(
        "Seltzer (TPS): FFS {SELTZER_FFS}, EFS {SELTZER_EFS}, LFS {SELTZER_LFS}, LFS with its cleaner {}-{}\n",
        SELTZER_LFS_CLEANER.0, SELTZER_LFS_CLEANER.1
    ));
    let line = format!(
        "tpcb: extent {} TPS, log {} TPS (log/extent {}; Seltzer LFS/EFS {:.2}), sqlite {} TPS; the cleaner costs {} \
         at 70% full and {} at 85% (Seltzer {:.0}-{:.0}%)",
        opt(tps("extent")),
        opt(tps("log")),
        opt(ratio(tps("log"), tps("extent"))),
        SELTZER_LFS / SELTZER_EFS,
        opt(tps("sqlite")),
        pct(loss("log+cleaner-70")),
        pct(loss("log+cleaner-85")),
        100.0 * seltzer_loss.0,
        100.0 * seltzer_loss.1
    );
    let data = json!({
        "params": {"accounts": p.accounts, "tellers": TELLERS, "branches": BRANCHES, "record_bytes": RECORD,
                   "history_record_bytes": HISTORY_RECORD, "clients": p.clients,
                   "warmup_s": p.warmup.as_secs_f64(), "seconds": p.seconds.as_secs_f64(), "systems": systems,
                   "hurricane_devices": if p.one_device {
                       "one image file: journal, meta-file and data (layouts @0)"
                   } else {
                       "meta-data image (journal, meta-file) and data image (journal mirror, files @1), same disk"
                   }},
        "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
        "ratios": ratios,
        "seltzer": {"ffs_tps": SELTZER_FFS, "efs_tps": SELTZER_EFS, "lfs_tps": SELTZER_LFS,
                    "lfs_cleaner_tps": [SELTZER_LFS_CLEANER.0, SELTZER_LFS_CLEANER.1],
                    "lfs_over_efs": SELTZER_LFS / SELTZER_EFS,
                    "cleaner_loss": [seltzer_loss.0, seltzer_loss.1]},
    });
    let items: Vec<(String, f64, Option<f64>)> = rows.iter().map(|r| (r.system.clone(), r.tps, None)).collect();
    Ok(Outcome {
        table: text,
        line,
        data,
        plot: Box::new(move |path| plot::bars(path, "TPC-B transactions per second", "TPS", &items)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_consistency_condition_catches_a_lost_update() {
        assert!(consistent(5, 5, 5, 5, 3, 3).is_ok());
        assert!(consistent(5, 4, 5, 5, 3, 3).unwrap_err().contains("inconsistent"));
        assert!(consistent(5, 5, 5, 6, 3, 3).unwrap_err().contains("inconsistent"));
        assert!(consistent(5, 5, 5, 5, 2, 3).unwrap_err().contains("2 records for 3"));
    }

    #[test]
    fn picks_are_in_range_and_branches_follow_tellers() {
        let mut rng = Rng(1);
        for _ in 0..10_000 {
            let k = pick(&mut rng, 1000);
            assert!(k.account < 1000 && k.teller < TELLERS && k.branch < BRANCHES);
            assert_eq!(k.branch, k.teller / 10);
            assert!(k.delta.unsigned_abs() <= MAX_DELTA);
        }
    }

    #[test]
    fn records_have_their_sizes_and_fields() {
        let r = record(7);
        assert_eq!(r.len() as u64, RECORD);
        assert_eq!(u64::from_le_bytes(r[..8].try_into().unwrap()), 7);
        assert_eq!(i64::from_le_bytes(r[8..16].try_into().unwrap()), 0);
        let h = history_record(1, 2, 0, -42);
        assert_eq!(h.len() as u64, HISTORY_RECORD);
        assert_eq!(h[0], HISTORY_MARK);
        assert_eq!(i64::from_le_bytes(h[17..25].try_into().unwrap()), -42);
    }

    #[test]
    fn bad_settings_are_refused_with_their_name() {
        // Names no run sets, so the test does not race other tests.
        std::env::set_var("TPCB_TEST_BAD_NUMBER", "soon");
        assert!(env_f64("TPCB_TEST_BAD_NUMBER").unwrap_err().contains("TPCB_TEST_BAD_NUMBER"));
        assert!(env_u64("TPCB_TEST_BAD_NUMBER", 1).unwrap_err().contains("not a whole number"));
        assert_eq!(env_u64("TPCB_TEST_UNSET", 1).unwrap(), None);
    }
}
