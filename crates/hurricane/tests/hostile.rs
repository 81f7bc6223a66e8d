//! Hostile input at the engine level: names, paths, xattrs, hard links and
//! layouts at and past every limit; a device filled to its last block;
//! images truncated or overwritten with garbage while closed; and the fuzz
//! targets' corpora replayed (with mutations) on the stable toolchain.
//! Every case must give a clear error, never a panic, and leave the pool
//! fsck-clean with everything committed before still there.

// A test crate: a panic is how a test fails, so unwrap and expect are fine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use hurricane::device::{CrashMode, Device, MemDevice, BLOCK_SIZE};
use hurricane::fsck;
use hurricane::{Creds, FormatOptions, Fs, Options};
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

fn devs_owned(imgs: Vec<Vec<u8>>) -> Vec<Arc<dyn Device>> {
    imgs.into_iter()
        .enumerate()
        .map(|(i, img)| Arc::new(MemDevice::from_image(format!("mem{i}"), img)) as Arc<dyn Device>)
        .collect()
}

fn devs_from(imgs: &[Vec<u8>]) -> Vec<Arc<dyn Device>> {
    imgs.iter()
        .enumerate()
        .map(|(i, img)| Arc::new(MemDevice::from_image(format!("mem{i}"), img.clone())) as Arc<dyn Device>)
        .collect()
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

/// The layout seeds are layouts (so their mutations reach past the first
/// check): each decodes, every block type among them included.
#[test]
fn layout_seeds_decode() {
    let dir = corpus_dir().join("layout_decode");
    let mut kinds = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let b = std::fs::read(&p).unwrap();
        let l = hurricane::blocks::Layout::decode(&mut hurricane::codec::Decoder::new(&b, "seed"))
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        for n in l.nodes() {
            kinds.insert(n.kind().name);
        }
    }
    for k in ["compress", "extent", "checksum", "write-mostly", "log", "colocate"] {
        assert!(kinds.contains(k), "no seed has a {k} node: {kinds:?}");
    }
}

/// The `log_summary` seeds are summaries the decoder takes (so mutations
/// of them reach every check), but for the header cut short.
#[test]
fn log_summary_seeds_decode() {
    let dir = corpus_dir().join("log_summary");
    for (name, whole) in [("seed-then", true), ("seed-last-run", true), ("seed-header", false)] {
        let b = std::fs::read(dir.join(name)).unwrap();
        assert_eq!(hurricane::blocks::log::Summary::decode(&b).is_some(), whole, "{name}");
    }
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
    assert!(files >= fuzz_targets::TARGETS.len() * 3, "{files} corpus files");
    // Every cargo-fuzz binary is replayed here.
    let bins = std::fs::read_dir(corpus_dir().join("../fuzz_targets")).unwrap();
    for b in bins {
        let p = b.unwrap().path();
        let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
        assert!(fuzz_targets::TARGETS.iter().any(|(n, _)| *n == stem), "fuzz target {stem} is not replayed");
    }
}

