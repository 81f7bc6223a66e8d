//! Crash consistency of the engine: reopen after a clean close, and after
//! power cuts at every point of a random workload (unflushed device writes
//! dropped, kept at random, or cut short by a failing device mid-commit).
//! Whatever was synced must be there exactly; nothing half-done may show.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use hurricane::device::{CrashMode, Device};
use hurricane::{Creds, FormatOptions, Fs};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    Dir,
    File(usize),
    Link(String),
}

/// Paths to nodes; files point at shared contents so hard links work.
#[derive(Clone, Debug, Default)]
struct Model {
    paths: BTreeMap<String, Node>,
    data: Vec<Vec<u8>>,
}

impl Model {
    fn view(&self) -> BTreeMap<String, Seen> {
        self.paths
            .iter()
            .map(|(p, n)| {
                let v = match n {
                    Node::Dir => Seen::of('d', &[]),
                    Node::File(i) => Seen::of('f', &self.data[*i]),
                    Node::Link(t) => Seen::of('l', t.as_bytes()),
                };
                (p.clone(), v)
            })
            .collect()
    }
}

/// What a path holds, compactly: type, length and checksum of the content.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen(char, usize, u32);

impl Seen {
    fn of(kind: char, data: &[u8]) -> Self {
        Seen(kind, data.len(), crc32c::crc32c(data))
    }
}

/// Reads the whole tree back from the pool.
fn snapshot(fs: &Fs) -> BTreeMap<String, Seen> {
    let mut out = BTreeMap::new();
    let mut stack = vec!["".to_string()];
    while let Some(dir) = stack.pop() {
        let p = if dir.is_empty() { "/" } else { &dir };
        for e in fs.read_dir(p).expect("readdir") {
            let path = format!("{dir}/{}", String::from_utf8_lossy(&e.name));
            let a = fs.lstat(&path).expect("lstat");
            if a.is_dir() {
                out.insert(path.clone(), Seen::of('d', &[]));
                stack.push(path);
            } else if a.is_symlink() {
                out.insert(path.clone(), Seen::of('l', &fs.readlink(a.ino).expect("readlink")));
            } else {
                out.insert(path.clone(), Seen::of('f', &fs.read_file(&path).expect("read")));
            }
        }
    }
    out
}

const LAYOUTS: &[&str] = &[
    "extent@0",
    "stripe(unit=16K,width=3)",
    "regions(size=64K,width=2)",
    "replicate[extent,extent]",
    "inline",
    "replicate[stripe(unit=8K,width=2),extent@2]",
];

struct Workload {
    rng: StdRng,
    m: Model,
    n: usize,
}

impl Workload {
    fn pick(&mut self, f: impl Fn(&Node) -> bool) -> Option<String> {
        let v: Vec<_> = self.m.paths.iter().filter(|(_, n)| f(n)).map(|(p, _)| p.clone()).collect();
        (!v.is_empty()).then(|| v[self.rng.gen_range(0..v.len())].clone())
    }

    fn dir(&mut self) -> String {
        self.pick(|n| *n == Node::Dir).unwrap_or_default()
    }

