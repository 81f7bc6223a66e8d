//! Meta-data damage against a model of the pool's tree: bits flipped in the
//! same meta-file block on k of its copies, for blocks spread over the
//! whole file. With a copy left intact nothing may be lost: every file
//! reads back as the model has it, fsck reports the bad copy, `--repair`
//! rewrites it and a second check finds the pool consistent. With every
//! copy damaged, fsck must never call the pool consistent, never find
//! space "owned by nothing" on the evidence of what it could not read, and
//! its repair (unforced) must change nothing; salvage must hand over every
//! file it can with exactly the model's bytes and list the rest as not
//! saved: nothing missing from the copy without being named, no wrong
//! bytes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use hurricane::blocks::{Block, IoCtx, Layout, NodeRecord};
use hurricane::codec::Decoder;
use hurricane::device::{Device, DeviceHandle, BLOCK_SIZE};
use hurricane::fsck::{self, FsckOptions};
use hurricane::pool::{Allocator, Storage, Superblock};
use hurricane::salvage::{Sink, Source};
use hurricane::{Attr, FormatOptions, Fs};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The model: path -> what is there.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    Dir,
    File(Vec<u8>),
    Symlink(Vec<u8>),
    /// A hard link to the file at this path.
    Link(String),
}

/// A pool of three devices with directories, files of several layouts,
/// symlinks and hard links, closed cleanly; and its model.
fn pool() -> (MemPool, BTreeMap<String, Item>) {
    let p = MemPool::with(3, 24 * MB, &FormatOptions { journal_size: Some(1 << 20), ..Default::default() });
    let fs = p.open().unwrap();
    let mut m = BTreeMap::new();
    let lays = [None, Some("inline"), Some("replicate(copies=2)"), Some("stripe(unit=16K,width=3)")];
    for d in 0..12 {
        let dir = format!("/d{d}");
        fs.mkdir_path(&dir, 0o755).unwrap();
        m.insert(dir.clone(), Item::Dir);
        for f in 0..30u64 {
            let path = format!("{dir}/f{f}");
            let lay = lays[(f % 4) as usize];
            let len = if lay == Some("inline") { 200 + f as usize } else { 3000 + (f as usize * 977) % 40_000 };
            let data = pattern(d * 1000 + f, len);
            fs.write_file(&path, &data, lay).unwrap();
            m.insert(path, Item::File(data));
        }
        let sub = format!("{dir}/sub");
        fs.mkdir_path(&sub, 0o700).unwrap();
        m.insert(sub.clone(), Item::Dir);
        fs.symlink_path("../f1", &format!("{sub}/up")).unwrap();
        m.insert(format!("{sub}/up"), Item::Symlink(b"../f1".to_vec()));
        fs.hard_link(&format!("{dir}/f2"), &format!("{sub}/f2-link")).unwrap();
        m.insert(format!("{sub}/f2-link"), Item::Link(format!("{dir}/f2")));
    }
    fs.close().unwrap();
    (p, m)
}

fn superblock(p: &MemPool) -> Superblock {
    newest_superblock(&p.devs[0].image())
}

/// The meta-file's blocks (its length in blocks) and its copies.
fn meta_shape(p: &MemPool) -> (u64, usize) {
    let sb = superblock(p);
    let meta = Layout::decode(&mut Decoder::new(&sb.meta_layout, "meta")).unwrap();
    (sb.meta_len.div_ceil(BLOCK_SIZE as u64), meta.root().children().len().max(1))
}

/// Flips one bit of meta-file block `fblk` on each of the given copies,
/// writing through the copy's own blocks (as rot on the medium would).
fn flip(p: &MemPool, fblk: u64, copies: &[usize]) {
    let storage = Storage {
        devs: p.devs.iter().enumerate().map(|(i, d)| DeviceHandle::new(i as u32, d.clone())).collect(),
        allocs: p.devs.iter().map(|d| Allocator::new(0, d.size() / BLOCK_SIZE as u64)).collect(),
    };
    let sb = superblock(p);
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
    let all: Vec<Arc<dyn Block>> =
        if meta.root().children().is_empty() { vec![meta.root().clone()] } else { meta.root().children().to_vec() };
    for &c in copies {
        let mut b = vec![0u8; BLOCK_SIZE];
        all[c].read(&io, fblk, &mut b).unwrap();
        b[1234] ^= 0x10;
        all[c].write(&io, fblk, &b).unwrap();
    }
}

fn copy_of(p: &MemPool) -> MemPool {
    MemPool::from_images(p.devs.iter().map(|d| d.image()).collect())
}

