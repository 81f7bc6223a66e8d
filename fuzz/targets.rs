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
use hurricane::namespace::{Body, Dir, InodeData, State};
use hurricane::pool::{Allocator, Storage, Superblock};
use std::sync::Arc;

/// A target's body.
pub type Target = fn(&[u8]);

/// Every target, by the name of its binary and corpus directory.
pub const TARGETS: &[(&str, Target)] = &[
    ("superblock", superblock),
    ("journal_payload", journal_payload),
    ("journal_replay", journal_replay),
    ("layout_decode", layout_decode),
    ("checkpoint", checkpoint),
    ("inode", inode),
    ("layout_spec", layout_spec),
];

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

/// A state with a root directory, as after loading a checkpoint.
fn fresh_state() -> State {
    let st = State::new(4);
    st.insert(
        1,
        InodeData {
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
            body: Body::Dir(Dir::new(1)),
        },
    );
    st
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
    // The state must still encode and load back.
    let mut e = Encoder::new();
    st.encode(&mut e);
    let _ = State::new(2).decode(&e.buf);
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
        devs: vec![DeviceHandle::new(0, dev.clone() as Arc<dyn Device>)],
        allocs: vec![Allocator::new(0, JBLOCKS)],
    };
    let region = Region { dev: 0, start: 0, blocks: JBLOCKS };
    let salt = 0x5eed;
    let start = Cursor { tail: 3, head: 3, seq: 7 };
    let mut c = start;
    while let Ok(len) = d.u16() {
        let Ok(p) = d.take((len as usize).min(d.remaining())) else { break };
        if !journal::fits(&region, &c, p.len()) {
            break;
        }
        if journal::append(&storage, &region, salt, &mut c, p).is_err() {
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
    let Ok((records, end)) = journal::replay(&storage, &region, salt, start) else { return };
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
    let storage =
        Storage { devs: vec![DeviceHandle::new(0, dev as Arc<dyn Device>)], allocs: vec![Allocator::new(0, 64)] };
    let sink = |_: NodeRecord| {};
    let io = IoCtx { storage: &storage, epoch: 0, sink: &sink };
    let mut buf = vec![0u8; 2 * BLOCK_SIZE];
    let _ = l.root().read(&io, 0, &mut buf);
    let _ = l.root().next_data(0);
}

/// A meta-file checkpoint (inode records and directory blocks).
pub fn checkpoint(data: &[u8]) {
    let st = State::new(4);
    if st.decode(data).is_err() {
        return;
    }
    let mut e = Encoder::new();
    st.encode(&mut e);
    let st2 = State::new(2);
    st2.decode(&e.buf).expect("re-encoded checkpoint decodes");
    assert_eq!(st.count(), st2.count(), "checkpoint round trip");
}

/// One inode record.
pub fn inode(data: &[u8]) {
    let mut d = Decoder::new(data, "fuzz");
    let Ok(n) = InodeData::decode(&mut d) else { return };
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
