//! Tests of `compress`: contents against a model through writes, partial
//! overwrites, truncates and punches with compressible, random and zero
//! data; space taken; copy-on-write; damage caught (and healed under
//! `replicate`); persistent forms; hostile records and state.

use super::*;
use crate::blocks::testenv::{build, encode, pattern as random, Env};
use crate::blocks::{Layout, NodeRecord, Spec};
use rand::{rngs::StdRng, Rng, SeedableRng};

/// Writes and commits (deferred frees become free space).
fn put(env: &Env, l: &Layout, fblk: u64, data: &[u8]) {
    env.write(l, fblk, data).unwrap();
    env.commit();
}

fn spec(algo: &str, chunk: u64, child: Spec) -> Spec {
    Spec {
        kind: "compress".into(),
        params: vec![("algo".into(), Value::Word(algo.into())), ("chunk".into(), Value::Num(chunk))],
        children: vec![child],
        device: None,
    }
}

fn ext(d: u32) -> Spec {
    Spec { kind: "extent".into(), params: vec![], children: vec![], device: Some(d) }
}

/// Text-like bytes: compress well, but not to nothing.
fn text(seed: u64, nblocks: usize) -> Vec<u8> {
    let words: [&[u8]; 8] = [b"hurricane ", b"block ", b"extent ", b"stripe ", b"of ", b"the ", b"file ", b"42 "];
    let mut rng = StdRng::seed_from_u64(seed);
    let mut v = Vec::with_capacity(nblocks * BS);
    while v.len() < nblocks * BS {
        v.extend_from_slice(words[rng.gen_range(0..words.len())]);
    }
    v.truncate(nblocks * BS);
    v
}

#[test]
fn compressible_data_takes_less_space_and_reads_back() {
    for algo in ["zstd", "lz4"] {
        let env = Env::new(1, 4096);
        let l = build(&spec(algo, 64 << 10, ext(0)));
        let data = text(1, 256); // 1 MiB
        put(&env, &l, 0, &data);
        assert_eq!(env.read(&l, 0, 256), data, "{algo}");
        // 1 MiB of text: zstd keeps under a quarter, lz4 under half.
        let most = if algo == "zstd" { 64 } else { 128 };
        assert!(env.used() < most, "{algo}: 1 MiB of text took {} blocks", env.used());
        // Reads of parts of chunks, across chunk boundaries.
        assert_eq!(env.read(&l, 13, 40), data[13 * BS..53 * BS], "{algo}");
        assert_eq!(env.read(&l, 255, 1), data[255 * BS..], "{algo}");
        // Random data is stored raw: no bigger than plain.
        let rnd = random(2, 64);
        put(&env, &l, 512, &rnd);
        assert_eq!(env.read(&l, 512, 64), rnd);
        assert!(env.used() <= most + 64, "{algo}: {} blocks", env.used());
    }
    let s = stats();
    assert!(s.chunks_compressed > 0 && s.chunks_raw > 0 && s.ratio() > 1.0, "{s:?}");
}

#[test]
fn zero_chunks_take_no_space_and_holes_read_as_zeros() {
    let env = Env::new(1, 1024);
    let l = build(&spec("zstd", 16 << 10, ext(0)));
    put(&env, &l, 0, &vec![0u8; 64 * BS]);
    assert_eq!(env.used(), 0);
    assert_eq!(l.root().next_data(0), None);
    put(&env, &l, 40, &text(3, 2));
    assert_eq!(l.root().next_data(0), Some(40));
    assert_eq!(l.root().next_data(41), Some(41));
    assert_eq!(l.root().next_data(44), None);
    let got = env.read(&l, 30, 20);
    assert!(got[..10 * BS].iter().all(|&b| b == 0));
    assert_eq!(got[10 * BS..12 * BS], text(3, 2)[..]);
    // Zeroing the data drops the chunk and its space.
    put(&env, &l, 40, &vec![0u8; 2 * BS]);
    assert_eq!(env.used(), 0);
    assert_eq!(l.root().next_data(0), None);
}