/// Writes the seed corpora from real structures of a populated pool:
/// `cargo test -p hurricane --test hostile -- --ignored generate_fuzz_corpus`.
#[test]
#[ignore]
fn generate_fuzz_corpus() {
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
    // A transaction on a checksummed file: a verified record, with its
    // `Verify` ops.
    let ext = fs.open_with("/a/ext", hurricane::OpenOptions::new().read(true).write(true)).unwrap();
    fs.setxattr(&Creds::root(), ext.ino(), hurricane::xattr::TXN.as_bytes(), b"1", 0).unwrap();
    let t = fs.begin().unwrap();
    t.write(&ext, 100, b"committed together").unwrap();
    t.commit().unwrap();
    drop(ext);
    fs.remove("/nest").unwrap();
    fs.dir_layout_set(&Creds::root(), fs.resolve("/a").unwrap(), "stripe(unit=64K,width=2)").unwrap();
    // A log file: its batches record where the head of plain writes stood.
    fs.write_file("/log", &pattern(6, 30_000), Some("log@1")).unwrap();
    fs.sync().unwrap();
    fs.write(fs.resolve("/log").unwrap(), 8192, &pattern(7, 4096)).unwrap();
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
    let sb = Superblock::decode(&img0[..BLOCK_SIZE], "d0")
        .unwrap()
        .into_iter()
        .chain(Superblock::decode(&img0[BLOCK_SIZE..2 * BLOCK_SIZE], "d0").unwrap())
        .max_by_key(|s| s.generation)
        .unwrap();
    put("superblock", "dev0-slot0", &img0[..BLOCK_SIZE]);
    put("superblock", "dev0-slot1", &img0[BLOCK_SIZE..2 * BLOCK_SIZE]);
    let img2 = crashed.devs[2].crash_image(CrashMode::KeepAll);
    put("superblock", "dev2", &img2[..BLOCK_SIZE]);
    let salt = u64::from_le_bytes(sb.pool_id[..8].try_into().unwrap())
        ^ u64::from_le_bytes(sb.pool_id[8..].try_into().unwrap());
    let cfs = Fs::open(
        crashed.devs.iter().map(|d| d.clone() as Arc<dyn Device>).collect(),
        Options { read_only: true, ..quiet() },
    )
    .unwrap();
    let copies = journal::Copies { regions: sb.journals(), salt, epoch: 0 };
    let records = journal::replay(cfs.storage(), &copies, sb.cursor, 0).unwrap().records;
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

    // The meta-file's tree and the store's inode records (with the layouts
    // of the files), after a clean close.
    fs.close().unwrap();
    let img0 = p.devs[0].crash_image(CrashMode::KeepAll);
    let sb = [0, 1]
        .iter()
        .filter_map(|s| Superblock::decode(&img0[s * BLOCK_SIZE..(s + 1) * BLOCK_SIZE], "d0").unwrap())
        .max_by_key(|s| s.generation)
        .unwrap();
    put("layout_decode", "meta-file", &sb.meta_layout);
    let store = fuzz_targets::open_image(&meta_image(&p)).unwrap();
    for ino in store.inos().unwrap() {
        let rec = store.inode(ino).unwrap().expect("a listed inode has a record");
        put("inode", &format!("ino{ino}"), &rec);
        if let Body::File(l) = InodeData::decode(&mut Decoder::new(&rec, "inode")).unwrap().body {
            let mut e = Encoder::new();
            l.get().unwrap().encode(&mut e);
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

// ---------------------------------------------------------------- names, paths, xattrs, links

fn errno<T: std::fmt::Debug>(r: hurricane::Result<T>) -> i32 {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => {
            // Every error explains itself.
            assert!(!e.to_string().is_empty());
            e.errno()
        }
    }
}

#[test]
fn xattr_names_and_values_at_and_past_the_limits() {
    let p = MemPool::new(3, 16 * MB);
    let fs = p.open().unwrap();
    let root = Creds::root();
    fs.write_file("/f", b"data", None).unwrap();
    let ino = fs.resolve("/f").unwrap();
    let name = |n: usize| {
        let mut v = b"user.".to_vec();
        v.resize(n, b'x');
        v
    };
    // Names: 255 bytes is the most; 256 and more are refused with ERANGE, empty with EINVAL.
    fs.setxattr(&root, ino, &name(255), b"v", 0).unwrap();
    assert_eq!(errno(fs.setxattr(&root, ino, &name(256), b"v", 0)), libc::ERANGE);
    assert_eq!(errno(fs.setxattr(&root, ino, &name(1 << 20), b"v", 0)), libc::ERANGE);
    assert_eq!(errno(fs.setxattr(&root, ino, b"", b"v", 0)), libc::EINVAL);
    // Unknown namespaces and system names other than the POSIX ACLs are
    // not supported; an ACL value that does not decode is refused.
    assert_eq!(errno(fs.setxattr(&root, ino, b"bogus.name", b"v", 0)), libc::EOPNOTSUPP);
    assert_eq!(errno(fs.setxattr(&root, ino, b"system.bogus", b"v", 0)), libc::EOPNOTSUPP);
    assert_eq!(errno(fs.setxattr(&root, ino, b"system.hurricane.flags", b"\x10\0\0\0", 0)), libc::EOPNOTSUPP);
    assert_eq!(errno(fs.setxattr(&root, ino, b"system.posix_acl_access", b"v", 0)), libc::EINVAL);
    let mut many = 2u32.to_le_bytes().to_vec();
    many.resize(65_532, 0);
    assert_eq!(errno(fs.setxattr(&root, ino, b"system.posix_acl_access", &many, 0)), libc::EINVAL);
    assert_eq!(errno(fs.getxattr(&root, ino, b"system.posix_acl_access")), libc::ENODATA);
    // Binary bytes in a name are stored as given (the kernel never sends NUL).
    fs.setxattr(&root, ino, b"user.\xff\x01", b"bin", 0).unwrap();
    // Values: 64 KiB is the most; one byte more is refused (the engine says
    // EFBIG; through the mount the kernel refuses first with E2BIG).
    fs.setxattr(&root, ino, b"user.big", &vec![7u8; 65_536], 0).unwrap();
    assert_eq!(errno(fs.setxattr(&root, ino, b"user.big2", &vec![7u8; 65_537], 0)), libc::EFBIG);
    assert_eq!(errno(fs.setxattr(&root, ino, b"user.huge", &vec![7u8; 16 << 20], 0)), libc::EFBIG);
    // Total per inode: 1 MiB; the attribute that would pass it is refused with ENOSPC.
    let mut n = 0;
    let err = loop {
        match fs.setxattr(&root, ino, format!("user.fill{n}").as_bytes(), &vec![n as u8; 65_536], 0) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 64, "no total limit");
    };
    assert_eq!(err.errno(), libc::ENOSPC, "{err}");
    assert!(err.to_string().contains("limit"), "{err}");
    // Flags: XATTR_CREATE on an existing name, XATTR_REPLACE on a missing one.
    assert_eq!(errno(fs.setxattr(&root, ino, b"user.big", b"x", 1)), libc::EEXIST);
    assert_eq!(errno(fs.setxattr(&root, ino, b"user.nope", b"x", 2)), libc::ENODATA);
    assert_eq!(errno(fs.getxattr(&root, ino, b"user.nope")), libc::ENODATA);
    assert_eq!(errno(fs.removexattr(&root, ino, b"user.nope")), libc::ENODATA);
    fs.sync().unwrap();
    let want: Vec<Vec<u8>> = fs.listxattr(&root, ino).unwrap();
    // All of it (over 1 MiB of attributes on one inode) survives a power cut.
    let c = p.crash(CrashMode::DropAll);
    let cfs = c.open().unwrap();
    let cino = cfs.resolve("/f").unwrap();
    assert_eq!(cfs.listxattr(&root, cino).unwrap(), want);
    assert_eq!(cfs.getxattr(&root, cino, b"user.big").unwrap(), vec![7u8; 65_536]);
    assert_eq!(cfs.getxattr(&root, cino, &name(255)).unwrap(), b"v");
    fsck_clean(&cfs, "after xattrs");
}

/// A 64 KiB attribute is larger than a small journal: the commit becomes a
/// checkpoint instead, and nothing is lost.
#[test]
fn xattr_larger_than_the_journal() {
    let p = MemPool::with(2, 8 * MB, &FormatOptions { journal_size: Some(64 << 10), ..Default::default() });
    let fs = p.open().unwrap();
    let root = Creds::root();
    fs.write_file("/f", b"data", None).unwrap();
    let ino = fs.resolve("/f").unwrap();
    for i in 0..6u8 {
        fs.setxattr(&root, ino, format!("user.v{i}").as_bytes(), &vec![i; 65_536], 0).unwrap();
        fs.sync().unwrap();
    }
    assert!(fs.commit_counts().1 >= 6, "each commit was a checkpoint");
    let cfs = p.crash(CrashMode::DropAll).open().unwrap();
    let cino = cfs.resolve("/f").unwrap();
    for i in 0..6u8 {
        assert_eq!(cfs.getxattr(&root, cino, format!("user.v{i}").as_bytes()).unwrap(), vec![i; 65_536]);
    }
    fsck_clean(&cfs, "big xattrs");
}

#[test]
fn names_at_and_past_name_max() {
    let p = MemPool::new(2, 16 * MB);
    let fs = p.open().unwrap();
    let root = Creds::root();
    let r = hurricane::namespace::ROOT;
    let ok = vec![b'n'; 255];
    let long = vec![b'n'; 256];
    fs.mknod(&root, r, &ok, libc::S_IFREG | 0o644, 0, None, None).unwrap();
    fs.mkdir(&root, r, &[b'd'; 255], 0o755).unwrap();
    fs.symlink(&root, r, &[b's'; 255], b"target").unwrap();
    assert_eq!(errno(fs.mknod(&root, r, &long, libc::S_IFREG | 0o644, 0, None, None)), libc::ENAMETOOLONG);
    assert_eq!(errno(fs.mkdir(&root, r, &long, 0o755)), libc::ENAMETOOLONG);
    assert_eq!(errno(fs.symlink(&root, r, &long, b"t")), libc::ENAMETOOLONG);
    let f = fs.lookup(&root, r, &ok).unwrap().ino;
    assert_eq!(errno(fs.link(&root, f, r, &long)), libc::ENAMETOOLONG);
    assert_eq!(errno(fs.rename(&root, r, &ok, r, &long, Default::default())), libc::ENAMETOOLONG);
    assert_eq!(errno(fs.lookup(&root, r, &long)), libc::ENAMETOOLONG);
    assert_eq!(errno(fs.unlink(&root, r, &vec![b'n'; 100_000])), libc::ENAMETOOLONG);
    // Names that are not names.
    for bad in [&b""[..], b".", b"..", b"a/b", b"a\0b"] {
        assert!(fs.mknod(&root, r, bad, libc::S_IFREG | 0o644, 0, None, None).is_err(), "{bad:?}");
    }
    assert_eq!(errno(fs.mknod(&root, r, b"a/b", libc::S_IFREG | 0o644, 0, None, None)), libc::EINVAL);
    // Symlink targets: empty and past 4095 bytes are refused.
    assert!(fs.symlink(&root, r, b"e", b"").is_err());
    assert_eq!(errno(fs.symlink(&root, r, b"l", &vec![b't'; 4096])), libc::ENAMETOOLONG);
    fs.symlink(&root, r, b"l", &vec![b't'; 4095]).unwrap();
    fs.sync().unwrap();
    let cfs = p.crash(CrashMode::DropAll).open().unwrap();
    assert_eq!(cfs.read_dir("/").unwrap().len(), 4);
    assert!(cfs.lookup(&root, r, &ok).is_ok());
    fsck_clean(&cfs, "names");
}

#[test]
fn very_deep_paths() {
    let p = MemPool::new(2, 32 * MB);
    let fs = p.open().unwrap();
    let root = Creds::root();
    // 500 levels through the path API (a path of 1,500 bytes).
    let deep = "/d0".to_string() + &(1..500).map(|i| format!("/{}", i % 10)).collect::<String>();
    let ino = fs.mkdir_all(&deep, 0o755).unwrap();
    fs.write_file(&format!("{deep}/leaf"), b"bottom", None).unwrap();
    assert_eq!(fs.read_file(&format!("{deep}/leaf")).unwrap(), b"bottom");
    // 3,000 levels through the inode API: deeper than any path can name.
    let mut cur = ino;
    for i in 0..3000 {
        cur = fs.mkdir(&root, cur, format!("level{i}").as_bytes(), 0o755).unwrap().ino;
    }
    fs.mknod(&root, cur, b"bottom", libc::S_IFREG | 0o644, 0, None, None).unwrap();
    let long = deep.clone() + &(0..3000).map(|i| format!("/level{i}")).collect::<String>();
    assert!(long.len() > 4096);
    assert_eq!(errno(fs.resolve(&long)), libc::ENAMETOOLONG);
    assert_eq!(errno(fs.mkdir_all(&long, 0o755)), libc::ENAMETOOLONG);
    assert_eq!(errno(fs.write_file(&format!("{long}/x"), b"x", None)), libc::ENAMETOOLONG);
    // Moving the top under its own bottom is refused (a 3,500-level walk).
    let top = fs.resolve("/d0").unwrap();
    assert_eq!(
        errno(fs.rename(&root, hurricane::namespace::ROOT, b"d0", cur, b"loop", Default::default())),
        libc::EINVAL
    );
    fs.sync().unwrap();
    // Recovery and fsck handle the depth (no recursion limits hit).
    let cfs = p.crash(CrashMode::DropAll).open().unwrap();
    assert_eq!(cfs.read_file(&format!("{deep}/leaf")).unwrap(), b"bottom");
    assert_eq!(cfs.getattr(top).unwrap().ino, top);
    fsck_clean(&cfs, "deep tree");
    cfs.checkpoint().unwrap();
    cfs.close().unwrap();
}

#[test]
fn hard_links_up_to_link_max() {
    let p = MemPool::new(2, 64 * MB);
    let fs = p.open().unwrap();
    let root = Creds::root();
    fs.write_file("/target", b"linked", None).unwrap();
    fs.mkdir_path("/links", 0o755).unwrap();
    let ino = fs.resolve("/target").unwrap();
    let dir = fs.resolve("/links").unwrap();
    let max = 65_000; // the engine's LINK_MAX
    for i in 1..max {
        fs.link(&root, ino, dir, format!("l{i}").as_bytes()).unwrap();
    }
    assert_eq!(fs.getattr(ino).unwrap().nlink, max);
    let e = fs.link(&root, ino, dir, b"one-too-many").unwrap_err();
    assert_eq!(e.errno(), libc::EMLINK, "{e}");
    fs.sync().unwrap();
    let cfs = p.crash(CrashMode::DropAll).open().unwrap();
    assert_eq!(cfs.stat("/target").unwrap().nlink, max);
    assert_eq!(cfs.read_file("/links/l64999").unwrap(), b"linked");
    fsck_clean(&cfs, "LINK_MAX links");
    // Removing one makes room for one.
    cfs.remove("/links/l1").unwrap();
    cfs.hard_link("/target", "/links/again").unwrap();
    assert_eq!(errno(cfs.hard_link("/target", "/links/more")), libc::EMLINK);
}

// ---------------------------------------------------------------- layouts

#[test]
fn layouts_with_extreme_fan_out_or_depth_are_refused() {
    let p = MemPool::new(3, 16 * MB);
    let fs = p.open().unwrap();
    let deep_ok = "replicate[".repeat(15) + "extent" + &"]".repeat(15);
    let too_deep = "replicate[".repeat(17) + "extent" + &"]".repeat(17);
    let absurd_nesting = "stripe[".repeat(100_000);
    let wide = format!("stripe(unit=4K)[{}]", vec!["extent@0"; 257].join(","));
    let many_nodes =
        format!("replicate[{}]", vec![format!("stripe[{}]", vec!["extent@1"; 200].join(",")); 6].join(","));
    let cases: Vec<(String, &str)> = vec![
        ("stripe(width=257)".into(), "256"),
        ("stripe(width=100000000000)".into(), "width"),
        ("regions(size=16M,width=4000)".into(), "width"),
        ("replicate(copies=17)".into(), "copies"),
        (wide, "256"),
        (too_deep.clone(), "deeper"),
        (absurd_nesting, "spec"),
        ("x".repeat(70_000), "limit"),
        (many_nodes, "1024"),
        ("stripe(unit=3K,width=2)".into(), "unit"),
        ("stripe(unit=0,width=2)".into(), "unit"),
        ("extent(max=666666666666)".into(), "multiple of 4k"),
        ("extent@99".into(), "device"),
        ("extent@4294967296".into(), "device"),
        ("stripe(width=4)".into(), "device"),
        ("extent[extent]".into(), "children"),
        ("stripe@1".into(), "@device"),
        ("nope".into(), "unknown"),
        ("stripe(unit=64K,unit=64K,width=2)".into(), "twice"),
        ("stripe(unit=64K".into(), "column"),
        ("\u{0}\u{ffff}🌀".into(), "column"),
        ("".into(), "column"),
    ];
    for (i, (spec, why)) in cases.iter().enumerate() {
        let path = format!("/bad{i}");
        let Err(e) = fs.create(&path, Some(spec)) else { panic!("layout {spec:.80} was accepted") };
        let msg = e.to_string();
        assert_eq!(e.errno(), libc::EINVAL, "{spec:.60}: {msg}");
        assert!(msg.to_lowercase().contains(why), "{spec:.60}: message {msg:?} does not mention {why:?}");
        assert!(msg.len() < 1000, "{spec:.60}: message of {} bytes", msg.len());
        // Nothing was created.
        assert_eq!(errno(fs.stat(&path)), libc::ENOENT);
        // The same through the layout xattrs of an empty file and a directory.
        fs.write_file("/empty", b"", None).unwrap();
        let ino = fs.resolve("/empty").unwrap();
        let e = fs
            .setxattr(&Creds::root(), ino, b"user.hurricane.layout", spec.as_bytes(), 0)
            .expect_err(&format!("xattr layout {spec:.60}"));
        assert_eq!(e.errno(), libc::EINVAL, "{spec:.60}: {e}");
        // (An empty directory layout is not an error: it clears the default.)
        if !spec.is_empty() {
            let e = fs
                .dir_layout_set(&Creds::root(), hurricane::namespace::ROOT, spec)
                .expect_err(&format!("dir layout {spec:.60}"));
            assert_eq!(e.errno(), libc::EINVAL, "{spec:.60}: {e}");
        }
    }
    // The deepest allowed nesting works end to end.
    fs.write_file("/deep", &pattern(3, 10_000), Some(&deep_ok)).unwrap();
    // A file holding data moves to a new layout whole (an online migration).
    fs.set_layout("/deep", "extent@1").unwrap();
    assert!(fs.layout_of("/deep").unwrap().contains("extent@1"));
    assert_eq!(fs.read_file("/deep").unwrap(), pattern(3, 10_000));
    fs.sync().unwrap();
    let cfs = p.crash(CrashMode::DropAll).open().unwrap();
    assert_eq!(cfs.read_file("/deep").unwrap(), pattern(3, 10_000));
    assert_eq!(cfs.read_dir("/").unwrap().len(), 2);
    fsck_clean(&cfs, "layouts");
}

// ---------------------------------------------------------------- full devices

/// Every device filled to its last block: writes fail with ENOSPC, and
/// syncs go on (their batches go to the journal when a new meta-file cannot
/// be placed) or fail with ENOSPC; a power cut leaves everything that was
/// synced, and deleting files after remounting makes the pool usable again.
#[test]
fn every_device_filled_to_the_last_block() {
    let p = MemPool::with(3, 8 * MB, &FormatOptions { journal_size: Some(128 << 10), ..Default::default() });
    let fs = p.open().unwrap();
    fs.mkdir_path("/kept", 0o755).unwrap();
    fs.write_file("/kept/a", &pattern(1, 300_000), None).unwrap();
    fs.write_file("/kept/b", b"inline", Some("inline")).unwrap();
    fs.sync().unwrap();
    let chunk = pattern(2, 256 << 10);
    let mut synced = Vec::new();
    let mut failures = Vec::new();
    for (i, lay) in
        [None, Some("extent@0"), Some("extent@1"), Some("extent@2"), Some("stripe(unit=4K,width=3)")].iter().enumerate()
    {
        let path = format!("/fill{i}");
        let f = fs.create(&path, *lay).unwrap();
        let mut off = 0u64;
        let mut n = 0;
        let e = loop {
            match f.write_at(&chunk, off) {
                Ok(n) => off += n as u64,
                Err(e) => break e,
            }
            n += 1;
            if n % 8 == 0 {
                fs.sync().unwrap();
            }
            assert!(off < 64 * MB, "never filled");
        };
        assert_eq!(e.errno(), libc::ENOSPC, "{e}");
        // The last partial chunk: down to the last block.
        for b in (0..64).map(|k| off + k * 4096) {
            if f.write_at(&chunk[..4096], b).is_err() {
                break;
            }
        }
        match fs.sync() {
            Ok(()) => synced.push(path),
            Err(e) => failures.push(format!("{path}: {e}")),
        }
    }
    // Every device holds a copy of the meta-file and keeps a small reserve
    // (under 5%) for it to grow at the next checkpoint.
    let free: Vec<u64> = fs.storage().allocs.iter().map(|a| a.free_blocks()).collect();
    let limit = 16 * MB / 4096 / 20;
    assert!(free.iter().all(|&f| f < limit), "{free:?}");
    // Meta-data operations on the full pool.
    for i in 0..200 {
        let path = format!("/kept/m{i}");
        match fs.mkdir_path(&path, 0o755).map(|_| ()).and_then(|_| fs.sync()) {
            Ok(()) => synced.push(path),
            Err(e) => failures.push(format!("{path}: {e}")),
        }
    }
    eprintln!("{} syncs on the full pool succeeded, {} failed: {:?}", synced.len(), failures.len(), failures.first());
    for f in &failures {
        assert!(f.contains("no space"), "{f}");
    }
    let c = p.crash(CrashMode::DropAll);
    let cfs = c.open().unwrap_or_else(|e| panic!("open after filling: {e}"));
    assert_eq!(cfs.read_file("/kept/a").unwrap(), pattern(1, 300_000));
    assert_eq!(cfs.read_file("/kept/b").unwrap(), b"inline");
    for s in &synced {
        assert!(cfs.stat(s).is_ok(), "{s} was synced, then lost");
    }
    fsck_clean(&cfs, "full pool");
    // Deleting files makes the pool fully usable again.
    for i in 0..5 {
        let _ = cfs.remove(&format!("/fill{i}"));
        cfs.sync().unwrap_or_else(|e| panic!("sync after removing /fill{i}: {e}"));
    }
    cfs.write_file("/after", &pattern(9, 1 << 20), None).unwrap();
    cfs.close().unwrap();
    let again = c.open().unwrap();
    assert_eq!(again.read_file("/after").unwrap(), pattern(9, 1 << 20));
    fsck_clean(&again, "after freeing");
}

/// Regression: a commit that failed (here a device refusing writes) used to
/// drop the ops it had taken from the journal gate, so a later successful
/// sync made newer ops durable without them: after a crash a file could
/// exist inside a directory whose creation was never written (replay failed,
/// the pool did not open). Now the failed batch is written first next time.
#[test]
fn a_failed_commit_loses_nothing() {
    let p = MemPool::with(3, 16 * MB, &FormatOptions { journal_size: Some(256 << 10), ..Default::default() });
    let fs = p.open().unwrap();
    fs.write_file("/before", b"1", None).unwrap();
    fs.sync().unwrap();
    for round in 0..4 {
        fs.mkdir_path(&format!("/dir{round}"), 0o755).unwrap();
        fs.write_file(&format!("/dir{round}/old"), &pattern(round, 9000), None).unwrap();
        // Every journal device (its three copies) fails mid-commit; every
        // second round the commit is a checkpoint.
        for d in 0..3 {
            p.devs[d].fail_after_writes(0);
        }
        let r = if round % 2 == 0 { fs.sync() } else { fs.checkpoint() };
        assert!(r.is_err(), "round {round}: the commit should have failed");
        // The failed writes faulted them; they are brought back.
        for d in 0..3 {
            p.devs[d].fail_after_writes(-1);
            fs.storage().devs[d].set_state(hurricane::device::DeviceState::Online);
        }
        fs.write_file(&format!("/dir{round}/new"), b"after the failure", None).unwrap();
        fs.sync().unwrap();
        let cfs =
            p.crash(CrashMode::DropAll).open().unwrap_or_else(|e| panic!("round {round}: open after a crash: {e}"));
        for r in 0..=round {
            assert_eq!(cfs.read_file(&format!("/dir{r}/old")).unwrap(), pattern(r, 9000), "round {round}");
            assert_eq!(cfs.read_file(&format!("/dir{r}/new")).unwrap(), b"after the failure");
        }
        fsck_clean(&cfs, "after a failed commit");
    }
}

// ---------------------------------------------------------------- damaged images

/// A closed pool with some of everything, and the tree it holds.
fn closed_pool() -> (MemPool, Vec<(String, Vec<u8>)>) {
    let p = MemPool::with(3, 16 * MB, &FormatOptions { journal_size: Some(512 << 10), ..Default::default() });
    let fs = p.open().unwrap();
    let mut files = Vec::new();
    fs.mkdir_all("/a/b", 0o755).unwrap();
    for (i, lay) in ["extent@0", "extent@1", "stripe(unit=16K,width=3)", "replicate[extent@0,extent@2]", "inline"]
        .iter()
        .enumerate()
    {
        let path = format!("/a/b/f{i}");
        let data = pattern(i as u64, if *lay == "inline" { 1500 } else { 60_000 + i * 1000 });
        fs.write_file(&path, &data, Some(lay)).unwrap();
        files.push((path, data));
    }
    for i in 0..200 {
        fs.mkdir_path(&format!("/a/d{i}"), 0o755).unwrap();
    }
    fs.close().unwrap();
    (p, files)
}

fn check_files(fs: &Fs, files: &[(String, Vec<u8>)], what: &str) {
    for (path, data) in files {
        assert_eq!(&fs.read_file(path).unwrap_or_else(|e| panic!("{what}: {path}: {e}")), data, "{what}: {path}");
    }
    assert_eq!(fs.read_dir("/a").unwrap().len(), 201, "{what}");
}

/// The newest superblock of an image and the device extents of its meta-file.
fn meta_extents(img: &[u8]) -> (hurricane::pool::Superblock, Vec<(u32, u64, u64)>) {
    use hurricane::codec::Decoder;
    let sb = (0..2)
        .filter_map(|s| {
            hurricane::pool::Superblock::decode(&img[s * BLOCK_SIZE..(s + 1) * BLOCK_SIZE], "img").ok().flatten()
        })
        .max_by_key(|s| s.generation)
        .unwrap();
    let meta = hurricane::blocks::Layout::decode(&mut Decoder::new(&sb.meta_layout, "meta")).unwrap();
    let mut ext = Vec::new();
    meta.extents(&mut |d, s, l| ext.push((d, s, l)));
    (sb, ext)
}

fn scribble(img: &mut [u8], start: u64, len: u64, seed: u64) {
    let g = pattern(seed, len as usize);
    img[start as usize..(start + len) as usize].copy_from_slice(&g);
}

#[test]
fn truncated_images_are_refused_by_name() {
    let (p, files) = closed_pool();
    let imgs = images(&p);
    for dev in 0..3 {
        for len in [0usize, 100, 4096, 8193, imgs[dev].len() / 2, imgs[dev].len() - 4096] {
            let mut t = imgs.clone();
            t[dev].truncate(len);
            let e = Fs::open(devs_from(&t), quiet()).map(|_| ()).expect_err("a truncated device opened");
            let msg = e.to_string();
            assert!(msg.contains(&format!("mem{dev}")), "device {dev} cut to {len}: {msg}");
            assert!(
                msg.contains("truncated") || msg.contains("too small") || msg.contains("superblock"),
                "device {dev} cut to {len}: {msg}"
            );
        }
    }
    // Image files on the host: the same through open_dir.
    let dir = tempfile::tempdir().unwrap();
    let paths = Fs::mkfs_dir(dir.path(), 2, 8 * MB, &FormatOptions::default()).unwrap();
    let fs = Fs::open_dir(dir.path(), quiet()).unwrap();
    fs.write_file("/x", b"on disk", None).unwrap();
    fs.close().unwrap();
    std::fs::OpenOptions::new().write(true).open(&paths[1]).unwrap().set_len(3 * MB).unwrap();
    let msg = Fs::open_dir(dir.path(), quiet()).map(|_| ()).unwrap_err().to_string();
    assert!(msg.contains("dev1.img") && msg.contains("truncated"), "{msg}");
    std::fs::OpenOptions::new().write(true).open(&paths[1]).unwrap().set_len(8 * MB).unwrap();
    assert_eq!(Fs::open_dir(dir.path(), quiet()).unwrap().read_file("/x").unwrap(), b"on disk");
    // Nothing was written to the good images while refusing them.
    let fs = p.open().unwrap();
    check_files(&fs, &files, "original after truncation attempts");
}

/// Garbage over either copy of the replicated meta-file, over a superblock
/// slot, or over the (empty) journal of a cleanly closed pool: the pool
/// opens with all its data. Over every copy: a clear error.
#[test]
fn garbage_over_one_copy_of_the_meta_data_loses_nothing() {
    let (p, files) = closed_pool();
    let imgs = images(&p);
    let (sb, ext) = meta_extents(&imgs[0]);
    assert!(ext.iter().any(|e| e.0 == 0) && ext.iter().any(|e| e.0 == 1), "meta-file on devices 0 and 1: {ext:?}");
    for victim in [0u32, 1] {
        let mut t = imgs.clone();
        for &(d, s, l) in ext.iter().filter(|e| e.0 == victim) {
            scribble(&mut t[d as usize], s * BLOCK_SIZE as u64, l * BLOCK_SIZE as u64, 7 + d as u64);
        }
        let fs = Fs::open(devs_from(&t), quiet())
            .unwrap_or_else(|e| panic!("meta-file copy on device {victim} destroyed: {e}"));
        check_files(&fs, &files, &format!("meta copy {victim} destroyed"));
        fsck_clean(&fs, "one meta copy destroyed");
        // The next checkpoint writes two good copies again.
        fs.checkpoint().unwrap();
    }
    // Both copies: refused, naming what is wrong.
    let mut t = imgs.clone();
    for &(d, s, l) in &ext {
        scribble(&mut t[d as usize], s * BLOCK_SIZE as u64, l * BLOCK_SIZE as u64, 99);
    }
    let msg = Fs::open(devs_from(&t), quiet()).map(|_| ()).unwrap_err().to_string();
    assert!(msg.contains("meta-file") || msg.contains("meta-data store"), "{msg}");
    // One superblock slot of each device (the newest): the others say more.
    for dev in 0..3 {
        for slot in 0..2u64 {
            let mut t = imgs.clone();
            scribble(&mut t[dev], slot * BLOCK_SIZE as u64, BLOCK_SIZE as u64, 3);
            let fs = Fs::open(devs_from(&t), quiet()).unwrap_or_else(|e| panic!("slot {slot} of device {dev}: {e}"));
            check_files(&fs, &files, "one superblock slot");
        }
    }
    // The journal of a cleanly closed pool.
    let mut t = imgs.clone();
    scribble(&mut t[0], sb.journal.start * BLOCK_SIZE as u64, sb.journal.blocks * BLOCK_SIZE as u64, 5);
    let fs = Fs::open(devs_from(&t), quiet()).unwrap();
    check_files(&fs, &files, "journal overwritten");
    fsck_clean(&fs, "journal overwritten");
}

/// Random garbage at random places of the meta-data areas: never a panic;
/// either a clear error or a pool that opens, passes fsck's checks without
/// crashing, and (when the damage missed every copy of something) has all
/// its data.
#[test]
fn random_garbage_over_meta_data_never_panics() {
    let (p, files) = closed_pool();
    // An unclean pool too: live journal records after the checkpoint.
    let fs = p.open().unwrap();
    fs.write_file("/late", &pattern(77, 30_000), None).unwrap();
    fs.mkdir_path("/late-dir", 0o700).unwrap();
    fs.sync().unwrap();
    drop(fs);
    let imgs: Vec<Vec<u8>> = p.devs.iter().map(|d| d.crash_image(CrashMode::DropAll)).collect();
    let (sb, ext) = meta_extents(&imgs[0]);
    let mut areas: Vec<(usize, u64, u64)> =
        vec![(0, 0, 2), (1, 0, 2), (2, 0, 2), (0, sb.journal.start, sb.journal.blocks)];
    areas.extend(ext.iter().map(|&(d, s, l)| (d as usize, s, l)));
    let (mut opened, mut refused) = (0, 0);
    for seed in 0..120u64 {
        let mut t = imgs.clone();
        let hits = 1 + seed % 4;
        for k in 0..hits {
            let (d, s, l) = areas[((seed * 7 + k * 13) % areas.len() as u64) as usize];
            let blk = s + (seed * 31 + k) % l;
            let off = (seed * 97 + k * 11) % BLOCK_SIZE as u64;
            let len = 1 + (seed * 53 + k) % (BLOCK_SIZE as u64 - off);
            scribble(&mut t[d], blk * BLOCK_SIZE as u64 + off, len, seed * 10 + k);
        }
        let devs = devs_owned(t);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match Fs::open(devs, quiet()) {
            Ok(fs) => {
                let _ = fsck::check(&fs, false, &mut |_, _, _| {});
                let _ = fs.read_dir("/a");
                true
            }
            Err(e) => {
                assert!(!e.to_string().is_empty());
                false
            }
        }));
        match r {
            Ok(true) => opened += 1,
            Ok(false) => refused += 1,
            Err(_) => panic!("seed {seed}: panic on a damaged image"),
        }
    }
    eprintln!("random meta-data damage: {opened} opened, {refused} refused with an error");
    assert!(opened > 0);
    let fs = Fs::open(devs_from(&imgs), quiet()).unwrap();
    check_files(&fs, &files, "undamaged");
}

