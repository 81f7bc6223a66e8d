//! Tests of the building blocks and their compositions, over memory devices.
//! Layouts are built from hand-made `Spec`s so these tests do not depend on
//! the textual parser.

use super::testenv::*;
use super::*;
use crate::device::{Device, MemDevice};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};

const KIB: u64 = 1024;

// ---- Specs ----

fn node(kind: &str, params: Vec<(&str, Value)>, children: Vec<Spec>, device: Option<u32>) -> Spec {
    Spec { kind: kind.into(), params: params.into_iter().map(|(k, v)| (k.to_string(), v)).collect(), children, device }
}
fn ext(d: u32) -> Spec {
    node("extent", vec![], vec![], Some(d))
}
fn ext_max(d: u32, max: u64) -> Spec {
    node("extent", vec![("max", Value::Num(max))], vec![], Some(d))
}
fn log(d: u32) -> Spec {
    node("log", vec![("segment", Value::Num(64 * KIB))], vec![], Some(d))
}
fn stripe(unit: u64, kids: Vec<Spec>) -> Spec {
    node("stripe", vec![("unit", Value::Num(unit))], kids, None)
}
fn regions(size: u64, kids: Vec<Spec>) -> Spec {
    node("regions", vec![("size", Value::Num(size))], kids, None)
}
fn replicate(read: &str, kids: Vec<Spec>) -> Spec {
    node("replicate", vec![("read", Value::Word(read.into()))], kids, None)
}
fn inline(max: u64) -> Spec {
    node("inline", vec![("max", Value::Num(max))], vec![], None)
}
fn checksum(kid: Spec) -> Spec {
    node("checksum", vec![], vec![kid], None)
}

// ---- Records as the types write them ----

/// A record framed as the framework frames it: version 1, then `payload`.
fn rec(node: u32, payload: &[u8]) -> NodeRecord {
    NodeRecord { node, bytes: [&[1u8][..], payload].concat() }
}
fn inline_rec(node: u32, data: &[u8]) -> NodeRecord {
    let mut e = crate::codec::Encoder::new();
    e.bytes(data);
    rec(node, &e.buf)
}
fn extent_map_rec(node: u32, fblk: u64, pblk: u64, len: u64) -> NodeRecord {
    let mut e = crate::codec::Encoder::new();
    e.u8(1).u64(fblk).u64(pblk).u64(len);
    rec(node, &e.buf)
}
fn extent_truncate_rec(node: u32, from: u64) -> NodeRecord {
    let mut e = crate::codec::Encoder::new();
    e.u8(2).u64(from);
    rec(node, &e.buf)
}

// ---- Parameters and validation ----

fn build_err(s: &Spec) -> String {
    match Layout::build(s) {
        Ok(_) => panic!("{s:?} was accepted"),
        Err(Error::Layout(m)) => m,
        Err(e) => panic!("{s:?}: wrong error {e}"),
    }
}

#[test]
fn bad_compositions_are_refused() {
    assert!(build_err(&node("extent", vec![], vec![], None)).contains("needs a device"));
    assert!(build_err(&node("extent", vec![], vec![ext(1)], Some(0))).contains("no children"));
    assert!(build_err(&node("extent", vec![("max", Value::Num(100))], vec![], Some(0))).contains("max="));
    assert!(build_err(&node("inline", vec![], vec![], Some(0))).contains("takes no device"));
    assert!(build_err(&inline(8 * KIB)).contains("max=8K"));
    assert!(build_err(&stripe(6 * KIB, vec![ext(0), ext(1)])).contains("multiple of 4K"));
    assert!(build_err(&regions(10_000, vec![ext(0)])).contains("multiple of 4K"));
    assert!(build_err(&stripe(64 * KIB, vec![])).contains("1 to 256 children"));
    assert!(build_err(&node("stripe", vec![("width", Value::Num(3))], vec![ext(0), ext(1)], None))
        .contains("width=3 but 2"));
    assert!(build_err(&node("stripe", vec![("unit", Value::Word("big".into()))], vec![ext(0)], None)).contains("unit="));
    assert!(build_err(&node("stripe", vec![], vec![ext(0)], Some(2))).contains("takes no device"));
    assert!(build_err(&replicate("fastest", vec![ext(0)])).contains("one of least-loaded"));
    assert!(build_err(&replicate("primary", (0..17).map(ext).collect())).contains("1 to 16 children"));
}

#[test]
fn params_include_defaults_and_width() {
    let l = build(&node(
        "replicate",
        vec![],
        vec![node("stripe", vec![], vec![ext(0), ext(1)], None), node("regions", vec![], vec![ext(2)], None)],
        None,
    ));
    let p = |i: usize| l.nodes()[i].params().0;
    assert_eq!(p(0).get("copies"), Some(&Value::Num(2)));
    assert_eq!(p(0).get("read"), Some(&Value::Word("least-loaded".into())));
    assert_eq!(p(1).get("unit"), Some(&Value::Num(1 << 20)));
    assert_eq!(p(1).get("width"), Some(&Value::Num(2)));
    assert_eq!(p(2).get("max"), Some(&Value::Num(128 << 20)));
    assert_eq!(p(4).get("size"), Some(&Value::Num(16 << 20)));
    assert_eq!(p(4).get("width"), Some(&Value::Num(1)));
    let i = build(&node("inline", vec![], vec![], None));
    assert_eq!(i.root().params().0.get("max"), Some(&Value::Num(2048)));
    assert_eq!(i.root().capacity(), 1);
    assert_eq!(build(&inline(0)).root().capacity(), 0);
}

// ---- Geometry ----

#[test]
fn stripe_places_units_round_robin() {
    let env = Env::new(3, 256);
    // unit = 2 blocks over 3 children.
    let l = build(&stripe(8 * KIB, vec![ext(0), ext(1), ext(2)]));
    let data = pattern(1, 14);
    env.write(&l, 0, &data).unwrap();
    let blk = |f: usize| &data[f * BS..(f + 1) * BS];
    let child = |c: usize, cb: u64| {
        let mut b = vec![0; BS];
        env.io(|io| l.nodes()[c + 1].read(io, cb, &mut b)).unwrap();
        b
    };
    // File block b: unit b/2 on child (b/2)%3 at ((b/2)/3)*2 + b%2.
    for f in 0..14usize {
        let u = f / 2;
        assert_eq!(child(u % 3, ((u / 3) * 2 + f % 2) as u64), blk(f), "file block {f}");
    }
    // Truncate to 9 blocks: child 0 keeps units 0 and 3 (4 blocks), child 1
    // unit 1 and half of unit 4 (3 blocks), child 2 unit 2 (2 blocks).
    env.truncate(&l, 9);
    let next = |c: usize, b: u64| l.nodes()[c + 1].next_data(b);
    assert_eq!(next(0, 3), Some(3));
    assert_eq!(next(0, 4), None);
    assert_eq!(next(1, 2), Some(2));
    assert_eq!(next(1, 3), None);
    assert_eq!(next(2, 1), Some(1));
    assert_eq!(next(2, 2), None);
    assert_eq!(l.root().next_data(0), Some(0));
    assert_eq!(l.root().next_data(9), None);
    let mut want = data[..9 * BS].to_vec();
    want.resize(14 * BS, 0);
    assert_eq!(env.read(&l, 0, 14), want);
}

