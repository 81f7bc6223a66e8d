//! Random operations on files of every redundant layout while devices
//! misbehave, checked against a model of each file after every step. A
//! device in trouble rots (bits flipped in blocks it holds), fails reads,
//! flips bits as it reads, fails a write, or goes missing. Mostly one device
//! is in trouble at a time, which every layout here survives: then no read
//! may fail or return other bytes than the model's, and no write or commit
//! may fail. Now and then a second device joins it (never both devices of
//! the meta-data, the first two: the meta-file's two copies and the
//! journal's mirror are there): the files that survive two stay as strict,
//! and the others may fail to read but never return other bytes; they are
//! not written meanwhile. Trouble ends one of the ways an operator ends
//! it: a scrub that repairs, the pool closed and opened with the devices
//! back (holding what they held when they left), or each replaced by a
//! blank one and rebuilt. Then the scrub must report nothing lost but what
//! two devices took from a file that survives one (which is then written
//! again from its model), every device must be online, and the pool's
//! list of permanent errors must hold exactly what the scrub found lost.
//! `FAULT_OPS` sets the steps (default
//! 1,200), `FAULT_SEED` the seed; with `FAULT_TRACE` set every operation
//! is printed as it runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::oplog::OpLog;
use common::rng::Rng;
use common::*;
use hurricane::device::{CrashMode, Device, DeviceState, FaultDevice, FaultPlan, FaultSpec, MemDevice};
use hurricane::fs::{ReplaceOptions, ScrubOptions};
use hurricane::{FormatOptions, Fs, Options};
use std::sync::Arc;

const DEVICES: usize = 4;
const DEV_BYTES: u64 = 128 * MB;
const MAX_LEN: u64 = 384 << 10;
const MAX_OP: u64 = 48 << 10;
const BS: u64 = 4096;

/// Layouts, each with how many of the four devices it survives losing.
const LAYOUTS: &[(&str, usize)] = &[
    ("replicate(copies=2)", 1),
    ("replicate(copies=3)", 2),
    ("replicate(copies=2,read=primary)[extent@3,extent@0]", 1),
    ("parity(data=2,parity=1)", 1),
    ("parity(data=3,parity=1)", 1),
    ("parity(data=2,parity=2)", 2),
    ("stripe(unit=16K)[replicate(copies=2)[extent@0,extent@1],replicate(copies=2)[extent@2,extent@3]]", 1),
    ("compress(algo=lz4,chunk=16K)[replicate(copies=2)[extent@1,extent@2]]", 1),
    ("replicate[log(segment=256K)@0,extent@2]", 1),
    // A checksum above the copies: only it can tell which copy rotted.
    ("checksum[replicate(copies=2)[extent@2,extent@3]]", 1),
    (
        "regions(size=64K)[replicate(copies=2)[extent@0,extent@3],parity(data=2,parity=1)[extent@1,extent@2,extent@3]]",
        1,
    ),
];

fn opts() -> Options {
    Options { inode_cache: 64, cache_bytes: 1 << 20, ..quiet() }
}

fn repair() -> ScrubOptions {
    ScrubOptions { repair: true, ..Default::default() }
}

/// What is wrong with the device in trouble.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Trouble {
    /// Bits flipped in blocks it holds, on the medium: they stay flipped
    /// until rewritten.
    Rot,
    /// A share of its reads fail.
    ReadErrors,
    /// A share of the blocks it reads come back with a bit flipped.
    ReadFlips,
    /// Its next write fails, which takes it out of service.
    WriteError,
    /// It went away.
    Missing,
}

struct File {
    path: String,
    ino: u64,
    /// Devices it survives losing.
    survives: usize,
    model: Vec<u8>,
    /// What the file was at the last sync (what a power cut leaves).
    synced: Vec<u8>,
}