/// A member device overwritten with garbage (or zeroed) is taken as
/// faulted: the pool opens degraded, what had a copy elsewhere reads, what
/// lived only there fails with EIO naming the device; a pool with no
/// device left that reads as one is refused, naming them.
#[test]
fn garbage_devices_are_taken_as_faulted() {
    let (p, files) = closed_pool();
    let mut imgs = images(&p);
    let len = imgs[2].len() as u64;
    for zeroed in [false, true] {
        if zeroed {
            imgs[2] = vec![0; len as usize];
        } else {
            scribble(&mut imgs[2], 0, len, 1234);
        }
        let fs = Fs::open(devs_from(&imgs), quiet()).unwrap();
        assert_eq!(fs.storage().devs[2].state(), hurricane::device::DeviceState::Faulted);
        for (path, data) in &files {
            match fs.read_file(path) {
                Ok(got) => assert!(got == *data, "{path}: wrong bytes"),
                Err(e) => assert!(e.errno() == libc::EIO && e.to_string().contains("device 2"), "{path}: {e}"),
            }
        }
        assert_eq!(fs.read_file("/a/b/f0").unwrap(), files[0].1);
        assert_eq!(fs.read_file("/a/b/f3").unwrap(), files[3].1);
        assert!(fs.read_file("/a/b/f2").is_err(), "striped over the faulted device");
        drop(fs);
    }
    let all_bad: Vec<Vec<u8>> = imgs.iter().map(|i| vec![0u8; i.len()]).collect();
    let msg = Fs::open(devs_from(&all_bad), quiet()).map(|_| ()).unwrap_err().to_string();
    assert!(msg.contains("mem") && msg.contains("not a Hurricane device"), "{msg}");
}