#[test]
fn holes_read_as_zeros_and_next_data_skips_them() {
    let env = Env::new(4, 512);
    for s in [
        stripe(8 * KIB, vec![ext(0), ext(1), ext(2)]),
        regions(32 * KIB, vec![stripe(4 * KIB, vec![ext(0), ext(1)]), ext(2)]),
        replicate("least-loaded", vec![ext(0), stripe(4 * KIB, vec![ext(1), ext(2)])]),
    ] {
        let l = build(&s);
        assert_eq!(l.root().next_data(0), None);
        let d = pattern(2, 1);
        env.write(&l, 100, &d).unwrap();
        assert_eq!(env.read(&l, 0, 100), vec![0; 100 * BS]);
        assert_eq!(env.read(&l, 100, 1), d);
        assert_eq!(l.root().next_data(0), Some(100));
        assert_eq!(l.root().next_data(100), Some(100));
        assert_eq!(l.root().next_data(101), None);
        env.truncate(&l, 50);
        assert_eq!(l.root().next_data(0), None);
        assert_eq!(env.read(&l, 99, 3), vec![0; 3 * BS]);
        env.truncate(&l, 0);
    }
    env.check_accounting(&[]);
}

#[test]
fn sequential_appends_stay_contiguous() {
    let env = Env::new(1, 256);
    let l = build(&ext(0));
    for b in 0..50 {
        env.write(&l, b, &pattern(b, 1)).unwrap();
    }
    let mut runs = Vec::new();
    l.extents(&mut |d, p, n| runs.push((d, p, n)));
    assert_eq!(runs, vec![(0, FIRST, 50)]);
    // With max = 16K the same file is four-block runs, still back to back.
    let env = Env::new(1, 256);
    let l = build(&ext_max(0, 16 * KIB));
    for b in 0..10 {
        env.write(&l, b, &pattern(b, 1)).unwrap();
    }
    let mut runs = Vec::new();
    l.extents(&mut |_, p, n| runs.push((p, n)));
    assert_eq!(runs, vec![(FIRST, 4), (FIRST + 4, 4), (FIRST + 8, 2)]);
}

#[test]
fn large_requests_span_every_child() {
    let env = Env::new(4, 2048);
    for s in [
        stripe(64 * KIB, vec![ext(0), ext(1), ext(2), ext(3)]),
        stripe(4 * KIB, vec![ext(0), ext(1), ext(2), ext(3)]),
        regions(256 * KIB, vec![ext(0), ext(1), ext(2), ext(3)]),
        replicate("primary", vec![stripe(16 * KIB, vec![ext(0), ext(1)]), stripe(16 * KIB, vec![ext(2), ext(3)])]),
    ] {
        let l = build(&s);
        // 3 MiB at an odd offset: many units, several turns of the children.
        let data = pattern(3, 768);
        env.write(&l, 7, &data).unwrap();
        assert_eq!(env.read(&l, 7, 768), data);
        let mut got = env.read(&l, 0, 800);
        assert!(got[..7 * BS].iter().all(|&b| b == 0));
        assert_eq!(&got[7 * BS..775 * BS], &data[..]);
        got.truncate(0);
        env.truncate(&l, 0);
    }
    env.check_accounting(&[]);
}

// ---- Random operations against a model ----

/// Random writes, reads and truncates checked against a byte vector; then the
/// persistent forms (encoded state, replayed changes) must read the same.
fn exercise(s: &Spec, env: &Env, seed: u64, ops: usize) {
    const MAXB: u64 = 300;
    let l = build(s);
    let mut model = vec![0u8; MAXB as usize * BS];
    let mut rng = StdRng::seed_from_u64(seed);
    env.log.lock().clear();
    for i in 0..ops {
        match rng.gen_range(0..10) {
            0..=4 => {
                let n = if rng.gen_bool(0.2) { rng.gen_range(1..=120) } else { rng.gen_range(1..=8) };
                let f = rng.gen_range(0..=MAXB - n);
                let d = pattern(seed * 1000 + i as u64, n as usize);
                env.write(&l, f, &d).unwrap();
                model[f as usize * BS..(f + n) as usize * BS].copy_from_slice(&d);
                // The batch commits: deferred frees (copy-on-write
                // overwrites leave some) become free space.
                for a in &env.storage.allocs {
                    a.release(u64::MAX);
                }
            }
            5..=7 => {
                let n = rng.gen_range(1..=64);
                let f = rng.gen_range(0..=MAXB - n);
                let got = env.read(&l, f, n as usize);
                assert!(got == model[f as usize * BS..(f + n) as usize * BS], "{s:?}: read {f}+{n} after {i} ops");
            }
            8 => {
                let n = rng.gen_range(0..MAXB);
                env.truncate(&l, n);
                model[n as usize * BS..].fill(0);
            }
            _ => {
                // next_data never skips a block that holds data.
                let f = rng.gen_range(0..MAXB);
                let first = (f..MAXB).find(|&b| model[b as usize * BS..(b + 1) as usize * BS].iter().any(|&x| x != 0));
                if let Some(b) = first {
                    let nd = l.root().next_data(f);
                    assert!(nd.is_some_and(|x| x >= f && x <= b), "{s:?}: next_data({f}) = {nd:?}, data at {b}");
                }
            }
        }
    }
    assert!(env.read(&l, 0, MAXB as usize) == model, "{s:?}: final contents");

    // Encoded and decoded: same tree, same contents.
    let bytes = encode(&l);
    let d = decode(&bytes).unwrap();
    assert_eq!(d.spec(), l.spec());
    assert!(env.read(&d, 0, MAXB as usize) == model, "{s:?}: after decode");
    assert_eq!(encode(&d), bytes);

    // Replayed onto an empty tree: same contents, same persistent state.
    let r = build(s);
    for c in env.changes() {
        r.apply(&c).unwrap();
    }
    assert!(env.read(&r, 0, MAXB as usize) == model, "{s:?}: after replay");
    let mut a = Vec::new();
    let mut b = Vec::new();
    l.extents(&mut |d, p, n| a.push((d, p, n)));
    r.extents(&mut |d, p, n| b.push((d, p, n)));
    a.sort_unstable();
    b.sort_unstable();
    // Run boundaries may differ; the blocks covered may not.
    let blocks =
        |v: &[(u32, u64, u64)]| v.iter().flat_map(|&(d, p, n)| (p..p + n).map(move |x| (d, x))).collect::<Vec<_>>();
    assert_eq!(blocks(&a), blocks(&b));

    env.check_accounting(&[&l]);
    env.truncate(&l, 0);
    env.check_accounting(&[]);
}