/// Random writes (compressible, random and zero data, whole and partial
/// chunks), reads, truncates and punches against a byte model; then the
/// decoded and the replayed trees read the same, and no space is leaked.
fn exercise(s: &Spec, seed: u64, ops: usize) {
    const MAXB: u64 = 200;
    let env = Env::new(2, 4096);
    let l = build(s);
    let mut model = vec![0u8; MAXB as usize * BS];
    let mut rng = StdRng::seed_from_u64(seed);
    for i in 0..ops {
        match rng.gen_range(0..10) {
            0..=4 => {
                let n = if rng.gen_bool(0.3) { rng.gen_range(1..=60) } else { rng.gen_range(1..=5) };
                let f = rng.gen_range(0..=MAXB - n);
                let d = match rng.gen_range(0..4) {
                    0 => random(seed * 1000 + i as u64, n as usize),
                    1 => vec![0u8; n as usize * BS],
                    _ => text(seed * 1000 + i as u64, n as usize),
                };
                put(&env, &l, f, &d);
                model[f as usize * BS..(f + n) as usize * BS].copy_from_slice(&d);
            }
            5..=7 => {
                let n = rng.gen_range(1..=64);
                let f = rng.gen_range(0..=MAXB - n);
                assert!(
                    env.read(&l, f, n as usize) == model[f as usize * BS..(f + n) as usize * BS],
                    "{s:?}: read {f}+{n} after {i} ops"
                );
            }
            8 => {
                let n = rng.gen_range(0..MAXB);
                env.io(|io| l.root().truncate(io, n)).unwrap();
                env.commit();
                model[n as usize * BS..].fill(0);
            }
            _ => {
                let n = rng.gen_range(1..=40);
                let f = rng.gen_range(0..=MAXB - n);
                env.io(|io| l.root().punch(io, f, n)).unwrap();
                env.commit();
                model[f as usize * BS..(f + n) as usize * BS].fill(0);
            }
        }
    }
    assert!(env.read(&l, 0, MAXB as usize) == model, "{s:?}: final contents");
    let bytes = encode(&l);
    let d = Layout::decode(&mut crate::codec::Decoder::new(&bytes, "layout")).unwrap();
    assert_eq!(d.spec(), l.spec());
    assert_eq!(encode(&d), bytes);
    assert!(env.read(&d, 0, MAXB as usize) == model, "{s:?}: after decode");
    let r = build(s);
    for _ in 0..2 {
        for c in env.log.lock().iter() {
            r.apply(c).unwrap();
        }
    }
    assert_eq!(encode(&r), bytes, "{s:?}: replayed state");
    // Every used block belongs to the tree, and a truncate to 0 frees all.
    let mut owned = 0;
    l.extents(&mut |_, _, n| owned += n);
    assert_eq!(owned, env.used(), "{s:?}: blocks leaked");
    env.io(|io| l.root().truncate(io, 0)).unwrap();
    env.commit();
    assert_eq!(env.used(), 0, "{s:?}: blocks left after truncate to 0");
}

#[test]
fn random_operations_match_a_model() {
    let stripe = Spec {
        kind: "stripe".into(),
        params: vec![("unit".into(), Value::Num(8 << 10))],
        children: vec![ext(0), ext(1)],
        device: None,
    };
    let specs = [
        spec("zstd", 64 << 10, ext(0)),
        spec("lz4", 16 << 10, ext(1)),
        spec("zstd", 4 << 10, ext(0)),
        spec("lz4", 32 << 10, stripe),
    ];
    for (i, s) in specs.iter().enumerate() {
        exercise(s, i as u64 + 1, 400);
    }
}

/// The device block holding child block `cblk` of a one-extent child.
fn pblk_of(l: &Layout, cblk: u64) -> u64 {
    let mut runs = Vec::new();
    l.nodes()[1].extents(&mut |_, p, n| runs.push((p, n)));
    assert!(!runs.is_empty());
    // Only the first chunk is written in these tests: its stored blocks
    // are the extent's first run.
    runs.sort_unstable();
    runs[0].0 + cblk
}