// ---------------------------------------------------------------- fsck --repair

fn populate(fs: &Fs) -> Vec<(String, Vec<u8>)> {
    fs.mkdir_all("/a/b/c", 0o755).unwrap();
    let mut files = Vec::new();
    for (i, (path, lay)) in [
        ("/a/f1", "extent"),
        ("/a/b/f2", "inline"),
        ("/a/b/c/f3", "stripe(unit=16K,width=2)"),
        ("/top", "replicate[extent@0,extent@1]"),
    ]
    .iter()
    .enumerate()
    {
        let data = pattern(i as u64 + 40, if *lay == "inline" { 900 } else { 50_000 });
        fs.write_file(path, &data, Some(lay)).unwrap();
        files.push((path.to_string(), data));
    }
    fs.hard_link("/a/f1", "/a/b/c/f1-link").unwrap();
    fs.symlink_path("../f1", "/a/b/sym").unwrap();
    files
}

fn run_fsck(fs: &Fs, repair: bool) -> fsck::FsckReport {
    fsck::check(fs, repair, &mut |_, _, _| {}).unwrap()
}

/// Damage made through the fsck module's test hook (and made durable by a
/// checkpoint): the pool still opens, fsck finds each problem, `--repair`
/// fixes them all, a second run finds nothing, and the repairs survive a
/// close and reopen with every file's data intact.
#[test]
fn fsck_repair_fixes_damage_and_a_second_run_finds_nothing() {
    use fsck::Damage;
    let cases: Vec<(&str, Vec<Damage>, &str)> = vec![
        ("orphaned subtree", vec![Damage::DropEntry { path: "/a/b".into() }], "lost+found"),
        ("orphaned file", vec![Damage::DropEntry { path: "/a/b/c/f3".into() }], "lost+found"),
        ("link count too high", vec![Damage::SetNlink { path: "/a/f1".into(), nlink: 9 }], "link count"),
        ("link count too low", vec![Damage::SetNlink { path: "/top".into(), nlink: 0 }], "link count"),
        ("dangling entry", vec![Damage::Dangling { dir: "/a/b".into(), name: "ghost".into() }], "ghost"),
        ("wrong parent", vec![Damage::SetParent { path: "/a/b/c".into(), parent: "/".into() }], ".."),
        (
            "everything at once",
            vec![
                Damage::DropEntry { path: "/a/b/c".into() },
                Damage::SetNlink { path: "/a/f1".into(), nlink: 1 },
                Damage::Dangling { dir: "/".into(), name: "nowhere".into() },
            ],
            "lost+found",
        ),
    ];
    for (what, damage, mentions) in cases {
        let p = MemPool::new(2, 16 * MB);
        let fs = p.open().unwrap();
        let files = populate(&fs);
        for d in &damage {
            fsck::inject(&fs, d).unwrap();
        }
        fs.close().unwrap();
        // The damaged pool opens without a manual repair.
        let fs = p.open().unwrap_or_else(|e| panic!("{what}: damaged pool does not open: {e}"));
        let r = run_fsck(&fs, false);
        assert!(!r.is_clean() && !r.problems.is_empty(), "{what}: fsck found nothing");
        let r = run_fsck(&fs, true);
        assert!(r.is_clean(), "{what}: left after repair: {:?}", r.remaining);
        let all = r.repaired.join("\n");
        assert!(all.contains(mentions), "{what}: repairs {all}");
        let again = run_fsck(&fs, false);
        assert!(again.problems.is_empty(), "{what}: second run: {:?}", again.problems);
        fs.close().unwrap();
        let fs = p.open().unwrap();
        let again = run_fsck(&fs, false);
        assert!(again.problems.is_empty(), "{what}: after reopen: {:?}", again.problems);
        // Every file's data is still there: at its path, or in lost+found.
        for (path, data) in &files {
            match fs.read_file(path) {
                Ok(d) => assert_eq!(&d, data, "{what}: {path}"),
                Err(_) => {
                    let found = find_in_lost_found(&fs, data);
                    assert!(found, "{what}: {path} neither in place nor in lost+found");
                }
            }
        }
    }
}

