//! Tests of `replicate`'s self-heal, missed ranges, resync, health and read
//! policy, over memory devices that fail on demand.

use super::*;
use crate::blocks::{Layout, Leftovers, ScrubTally, Spec};
use crate::device::{Device, DeviceHandle, DeviceState, MemDevice};
use crate::pool::{Allocator, Storage};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};

const BS: usize = BLOCK_SIZE;

/// A memory device with bad blocks (reads touching one fail; a write over
/// one remaps it, as a disk does) and writes that fail on demand.
struct Flaky {
    inner: MemDevice,
    bad: Mutex<BTreeSet<u64>>,
    fail_writes: AtomicBool,
}

impl Flaky {
    fn new(name: &str, blocks: u64) -> Arc<Flaky> {
        Arc::new(Flaky {
            inner: MemDevice::new(name, blocks * BS as u64),
            bad: Mutex::new(BTreeSet::new()),
            fail_writes: AtomicBool::new(false),
        })
    }
    fn spoil(&self, blk: u64) {
        self.bad.lock().insert(blk);
    }
    fn bad_count(&self) -> usize {
        self.bad.lock().len()
    }
    /// Overwrites device block `blk` behind the file system's back.
    fn scribble(&self, blk: u64, byte: u8) {
        self.inner.write_at(&[byte; BS], blk * BS as u64).unwrap();
    }
}

impl Device for Flaky {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let (s, e) = (offset / BS as u64, (offset + buf.len() as u64).div_ceil(BS as u64));
        if self.bad.lock().range(s..e).next().is_some() {
            return Err(Error::Device(format!("{}: bad block in {s}..{e}", self.name())));
        }
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(Error::Device(format!("{}: write failed", self.name())));
        }
        let (s, e) = (offset / BS as u64, (offset + buf.len() as u64).div_ceil(BS as u64));
        let fixed: Vec<u64> = self.bad.lock().range(s..e).copied().collect();
        for b in fixed {
            self.bad.lock().remove(&b);
        }
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
}

struct Env {
    devs: Vec<Arc<Flaky>>,
    storage: Storage,
    log: Mutex<Vec<NodeRecord>>,
}

impl Env {
    fn new(n: u32, blocks: u64) -> Env {
        let devs: Vec<Arc<Flaky>> = (0..n).map(|i| Flaky::new(&format!("mem:{i}"), blocks)).collect();
        let allocs = devs.iter().map(|_| Allocator::new(1, blocks)).collect();
        let handles = devs.iter().enumerate().map(|(i, d)| DeviceHandle::new(i as u32, d.clone())).collect();
        Env { devs, storage: Storage { devs: handles, allocs }, log: Mutex::new(Vec::new()) }
    }
    fn io<T>(&self, repair: bool, f: impl FnOnce(&IoCtx) -> T) -> T {
        let sink = |c: NodeRecord| self.log.lock().push(c);
        f(&IoCtx {
            owner: 0,
            origin: crate::blocks::Origin::NONE,
            storage: &self.storage,
            epoch: 1,
            sink: &sink,
            repair,
        })
    }
    fn write(&self, l: &Layout, fblk: u64, data: &[u8]) -> Result<()> {
        self.io(true, |io| l.root().write(io, fblk, data))
    }
    fn try_read(&self, b: &Arc<dyn Block>, fblk: u64, n: usize, repair: bool) -> Result<Vec<u8>> {
        let mut buf = vec![0xAA; n * BS];
        self.io(repair, |io| b.read(io, fblk, &mut buf))?;
        Ok(buf)
    }
    fn read(&self, l: &Layout, fblk: u64, n: usize) -> Vec<u8> {
        self.try_read(l.root(), fblk, n, true).unwrap()
    }
    /// Copy `c` of the root, read directly.
    fn copy(&self, l: &Layout, c: usize, fblk: u64, n: usize) -> Vec<u8> {
        self.try_read(&l.root().children()[c], fblk, n, false).unwrap()
    }
    fn scrub(&self, l: &Layout, repair: bool, rebuild: &(dyn Fn(u32) -> bool + Sync), n: u64) -> ScrubTally {
        let tally = ScrubTally::default();
        self.io(true, |io| {
            l.root().scrub(
                io,
                &Scrub {
                    repair,
                    rebuild,
                    resilver_only: false,
                    tally: &tally,
                    leftovers: &Leftovers::default(),
                    verify: None,
                },
                0,
                n,
            )
        })
        .unwrap();
        tally
    }
    fn changes(&self) -> Vec<Change> {
        self.log
            .lock()
            .iter()
            .filter(|r| r.node == 0)
            .map(|r| {
                assert_eq!(r.bytes[0], STATE_VERSION);
                Change::decode(&r.bytes[1..], 0, 16).unwrap()
            })
            .collect()
    }
    fn health(&self, l: &Layout) -> Health {
        l.root().health(&|d| !self.storage.devs[d as usize].state().readable())
    }
    /// Device block where device `dev` keeps file block `fblk` of an extent child.
    fn pblk(l: &Layout, node: usize, fblk: u64) -> u64 {
        let mut found = None;
        l.nodes()[node].extents(&mut |_, p, n| {
            let _ = n;
            found.get_or_insert(p);
        });
        found.unwrap() + fblk
    }
}

