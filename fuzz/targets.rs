//! The fuzz targets' bodies, shared by the cargo-fuzz binaries in
//! `fuzz_targets/` and by the stable corpus replay in the workspace tests
//! (`crates/hurricane/tests/hostile.rs` includes this file). Each takes
//! arbitrary bytes and must return without panicking, without allocating
//! beyond what the input justifies, and in time proportional to the input.
//!
//! Where a decoder accepts its input, the target also checks that encoding
//! the result and decoding it again gives the same thing back.

use hurricane::blocks::{IoCtx, Layout, NodeRecord};
use hurricane::codec::{Decoder, Encoder};
use hurricane::device::{Device, DeviceHandle, MemDevice, BLOCK_SIZE};
use hurricane::journal::{self, Cursor, Op, Region};
use hurricane::layout::{self, PoolInfo};
use hurricane::namespace::store::{Delta, MetaFile, MetaStore, Sys};
use hurricane::namespace::{Body, Dir, InodeData, State};
use hurricane::pool::{Allocator, Storage, Superblock};
use hurricane::{FormatOptions, Fs, Options};
use std::sync::{Arc, OnceLock};

/// A target's body.
pub type Target = fn(&[u8]);

/// Every target, by the name of its binary and corpus directory.
pub const TARGETS: &[(&str, Target)] = &[
    ("superblock", superblock),
    ("journal_payload", journal_payload),
    ("journal_replay", journal_replay),
    ("layout_decode", layout_decode),
    ("store", store),
    ("store_sys", store_sys),
    ("inode", inode),
    ("layout_spec", layout_spec),
    ("superblock_open", superblock_open),
    ("scrub_pos", scrub_pos),
    ("log_summary", log_summary),
    ("pool_description", pool_description),
    ("pool_conf", pool_conf),
    ("posix_acl", posix_acl),
];

/// A POSIX ACL attribute value, as any caller may set it through setxattr:
/// decoded and checked; an accepted ACL encodes back to the same bytes
/// (less the ids of entries that name nobody) and goes through the access
/// check, chmod and creation without panicking.
pub fn posix_acl(data: &[u8]) {
    use hurricane::namespace::acl::Acl;
    let Ok(Some(a)) = Acl::decode(data) else { return };
    let v = a.encode();
    assert_eq!(v.len(), data.len(), "an accepted ACL keeps its entries");
    assert_eq!(Acl::decode(&v).expect("a re-encoded ACL decodes").as_ref(), Some(&a), "ACL round trip");
    for want in 0..8 {
        let _ = a.permits(1000, |g| g == 100, 100, want);
    }
    let mode = a.mode_of(libc::S_IFREG | 0o7777);
    let mut b = a.clone();
    b.chmod(mode);
    assert_eq!(b.mode_of(mode), mode, "chmod keeps the ACL and the mode in step");
    let (m, acl) = a.create(libc::S_IFREG | 0o666);
    assert_eq!(m & !0o777, libc::S_IFREG);
    assert_eq!(acl.is_none(), a.is_minimal());
}

/// A pool directory's `pool.conf`, which its owner (perhaps not the user
/// who opens the pool) may write anything into: its lines are checked
/// before anything in it is taken.
pub fn pool_conf(data: &[u8]) {
    use hurricane::pool::{check_text, classify, device_of, Line};
    let text = String::from_utf8_lossy(data);
    match check_text(&text, "pool.conf") {
        // Every line taken is one the file may hold.
        Ok(()) => {
            for line in text.lines().map(str::trim) {
                let kind = classify(line).expect("an accepted line is classified");
                assert!(kind != Line::Device || device_of(line).is_some_and(|d| !d.is_empty()), "{line:?}");
                assert!(!line.contains('\0'), "{line:?}");
            }
        }
        // A refusal names the line.
        Err(e) => assert!(e.to_string().contains("pool.conf line "), "{e}"),
    }
}