struct Run {
    rng: Rng,
    mems: Vec<Arc<MemDevice>>,
    plans: Vec<Arc<FaultPlan>>,
    /// None only while the pool is closed and not yet opened again.
    fs: Option<Fs>,
    files: Vec<File>,
    /// The devices in trouble (one, at times two) and what their trouble
    /// is (several kinds may pile up on one device).
    trouble: Vec<(usize, Vec<Trouble>)>,
    log: OpLog,
    /// Troubles ended, by the way they ended: scrub, reopen, replacement.
    ended: [usize; 3],
    /// Times two devices were in trouble at once, and files that lost data
    /// then (written again from their models).
    doubled: usize,
    rewritten: usize,
    /// Blocks the scrubs repaired.
    repaired: u64,
    /// Print every operation as it runs (`FAULT_TRACE`).
    trace: bool,
    /// Power cuts made.
    cuts: usize,
}

fn devices(mems: &[Arc<MemDevice>], plans: &[Arc<FaultPlan>]) -> Vec<Arc<dyn Device>> {
    mems.iter().zip(plans).map(|(m, p)| Arc::new(FaultDevice::new(m.clone(), p.clone())) as Arc<dyn Device>).collect()
}

/// Device blocks of `path` on device `d` (parity and copies included).
fn blocks_of_on(fs: &Fs, path: &str, d: usize) -> Vec<u64> {
    let ext = fs.device_extents_of(path).unwrap_or_else(|e| panic!("device extents of {path}: {e}"));
    ext.iter().filter(|e| e.0 as usize == d).flat_map(|&(_, s, l)| s..s + l).collect()
}

/// Flips one random bit of device block `b`, on the medium.
fn flip(dev: &MemDevice, b: u64, rng: &mut Rng) {
    let mut buf = vec![0u8; BS as usize];
    dev.read_at(&mut buf, b * BS).unwrap();
    let bit = rng.below(BS * 8) as usize;
    buf[bit / 8] ^= 1 << (bit % 8);
    dev.write_at(&buf, b * BS).unwrap();
}

impl Run {
    fn new(seed: u64) -> Run {
        let mems: Vec<Arc<MemDevice>> =
            (0..DEVICES).map(|i| Arc::new(MemDevice::new(format!("mem{i}"), DEV_BYTES))).collect();
        let plans: Vec<Arc<FaultPlan>> = (0..DEVICES).map(|_| Arc::new(FaultPlan::default())).collect();
        Fs::format(devices(&mems, &plans), &FormatOptions { journal_size: Some(1 << 20), ..Default::default() })
            .unwrap();
        let fs = Fs::open(devices(&mems, &plans), opts()).unwrap();
        let mut files = Vec::new();
        for (i, &(layout, survives)) in LAYOUTS.iter().enumerate() {
            let path = format!("/f{i}");
            fs.write_file(&path, b"", Some(layout)).unwrap_or_else(|e| panic!("{layout}: {e}"));
            let ino = fs.resolve(&path).unwrap();
            files.push(File { ino, path, survives, model: Vec::new(), synced: Vec::new() });
        }
        Run {
            rng: Rng(seed),
            mems,
            plans,
            fs: Some(fs),
            files,
            trouble: Vec::new(),
            log: OpLog::new("faults", seed),
            ended: [0; 3],
            repaired: 0,
            trace: std::env::var_os("FAULT_TRACE").is_some(),
            cuts: 0,
            doubled: 0,
            rewritten: 0,
        }
    }

    fn fs(&self) -> &Fs {
        self.fs.as_ref().expect("the pool is open")
    }

    /// Whether more devices are in trouble than file `f` survives: then its
    /// reads may fail (never return other bytes) and it is not written.
    fn exposed(&self, f: usize) -> bool {
        self.trouble.len() > self.files[f].survives
    }

    /// Closes the pool and opens it again on the devices as they are. The
    /// closed pool is dropped before the open: its store's last writes
    /// (redb's, when it is dropped) come before the open reads.
    fn close_and_open(&mut self) {
        let fs = self.fs.take().expect("the pool is open");
        self.ok("close", fs.close());
        drop(fs);
        self.fs = Some(self.ok("open", Fs::open(devices(&self.mems, &self.plans), opts())));
    }

    fn fail(&self, why: String) -> ! {
        self.log.fail(why)
    }

    fn note(&mut self, s: String) {
        if self.trace {
            eprintln!("{} {s}", self.log.step);
        }
        self.log.note(s);
    }

    fn ok<T>(&self, what: &str, r: hurricane::Result<T>) -> T {
        r.unwrap_or_else(|e| self.fail(format!("{what}: {e} (trouble: {:?})", self.trouble)))
    }