fn spec(kind: &str, params: Vec<(&str, Value)>, children: Vec<Spec>, device: Option<u32>) -> Spec {
    Spec { kind: kind.into(), params: params.into_iter().map(|(k, v)| (k.to_string(), v)).collect(), children, device }
}
fn ext(d: u32) -> Spec {
    spec("extent", vec![], vec![], Some(d))
}
fn repl(read: &str, kids: Vec<Spec>) -> Spec {
    spec("replicate", vec![("read", Value::Word(read.into()))], kids, None)
}
fn build(s: &Spec) -> Layout {
    Layout::build(s).unwrap()
}
fn pattern(seed: u64, nblocks: usize) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..nblocks * BS).map(|_| rng.gen()).collect()
}
fn encode(l: &Layout) -> Vec<u8> {
    let mut e = Encoder::new();
    l.encode(&mut e);
    e.into_inner()
}
fn decode(b: &[u8]) -> Result<Layout> {
    Layout::decode(&mut Decoder::new(b, "layout"))
}
fn never(_: u32) -> bool {
    false
}

#[test]
fn heal_on_read_rewrites_the_bad_copy() {
    let env = Env::new(2, 256);
    let l = build(&repl("primary", vec![ext(0), ext(1)]));
    let d = pattern(1, 16);
    env.write(&l, 0, &d).unwrap();
    // Blocks 3 and 9 of copy 0 go bad; primary reads copy 0 first.
    env.devs[0].spoil(Env::pblk(&l, 1, 3));
    env.devs[0].spoil(Env::pblk(&l, 1, 9));
    assert!(env.try_read(&l.root().children()[0], 0, 16, false).is_err());
    // A read that may not repair returns good data and leaves the copy bad.
    assert_eq!(env.try_read(l.root(), 0, 16, false).unwrap(), d);
    assert_eq!(env.devs[0].bad_count(), 2);
    assert_eq!(env.storage.devs[0].repaired(), 0);
    // One that may repair rewrites it: the copy reads well on its own again.
    assert_eq!(env.read(&l, 0, 16), d);
    assert_eq!(env.devs[0].bad_count(), 0);
    assert_eq!(env.copy(&l, 0, 0, 16), d);
    assert_eq!(env.storage.devs[0].repaired(), 16);
    assert_eq!(env.storage.devs[1].repaired(), 0);
    assert!(env.storage.devs[0].errors().read >= 1);
    assert!(env.changes().is_empty(), "a successful repair misses nothing");
    assert_eq!(env.health(&l), Health::Ok);
}