fn compositions() -> Vec<Spec> {
    vec![
        ext(0),
        ext_max(1, 16 * KIB),
        stripe(8 * KIB, vec![ext(0), ext(1), ext(2)]),
        stripe(4 * KIB, vec![ext(0), ext_max(1, 4 * KIB)]),
        regions(32 * KIB, vec![ext(0), ext(1), ext(2)]),
        regions(64 * KIB, vec![stripe(8 * KIB, vec![ext(0), ext(1)]), stripe(4 * KIB, vec![ext(2), ext(3)])]),
        replicate("least-loaded", vec![stripe(8 * KIB, vec![ext(0), ext(1)]), stripe(8 * KIB, vec![ext(2), ext(3)])]),
        replicate("primary", vec![ext(0), ext(1), ext(2)]),
        replicate("nearest", vec![ext_max(0, 8 * KIB), regions(16 * KIB, vec![ext(1), ext(2)])]),
        stripe(
            8 * KIB,
            vec![replicate("least-loaded", vec![ext(0), ext(1)]), replicate("primary", vec![ext(2), ext(3)])],
        ),
        checksum(ext_max(0, 16 * KIB)),
        replicate("primary", vec![checksum(ext(0)), checksum(ext(1))]),
        checksum(stripe(8 * KIB, vec![ext(2), ext(3)])),
        node(
            "table",
            vec![("map", Value::Word("0-32K:0;32K-64K:1;64K-400K:2;400K-:0".into()))],
            vec![ext(0), checksum(ext(1)), stripe(8 * KIB, vec![ext(2), ext(3)])],
            None,
        ),
        node("write-mostly", vec![("unit", Value::Num(16 * KIB))], vec![ext(0), ext(1), ext(2)], None),
        log(0),
        stripe(8 * KIB, vec![log(0), log(1), log(2)]),
        replicate("primary", vec![log(0), ext(1)]),
        checksum(log(3)),
        node(
            "write-mostly",
            vec![("unit", Value::Num(8 * KIB))],
            vec![checksum(ext(0)), stripe(8 * KIB, vec![ext(1), ext(2)])],
            None,
        ),
    ]
}

#[test]
fn random_operations_match_a_model() {
    for (i, s) in compositions().iter().enumerate() {
        let env = Env::new(4, 4096);
        exercise(s, &env, i as u64 + 1, 400);
    }
}

#[test]
fn replay_twice_is_harmless() {
    let env = Env::new(3, 1024);
    let s = stripe(8 * KIB, vec![ext(0), ext(1), ext(2)]);
    let l = build(&s);
    env.write(&l, 3, &pattern(5, 40)).unwrap();
    env.truncate(&l, 20);
    env.write(&l, 30, &pattern(6, 10)).unwrap();
    let r = build(&s);
    for _ in 0..2 {
        for c in env.changes() {
            r.apply(&c).unwrap();
        }
    }
    assert_eq!(env.read(&r, 0, 50), env.read(&l, 0, 50));
}

// ---- Checksums ----

/// Overwrites device block `pblk` of device `dev` with `byte`, behind the
/// layout's back (damage on the medium).
fn damage(env: &Env, dev: u32, pblk: u64, byte: u8) {
    env.storage.devs[dev as usize].dev().write_at(&[byte; 16], pblk * BS as u64 + 100).unwrap();
}

/// The device block holding file block `fblk` of a one-extent layout.
fn pblk_of(l: &Layout, fblk: u64) -> u64 {
    let mut runs = Vec::new();
    l.extents(&mut |_, p, n| runs.push((p, n)));
    runs.sort_unstable();
    // Written in order from 0, the file's blocks are its runs in order.
    let mut left = fblk;
    for (p, n) in runs {
        if left < n {
            return p + left;
        }
        left -= n;
    }
    panic!("file block {fblk} not mapped")
}

fn blocks_summed(l: &Layout) -> u64 {
    l.nodes().iter().filter_map(|n| checksum::checksummed_blocks(n.as_ref())).sum()
}

#[test]
fn checksum_detects_damage_and_never_returns_it() {
    let env = Env::new(1, 256);
    let l = build(&checksum(ext(0)));
    let data = pattern(7, 10);
    env.write(&l, 0, &data).unwrap();
    assert_eq!(env.read(&l, 0, 10), data);
    damage(&env, 0, pblk_of(&l, 5), 0x5A);
    let mut buf = vec![0xAA; 10 * BS];
    let err = env.io(|io| l.root().read(io, 0, &mut buf)).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Checksum(_)), "{err}");
    assert!(msg.contains("file block 5") && msg.contains("device 0 (mem:0)"), "{msg}");
    assert_eq!(err.errno(), libc::EIO);
    // The bad block never reaches the caller; the rest is intact.
    assert!(buf[5 * BS..6 * BS].iter().all(|&b| b == 0));
    assert_eq!(env.storage.devs[0].errors().checksum, 1);
    // Blocks beside it still read.
    assert_eq!(env.read(&l, 0, 5), data[..5 * BS]);
    assert_eq!(env.read(&l, 6, 4), data[6 * BS..]);
    // Rewriting the block makes it good again.
    env.write(&l, 5, &data[5 * BS..6 * BS]).unwrap();
    assert_eq!(env.read(&l, 0, 10), data);
}

/// A memory device that zeroes ranges itself and counts what it was sent.
struct Zeroing {
    inner: MemDevice,
    written: std::sync::atomic::AtomicU64,
    zeroed: std::sync::atomic::AtomicU64,
}

impl Device for Zeroing {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.written.fetch_add(buf.len() as u64, std::sync::atomic::Ordering::SeqCst);
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
    fn zero_range(&self, offset: u64, len: u64) -> Result<bool> {
        self.zeroed.fetch_add(len, std::sync::atomic::Ordering::SeqCst);
        self.inner.write_at(&vec![0u8; len as usize], offset)?;
        Ok(true)
    }
}

/// Zeroes through a checksum node (what `fallocate` writes) are zeroed by
/// the device, not sent as bytes, and are checksummed like written data:
/// damage there is an error, and zeroing over data leaves zeros that verify.
#[test]
fn zeroes_under_a_checksum_are_zeroed_by_the_device_and_checksummed() {
    use std::sync::atomic::Ordering::SeqCst;
    let dev = Arc::new(Zeroing {
        inner: MemDevice::new("mem:0", 256 * BS as u64),
        written: Default::default(),
        zeroed: Default::default(),
    });
    let env = Env::with(vec![dev.clone() as Arc<dyn Device>]);
    let l = build(&checksum(ext(0)));
    env.io(|io| l.root().write_zeroes(io, 0, 24)).unwrap();
    assert_eq!(dev.written.load(SeqCst), 0, "zeros were sent as bytes");
    assert_eq!(dev.zeroed.load(SeqCst), 24 * BS as u64);
    assert_eq!(blocks_summed(&l), 24);
    assert_eq!(env.read(&l, 0, 24), vec![0; 24 * BS]);
    damage(&env, 0, pblk_of(&l, 9), 0x5A);
    let mut buf = vec![0u8; 24 * BS];
    let err = env.io(|io| l.root().read(io, 0, &mut buf)).unwrap_err();
    assert!(matches!(err, Error::Checksum(_)), "{err}");
    // Over data: the old checksums are replaced.
    let l = build(&checksum(ext(0)));
    env.write(&l, 0, &pattern(9, 8)).unwrap();
    env.io(|io| l.root().write_zeroes(io, 2, 4)).unwrap();
    let mut want = pattern(9, 8);
    want[2 * BS..6 * BS].fill(0);
    assert_eq!(env.read(&l, 0, 8), want);
    assert_eq!(blocks_summed(&l), 8);
}

#[test]
fn checksum_tells_replicate_which_copy_is_bad() {
    let env = Env::new(2, 256);
    let l = build(&replicate("primary", vec![checksum(ext(0)), checksum(ext(1))]));
    let data = pattern(8, 4);
    env.write(&l, 0, &data).unwrap();
    let mut runs = Vec::new();
    l.extents(&mut |d, p, _| runs.push((d, p)));
    let p0 = runs.iter().find(|r| r.0 == 0).unwrap().1;
    damage(&env, 0, p0 + 2, 1);
    // The primary copy fails verification; the read is served by the other.
    assert_eq!(env.read(&l, 0, 4), data);
    assert_eq!(env.storage.devs[0].errors().checksum, 1);
    assert_eq!(env.storage.devs[1].errors().checksum, 0);
}

