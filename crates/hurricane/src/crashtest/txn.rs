//! The `txn` workload: threads run overlapping transactions over a few
//! shared files (reads and writes in random order, partial blocks, records
//! of one block that transactions update side by side under record locks,
//! and appends; some aborted, some chosen as deadlock victims), with the
//! background committer on. Each committed transaction is noted with the
//! log positions its `commit` started and returned at.
//!
//! The rule a crash state must keep: every committed transaction is wholly
//! present or wholly absent, one whose commit returned before the cut is
//! present, one whose commit had not started is absent, and nothing else
//! (aborted transactions, deadlock victims) ever shows. The state must be
//! the files' first contents with exactly such a set of transactions
//! applied in commit order.

use super::record::{Mark, Recorder};
use super::workloads::{pattern, SyncRec};
use crate::error::{Error, Result};
use crate::namespace::Creds;
use crate::{File, Fs};
use parking_lot::Mutex;
use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};
use std::sync::Arc;

/// The shared files: path and layout.
pub(crate) const FILES: &[(&str, &str)] = &[
    ("/t0", "extent"),
    ("/t1", "stripe(unit=16K,width=3)"),
    ("/t2", "checksum[extent]"),
    ("/t3", "replicate(copies=2)"),
    ("/t4", "log(segment=64K)@1"),
];
/// Threads running transactions.
pub(crate) const THREADS: usize = 4;
/// Writes land in the first `SPAN` bytes of a file (appends reach past it).
const SPAN: u64 = 40 << 10;
/// Records of the first file block (40 of them) that writes update whole.
const RECORD: u64 = 100;
const BS: u64 = crate::blocks::BLOCK_SIZE as u64;

/// One committed transaction: its writes in order, and when its commit
/// started and returned.
#[derive(Debug, Clone)]
pub(crate) struct TxnRec {
    pub start: Mark,
    pub end: Mark,
    pub writes: Vec<(usize, u64, Arc<Vec<u8>>)>,
}

/// What the checker needs of a `txn` run.
#[derive(Debug, Clone, Default)]
pub(crate) struct TxnHist {
    /// Each file's contents before the workload.
    pub initial: Vec<Vec<u8>>,
    pub committed: Vec<TxnRec>,
    /// Transactions begun (committed, aborted and deadlock victims).
    pub attempts: usize,
    pub aborted: usize,
    pub deadlocks: usize,
}

impl TxnHist {
    /// The log positions where committed transactions began and returned:
    /// the only marks [`check`] compares a cut with.
    pub fn marks(&self) -> impl Iterator<Item = usize> + '_ {
        self.committed.iter().flat_map(|t| [t.start.pos, t.end.pos])
    }
}

/// Creates the protected files with their first contents (before the
/// recording starts) and returns those contents.
pub(crate) fn setup(fs: &Fs, seed: u64) -> Result<Vec<Vec<u8>>> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x7A7A);
    let mut out = Vec::new();
    for (i, (path, layout)) in FILES.iter().enumerate() {
        let mut f = fs.create(path, Some(layout))?;
        fs.setxattr(&Creds::root(), f.ino(), crate::xattr::TXN.as_bytes(), b"1", 0)?;
        let data = pattern(seed.wrapping_mul(31).wrapping_add(i as u64), rng.gen_range(0..SPAN as usize));
        f.write_all_at(&data, 0)?;
        out.push(data);
    }
    Ok(out)
}