/// Paths of the model whose reads through the open pool fail.
fn unreadable(fs: &Fs, m: &BTreeMap<String, Item>) -> Vec<String> {
    let mut v = Vec::new();
    for (path, item) in m {
        let ok = match item {
            Item::Dir => fs.read_dir(path).is_ok(),
            Item::File(d) => fs.read_file(path).map(|r| &r == d).unwrap_or(false),
            Item::Link(_) => fs.stat(path).is_ok(),
            Item::Symlink(t) => fs
                .resolve_as(&hurricane::Creds::root(), path, false)
                .and_then(|i| fs.readlink(i))
                .map(|r| &r == t)
                .unwrap_or(false),
        };
        if !ok {
            v.push(path.clone());
        }
    }
    v
}

/// A sink that keeps what it is given.
#[derive(Default)]
struct MemSink {
    items: BTreeMap<String, Item>,
    modes: BTreeMap<String, u32>,
    current: Option<(String, Vec<u8>)>,
}

fn p(path: &[u8]) -> String {
    format!("/{}", String::from_utf8(path.to_vec()).unwrap())
}

impl Sink for MemSink {
    fn dir(&mut self, path: &[u8], a: &Attr) -> std::io::Result<()> {
        self.items.insert(p(path), Item::Dir);
        self.modes.insert(p(path), a.mode);
        Ok(())
    }
    fn dir_done(&mut self, _: &[u8], _: &Attr) -> std::io::Result<()> {
        Ok(())
    }
    fn file(&mut self, path: &[u8], _: &Attr) -> std::io::Result<()> {
        self.current = Some((p(path), Vec::new()));
        Ok(())
    }
    fn data(&mut self, off: u64, data: &[u8]) -> std::io::Result<()> {
        let (_, buf) = self.current.as_mut().unwrap();
        let end = off as usize + data.len();
        if buf.len() < end {
            buf.resize(end, 0);
        }
        buf[off as usize..end].copy_from_slice(data);
        Ok(())
    }
    fn file_done(&mut self, a: &Attr) -> std::io::Result<()> {
        let (path, mut buf) = self.current.take().unwrap();
        buf.resize(a.size as usize, 0);
        self.items.insert(path, Item::File(buf));
        Ok(())
    }
    fn hard_link(&mut self, path: &[u8], existing: &[u8]) -> std::io::Result<()> {
        self.items.insert(p(path), Item::Link(p(existing)));
        Ok(())
    }
    fn symlink(&mut self, path: &[u8], target: &[u8], _: &Attr) -> std::io::Result<()> {
        self.items.insert(p(path), Item::Symlink(target.to_vec()));
        Ok(())
    }
    fn special(&mut self, path: &[u8], _: &Attr) -> std::io::Result<()> {
        self.items.insert(p(path), Item::Dir);
        Ok(())
    }
}

/// Salvages the pool and checks the copy against the model: every model
/// item is saved as the model has it, or named (itself or a directory
/// above it) in the list of what was not saved; a hard link may come
/// first at either of its paths. Returns how many items were not saved.
fn salvage_matches(pool: &MemPool, m: &BTreeMap<String, Item>, what: &str) -> usize {
    let devs: Vec<Arc<dyn Device>> = pool.devs.iter().map(|d| d.clone() as Arc<dyn Device>).collect();
    let src = match Source::open(devs) {
        Ok(s) => s,
        Err(e) => {
            // Only when the store's roots are gone, and it says so.
            let msg = e.to_string();
            assert!(msg.contains("B-tree roots") || msg.contains("meta-file"), "{what}: {msg}");
            return m.len();
        }
    };
    let mut sink = MemSink::default();
    let rep = match src.salvage(&mut sink, &mut |_, _| {}) {
        Ok(r) => r,
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("root directory"), "{what}: {msg}");
            return m.len();
        }
    };
    let named = |path: &str| {
        rep.lost.iter().any(|(l, _)| path == l || path.starts_with(&format!("{}/", l.trim_end_matches('/'))))
    };
    let mut missing = 0;
    for (path, want) in m {
        let got = sink.items.get(path);
        let same = match (want, got) {
            (Item::Link(to), Some(Item::File(d))) => m.get(to) == Some(&Item::File(d.clone())),
            (Item::File(d), Some(Item::Link(to))) => {
                m.get(to).is_some_and(|t| matches!(t, Item::Link(x) if x == path))
                    && sink.items.get(to) == Some(&Item::File(d.clone()))
            }
            (w, Some(g)) => w == g,
            (_, None) => false,
        };
        if same {
            continue;
        }
        missing += 1;
        match got {
            // Saved with other bytes: only a file saved in part, its
            // unreadable ranges listed, and its readable bytes right.
            Some(Item::File(g)) => {
                let Item::File(w) = want else { panic!("{what}: {path}: saved as a file, is {want:?}") };
                let (_, why) = rep
                    .lost
                    .iter()
                    .find(|(l, _)| l == path)
                    .unwrap_or_else(|| panic!("{what}: {path}: saved with other bytes and not listed as damaged"));
                assert!(why.contains("saved in part"), "{what}: {path}: {why}");
                assert_eq!(g.len(), w.len(), "{what}: {path}: size");
                for (i, (a, b)) in g.chunks(BLOCK_SIZE).zip(w.chunks(BLOCK_SIZE)).enumerate() {
                    assert!(a == b || a.iter().all(|&x| x == 0), "{what}: {path}: block {i} has wrong bytes");
                }
            }
            Some(g) => panic!("{what}: {path}: saved as {g:?}, the model has {want:?}"),
            None => assert!(named(path), "{what}: {path} missing from the copy and not listed: {:?}", rep.lost),
        }
    }
    // Nothing saved that the model does not have (lost+found aside).
    for path in sink.items.keys() {
        assert!(
            path == "/" || m.contains_key(path) || path.starts_with("/lost+found"),
            "{what}: {path} saved, not in the model"
        );
    }
    assert_eq!(rep.is_complete(), rep.lost.is_empty());
    src.close().unwrap();
    missing
}