fn find_in_lost_found(fs: &Fs, data: &[u8]) -> bool {
    let mut stack = vec!["/lost+found".to_string()];
    while let Some(d) = stack.pop() {
        for e in fs.read_dir(&d).unwrap_or_default() {
            let path = format!("{d}/{}", String::from_utf8_lossy(&e.name));
            let a = fs.lstat(&path).unwrap();
            if a.is_dir() {
                stack.push(path);
            } else if a.is_file() && fs.read_file(&path).unwrap() == data {
                return true;
            }
        }
    }
    false
}

/// Damage written into the images themselves: the checkpoint is decoded,
/// changed (an entry dropped, a link count and a directory's parent made
/// wrong, an entry added for a missing inode), encoded again with valid
/// checksums and written back over the meta-file, as a bug that wrote bad
/// meta-data would leave it. Repair must fix the pool as found on disk.
#[test]
fn fsck_repair_of_meta_data_damaged_on_disk() {
    use hurricane::blocks::Layout;
    use hurricane::codec::Decoder;
    use hurricane::device::DeviceHandle;
    use hurricane::namespace::store::{Delta, MetaFile, MetaStore};
    use hurricane::namespace::State;
    use hurricane::pool::{Allocator, Storage, Superblock};

    let p = MemPool::new(2, 16 * MB);
    let fs = p.open().unwrap();
    let files = populate(&fs);
    let (a, b, c, f1) = (
        fs.resolve("/a").unwrap(),
        fs.resolve("/a/b").unwrap(),
        fs.resolve("/a/b/c").unwrap(),
        fs.resolve("/a/f1").unwrap(),
    );
    fs.close().unwrap();

    // Damage the meta-data store through the meta-file's layout, as a
    // stray writer with the pool's format would.
    let devs: Vec<Arc<dyn Device>> = p.devs.iter().map(|d| d.clone() as Arc<dyn Device>).collect();
    let storage = Arc::new(Storage {
        devs: devs.iter().enumerate().map(|(i, d)| DeviceHandle::new(i as u32, d.clone())).collect(),
        allocs: devs.iter().map(|d| Allocator::new(0, d.size() / BLOCK_SIZE as u64)).collect(),
    });
    let sb = p
        .devs
        .iter()
        .flat_map(|d| {
            let img = d.image();
            (0..2)
                .filter_map(|s| Superblock::decode(&img[s * BLOCK_SIZE..(s + 1) * BLOCK_SIZE], "d").ok().flatten())
                .collect::<Vec<_>>()
        })
        .max_by_key(|s| s.generation)
        .unwrap();
    let meta = Layout::decode(&mut Decoder::new(&sb.meta_layout, "meta")).unwrap();
    let file = MetaFile::new(storage, meta, sb.meta_len, false);
    file.arm(sb.clone());
    let store = Arc::new(MetaStore::open(file, 1 << 20, 0, 1).unwrap());
    let sys = store.sys().unwrap();
    let st = State::new(store.clone(), 4, 1000).unwrap();
    {
        let mut l = st.lock(&[a, b, c, f1]);
        l.get(b).unwrap().dir_mut().unwrap().remove(b"c".as_slice()).unwrap().unwrap();
        l.get(f1).unwrap().nlink = 5;
        l.get(a).unwrap().dir_mut().unwrap().insert(b"ghost".to_vec(), 999_999, libc::S_IFREG).unwrap();
    }
    let mut delta = Delta { sys, ..Default::default() };
    let _taken = st.take(&mut delta);
    delta.sys.cursor = sys.cursor;
    store.commit(&delta, true).unwrap();
    drop(st);
    drop(store);

    let fs = p.open().unwrap_or_else(|e| panic!("damaged on disk, does not open: {e}"));
    let r = run_fsck(&fs, false);
    let all = r.problems.join("\n");
    for want in ["not reachable", "link count", "ghost"] {
        assert!(all.contains(want), "fsck missed {want:?}: {all}");
    }
    let r = run_fsck(&fs, true);
    assert!(r.is_clean(), "{:?}", r.remaining);
    assert!(run_fsck(&fs, false).problems.is_empty());
    fs.close().unwrap();
    let fs = p.open().unwrap();
    assert!(run_fsck(&fs, false).problems.is_empty());
    assert_eq!(fs.stat("/a/f1").unwrap().nlink, 2);
    for (path, data) in &files {
        match fs.read_file(path) {
            Ok(d) => assert_eq!(&d, data, "{path}"),
            Err(_) => assert!(find_in_lost_found(&fs, data), "{path} lost"),
        }
    }
}