#[test]
fn reads_survive_blocks_bad_in_different_copies() {
    let env = Env::new(2, 512);
    let l = build(&repl("least-loaded", vec![ext(0), ext(1)]));
    let d = pattern(2, 200);
    env.write(&l, 0, &d).unwrap();
    env.devs[0].spoil(Env::pblk(&l, 1, 5));
    env.devs[1].spoil(Env::pblk(&l, 2, 150));
    // No copy reads whole, yet every block has a good copy.
    assert_eq!(env.read(&l, 0, 200), d);
    assert_eq!(env.devs[0].bad_count() + env.devs[1].bad_count(), 0, "both copies healed");
    assert_eq!(env.copy(&l, 0, 0, 200), d);
    assert_eq!(env.copy(&l, 1, 0, 200), d);
    // The same block bad in every copy fails, naming nothing it cannot give.
    env.devs[0].spoil(Env::pblk(&l, 1, 7));
    env.devs[1].spoil(Env::pblk(&l, 2, 7));
    assert!(env.try_read(l.root(), 0, 200, true).is_err());
    assert_eq!(env.read(&l, 8, 100), d[8 * BS..108 * BS]);
}

#[test]
fn writes_go_on_with_a_copy_down_and_reads_avoid_what_it_missed() {
    let env = Env::new(2, 256);
    // Copy 0 (device 1) is the primary: reads would go there first.
    let l = build(&repl("primary", vec![ext(1), ext(0)]));
    let old = pattern(3, 20);
    env.write(&l, 0, &old).unwrap();
    env.devs[1].fail_writes.store(true, Ordering::SeqCst);
    let new = pattern(4, 8);
    env.write(&l, 4, &new).unwrap();
    assert_eq!(env.changes(), vec![Change::Miss { copy: 0, fblk: 4, len: 8 }]);
    assert_eq!(env.health(&l), Health::Degraded);
    // The device is back: its stale copy is readable but never read for
    // the range it missed.
    env.devs[1].fail_writes.store(false, Ordering::SeqCst);
    // Back, as a reopen finds it (a failed write faulted it).
    env.storage.devs[1].set_state(crate::device::DeviceState::Online);
    assert_eq!(env.copy(&l, 0, 4, 8), old[4 * BS..12 * BS], "copy 0 still holds the old data");
    let mut want = old.clone();
    want[4 * BS..12 * BS].copy_from_slice(&new);
    for _ in 0..3 {
        assert_eq!(env.try_read(l.root(), 0, 20, false).unwrap(), want);
    }
    assert_eq!(env.copy(&l, 0, 4, 8), old[4 * BS..12 * BS], "reads that may not repair leave it");
    // A later write that reaches the copy makes that part current.
    env.write(&l, 4, &new[..2 * BS]).unwrap();
    assert_eq!(env.changes().last(), Some(&Change::Clear { copy: 0, fblk: 4, len: 2 }));
    assert_eq!(env.health(&l), Health::Degraded);
    assert_eq!(env.try_read(l.root(), 0, 20, false).unwrap(), want);
    // A read that may repair resyncs what it touches of the rest.
    assert_eq!(env.read(&l, 7, 2), want[7 * BS..9 * BS]);
    assert_eq!(env.changes().last(), Some(&Change::Clear { copy: 0, fblk: 7, len: 2 }));
    assert_eq!(env.copy(&l, 0, 7, 2), new[3 * BS..5 * BS]);
    assert_eq!(env.read(&l, 0, 20), want);
    assert_eq!(env.copy(&l, 0, 0, 20), want);
    assert_eq!(env.health(&l), Health::Ok);
    // Copy 0 misses a range again; with the other copy gone, that range has
    // no copy left and fails, naming the missing device.
    env.devs[1].fail_writes.store(true, Ordering::SeqCst);
    env.write(&l, 4, &new).unwrap();
    env.devs[1].fail_writes.store(false, Ordering::SeqCst);
    // Back, as a reopen finds it (a failed write faulted it).
    env.storage.devs[1].set_state(crate::device::DeviceState::Online);
    env.storage.devs[0].set_state(DeviceState::Missing);
    assert_eq!(env.health(&l), Health::Lost);
    let e = env.try_read(l.root(), 6, 1, true).unwrap_err().to_string();
    assert!(e.contains("mem:0") && e.contains("missing"), "{e}");
    assert_eq!(env.read(&l, 0, 4), want[..4 * BS], "what copy 0 holds is still served");
    // Every copy failing fails the write, and records nothing.
    env.devs[1].fail_writes.store(true, Ordering::SeqCst);
    let before = env.changes().len();
    assert!(env.write(&l, 0, &new[..BS]).is_err());
    assert_eq!(env.changes().len(), before);
}

