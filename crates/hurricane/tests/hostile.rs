//! Hostile input at the engine level: names, paths, xattrs, hard links and
//! layouts at and past every limit; a device filled to its last block;
//! images truncated or overwritten with garbage while closed; and the fuzz
//! targets' corpora replayed (with mutations) on the stable toolchain.
//! Every case must give a clear error, never a panic, and leave the pool
//! fsck-clean with everything committed before still there.

mod common;
use common::*;
use hurricane::device::{CrashMode, Device, MemDevice, BLOCK_SIZE};
use hurricane::fsck;
use hurricane::{Creds, Error, FormatOptions, Fs, Options};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[path = "../../../fuzz/targets.rs"]
#[allow(dead_code)]
mod fuzz_targets;

fn fsck_clean(fs: &Fs, what: &str) {
    let r = fsck::check(fs, false, &mut |_, _, _| {}).unwrap_or_else(|e| panic!("{what}: fsck failed to run: {e}"));
    assert!(r.is_clean(), "{what}: fsck: {:?}", r.remaining);
    assert!(fs.report().double_claims.is_empty(), "{what}: {:?}", fs.report().double_claims);
}

fn images(p: &MemPool) -> Vec<Vec<u8>> {
    p.devs.iter().map(|d| d.crash_image(CrashMode::KeepAll)).collect()
}

fn devs_from(imgs: &[Vec<u8>]) -> Vec<Arc<dyn Device>> {
    imgs.iter().enumerate().map(|(i, img)| Arc::new(MemDevice::from_image(format!("mem{i}"), img.clone())) as Arc<dyn Device>).collect()
}

// ---------------------------------------------------------------- fuzz corpora

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
}

/// Small deterministic mutations of a seed: bit flips, truncations, bytes
/// overwritten with extremes, a length field blown up.
fn mutations(seed: &[u8], n: usize, salt: u64) -> Vec<Vec<u8>> {
    let mut x = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut out = Vec::new();
    for _ in 0..n {
        let mut m = seed.to_vec();
        match next() % 5 {
            0 if !m.is_empty() => {
                let i = (next() as usize) % m.len();
                m[i] ^= 1 << (next() % 8);
            }
            1 => m.truncate((next() as usize) % (seed.len() + 1)),
            2 if !m.is_empty() => {
                let i = (next() as usize) % m.len();
                m[i] = [0, 0xff, 0x7f, 0x80][(next() % 4) as usize];
            }
            3 if m.len() >= 4 => {
                let i = (next() as usize) % (m.len() - 3);
                m[i..i + 4].copy_from_slice(&u32::MAX.to_le_bytes());
            }
            _ => {
                let i = (next() as usize) % (m.len() + 1);
                m.insert(i, next() as u8);
            }
        }
        out.push(m);
    }
    out
}

/// Every corpus file of every target, and mutations of each, through the
/// same functions the fuzzers run: CI checks the decoders without nightly.
#[test]
fn fuzz_corpus_replay() {
    let mut files = 0;
    for (name, target) in fuzz_targets::TARGETS {
        let dir = corpus_dir().join(name);
        let mut seeds: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .map(|p| {
                let b = std::fs::read(&p).unwrap();
                (p, b)
            })
            .collect();
        seeds.sort();
        assert!(!seeds.is_empty(), "no corpus for {name}");
        for (i, (path, seed)) in seeds.iter().enumerate() {
            target(seed);
            for (k, m) in mutations(seed, 40, i as u64 + 1).into_iter().enumerate() {
                if std::env::var_os("HOSTILE_TRACE").is_some() {
                    eprintln!("{name} {} #{k}: {m:?}", path.display());
                }
                let r = std::panic::catch_unwind(|| target(&m));
                assert!(r.is_ok(), "{name}: mutation of {} panicked; input {:?}", path.display(), m);
            }
            files += 1;
        }
        for extreme in [&[][..], &[0u8; 64][..], &[0xffu8; 4096][..]] {
            target(extreme);
        }
    }
    assert!(files >= 7 * 3, "{files} corpus files");
}