/// A pool's description as read from its Ceph cluster (the object
/// `hurricane.pool.NAME`), taken as a host's pool.conf.
pub fn pool_description(data: &[u8]) {
    use hurricane::pool::published::{take, Locator};
    let loc = Locator { pool: "hfs".into(), name: "web".into(), conf: "/etc/ceph/mine.conf".into() };
    let local = "# this host\nnuma = 0 1\n";
    if let Ok((text, d)) = take(data, &loc, local) {
        // What is taken names this pool, and taking it again changes nothing.
        assert_eq!(d.name.as_deref(), Some("web"));
        let (again, d2) = take(text.as_bytes(), &loc, local).expect("a description taken once is taken again");
        assert_eq!(again, text, "pool description round trip");
        assert_eq!((d2.id, d2.revision), (d.id, d.revision));
    }
}

/// A block read where a `log` summary may stand (roll-forward's walk).
pub fn log_summary(data: &[u8]) {
    use hurricane::blocks::log::Summary;
    if let Some(s) = Summary::decode(data) {
        // Only a whole block decodes, and it is written back byte for byte.
        assert_eq!(s.encode(), data, "log summary round trip");
    }
    let mut blk = data.to_vec();
    blk.resize(BLOCK_SIZE, 0);
    if let Some(s) = Summary::decode(&blk) {
        assert_eq!(Summary::decode(&s.encode()), Some(s));
    }
}

/// A scrub position file (`POOL/scrub.pos`) as read back to resume a scrub.
pub fn scrub_pos(data: &[u8]) {
    if let Ok(rec) = hurricane::fs::PositionRecord::decode(data) {
        // What decodes is written back byte for byte, and decodes the same.
        let text = rec.encode();
        assert_eq!(text.as_bytes(), data, "scrub position round trip");
        assert_eq!(hurricane::fs::PositionRecord::decode(text.as_bytes()), Ok(rec));
    }
}

/// A superblock slot as read from a device.
pub fn superblock(data: &[u8]) {
    let mut blk = data.to_vec();
    blk.resize(BLOCK_SIZE, 0);
    if let Ok(Some(sb)) = Superblock::decode(&blk, "fuzz") {
        // What decodes re-encodes to an identical, valid slot.
        if let Ok(b) = sb.encode() {
            let again = Superblock::decode(&b, "fuzz").ok().flatten();
            assert_eq!(again.as_ref(), Some(&sb), "superblock round trip");
        }
        let _ = Layout::decode(&mut Decoder::new(&sb.meta_layout, "meta-file layout"));
    }
    // Short and long buffers are refused or decoded, never a panic.
    let _ = Superblock::decode(data, "fuzz");
}

/// A state over a store with a root directory, as a new pool has.
fn fresh_state() -> State {
    let root = InodeData {
        mode: libc::S_IFDIR | 0o755,
        uid: 0,
        gid: 0,
        nlink: 2,
        size: 0,
        atime: 0,
        mtime: 0,
        ctime: 0,
        btime: 0,
        rdev: 0,
        xattrs: Default::default(),
        body: Body::Dir(Box::new(Dir::new(1))),
    };
    let mut e = Encoder::new();
    root.encode(&mut e);
    let store = MetaStore::scratch(e.into_inner()).expect("a scratch store");
    State::new(Arc::new(store), 4, 64).expect("a state over it")
}

/// A journal record's payload: decoded into ops, which are then replayed
/// into a state as recovery would (errors allowed, panics not).
pub fn journal_payload(data: &[u8]) {
    let Ok(groups) = journal::decode_payload(data) else { return };
    // Round trip: re-encoding the ops gives a payload that decodes the same.
    let mut e = Encoder::new();
    e.u32(groups.len() as u32);
    for g in &groups {
        let mut ge = Encoder::new();
        ge.u32(g.len() as u32);
        for op in g {
            op.encode(&mut ge);
        }
        e.bytes(&ge.buf);
    }
    let again = journal::decode_payload(&e.buf).expect("re-encoded payload decodes");
    assert_eq!(again, groups, "journal payload round trip");
    replay_ops(&groups);
}