#[test]
fn scrub_resyncs_missed_ranges_and_clears_them() {
    let env = Env::new(2, 256);
    let l = build(&repl("primary", vec![ext(1), ext(0)]));
    let old = pattern(5, 30);
    env.write(&l, 0, &old).unwrap();
    env.storage.devs[1].set_state(DeviceState::Missing);
    let new = pattern(6, 10);
    env.write(&l, 10, &new).unwrap();
    env.write(&l, 25, &new[..2 * BS]).unwrap();
    let mut want = old.clone();
    want[10 * BS..20 * BS].copy_from_slice(&new);
    want[25 * BS..27 * BS].copy_from_slice(&new[..2 * BS]);
    assert_eq!(env.read(&l, 0, 30), want);
    // While the device is missing, scrub repairs nothing and loses nothing.
    let t = env.scrub(&l, true, &never, 30);
    assert_eq!(t.repaired.into_inner(), 0);
    assert!(t.unrecoverable.into_inner().is_empty());
    assert_eq!(env.health(&l), Health::Degraded);
    // Back: a checking scrub only reports; a repairing one resyncs.
    env.storage.devs[1].set_state(DeviceState::Online);
    let t = env.scrub(&l, false, &never, 30);
    assert_eq!(t.repaired.into_inner(), 0);
    assert_eq!(t.checked.into_inner(), 60);
    assert_eq!(env.health(&l), Health::Degraded);
    let n = env.changes().len();
    let t = env.scrub(&l, true, &never, 30);
    assert_eq!(t.repaired.into_inner(), 12);
    assert!(t.unrecoverable.into_inner().is_empty());
    assert_eq!(
        env.changes()[n..],
        [Change::Clear { copy: 0, fblk: 10, len: 10 }, Change::Clear { copy: 0, fblk: 25, len: 2 }]
    );
    assert_eq!(env.health(&l), Health::Ok);
    assert_eq!(env.copy(&l, 0, 0, 30), want);
    assert_eq!(env.copy(&l, 1, 0, 30), want);
    assert_eq!(env.storage.devs[1].repaired(), 12);
}

#[test]
fn scrub_repairs_bad_and_differing_copies_and_reports_lost_blocks() {
    let env = Env::new(3, 256);
    let l = build(&repl("least-loaded", vec![ext(0), ext(1), ext(2)]));
    let d = pattern(7, 40);
    env.write(&l, 0, &d).unwrap();
    env.devs[0].spoil(Env::pblk(&l, 1, 2));
    env.devs[1].scribble(Env::pblk(&l, 2, 30), 0x5A); // silent corruption: copies differ
    env.devs[0].spoil(Env::pblk(&l, 1, 35));
    env.devs[1].spoil(Env::pblk(&l, 2, 35));
    env.devs[2].spoil(Env::pblk(&l, 3, 35)); // no copy of block 35 left
    let t = env.scrub(&l, true, &never, 40);
    assert_eq!(t.unrecoverable.into_inner(), vec![(35, 1)]);
    assert_eq!(t.repaired.into_inner(), 2);
    assert_eq!(t.checked.into_inner(), 120);
    for c in 0..3 {
        assert_eq!(env.copy(&l, c, 0, 35), d[..35 * BS], "copy {c}");
        assert_eq!(env.copy(&l, c, 36, 4), d[36 * BS..], "copy {c}");
    }
}