#[test]
fn damaged_chunks_are_errors_never_data() {
    let env = Env::new(1, 1024);
    let l = build(&spec("zstd", 64 << 10, ext(0)));
    let data = text(9, 16);
    put(&env, &l, 0, &data);
    let p = pblk_of(&l, 0);
    env.storage.devs[0].dev().write_at(&[0x5A; 64], p * BS as u64 + 10).unwrap();
    for (f, n) in [(0, 16), (3, 2), (15, 1)] {
        let err = env.try_read(&l, f, n).unwrap_err();
        assert!(matches!(err, Error::Checksum(_)), "{err}");
        assert!(err.to_string().contains("chunk 0"), "{err}");
    }
    // Rewriting the chunk makes it good again.
    put(&env, &l, 0, &data);
    assert_eq!(env.read(&l, 0, 16), data);
}

#[test]
fn replicate_heals_a_damaged_compressed_copy() {
    let env = Env::new(2, 1024);
    let s = Spec {
        kind: "replicate".into(),
        params: vec![("read".into(), Value::Word("primary".into()))],
        children: vec![spec("lz4", 64 << 10, ext(0)), spec("lz4", 64 << 10, ext(1))],
        device: None,
    };
    let l = build(&s);
    let data = text(4, 16);
    put(&env, &l, 0, &data);
    // The primary copy's stored bytes are damaged.
    let mut runs = Vec::new();
    l.nodes()[2].extents(&mut |_, p, n| runs.push((p, n)));
    env.storage.devs[0].dev().write_at(&[7u8; 32], runs[0].0 * BS as u64).unwrap();
    assert_eq!(env.read(&l, 0, 16), data);
    // Healed: the primary alone reads it again.
    let mut buf = vec![0u8; 16 * BS];
    env.io(|io| l.nodes()[1].read(io, 0, &mut buf)).unwrap();
    assert_eq!(buf, data);
}

#[test]
fn overwrites_go_to_fresh_space_until_the_batch_commits() {
    let env = Env::new(1, 1024);
    let l = build(&spec("zstd", 64 << 10, ext(0)));
    put(&env, &l, 0, &text(1, 16));
    let old = pblk_of(&l, 0);
    let mut was = vec![0u8; BS];
    env.storage.devs[0].dev().read_at(&mut was, old * BS as u64).unwrap();
    let free = env.storage.allocs[0].free_blocks();
    // A partial overwrite, not committed yet.
    let part = text(2, 1);
    env.io(|io| l.root().write(io, 5, &part)).unwrap();
    let mut runs = Vec::new();
    l.extents(&mut |_, p, n| runs.push((p, n)));
    assert!(runs.iter().all(|&(p, n)| !(p..p + n).contains(&old)), "chunk still at {old}: {runs:?}");
    let mut still = vec![0u8; BS];
    env.storage.devs[0].dev().read_at(&mut still, old * BS as u64).unwrap();
    assert_eq!(still, was, "the old stored bytes were overwritten before the commit");
    assert!(env.storage.allocs[0].free_blocks() < free);
    let mut want = text(1, 16);
    want[5 * BS..6 * BS].copy_from_slice(&part);
    assert_eq!(env.read(&l, 0, 16), want);
}