fn replay_ops(groups: &[Vec<Op>]) {
    let st = fresh_state();
    for op in groups.iter().flatten() {
        if st.replay(op).is_err() {
            break;
        }
    }
    // What replay left must commit to the store and read back the same.
    let mut delta = Delta::default();
    let _ = st.take(&mut delta);
    st.store().commit(&delta, true).expect("a replayed state commits");
    let again = State::new(st.store().clone(), 2, 64).expect("the store reopens");
    assert_eq!(again.count(), st.count(), "inode count after a commit");
    for ino in st.inos().expect("inode list") {
        let (a, b) = (st.get(ino), again.get(ino));
        assert_eq!(a.is_some(), b.is_some(), "inode {ino} after a commit");
        if let (Some(a), Some(b)) = (a, b) {
            let (mut ea, mut eb) = (Encoder::new(), Encoder::new());
            a.data.read().encode(&mut ea);
            b.data.read().encode(&mut eb);
            assert_eq!(ea.buf, eb.buf, "inode {ino} record after a commit");
        }
    }
}

/// Input: a u8 count of corruptions, each (u16 block-relative offset, u8
/// block, u8 xor), then length-prefixed (u16) payloads. The payloads are
/// appended as records to a journal on a memory device, the corruptions are
/// applied to the device, and the journal is replayed and decoded.
pub fn journal_replay(data: &[u8]) {
    const JBLOCKS: u64 = 24;
    let mut d = Decoder::new(data, "fuzz");
    let Ok(nc) = d.u8() else { return };
    let mut corrupt = Vec::new();
    for _ in 0..nc.min(16) {
        let (Ok(off), Ok(blk), Ok(x)) = (d.u16(), d.u8(), d.u8()) else { return };
        corrupt.push((off as usize % BLOCK_SIZE, blk as u64 % JBLOCKS, x));
    }
    let dev = Arc::new(MemDevice::new("fuzz", JBLOCKS * BLOCK_SIZE as u64));
    let storage = Storage {
        devs: vec![DeviceHandle::new(0, dev.clone() as Arc<dyn Device>)].into(),
        allocs: vec![Allocator::new(0, JBLOCKS)].into(),
    };
    let region = Region { dev: 0, start: 0, blocks: JBLOCKS };
    let copies = journal::Copies { regions: vec![region], salt: 0x5eed, epoch: 3 };
    let start = Cursor { tail: 3, head: 3, seq: 7 };
    let mut c = start;
    while let Ok(len) = d.u16() {
        let Ok(p) = d.take((len as usize).min(d.remaining())) else { break };
        if !journal::fits(&region, &c, p.len()) {
            break;
        }
        if journal::append(&storage, &copies, &mut c, p, journal::Order::Ordered).is_err() {
            break;
        }
    }
    for (off, blk, x) in corrupt {
        let mut b = [0u8; 1];
        let at = blk * BLOCK_SIZE as u64 + off as u64;
        if dev.read_at(&mut b, at).is_ok() {
            let _ = dev.write_at(&[b[0] ^ x], at);
        }
    }
    let Ok(rp) = journal::replay(&storage, &copies, start, 0) else { return };
    let (records, end) = (rp.records, rp.end);
    assert!(end.head < JBLOCKS && end.seq >= start.seq, "replay cursor in range");
    for r in &records {
        if let Ok(groups) = journal::decode_payload(r) {
            replay_ops(&groups);
        }
    }
}