#[test]
fn scrub_rebuilds_a_replaced_device() {
    let env = Env::new(2, 256);
    let l = build(&repl("primary", vec![ext(0), ext(1)]));
    let d = pattern(8, 50);
    env.write(&l, 0, &d).unwrap();
    env.write(&l, 100, &d[..3 * BS]).unwrap();
    // A blank device takes device 1's place.
    env.storage.devs[1].swap(Arc::new(MemDevice::new("fresh", 256 * BS as u64)));
    env.storage.devs[1].set_state(DeviceState::Resilvering);
    let t = env.scrub(&l, true, &|d| d == 1, 200);
    assert_eq!(t.repaired.into_inner(), 53);
    assert!(t.unrecoverable.into_inner().is_empty());
    env.storage.devs[1].set_state(DeviceState::Online);
    assert_eq!(env.copy(&l, 1, 0, 50), d);
    assert_eq!(env.copy(&l, 1, 100, 3), d[..3 * BS]);
    assert_eq!(env.copy(&l, 1, 50, 50), vec![0; 50 * BS], "holes stay holes");
}

#[test]
fn missed_ranges_persist_replay_and_truncate() {
    let env = Env::new(3, 512);
    let s = repl("primary", vec![ext(1), spec("stripe", vec![("unit", Value::Num(8192))], vec![ext(0), ext(2)], None)]);
    let l = build(&s);
    env.write(&l, 0, &pattern(9, 64)).unwrap();
    env.devs[1].fail_writes.store(true, Ordering::SeqCst);
    env.write(&l, 8, &pattern(10, 4)).unwrap();
    env.write(&l, 40, &pattern(11, 20)).unwrap();
    env.devs[1].fail_writes.store(false, Ordering::SeqCst);
    // Back, as a reopen finds it (a failed write faulted it).
    env.storage.devs[1].set_state(crate::device::DeviceState::Online);
    let want = env.try_read(l.root(), 0, 64, false).unwrap();
    assert_ne!(env.copy(&l, 0, 0, 64), want, "copy 0 is stale");
    // Checkpointed state: the decoded tree avoids the same ranges.
    let bytes = encode(&l);
    let d = decode(&bytes).unwrap();
    assert_eq!(encode(&d), bytes);
    assert_eq!(env.try_read(d.root(), 0, 64, false).unwrap(), want);
    assert_eq!(env.health(&d), Health::Degraded);
    // Replayed records: the same state.
    let r = build(&s);
    for c in env.log.lock().iter() {
        r.apply(c).unwrap();
    }
    assert_eq!(env.try_read(r.root(), 0, 64, false).unwrap(), want);
    assert_eq!(env.health(&r), Health::Degraded);
    // Truncate trims missed ranges (and records it).
    env.io(true, |io| l.root().truncate(io, 44)).unwrap();
    assert_eq!(env.changes().last(), Some(&Change::Truncate { from: 44 }));
    assert_eq!(*l.nodes()[0].params().0.get("read").unwrap(), Value::Word("primary".into()));
    let m = {
        let bytes = encode(&l);
        let d = decode(&bytes).unwrap();
        let t = env.scrub(&d, true, &never, 64);
        t.repaired.into_inner()
    };
    assert_eq!(m, 8, "blocks 8..12 and 40..44 resynced, nothing past the end");
    env.io(true, |io| l.root().truncate(io, 0)).unwrap();
    assert_eq!(env.health(&l), Health::Ok);
    // Nothing missed: the node's state is empty.
    let empty = build(&s);
    let mut e = Encoder::new();
    empty.encode(&mut e);
    assert_eq!(encode(&l), e.into_inner());
}

fn state(lists: &[&[(u64, u64)]]) -> Vec<u8> {
    let mut e = Encoder::new();
    for l in lists {
        e.u32(l.len() as u32);
        for &(s, n) in *l {
            e.u64(s).u64(n);
        }
    }
    e.into_inner()
}