#[test]
fn checksum_holes_truncate_and_punch() {
    let env = Env::new(1, 512);
    let l = build(&checksum(ext(0)));
    // Never-written blocks are holes: read as zeros, nothing kept for them.
    env.write(&l, 10, &pattern(1, 2)).unwrap();
    assert!(env.read(&l, 0, 10).iter().all(|&b| b == 0));
    assert_eq!(blocks_summed(&l), 2);
    env.write(&l, 0, &pattern(2, 8)).unwrap();
    assert_eq!(blocks_summed(&l), 10);
    env.truncate(&l, 4);
    assert_eq!(blocks_summed(&l), 4);
    // Written again past a hole: both read back, the hole unverified.
    let tail = pattern(3, 2);
    env.write(&l, 6, &tail).unwrap();
    assert!(env.read(&l, 4, 2).iter().all(|&b| b == 0));
    assert_eq!(env.read(&l, 6, 2), tail);
    // A punched range reads as zeros and its space goes back.
    env.io(|io| l.root().punch(io, 1, 2)).unwrap();
    assert_eq!(blocks_summed(&l), 4);
    assert!(env.read(&l, 1, 2).iter().all(|&b| b == 0));
    assert_eq!(env.read(&l, 0, 1), pattern(2, 8)[..BS]);
    assert_eq!(env.read(&l, 3, 1), pattern(2, 8)[3 * BS..4 * BS]);
    assert_eq!(l.root().next_data(1), Some(3));
    env.check_accounting(&[&l]);
    // A child that cannot punch says so.
    let par = node("parity", vec![("data", Value::Num(1)), ("parity", Value::Num(1))], vec![ext(0), ext(1)], None);
    let s = build(&checksum(par));
    assert!(matches!(env.io(|io| s.root().punch(io, 0, 1)), Err(Error::NotSupported(_))));
}

#[test]
fn stripes_regions_and_replicas_punch_through_their_children() {
    for s in [
        stripe(8 * KIB, vec![ext(0), ext(1), ext(2)]),
        regions(16 * KIB, vec![checksum(ext(0)), ext(1)]),
        replicate("primary", vec![ext(0), stripe(4 * KIB, vec![ext(1), ext(2)])]),
    ] {
        let env = Env::new(3, 256);
        let l = build(&s);
        let data = pattern(4, 40);
        env.write(&l, 0, &data).unwrap();
        let used =
            |env: &Env| env.storage.allocs.iter().map(|a| a.total_blocks() - FIRST - a.free_blocks()).sum::<u64>();
        let before = used(&env);
        env.io(|io| l.root().punch(io, 3, 20)).unwrap();
        for a in &env.storage.allocs {
            a.release(u64::MAX);
        }
        let copies = if s.kind == "replicate" { 2 } else { 1 };
        assert_eq!(used(&env), before - 20 * copies, "{s:?}");
        let mut want = data.clone();
        want[3 * BS..23 * BS].fill(0);
        assert_eq!(env.read(&l, 0, 40), want, "{s:?}");
        env.check_accounting(&[&l]);
    }
}

#[test]
fn a_replica_that_cannot_punch_is_marked_behind() {
    let env = Env::new(3, 256);
    let par = node("parity", vec![("data", Value::Num(1)), ("parity", Value::Num(1))], vec![ext(1), ext(2)], None);
    let l = build(&replicate("primary", vec![par, ext(0)]));
    let data = pattern(6, 8);
    env.write(&l, 0, &data).unwrap();
    env.io(|io| l.root().punch(io, 2, 3)).unwrap();
    // The parity copy still holds the old blocks, so it missed the punch.
    let mut e = crate::codec::Encoder::new();
    l.root().encode_state(&mut e);
    assert!(!e.buf.is_empty(), "no missed range recorded");
    // Reads of the range come from the extent copy, which reads zeros (and
    // heal the parity copy from it).
    let mut want = data.clone();
    want[2 * BS..5 * BS].fill(0);
    assert_eq!(env.read(&l, 0, 8), want);
    let mut buf = vec![0xAA; 8 * BS];
    env.io(|io| l.root().children()[0].read(io, 0, &mut buf)).unwrap();
    assert_eq!(buf, want);
}

#[test]
fn checksum_overwrites_go_to_fresh_space_until_the_batch_commits() {
    let env = Env::new(1, 256);
    let l = build(&checksum(ext(0)));
    env.write(&l, 0, &pattern(1, 4)).unwrap();
    let before = pblk_of(&l, 1);
    let old = env.storage.devs[0].dev();
    let mut was = vec![0u8; BS];
    old.read_at(&mut was, before * BS as u64).unwrap();
    let new = pattern(2, 1);
    env.write(&l, 1, &new).unwrap();
    let mut runs = Vec::new();
    l.extents(&mut |_, p, n| runs.push((p, n)));
    assert!(runs.iter().all(|&(p, n)| !(p..p + n).contains(&before)), "block 1 still at {before}: {runs:?}");
    // The old block is untouched (a crash before the commit finds it).
    let mut still = vec![0u8; BS];
    old.read_at(&mut still, before * BS as u64).unwrap();
    assert_eq!(still, was);
    assert_eq!(env.read(&l, 1, 1), new);
    env.check_accounting(&[&l]);
}

#[test]
fn checksum_state_survives_encoding_and_replay() {
    let env = Env::new(1, 1024);
    let s = checksum(ext(0));
    let l = build(&s);
    env.write(&l, 0, &pattern(1, 300)).unwrap();
    env.write(&l, 2000, &pattern(2, 3)).unwrap();
    env.write(&l, 7, &pattern(3, 2)).unwrap();
    env.truncate(&l, 2001);
    env.io(|io| l.root().punch(io, 100, 10)).unwrap();
    let want = env.read(&l, 0, 2001);
    let bytes = encode(&l);
    let d = decode(&bytes).unwrap();
    assert_eq!(encode(&d), bytes);
    let r = build(&s);
    for _ in 0..2 {
        for c in env.changes() {
            r.apply(&c).unwrap();
        }
    }
    assert_eq!(encode(&r), bytes);
    for x in [&d, &r] {
        assert!(env.read(x, 0, 2001) == want);
    }
    // Damage is caught through the decoded and the replayed tree alike.
    damage(&env, 0, pblk_of(&l, 0), 9);
    for x in [&l, &d, &r] {
        let mut buf = vec![0u8; BS];
        assert!(matches!(env.io(|io| x.root().read(io, 0, &mut buf)), Err(Error::Checksum(_))));
    }
}