/// Writes the seed corpora from real structures of a populated pool:
/// `cargo test -p hurricane --test hostile -- --ignored generate_fuzz_corpus`.
#[test]
#[ignore]
fn generate_fuzz_corpus() {
    use hurricane::blocks::{IoCtx, Layout, MapChange};
    use hurricane::codec::{Decoder, Encoder};
    use hurricane::journal;
    use hurricane::namespace::{Body, InodeData};
    use hurricane::pool::Superblock;

    let p = MemPool::with(3, 16 * MB, &FormatOptions { journal_size: Some(1 << 20), ..Default::default() });
    let fs = p.open().unwrap();
    fs.mkdir_all("/a/b", 0o750).unwrap();
    fs.write_file("/a/ext", &pattern(1, 50_000), Some("extent@1")).unwrap();
    fs.write_file("/a/b/str", &pattern(2, 90_000), Some("stripe(unit=16K,width=3)")).unwrap();
    fs.write_file("/reg", &pattern(3, 70_000), Some("regions(size=32K,width=2)")).unwrap();
    fs.write_file("/rep", &pattern(4, 20_000), Some("replicate(copies=2)[extent@0,extent@2]")).unwrap();
    fs.write_file("/inl", b"small inline data", Some("inline")).unwrap();
    fs.write_file("/nest", &pattern(5, 40_000), Some("replicate[stripe(unit=8K,width=2),extent@2]")).unwrap();
    fs.sync().unwrap();
    fs.hard_link("/a/ext", "/a/b/link").unwrap();
    fs.symlink_path("../reg", "/a/sym").unwrap();
    let ino = fs.resolve("/rep").unwrap();
    fs.setxattr(&Creds::root(), ino, b"user.note", b"hello", 0).unwrap();
    fs.sync().unwrap();
    fs.rename_path("/reg", "/a/reg2").unwrap();
    fs.open_with("/a/b/str", hurricane::OpenOptions::new().write(true)).unwrap().set_len(10_000).unwrap();
    fs.remove("/nest").unwrap();
    fs.dir_layout_set(&Creds::root(), fs.resolve("/a").unwrap(), "stripe(unit=64K,width=2)").unwrap();
    fs.sync().unwrap();

    let out = corpus_dir();
    let put = |target: &str, name: &str, data: &[u8]| {
        let d = out.join(target);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(format!("seed-{name}")), data).unwrap();
    };

    // Journal records, as a crash now would leave them.
    let crashed = p.crash(CrashMode::DropAll);
    let img0 = crashed.devs[0].crash_image(CrashMode::KeepAll);
    let sb = Superblock::decode(&img0[..BLOCK_SIZE], "d0").unwrap().into_iter().chain(Superblock::decode(&img0[BLOCK_SIZE..2 * BLOCK_SIZE], "d0").unwrap()).max_by_key(|s| s.generation).unwrap();
    put("superblock", "dev0-slot0", &img0[..BLOCK_SIZE]);
    put("superblock", "dev0-slot1", &img0[BLOCK_SIZE..2 * BLOCK_SIZE]);
    let img2 = crashed.devs[2].crash_image(CrashMode::KeepAll);
    put("superblock", "dev2", &img2[..BLOCK_SIZE]);
    let salt = u64::from_le_bytes(sb.pool_id[..8].try_into().unwrap()) ^ u64::from_le_bytes(sb.pool_id[8..].try_into().unwrap());
    let cfs = Fs::open(crashed.devs.iter().map(|d| d.clone() as Arc<dyn Device>).collect(), Options { read_only: true, ..quiet() }).unwrap();
    let (records, _) = journal::replay(cfs.storage(), &sb.journal, salt, sb.cursor).unwrap();
    assert!(records.len() >= 3, "{} records", records.len());
    let mut replay_seed = vec![0u8];
    for (i, r) in records.iter().enumerate() {
        put("journal_payload", &format!("record{i}"), r);
        if r.len() < 65_536 {
            replay_seed.extend_from_slice(&(r.len() as u16).to_le_bytes());
            replay_seed.extend_from_slice(r);
        }
    }
    put("journal_replay", "records", &replay_seed);
    // The same records with a torn second block and a flipped payload byte.
    let mut torn = vec![2u8, 0x10, 0x00, 3, 0xff, 0x30, 0x00, 4, 0x01];
    torn.extend_from_slice(&replay_seed[1..]);
    put("journal_replay", "records-corrupt", &torn);
    drop(cfs);

    // The checkpoint, its inode records and block records, after a clean close.
    fs.close().unwrap();
    let img0 = p.devs[0].crash_image(CrashMode::KeepAll);
    let sb = [0, 1].iter().filter_map(|s| Superblock::decode(&img0[s * BLOCK_SIZE..(s + 1) * BLOCK_SIZE], "d0").unwrap()).max_by_key(|s| s.generation).unwrap();
    let meta = Layout::decode(&mut Decoder::new(&sb.meta_layout, "meta")).unwrap();
    put("layout_decode", "meta-file", &sb.meta_layout);
    let rfs = Fs::open(p.devs.iter().map(|d| d.clone() as Arc<dyn Device>).collect(), Options { read_only: true, ..quiet() }).unwrap();
    let sink = |_: MapChange| {};
    let io = IoCtx { storage: rfs.storage(), epoch: 0, sink: &sink };
    let mut buf = vec![0u8; (sb.meta_len as usize).div_ceil(BLOCK_SIZE) * BLOCK_SIZE];
    meta.root().read(&io, 0, &mut buf).unwrap();
    buf.truncate(sb.meta_len as usize);
    put("checkpoint", "pool", &buf);
    let mut d = Decoder::new(&buf, "ckpt");
    d.u64().unwrap();
    d.u32().unwrap();
    d.u64().unwrap();
    let n = d.u64().unwrap();
    for _ in 0..n {
        let ino = d.u64().unwrap();
        let rec = d.bytes().unwrap();
        put("inode", &format!("ino{ino}"), rec);
        if let Body::File(l) = InodeData::decode(&mut Decoder::new(rec, "inode")).unwrap().body {
            let mut e = Encoder::new();
            l.encode(&mut e);
            put("layout_decode", &format!("ino{ino}"), &e.buf);
        }
    }
    for (i, s) in [
        "extent@3",
        "stripe(unit=64K)[extent@0,extent@1,extent@2]",
        "stripe(unit=64K,width=7)",
        "regions(size=16M,width=7)",
        "replicate(copies=2,read=least-loaded)[stripe(width=3),stripe(width=3)]",
        "replicate[stripe(unit=8K,width=2),extent@2]",
        "stripe(unit=8K)[replicate[extent@0,extent@1],replicate[extent@1,extent@2]]",
        "inline(max=4K)",
        "extent(max=1M)",
        " stripe ( unit = 1M , width = 2 ) ",
    ]
    .iter()
    .enumerate()
    {
        put("layout_spec", &format!("spec{i}"), s.as_bytes());
    }
}