#[test]
fn hostile_records_and_state_are_corrupt() {
    let l = build(&repl("primary", vec![ext(0), ext(1)]));
    let root = l.root();
    let rec = |tag: u8, copy: u32, f: u64, n: u64| {
        let mut e = Encoder::new();
        e.u8(tag).u32(copy).u64(f).u64(n);
        e.into_inner()
    };
    root.apply(&rec(1, 1, 10, 5)).unwrap();
    root.apply(&rec(2, 1, 10, 5)).unwrap();
    root.apply(&[3, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap();
    root.apply(&[4, 3]).unwrap();
    for bad in [
        rec(1, 2, 0, 1),                     // copy past the node's
        rec(1, 0, 0, 0),                     // empty range
        rec(2, 0, u64::MAX, 2),              // past 2^64
        rec(7, 0, 0, 1),                     // unknown change
        [rec(1, 0, 0, 1), vec![0]].concat(), // trailing bytes
        rec(1, 0, 0, 1)[..12].to_vec(),      // truncated
        vec![4, 4],                          // unknown policy
        vec![4],                             // policy missing
        vec![3, 0, 0],                       // short truncate
        vec![],                              // empty
    ] {
        assert!(matches!(root.apply(&bad), Err(Error::Corrupt { .. })), "{bad:?}");
    }
    // Through the framework, a bad record names the node.
    let e = l.apply(&NodeRecord { node: 0, bytes: vec![STATE_VERSION, 9] }).unwrap_err().to_string();
    assert!(e.contains("replicate"), "{e}");
    assert_eq!(root.params().0.get("read"), Some(&Value::Word("round-robin".into())));
    let params = root.params();
    let kids = root.children().to_vec();
    let make = |st: &[u8]| {
        (TYPE.build)(BuildArgs { id: 0, params: &params, device: None, children: kids.clone(), state: Some(st) })
    };
    assert!(make(&state(&[&[(0, 4), (10, 2)], &[]])).is_ok());
    assert!(make(&[]).is_ok());
    for bad in [
        state(&[&[(0, 4), (4, 2)], &[]]),             // touching
        state(&[&[(0, 4), (2, 2)], &[]]),             // overlapping
        state(&[&[(10, 4), (0, 2)], &[]]),            // out of order
        state(&[&[(0, 0)], &[]]),                     // empty range
        state(&[&[(u64::MAX, 2)], &[]]),              // past 2^64
        state(&[&[(0, 4)]]),                          // a copy short
        state(&[&[], &[], &[]]),                      // a copy too many
        [state(&[&[], &[(1, 1)]]), vec![0]].concat(), // trailing bytes
        vec![255, 255, 255, 255],                     // huge count
    ] {
        assert!(matches!(make(&bad), Err(Error::Corrupt { .. })), "{bad:?}");
    }
}

#[test]
fn read_policy_changes_in_place() {
    let env = Env::new(2, 256);
    let s = repl("primary", vec![ext(0), ext(1)]);
    let l = build(&s);
    env.write(&l, 0, &pattern(12, 1)).unwrap();
    let rr = build(&repl("round-robin", vec![ext(0), ext(1)]));
    let recs = live_changes(&l, &rr).unwrap();
    assert_eq!(recs.len(), 1);
    for r in &recs {
        l.apply(r).unwrap();
    }
    assert_eq!(l.spec(), rr.spec());
    // Round robin takes the copies in turn.
    let before: Vec<u64> = env.storage.devs.iter().map(|d| d.stats.snapshot().reads).collect();
    for _ in 0..10 {
        env.read(&l, 0, 1);
    }
    for (d, b) in env.storage.devs.iter().zip(before) {
        assert_eq!(d.stats.snapshot().reads - b, 5);
    }
    // The policy is part of the checkpointed tree.
    let d = decode(&encode(&l)).unwrap();
    assert_eq!(d.root().params().0.get("read"), Some(&Value::Word("round-robin".into())));
    // Nothing else may change in place.
    assert!(live_changes(&l, &l).unwrap().is_empty());
    for other in [
        repl("primary", vec![ext(0), ext(0)]),
        repl("primary", vec![ext(0), ext(1), ext(0)]),
        spec("stripe", vec![], vec![ext(0), ext(1)], None),
        repl("primary", vec![spec("extent", vec![("max", Value::Num(8192))], vec![], Some(0)), ext(1)]),
    ] {
        assert!(live_changes(&l, &build(&other)).is_err(), "{other:?}");
    }
}

#[test]
fn concurrent_writes_and_heals_keep_copies_equal() {
    const BLOCKS: u64 = 64;
    let env = Env::new(2, 1024);
    let l = build(&repl("round-robin", vec![ext(0), ext(1)]));
    env.write(&l, 0, &pattern(13, BLOCKS as usize)).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // Writers of overlapping ranges.
        let writers: Vec<_> = (0..4u64)
            .map(|t| {
                let (env, l) = (&env, &l);
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(t);
                    for i in 0..300 {
                        let n = rng.gen_range(1..=8);
                        let f = rng.gen_range(0..=BLOCKS - n);
                        env.write(l, f, &vec![(t * 50 + i % 50) as u8 + 1; n as usize * BS]).unwrap();
                    }
                })
            })
            .collect();
        // One thread spoils blocks of one copy at a time (never both copies
        // of a block) and reads them, healing; another just reads.
        for t in 0..2u64 {
            let (env, l, stop) = (&env, &l, &stop);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(100 + t);
                while !stop.load(Ordering::SeqCst) {
                    let f = rng.gen_range(0..BLOCKS);
                    if t == 0 {
                        let c = rng.gen_range(0..2usize);
                        let other = Env::pblk(l, 2 - c, f);
                        if !env.devs[1 - c].bad.lock().contains(&other) {
                            env.devs[c].spoil(Env::pblk(l, c + 1, f));
                        }
                    }
                    let n = rng.gen_range(1..=8).min(BLOCKS - f);
                    env.try_read(l.root(), f, n as usize, true).unwrap();
                }
            });
        }
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::SeqCst);
    });
    // Whatever is still spoiled is healed by a scrub; then the copies agree.
    let t = env.scrub(&l, true, &never, BLOCKS);
    assert!(t.unrecoverable.into_inner().is_empty());
    assert_eq!(env.devs[0].bad_count() + env.devs[1].bad_count(), 0);
    assert_eq!(env.copy(&l, 0, 0, BLOCKS as usize), env.copy(&l, 1, 0, BLOCKS as usize));
    assert!(env.changes().is_empty(), "nothing was missed");
}