    fn compare(&self, f: usize, off: u64, got: &[u8], how: &str) {
        let model = &self.files[f].model;
        let end = (off as usize + got.len()).min(model.len());
        let want = &model[(off as usize).min(end)..end];
        let name = &self.files[f].path;
        if got.len() != want.len() {
            self.fail(format!("{how} {name}: {} bytes at {off}, the model has {}", got.len(), want.len()));
        }
        if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
            self.fail(format!(
                "{how} {name} ({}): byte {} is {:#04x}, the model has {:#04x} (trouble: {:?})",
                LAYOUTS[f].0,
                off as usize + i,
                got[i],
                want[i],
                self.trouble
            ));
        }
    }

    fn check_file(&self, f: usize, how: &str) {
        let ino = self.files[f].ino;
        let len = self.files[f].model.len();
        let size = self.ok("getattr", self.fs().getattr(ino)).size;
        if size != len as u64 {
            self.fail(format!("{how} {}: size {size}, the model has {len}", self.files[f].path));
        }
        let mut buf = vec![0u8; len];
        match self.fs().read(ino, 0, &mut buf) {
            Ok(n) => self.compare(f, 0, &buf[..n], how),
            Err(_) if self.exposed(f) => {}
            Err(e) => self.fail(format!("{how}: read of {}: {e} (trouble: {:?})", self.files[f].path, self.trouble)),
        }
    }

    fn check_all(&self, how: &str) {
        for f in 0..self.files.len() {
            self.check_file(f, how);
        }
    }

    fn read(&mut self, f: usize) {
        let len = self.files[f].model.len() as u64;
        let off = self.rng.offset(len + BS);
        let n = 1 + self.rng.below(MAX_OP);
        self.note(format!("read {} {off} +{n}", self.files[f].path));
        let mut buf = vec![0u8; n as usize];
        match self.fs().read(self.files[f].ino, off, &mut buf) {
            Ok(got) => self.compare(f, off, &buf[..got], "read"),
            Err(e) if self.exposed(f) => self.note(format!("  failed, as it may: {e}")),
            Err(e) => self.fail(format!("read: {e} (trouble: {:?})", self.trouble)),
        }
    }

    fn write(&mut self, f: usize) {
        if self.exposed(f) {
            return self.read(f);
        }
        let off = self.rng.offset(MAX_LEN - 1);
        let len = (1 + self.rng.below(MAX_OP)).min(MAX_LEN - off);
        let buf = self.rng.bytes(len as usize);
        self.note(format!("write {} {off} +{len}", self.files[f].path));
        let n = self.ok("write", self.fs().write(self.files[f].ino, off, &buf));
        if n != buf.len() {
            self.fail(format!("write: {n} of {len} bytes"));
        }
        let model = &mut self.files[f].model;
        let end = (off + len) as usize;
        if model.len() < end {
            model.resize(end, 0);
        }
        model[off as usize..end].copy_from_slice(&buf);
    }

    fn truncate(&mut self, f: usize) {
        if self.exposed(f) {
            return self.read(f);
        }
        let len = self.rng.offset(MAX_LEN);
        self.note(format!("truncate {} {} -> {len}", self.files[f].path, self.files[f].model.len()));
        self.ok("truncate", self.fs().truncate(self.files[f].ino, len));
        self.files[f].model.resize(len as usize, 0);
    }

    fn punch(&mut self, f: usize) {
        if self.exposed(f) {
            return self.read(f);
        }
        let size = self.files[f].model.len() as u64;
        let off = self.rng.offset(size);
        let len = 1 + self.rng.below(MAX_OP);
        self.note(format!("punch {} {off} +{len}", self.files[f].path));
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        self.ok("punch", self.fs().fallocate(self.files[f].ino, off, len, mode));
        let model = &mut self.files[f].model;
        let end = ((off + len) as usize).min(model.len());
        if (off as usize) < end {
            model[off as usize..end].fill(0);
        }
    }

    /// Device blocks of the files' data on `d` (parity and copies included).
    fn blocks_on(&self, d: usize) -> Vec<u64> {
        self.files.iter().flat_map(|f| blocks_of_on(self.fs(), &f.path, d)).collect()
    }

    /// Flips one bit in each of a few blocks the files keep on `d`, and now
    /// and then in any block of `d` past its first megabyte (superblocks
    /// and labels have copies of their own; past them lie the journal, the
    /// meta-file and free space).
    fn rot(&mut self, d: usize) -> usize {
        let mut blocks = self.blocks_on(d);
        let anywhere = self.rng.below(3) == 0;
        if anywhere || blocks.is_empty() {
            let first = MB / BS;
            blocks = (0..8).map(|_| first + self.rng.below(DEV_BYTES / BS - first)).collect();
        }
        let n = (1 + self.rng.index(4)).min(blocks.len());
        let mut flipped = Vec::new();
        for _ in 0..n {
            let b = blocks[self.rng.index(blocks.len())];
            flip(&self.mems[d], b, &mut self.rng);
            flipped.push(b);
        }
        self.note(format!("rot on device {d}: blocks {flipped:?}{}", if anywhere { " (anywhere)" } else { "" }));
        n
    }

    /// Gives a device trouble: one in trouble already, if any, or now and
    /// then a second one (never the meta-data's two together).
    fn make_trouble(&mut self) {
        let d = match self.trouble.len() {
            0 => self.rng.index(DEVICES),
            1 if self.rng.below(5) == 0 => {
                let first = self.trouble[0].0;
                let d = (first + 1 + self.rng.index(DEVICES - 1)) % DEVICES;
                if first < 2 && d < 2 {
                    return;
                }
                d
            }
            n => self.trouble[self.rng.index(n)].0,
        };
        let at = self.trouble.iter().position(|(t, _)| *t == d);
        let out = at.is_some_and(|i| {
            let t = &self.trouble[i].1;
            t.contains(&Trouble::Missing) || t.contains(&Trouble::WriteError)
        });
        let t = match self.rng.below(10) {
            0..=3 => Trouble::Rot,
            4 => Trouble::ReadErrors,
            5 => Trouble::ReadFlips,
            6..=7 => Trouble::WriteError,
            _ => Trouble::Missing,
        };
        if out && matches!(t, Trouble::Missing | Trouble::WriteError) {
            return;
        }
        let seed = self.rng.next();
        match t {
            Trouble::Rot => {
                if self.fs().storage().devs[d].state() == DeviceState::Online {
                    self.rot(d);
                } else {
                    return;
                }
            }
            Trouble::ReadErrors => {
                self.note(format!("device {d}: a third of its reads fail"));
                self.plans[d].update(|s| {
                    s.read_error_rate = 0.33;
                    s.seed = seed;
                });
            }
            Trouble::ReadFlips => {
                self.note(format!("device {d}: a bit flipped in a fifth of the blocks it reads"));
                self.plans[d].update(|s| {
                    s.flip_rate = 0.2;
                    s.seed = seed;
                });
            }
            Trouble::WriteError => {
                self.note(format!("device {d}: its next write fails"));
                self.plans[d].update(|s| s.write_error_rate = 1.0);
            }
            Trouble::Missing => {
                self.note(format!("device {d} goes missing"));
                self.plans[d].go_missing();
            }
        }
        match at {
            Some(i) => self.trouble[i].1.push(t),
            None => {
                self.trouble.push((d, vec![t]));
                if self.trouble.len() == 2 {
                    self.doubled += 1;
                    self.note(format!("two devices in trouble: {:?}", self.trouble));
                }
            }
        }
    }

    /// Checks a repairing scrub: complete, every device online, nothing
    /// lost but from files that survive fewer than `took` devices (those
    /// go into `lost`).
    fn scrub(&mut self, how: &str, took: usize, lost: &mut Vec<usize>) {
        let r = self.ok("scrub", self.fs().scrub(&repair(), &|_| {}));
        if !r.complete || r.meta_lost_blocks > 0 {
            self.fail(format!("{how}: scrub complete {}, meta-data blocks lost {}", r.complete, r.meta_lost_blocks));
        }
        self.allow_lost(how, &r.lost, took, lost);
        self.repaired += r.repaired_blocks;
        self.check_online(how);
        // The scrub read every file whole: the permanent error list is
        // exactly what it found lost, range for range.
        let listed: Vec<(u64, Vec<(u64, u64)>)> =
            self.fs().data_errors().into_iter().map(|e| (e.ino, e.ranges)).collect();
        let found: Vec<(u64, Vec<(u64, u64)>)> = r.lost.iter().map(|l| (l.ino, l.ranges.clone())).collect();
        if listed != found {
            self.fail(format!("{how}: the permanent error list holds {listed:?}, the scrub found {found:?}"));
        }
    }

    /// Fails unless every file in `found` survives fewer than `took`
    /// devices; adds them to `lost`.
    fn allow_lost(&self, how: &str, found: &[hurricane::fs::LostFile], took: usize, lost: &mut Vec<usize>) {
        for l in found {
            let f = l.paths.first().and_then(|p| self.files.iter().position(|f| &f.path == p));
            match f {
                Some(f) if self.files[f].survives < took => {
                    if !lost.contains(&f) {
                        lost.push(f);
                    }
                }
                _ => self.fail(format!("{how}: lost {l:?} ({took} devices in trouble)")),
            }
        }
    }

    fn check_online(&self, how: &str) {
        for (i, d) in self.fs().storage().devs.iter().enumerate() {
            if d.state() != DeviceState::Online {
                self.fail(format!("{how}: device {i} is {}", d.state()));
            }
        }
    }

    /// Ends the trouble the way an operator would, then writes again from
    /// their models the files that lost data to two devices at once.
    fn end_trouble(&mut self) {
        if self.trouble.is_empty() {
            return;
        }
        let troubled = std::mem::take(&mut self.trouble);
        // Files that survive fewer stay exposed until they are written again.
        let took = troubled.len();
        self.trouble = troubled.clone();
        let out = troubled.iter().any(|(d, _)| self.fs().storage().devs[*d].state() != DeviceState::Online);
        let how = if out { 1 + self.rng.index(2) } else { self.rng.index(2) };
        for (d, _) in &troubled {
            self.plans[*d].restore();
            self.plans[*d].set(FaultSpec::default());
        }
        let mut lost = Vec::new();
        match how {
            0 => {
                self.note(format!("{troubled:?} healed by a scrub"));
                self.scrub("after a scrub", took, &mut lost);
            }
            1 => {
                self.note(format!("{troubled:?} back after a close and open"));
                self.close_and_open();
                self.check_all("after the devices came back");
                self.scrub("devices back, then a scrub", took, &mut lost);
            }
            _ => {
                let mut copied = false;
                for (d, kinds) in &troubled {
                    let d = *d;
                    self.note(format!("device {d} ({kinds:?}) replaced by a blank one"));
                    let mem = Arc::new(MemDevice::new(format!("new{d}"), DEV_BYTES));
                    let plan = Arc::new(FaultPlan::default());
                    let dev = Arc::new(FaultDevice::new(mem.clone(), plan.clone()));
                    let r = self
                        .ok("replace", self.fs().replace_device(d as u32, dev, &ReplaceOptions::default(), &|_| {}));
                    self.mems[d] = mem;
                    self.plans[d] = plan;
                    match &r.rebuild {
                        Some(s) if s.complete => {
                            self.allow_lost("rebuild", &s.lost, took, &mut lost);
                            self.repaired += s.repaired_blocks;
                        }
                        Some(s) => self.fail(format!("rebuild: stopped, lost {:?}", s.lost)),
                        // Copied from a device still readable: a scrub
                        // repairs what it had rotten, once every device
                        // is replaced.
                        None => copied = true,
                    }
                }
                if copied {
                    self.scrub("after a copy to a replacement", took, &mut lost);
                }
                self.check_online("after a replacement");
            }
        }
        self.ended[how] += 1;
        for &f in &lost {
            self.note(format!("{} lost data to {took} devices: written again", self.files[f].path));
            // As from a backup: emptied, then written whole (a write of
            // part of a stripe or chunk would read what was lost).
            let (ino, model) = (self.files[f].ino, self.files[f].model.clone());
            self.ok("rewrite", self.fs().truncate(ino, 0));
            self.ok("rewrite", self.fs().write(ino, 0, &model).map(drop));
            self.ok("rewrite", self.fs().truncate(ino, model.len() as u64));
            self.rewritten += 1;
        }
        self.trouble.clear();
        if !lost.is_empty() {
            self.scrub("after the files were written again", 0, &mut Vec::new());
        }
    }

    /// Syncs, writes a little more, then cuts the power: every write not
    /// yet flushed is lost, on every device. The pool opens again with the
    /// trouble still there (a device away stays away), and every file must
    /// be what it was at the sync.
    fn power_cut(&mut self) {
        self.note("sync, more writes, then a power cut".into());
        self.cuts += 1;
        self.ok("sync", self.fs().sync());
        for f in &mut self.files {
            f.synced = f.model.clone();
        }
        for _ in 0..self.rng.below(3) {
            let f = self.rng.index(self.files.len());
            self.write(f);
        }
        let images: Vec<Vec<u8>> = self.mems.iter().map(|m| m.crash_image(CrashMode::DropAll)).collect();
        // What the stopped pool still does goes to the devices it had.
        drop(self.fs.take());
        self.mems = images
            .into_iter()
            .enumerate()
            .map(|(i, im)| Arc::new(MemDevice::from_image(format!("mem{i}"), im)))
            .collect();
        self.plans = self
            .plans
            .iter()
            .map(|p| {
                let fresh = Arc::new(FaultPlan::new(p.spec()));
                if p.is_missing() {
                    fresh.go_missing();
                }
                fresh
            })
            .collect();
        self.fs = Some(self.ok("open after a power cut", Fs::open(devices(&self.mems, &self.plans), opts())));
        for f in &mut self.files {
            f.model = f.synced.clone();
        }
        self.check_all("after a power cut");
    }

    fn reopen(&mut self) {
        self.note("close and open".into());
        self.close_and_open();
        self.check_all("after a reopen");
    }

    fn step(&mut self) {
        let f = self.rng.index(self.files.len());
        match self.rng.below(100) {
            0..=29 => self.read(f),
            30..=57 => self.write(f),
            58..=63 => self.truncate(f),
            64..=71 => self.punch(f),
            72..=75 => {
                self.note("drop caches".into());
                self.fs().drop_caches();
            }
            76..=78 => {
                self.note("sync".into());
                self.ok("sync", self.fs().sync());
            }
            79 => self.power_cut(),
            80..=82 => {
                self.note("checkpoint".into());
                self.ok("checkpoint", self.fs().checkpoint());
            }
            83..=84 => {
                self.note(format!("read all of {}", self.files[f].path));
                self.fs().drop_caches();
                self.check_file(f, "whole read");
            }
            85..=92 => self.make_trouble(),
            93..=97 => self.end_trouble(),
            _ => {
                if self.trouble.is_empty() {
                    self.reopen();
                }
            }
        }
    }
}

