//! `hurricane fsck` and `hurricane recover` on a pool of image files whose
//! meta-data lost a block on every copy, against a model of the tree:
//! fsck never calls the pool consistent and its repair writes nothing;
//! recover copies every file it can with the model's bytes, names every
//! one it cannot, and never makes a set-id copy for the caller.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hurricane::blocks::{Block, IoCtx, Layout, NodeRecord};
use hurricane::codec::Decoder;
use hurricane::device::{Device, DeviceHandle, MemDevice, BLOCK_SIZE};
use hurricane::pool::{Allocator, Storage, Superblock};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

const BIN: &str = env!("CARGO_BIN_EXE_hurricane");

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(args: &[&str]) -> Run {
    let o = Command::new(BIN).args(args).env_remove("RUST_LOG").output().expect("run hurricane");
    Run {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(6364136223846793005) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A pool of three image files in `dir` with a tree, closed; its model
/// (path -> file bytes; directories as None).
fn make_pool(dir: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    let r = run(&["mkfs", s(dir), "--devices", "3", "--device-size", "24M"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let fs = hurricane::Fs::open_dir(dir, hurricane::Options::default()).unwrap();
    let mut m = BTreeMap::new();
    for d in 0..8u64 {
        let dir = format!("/d{d}");
        fs.mkdir_path(&dir, 0o750).unwrap();
        m.insert(dir.clone(), None);
        for f in 0..30u64 {
            let path = format!("{dir}/f{f}");
            let data = pattern(d * 100 + f, 1000 + (f as usize * 1777) % 30_000);
            fs.write_file(&path, &data, None).unwrap();
            m.insert(path, Some(data));
        }
    }
    // A set-uid program of another user's.
    fs.write_file("/d0/suid", b"#!/bin/sh\n", None).unwrap();
    fs.set_attr_path(
        "/d0/suid",
        &hurricane::SetAttr { mode: Some(0o4755), uid: Some(1234), gid: Some(1234), ..Default::default() },
    )
    .unwrap();
    m.insert("/d0/suid".into(), Some(b"#!/bin/sh\n".to_vec()));
    fs.symlink_path("/etc/passwd", "/d1/link").unwrap();
    fs.close().unwrap();
    m
}

fn superblock(img: &[u8]) -> Superblock {
    (0..2)
        .filter_map(|s| Superblock::decode(&img[s * BLOCK_SIZE..(s + 1) * BLOCK_SIZE], "d").ok().flatten())
        .max_by_key(|s| s.generation)
        .unwrap()
}

/// Flips a bit of meta-file block `fblk` on every copy, through the
/// copies' own blocks, on `devs` (whose images are `imgs`).
fn flip(devs: &[Arc<dyn Device>], img0: &[u8], fblk: u64) {
    let storage = Storage {
        devs: devs.iter().enumerate().map(|(i, d)| DeviceHandle::new(i as u32, d.clone())).collect(),
        allocs: devs.iter().map(|d| Allocator::new(0, d.size() / BLOCK_SIZE as u64)).collect(),
    };
    let sb = superblock(img0);
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
    let copies: Vec<Arc<dyn Block>> = meta.root().children().to_vec();
    assert!(!copies.is_empty());
    for c in copies {
        let mut b = vec![0u8; BLOCK_SIZE];
        c.read(&io, fblk, &mut b).unwrap();
        b[999] ^= 0x40;
        c.write(&io, fblk, &b).unwrap();
    }
    for d in devs {
        d.flush().unwrap();
    }
}

fn images(dir: &Path) -> Vec<Vec<u8>> {
    (0..3).map(|i| std::fs::read(dir.join(format!("dev{i}.img"))).unwrap()).collect()
}

/// A block whose loss on every copy leaves the pool opening with files
/// it cannot read (found on copies in memory).
fn harmful_block(dir: &Path, m: &BTreeMap<String, Option<Vec<u8>>>) -> u64 {
    let imgs = images(dir);
    let blocks = superblock(&imgs[0]).meta_len.div_ceil(BLOCK_SIZE as u64);
    for fblk in 1..blocks {
        let devs: Vec<Arc<dyn Device>> = imgs
            .iter()
            .enumerate()
            .map(|(i, im)| Arc::new(MemDevice::from_image(format!("dev{i}.img"), im.clone())) as Arc<dyn Device>)
            .collect();
        flip(&devs, &imgs[0], fblk);
        let opts = hurricane::Options { read_only: true, background_commit: false, ..Default::default() };
        let Ok(fs) = hurricane::Fs::open(devs, opts) else { continue };
        let lost = m.iter().filter(|(p, d)| d.is_some() && fs.read_file(p).is_err()).count();
        if lost > 0 && lost < m.len() / 2 {
            return fblk;
        }
    }
    panic!("no meta-file block whose loss costs some files");
}

fn tree(dest: &Path, at: &Path, out: &mut BTreeMap<String, std::fs::Metadata>) {
    for e in std::fs::read_dir(at).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        let rel = format!("/{}", p.strip_prefix(dest).unwrap().display());
        let md = std::fs::symlink_metadata(&p).unwrap();
        if md.is_dir() {
            tree(dest, &p, out);
        }
        out.insert(rel, md);
    }
}

#[test]
fn recover_and_fsck_on_meta_data_lost_on_every_copy() {
    let tmp = tempfile::tempdir().unwrap();
    let pool = tmp.path().join("pool");
    let m = make_pool(&pool);

    // Intact: consistent, and a recovery is the model whole.
    let r = run(&["fsck", s(&pool)]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("block reads verified"), "{}", r.stdout);
    let whole = tmp.path().join("whole");
    let r = run(&["recover", s(&pool), s(&whole)]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    for (path, data) in &m {
        let p = whole.join(&path[1..]);
        match data {
            Some(d) => assert_eq!(&std::fs::read(&p).unwrap(), d, "{path}"),
            None => assert!(p.is_dir(), "{path}"),
        }
    }
    // No set-id copy for the caller; the link is a link, not followed.
    let mode = std::fs::metadata(whole.join("d0/suid")).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o755, "set-id bits kept: {mode:o}");
    assert_eq!(std::fs::read_link(whole.join("d1/link")).unwrap(), PathBuf::from("/etc/passwd"));
    assert_eq!(std::fs::metadata(whole.join("d0")).unwrap().permissions().mode() & 0o777, 0o750);
    // Into a directory that is not empty: refused.
    let r = run(&["recover", s(&pool), s(&whole)]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("not empty"), "{}", r.stderr);

    // One meta-file block bad on every copy.
    let fblk = harmful_block(&pool, &m);
    {
        let paths: Vec<PathBuf> = (0..3).map(|i| pool.join(format!("dev{i}.img"))).collect();
        let devs = hurricane::pool::open_paths(&paths, true).unwrap();
        let img0 = std::fs::read(&paths[0]).unwrap();
        flip(&devs, &img0, fblk);
    }
    let before = images(&pool);
    let r = run(&["fsck", s(&pool)]);
    assert_eq!(r.code, 5, "block {fblk}: {}{}", r.stdout, r.stderr);
    assert!(!r.stdout.contains("consistent"), "{}", r.stdout);
    assert!(r.stdout.contains("no copy agrees with its checksum"), "{}", r.stdout);
    // Space is never called owned by nothing on the evidence of what could
    // not be read (a note counts it, not freed).
    assert!(!r.stdout.lines().any(|l| l.starts_with("problem:") && l.contains("owned by nothing")), "{}", r.stdout);
    assert!(r.stdout.contains("not freed"), "{}", r.stdout);
    let r = run(&["fsck", s(&pool), "--repair"]);
    assert_eq!(r.code, 5, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("nothing was repaired"), "{}", r.stdout);
    assert!(!r.stdout.lines().any(|l| l.starts_with("repaired:")), "{}", r.stdout);
    assert!(images(&pool) == before, "fsck --repair wrote to a pool whose meta-data is incomplete");

    let dest = tmp.path().join("saved");
    let r = run(&["recover", s(&pool), s(&dest)]);
    assert_eq!(r.code, 4, "{}{}", r.stdout, r.stderr);
    assert!(images(&pool) == before, "recover wrote to the pool");
    let not_saved: Vec<&str> =
        r.stdout.lines().filter_map(|l| l.strip_prefix("not saved: ")).map(|l| l.split(": ").next().unwrap()).collect();
    assert!(!not_saved.is_empty(), "{}", r.stdout);
    let mut got = BTreeMap::new();
    tree(&dest, &dest, &mut got);
    let (mut saved, mut missing) = (0, 0);
    for (path, data) in &m {
        let p = dest.join(&path[1..]);
        match (data, got.get(path)) {
            (Some(d), Some(md)) if md.is_file() => {
                let b = std::fs::read(&p).unwrap();
                let partial = not_saved.contains(&path.as_str());
                assert!(&b == d || partial, "{path}: wrong bytes, not listed");
                saved += 1;
            }
            (None, Some(md)) if md.is_dir() => saved += 1,
            (_, Some(md)) => panic!("{path}: saved as {:?}", md.file_type()),
            (_, None) => {
                missing += 1;
                let named = not_saved.iter().any(|n| {
                    let n = n.trim_end_matches('/');
                    path == n || path.starts_with(&format!("{n}/"))
                });
                assert!(named, "{path} missing and not listed: {}", r.stdout);
            }
        }
    }
    // What was saved outside the model's paths is under lost+found.
    for path in got.keys() {
        assert!(m.contains_key(path) || path == "/d1/link" || path.starts_with("/lost+found"), "{path}");
    }
    eprintln!("block {fblk}: {saved} saved, {missing} missing of {}", m.len());
}