#[test]
fn nearest_reads_the_copy_on_the_callers_node() {
    let env = Env::new(3, 256);
    let l = build(&repl("nearest", vec![ext(0), ext(1), ext(2)]));
    let d = pattern(9, 32);
    env.write(&l, 0, &d).unwrap();
    let reads = |dev: usize| env.storage.devs[dev].stats.snapshot().reads;
    let before: Vec<u64> = (0..3).map(reads).collect();
    // Devices 0 and 2 on a node far from every CPU of this machine (one
    // sysfs does not list), device 1 on the node of the calling CPU.
    let here = crate::numa::current_node();
    env.storage.devs[0].set_numa_node(Some(4000));
    env.storage.devs[1].set_numa_node(here);
    env.storage.devs[2].set_numa_node(Some(4000));
    for i in 0..16 {
        assert_eq!(env.read(&l, i * 2, 2), d[(i * 2) as usize * BS..(i * 2 + 2) as usize * BS]);
    }
    let got: Vec<u64> = (0..3).map(|i| reads(i) - before[i]).collect();
    if here.is_some() {
        assert!(got[1] >= 16 && got[0] == 0 && got[2] == 0, "{got:?}: reads left the near copy");
    } else {
        // No topology to go by: the copies share the reads by load.
        assert!(got.iter().sum::<u64>() >= 16, "{got:?}");
    }
    // Unknown nodes count as local: all three copies are candidates again.
    for h in env.storage.devs.iter() {
        h.set_numa_node(None);
    }
    assert_eq!(env.read(&l, 0, 32), d);
}

/// `checksum[replicate[extent@0, extent@1]]`: the checksum is above the
/// copies, so only it can tell which copy rotted.
fn summed_pair(read: &str) -> Layout {
    build(&spec("checksum", vec![], vec![repl(read, vec![ext(0), ext(1)])], None))
}