    /// One random operation on both the pool and the model.
    fn step(&mut self, fs: &Fs) {
        self.n += 1;
        let n = self.n;
        match self.rng.gen_range(0..100) {
            0..=24 => {
                let path = format!("{}/f{n}", self.dir());
                let lay = LAYOUTS[self.rng.gen_range(0..LAYOUTS.len())];
                let len = if lay == "inline" { self.rng.gen_range(0..2000) } else { self.rng.gen_range(0..70_000) };
                let data = pattern(n as u64, len);
                fs.write_file(&path, &data, Some(lay)).unwrap();
                self.m.data.push(data);
                self.m.paths.insert(path, Node::File(self.m.data.len() - 1));
            }
            25..=44 => {
                if let Some(p) = self.pick(|n| matches!(n, Node::File(_))) {
                    let Node::File(i) = self.m.paths[&p] else { return };
                    let off = self.rng.gen_range(0..self.m.data[i].len() + 5000);
                    let data = pattern(n as u64 + 77, self.rng.gen_range(1..30_000));
                    let f = fs.open_with(&p, hurricane::OpenOptions::new().write(true)).unwrap();
                    f.write_at(&data, off as u64).unwrap();
                    let d = &mut self.m.data[i];
                    if d.len() < off + data.len() {
                        d.resize(off + data.len(), 0);
                    }
                    d[off..off + data.len()].copy_from_slice(&data);
                }
            }
            45..=52 => {
                if let Some(p) = self.pick(|n| matches!(n, Node::File(_))) {
                    let Node::File(i) = self.m.paths[&p] else { return };
                    let len = self.rng.gen_range(0..self.m.data[i].len() + 9000);
                    let f = fs.open_with(&p, hurricane::OpenOptions::new().write(true)).unwrap();
                    f.set_len(len as u64).unwrap();
                    self.m.data[i].resize(len, 0);
                }
            }
            53..=64 => {
                if let Some(p) = self.pick(|n| !matches!(n, Node::Dir)) {
                    let to = if self.rng.gen_bool(0.3) {
                        self.pick(|n| !matches!(n, Node::Dir)).unwrap_or(format!("/r{n}"))
                    } else {
                        format!("{}/r{n}", self.dir())
                    };
                    fs.rename_path(&p, &to).unwrap();
                    let node = self.m.paths.remove(&p).unwrap();
                    self.m.paths.insert(to, node);
                }
            }
            65..=74 => {
                if let Some(p) = self.pick(|n| !matches!(n, Node::Dir)) {
                    fs.remove(&p).unwrap();
                    self.m.paths.remove(&p);
                }
            }
            75..=84 => {
                let path = format!("{}/d{n}", self.dir());
                fs.mkdir_path(&path, 0o755).unwrap();
                self.m.paths.insert(path, Node::Dir);
            }
            85..=89 => {
                if let Some(p) = self.pick(|n| matches!(n, Node::File(_))) {
                    let to = format!("{}/h{n}", self.dir());
                    fs.hard_link(&p, &to).unwrap();
                    let node = self.m.paths[&p].clone();
                    self.m.paths.insert(to, node);
                }
            }
            90..=94 => {
                let to = format!("{}/s{n}", self.dir());
                let target = format!("target{n}");
                fs.symlink_path(&target, &to).unwrap();
                self.m.paths.insert(to, Node::Link(target));
            }
            _ => {
                // rmdir of an empty directory, if any.
                let empty: Vec<String> = self
                    .m
                    .paths
                    .iter()
                    .filter(|(p, n)| **n == Node::Dir && !self.m.paths.keys().any(|q| q.starts_with(&format!("{p}/"))))
                    .map(|(p, _)| p.clone())
                    .collect();
                if let Some(p) = empty.first() {
                    fs.remove(p).unwrap();
                    self.m.paths.remove(p);
                }
            }
        }
    }
}

#[test]
fn reopen_after_clean_close() {
    let p = MemPool::new(3, 16 * MB);
    let mut w = Workload { rng: StdRng::seed_from_u64(1), m: Model::default(), n: 0 };
    {
        let fs = p.open().unwrap();
        for _ in 0..150 {
            w.step(&fs);
        }
        fs.close().unwrap();
    }
    let fs = p.open().unwrap();
    assert!(fs.report().was_clean);
    assert_eq!(fs.report().replayed_records, 0);
    assert_eq!(snapshot(&fs), w.m.view());
    check_clean(&fs, "after close");
}