#[test]
fn hostile_records_and_state_are_corrupt() {
    let l = build(&spec("zstd", 16 << 10, ext(0)));
    let rec = |f: &dyn Fn(&mut Encoder)| {
        let mut e = Encoder::new();
        e.u8(1);
        f(&mut e);
        NodeRecord { node: 0, bytes: e.into_inner() }
    };
    let set = |idx: u64, len: u32, m: u8, crc: u32| {
        rec(&move |e: &mut Encoder| {
            e.u8(1).u64(idx).u32(len).u8(m).u32(crc);
        })
    };
    let bad = [
        set(0, 0, 2, 1),              // empty
        set(0, 16 << 10, 2, 1),       // compressed but a whole chunk
        set(0, 100, 0, 0),            // raw but not whole
        set(0, 16 << 10, 0, 5),       // raw with a crc
        set(0, 100, 9, 1),            // unknown method
        set(u64::MAX / 4, 100, 2, 1), // past the largest file
        rec(&|e: &mut Encoder| {
            e.u8(2).u64(5).u64(5);
        }), // empty drop
        rec(&|e: &mut Encoder| {
            e.u8(3);
        }), // unknown change
        rec(&|e: &mut Encoder| {
            e.u8(1).u64(0);
        }), // truncated
    ];
    for r in &bad {
        assert!(matches!(l.apply(r), Err(Error::Corrupt { .. })), "{:?}", r.bytes);
    }
    let mut trailing = set(0, 100, 2, 1);
    trailing.bytes.push(0);
    assert!(matches!(l.apply(&trailing), Err(Error::Corrupt { .. })));
    l.apply(&set(3, 100, 1, 1)).unwrap();
    l.apply(&set(4, 16 << 10, 0, 0)).unwrap();

    let g = Geometry { id: 0, cblocks: 4 };
    let state = |entries: &[(u64, u32, u8, u32)]| {
        let mut e = Encoder::new();
        e.u32(entries.len() as u32);
        for &(i, len, m, crc) in entries {
            e.u64(i).u32(len).u8(m).u32(crc);
        }
        e.into_inner()
    };
    assert!(g.decode_state(&state(&[(1, 100, 2, 0), (3, 16 << 10, 0, 0)])).is_ok());
    for s in [
        state(&[(3, 100, 2, 0), (1, 100, 2, 0)]),
        state(&[(3, 100, 2, 0), (3, 100, 2, 0)]),
        state(&[(3, 0, 2, 0)]),
        state(&[(3, 100, 7, 0)]),
        [state(&[(3, 100, 2, 0)]), vec![1]].concat(),
        {
            let mut e = Encoder::new();
            e.u32(1_000_000);
            e.into_inner()
        },
    ] {
        assert!(matches!(g.decode_state(&s), Err(Error::Corrupt { .. })), "{s:?}");
    }
}

#[test]
fn bad_parameters_are_refused() {
    let with = |params: Vec<(&str, Value)>| Spec {
        kind: "compress".into(),
        params: params.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        children: vec![ext(0)],
        device: None,
    };
    for p in [
        vec![("chunk", Value::Num(6000))],
        vec![("chunk", Value::Num(2 << 20))],
        vec![("algo", Value::Word("gzip".into()))],
        vec![("level", Value::Num(0))],
        vec![("level", Value::Num(23))],
    ] {
        assert!(matches!(Layout::build(&with(p.clone())), Err(Error::Layout(_))), "{p:?}");
    }
    let no_child = Spec { kind: "compress".into(), params: vec![], children: vec![], device: None };
    assert!(Layout::build(&no_child).is_err());
    let l = build(&with(vec![("algo", Value::Word("lz4".into())), ("level", Value::Num(9))]));
    assert_eq!(l.spec().to_string(), "compress(algo=lz4,level=9)[extent@0]");
}

/// A request served on a thread pinned to one CPU (a mount's queue thread)
/// still compresses its chunks on every CPU the process has: the thread's
/// own affinity is not the process's.
#[test]
fn chunks_are_spread_over_the_process_cpus_from_a_pinned_thread() {
    use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};
    let wide = sched_getaffinity(None).unwrap();
    let first = (0..CpuSet::MAX_CPU).find(|&c| wide.is_set(c)).unwrap();
    crate::affinity::remember();
    if crate::affinity::cpus() < 2 {
        eprintln!("one CPU: nothing to spread over");
        return;
    }
    let threads = std::thread::scope(|s| {
        s.spawn(|| {
            let mut one = CpuSet::new();
            one.set(first);
            sched_setaffinity(None, &one).unwrap();
            assert_eq!(std::thread::available_parallelism().unwrap().get(), 1);
            let mut items: Vec<Option<std::thread::ThreadId>> = vec![None; 8];
            par_each(&mut items, &|t| *t = Some(std::thread::current().id()));
            items.into_iter().map(Option::unwrap).collect::<std::collections::HashSet<_>>().len()
        })
        .join()
        .unwrap()
    });
    assert!(threads >= 2, "8 chunks went to {threads} thread(s)");
}