/// Copy `c` (node 2 or 3) of a [`summed_pair`], read directly.
fn summed_copy(env: &Env, l: &Layout, c: usize, n: usize) -> Vec<u8> {
    env.try_read(&l.nodes()[2 + c], 0, n, false).unwrap()
}

#[test]
fn a_checksum_above_is_served_by_the_copy_that_matches_it() {
    let env = Env::new(2, 256);
    let l = summed_pair("primary");
    let d = pattern(21, 16);
    env.write(&l, 0, &d).unwrap();
    // Copy 0, which the primary policy reads, rots silently in blocks 5 and 11.
    env.devs[0].scribble(Env::pblk(&l, 2, 5), 0x5A);
    env.devs[0].scribble(Env::pblk(&l, 2, 11), 0xA5);
    // A read that may not repair gets the good copy and leaves the rot.
    assert_eq!(env.try_read(l.root(), 0, 16, false).unwrap(), d);
    assert_ne!(summed_copy(&env, &l, 0, 16), d);
    assert_eq!(env.storage.devs[0].errors().checksum, 2, "the rotten copy's blocks are counted on its device");
    assert_eq!(env.storage.devs[1].errors().checksum, 0);
    // One that may repair rewrites the rotten copy from the good one.
    assert_eq!(env.read(&l, 0, 16), d);
    assert_eq!(summed_copy(&env, &l, 0, 16), d);
    assert_eq!(summed_copy(&env, &l, 1, 16), d);
    assert!(env.storage.devs[0].repaired() >= 2);
    assert!(env.log.lock().iter().all(|r| r.node != 1), "a successful repair misses nothing");
    // Both copies rotten in one block: an error, never the bad bytes.
    env.devs[0].scribble(Env::pblk(&l, 2, 7), 1);
    env.devs[1].scribble(Env::pblk(&l, 3, 7), 2);
    assert!(matches!(env.try_read(l.root(), 7, 1, true), Err(Error::Checksum(_))));
    assert_eq!(env.try_read(l.root(), 8, 8, true).unwrap(), d[8 * BS..]);
}

#[test]
fn a_scrub_under_a_checksum_keeps_the_copy_that_matches_it() {
    for rotten in [0usize, 1] {
        let env = Env::new(2, 256);
        let l = summed_pair("least-loaded");
        let d = pattern(22, 40);
        env.write(&l, 0, &d).unwrap();
        // One of two copies rots: the copies tie, and only the checksum
        // says which to keep.
        env.devs[rotten].scribble(Env::pblk(&l, 2 + rotten, 9), 0x77);
        env.devs[rotten].scribble(Env::pblk(&l, 2 + rotten, 33), 0x78);
        // Block 20 rots on both copies: lost, and reported so.
        env.devs[0].scribble(Env::pblk(&l, 2, 20), 3);
        env.devs[1].scribble(Env::pblk(&l, 3, 20), 4);
        let t = env.scrub(&l, true, &never, 40);
        assert_eq!(t.unrecoverable.into_inner(), vec![(20, 1)], "copy {rotten} rotten");
        assert_eq!(t.repaired.into_inner(), 2, "copy {rotten} rotten");
        for c in 0..2 {
            assert_eq!(summed_copy(&env, &l, c, 20), d[..20 * BS], "copy {c}, copy {rotten} rotten");
            assert_eq!(summed_copy(&env, &l, c, 40)[21 * BS..], d[21 * BS..], "copy {c}, copy {rotten} rotten");
        }
        assert_eq!(env.storage.devs[rotten].errors().checksum, 3);
        // A scrub that only reports leaves what it finds.
        env.devs[rotten].scribble(Env::pblk(&l, 2 + rotten, 2), 9);
        let t = env.scrub(&l, false, &never, 40);
        assert_eq!(t.repaired.into_inner(), 0);
        assert_eq!(t.unrecoverable.into_inner(), vec![(20, 1)]);
        assert_ne!(summed_copy(&env, &l, rotten, 4), d[..4 * BS]);
    }
}