#[test]
fn random_operations_while_devices_misbehave_match_the_model() {
    let steps: usize = std::env::var("FAULT_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(1200);
    let seed: u64 = std::env::var("FAULT_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let mut r = Run::new(seed);
    for s in 0..steps {
        r.log.step = s;
        r.step();
    }
    r.end_trouble();
    r.fs().drop_caches();
    r.check_all("at the end");
    r.scrub("at the end", 0, &mut Vec::new());
    let again = r.ok("scrub", r.fs().scrub(&repair(), &|_| {}));
    if again.repaired_blocks != 0 || !again.lost.is_empty() {
        r.fail(format!("a second scrub repaired {} blocks, lost {:?}", again.repaired_blocks, again.lost));
    }
    check_clean(r.fs(), "at the end");
    eprintln!(
        "{steps} steps: troubles ended by scrub {}, by reopen {}, by replacement {}; {} blocks repaired; {} power cuts; \
         two devices at once {} times, {} files written again",
        r.ended[0], r.ended[1], r.ended[2], r.repaired, r.cuts, r.doubled, r.rewritten
    );
    assert!(r.ended.iter().sum::<usize>() > 0, "no trouble was made and ended");
    r.fs().close().unwrap();
}

/// Scrubs run over and over while writers change every file and one device
/// (not the meta-data's) flips bits as it reads and rots between scrubs:
/// a scrub's repair must never put back a copy older than a write that
/// raced it, nor a writer's read return other bytes than its model.
/// `FAULT_RACE_OPS` sets each writer's operations (default 300).
#[test]
fn scrubs_racing_writers_on_a_misbehaving_device_lose_nothing() {
    let ops: usize = std::env::var("FAULT_RACE_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let seed: u64 = std::env::var("FAULT_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let mut run = Run::new(seed);
    const BAD: usize = 2;
    run.plans[BAD].set(FaultSpec { flip_rate: 0.05, seed, ..Default::default() });
    let writers = 3;
    let files: Vec<(u64, String)> = run.files.iter().map(|f| (f.ino, f.path.clone())).collect();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let models: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
        let fs = run.fs();
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let (files, done) = (&files, &done);
                s.spawn(move || {
                    // Files w, w + writers, ...: each has one writer.
                    let mine: Vec<usize> = (w..files.len()).step_by(writers).collect();
                    let mut models: Vec<Vec<u8>> = vec![Vec::new(); mine.len()];
                    let mut rng = Rng(seed * 100 + w as u64);
                    for step in 0..ops {
                        let i = rng.index(mine.len());
                        let (ino, path) = &files[mine[i]];
                        let model = &mut models[i];
                        match rng.below(4) {
                            0 | 1 => {
                                let off = rng.offset(MAX_LEN - 1);
                                let len = (1 + rng.below(MAX_OP)).min(MAX_LEN - off);
                                let buf = rng.bytes(len as usize);
                                fs.write(*ino, off, &buf).unwrap_or_else(|e| panic!("{path} step {step}: write: {e}"));
                                let end = (off + len) as usize;
                                if model.len() < end {
                                    model.resize(end, 0);
                                }
                                model[off as usize..end].copy_from_slice(&buf);
                            }
                            2 => {
                                let len = rng.offset(MAX_LEN);
                                fs.truncate(*ino, len).unwrap_or_else(|e| panic!("{path} step {step}: truncate: {e}"));
                                model.resize(len as usize, 0);
                            }
                            _ => {
                                let mut buf = vec![0u8; model.len()];
                                let n = fs
                                    .read(*ino, 0, &mut buf)
                                    .unwrap_or_else(|e| panic!("{path} step {step}: read: {e}"));
                                assert!(
                                    n == model.len() && buf == *model,
                                    "{path} step {step}: read other bytes than written"
                                );
                            }
                        }
                    }
                    done.fetch_add(1, std::sync::atomic::Ordering::Release);
                    (mine, models)
                })
            })
            .collect();
        let mut scrubs = 0;
        let mut rng = Rng(seed ^ 0x5eed);
        let bad = &run.mems[BAD];
        while done.load(std::sync::atomic::Ordering::Acquire) < writers || scrubs < 2 {
            let r = fs.scrub(&repair(), &|_| {}).unwrap();
            assert!(r.complete && r.lost.is_empty() && r.meta_lost_blocks == 0, "scrub {scrubs}: {:?}", r.lost);
            scrubs += 1;
            // A bit flipped in a few blocks the files keep on the device
            // (a block a writer rewrites meanwhile may get its old bytes
            // back, flipped: as bad, and as repairable).
            for (_, path) in &files {
                let on = blocks_of_on(fs, path, BAD);
                if !on.is_empty() && rng.below(2) != 0 {
                    flip(bad, on[rng.index(on.len())], &mut rng);
                }
            }
        }
        let mut models = vec![Vec::new(); files.len()];
        for h in handles {
            let (mine, m) = h.join().unwrap();
            for (i, m) in mine.into_iter().zip(m) {
                models[i] = m;
            }
        }
        eprintln!("{scrubs} scrubs beside {writers} writers of {ops} operations each");
        vec![models]
    });
    run.plans[BAD].set(FaultSpec::default());
    for (f, m) in models.into_iter().next().unwrap().into_iter().enumerate() {
        run.files[f].model = m;
    }
    run.fs().drop_caches();
    run.scrub("after the writers", 0, &mut Vec::new());
    run.check_all("after the writers");
    run.close_and_open();
    run.check_all("reopened");
    check_clean(run.fs(), "after the writers");
}