#[test]
fn one_bad_copy_of_a_meta_file_block_loses_nothing_and_fsck_repairs_it() {
    let (base, m) = pool();
    let (blocks, copies) = meta_shape(&base);
    assert!(copies >= 2, "the meta-file is replicated on a pool of three devices");
    let mut reported = 0;
    for fblk in (1..blocks).step_by((blocks as usize / 6).max(1)) {
        let what = format!("block {fblk} of {blocks}, one copy of {copies}");
        let pool = copy_of(&base);
        flip(&pool, fblk, &[0]);
        let fs =
            pool.open_with(hurricane::Options { read_only: true, ..quiet() }).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(unreadable(&fs, &m).is_empty(), "{what}");
        let r = fsck::check(&fs, false, &mut |_, _, _| {}).unwrap();
        assert!(r.is_complete(), "{what}: {:?}", r.incomplete);
        fs.close().unwrap();
        assert_eq!(salvage_matches(&pool, &m, &what), 0, "{what}");
        let fs = pool.open().unwrap();
        let r = fsck::check(&fs, false, &mut |_, _, _| {}).unwrap();
        // Block 0 is redb's header: a commit rewrites it on every copy.
        if r.meta_damaged > 0 {
            reported += 1;
            // Redundancy lost, nothing else: reported, not a problem.
            assert!(r.is_clean(), "{what}: {:?}", r.problems);
            assert!(r.notes.iter().any(|x| x.contains("wrong on a copy")), "{what}: {:?}", r.notes);
            let r = fsck::check(&fs, true, &mut |_, _, _| {}).unwrap();
            assert!(r.is_clean(), "{what}: {:?} {:?}", r.remaining, r.incomplete);
            assert!(r.repaired.iter().any(|x| x.contains("meta-file")), "{what}: {:?}", r.repaired);
        }
        let r = fsck::check(&fs, false, &mut |_, _, _| {}).unwrap();
        assert!(r.is_clean() && r.meta_damaged == 0, "{what}: {:?} {:?}", r.remaining, r.incomplete);
        assert!(unreadable(&fs, &m).is_empty(), "{what}");
        fs.close().unwrap();
    }
    assert!(reported > 0, "no bad copy was ever reported");
}