/// Power cut after every operation: with unflushed writes dropped the pool
/// is exactly as of the last sync; with unflushed writes kept at random the
/// namespace is still exactly as of the last sync, and every file untouched
/// since then is intact.
#[test]
fn power_cut_after_every_operation() {
    for seed in 0..3u64 {
        // A small journal forces wrap-around and checkpoints during the run.
        let opts = FormatOptions { journal_size: Some(64 << 10), ..Default::default() };
        let p = MemPool::with(3, 16 * MB, &opts);
        let fs = p.open().unwrap();
        let mut w = Workload { rng: StdRng::seed_from_u64(seed), m: Model::default(), n: 0 };
        let mut durable = w.m.view();
        let mut touched: std::collections::BTreeSet<String> = Default::default();
        let mut points = 0;
        for step in 0..160 {
            let before = w.m.view();
            w.step(&fs);
            let after = w.m.view();
            // Renamed or removed paths count too: the file may live on
            // under another name and be overwritten in place there.
            for k in before.keys().chain(after.keys()) {
                if before.get(k) != after.get(k) {
                    touched.insert(k.clone());
                }
            }
            if w.rng.gen_bool(0.15) {
                fs.sync().unwrap();
                durable = w.m.view();
                touched.clear();
            }
            let exact = p.crash(CrashMode::DropAll);
            let cfs = exact.open().unwrap_or_else(|e| panic!("seed {seed} step {step}: open after crash: {e}"));
            assert_eq!(snapshot(&cfs), durable, "seed {seed} step {step}: state after a power cut");
            check_clean(&cfs, &format!("seed {seed} step {step}"));
            let fuzzy = p.crash(CrashMode::Random(step));
            let cfs = fuzzy.open().unwrap_or_else(|e| panic!("seed {seed} step {step}: open after random crash: {e}"));
            let got = snapshot(&cfs);
            let names = |m: &BTreeMap<String, Seen>| m.iter().map(|(k, v)| (k.clone(), v.0)).collect::<Vec<_>>();
            assert_eq!(names(&got), names(&durable), "seed {seed} step {step}: namespace after a random crash");
            for (k, v) in &durable {
                if !touched.contains(k) && got.get(k) != Some(v) {
                    let Some(Node::File(i)) = w.m.paths.get(k) else { panic!("{k}") };
                    let want = &w.m.data[*i];
                    let have = cfs.read_file(k).unwrap();
                    let first = want.iter().zip(&have).position(|(a, b)| a != b);
                    let last = want.iter().zip(&have).rposition(|(a, b)| a != b);
                    panic!("seed {seed} step {step}: {k} was synced and not touched since; layout {} ; differs {first:?}..{last:?} of {}", cfs.layout_of(k).unwrap(), want.len());
                }
            }
            check_clean(&cfs, &format!("seed {seed} step {step} (random)"));
            points += 2;
        }
        assert!(points >= 320);
        let (commits, ckpts) = fs.commit_counts();
        assert!(commits > 5 && ckpts > 0, "workload exercised commits ({commits}) and checkpoints ({ckpts})");
    }
}