/// A block record (an encoded layout tree with its mapping state).
pub fn layout_decode(data: &[u8]) {
    let Ok(l) = Layout::decode(&mut Decoder::new(data, "fuzz")) else { return };
    let mut e = Encoder::new();
    l.encode(&mut e);
    let l2 = Layout::decode(&mut Decoder::new(&e.buf, "fuzz")).expect("re-encoded layout decodes");
    let mut e2 = Encoder::new();
    l2.encode(&mut e2);
    assert_eq!(e.buf, e2.buf, "layout round trip");
    let _ = l.spec().to_string();
    let mut n = 0u64;
    l.extents(&mut |_, _, len| n = n.saturating_add(len));
    // Reading through a decoded tree stays within the devices it names.
    let dev = Arc::new(MemDevice::new("fuzz", 64 * BLOCK_SIZE as u64));
    let storage = Storage {
        devs: vec![DeviceHandle::new(0, dev as Arc<dyn Device>)].into(),
        allocs: vec![Allocator::new(0, 64)].into(),
    };
    let sink = |_: NodeRecord| {};
    let io = IoCtx {
        owner: 0,
        origin: hurricane::blocks::Origin::NONE,
        storage: &storage,
        epoch: 0,
        sink: &sink,
        repair: true,
    };
    let mut buf = vec![0u8; 2 * BLOCK_SIZE];
    let _ = l.root().read(&io, 0, &mut buf);
    let _ = l.root().next_data(0);
}

/// A meta-file image: the meta-data store opened over it, then its records
/// read and decoded as a pool would. Errors are allowed; redb's own
/// assertions on damaged input are caught at the store's boundary
/// (`store.rs`, `guarded`) and become errors. Replayed with mutations by the
/// workspace tests only: a libFuzzer binary aborts on any panic, caught or
/// not, and redb sizes some of its structures by header fields, beyond the
/// fuzzer's allocation limit.
pub fn store(data: &[u8]) {
    let Ok(store) = open_image(data) else { return };
    if let Ok(sys) = store.sys() {
        let _ = Sys::decode(&sys_bytes(&sys));
    }
    let _ = store.free_map();
    let _ = store.orphans();
    let Ok(inos) = store.inos() else { return };
    for ino in inos.into_iter().take(256) {
        let Ok(Some(rec)) = store.inode(ino) else { continue };
        let mut d = Decoder::new(&rec, "fuzz");
        let Ok(n) = InodeData::decode(&mut d) else { continue };
        let _ = n.layout();
        if n.is_dir() {
            let mut seen = 0;
            let _ = store.entries_from(ino, 0, &mut |_, name, _, _| {
                let _ = store.lookup(ino, name);
                seen += 1;
                Ok(seen < 256)
            });
        }
    }
}

fn sys_bytes(s: &Sys) -> Vec<u8> {
    let mut e = Encoder::new();
    e.u32(hurricane::namespace::store::STORE_VERSION).u64(s.cursor.tail).u64(s.cursor.head).u64(s.cursor.seq);
    e.u64(s.next_ino).u64(s.inodes).u64(s.epoch);
    e.into_inner()
}

/// The store's `sys` record (journal cursor, next inode, inode count,
/// epoch; store version 1 without the epoch).
pub fn store_sys(data: &[u8]) {
    let Ok(s) = Sys::decode(data) else { return };
    let again = Sys::decode(&sys_bytes(&s)).expect("re-encoded sys record decodes");
    assert_eq!(again, s, "sys record round trip");
}

/// A meta-data store over a copy of `image` on a memory device.
pub fn open_image(image: &[u8]) -> hurricane::Result<MetaStore> {
    let size = (image.len() as u64).div_ceil(BLOCK_SIZE as u64) * BLOCK_SIZE as u64;
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new("image", size + (64 << 10)));
    let h = DeviceHandle::new(0, dev);
    let blocks = h.blocks();
    let storage = Arc::new(Storage { devs: vec![h].into(), allocs: vec![Allocator::new(2, blocks)].into() });
    let spec = hurricane::blocks::Spec { kind: "extent".into(), params: vec![], children: vec![], device: Some(0) };
    let layout = Layout::build(&spec)?;
    let mut padded = image.to_vec();
    padded.resize(size as usize, 0);
    if !padded.is_empty() {
        let sink = |_: NodeRecord| {};
        let io = IoCtx {
            owner: 0,
            origin: hurricane::blocks::Origin::NONE,
            storage: &storage,
            epoch: 0,
            sink: &sink,
            repair: false,
        };
        layout.root().write(&io, 0, &padded)?;
    }
    let file = MetaFile::unchecked(storage, layout, image.len() as u64);
    MetaStore::open(file, 1 << 20, 0, 1)
}