// ---------------------------------------------------------------- crafted superblocks

/// Rewrites every valid superblock slot of every image with `f` applied,
/// re-encoded so its checksum is valid again.
fn craft(imgs: &[Vec<u8>], f: &dyn Fn(&mut hurricane::pool::Superblock)) -> Vec<Vec<u8>> {
    use hurricane::pool::Superblock;
    let mut out = imgs.to_vec();
    for img in &mut out {
        for slot in 0..2 {
            let at = slot * BLOCK_SIZE..(slot + 1) * BLOCK_SIZE;
            if let Ok(Some(mut sb)) = Superblock::decode(&img[at.clone()], "img") {
                f(&mut sb);
                img[at].copy_from_slice(&sb.encode().unwrap());
            }
        }
    }
    out
}

/// Opens crafted images read-write and read-only; neither may panic, and
/// both must refuse with a message naming `words` (the device, the field).
fn refused_clearly(imgs: &[Vec<u8>], what: &str, words: &[&str]) {
    for read_only in [false, true] {
        let devs = devs_from(imgs);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Fs::open(devs, Options { read_only, ..quiet() }).map(|_| ())
        }));
        let r = r.unwrap_or_else(|_| panic!("{what}: open panicked"));
        let msg = r.expect_err(&format!("{what}: opened")).to_string();
        for w in words {
            assert!(msg.contains(w), "{what}: {msg:?} does not name {w:?}");
        }
    }
}

/// A superblock with a valid checksum and extreme values in one field at a
/// time: a clear error naming the device and the field, never an overflow
/// panic or an allocation sized by the field.
#[test]
fn crafted_superblocks_with_extreme_fields_are_refused() {
    use hurricane::pool::Superblock;
    let (p, files) = closed_pool();
    let imgs = images(&p);
    type Case = (&'static str, Box<dyn Fn(&mut Superblock)>, &'static [&'static str]);
    let cases: Vec<Case> = vec![
        ("dev_count = u32::MAX", Box::new(|s| s.dev_count = u32::MAX), &["mem", "device count"]),
        ("dev_count = 2^20", Box::new(|s| s.dev_count = 1 << 20), &["mem", "device count"]),
        ("dev_count = 0", Box::new(|s| s.dev_count = 0), &["mem", "device"]),
        ("dev_index = u32::MAX", Box::new(|s| s.dev_index = u32::MAX), &["mem", "device index"]),
        ("dev_blocks = u64::MAX", Box::new(|s| s.dev_blocks = u64::MAX), &["mem", "device size"]),
        ("dev_blocks = 2^52", Box::new(|s| s.dev_blocks = 1 << 52), &["mem", "device size"]),
        ("dev_blocks = 1", Box::new(|s| s.dev_blocks = 1), &["mem", "device size"]),
        ("journal.start = u64::MAX", Box::new(|s| s.journal.start = u64::MAX), &["mem", "journal"]),
        ("journal.start = u64::MAX - 8", Box::new(|s| s.journal.start = u64::MAX - 8), &["mem", "journal"]),
        ("journal.start = 0", Box::new(|s| s.journal.start = 0), &["mem", "journal"]),
        ("journal.blocks = u64::MAX", Box::new(|s| s.journal.blocks = u64::MAX), &["mem", "journal"]),
        ("journal.dev = u32::MAX", Box::new(|s| s.journal.dev = u32::MAX), &["mem", "journal"]),
        ("cursor.tail = u64::MAX", Box::new(|s| s.cursor.tail = u64::MAX), &["mem", "journal"]),
        ("cursor.seq = u64::MAX", Box::new(|s| s.cursor.seq = u64::MAX), &["mem", "sequence"]),
        ("generation = u64::MAX", Box::new(|s| s.generation = u64::MAX), &["mem", "generation"]),
        ("meta_len = u64::MAX", Box::new(|s| s.meta_len = u64::MAX), &["meta-file", "length"]),
        ("meta_len = 2^40", Box::new(|s| s.meta_len = 1 << 40), &["meta-file", "length"]),
        ("meta_len past its extents", Box::new(|s| s.meta_len += 64 << 20), &["meta-file", "length"]),
    ];
    for (what, f, words) in &cases {
        refused_clearly(&craft(&imgs, f.as_ref()), what, words);
    }
    // A journal said to end past device 0 makes device 0's superblocks
    // invalid: the device is faulted and the pool opens from the other
    // journal copies.
    let past = craft(&imgs, &|s| s.journal.start = s.dev_blocks - s.journal.blocks + 1);
    let fs = Fs::open(devs_from(&past), Options { read_only: true, ..quiet() }).unwrap();
    assert_eq!(fs.storage().devs[0].state(), hurricane::device::DeviceState::Faulted);
    drop(fs);
    // The untouched pool still opens with everything in it.
    let fs = Fs::open(devs_from(&imgs), quiet()).unwrap();
    check_files(&fs, &files, "after crafted superblocks");
}

/// More devices than the superblock's count allows, each claiming a huge
/// pool: refused before anything is sized by the count.
#[test]
fn a_pool_claiming_billions_of_devices_is_refused_by_name() {
    let (p, _) = closed_pool();
    let imgs = craft(&images(&p), &|s| {
        s.dev_count = u32::MAX;
        s.dev_index = u32::MAX - 1 - s.dev_index;
    });
    refused_clearly(&imgs, "dev_count = u32::MAX, high indices", &["mem", "device count"]);
}

/// Rewrites every superblock slot of `p` as format `version` (checksums fixed up).
fn set_format_version(p: &MemPool, version: u32) {
    use hurricane::pool::Superblock;
    for d in &p.devs {
        for slot in 0..2u64 {
            let mut b = vec![0u8; BLOCK_SIZE];
            d.read_at(&mut b, slot * BLOCK_SIZE as u64).unwrap();
            let Some(mut sb) = Superblock::decode(&b, "d").unwrap() else { continue };
            sb.version = version;
            d.write_at(&sb.encode().unwrap(), slot * BLOCK_SIZE as u64).unwrap();
        }
    }
}

/// The format version of each device's newest superblock (a build that
/// finds a slot newer than it reads refuses the device, whichever is newest).
fn format_versions(p: &MemPool) -> Vec<u32> {
    use hurricane::pool::Superblock;
    let mut out = Vec::new();
    for d in &p.devs {
        let newest = (0..2u64)
            .filter_map(|slot| {
                let mut b = vec![0u8; BLOCK_SIZE];
                d.read_at(&mut b, slot * BLOCK_SIZE as u64).unwrap();
                Superblock::decode(&b, "d").unwrap()
            })
            .max_by_key(|sb| sb.generation)
            .unwrap();
        out.push(newest.version);
    }
    out
}

/// A pool whose superblocks say version 4 (the oldest this build reads)
/// opens with every file intact, and that open marks it version 6: what
/// this build writes (layout trees in the varint encoding, journal records
/// with epochs) is then refused by name by an older build instead of
/// misread.
#[test]
fn version_4_pools_open_and_are_marked_6() {
    use hurricane::pool::{FORMAT_VERSION, OLDEST_READABLE};
    assert_eq!((OLDEST_READABLE, FORMAT_VERSION), (4, 6));
    let p = MemPool::new(2, 8 * MB);
    let fs = p.open().unwrap();
    let files = populate(&fs);
    fs.close().unwrap();
    set_format_version(&p, 4);
    assert!(format_versions(&p).iter().all(|&v| v == 4));
    let fs = p.open().unwrap();
    assert!(format_versions(&p).iter().all(|&v| v == 6), "{:?}", format_versions(&p));
    for (path, data) in &files {
        assert_eq!(&fs.read_file(path).unwrap(), data, "{path}");
    }
    fs.close().unwrap();
}

/// A pool of a format older than this build reads (its superblocks say one
/// version below the oldest readable) is refused by name at open, not misread.
#[test]
fn older_format_pools_are_refused_by_name() {
    use hurricane::pool::OLDEST_READABLE;
    let p = MemPool::new(2, 8 * MB);
    p.open().unwrap().close().unwrap();
    set_format_version(&p, OLDEST_READABLE - 1);
    let msg = p.open().err().map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains(&format!("format version {}", OLDEST_READABLE - 1)) && msg.contains("older"), "{msg}");
}

/// Pools of the formats that kept their meta-data as one whole checkpoint
/// (versions 2 and 3) are refused with a message saying what to do, and
/// nothing on them changes.
#[test]
fn whole_checkpoint_pools_are_refused_and_left_alone() {
    for v in [2, 3] {
        let p = MemPool::new(2, 8 * MB);
        let fs = p.open().unwrap();
        populate(&fs);
        fs.close().unwrap();
        set_format_version(&p, v);
        let before: Vec<Vec<u8>> = p.devs.iter().map(|d| d.image()).collect();
        let msg = p.open().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains(&format!("format version {v} is older")) && msg.contains("copy the files out"), "{msg}");
        let after: Vec<Vec<u8>> = p.devs.iter().map(|d| d.image()).collect();
        assert!(before == after, "a refused pool is not written");
    }
}