/// Power cut in the middle of a commit: a device stops accepting writes
/// after k writes (the cut), then the unflushed writes are dropped or kept.
/// The pool opens to the state of either the previous or this sync.
#[test]
fn power_cut_inside_commits() {
    let opts = FormatOptions { journal_size: Some(64 << 10), ..Default::default() };
    let mut cases = 0;
    for seed in 0..6u64 {
        for k in 0..6i64 {
            for dev in 0..2usize {
                let p = MemPool::with(3, 16 * MB, &opts);
                let fs = p.open().unwrap();
                let mut w = Workload { rng: StdRng::seed_from_u64(seed * 31 + 7), m: Model::default(), n: 0 };
                for _ in 0..20 {
                    w.step(&fs);
                }
                fs.sync().unwrap();
                let old = w.m.view();
                let mut touched = std::collections::BTreeSet::new();
                for _ in 0..(5 + seed as usize * 3) {
                    let before = w.m.view();
                    w.step(&fs);
                    let after = w.m.view();
                    for k in before.keys().chain(after.keys()) {
                        if before.get(k) != after.get(k) {
                            touched.insert(k.clone());
                        }
                    }
                }
                let new = w.m.view();
                // Every second case forces a checkpoint instead of a journal record.
                p.devs[dev].fail_after_writes(k);
                let r = if k % 2 == 0 { fs.sync() } else { fs.checkpoint() };
                for mode in [CrashMode::DropAll, CrashMode::KeepAll, CrashMode::Random(seed + k as u64)] {
                    let c = p.crash(mode);
                    let cfs = c.open().unwrap_or_else(|e| panic!("seed {seed} k {k} dev {dev} {mode:?}: {e}"));
                    let got = snapshot(&cfs);
                    let names =
                        |m: &BTreeMap<String, Seen>| m.iter().map(|(k, v)| (k.clone(), v.0)).collect::<Vec<_>>();
                    if r.is_ok() {
                        assert_eq!(got, new, "a completed sync survives");
                    } else {
                        // Meta-data is all-or-nothing; data overwritten in place
                        // since the last sync may be old or new block by block.
                        let which = if names(&got) == names(&new) { &new } else { &old };
                        assert_eq!(
                            names(&got),
                            names(which),
                            "seed {seed} k {k} dev {dev} {mode:?}: namespace neither old nor new"
                        );
                        for (p, v) in which {
                            if !touched.contains(p) {
                                assert_eq!(
                                    got.get(p),
                                    Some(v),
                                    "seed {seed} k {k} dev {dev} {mode:?}: {p} untouched since the last sync"
                                );
                            }
                        }
                    }
                    check_clean(&cfs, "mid-commit cut");
                    cases += 1;
                }
                drop(fs);
            }
        }
    }
    assert_eq!(cases, 6 * 6 * 2 * 3);
}

#[test]
fn replay_time_is_proportional_to_the_journal() {
    let p = MemPool::new(2, 64 * MB);
    let fs = p.open().unwrap();
    for i in 0..2000 {
        fs.write_file(&format!("/f{i}"), b"x", None).unwrap();
    }
    fs.checkpoint().unwrap();
    for i in 0..10 {
        fs.write_file(&format!("/g{i}"), b"y", None).unwrap();
    }
    fs.sync().unwrap();
    let c = p.crash(CrashMode::DropAll);
    let cfs = c.open().unwrap();
    let r = cfs.report();
    assert!(!r.was_clean);
    assert_eq!(r.replayed_records, 1, "only the records after the checkpoint are replayed");
    assert_eq!(cfs.read_file("/g9").unwrap(), b"y");
    assert_eq!(cfs.read_file("/f1999").unwrap(), b"x");
    let _ = Creds::root();
    let _: Option<&dyn Device> = None;
}

/// Link counts and attributes rebuilt by replay equal the live ones.
#[test]
fn replay_rebuilds_the_same_attributes() {
    let p = MemPool::new(3, 16 * MB);
    let fs = p.open().unwrap();
    let mut w = Workload { rng: StdRng::seed_from_u64(42), m: Model::default(), n: 0 };
    for _ in 0..120 {
        w.step(&fs);
    }
    fs.sync().unwrap();
    let attrs = |fs: &Fs| -> Vec<(String, u32, u32, u64)> {
        let mut v: Vec<_> =
            w.m.paths
                .keys()
                .chain(std::iter::once(&"/".to_string()))
                .map(|p| {
                    let a = fs.lstat(p).unwrap();
                    (p.clone(), a.nlink, a.mode, a.size)
                })
                .collect();
        v.sort();
        v
    };
    let live = attrs(&fs);
    let c = p.crash(CrashMode::DropAll);
    let cfs = c.open().unwrap();
    assert!(cfs.report().replayed_records > 0);
    assert_eq!(attrs(&cfs), live);
}