/// One inode record.
pub fn inode(data: &[u8]) {
    let mut d = Decoder::new(data, "fuzz");
    let Ok(n) = InodeData::decode(&mut d) else { return };
    // A file's tree is built on first use: build it, so its decoder runs too.
    let _ = n.layout();
    let _ = attr_blocks(&n);
    let mut e = Encoder::new();
    n.encode(&mut e);
    let mut d2 = Decoder::new(&e.buf, "fuzz");
    let n2 = InodeData::decode(&mut d2).expect("re-encoded inode decodes");
    let mut e2 = Encoder::new();
    n2.encode(&mut e2);
    assert_eq!(e.buf, e2.buf, "inode round trip");
}

/// Layout spec text: parse, print, parse again; resolve against a pool of
/// three devices, print and parse the result; build the tree.
pub fn layout_spec(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(spec) = layout::parse(text) else { return };
    let printed = spec.to_string();
    let again = layout::parse(&printed)
        .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which does not parse: {e}"));
    assert_eq!(layout::canonical(again), layout::canonical(spec.clone()), "{text:?} printed as {printed:?}");
    let pool = PoolInfo::new(vec![1 << 20, 1 << 20, 1 << 20]);
    let Ok(r) = layout::resolve(&spec, &pool) else { return };
    let shown = r.to_string();
    let r2 = layout::parse(&shown)
        .unwrap_or_else(|e| panic!("resolved {text:?} printed as {shown:?}, which does not parse: {e}"));
    assert_eq!(r2, r, "resolved {text:?} printed as {shown:?}");
    if let Ok(l) = Layout::build(&r) {
        assert_eq!(l.spec(), r, "built tree of {text:?} prints back as {}", l.spec());
        let mut e = Encoder::new();
        l.encode(&mut e);
        Layout::decode(&mut Decoder::new(&e.buf, "fuzz")).expect("built layout decodes");
    }
}

/// Device images of a small pool with live journal records (a crash after
/// a sync), made once.
fn open_pool_images() -> &'static [Vec<u8>] {
    static IMAGES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    IMAGES.get_or_init(|| {
        use hurricane::device::CrashMode;
        let devs: Vec<Arc<MemDevice>> = (0..3).map(|i| Arc::new(MemDevice::new(format!("mem{i}"), 2 << 20))).collect();
        let dyns = || devs.iter().map(|d| d.clone() as Arc<dyn Device>).collect::<Vec<_>>();
        let fo = FormatOptions { journal_size: Some(256 << 10), ..Default::default() };
        Fs::format(dyns(), &fo).expect("format");
        let fs =
            Fs::open(dyns(), Options { background_commit: false, io_threads: 1, ..Default::default() }).expect("open");
        fs.mkdir_all("/d", 0o755).expect("mkdir");
        fs.write_file("/d/f", &[5u8; 20_000], Some("stripe(unit=4K,width=3)")).expect("write");
        fs.sync().expect("sync");
        drop(fs);
        devs.iter().map(|d| d.crash_image(CrashMode::KeepAll)).collect()
    })
}