#[test]
fn checksum_hostile_records_are_refused() {
    let l = build(&checksum(ext(0)));
    let bad = |payload: Vec<u8>, what: &str| match l.apply(&rec(0, &payload)) {
        Err(Error::Corrupt { .. }) => {}
        other => panic!("{what}: {other:?}"),
    };
    let set = |fblk: u64, n: u32, sums: usize| {
        let mut e = crate::codec::Encoder::new();
        e.u8(1).u64(fblk).u32(n);
        for _ in 0..sums {
            e.u32(7);
        }
        e.into_inner()
    };
    bad(set(0, 0, 0), "empty set");
    bad(set(0, 2, 1), "count past the end");
    bad(set(0, 1, 2), "trailing checksum");
    bad(set(u64::MAX, 1, 1), "past 2^64");
    bad(set(0, 1025, 1025), "longer than a group");
    bad(vec![2, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0], "empty drop");
    bad(vec![3], "unknown change");
    bad(vec![], "no change");
    // Nothing was applied.
    assert_eq!(blocks_summed(&l), 0);
    // The extent's punch record (what copy-on-write overwrites use) is strict too.
    let punch = |fblk: u64, len: u64| {
        let mut e = crate::codec::Encoder::new();
        e.u8(3).u64(fblk).u64(len);
        e.into_inner()
    };
    l.apply(&rec(1, &punch(0, 4))).unwrap();
    for (p, what) in [
        (punch(0, 0), "empty punch"),
        (punch(u64::MAX, 2), "punch past 2^64"),
        (punch(0, 1)[..9].to_vec(), "short punch"),
    ] {
        assert!(matches!(l.apply(&rec(1, &p)), Err(Error::Corrupt { .. })), "{what}");
    }
    l.apply(&rec(0, &set(4, 1, 1))).unwrap();
    assert_eq!(blocks_summed(&l), 1);
    // A hostile state in a decoded layout: a run crossing a group.
    let mut st = crate::codec::Encoder::new();
    st.u8(1).u32(1).u64(1023).u32(2).u32(0).u32(0);
    let mut e = crate::codec::Encoder::new();
    e.u32(2);
    e.str("checksum").u32(0).u32(u32::MAX).u32(1).bytes(&st.buf);
    e.str("extent").u32(1).str("max").u8(0).u64(128 << 20).u32(0).u32(0).bytes(&[]);
    assert!(matches!(decode(&e.buf), Err(Error::Corrupt { .. })), "{:?}", decode(&e.buf).err());
}

#[test]
fn checksum_reads_racing_writes_never_see_a_false_mismatch() {
    // One-block writes of a uniform byte, readers checking each block is
    // uniform: a mismatch from a race would surface as an error.
    for s in [checksum(ext(0)), checksum(stripe(4 * KIB, vec![ext(0), ext(1)]))] {
        let env = Env::new(2, 8192);
        let l = build(&s);
        const BLOCKS: u64 = 16;
        env.write(&l, 0, &vec![1u8; BLOCKS as usize * BS]).unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|sc| {
            for t in 0..3u64 {
                let (env, l, stop) = (&env, &l, &stop);
                sc.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(t);
                    for i in 0..400u64 {
                        let f = rng.gen_range(0..BLOCKS - 1);
                        let n = rng.gen_range(1..=2);
                        env.write(l, f, &vec![(t * 50 + i % 50) as u8 + 2; n * BS]).unwrap();
                    }
                    stop.store(true, Ordering::Relaxed);
                });
            }
            for _ in 0..3 {
                let (env, l, stop) = (&env, &l, &stop);
                sc.spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let mut buf = vec![0u8; BLOCKS as usize * BS];
                        env.io(|io| l.root().read(io, 0, &mut buf)).unwrap();
                        for c in buf.chunks(BS) {
                            assert!(c.iter().all(|&b| b == c[0]), "torn block");
                        }
                    }
                });
            }
        });
        assert_eq!(env.storage.devs[0].errors().checksum, 0);
        assert_eq!(env.storage.devs[1].errors().checksum, 0);
    }
}

// ---- Concurrency ----

#[test]
fn concurrent_writers_and_readers() {
    let env = Env::new(3, 4096);
    let l = build(&stripe(8 * KIB, vec![ext(0), ext(1), ext(2)]));
    const THREADS: u64 = 8;
    const ROUNDS: u64 = 40;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (env, l) = (&env, &l);
            s.spawn(move || {
                // Interleaved one- and two-block writes: neighbours share units and runs.
                for r in 0..ROUNDS {
                    let f = r * THREADS * 2 + t * 2;
                    env.write(l, f, &[t as u8 + 1; 2 * BS]).unwrap();
                    let got = env.read(l, f, 2);
                    assert!(got.iter().all(|&b| b == t as u8 + 1));
                }
            });
        }
    });
    let all = env.read(&l, 0, (THREADS * ROUNDS * 2) as usize);
    for (b, chunk) in all.chunks(BS).enumerate() {
        let t = (b as u64 / 2) % THREADS;
        assert!(chunk.iter().all(|&x| x == t as u8 + 1), "block {b}");
    }
    env.check_accounting(&[&l]);
}

#[test]
fn truncates_racing_writes_leak_nothing() {
    for s in [ext_max(0, 16 * KIB), stripe(8 * KIB, vec![ext(0), ext(1)])] {
        let env = Env::new(2, 4096);
        let l = build(&s);
        std::thread::scope(|sc| {
            for t in 0..4u64 {
                let (env, l) = (&env, &l);
                sc.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(t);
                    for _ in 0..300 {
                        if t == 0 {
                            env.truncate(l, rng.gen_range(0..64));
                        } else {
                            let n = rng.gen_range(1..=8);
                            env.write(l, rng.gen_range(0..64), &vec![t as u8; n * BS]).unwrap();
                        }
                    }
                });
            }
        });
        // The recorded changes still describe exactly what is mapped.
        let r = build(&s);
        for c in env.changes() {
            r.apply(&c).unwrap();
        }
        assert_eq!(env.read(&r, 0, 72), env.read(&l, 0, 72));
        env.check_accounting(&[&l]);
    }
}

// ---- Inline ----

#[test]
fn inline_keeps_small_data() {
    let env = Env::new(1, 16);
    let l = build(&inline(2 * KIB));
    let mut blk = vec![0u8; BS];
    blk[..100].copy_from_slice(&[7; 100]);
    env.write(&l, 0, &blk).unwrap();
    assert_eq!(env.read(&l, 0, 2), [blk.clone(), vec![0; BS]].concat());
    assert_eq!(env.changes(), vec![inline_rec(0, &[7; 100])]);
    assert_eq!(l.root().next_data(0), Some(0));
    // Past `max`, and past block 0, only zeros fit.
    let mut big = blk.clone();
    big[2048] = 1;
    assert!(matches!(env.write(&l, 0, &big), Err(Error::TooBig(_))));
    assert!(matches!(env.write(&l, 1, &blk), Err(Error::TooBig(_))));
    env.write(&l, 1, &[0; BS]).unwrap();
    assert_eq!(env.read(&l, 0, 1), blk);
    let mut none = 0;
    l.extents(&mut |_, _, _| none += 1);
    assert_eq!(none, 0);
    // Persistent forms.
    let d = decode(&encode(&l)).unwrap();
    assert_eq!(env.read(&d, 0, 1), blk);
    let r = build(&inline(2 * KIB));
    for c in env.changes() {
        r.apply(&c).unwrap();
    }
    assert_eq!(env.read(&r, 0, 1), blk);
    env.truncate(&l, 0);
    assert_eq!(env.read(&l, 0, 1), vec![0; BS]);
    assert_eq!(l.root().next_data(0), None);
    assert_eq!(env.changes().last(), Some(&inline_rec(0, &[])));
    // Too much data in a change or in stored state is corruption.
    assert!(r.apply(&inline_rec(0, &[1; 3000])).is_err());
    assert!(r.apply(&extent_truncate_rec(0, 0)).is_err());
    assert!(r.apply(&inline_rec(0, &[1, 0])).is_err(), "untrimmed data");
    let mut e = crate::codec::Encoder::new();
    e.bytes(&[1; 3000]);
    let params = Params(BTreeMap::from([("max".into(), Value::Num(2048))]));
    let args = |state| BuildArgs { id: 0, params: &params, device: None, children: vec![], state };
    assert!(matches!((inline::TYPE.build)(args(Some(&e.buf))), Err(Error::Corrupt { .. })));
    assert!(matches!((inline::TYPE.build)(args(Some(&[9, 0]))), Err(Error::Corrupt { .. })));
}