/// A checksummed file on a full device: an overwrite of synced data has
/// no room to go copy-on-write, and is refused rather than written in
/// place (a power cut before its checksums commit would leave new bytes
/// under old checksums: the synced data unreadable). Once a removal's
/// space is reclaimable, the same overwrite goes through (the writer
/// commits to free it). After power cuts at each step the file reads
/// back whole, old or new.
#[test]
fn an_overwrite_on_a_full_device_never_goes_in_place() {
    let p = MemPool::with(1, 8 * MB, &FormatOptions { journal_size: Some(96 << 10), ..Default::default() });
    let fs = p.open().unwrap();
    let old = pattern(1, 64 << 10);
    fs.write_file("/a", &old, None).unwrap();
    assert!(fs.layout_get(fs.resolve("/a").unwrap()).unwrap().starts_with("checksum["));
    // Fill the device to its last block.
    fs.write_file("/more", &pattern(3, 1 << 20), None).unwrap();
    let ino = fs.create("/fill", None).unwrap().ino();
    let mut off = 0u64;
    for len in [256 << 10, 4096] {
        while fs.write(ino, off, &pattern(off, len)).is_ok() {
            off += len as u64;
        }
    }
    fs.sync().unwrap();
    let a = fs.resolve("/a").unwrap();
    let new = pattern(2, 4096);
    let after_cut = |what: &str| {
        for mode in [CrashMode::KeepAll, CrashMode::DropAll] {
            let fs = p.crash(mode).open().unwrap();
            let got = fs.read_file("/a").unwrap_or_else(|e| panic!("{what}, {mode:?}: /a: {e}"));
            let mut with_new = old.clone();
            with_new[..4096].copy_from_slice(&new);
            assert!(got == old || got == with_new, "{what}, {mode:?}: /a reads neither its old nor its new bytes");
            check_clean(&fs, what);
        }
    };
    // Nothing to reclaim: refused, nothing changed.
    let err = fs.write(a, 0, &new).unwrap_err();
    assert!(matches!(err, hurricane::Error::NoSpace(_)), "{err}");
    assert_eq!(fs.read_file("/a").unwrap(), old);
    after_cut("refused on a full device");
    // A removal, not synced: its space is free once it commits, which the
    // refused writer does before it tries again.
    fs.remove("/more").unwrap();
    fs.write(a, 0, &new).unwrap();
    after_cut("after the overwrite");
    fs.sync().unwrap();
    let mut want = old.clone();
    want[..4096].copy_from_slice(&new);
    assert_eq!(fs.read_file("/a").unwrap(), want);
    fs.close().unwrap();
    let fs = p.open().unwrap();
    assert_eq!(fs.read_file("/a").unwrap(), want);
    check_clean(&fs, "reopened");
}

/// A file made after the last commit is lost with a power cut, and its
/// inode number is given to the next file made: the two differ in their
/// generation (what file handles carry beside the number), so a handle of
/// the lost file cannot reach the new one. A committed file keeps its
/// number and generation across reopenings.
#[test]
fn an_inode_number_given_again_after_a_crash_has_a_new_generation() {
    let p = MemPool::new(1, 16 * MB);
    let fs = p.open().unwrap();
    fs.write_file("/kept", b"k", None).unwrap();
    fs.sync().unwrap();
    let kept = fs.stat("/kept").unwrap();
    fs.write_file("/lost", b"l", None).unwrap();
    let lost = fs.stat("/lost").unwrap();
    let c = p.crash(CrashMode::DropAll);
    let cfs = c.open().unwrap();
    assert!(cfs.stat("/lost").is_err(), "an uncommitted file survived the crash");
    let again = cfs.stat("/kept").unwrap();
    assert_eq!((again.ino, again.generation()), (kept.ino, kept.generation()));
    cfs.write_file("/new", b"n", None).unwrap();
    let new = cfs.stat("/new").unwrap();
    assert_eq!(new.ino, lost.ino, "the lost file's number was not given again");
    assert_ne!(new.generation(), lost.generation());
    assert!(new.generation() <= u64::from(u32::MAX));
    assert_eq!(cfs.stat("/").unwrap().generation(), 0);
}