/// A damaged or foreign `scrub.pos`: a resumed scrub either refuses it
/// with an error naming the file, or starts over from the beginning; it
/// never skips files on its word.
#[test]
fn hostile_scrub_position_files_are_refused_or_start_over() {
    use hurricane::fs::{save_position, PositionRecord, ScrubOptions, ScrubPos};
    let dir = tempfile::tempdir().unwrap();
    let posf = dir.path().join("scrub.pos");
    let pool = MemPool::new(2, 64 * MB);
    let fs = pool.open().unwrap();
    for i in 0..3 {
        fs.write_file(&format!("/f{i}"), &pattern(80 + i, 300_000), Some("extent@1")).unwrap();
    }
    let full = fs.scrub(&ScrubOptions::default(), &|_| {}).unwrap().checked_blocks;
    let opts = ScrubOptions { position_file: Some(posf.clone()), resume: true, ..Default::default() };
    let id = fs.pool_id();
    let good = PositionRecord { pool: id, rebuild: vec![], pos: ScrubPos { ino: 2, block: 1 } }.encode();

    // Refused by name: truncated, garbage, not text, numbers out of range.
    let refused: Vec<Vec<u8>> = vec![
        good.as_bytes()[..good.len() / 2].to_vec(),
        good.lines().take(4).map(|l| format!("{l}\n")).collect::<String>().into_bytes(),
        b"\x00\x01garbage\xff\xfe".to_vec(),
        vec![0xff; 4096],
        good.replace("block 1", "block 99999999999999999999").into_bytes(),
        good.replace("inode 2", "inode -2").into_bytes(),
        format!("{good}{good}").into_bytes(),
    ];
    for bad in refused {
        std::fs::write(&posf, &bad).unwrap();
        let e = fs.scrub(&opts, &|_| {}).unwrap_err().to_string();
        assert!(e.contains("scrub.pos"), "{:?}: {e}", String::from_utf8_lossy(&bad));
        // The same bytes through the fuzz target: no panic.
        fuzz_targets::scrub_pos(&bad);
    }

    // Started over: another pool's, another rebuild's, or past every inode.
    let restart = [
        PositionRecord { pool: [7; 16], rebuild: vec![], pos: ScrubPos { ino: 3, block: 0 } },
        PositionRecord { pool: id, rebuild: vec![1], pos: ScrubPos { ino: 3, block: 0 } },
        PositionRecord { pool: id, rebuild: vec![], pos: ScrubPos { ino: 1 << 40, block: 0 } },
        PositionRecord { pool: id, rebuild: vec![], pos: ScrubPos { ino: u64::MAX, block: 0 } },
    ];
    for rec in restart {
        std::fs::write(&posf, rec.encode()).unwrap();
        let r = fs.scrub(&opts, &|_| {}).unwrap();
        assert_eq!(r.resumed_from, None, "{rec:?}");
        assert!(r.complete, "{rec:?}");
        assert_eq!(r.checked_blocks, full, "{rec:?}: the whole pool is scrubbed");
        assert!(!posf.exists());
    }

    // A block past the end of its file goes on with the next file.
    save_position(&posf, &id, &[], ScrubPos { ino: 2, block: 1 << 30 }).unwrap();
    let r = fs.scrub(&opts, &|_| {}).unwrap();
    assert!(r.complete && r.checked_blocks < full);
}

/// Links a pool directory's owner planted at the names of the image files
/// `mkfs_dir` makes (`dev0.img` to a file of the caller's, `dev1.img`
/// dangling): mkfs fails naming the link, writes nothing through it,
/// creates nothing where it points and leaves no image or pool.conf
/// behind. A file already there is refused too: mkfs overwrites nothing.
#[test]
fn mkfs_writes_no_image_through_a_planted_link() {
    use std::os::unix::fs::symlink;
    let t = tempfile::tempdir().unwrap();
    let target = t.path().join("target");
    std::fs::write(&target, b"the caller's own file\n").unwrap();
    let dir = t.path().join("pool");
    std::fs::create_dir(&dir).unwrap();
    let unchanged = |what: &str| {
        assert_eq!(std::fs::read(&target).unwrap(), b"the caller's own file\n", "{what}");
        assert!(!dir.join("pool.conf").exists(), "{what}");
    };

    symlink(&target, dir.join("dev0.img")).unwrap();
    let e = Fs::mkfs_dir(&dir, 2, 8 * MB, &FormatOptions::default()).unwrap_err().to_string();
    assert!(e.contains("dev0.img") && e.contains("symbolic link"), "{e}");
    unchanged("a link at dev0.img");
    assert!(std::fs::symlink_metadata(dir.join("dev0.img")).unwrap().file_type().is_symlink());
    assert!(std::fs::symlink_metadata(dir.join("dev1.img")).is_err(), "no image made past the refusal");

    // A dangling link further on: dev0.img, made first, is removed again,
    // and nothing is created where the link points.
    std::fs::remove_file(dir.join("dev0.img")).unwrap();
    let made = t.path().join("made");
    symlink(&made, dir.join("dev1.img")).unwrap();
    let e = Fs::mkfs_dir(&dir, 2, 8 * MB, &FormatOptions::default()).unwrap_err().to_string();
    assert!(e.contains("dev1.img") && e.contains("symbolic link"), "{e}");
    assert!(std::fs::symlink_metadata(&made).is_err(), "created through a dangling link");
    assert!(std::fs::symlink_metadata(dir.join("dev0.img")).is_err(), "a half-made image left behind");
    unchanged("a dangling link at dev1.img");

    // A regular file at an image's name is not overwritten either.
    std::fs::remove_file(dir.join("dev1.img")).unwrap();
    std::fs::write(dir.join("dev1.img"), b"kept").unwrap();
    let e = Fs::mkfs_dir(&dir, 2, 8 * MB, &FormatOptions::default()).unwrap_err().to_string();
    assert!(e.contains("dev1.img") && e.contains("regular file"), "{e}");
    assert_eq!(std::fs::read(dir.join("dev1.img")).unwrap(), b"kept");
    unchanged("a file at dev1.img");

    // With the names free, the pool is made and opens.
    std::fs::remove_file(dir.join("dev1.img")).unwrap();
    let paths = Fs::mkfs_dir(&dir, 2, 8 * MB, &FormatOptions::default()).unwrap();
    assert_eq!(paths, vec![dir.join("dev0.img"), dir.join("dev1.img")]);
    for p in &paths {
        let m = std::fs::symlink_metadata(p).unwrap();
        assert!(m.is_file() && m.len() == 8 * MB, "{}: {m:?}", p.display());
    }
    let fs = Fs::open_dir(&dir, quiet()).unwrap();
    fs.write_file("/x", b"made", None).unwrap();
    fs.close().unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"the caller's own file\n");
}

/// The meta-file image of a pool: its bytes, read through its layout.
fn meta_image(p: &MemPool) -> Vec<u8> {
    use hurricane::blocks::{IoCtx, Layout, NodeRecord};
    use hurricane::codec::Decoder;
    use hurricane::device::DeviceHandle;
    use hurricane::pool::{Allocator, Storage};
    let storage = Storage {
        devs: p.devs.iter().enumerate().map(|(i, d)| DeviceHandle::new(i as u32, d.clone())).collect(),
        allocs: p.devs.iter().map(|d| Allocator::new(0, d.size() / BLOCK_SIZE as u64)).collect(),
    };
    let sb = newest_superblock(&p.devs[0].image());
    let meta = Layout::decode(&mut Decoder::new(&sb.meta_layout, "meta")).unwrap();
    let sink = |_: NodeRecord| {};
    let io = IoCtx {
        owner: 0,
        origin: hurricane::blocks::Origin::NONE,
        storage: &storage,
        epoch: 0,
        sink: &sink,
        repair: false,
    };
    let mut buf = vec![0u8; (sb.meta_len as usize).div_ceil(BLOCK_SIZE) * BLOCK_SIZE];
    meta.root().read(&io, 0, &mut buf).unwrap();
    buf.truncate(sb.meta_len as usize);
    buf
}