// ---- Failures ----

#[test]
fn full_device_is_no_space_and_frees_what_it_took() {
    let env = Env::new(2, 32);
    let l = build(&ext(0));
    let before = env.storage.allocs[0].free_blocks();
    match env.write(&l, 0, &pattern(1, 40)) {
        Err(Error::NoSpace(name)) => assert_eq!(name, "mem:0"),
        other => panic!("expected NoSpace, got {other:?}"),
    }
    assert_eq!(env.storage.allocs[0].free_blocks(), before);
    assert!(env.changes().is_empty());
    assert_eq!(env.read(&l, 0, 40), vec![0; 40 * BS]);
    // What fits still fits.
    let d = pattern(2, 31);
    env.write(&l, 0, &d).unwrap();
    assert_eq!(env.read(&l, 0, 31), d);
    assert!(matches!(env.write(&l, 31, &d[..BS]), Err(Error::NoSpace(_))));
    // A stripe fails the same way when one of its devices fills.
    let s = build(&stripe(4 * KIB, vec![ext(1), ext(0)]));
    assert!(matches!(env.write(&s, 0, &pattern(3, 8)), Err(Error::NoSpace(_))));
    env.check_accounting(&[&l, &s]);
}

#[test]
fn failed_data_write_maps_nothing() {
    let mem = Arc::new(MemDevice::new("mem:0", 64 * BS as u64));
    let env = Env::with(vec![mem.clone()]);
    let l = build(&ext(0));
    mem.fail_after_writes(0);
    assert!(env.write(&l, 0, &pattern(1, 4)).is_err());
    assert!(env.changes().is_empty());
    assert_eq!(l.root().next_data(0), None);
    env.check_accounting(&[&l]);
    mem.fail_after_writes(-1);
    // A failed write faults the device; brought back, it takes writes again.
    assert_eq!(env.storage.devs[0].state(), crate::device::DeviceState::Faulted);
    env.storage.devs[0].set_state(crate::device::DeviceState::Online);
    env.write(&l, 0, &pattern(1, 4)).unwrap();
    assert_eq!(env.read(&l, 0, 4), pattern(1, 4));
}

/// A device whose reads fail on demand (MemDevice only fails writes).
struct FailRead {
    inner: MemDevice,
    fail: AtomicBool,
}

impl Device for FailRead {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(Error::Device("injected read failure".into()));
        }
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
}

#[test]
fn replicated_reads_survive_a_failed_copy() {
    let bad = Arc::new(FailRead { inner: MemDevice::new("bad", 256 * BS as u64), fail: AtomicBool::new(false) });
    let good = Arc::new(MemDevice::new("good", 256 * BS as u64));
    let env = Env::with(vec![bad.clone(), good, Arc::new(MemDevice::new("other", 256 * BS as u64))]);
    for policy in ["primary", "least-loaded", "nearest"] {
        let l = build(&replicate(policy, vec![ext(0), stripe(4 * KIB, vec![ext(1), ext(2)])]));
        let d = pattern(4, 20);
        env.write(&l, 0, &d).unwrap();
        bad.fail.store(true, Ordering::SeqCst);
        for _ in 0..4 {
            assert_eq!(env.read(&l, 0, 20), d, "{policy}");
        }
        // With every copy failing, the read fails.
        let one = build(&replicate(policy, vec![ext(0)]));
        env.write(&one, 0, &d).unwrap();
        let mut buf = vec![0; 20 * BS];
        assert!(env.io(|io| one.root().read(io, 0, &mut buf)).is_err());
        bad.fail.store(false, Ordering::SeqCst);
        env.truncate(&l, 0);
        env.truncate(&one, 0);
    }
}

#[test]
fn least_loaded_spreads_idle_reads() {
    let env = Env::new(2, 64);
    let l = build(&replicate("least-loaded", vec![ext(0), ext(1)]));
    env.write(&l, 0, &pattern(1, 1)).unwrap();
    let before: Vec<u64> = env.storage.devs.iter().map(|d| d.stats.snapshot().reads).collect();
    for _ in 0..10 {
        env.read(&l, 0, 1);
    }
    for (d, b) in env.storage.devs.iter().zip(before) {
        assert_eq!(d.stats.snapshot().reads - b, 5, "ties are taken in turn");
    }
    // A write that fails on one copy goes on with the other (the copy's
    // missed range is recorded: blocks/replicate/tests.rs); on every copy it fails.
    let mem = Arc::new(MemDevice::new("w", 64 * BS as u64));
    let env = Env::with(vec![Arc::new(MemDevice::new("ok", 64 * BS as u64)), mem.clone()]);
    let l = build(&replicate("primary", vec![ext(1), ext(0)]));
    mem.fail_after_writes(0);
    env.write(&l, 0, &pattern(1, 1)).unwrap();
    assert_eq!(env.read(&l, 0, 1), pattern(1, 1));
    let one = build(&replicate("primary", vec![ext(1)]));
    assert!(env.write(&one, 0, &pattern(1, 1)).is_err());
}

// ---- Corrupt persistent state ----

fn extent_state(runs: &[(u64, u64, u64)]) -> Vec<u8> {
    let mut e = crate::codec::Encoder::new();
    e.u32(runs.len() as u32);
    for &(f, p, l) in runs {
        e.u64(f).u64(p).u64(l);
    }
    e.into_inner()
}

#[test]
fn corrupt_state_is_an_error() {
    let params = Params(BTreeMap::from([("max".into(), Value::Num(64 * KIB))]));
    let build_extent = |state: &[u8]| {
        (extent::TYPE.build)(BuildArgs {
            id: 0,
            params: &params,
            device: Some(0),
            children: vec![],
            state: Some(state),
        })
    };
    assert!(build_extent(&extent_state(&[(0, 10, 4), (4, 20, 4)])).is_ok());
    for bad in [
        extent_state(&[(0, 10, 4), (3, 20, 4)]),         // file overlap
        extent_state(&[(4, 10, 4), (0, 20, 4)]),         // out of order
        extent_state(&[(0, 10, 4), (8, 12, 4)]),         // device overlap
        extent_state(&[(0, 10, 0)]),                     // empty run
        extent_state(&[(0, 10, 17)]),                    // longer than max
        extent_state(&[(u64::MAX - 1, 10, 4)]),          // file overflow
        extent_state(&[(0, u64::MAX - 1, 4)]),           // device overflow
        vec![255, 255, 255, 255],                        // huge count
        extent_state(&[(0, 10, 4)])[..20].to_vec(),      // truncated
        [extent_state(&[(0, 10, 4)]), vec![0]].concat(), // trailing bytes
    ] {
        assert!(matches!(build_extent(&bad), Err(Error::Corrupt { .. })), "{bad:?}");
    }
    // Composite state must be empty.
    let l = build(&stripe(4 * KIB, vec![ext(0)]));
    let kids = l.root().children().to_vec();
    let p = l.root().params();
    let r = decode_node(&stripe::TYPE, 0, &p, None, kids, &[1]);
    assert!(matches!(r, Err(Error::Corrupt { .. })));
    // Bad replayed changes.
    let e = build(&ext(0));
    assert!(e.apply(&extent_map_rec(0, u64::MAX, 1, 2)).is_err());
    assert!(e.apply(&extent_map_rec(0, 0, 1, 0)).is_err());
    assert!(e.apply(&inline_rec(0, &[])).is_err());
    assert!(l.apply(&extent_truncate_rec(0, 0)).is_err());
}