/// Superblock fields changed on a real pool, checksums fixed up, then the
/// pool identified and opened. Input: a flags byte (bit 0: read-only), then
/// 9-byte edits: a selector (bits 0-3 the field, 4-5 the device, 3 meaning
/// all, bit 6 add to the field rather than set it, bit 7 only the newest
/// slot) and a little-endian u64 value. Open must refuse or succeed, never
/// panic or allocate by a field's value.
pub fn superblock_open(data: &[u8]) {
    let mut imgs = open_pool_images().to_vec();
    let mut d = Decoder::new(data, "fuzz");
    let Ok(flags) = d.u8() else { return };
    while let (Ok(sel), Ok(v)) = (d.u8(), d.u64()) {
        let devs = match (sel >> 4) & 3 {
            3 => 0..imgs.len(),
            i => i as usize..i as usize + 1,
        };
        for img in &mut imgs[devs] {
            let mut slots: Vec<(usize, Superblock)> = (0..2)
                .filter_map(|s| {
                    Superblock::decode(&img[s * BLOCK_SIZE..(s + 1) * BLOCK_SIZE], "fuzz")
                        .ok()
                        .flatten()
                        .map(|sb| (s, sb))
                })
                .collect();
            if sel & 0x80 != 0 {
                slots.sort_by_key(|(_, sb)| sb.generation);
                slots.drain(..slots.len().saturating_sub(1));
            }
            for (s, mut sb) in slots {
                edit(&mut sb, sel & 0xf, sel & 0x40 != 0, v);
                if let Ok(b) = sb.encode() {
                    img[s * BLOCK_SIZE..(s + 1) * BLOCK_SIZE].copy_from_slice(&b);
                }
            }
        }
    }
    let devs: Vec<Arc<dyn Device>> = imgs
        .into_iter()
        .enumerate()
        .map(|(i, img)| Arc::new(MemDevice::from_image(format!("mem{i}"), img)) as Arc<dyn Device>)
        .collect();
    let opts = Options { read_only: flags & 1 != 0, background_commit: false, io_threads: 1, ..Default::default() };
    if let Ok(fs) = Fs::open(devs, opts) {
        let _ = fs.read_dir("/d");
        let _ = fs.read_file("/d/f");
    }
}

/// One field of a superblock set to `v`, or moved by it.
fn edit(sb: &mut Superblock, field: u8, add: bool, v: u64) {
    fn put64(x: &mut u64, add: bool, v: u64) {
        *x = if add { x.wrapping_add(v) } else { v };
    }
    fn put32(x: &mut u32, add: bool, v: u64) {
        *x = if add { x.wrapping_add(v as u32) } else { v as u32 };
    }
    match field {
        0 => put32(&mut sb.version, add, v),
        1 => put32(&mut sb.dev_index, add, v),
        2 => put32(&mut sb.dev_count, add, v),
        3 => put32(&mut sb.block_size, add, v),
        4 => put64(&mut sb.dev_blocks, add, v),
        5 => put64(&mut sb.generation, add, v),
        6 => put32(&mut sb.journal.dev, add, v),
        7 => put64(&mut sb.journal.start, add, v),
        8 => put64(&mut sb.journal.blocks, add, v),
        9 => put64(&mut sb.cursor.tail, add, v),
        10 => put64(&mut sb.cursor.seq, add, v),
        11 => put64(&mut sb.meta_len, add, v),
        12 => put32(&mut sb.meta_crc, add, v),
        13 => sb.clean = v & 1 != 0,
        14 if !sb.meta_layout.is_empty() => {
            // One byte of the meta-file's layout record.
            let i = (v as usize) % sb.meta_layout.len();
            sb.meta_layout[i] = if add { sb.meta_layout[i] ^ (v >> 32) as u8 } else { (v >> 32) as u8 };
        }
        15 => {
            sb.default_layout = ["", "inline", "extent@7", "stripe(width=9)", "replicate(copies=0)", "garbage("]
                [(v % 6) as usize]
                .to_string()
        }
        _ => {}
    }
}

/// `st_blocks` of a file inode, from its record or its tree.
fn attr_blocks(n: &InodeData) -> Option<u64> {
    match &n.body {
        hurricane::namespace::Body::File(l) => l.sectors(n.size).ok(),
        _ => None,
    }
}