#[test]
fn a_meta_file_block_bad_on_every_copy_is_never_called_consistent_and_salvage_saves_the_rest() {
    let (base, m) = pool();
    let (blocks, copies) = meta_shape(&base);
    let every: Vec<usize> = (0..copies).collect();
    let (mut trials, mut lost_files, mut not_open) = (0, 0, 0);
    // Items unreadable through the open pool, and not saved by salvage.
    let (mut unread_total, mut missing_total) = (0, 0);
    for fblk in (1..blocks).step_by((blocks as usize / 24).max(1)) {
        trials += 1;
        let what = format!("block {fblk} of {blocks}, all {copies} copies");
        let pool = copy_of(&base);
        flip(&pool, fblk, &every);
        match pool.open() {
            Err(e) => {
                not_open += 1;
                let msg = e.to_string();
                assert!(msg.contains("meta-file") || msg.contains("meta-data"), "{what}: {msg}");
            }
            Ok(fs) => {
                let bad = unreadable(&fs, &m);
                let before: Vec<Vec<u8>> = pool.devs.iter().map(|d| d.image()).collect();
                let r = fsck::check(&fs, false, &mut |_, _, _| {}).unwrap();
                // A block nothing the store reaches uses (a free page) is
                // a note; one it uses is never called consistent.
                assert!(r.meta_lost.contains(&fblk) || r.meta_unused.contains(&fblk), "{what}: {:?}", r.meta_lost);
                if r.is_clean() {
                    assert!(bad.is_empty(), "{what}: called consistent with {} items unreadable", bad.len());
                    assert!(r.meta_unused.contains(&fblk), "{what}");
                }
                assert_eq!(r.meta_lost.is_empty(), r.meta_unused.contains(&fblk), "{what}");
                if !bad.is_empty() {
                    lost_files += 1;
                }
                unread_total += bad.len();
                // Never space owned by nothing when the meta-data is incomplete.
                assert_eq!(r.would_free, 0, "{what}: {:?}", r.problems);
                assert!(!r.problems.iter().any(|x| x.contains("owned by nothing")), "{what}: {:?}", r.problems);
                // An unforced repair changes nothing.
                let complete = r.is_complete();
                let r = fsck::check_with(&fs, FsckOptions { repair: true, force: false }, &mut |_, _, _| {}).unwrap();
                assert!(r.repaired.is_empty(), "{what}: repaired {:?}", r.repaired);
                if !complete {
                    assert!(r.notes.iter().any(|n| n.contains("nothing was repaired")), "{what}: {:?}", r.notes);
                }
                assert_eq!(unreadable(&fs, &m), bad, "{what}: the repair lost more");
                // The devices hold what they held, apart from superblocks
                // (the pool is left open: a close writes a checkpoint).
                for (d, img) in pool.devs.iter().zip(&before) {
                    let now = d.image();
                    let diff: Vec<usize> = (2..now.len() / BLOCK_SIZE)
                        .filter(|&b| {
                            now[b * BLOCK_SIZE..(b + 1) * BLOCK_SIZE] != img[b * BLOCK_SIZE..(b + 1) * BLOCK_SIZE]
                        })
                        .collect();
                    assert!(diff.is_empty(), "{what}: {} written: blocks {diff:?}", d.name());
                }
                drop(fs);
            }
        }
        let missing = salvage_matches(&pool, &m, &what);
        if pool.open().is_ok() {
            missing_total += missing;
        }
    }
    eprintln!(
        "{trials} trials: {lost_files} lost items through the open pool ({unread_total} items), {not_open} did not open; salvage left {missing_total} of those items"
    );
    assert!(lost_files > 0, "no trial damaged a block in use: the test proves nothing");
    // Salvage reads past the damage where the pool's own reads stop (the
    // store refuses every read after its first I/O error).
    assert!(missing_total < unread_total, "salvage saved no more than the open pool reads");
}

/// The salvage of an undamaged pool is the model, whole; the pool is not
/// written.
#[test]
fn salvage_of_an_intact_pool_is_the_model() {
    let (base, m) = pool();
    let before: Vec<Vec<u8>> = base.devs.iter().map(|d| d.image()).collect();
    assert_eq!(salvage_matches(&base, &m, "intact"), 0);
    for (d, img) in base.devs.iter().zip(&before) {
        assert!(d.image() == *img, "{} written by a salvage", d.name());
    }
}

/// A directory whose entries cannot be read in cookie order is listed
/// from the names table, and files whose directory cannot be read at all
/// are saved under lost+found by inode number.
#[test]
fn salvage_finds_entries_by_name_and_unreached_files_by_inode() {
    let (base, m) = pool();
    let (blocks, copies) = meta_shape(&base);
    let every: Vec<usize> = (0..copies).collect();
    let mut by_inode = 0;
    for fblk in 1..blocks {
        let pool = copy_of(&base);
        flip(&pool, fblk, &every);
        let devs: Vec<Arc<dyn Device>> = pool.devs.iter().map(|d| d.clone() as Arc<dyn Device>).collect();
        let Ok(src) = Source::open(devs) else { continue };
        let mut sink = MemSink::default();
        let Ok(rep) = src.salvage(&mut sink, &mut |_, _| {}) else { continue };
        for (path, item) in &sink.items {
            if let (Some(_), Item::File(d)) = (path.strip_prefix("/lost+found/#"), item) {
                assert!(m.values().any(|x| x == &Item::File(d.clone())), "block {fblk}: {path} is no model file");
                by_inode += 1;
            }
        }
        assert_eq!(rep.unreachable > 0, sink.items.keys().any(|k| k.starts_with("/lost+found/")));
    }
    eprintln!("{by_inode} files saved by inode number over {blocks} damaged blocks");
    assert!(by_inode > 0, "no file was saved by inode number");
}