/// Zeros written through any tree read back as zeros, over space another
/// file's data left behind, with the space allocated and accounted for.
#[test]
fn write_zeroes_reads_as_zeros_over_reused_space() {
    for t in [replicate("primary", vec![ext(0), ext(1)]), stripe(16 * KIB, vec![checksum(ext(0)), ext(1)]), ext(0)] {
        let env = Env::new(2, 256);
        let old = build(&t);
        env.write(&old, 0, &pattern(3, 64)).unwrap();
        env.truncate(&old, 0);
        for a in &env.storage.allocs {
            a.release(u64::MAX);
        }
        let l = build(&t);
        env.io(|io| l.root().write_zeroes(io, 2, 60)).unwrap();
        assert_eq!(env.read(&l, 0, 64), vec![0; 64 * BS], "{t:?}");
        let mut held = 0;
        l.extents(&mut |_, _, n| held += n);
        assert!(held >= 60, "{t:?}: {held} blocks allocated");
        assert_eq!(l.root().next_data(0), Some(2), "{t:?}");
        env.check_accounting(&[&l]);
    }
}

/// The fixed-width encoding that format-4 builds wrote (docs/FORMAT.md):
/// still read, never written.
fn encode_fixed_width(l: &Layout) -> Vec<u8> {
    let mut e = crate::codec::Encoder::new();
    e.u32(l.nodes.len() as u32);
    for n in &l.nodes {
        e.str(n.kind().name);
        let p = n.params();
        e.u32(p.0.len() as u32);
        for (k, v) in &p.0 {
            e.str(k);
            match v {
                Value::Num(x) => e.u8(0).u64(*x),
                Value::Word(w) => e.u8(1).str(w),
            };
        }
        e.u32(n.device().unwrap_or(u32::MAX));
        e.u32(n.children().len() as u32);
        let mut st = crate::codec::Encoder::new();
        if let Some(v) = n.kind().state_version {
            st.u8(v);
            n.encode_state(&mut st);
        }
        e.bytes(&st.buf);
    }
    e.into_inner()
}

#[test]
fn both_layout_encodings_decode_to_the_same_tree() {
    let env = Env::new(4, 4096);
    let trees = [
        stripe(1024 * KIB, vec![checksum(ext(0)), checksum(ext(1))]),
        regions(32 * KIB, vec![stripe(8 * KIB, vec![ext(0), ext(1)]), replicate("primary", vec![ext(2), ext(3)])]),
        inline(2048),
    ];
    for (i, t) in trees.iter().enumerate() {
        let l = build(t);
        let nblocks = if matches!(t.kind.as_str(), "inline") { 0 } else { 40 };
        env.write(&l, 0, &pattern(i as u64, nblocks)).unwrap();
        let (new, old) = (encode(&l), encode_fixed_width(&l));
        // The varint encoding is the one written, and it is the shorter.
        assert!(new.len() < old.len(), "{t:?}: {} vs {} bytes", new.len(), old.len());
        for b in [&new, &old] {
            let d = decode(b).unwrap();
            assert_eq!(encode(&d), new, "{t:?}");
            assert_eq!(d.spec().to_string(), l.spec().to_string());
            assert_eq!(env.read(&d, 0, nblocks), env.read(&l, 0, nblocks));
        }
    }
    // A new empty file of the default pool shape: little more than half the bytes.
    let l = build(&trees[0]);
    let (new, old) = (encode(&l).len(), encode_fixed_width(&l).len());
    eprintln!("default-shape layout: {new} bytes, {old} in the fixed-width encoding");
    assert!(new * 5 < old * 3, "{new} vs {old} bytes");
    // Strict: a parameter given twice, a device number past u32, trailing
    // bytes inside a node's state frame are refused.
    let mut e = crate::codec::Encoder::new();
    e.raw(&COMPACT_MARK).var(1).var_str("extent").var(2);
    e.var_str("max").u8(0).var(1 << 20).var_str("max").u8(0).var(1 << 20);
    e.var(1).var(0).var_bytes(&[]);
    assert!(matches!(decode(&e.buf), Err(Error::Corrupt { .. })), "{:?}", decode(&e.buf).err());
    let mut e = crate::codec::Encoder::new();
    e.raw(&COMPACT_MARK).var(1).var_str("extent").var(1).var_str("max").u8(0).var(1 << 20);
    e.var(1 << 33).var(0).var_bytes(&[]);
    assert!(matches!(decode(&e.buf), Err(Error::Corrupt { .. })), "{:?}", decode(&e.buf).err());
}

#[test]
fn mangled_layout_bytes_never_panic() {
    let env = Env::new(4, 1024);
    let l = build(&regions(
        32 * KIB,
        vec![stripe(8 * KIB, vec![ext(0), ext(1)]), replicate("primary", vec![ext(2), ext(3)])],
    ));
    env.write(&l, 0, &pattern(1, 200)).unwrap();
    let mut rng = StdRng::seed_from_u64(9);
    for bytes in [encode(&l), encode_fixed_width(&l)] {
        assert!(decode(&bytes).is_ok());
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_err(), "truncated at {n}");
        }
        for _ in 0..5000 {
            let mut b = bytes.clone();
            for _ in 0..rng.gen_range(1..4) {
                let i = rng.gen_range(0..b.len());
                b[i] = rng.gen();
            }
            // Ok or Err, never a panic; and whatever decodes must be usable.
            if let Ok(d) = decode(&b) {
                let mut buf = vec![0; 8 * BS];
                let _ = env.io(|io| d.root().read(io, 0, &mut buf));
                let _ = d.root().next_data(0);
            }
        }
    }
}

// ---- The framework: a type added by a test registry, records, checks ----

fn example_registry() -> Vec<&'static BlockType> {
    TYPES.iter().copied().chain([&example::TYPE]).collect()
}
fn memory(blocks: u64) -> Spec {
    node("memory", vec![("blocks", Value::Num(blocks))], vec![], None)
}

#[test]
fn a_type_added_by_a_test_registry_builds_records_and_replays() {
    let types = example_registry();
    let reg = Registry { types: &types };
    assert!(lookup("memory").is_none(), "the example type is not in the engine's registry");
    let s = stripe(4 * KIB, vec![memory(4), ext(0)]);
    assert!(Layout::build(&s).is_err());
    let l = Layout::build_in(&reg, &s).unwrap();
    let env = Env::new(1, 64);
    let data = pattern(9, 6);
    env.write(&l, 0, &data).unwrap();
    env.truncate(&l, 5);
    assert_eq!(env.read(&l, 0, 5), data[..5 * BS]);
    // Every record of the memory node carries the type's version byte.
    assert!(env.changes().iter().filter(|r| r.node == 1).all(|r| r.bytes[0] == 1));
    // Replayed onto an empty tree: the same contents.
    let r = Layout::build_in(&reg, &s).unwrap();
    for c in env.changes() {
        r.apply(&c).unwrap();
    }
    assert_eq!(env.read(&r, 0, 5), data[..5 * BS]);
    // Encoded and decoded with the registry that knows the type.
    let bytes = encode(&l);
    let d = Layout::decode_in(&reg, &mut crate::codec::Decoder::new(&bytes, "t")).unwrap();
    assert_eq!(env.read(&d, 0, 5), data[..5 * BS]);
    assert_eq!(encode(&d), bytes);
    let e = decode(&bytes).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("unknown block type \"memory\""), "{e}");
}