/// One thread's transactions.
pub(crate) fn thread(
    fs: &Fs,
    rec: &Recorder,
    syncs: &Mutex<Vec<SyncRec>>,
    hist: &Mutex<TxnHist>,
    seed: u64,
    t: usize,
    txns: usize,
) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(1000).wrapping_add(t as u64));
    let files: Vec<File> = FILES
        .iter()
        .map(|(p, _)| crate::OpenOptions::new().read(true).write(true).open(fs, p))
        .collect::<Result<_>>()?;
    let trace = std::env::var_os("HURRICANE_CRASHTEST_TRACE").is_some();
    for k in 0..txns {
        let tx = fs.begin()?;
        hist.lock().attempts += 1;
        let mut order: Vec<usize> = (0..files.len()).collect();
        order.shuffle(&mut rng);
        order.truncate(rng.gen_range(1..=3));
        let mut writes = Vec::new();
        let mut victim = false;
        for &i in &order {
            let (off, len) = match rng.gen_range(0..5) {
                0 => (rng.gen_range(0..SPAN), rng.gen_range(1..64)),
                1 => (rng.gen_range(0..SPAN), 4096 * rng.gen_range(1..3)),
                // A record of the file's first block: other transactions
                // update its neighbours at the same time (record locks),
                // and each commit merges onto the others'.
                2 => (RECORD * rng.gen_range(0..BS / RECORD), RECORD),
                _ => (rng.gen_range(0..SPAN), rng.gen_range(1..12 << 10)),
            };
            // Reads first, sometimes: shared locks other transactions
            // upgrade against (the deadlocks of two readers turning writers).
            let r = if rng.gen_bool(0.5) {
                let mut buf = vec![0u8; len as usize];
                tx.read(&files[i], off, &mut buf).map(|_| ())
            } else {
                Ok(())
            };
            // Transactions overlap: the others run while this one holds its locks.
            if rng.gen_bool(0.5) {
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
            let data = Arc::new(pattern(seed ^ ((t as u64) << 32 | k as u64) << 4 | i as u64, len as usize));
            match r.and_then(|_| tx.write(&files[i], off, &data)) {
                Ok(_) => writes.push((i, off, data)),
                Err(Error::Deadlock(_)) => {
                    victim = true;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if victim {
            hist.lock().deadlocks += 1;
            if trace {
                eprintln!("txn thread {t}: transaction {k} chosen as a deadlock victim");
            }
            continue;
        }
        if rng.gen_bool(0.15) {
            if rng.gen_bool(0.5) {
                tx.abort();
            } else {
                drop(tx);
            }
            hist.lock().aborted += 1;
            continue;
        }
        let start = rec.mark();
        tx.commit()?;
        let end = rec.mark();
        if trace {
            eprintln!("txn thread {t}: transaction {k} committed [events {}..{}]", start.pos, end.pos);
        }
        syncs.lock().push(SyncRec { start, end });
        hist.lock().committed.push(TxnRec { start, end, writes });
        if rng.gen_bool(0.05) {
            let start = rec.mark();
            fs.sync()?;
            let end = rec.mark();
            syncs.lock().push(SyncRec { start, end });
        }
    }
    Ok(())
}

/// The files' contents with `txns` applied in order.
fn apply(initial: &[Vec<u8>], txns: &[&TxnRec]) -> Vec<Vec<u8>> {
    let mut out = initial.to_vec();
    for t in txns {
        for (i, off, data) in &t.writes {
            let f = &mut out[*i];
            let (s, e) = (*off as usize, *off as usize + data.len());
            if f.len() < e {
                f.resize(e, 0);
            }
            f[s..e].copy_from_slice(data);
        }
    }
    out
}

/// Checks an opened crash state at cut `p`; Ok(true) when it showed a
/// transaction whose commit had not returned at the cut.
pub(crate) fn check(h: &TxnHist, p: usize, fs: &Fs) -> Result<bool, String> {
    let names: Vec<String> = fs
        .read_dir("/")
        .map_err(|e| format!("reading / failed: {e}"))?
        .into_iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect();
    let want: Vec<String> = FILES.iter().map(|(p, _)| p.trim_start_matches('/').to_string()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    if sorted != want {
        return Err(format!("the root holds {names:?}, not the workload's files {want:?}"));
    }
    let got: Vec<Vec<u8>> = FILES
        .iter()
        .map(|(p, _)| fs.read_file(p).map_err(|e| format!("reading {p} failed: {e}")))
        .collect::<Result<_, _>>()?;
    // Commit order: a transaction whose bytes overlap another's took its
    // locks after the other's commit had returned, so start order is
    // conflict order. (Transactions that wrote different bytes, of one
    // block or not, apply in either order alike.)
    let mut all: Vec<&TxnRec> = h.committed.iter().collect();
    all.sort_by_key(|t| t.start.tick);
    let must = |t: &TxnRec| t.end.pos <= p;
    let may = |t: &TxnRec| t.start.pos < p && t.end.pos > p;
    let open: Vec<usize> = (0..all.len()).filter(|&i| may(all[i])).collect();
    if open.len() > 16 {
        return Err(format!("{} transactions in flight at one cut (at most {THREADS} expected)", open.len()));
    }
    for mask in 0u32..1 << open.len() {
        let chosen: Vec<&TxnRec> = all
            .iter()
            .enumerate()
            .filter(|(i, t)| must(t) || open.iter().position(|o| o == i).is_some_and(|b| mask & (1 << b) != 0))
            .map(|(_, t)| *t)
            .collect();
        if apply(&h.initial, &chosen) == got {
            return Ok(mask != 0);
        }
    }
    let base = apply(&h.initial, &all.iter().copied().filter(|t| must(t)).collect::<Vec<_>>());
    let diffs: Vec<String> = FILES
        .iter()
        .zip(base.iter().zip(&got))
        .filter(|(_, (w, g))| w != g)
        .map(|((p, _), (w, g))| {
            let at = w.iter().zip(g.iter()).position(|(a, b)| a != b).unwrap_or(w.len().min(g.len()));
            format!("{p}: {} bytes, the committed state {} bytes, first difference at byte {at}", g.len(), w.len())
        })
        .collect();
    Err(format!(
        "the files match no set of committed transactions ({} committed by the cut, {} in flight): against the \
         committed state: {}",
        all.iter().filter(|t| must(t)).count(),
        open.len(),
        diffs.join("; ")
    ))
}