/// Writes the seeds of the `store` fuzz corpus: the meta-file images of a
/// new pool, a used one, and one with a large directory. Run with
/// Seeds of the layout decoder for the types whose state came after the
/// corpus was generated: a `write-mostly` placement map, extent and
/// checksum state after a collapsed range, log maps after overwrites, and
/// a `colocate` map of several runs.
/// `cargo test -p hurricane --test hostile -- --ignored write_layout_seeds`.
#[test]
#[ignore]
fn write_layout_seeds() {
    use hurricane::blocks::{IoCtx, Layout, NodeRecord};
    use hurricane::codec::Encoder;
    use hurricane::device::{DeviceHandle, MemDevice};
    use hurricane::pool::{Allocator, Storage};
    let dir = corpus_dir().join("layout_decode");
    let devs: Vec<DeviceHandle> =
        (0..3).map(|i| DeviceHandle::new(i, std::sync::Arc::new(MemDevice::new(format!("m{i}"), 16 * MB)))).collect();
    let allocs: Vec<Allocator> = (0..3).map(|_| Allocator::new(1, 4096)).collect();
    let storage = Storage { devs: devs.into(), allocs: allocs.into() };
    let sink = |_: NodeRecord| {};
    let io = IoCtx {
        owner: 0,
        origin: hurricane::blocks::Origin::NONE,
        storage: &storage,
        epoch: 1,
        sink: &sink,
        repair: false,
    };
    for (spec, name, shift) in [
        ("write-mostly(unit=16K)[extent@0,checksum[extent@1],extent@2]", "seed-write-mostly", None),
        ("checksum[extent@1]", "seed-extent-collapsed", Some((12u64, -8i64))),
        ("stripe(unit=8K)[log(segment=64K)@0,checksum[log@1]]", "seed-log", None),
        ("checksum[colocate(group=16K)@0]", "seed-colocate", None),
    ] {
        let l = Layout::build(&hurricane::layout::parse(spec).unwrap()).unwrap();
        l.root().write(&io, 0, &pattern(1, 300_000 / 4096 * 4096)).unwrap();
        if name == "seed-log" {
            // Overwrites scatter a log's map.
            for b in [3u64, 17, 9, 40, 4] {
                l.root().write(&io, b, &pattern(b, 4096)).unwrap();
            }
        }
        if name == "seed-colocate" {
            // Blocks past the end, and a hole filled: runs of every kind.
            for b in [100u64, 80, 120, 99] {
                l.root().write(&io, b, &pattern(b, 4096)).unwrap();
            }
            l.root().punch(&io, 2, 1).unwrap();
            l.root().write(&io, 2, &pattern(2, 4096)).unwrap();
        }
        if let Some((from, delta)) = shift {
            l.root().shift(&io, from, delta).unwrap();
        }
        let mut e = Encoder::new();
        l.encode(&mut e);
        std::fs::write(dir.join(name), e.into_inner()).unwrap();
    }
}

/// `cargo test -p hurricane --test hostile -- --ignored write_store_seeds`.
#[test]
#[ignore]
fn write_store_seeds() {
    let dir = corpus_dir().join("store");
    std::fs::create_dir_all(&dir).unwrap();
    let p = MemPool::new(2, 16 * MB);
    std::fs::write(dir.join("new"), meta_image(&p)).unwrap();
    let fs = p.open().unwrap();
    populate(&fs);
    fs.close().unwrap();
    std::fs::write(dir.join("used"), meta_image(&p)).unwrap();
    let fs = p.open().unwrap();
    fs.mkdir_all("/big", 0o755).unwrap();
    for i in 0..300 {
        fs.write_file(&format!("/big/entry-{i:04}"), b"", None).unwrap();
    }
    fs.close().unwrap();
    std::fs::write(dir.join("big-dir"), meta_image(&p)).unwrap();
}

#[test]
fn the_meta_data_store_of_a_used_pool_reads_back_through_its_image() {
    let p = MemPool::new(2, 16 * MB);
    let fs = p.open().unwrap();
    populate(&fs);
    fs.close().unwrap();
    let store = fuzz_targets::open_image(&meta_image(&p)).unwrap();
    let sys = store.sys().unwrap();
    assert!(sys.inodes >= 8 && sys.next_ino > sys.inodes, "{sys:?}");
    let inos = store.inos().unwrap();
    assert_eq!(inos.len() as u64, sys.inodes);
    let a = store.lookup(1, b"a").unwrap().expect("/a in the root directory");
    let mut names = Vec::new();
    store
        .entries_from(a.ino, 0, &mut |_, n, _, _| {
            names.push(String::from_utf8_lossy(n).into_owned());
            Ok(true)
        })
        .unwrap();
    names.sort();
    assert_eq!(names, ["b", "f1"]);
}

/// A `colocate` node's state and records are extent's run list and map
/// changes: damaged ones are Corrupt errors, never panics, and a map that
/// passes the checks but names blocks past its device (or scattered ones)
/// gives errors to reads, relocations and regrouping, not panics.
#[test]
fn damaged_colocate_state_and_records_are_corrupt() {
    use hurricane::blocks::{IoCtx, Layout, NodeRecord};
    use hurricane::codec::{Decoder, Encoder};
    use hurricane::device::DeviceHandle;
    use hurricane::pool::{Allocator, Storage};
    use hurricane::Error;
    let spec = hurricane::layout::parse("colocate(group=16K,max=64K)@0").unwrap();
    let empty = Layout::build(&spec).unwrap();
    let mut e = Encoder::new();
    empty.encode(&mut e);
    // The node's state is the tree's last field: var(5), version 1, count 0.
    let enc = e.into_inner();
    assert_eq!(&enc[enc.len() - 6..], &[5, 1, 0, 0, 0, 0]);
    let prefix = &enc[..enc.len() - 6];
    let with_state = |runs: &[(u64, u64, u64)], count: Option<u32>, extra: &[u8]| {
        let mut st = Encoder::new();
        st.u8(1).u32(count.unwrap_or(runs.len() as u32));
        for &(f, p, l) in runs {
            st.u64(f).u64(p).u64(l);
        }
        st.raw(extra);
        let mut t = Encoder::new();
        t.raw(prefix).var_bytes(&st.into_inner());
        t.into_inner()
    };
    let decode = |b: &[u8]| Layout::decode(&mut Decoder::new(b, "hostile"));
    decode(&with_state(&[(0, 10, 2), (4, 20, 16)], None, &[])).unwrap();
    for (what, b) in [
        ("empty run", with_state(&[(0, 10, 0)], None, &[])),
        ("longer than max", with_state(&[(0, 10, 17)], None, &[])),
        ("file overflow", with_state(&[(u64::MAX - 1, 10, 2)], None, &[])),
        ("device overflow", with_state(&[(0, u64::MAX - 1, 2)], None, &[])),
        ("out of order", with_state(&[(4, 10, 2), (0, 20, 2)], None, &[])),
        ("file overlap", with_state(&[(0, 10, 4), (2, 20, 2)], None, &[])),
        ("device overlap", with_state(&[(0, 10, 4), (8, 12, 2)], None, &[])),
        ("count past the end", with_state(&[(0, 10, 1)], Some(u32::MAX), &[])),
        ("trailing bytes", with_state(&[(0, 10, 1)], None, &[0])),
        ("cut short", with_state(&[(0, 10, 1)], None, &[])[..prefix.len() + 10].to_vec()),
    ] {
        match decode(&b) {
            Err(Error::Corrupt { .. }) => {}
            Err(e) => panic!("{what}: not a Corrupt error: {e}"),
            Ok(_) => panic!("{what}: decoded"),
        }
    }
    // Records: framed by version, then extent's strict change encoding.
    let rec = |bytes: Vec<u8>| NodeRecord { node: 0, bytes };
    let map = |f: u64, p: u64, l: u64| {
        let mut e = Encoder::new();
        e.u8(1).u8(1).u64(f).u64(p).u64(l);
        e.into_inner()
    };
    let l = Layout::build(&spec).unwrap();
    l.apply(&rec(map(0, 10, 2))).unwrap();
    let mut trailing = map(0, 10, 2);
    trailing.push(0);
    let mut other_version = map(0, 10, 2);
    other_version[0] = 2;
    for (what, r) in [
        ("empty map", rec(map(0, 10, 0))),
        ("map longer than max", rec(map(0, 10, 17))),
        ("map past 2^64", rec(map(u64::MAX, 10, 1))),
        ("device past 2^64", rec(map(0, u64::MAX, 1))),
        ("trailing bytes", rec(trailing)),
        ("another version", rec(other_version)),
        ("unknown change", rec(vec![1, 9, 0, 0])),
        ("cut short", rec(vec![1, 1, 0, 0])),
        ("empty", rec(vec![])),
        ("zero shift", rec([&[1u8, 4][..], &0u64.to_le_bytes(), &0u64.to_le_bytes()].concat())),
    ] {
        match l.apply(&r) {
            Err(Error::Corrupt { .. }) => {}
            other => panic!("{what}: {:?}", other.map(|_| ())),
        }
    }
    // Runs that decode but lie past the device, scattered over groups: a
    // read, a regroup's relocation and a write fail cleanly.
    let dev = DeviceHandle::new(0, Arc::new(MemDevice::new("m0", 64 * BLOCK_SIZE as u64)));
    let storage = Storage { devs: vec![dev].into(), allocs: vec![Allocator::new(1, 64)].into() };
    let sink = |_: NodeRecord| {};
    let io = IoCtx {
        owner: 1,
        origin: hurricane::blocks::Origin { dir: 7, uid: 0 },
        storage: &storage,
        epoch: 1,
        sink: &sink,
        repair: false,
    };
    let far = decode(&with_state(&[(0, 1 << 40, 1), (1, 10, 1), (2, u64::MAX - 1, 1)], None, &[])).unwrap();
    let node = &far.nodes()[0];
    let runs = node.scattered();
    assert_eq!(runs.len(), 3, "{runs:?}");
    let mut buf = vec![0u8; 4 * BLOCK_SIZE];
    assert!(node.read(&io, 0, &mut buf).is_err());
    // The last block a map can name, in a group that would end past 2^64.
    assert!(node.read(&io, 2, &mut buf[..BLOCK_SIZE]).is_err());
    for (f, p, n) in runs {
        let r = node.relocate(&io, f, p, n);
        assert!(f == 1 || r.is_err(), "block {f}: {r:?}");
    }
    // Stale coordinates move nothing.
    assert_eq!(node.relocate(&io, 1, 11, 1).unwrap(), 0);
    assert_eq!(node.relocate(&io, u64::MAX - 1, 3, 1).unwrap(), 0);
    let _ = node.write(&io, 0, &vec![1u8; BLOCK_SIZE]);
}