#[test]
fn the_framework_checks_arguments_before_a_constructor() {
    // `memory`'s constructor checks nothing itself.
    let types = example_registry();
    let reg = Registry { types: &types };
    let err = |s: &Spec| Layout::build_in(&reg, s).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err(&memory(0)).contains("blocks=0 must be in [1, 16]"), "{}", err(&memory(0)));
    assert!(err(&node("memory", vec![], vec![], Some(0))).contains("takes no device"));
    assert!(err(&node("memory", vec![], vec![ext(0)], None)).contains("takes no children"));
    // Decoded nodes too: parameters, state version, and the type's own
    // strict decoding of what follows the version.
    let p = Params(BTreeMap::from([("blocks".into(), Value::Num(4))]));
    let bad = Params(BTreeMap::from([("blocks".into(), Value::Num(99))]));
    let dec = |p: &Params, state: &[u8]| decode_node(&example::TYPE, 0, p, None, vec![], state).map(|_| ());
    assert!(dec(&p, &[]).is_ok());
    assert!(dec(&p, &[1, 0, 0, 0, 0]).is_ok());
    assert!(matches!(dec(&bad, &[]), Err(Error::Layout(_))));
    let e = dec(&p, &[2, 0, 0, 0, 0]).unwrap_err().to_string();
    assert!(e.contains("state version 2, this build reads version 1"), "{e}");
    assert!(matches!(dec(&p, &[1, 0, 0, 0, 0, 7]), Err(Error::Corrupt { .. })), "trailing bytes");
    // A type without state has none.
    let e = decode_node(&stripe::TYPE, 3, &Params::default(), None, vec![], &[1]).err().unwrap().to_string();
    assert!(e.contains("stripe node 3"), "{e}");
}

#[test]
fn records_are_framed_and_checked_before_a_type_applies_them() {
    let l = build(&stripe(4 * KIB, vec![ext(0), ext(1)]));
    // A record of another version, or for a stateless node, or past the tree.
    let mut v2 = extent_truncate_rec(1, 0);
    v2.bytes[0] = 2;
    let e = l.apply(&v2).unwrap_err().to_string();
    assert!(e.contains("extent node 1: record version 2, this build reads version 1"), "{e}");
    assert!(l.apply(&extent_truncate_rec(0, 0)).unwrap_err().to_string().contains("keeps no state"));
    assert!(l.apply(&extent_truncate_rec(9, 0)).is_err());
    assert!(l.apply(&NodeRecord { node: 1, bytes: vec![] }).is_err());
    // The type decodes strictly: trailing bytes, unknown changes, bad values.
    let mut trailing = extent_truncate_rec(1, 0);
    trailing.bytes.push(0);
    assert!(matches!(l.apply(&trailing), Err(Error::Corrupt { .. })));
    assert!(matches!(l.apply(&rec(1, &[9])), Err(Error::Corrupt { .. })));
    assert!(matches!(l.apply(&extent_map_rec(1, 0, 10, 1 << 40)), Err(Error::Corrupt { .. })));
    l.apply(&extent_map_rec(1, 0, 10, 2)).unwrap();
    assert_eq!(l.root().children()[0].next_data(0), Some(0));
}

// ---- Collapsed and inserted ranges ----

/// Shifts (collapse, insert) on the types that can move their mappings:
/// the data reads as the model says, replay of the records rebuilds the
/// same state, and every device block is accounted for.
#[test]
fn collapse_and_insert_move_what_follows() {
    // (spec, blocks per row: shifts must be whole rows)
    let cases = [
        (ext(0), 1u64),
        (checksum(ext_max(1, 16 * KIB)), 1),
        (stripe(8 * KIB, vec![ext(0), ext(1), ext(2)]), 6),
        (regions(16 * KIB, vec![checksum(ext(0)), ext(1)]), 8),
    ];
    for (i, (s, row)) in cases.iter().enumerate() {
        let env = Env::new(3, 2048);
        let l = build(s);
        let mut model = pattern(i as u64 + 40, 120);
        env.write(&l, 0, &model).unwrap();
        let mut rng = StdRng::seed_from_u64(i as u64);
        for step in 0..12 {
            let n = (model.len() / BS) as u64;
            let rows = rng.gen_range(1..=3u64);
            let len = rows * row;
            let from = rng.gen_range(0..n / row) * row;
            let insert = step % 2 == 1 || from + len >= n;
            let delta = if insert { len as i64 } else { -(len as i64) };
            let at = if insert { from } else { from + len };
            assert!(l.root().can_shift(at, delta), "{s:?}: shift by {delta} at {at}");
            env.io(|io| l.root().shift(io, at, delta)).unwrap();
            env.commit();
            let (f, k) = (from as usize * BS, len as usize * BS);
            if insert {
                model.splice(f..f, std::iter::repeat_n(0u8, k));
            } else {
                model.drain(f..f + k);
            }
            let got = env.read(&l, 0, model.len() / BS);
            assert!(got == model, "{s:?}: step {step} (shift by {delta} at {at})");
            // Written after the shift, the file reads right too.
            let w = pattern(step + 100, 2);
            env.write(&l, from, &w).unwrap();
            model[f..f + 2 * BS].copy_from_slice(&w);
        }
        assert!(env.read(&l, 0, model.len() / BS) == model, "{s:?}: final");
        env.check_accounting(&[&l]);
        // The records rebuild the same tree.
        let r = build(s);
        for c in env.changes() {
            r.apply(&c).unwrap();
        }
        assert_eq!(encode(&r), encode(&l), "{s:?}: replay");
        // Off-row shifts are refused before anything moves.
        if *row > 1 {
            assert!(!l.root().can_shift(row + 1, -1));
            assert!(!l.root().can_shift(*row, 1));
        }
    }
    // Types that place by content or keep copies' state refuse.
    for s in [
        replicate("primary", vec![ext(0), ext(1)]),
        node("write-mostly", vec![("unit", Value::Num(16 * KIB))], vec![ext(0), ext(1)], None),
    ] {
        assert!(!build(&s).root().can_shift(8, -4), "{s:?}");
    }
}

#[test]
fn hostile_shift_records_are_corrupt() {
    let rec = |tag: u8, from: u64, delta: i64| {
        let mut e = crate::codec::Encoder::new();
        e.u8(1).u8(tag).u64(from).u64(delta as u64);
        NodeRecord { node: 0, bytes: e.into_inner() }
    };
    let l = build(&ext(0));
    for r in [rec(4, 5, 0), rec(4, 3, -4), rec(4, u64::MAX, 1)] {
        assert!(matches!(l.apply(&r), Err(Error::Corrupt { .. })), "{:?}", r.bytes);
    }
    l.apply(&rec(4, 8, -4)).unwrap();
    let c = build(&checksum(ext(0)));
    for r in [rec(3, 5, 0), rec(3, 3, -4), rec(3, u64::MAX, 1)] {
        assert!(matches!(c.apply(&r), Err(Error::Corrupt { .. })), "{:?}", r.bytes);
    }
    c.apply(&rec(3, 8, 4)).unwrap();
}
