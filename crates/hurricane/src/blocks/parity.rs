//! `parity`: Reed-Solomon over `data` + `parity` children (RAID-5/6 style):
//! any `parity` children may fail and every file block still reads.
//!
//! Geometry. With k = `data`, m = `parity`, n = k + m and u = `unit` in
//! blocks, *logical stripe* s holds file blocks [s*k*u, (s+1)*k*u) as k data
//! units. It is stored in a *physical stripe* p: child blocks [p*u, (p+1)*u)
//! of every child, shard j (data 0..k, then parity k..n) on child
//! (j + n - p % n) % n, so parity rotates left-symmetrically and reads spread
//! over all n children. The run map (persistent state) says which physical
//! stripe holds each logical one; runs of consecutive logical stripes in
//! consecutive physical stripes keep a sequential file to a few entries.
//!
//! Copy-on-write stripes, no write hole: every stripe write, full or partial,
//! goes to a fresh physical stripe (a partial one first reads the old stripe,
//! reconstructing if needed, and merges). Only after the units are written
//! does the node record `Map` and punch the old physical stripe in every
//! child, all in the request's journal group; a crash before the group
//! commits leaves the old mapping and the old stripe as they were (the
//! children's device space is freed only once the batch commits). A
//! physical stripe freed in batch epoch e is reused only by a request of a
//! later epoch, whose records the journal orders after the punch.
//!
//! Degraded writes: a stripe write succeeds when at least k units were
//! written; the children that missed it are recorded (`Missed`), reads treat
//! those units as lost, and a scrub (or a repairing read) rebuilds them.
//!
//! Concurrency: a striped table of read-write locks keyed by logical stripe.
//! Writers (and truncate) hold the locks of every logical stripe they touch
//! exclusively, readers and scrub hold them shared; several are always taken
//! in ascending slot order. A reader therefore never reads a physical stripe
//! a writer is replacing, and two writers of one logical stripe run one after
//! the other. The state mutex (run map, missed units, free list) is held only
//! to look up or change them, never during I/O. Repairs rewrite a unit in
//! place with the content it must hold, so they run under the shared lock.

use super::common::span;
use super::{Block, BlockType, BuildArgs, Health, IoCtx, ParamKind, ParamSpec, Params, Scrub, Value, BLOCK_SIZE};
use crate::codec::{Decoder, Encoder};
use crate::device::DeviceState;
use crate::error::{Error, Result};
use parking_lot::{Mutex, RwLock};
use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};
use std::collections::BTreeMap;
use std::sync::Arc;

pub static TYPE: BlockType = BlockType {
    name: "parity",
    doc: "Reed-Solomon over data+parity children on distinct devices (RAID-5/6 with copy-on-write stripes): survives the loss of any `parity` children.",
    params: &[
        ParamSpec { key: "data", kind: ParamKind::Int, default: None, min: 1, max: 32, doc: "data units per stripe (k)" },
        ParamSpec {
            key: "parity",
            kind: ParamKind::Int,
            default: Some("1"),
            min: 1,
            max: 4,
            doc: "parity units per stripe (m): any m children may be lost",
        },
        ParamSpec {
            key: "unit",
            kind: ParamKind::Size,
            default: Some("4K"),
            min: BLOCK_SIZE as u64,
            max: 16 << 20,
            doc: "bytes of one unit on one child (a multiple of 4K)",
        },
    ],
    per_device: false,
    min_children: 2,
    max_children: 36,
    distinct_devices: true,
    width_param: None,
    implied_width: Some(implied_width),
    state_version: Some(1),
    in_metadata: false,
    build,
};

/// The number of children a `parity` spec without children asks for
/// (data + parity), for the layout resolver.
fn implied_width(params: &[(String, Value)]) -> Option<u64> {
    let get = |key: &str| {
        params.iter().find_map(|(k, v)| match v {
            Value::Num(n) if k == key => Some(*n),
            _ => None,
        })
    };
    Some(get("data")? + get("parity").unwrap_or(1))
}

/// Slots in the lock table (8 bytes each, per node: many files keep one).
const LOCKS: usize = 64;
/// Data bytes encoded and written in one batch (bounds the buffers).
const BATCH_BYTES: u64 = 4 << 20;
/// Data bytes a scrub step reads and checks at once: larger than a write's
/// batch because each Reed-Solomon decode call has a fixed cost (its
/// erasure locator over the whole field, about a millisecond) that small
/// steps of a rebuild paid hundreds of times per GiB.
const SCRUB_BATCH_BYTES: u64 = 16 << 20;
/// Requests at least this long reach the children in parallel.
const PARALLEL_MIN_BLOCKS: u64 = 64;
/// A small read of a lost unit rebuilds this many blocks of it around the
/// request (256 KiB) and keeps them for the reads that follow: one request
/// to each surviving child per window instead of one per 4 KiB read, which
/// on disks cost a seek each among the other readers' streams.
const REBUILT_WINDOW: u64 = 64;
/// Rebuilt windows kept per node.
const REBUILT: usize = 4;

/// A change to a parity node's state: its journal record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// Logical stripes [logical, logical+len) now live in physical stripes
    /// [physical, physical+len), replacing what held them.
    Map { logical: u64, physical: u64, len: u64 },
    /// Every logical stripe at or past `from` is dropped.
    Truncate { from: u64 },
    /// The children in `mask` did not receive physical stripes
    /// [physical, physical+len).
    Missed { physical: u64, len: u64, mask: u64 },
    /// The children in `mask` hold physical stripes [physical,
    /// physical+len) again (rebuilt).
    Repaired { physical: u64, len: u64, mask: u64 },
}

impl Change {
    fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        match *self {
            Change::Map { logical, physical, len } => e.u8(1).u64(logical).u64(physical).u64(len),
            Change::Truncate { from } => e.u8(2).u64(from),
            Change::Missed { physical, len, mask } => e.u8(3).u64(physical).u64(len).u64(mask),
            Change::Repaired { physical, len, mask } => e.u8(4).u64(physical).u64(len).u64(mask),
        };
        e.into_inner()
    }

    /// Strict: unknown tags, trailing bytes, empty or overflowing ranges and
    /// masks naming children the node does not have are corrupt.
    fn decode(b: &[u8], g: &Geometry) -> Result<Change> {
        let mut d = Decoder::new(b, "parity record");
        let c = match d.u8()? {
            1 => Change::Map { logical: d.u64()?, physical: d.u64()?, len: d.u64()? },
            2 => Change::Truncate { from: d.u64()? },
            3 => Change::Missed { physical: d.u64()?, len: d.u64()?, mask: d.u64()? },
            4 => Change::Repaired { physical: d.u64()?, len: d.u64()?, mask: d.u64()? },
            t => return Err(d.err(format!("unknown parity change {t}"))),
        };
        d.expect_end()?;
        let bad = |what: String| Error::corrupt("journal", format!("parity node {}: {what}", g.id));
        match c {
            Change::Map { logical, physical, len } => {
                if !g.run_ok(logical, physical, len) {
                    return Err(bad(format!("bad map of {len} stripes at {logical} -> {physical}")));
                }
            }
            Change::Truncate { .. } => {}
            Change::Missed { physical, len, mask } | Change::Repaired { physical, len, mask } => {
                let missed = matches!(c, Change::Missed { .. });
                if !g.phys_ok(physical, len) || !g.mask_ok(mask, missed) {
                    return Err(bad(format!("bad unit mask {mask:#x} over {len} stripes at {physical}")));
                }
            }
        }
        Ok(c)
    }
}

/// The numbers every part of the node computes with.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    id: u32,
    k: usize,
    m: usize,
    /// Unit length in blocks.
    unit: u64,
}

impl Geometry {
    fn n(&self) -> usize {
        self.k + self.m
    }
    fn all(&self) -> u64 {
        (1u64 << self.n()) - 1
    }
    /// File blocks in one logical stripe.
    fn sd(&self) -> u64 {
        self.k as u64 * self.unit
    }
    fn unit_bytes(&self) -> usize {
        self.unit as usize * BLOCK_SIZE
    }
    /// The child holding shard `j` of physical stripe `p`.
    fn child_of(&self, p: u64, j: usize) -> usize {
        let n = self.n();
        (j + n - (p % n as u64) as usize) % n
    }
    /// The shard child `c` holds in physical stripe `p`.
    fn shard_of(&self, p: u64, c: usize) -> usize {
        (c + (p % self.n() as u64) as usize) % self.n()
    }
    /// Children holding the shards of `mask` in stripe `p`.
    fn children_of(&self, p: u64, mask: u64) -> u64 {
        bits(mask).fold(0, |a, j| a | 1 << self.child_of(p, j))
    }
    /// Shards the children of `mask` hold in stripe `p`.
    fn shards_of(&self, p: u64, mask: u64) -> u64 {
        bits(mask).fold(0, |a, c| a | 1 << self.shard_of(p, c))
    }
    fn run_ok(&self, logical: u64, physical: u64, len: u64) -> bool {
        len > 0
            && logical.checked_add(len).and_then(|e| e.checked_mul(self.sd())).is_some()
            && self.phys_ok(physical, len)
    }
    fn phys_ok(&self, physical: u64, len: u64) -> bool {
        len > 0 && physical.checked_add(len).and_then(|e| e.checked_mul(self.unit)).is_some()
    }
    /// A missed mask names at most m children (a write that reached fewer
    /// than k failed); a repaired one any of them.
    fn mask_ok(&self, mask: u64, missed: bool) -> bool {
        mask != 0 && mask & !self.all() == 0 && (!missed || mask.count_ones() as usize <= self.m)
    }
}

/// `dst ^= src`. With one parity unit, Reed-Solomon's parity is the XOR of
/// the data units (`one_parity_unit_is_the_xor_of_the_data`), so m = 1
/// encodes, checks and rebuilds with this alone.
fn xor_into(dst: &mut [u8], src: &[u8]) {
    for (a, b) in dst.iter_mut().zip(src) {
        *a ^= *b;
    }
}

/// Indices of the set bits of `mask`, lowest first.
fn bits(mask: u64) -> impl Iterator<Item = usize> {
    (0..64).filter(move |&i| mask >> i & 1 == 1)
}

/// Bytes of scratch memory a thread keeps between batches (see [`Scratch`]).
const SCRATCH_KEEP: usize = 192 << 20;

/// Memory a thread reuses from one batch to the next: the per-child unit
/// buffers of reads, writes and scrubs, the shards joined for a coder call,
/// and the Reed-Solomon coders with their work space. Allocated afresh for
/// every batch, these megabytes came as new pages each time, zeroed by the
/// kernel and mapped again, which cost more CPU than the coding itself (a
/// rebuild of 1 GiB went through several GiB of new pages). Each thread
/// keeps at most [`SCRATCH_KEEP`] bytes. A scrub's worker threads live for
/// one chunk of a file, so its steps work in a scratch handed on through
/// [`Scrub::leftovers`] instead, freed with the pass.
///
/// A buffer ([`Buf`]) goes back to the thread's scratch when dropped. One
/// handed out again holds what it held before, possibly data of another
/// file: [`Parity::fetch`] zeroes every unit it does not read, so no unit
/// of a [`Fetched`] shows bytes that are not its own (the other buffers
/// are filled whole before use).
#[derive(Default)]
struct Scratch {
    free: Vec<Vec<u8>>,
    /// The coders and the bytes of work space each holds (an estimate).
    enc: Option<(ReedSolomonEncoder, usize)>,
    dec: Option<(ReedSolomonDecoder, usize)>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

impl Scratch {
    fn held(&self) -> usize {
        self.free.iter().map(|b| b.capacity()).sum::<usize>()
            + self.enc.as_ref().map_or(0, |e| e.1)
            + self.dec.as_ref().map_or(0, |d| d.1)
    }

    /// A buffer of `len` bytes: the thread's smallest free one that holds
    /// them (else its largest, grown). What it held before stays in it, and
    /// what it grows by is zero.
    fn buf(len: usize) -> Buf {
        let mut v = SCRATCH
            .with(|s| {
                let mut s = s.borrow_mut();
                let cap = |i: &usize| s.free[*i].capacity();
                let fits = (0..s.free.len()).filter(|i| cap(i) >= len).min_by_key(cap);
                let i = fits.or_else(|| (0..s.free.len()).max_by_key(cap));
                i.map(|i| s.free.swap_remove(i))
            })
            .unwrap_or_default();
        v.resize(len, 0);
        Buf(v)
    }

    /// Makes `s` the thread's scratch and returns what it was.
    fn swap(s: Scratch) -> Scratch {
        SCRATCH.with(|c| std::mem::replace(&mut *c.borrow_mut(), s))
    }

    /// Gives a buffer back for the thread's next batch (dropped instead
    /// while the thread ends).
    fn give(v: Vec<u8>) {
        if v.capacity() == 0 {
            return;
        }
        let _ = SCRATCH.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.held() + v.capacity() <= SCRATCH_KEEP {
                s.free.push(v);
            }
        });
    }

    /// Runs `f` with a coder set up for `k` + `m` shards of `len` bytes,
    /// the thread's own when it has one.
    fn coder<C: Coder, T>(id: u32, k: usize, m: usize, len: usize, f: impl FnOnce(&mut C) -> Result<T>) -> Result<T> {
        let mut c = match SCRATCH.with(|s| C::slot(&mut s.borrow_mut()).take()) {
            Some((mut c, _)) => c.setup(k, m, len).map(|()| c),
            None => C::create(k, m, len),
        }
        .map_err(|e| rs_err(id, e))?;
        let out = f(&mut c);
        let bytes = C::work_shards(k, m) * len;
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            if s.held() + bytes <= SCRATCH_KEEP {
                *C::slot(&mut s) = Some((c, bytes));
            }
        });
        out
    }
}

/// What [`Scratch::coder`] needs of a Reed-Solomon encoder or decoder.
trait Coder: Sized {
    fn create(k: usize, m: usize, len: usize) -> std::result::Result<Self, reed_solomon_simd::Error>;
    fn setup(&mut self, k: usize, m: usize, len: usize) -> std::result::Result<(), reed_solomon_simd::Error>;
    /// Shards of work space it holds (reed-solomon-simd's high and low rate
    /// coders): what the scratch counts.
    fn work_shards(k: usize, m: usize) -> usize;
    fn slot(s: &mut Scratch) -> &mut Option<(Self, usize)>;
}

impl Coder for ReedSolomonEncoder {
    fn create(k: usize, m: usize, len: usize) -> std::result::Result<Self, reed_solomon_simd::Error> {
        ReedSolomonEncoder::new(k, m, len)
    }
    fn setup(&mut self, k: usize, m: usize, len: usize) -> std::result::Result<(), reed_solomon_simd::Error> {
        self.reset(k, m, len)
    }
    fn work_shards(k: usize, m: usize) -> usize {
        k.next_multiple_of(m.next_power_of_two()).max(m.next_multiple_of(k.next_power_of_two()))
    }
    fn slot(s: &mut Scratch) -> &mut Option<(Self, usize)> {
        &mut s.enc
    }
}

impl Coder for ReedSolomonDecoder {
    fn create(k: usize, m: usize, len: usize) -> std::result::Result<Self, reed_solomon_simd::Error> {
        ReedSolomonDecoder::new(k, m, len)
    }
    fn setup(&mut self, k: usize, m: usize, len: usize) -> std::result::Result<(), reed_solomon_simd::Error> {
        self.reset(k, m, len)
    }
    fn work_shards(k: usize, m: usize) -> usize {
        (m.next_power_of_two() + k).next_power_of_two().max((k.next_power_of_two() + m).next_power_of_two())
    }
    fn slot(s: &mut Scratch) -> &mut Option<(Self, usize)> {
        &mut s.dec
    }
}

/// A buffer from the thread's [`Scratch`], given back to it when dropped.
#[derive(Default)]
struct Buf(Vec<u8>);

impl Drop for Buf {
    fn drop(&mut self) {
        Scratch::give(std::mem::take(&mut self.0));
    }
}

impl std::ops::Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::ops::DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl AsRef<[u8]> for Buf {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// `parts` one after the other in a scratch buffer.
fn join_scratch<'a>(parts: impl Iterator<Item = &'a [u8]> + Clone) -> Buf {
    let len = parts.clone().map(|p| p.len()).sum();
    let mut v = Scratch::buf(len);
    let mut at = 0;
    for p in parts {
        v[at..at + p.len()].copy_from_slice(p);
        at += p.len();
    }
    v
}

struct Parity {
    g: Geometry,
    children: Vec<Arc<dyn Block>>,
    /// Devices under each child (for health and messages).
    devices: Vec<Vec<u32>>,
    state: Mutex<State>,
    locks: Box<[RwLock<()>]>,
    /// Parts of lost units rebuilt by recent small reads (see `REBUILT`).
    rebuilt: Mutex<std::collections::VecDeque<Rebuilt>>,
}

/// A part of a lost unit rebuilt by a read: blocks [w0, w0 + len) of child
/// `child`'s unit in physical stripe `p`. A mapped physical stripe never
/// changes (writes go to fresh ones, repairs rewrite what it holds), so the
/// part stays right until the stripe is discarded, which drops it.
struct Rebuilt {
    p: u64,
    child: usize,
    w0: u64,
    data: Vec<u8>,
}

#[derive(Default)]
struct State {
    /// logical stripe -> (physical stripe, run length): disjoint runs.
    runs: BTreeMap<u64, (u64, u64)>,
    /// physical stripe -> (run length, children that missed it).
    missed: BTreeMap<u64, (u64, u64)>,
    /// Physical stripes [0, top) have been handed out; those above are new.
    top: u64,
    /// Free physical stripes below `top`: start -> (length, epoch freed in;
    /// 0 for those found free when the node was decoded).
    free: BTreeMap<u64, (u64, u64)>,
}

fn build(a: BuildArgs) -> Result<Arc<dyn Block>> {
    Ok(Arc::new(new_parity(a)?))
}

/// The node `a` describes.
fn new_parity(a: BuildArgs) -> Result<Parity> {
    let k = a.params.num("data")? as usize;
    let m = a.params.num("parity")? as usize;
    let bytes = a.params.num("unit")?;
    if bytes == 0 || !bytes.is_multiple_of(BLOCK_SIZE as u64) {
        return Err(Error::Layout(format!("parity: unit={bytes} is not a multiple of 4K")));
    }
    if k + m != a.children.len() {
        return Err(Error::Layout(format!(
            "parity: data={k} + parity={m} needs {} children, got {}",
            k + m,
            a.children.len()
        )));
    }
    if !ReedSolomonEncoder::supports(k, m) {
        return Err(Error::Layout(format!("parity: data={k}, parity={m} is not supported")));
    }
    let g = Geometry { id: a.id, k, m, unit: bytes / BLOCK_SIZE as u64 };
    let mut st = State::default();
    if let Some(s) = a.state {
        decode_state(s, &g, &mut st)?;
    }
    st.derive_free();
    let devices = a.children.iter().map(super::common::devices_under).collect();
    let locks = (0..LOCKS).map(|_| RwLock::new(())).collect();
    Ok(Parity {
        g,
        children: a.children,
        devices,
        state: Mutex::new(st),
        locks,
        rebuilt: Mutex::new(std::collections::VecDeque::new()),
    })
}

/// `u32 runs, (logical u64, physical u64, len u64)*, u32 missed, (physical
/// u64, len u64, mask u64)*`: runs sorted by logical stripe, disjoint in
/// both logical and physical stripes; missed ranges sorted, disjoint, inside
/// mapped physical stripes, each mask naming 1..=m children.
fn decode_state(s: &[u8], g: &Geometry, st: &mut State) -> Result<()> {
    let mut d = Decoder::new(s, "parity state");
    let count = d.count(24)?;
    let mut end = 0;
    let mut phys = Vec::with_capacity(count);
    for _ in 0..count {
        let (l, p, len) = (d.u64()?, d.u64()?, d.u64()?);
        if !g.run_ok(l, p, len) {
            return Err(d.err(format!("bad run: logical stripe {l}, physical {p}, {len} stripes")));
        }
        if l < end {
            return Err(d.err(format!("run at logical stripe {l} overlaps or is out of order")));
        }
        end = l + len;
        st.runs.insert(l, (p, len));
        phys.push((p, len));
    }
    phys.sort_unstable();
    if phys.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0) {
        return Err(d.err("two runs share physical stripes"));
    }
    let count = d.count(24)?;
    let mut end = 0;
    for _ in 0..count {
        let (p, len, mask) = (d.u64()?, d.u64()?, d.u64()?);
        if !g.phys_ok(p, len) || !g.mask_ok(mask, true) {
            return Err(d.err(format!("bad missed units: physical stripe {p}, {len} stripes, children {mask:#x}")));
        }
        if p < end {
            return Err(d.err(format!("missed units at physical stripe {p} overlap or are out of order")));
        }
        end = p + len;
        if !covered(&phys, p, len) {
            return Err(d.err(format!("missed units at physical stripes {p}+{len}, which hold no stripe")));
        }
        st.missed.insert(p, (len, mask));
    }
    d.expect_end()
}

/// [p, p+len) lies inside the sorted, disjoint ranges of `phys`.
fn covered(phys: &[(u64, u64)], p: u64, len: u64) -> bool {
    let mut pos = p;
    let end = p + len;
    let i = phys.partition_point(|&(s, l)| s + l <= p);
    for &(s, l) in &phys[i..] {
        if s > pos || pos >= end {
            break;
        }
        pos = s + l;
    }
    pos >= end
}

impl State {
    /// Applies a change (live and at replay alike); returns the physical
    /// ranges it unmapped. Replacing whatever was there makes replay
    /// idempotent.
    fn apply(&mut self, c: Change, all: u64) -> Vec<(u64, u64)> {
        match c {
            Change::Map { logical, physical, len } => {
                let old = self.unmap(logical, logical + len);
                self.insert(logical, physical, len);
                self.update_missed(physical, len, |_| 0);
                self.top = self.top.max(physical + len);
                // Stripes a replayed record names are not free.
                self.take_free(physical, len);
                old
            }
            Change::Truncate { from } => self.unmap(from, u64::MAX),
            Change::Missed { physical, len, mask } => {
                self.update_missed(physical, len, |x| (x | mask) & all);
                Vec::new()
            }
            Change::Repaired { physical, len, mask } => {
                self.update_missed(physical, len, |x| x & !mask);
                Vec::new()
            }
        }
    }

    /// Free physical stripes at decode: below the highest mapped one and
    /// not mapped, reusable by any request.
    fn derive_free(&mut self) {
        let mut phys: Vec<(u64, u64)> = self.runs.values().copied().collect();
        phys.sort_unstable();
        let mut pos = 0;
        self.free.clear();
        for (p, l) in phys {
            if p > pos {
                self.free.insert(pos, (p - pos, 0));
            }
            pos = p + l;
        }
        self.top = pos;
    }

    /// Mapped pieces of logical stripes [s, end): (logical, physical or
    /// None for a hole, length).
    fn pieces(&self, s: u64, end: u64) -> Vec<(u64, Option<u64>, u64)> {
        let mut out = Vec::new();
        let mut pos = s;
        let first = match self.runs.range(..=s).next_back() {
            Some((&l, &(_, len))) if l + len > s => l,
            _ => s,
        };
        for (&l, &(p, len)) in self.runs.range(first..end) {
            let a = l.max(s);
            let b = (l + len).min(end);
            if a > pos {
                out.push((pos, None, a - pos));
            }
            out.push((a, Some(p + (a - l)), b - a));
            pos = b;
        }
        if pos < end {
            out.push((pos, None, end - pos));
        }
        out
    }

    /// Makes logical stripe `l` a run boundary.
    fn split_at(&mut self, l: u64) {
        if let Some((&rl, &(rp, len))) = self.runs.range(..l).next_back() {
            if rl + len > l {
                self.runs.insert(rl, (rp, l - rl));
                self.runs.insert(l, (rp + (l - rl), rl + len - l));
            }
        }
    }

    /// Unmaps logical stripes [s, end); returns the physical ranges that held
    /// them (their missed units are forgotten).
    fn unmap(&mut self, s: u64, end: u64) -> Vec<(u64, u64)> {
        self.split_at(s);
        self.split_at(end);
        let keys: Vec<u64> = self.runs.range(s..end).map(|(&l, _)| l).collect();
        let mut out = Vec::with_capacity(keys.len());
        for l in keys {
            if let Some((p, len)) = self.runs.remove(&l) {
                out.push((p, len));
            }
        }
        for &(p, len) in &out {
            self.update_missed(p, len, |_| 0);
        }
        out
    }

    /// Maps [l, l+len) (unmapped) to [p, p+len), joining runs that continue it.
    fn insert(&mut self, l: u64, p: u64, len: u64) {
        let (mut l0, mut p0, mut n0) = (l, p, len);
        if let Some((&rl, &(rp, rn))) = self.runs.range(..l).next_back() {
            if rl + rn == l && rp + rn == p {
                self.runs.remove(&rl);
                (l0, p0, n0) = (rl, rp, rn + len);
            }
        }
        if let Some(&(np, nn)) = self.runs.get(&(l + len)) {
            if np == p + len {
                self.runs.remove(&(l + len));
                n0 += nn;
            }
        }
        self.runs.insert(l0, (p0, n0));
    }

    /// Replaces the missed mask x of every physical stripe in [p, p+len) by
    /// f(x), keeping the map in maximal runs of equal non-zero masks.
    fn update_missed(&mut self, p: u64, len: u64, f: impl Fn(u64) -> u64) {
        if self.missed.is_empty() && f(0) == 0 {
            return;
        }
        let end = p.saturating_add(len);
        for at in [p, end] {
            if let Some((&s, &(l, mk))) = self.missed.range(..at).next_back() {
                if s + l > at {
                    self.missed.insert(s, (at - s, mk));
                    self.missed.insert(at, (s + l - at, mk));
                }
            }
        }
        let mut pieces = Vec::new();
        let mut pos = p;
        let keys: Vec<u64> = self.missed.range(p..end).map(|(&s, _)| s).collect();
        for s in keys {
            if let Some((l, mk)) = self.missed.remove(&s) {
                if s > pos {
                    pieces.push((pos, s - pos, 0));
                }
                pieces.push((s, l, mk));
                pos = s + l;
            }
        }
        if pos < end {
            pieces.push((pos, end - pos, 0));
        }
        for (s, l, mk) in pieces {
            let nm = f(mk);
            if nm != 0 {
                self.missed.insert(s, (l, nm));
            }
        }
        // Join equal neighbours around the changed range.
        let from = self.missed.range(..p).next_back().map(|(&s, _)| s).unwrap_or(p);
        let keys: Vec<u64> = self.missed.range(from..=end).map(|(&s, _)| s).collect();
        let mut prev: Option<u64> = None;
        for s in keys {
            let Some(&(l, mk)) = self.missed.get(&s) else { continue };
            if let Some(ps) = prev {
                if let Some(&(pl, pm)) = self.missed.get(&ps) {
                    if ps + pl == s && pm == mk {
                        self.missed.remove(&s);
                        self.missed.insert(ps, (pl + l, pm));
                        continue;
                    }
                }
            }
            prev = Some(s);
        }
    }

    /// The children that missed physical stripe `p`.
    fn missed_at(&self, p: u64) -> u64 {
        match self.missed.range(..=p).next_back() {
            Some((&s, &(l, mk))) if s + l > p => mk,
            _ => 0,
        }
    }

    /// Hands out `want` consecutive physical stripes for logical stripes
    /// starting at `logical`: a free range freed in an epoch before `epoch`,
    /// else new ones at the top. The first stripe is congruent to `logical`
    /// modulo `n` (the children) where it can be, so a logical stripe's
    /// units sit on the children its number rotates them to, whatever
    /// history of copy-on-write rewrites moved it: neighbouring stripes
    /// then put their units on different children, as in a file written in
    /// one go. Stripes skipped at the top to align stay free for later
    /// requests. Past `limit` (physical stripes the children hold), or with
    /// no aligned fit below it, any free range of the epoch will do.
    fn alloc(&mut self, want: u64, epoch: u64, logical: u64, n: u64, limit: u64) -> u64 {
        let n = n.max(1);
        let align = |s: u64| s + (logical % n + n - s % n) % n;
        let aligned = self
            .free
            .iter()
            .find(|(&s, &(l, e))| e < epoch && align(s) + want <= s + l)
            .map(|(&s, &(l, e))| (s, l, e, align(s)));
        let top = align(self.top);
        let pick = match aligned {
            Some(p) => Some(p),
            None if top.saturating_add(want) <= limit => None,
            None => self.free.iter().find(|(_, &(l, e))| l >= want && e < epoch).map(|(&s, &(l, e))| (s, l, e, s)),
        };
        if let Some((s, l, e, a)) = pick {
            self.free.remove(&s);
            if a > s {
                self.free.insert(s, (a - s, e));
            }
            if s + l > a + want {
                self.free.insert(a + want, (s + l - a - want, e));
            }
            return a;
        }
        let a = if top.saturating_add(want) <= limit { top } else { self.top };
        if a > self.top {
            // Never written: free for any request.
            let gap = self.top;
            self.release(gap, a - gap, 0);
        }
        self.top = a + want;
        a
    }

    /// Physical stripes [p, p+len) are free again, reusable by requests of
    /// epochs after `epoch`.
    fn release(&mut self, p: u64, len: u64, epoch: u64) {
        let (mut s, mut l) = (p, len);
        if let Some((&ps, &(pl, pe))) = self.free.range(..p).next_back() {
            if ps + pl == p && pe == epoch {
                self.free.remove(&ps);
                (s, l) = (ps, pl + len);
            }
        }
        if let Some(&(nl, ne)) = self.free.get(&(p + len)) {
            if ne == epoch {
                self.free.remove(&(p + len));
                l += nl;
            }
        }
        self.free.insert(s, (l, epoch));
    }

    /// Removes [p, p+len) from the free list (a replayed map uses it).
    fn take_free(&mut self, p: u64, len: u64) {
        let end = p + len;
        let first = self.free.range(..=p).next_back().map(|(&s, _)| s).unwrap_or(p);
        let hits: Vec<(u64, u64, u64)> = self.free.range(first..end).map(|(&s, &(l, e))| (s, l, e)).collect();
        for (s, l, e) in hits {
            if s + l <= p {
                continue;
            }
            self.free.remove(&s);
            if s < p {
                self.free.insert(s, (p - s, e));
            }
            if s + l > end {
                self.free.insert(end, (s + l - end, e));
            }
        }
    }
}

/// What a fetch reads beyond the data asked for.
#[derive(Clone, Copy)]
struct Plan {
    /// Every unit of every stripe (scrub).
    full: bool,
    /// Children whose units count as lost (being rebuilt).
    extra_bad: u64,
    /// The blocks [w0, w0+wl) of each unit (the whole unit, or part of it
    /// for a one-stripe read): Reed-Solomon works position by position, so
    /// the same part of every unit rebuilds that part of a lost one.
    w0: u64,
    wl: u64,
}

/// Units read for a run of physical stripes [p0, p0+r).
struct Fetched {
    p0: u64,
    /// First block of each unit held, and the bytes held of each unit.
    w0: u64,
    ub: usize,
    /// Per child: its units of the run, stripe t at [t*ub, (t+1)*ub).
    bufs: Vec<Buf>,
    /// Per stripe: children whose unit was read.
    have: Vec<u64>,
    /// Per stripe: children whose unit is lost (down, missed, failed).
    bad: Vec<u64>,
    /// Per stripe: children whose read failed on a readable device.
    errored: Vec<u64>,
}

/// Runs `f` on each job, on helper threads when `parallel`; results
/// in job order.
fn run_all<J: Send, T: Send>(jobs: Vec<J>, parallel: bool, f: &(dyn Fn(J) -> T + Sync)) -> Vec<T> {
    if !parallel || jobs.len() < 2 {
        return jobs.into_iter().map(f).collect();
    }
    crate::helpers::scope(|s| {
        let mut it = jobs.into_iter();
        let first = it.next();
        let handles: Vec<_> = it.map(|j| s.spawn(move || f(j))).collect();
        let mut out = Vec::with_capacity(handles.len() + 1);
        // The calling thread takes one share instead of idling.
        if let Some(j) = first {
            out.push(f(j));
        }
        for h in handles {
            out.push(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        out
    })
}

/// A write error that means the child's device failed (the unit is missed
/// and the stripe degraded), as opposed to one that fails the request.
fn device_failure(e: &Error) -> bool {
    matches!(e, Error::Device(_) | Error::Io { .. } | Error::RawIo(_) | Error::Checksum(_))
}

fn rs_err(id: u32, e: reed_solomon_simd::Error) -> Error {
    Error::Invalid(format!("parity node {id}: reed-solomon: {e}"))
}

impl Parity {
    fn n(&self) -> usize {
        self.g.n()
    }

    /// Lock slots of logical stripes [s0, s1], ascending.
    fn slots(&self, s0: u64, s1: u64) -> Vec<usize> {
        if s1 - s0 >= LOCKS as u64 - 1 {
            return (0..LOCKS).collect();
        }
        let mut v: Vec<usize> = (s0..=s1).map(|s| (s % LOCKS as u64) as usize).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// "device 2 (img2)" for every device under the children of `mask`.
    fn names(&self, io: &IoCtx, mask: u64) -> String {
        let mut out = Vec::new();
        for c in bits(mask) {
            for &d in self.devices.get(c).map(|v| v.as_slice()).unwrap_or(&[]) {
                let name = io.storage.devs.get(d as usize).map(|h| h.name()).unwrap_or_default();
                out.push(format!("device {d} ({name})"));
            }
        }
        out.join(", ")
    }

    /// Children that cannot serve requests `ok` allows now (their data is
    /// lost with the devices that are not in such a state).
    fn down_mask(&self, io: &IoCtx, ok: fn(DeviceState) -> bool) -> u64 {
        let down = |d: u32| io.storage.devs.get(d as usize).is_none_or(|h| !ok(h.state()));
        let mut mask = 0;
        for (c, child) in self.children.iter().enumerate() {
            if child.health(&down) == Health::Lost {
                mask |= 1 << c;
            }
        }
        mask
    }

    /// Reads the units of physical stripes [p0, p0+r) that `want(t)` (data
    /// shards of stripe t) asks for, every surviving unit of a stripe that
    /// lost one of them, and with `full` every unit. Units of children in
    /// `extra_bad` count as lost. A failed read of a span is retried unit by
    /// unit, so one bad block loses one unit.
    fn fetch(&self, io: &IoCtx, p0: u64, r: usize, want: &dyn Fn(usize) -> u64, plan: Plan) -> Fetched {
        let g = &self.g;
        let (full, extra_bad) = (plan.full, plan.extra_bad);
        // Part of a unit only for one stripe: the child requests of a run
        // cover whole units.
        let (w0, wl) =
            if r == 1 && plan.w0 + plan.wl <= g.unit && plan.wl > 0 { (plan.w0, plan.wl) } else { (0, g.unit) };
        let (n, ub, all) = (self.n(), wl as usize * BLOCK_SIZE, g.all());
        let down = self.down_mask(io, DeviceState::readable);
        let bad: Vec<u64> = {
            let st = self.state.lock();
            (0..r).map(|t| st.missed_at(p0 + t as u64) | down | extra_bad).collect()
        };
        let mut f = Fetched {
            p0,
            w0,
            ub,
            bufs: (0..n).map(|_| Scratch::buf(r * ub)).collect(),
            have: vec![0; r],
            bad,
            errored: vec![0; r],
        };
        let wanted = |f: &Fetched, t: usize| -> u64 {
            let p = p0 + t as u64;
            let kids = g.children_of(p, want(t));
            if full || kids & f.bad[t] != 0 {
                all & !f.bad[t]
            } else {
                kids
            }
        };
        loop {
            let mut spans = Vec::new();
            for c in 0..n {
                let bit = 1u64 << c;
                let todo = |t: usize| wanted(&f, t) & bit != 0 && (f.have[t] | f.bad[t]) & bit == 0;
                if let (Some(lo), Some(hi)) = ((0..r).find(|&t| todo(t)), (0..r).rev().find(|&t| todo(t))) {
                    spans.push((c, lo, hi + 1));
                }
            }
            if spans.is_empty() {
                // The units not read hold zeros, not what the scratch
                // buffers held before.
                for (c, buf) in f.bufs.iter_mut().enumerate() {
                    for (t, unit) in buf.chunks_exact_mut(ub).enumerate() {
                        if f.have[t] >> c & 1 == 0 {
                            unit.fill(0);
                        }
                    }
                }
                return f;
            }
            let blocks: u64 = spans.iter().map(|&(_, lo, hi)| (hi - lo) as u64 * wl).sum();
            let mut jobs = Vec::with_capacity(spans.len());
            let mut rest: &mut [Buf] = &mut f.bufs;
            let mut base = 0;
            for &(c, lo, hi) in &spans {
                let (_, tail) = std::mem::take(&mut rest).split_at_mut(c - base);
                let (one, tail) = tail.split_at_mut(1);
                rest = tail;
                base = c + 1;
                jobs.push((c, lo, &mut one[0][lo * ub..hi * ub]));
            }
            // As `stripe` does: several children at once as soon as a
            // request spans a few units, so their devices work together.
            let parallel = blocks >= 4 * wl || blocks >= PARALLEL_MIN_BLOCKS;
            let results = run_all(jobs, parallel, &|(c, lo, buf): (usize, usize, &mut [u8])| {
                self.children[c].read(io, (p0 + lo as u64) * g.unit + w0, buf)
            });
            for (&(c, lo, hi), res) in spans.iter().zip(results) {
                let bit = 1u64 << c;
                if res.is_ok() {
                    for t in lo..hi {
                        if f.bad[t] & bit == 0 {
                            f.have[t] |= bit;
                        }
                    }
                    continue;
                }
                for t in lo..hi {
                    if wanted(&f, t) & bit == 0 || (f.have[t] | f.bad[t]) & bit != 0 {
                        continue;
                    }
                    let unit = &mut f.bufs[c][t * ub..(t + 1) * ub];
                    match self.children[c].read(io, (p0 + t as u64) * g.unit + w0, unit) {
                        Ok(()) => f.have[t] |= bit,
                        Err(e) => {
                            tracing::warn!(node = g.id, child = c, stripe = p0 + t as u64, error = %e, "parity unit read failed");
                            f.bad[t] |= bit;
                            f.errored[t] |= bit;
                        }
                    }
                }
            }
        }
    }

    /// Unit of shard `j` of stripe t in `f`.
    fn unit<'f>(&self, f: &'f Fetched, t: usize, j: usize) -> &'f [u8] {
        let ub = f.ub;
        &f.bufs[self.g.child_of(f.p0 + t as u64, j)][t * ub..(t + 1) * ub]
    }

    fn unit_mut<'f>(&self, f: &'f mut Fetched, t: usize, j: usize) -> &'f mut [u8] {
        let ub = f.ub;
        let c = self.g.child_of(f.p0 + t as u64, j);
        &mut f.bufs[c][t * ub..(t + 1) * ub]
    }

    /// The data shards of stripes `ts` of `f`, each the stripes' units of
    /// that shard one after another: what one encoder call takes.
    fn data_shards(&self, f: &Fetched, ts: &[usize]) -> Vec<Buf> {
        (0..self.g.k).map(|j| join_scratch(ts.iter().map(|&t| self.unit(f, t, j)))).collect()
    }

    /// Parity of `shards` (from [`Parity::data_shards`], units of `ub`
    /// bytes) in one encoder call: `out(i, j, unit)` gets parity unit j of
    /// the i-th stripe, straight from the encoder's output.
    fn encode(&self, shards: &[Buf], ub: usize, out: &mut dyn FnMut(usize, usize, &[u8])) -> Result<()> {
        let (k, m) = (self.g.k, self.g.m);
        let len = shards.first().map_or(0, |s| s.len());
        if len == 0 {
            return Ok(());
        }
        let id = self.g.id;
        Scratch::coder(id, k, m, len, |enc: &mut ReedSolomonEncoder| {
            for s in shards {
                enc.add_original_shard(s).map_err(|e| rs_err(id, e))?;
            }
            let res = enc.encode().map_err(|e| rs_err(id, e))?;
            for (j, p) in res.recovery_iter().enumerate() {
                for (i, unit) in p.chunks_exact(ub).enumerate() {
                    out(i, j, unit);
                }
            }
            Ok(())
        })
    }

    /// Fills in the lost units of stripes `ts` of `f` from the surviving
    /// ones: every data unit, and the parity units of stripes where one on
    /// a child of `parity` is lost (0: no parity unit is computed).
    /// Returns the stripes with fewer than k survivors (left as they are).
    fn rebuild(&self, f: &mut Fetched, ts: &[usize], parity: u64) -> Result<Vec<usize>> {
        let g = self.g;
        if g.m == 1 {
            return Ok(self.rebuild_xor(f, ts, parity));
        }
        let (k, m, ub) = (g.k, g.m, f.ub);
        let data_mask = (1u64 << k) - 1;
        let mut lost = Vec::new();
        let mut groups: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        let mut need_parity = Vec::new();
        for &t in ts {
            let p = f.p0 + t as u64;
            let have = g.shards_of(p, f.have[t]);
            if (have.count_ones() as usize) < k {
                lost.push(t);
                continue;
            }
            if have & data_mask != data_mask {
                // Every data shard there is, then parity shards to make k.
                let mut chosen = have & data_mask;
                for j in k..k + m {
                    if chosen.count_ones() as usize == k {
                        break;
                    }
                    if have >> j & 1 == 1 {
                        chosen |= 1 << j;
                    }
                }
                groups.entry(chosen).or_default().push(t);
            }
            let parity_lost = g.all() & !f.have[t] & !g.children_of(p, data_mask);
            if parity_lost & parity != 0 {
                need_parity.push(t);
            }
        }
        for (chosen, group) in groups {
            let shards: Vec<(usize, Buf)> =
                bits(chosen).map(|j| (j, join_scratch(group.iter().map(|&t| self.unit(f, t, j))))).collect();
            Scratch::coder(g.id, k, m, group.len() * ub, |dec: &mut ReedSolomonDecoder| {
                for (j, shard) in &shards {
                    if *j < k {
                        dec.add_original_shard(*j, shard).map_err(|e| rs_err(g.id, e))?;
                    } else {
                        dec.add_recovery_shard(j - k, shard).map_err(|e| rs_err(g.id, e))?;
                    }
                }
                let res = dec.decode().map_err(|e| rs_err(g.id, e))?;
                for (j, data) in res.restored_original_iter() {
                    for (&t, unit) in group.iter().zip(data.chunks_exact(ub)) {
                        self.unit_mut(f, t, j).copy_from_slice(unit);
                    }
                }
                Ok(())
            })?;
        }
        if !need_parity.is_empty() {
            let shards = self.data_shards(f, &need_parity);
            self.encode(&shards, ub, &mut |i, j, unit| {
                let t = need_parity[i];
                if g.shards_of(f.p0 + t as u64, f.have[t]) >> (k + j) & 1 == 0 {
                    self.unit_mut(f, t, k + j).copy_from_slice(unit);
                }
            })?;
        }
        Ok(lost)
    }

    /// [`Parity::rebuild`] with one parity unit, which is the XOR of the
    /// data units: a lost unit is the XOR of the stripe's other units.
    fn rebuild_xor(&self, f: &mut Fetched, ts: &[usize], parity: u64) -> Vec<usize> {
        let g = self.g;
        let ub = f.ub;
        let mut lost = Vec::new();
        for &t in ts {
            let missing = g.all() & !f.have[t];
            match missing.count_ones() {
                0 => continue,
                1 => {}
                _ => {
                    lost.push(t);
                    continue;
                }
            }
            let c0 = missing.trailing_zeros() as usize;
            if g.shard_of(f.p0 + t as u64, c0) >= g.k && parity >> c0 & 1 == 0 {
                continue;
            }
            let mut acc = std::mem::take(&mut f.bufs[c0]);
            let dst = &mut acc[t * ub..(t + 1) * ub];
            dst.fill(0);
            for c in (0..g.n()).filter(|&c| c != c0) {
                xor_into(dst, &f.bufs[c][t * ub..(t + 1) * ub]);
            }
            f.bufs[c0] = acc;
        }
        lost
    }

    /// Writes units (stripe t, child c) of `f` in place, consecutive stripes
    /// of one child in one request, children in parallel. Returns the units
    /// written.
    fn write_units(&self, io: &IoCtx, f: &Fetched, units: &[(usize, usize)]) -> Vec<(usize, usize)> {
        let ub = f.ub;
        let mut sorted: Vec<(usize, usize)> = units.iter().map(|&(t, c)| (c, t)).collect();
        sorted.sort_unstable();
        let mut runs: Vec<(usize, usize, usize)> = Vec::new(); // (child, first stripe, count)
        for (c, t) in sorted {
            match runs.last_mut() {
                Some(r) if r.0 == c && r.1 + r.2 == t => r.2 += 1,
                _ => runs.push((c, t, 1)),
            }
        }
        let blocks = units.len() as u64 * self.g.unit;
        let results = run_all(runs.clone(), blocks >= PARALLEL_MIN_BLOCKS, &|(c, t, cnt)| {
            self.children[c].write(io, (f.p0 + t as u64) * self.g.unit + f.w0, &f.bufs[c][t * ub..(t + cnt) * ub])
        });
        let mut done = Vec::new();
        for ((c, t, cnt), r) in runs.into_iter().zip(results) {
            match r {
                Ok(()) => done.extend((t..t + cnt).map(|t| (t, c))),
                Err(e) => tracing::warn!(node = self.g.id, child = c, error = %e, "parity unit repair failed"),
            }
        }
        done
    }

    /// Clears the missed marks of units rewritten by a repair and records it.
    fn mark_repaired(&self, io: &IoCtx, p0: u64, done: &[(usize, usize)], missed: &[u64]) {
        let mut per: BTreeMap<usize, u64> = BTreeMap::new();
        for &(t, c) in done {
            if missed.get(t).is_some_and(|m| m >> c & 1 == 1) {
                *per.entry(t).or_default() |= 1 << c;
            }
        }
        // Consecutive stripes with the same mask go in one record.
        let mut recs: Vec<(u64, u64, u64)> = Vec::new();
        for (t, mask) in per {
            let p = p0 + t as u64;
            match recs.last_mut() {
                Some(r) if r.0 + r.1 == p && r.2 == mask => r.1 += 1,
                _ => recs.push((p, 1, mask)),
            }
        }
        if recs.is_empty() {
            return;
        }
        let mut st = self.state.lock();
        for (physical, len, mask) in recs {
            let c = Change::Repaired { physical, len, mask };
            st.apply(c, self.g.all());
            io.record(&TYPE, self.g.id, &c.encode());
        }
    }

    /// Copies blocks [w0, w0 + dst's blocks) of child `c`'s unit in
    /// physical stripe `p` from a window a read rebuilt, if one holds them.
    fn rebuilt_copy(&self, p: u64, c: usize, w0: u64, dst: &mut [u8]) -> bool {
        let kept = self.rebuilt.lock();
        if kept.is_empty() {
            return false;
        }
        let n = super::common::nblocks(dst.len());
        let hit = kept
            .iter()
            .find(|r| r.p == p && r.child == c && r.w0 <= w0 && w0 + n <= r.w0 + super::common::nblocks(r.data.len()));
        match hit {
            Some(r) => {
                let at = (w0 - r.w0) as usize * BLOCK_SIZE;
                dst.copy_from_slice(&r.data[at..at + dst.len()]);
                true
            }
            None => false,
        }
    }

    /// Reads the requested blocks straight from the data units holding
    /// them (parts of units, no parity) when no unit they need is known to
    /// be lost. False when the request must take the reconstructing path
    /// (a unit lost, or a read failed).
    fn read_direct(&self, io: &IoCtx, fblk: u64, buf: &mut [u8]) -> bool {
        let g = self.g;
        let (sd, n) = (g.sd(), super::common::nblocks(buf.len()));
        let end = fblk + n;
        let down = self.down_mask(io, DeviceState::readable);
        let mut per: Vec<Vec<(u64, &mut [u8])>> = (0..self.n()).map(|_| Vec::new()).collect();
        {
            let st = self.state.lock();
            let pieces = st.pieces(fblk / sd, (end - 1) / sd + 1);
            let mut at = 0;
            let mut rest = buf;
            for (u, off, len) in super::chunks(fblk, n, g.unit) {
                let (l, j) = (u / g.k as u64, (u % g.k as u64) as usize);
                while pieces.get(at).is_some_and(|&(pl, _, plen)| pl + plen <= l) {
                    at += 1;
                }
                let (piece, tail) = std::mem::take(&mut rest).split_at_mut(len as usize * BLOCK_SIZE);
                rest = tail;
                match pieces.get(at) {
                    Some(&(pl, Some(p0), _)) => {
                        let p = p0 + (l - pl);
                        let c = g.child_of(p, j);
                        if (down | st.missed_at(p)) >> c & 1 == 1 {
                            return false;
                        }
                        per[c].push((p * g.unit + off, piece));
                    }
                    _ => piece.fill(0),
                }
            }
        }
        let groups: Vec<_> = per.into_iter().enumerate().filter(|(_, v)| !v.is_empty()).collect();
        let parallel = n >= 4 * g.unit || n >= PARALLEL_MIN_BLOCKS;
        super::common::dispatch(groups, parallel, &|c, cb, piece: &mut [u8]| self.children[c].read(io, cb, piece))
            .is_ok()
    }

    /// Reads file blocks with the stripe locks held by the caller.
    fn read_locked(&self, io: &IoCtx, fblk: u64, buf: &mut [u8]) -> Result<()> {
        let n = span(fblk, buf.len())?;
        if n == 0 {
            return Ok(());
        }
        let g = self.g;
        let sd = g.sd();
        let end = fblk + n;
        // Parts of units where whole units would be wasted: large units, or
        // less than a stripe. Large reads of small units read each child's
        // units of a run in one request (below).
        if (g.unit >= 16 || n <= sd) && self.read_direct(io, fblk, buf) {
            return Ok(());
        }
        let pieces = self.state.lock().pieces(fblk / sd, (end - 1) / sd + 1);
        let batch = (BATCH_BYTES / (sd * BLOCK_SIZE as u64)).max(1);
        let all_writable = !self.down_mask(io, DeviceState::writable);
        for (l0, phys, len) in pieces {
            let Some(p0) = phys else {
                // A hole reads as zeros.
                let a = (l0 * sd).max(fblk);
                let b = ((l0 + len) * sd).min(end);
                buf[((a - fblk) as usize * BLOCK_SIZE)..((b - fblk) as usize * BLOCK_SIZE)].fill(0);
                continue;
            };
            let mut off = 0;
            while off < len {
                let r = (len - off).min(batch);
                let (l, p) = (l0 + off, p0 + off);
                // The data units of stripe l+t the request covers.
                let want = |t: usize| -> u64 {
                    let s0 = (l + t as u64) * sd;
                    let a = s0.max(fblk) - s0;
                    let b = (s0 + sd).min(end) - s0;
                    let (j0, j1) = (a / g.unit, (b - 1) / g.unit);
                    ((1u64 << (j1 + 1)) - 1) & !((1u64 << j0) - 1)
                };
                // A request inside one unit reads and rebuilds only its blocks.
                let (a, b) = (fblk.max(l * sd) - l * sd, end.min((l + 1) * sd) - l * sd);
                let one = r == 1 && a / g.unit == (b - 1) / g.unit;
                let (mut w0, mut wl) = if one { (a % g.unit, b - a) } else { (0, g.unit) };
                // Inside one unit that is known lost: from a window rebuilt
                // before, or rebuild a window around the request and keep it.
                let mut keep = None;
                if one {
                    let j = (a / g.unit) as usize;
                    let c = g.child_of(p, j);
                    let dst = (l * sd + a - fblk) as usize * BLOCK_SIZE;
                    if self.rebuilt_copy(p, c, w0, &mut buf[dst..dst + wl as usize * BLOCK_SIZE]) {
                        off += r;
                        continue;
                    }
                    let lost_now =
                        (self.down_mask(io, DeviceState::readable) | self.state.lock().missed_at(p)) >> c & 1;
                    if lost_now == 1 && wl < REBUILT_WINDOW && g.unit > wl {
                        let ws = w0 - w0 % REBUILT_WINDOW;
                        let we = (ws + REBUILT_WINDOW).max(w0 + wl).min(g.unit);
                        (w0, wl) = (ws, we - ws);
                        keep = Some((j, c));
                    }
                }
                let mut f = self.fetch(io, p, r as usize, &want, Plan { full: false, extra_bad: 0, w0, wl });
                let missed: Vec<u64> = {
                    let st = self.state.lock();
                    (0..r).map(|t| st.missed_at(p + t)).collect()
                };
                let hurt: Vec<usize> =
                    (0..r as usize).filter(|&t| g.children_of(p + t as u64, want(t)) & f.bad[t] != 0).collect();
                // A repairing read rewrites the parity units it read and
                // found bad too, so their parity is computed as well.
                let parity_fix: Vec<u64> = (0..r as usize)
                    .map(|t| f.errored[t] & g.children_of(p + t as u64, g.all() & !((1u64 << g.k) - 1)) & all_writable)
                    .collect();
                let with_parity = io.repair && hurt.iter().any(|&t| parity_fix[t] != 0);
                let lost = self.rebuild(&mut f, &hurt, if with_parity { g.all() } else { 0 })?;
                if let Some(&t) = lost.first() {
                    let s = l + t as u64;
                    let bad = f.bad[t];
                    return Err(Error::Device(format!(
                        "parity node {}: file blocks {}..{}: {} of {} units lost ({}), at most {} can be rebuilt",
                        g.id,
                        s * sd,
                        (s + 1) * sd,
                        bad.count_ones(),
                        g.n(),
                        self.names(io, bad),
                        g.m
                    )));
                }
                // Copy out the requested blocks.
                for t in 0..r as usize {
                    let s0 = (l + t as u64) * sd;
                    let a = s0.max(fblk);
                    let b = (s0 + sd).min(end);
                    let mut pos = a;
                    while pos < b {
                        let j = ((pos - s0) / g.unit) as usize;
                        let in_unit = (pos - s0) % g.unit;
                        let cnt = (g.unit - in_unit).min(b - pos);
                        let at = in_unit - f.w0;
                        let src = &self.unit(&f, t, j)[at as usize * BLOCK_SIZE..(at + cnt) as usize * BLOCK_SIZE];
                        let d = (pos - fblk) as usize * BLOCK_SIZE;
                        buf[d..d + src.len()].copy_from_slice(src);
                        pos += cnt;
                    }
                }
                if let Some((j, c)) = keep {
                    let data = self.unit(&f, 0, j).to_vec();
                    let mut kept = self.rebuilt.lock();
                    if kept.len() >= REBUILT {
                        kept.pop_front();
                    }
                    kept.push_back(Rebuilt { p, child: c, w0: f.w0, data });
                }
                // Self-heal: rewrite the data units rebuilt above that a
                // failed read or a missed write left bad, and the parity
                // units this read failed on, where their child takes writes.
                // (Parity units of stripes read without reconstruction are
                // not read, so not checked: that is the scrub's part.)
                if io.repair {
                    let mut fix = Vec::new();
                    for &t in &hurt {
                        let pt = p + t as u64;
                        let data_kids = g.children_of(pt, (1u64 << g.k) - 1);
                        // A missed unit is marked rebuilt only when all of it
                        // is written: a read of part of a unit leaves it.
                        let missed_here = if f.ub == g.unit_bytes() { missed[t] } else { 0 };
                        let mut mask = (f.errored[t] | missed_here) & data_kids & all_writable;
                        if with_parity {
                            mask |= parity_fix[t];
                        }
                        fix.extend(bits(mask).map(|c| (t, c)));
                    }
                    if !fix.is_empty() {
                        let done = self.write_units(io, &f, &fix);
                        self.mark_repaired(io, p, &done, &missed);
                    }
                }
                off += r;
            }
        }
        Ok(())
    }

    /// Writes logical stripes [l0, l0+r) from `data` (r whole stripes) to
    /// fresh physical stripes, then maps them and frees the old ones. The
    /// caller holds their locks.
    fn write_stripes(&self, io: &IoCtx, l0: u64, r: u64, data: &[u8]) -> Result<()> {
        let g = self.g;
        let (k, n, ub) = (g.k, g.n(), g.unit_bytes());
        let sdb = k * ub;
        let ru = r as usize;
        let limit = self.children.iter().map(|c| c.capacity()).min().unwrap_or(u64::MAX) / g.unit;
        let p0 = self.state.lock().alloc(r, io.epoch, l0, n as u64, limit);
        let unit = |t: usize, j: usize| &data[t * sdb + j * ub..t * sdb + (j + 1) * ub];
        let cbufs = if g.m == 1 {
            // One parity unit: the XOR of the stripe's data units.
            let mut par = Scratch::buf(ru * ub);
            for (t, dst) in par.chunks_exact_mut(ub).enumerate() {
                dst.copy_from_slice(unit(t, 0));
                for j in 1..k {
                    xor_into(dst, unit(t, j));
                }
            }
            self.gather(p0, ru, |t, j| if j < k { unit(t, j) } else { &par[t * ub..(t + 1) * ub] })
        } else {
            // Shard j: unit j of every stripe, concatenated (RS works
            // position by position, so one call encodes them all).
            let shards: Vec<Buf> = (0..k).map(|j| join_scratch((0..ru).map(|t| unit(t, j)))).collect();
            Scratch::coder(g.id, k, g.m, ru * ub, |enc: &mut ReedSolomonEncoder| {
                for s in &shards {
                    enc.add_original_shard(s).map_err(|e| rs_err(g.id, e))?;
                }
                let res = enc.encode().map_err(|e| rs_err(g.id, e))?;
                let par: Vec<&[u8]> = res.recovery_iter().collect();
                Ok(self.gather(p0, ru, |t, j| if j < k { unit(t, j) } else { &par[j - k][t * ub..(t + 1) * ub] }))
            })?
        };
        let jobs: Vec<usize> = (0..n).collect();
        let results =
            run_all(jobs, r * g.sd() >= PARALLEL_MIN_BLOCKS, &|c| self.children[c].write(io, p0 * g.unit, &cbufs[c]));
        let mut missed = 0u64;
        let mut hard = None;
        let mut msgs = Vec::new();
        for (c, res) in results.into_iter().enumerate() {
            if let Err(e) = res {
                msgs.push(format!("child {c}: {e}"));
                if device_failure(&e) {
                    missed |= 1 << c;
                } else if hard.is_none() {
                    hard = Some(e);
                }
            }
        }
        if hard.is_some() || missed.count_ones() as usize > g.m {
            // Nothing maps the new stripes: give their units back.
            self.discard(io, p0, r);
            return Err(hard.unwrap_or_else(|| {
                Error::Device(format!(
                    "parity node {}: write of file blocks {}..{} reached {} of {n} children, needs {k} ({}): {}",
                    g.id,
                    l0 * g.sd(),
                    (l0 + r) * g.sd(),
                    n - missed.count_ones() as usize,
                    self.names(io, missed),
                    msgs.join("; ")
                ))
            }));
        }
        if missed != 0 {
            tracing::warn!(node = g.id, children = %self.names(io, missed), "parity stripes written degraded");
        }
        let old = {
            let mut st = self.state.lock();
            let c = Change::Map { logical: l0, physical: p0, len: r };
            let old = st.apply(c, g.all());
            io.record(&TYPE, g.id, &c.encode());
            if missed != 0 {
                let c = Change::Missed { physical: p0, len: r, mask: missed };
                st.apply(c, g.all());
                io.record(&TYPE, g.id, &c.encode());
            }
            old
        };
        for (p, len) in old {
            self.discard(io, p, len);
        }
        Ok(())
    }

    /// Each child's units of `ru` stripes from physical stripe `p0` on,
    /// consecutive (one request per child): `src(t, j)` is shard j of
    /// stripe t. Scratch buffers, every byte written here.
    fn gather<'a>(&self, p0: u64, ru: usize, src: impl Fn(usize, usize) -> &'a [u8]) -> Vec<Buf> {
        let ub = self.g.unit_bytes();
        (0..self.n())
            .map(|c| {
                let mut b = Scratch::buf(ru * ub);
                for (t, dst) in b.chunks_exact_mut(ub).enumerate() {
                    dst.copy_from_slice(src(t, self.g.shard_of(p0 + t as u64, c)));
                }
                b
            })
            .collect()
    }

    /// Punches physical stripes [p, p+len) in every child and frees them for
    /// requests of later epochs. A child that cannot punch keeps them, and
    /// they stay out of use until the node is next decoded (a stripe is
    /// only rewritten in place once nothing committed can refer to it).
    fn discard(&self, io: &IoCtx, p: u64, len: u64) {
        self.rebuilt.lock().retain(|r| r.p < p || r.p >= p + len);
        let mut ok = true;
        for (c, child) in self.children.iter().enumerate() {
            if let Err(e) = child.punch(io, p * self.g.unit, len * self.g.unit) {
                tracing::debug!(node = self.g.id, child = c, error = %e, "parity: child keeps a dropped stripe");
                ok = false;
            }
        }
        if ok {
            self.state.lock().release(p, len, io.epoch);
        }
    }

    /// Writes file blocks with the stripe locks held by the caller.
    fn write_locked(&self, io: &IoCtx, fblk: u64, buf: &[u8]) -> Result<()> {
        let n = span(fblk, buf.len())?;
        if n == 0 {
            return Ok(());
        }
        let sd = self.g.sd();
        let sdb = sd as usize * BLOCK_SIZE;
        let end = fblk + n;
        let (s0, s1) = (fblk / sd, (end - 1) / sd);
        let batch = (BATCH_BYTES / (sd * BLOCK_SIZE as u64)).max(1);
        let mut s = s0;
        while s <= s1 {
            let r = (s1 - s + 1).min(batch);
            let (a, b) = ((s * sd).max(fblk), ((s + r) * sd).min(end));
            let src = &buf[(a - fblk) as usize * BLOCK_SIZE..(b - fblk) as usize * BLOCK_SIZE];
            if a == s * sd && b == (s + r) * sd {
                // Whole stripes: no read.
                self.write_stripes(io, s, r, src)?;
            } else {
                let mut data = vec![0u8; r as usize * sdb];
                if a > s * sd {
                    self.read_locked(io, s * sd, &mut data[..sdb])?;
                }
                if b < (s + r) * sd && (r > 1 || a == s * sd) {
                    let last = (r as usize - 1) * sdb;
                    self.read_locked(io, (s + r - 1) * sd, &mut data[last..])?;
                }
                let at = (a - s * sd) as usize * BLOCK_SIZE;
                data[at..at + src.len()].copy_from_slice(src);
                self.write_stripes(io, s, r, &data)?;
            }
            s += r;
        }
        Ok(())
    }

    /// Scrubs mapped logical stripes [l, l+r) in physical [p, p+r); the
    /// caller holds their locks.
    fn scrub_run(&self, io: &IoCtx, s: &Scrub, l: u64, p: u64, r: usize, range: (u64, u64)) -> Result<()> {
        let g = self.g;
        let mut rebuild_mask = 0u64;
        for (c, devs) in self.devices.iter().enumerate() {
            if devs.iter().any(|&d| (s.rebuild)(d)) {
                rebuild_mask |= 1 << c;
            }
        }
        let plan = Plan { full: true, extra_bad: rebuild_mask, w0: 0, wl: g.unit };
        // A resilver reads k children, whichever they are (any k units of a
        // stripe rebuild the others), and leaves the remaining ones unread.
        // A stripe that comes up short (a unit missed or failing) is read
        // again whole and scrubbed as a scrub would.
        let spare = if s.resilver_only { self.spare_children(io, rebuild_mask) } else { 0 };
        let mut resilver = spare != 0;
        let mut f = self.fetch(io, p, r, &|_| 0, Plan { extra_bad: rebuild_mask | spare, ..plan });
        let short = |f: &Fetched| {
            (0..r).any(|t| f.errored[t] != 0 || (g.shards_of(p + t as u64, f.have[t]).count_ones() as usize) < g.k)
        };
        if resilver && short(&f) {
            resilver = false;
            f = self.fetch(io, p, r, &|_| 0, plan);
        }
        let missed: Vec<u64> = {
            let st = self.state.lock();
            (0..r).map(|t| st.missed_at(p + t as u64)).collect()
        };
        s.tally.checked(f.have.iter().map(|h| h.count_ones() as u64 * g.unit).sum());
        // Stripes read whole: does the parity match the data?
        let whole: Vec<usize> = (0..r).filter(|&t| f.have[t] == g.all()).collect();
        if !whole.is_empty() {
            let mut mismatch = vec![false; whole.len()];
            if g.m == 1 {
                // The XOR of every unit of a stripe is zero.
                let ub = f.ub;
                let mut acc = vec![0u8; ub];
                for (i, &t) in whole.iter().enumerate() {
                    acc.copy_from_slice(&f.bufs[0][t * ub..(t + 1) * ub]);
                    for c in 1..g.n() {
                        xor_into(&mut acc, &f.bufs[c][t * ub..(t + 1) * ub]);
                    }
                    mismatch[i] = acc.iter().any(|&b| b != 0);
                }
            } else {
                let shards = self.data_shards(&f, &whole);
                self.encode(&shards, f.ub, &mut |i, j, unit| {
                    mismatch[i] |= self.unit(&f, whole[i], g.k + j) != unit;
                })?;
            }
            for (&t, _) in whole.iter().zip(&mismatch).filter(|(_, &bad)| bad) {
                match self.culprit(&f, t) {
                    Some(j) => {
                        let c = g.child_of(p + t as u64, j);
                        tracing::warn!(
                            node = g.id,
                            child = c,
                            stripe = p + t as u64,
                            "parity scrub: unit does not match its stripe"
                        );
                        f.have[t] &= !(1 << c);
                        f.bad[t] |= 1 << c;
                        f.errored[t] |= 1 << c;
                    }
                    None => {
                        tracing::warn!(
                            node = g.id,
                            stripe = p + t as u64,
                            "parity scrub: parity does not match, the bad unit cannot be told"
                        );
                        f.bad[t] = g.all();
                        f.have[t] = 0;
                    }
                }
            }
        }
        let hurt: Vec<usize> = (0..r).filter(|&t| f.have[t] != g.all()).collect();
        // What is written: in a resilver the rebuilt children's units alone
        // (the spare ones were not read, not lost).
        let target = if resilver { rebuild_mask } else { g.all() };
        let lost = self.rebuild(&mut f, &hurt, target)?;
        for &t in &lost {
            let s0 = (l + t as u64) * g.sd();
            let (a, b) = (s0.max(range.0), (s0 + g.sd()).min(range.1));
            if a < b {
                s.tally.lost(a, b - a);
            }
        }
        if s.repair {
            let writable = !self.down_mask(io, DeviceState::writable);
            let mut fix = Vec::new();
            for &t in &hurt {
                if lost.contains(&t) {
                    continue;
                }
                let mask = (target & !f.have[t]) & writable;
                fix.extend(bits(mask).map(|c| (t, c)));
            }
            if !fix.is_empty() {
                let done = self.write_units(io, &f, &fix);
                s.tally.repaired(done.len() as u64 * g.unit);
                self.mark_repaired(io, p, &done, &missed);
            }
        }
        Ok(())
    }

    /// The children a resilver of `rebuild` leaves unread: those readable
    /// beyond the first k (0 when fewer than k + 1 are readable).
    fn spare_children(&self, io: &IoCtx, rebuild: u64) -> u64 {
        let down = self.down_mask(io, DeviceState::readable) | rebuild;
        bits(self.g.all() & !down).skip(self.g.k).fold(0, |m, c| m | 1 << c)
    }

    /// With every unit of stripe t read and the parity not matching: the one
    /// shard whose replacement by a reconstruction makes the stripe
    /// consistent, if exactly one does (needs m >= 2 to tell).
    fn culprit(&self, f: &Fetched, t: usize) -> Option<usize> {
        let (k, m) = (self.g.k, self.g.m);
        if m < 2 {
            return None;
        }
        let units: Vec<&[u8]> = (0..k + m).map(|j| self.unit(f, t, j)).collect();
        let mut found = None;
        for x in 0..k + m {
            let data: Vec<Vec<u8>> = if x < k {
                let orig = (0..k).filter(|&j| j != x).map(|j| (j, units[j]));
                let rec = reed_solomon_simd::decode(k, m, orig, [(0, units[k])]).ok()?;
                (0..k)
                    .map(|j| if j == x { rec.get(&x).cloned().unwrap_or_default() } else { units[j].to_vec() })
                    .collect()
            } else {
                units[..k].iter().map(|u| u.to_vec()).collect()
            };
            let par = reed_solomon_simd::encode(k, m, &data).ok()?;
            let consistent = (0..m).all(|i| k + i == x || par[i] == units[k + i]);
            if consistent {
                if found.is_some() {
                    return None;
                }
                found = Some(x);
            }
        }
        found
    }
}

impl Block for Parity {
    fn id(&self) -> u32 {
        self.g.id
    }
    fn kind(&self) -> &'static BlockType {
        &TYPE
    }
    fn params(&self) -> Params {
        let mut p = Params::default();
        p.0.insert("data".into(), Value::Num(self.g.k as u64));
        p.0.insert("parity".into(), Value::Num(self.g.m as u64));
        p.0.insert("unit".into(), Value::Num(self.g.unit * BLOCK_SIZE as u64));
        p
    }
    fn children(&self) -> &[Arc<dyn Block>] {
        &self.children
    }

    fn read(&self, io: &IoCtx, fblk: u64, buf: &mut [u8]) -> Result<()> {
        let n = span(fblk, buf.len())?;
        if n == 0 {
            return Ok(());
        }
        let sd = self.g.sd();
        let slots = self.slots(fblk / sd, (fblk + n - 1) / sd);
        let _g: Vec<_> = slots.iter().map(|&i| self.locks[i].read()).collect();
        self.read_locked(io, fblk, buf)
    }

    fn write(&self, io: &IoCtx, fblk: u64, buf: &[u8]) -> Result<()> {
        let n = span(fblk, buf.len())?;
        if n == 0 {
            return Ok(());
        }
        let sd = self.g.sd();
        let slots = self.slots(fblk / sd, (fblk + n - 1) / sd);
        let _g: Vec<_> = slots.iter().map(|&i| self.locks[i].write()).collect();
        self.write_locked(io, fblk, buf)
    }

    fn truncate(&self, io: &IoCtx, nblocks: u64) -> Result<()> {
        let sd = self.g.sd();
        let _g: Vec<_> = self.locks.iter().map(|l| l.write()).collect();
        let keep = nblocks / sd;
        let tail = nblocks % sd;
        let mut from = keep;
        if tail != 0 {
            from = keep + 1;
            let mapped = self.state.lock().pieces(keep, keep + 1).first().is_some_and(|p| p.1.is_some());
            if mapped {
                // The last stripe keeps its head, copy-on-write, zeros after.
                let mut data = vec![0u8; sd as usize * BLOCK_SIZE];
                self.read_locked(io, keep * sd, &mut data)?;
                data[tail as usize * BLOCK_SIZE..].fill(0);
                self.write_stripes(io, keep, 1, &data)?;
            }
        }
        let old = {
            let mut st = self.state.lock();
            let c = Change::Truncate { from };
            let old = st.apply(c, self.g.all());
            if !old.is_empty() {
                io.record(&TYPE, self.g.id, &c.encode());
            }
            old
        };
        for (p, len) in old {
            self.discard(io, p, len);
        }
        Ok(())
    }

    fn encode_state(&self, e: &mut Encoder) {
        let st = self.state.lock();
        e.u32(st.runs.len() as u32);
        let mut phys = Vec::with_capacity(st.runs.len());
        for (&l, &(p, len)) in &st.runs {
            e.u64(l).u64(p).u64(len);
            phys.push((p, len));
        }
        phys.sort_unstable();
        // Missed marks only matter (and only decode) inside mapped stripes.
        let missed: Vec<(u64, u64, u64)> =
            st.missed.iter().filter(|(&p, &(l, _))| covered(&phys, p, l)).map(|(&p, &(l, mk))| (p, l, mk)).collect();
        e.u32(missed.len() as u32);
        for (p, l, mk) in missed {
            e.u64(p).u64(l).u64(mk);
        }
    }

    fn apply(&self, payload: &[u8]) -> Result<()> {
        let c = Change::decode(payload, &self.g)?;
        self.rebuilt.lock().clear();
        self.state.lock().apply(c, self.g.all());
        Ok(())
    }

    fn next_data(&self, fblk: u64) -> Option<u64> {
        let sd = self.g.sd();
        let s = fblk / sd;
        let st = self.state.lock();
        match st.runs.range(..=s).next_back() {
            Some((&l, &(_, len))) if l + len > s => Some(fblk),
            _ => st.runs.range(s..).next().map(|(&l, _)| l.saturating_mul(sd)),
        }
    }

    fn overwrites_in_place(&self) -> bool {
        false
    }

    fn capacity(&self) -> u64 {
        let min = self.children.iter().map(|c| c.capacity()).min().unwrap_or(u64::MAX);
        if min == u64::MAX {
            return u64::MAX;
        }
        (min / self.g.unit).saturating_mul(self.g.sd())
    }

    fn health(&self, down: &dyn Fn(u32) -> bool) -> Health {
        let mut mask = 0u64;
        let mut degraded = false;
        for (c, child) in self.children.iter().enumerate() {
            match child.health(down) {
                Health::Lost => mask |= 1 << c,
                Health::Degraded => degraded = true,
                Health::Ok => {}
            }
        }
        if mask.count_ones() as usize > self.g.m {
            return Health::Lost;
        }
        let st = self.state.lock();
        if st.missed.values().any(|&(_, mk)| (mk | mask).count_ones() as usize > self.g.m) {
            return Health::Lost;
        }
        if mask != 0 || degraded || !st.missed.is_empty() {
            Health::Degraded
        } else {
            Health::Ok
        }
    }

    fn scrub(&self, io: &IoCtx, s: &Scrub, fblk: u64, n: u64) -> Result<()> {
        if n == 0 || s.skips(self) {
            return Ok(());
        }
        let g = self.g;
        let sd = g.sd();
        let end = fblk.saturating_add(n);
        let batch = (SCRUB_BATCH_BYTES / (sd * BLOCK_SIZE as u64)).max(1);
        let pieces = self.state.lock().pieces(fblk / sd, (end - 1) / sd + 1);
        let mut steps = Vec::new();
        for (l0, phys, len) in pieces {
            if phys.is_none() {
                continue;
            }
            let mut off = 0;
            while off < len {
                let r = (len - off).min(batch);
                steps.push((l0 + off, r));
                off += r;
            }
        }
        // Several batches at once (each under its own shared locks), so
        // every child has requests queued while another batch verifies.
        super::common::run_steps(&steps, super::common::SCRUB_WORKERS, &|&(l, r)| {
            // The step works in what an earlier step of the pass left (a
            // scrub's workers live for one call, their threads' scratch
            // with them), and leaves its own for the next.
            let outer = Scratch::swap(s.leftovers.take().unwrap_or_default());
            let res = (|| {
                let slots = self.slots(l, l + r - 1);
                let _g: Vec<_> = slots.iter().map(|&i| self.locks[i].read()).collect();
                // Look the run up again under the locks: a writer may have
                // moved some of it meanwhile.
                let now = self.state.lock().pieces(l, l + r);
                for (ll, pp, lr) in now {
                    if let Some(pp) = pp {
                        self.scrub_run(io, s, ll, pp, lr as usize, (fblk, end))?;
                    }
                }
                Ok(())
            })();
            s.leftovers.leave(Scratch::swap(outer));
            res
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Layout, Leftovers, NodeRecord, ScrubTally, Spec};
    use super::*;
    use crate::device::{Device, DeviceHandle, MemDevice};
    use crate::pool::{Allocator, Storage};
    use rand::{rngs::StdRng, Rng, SeedableRng};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    const BS: usize = BLOCK_SIZE;
    const FIRST: u64 = 1;

    fn ext(d: u32) -> Spec {
        Spec { kind: "extent".into(), params: vec![], children: vec![], device: Some(d) }
    }
    fn parity(k: u64, m: u64, unit: u64) -> Spec {
        Spec {
            kind: "parity".into(),
            params: vec![
                ("data".into(), Value::Num(k)),
                ("parity".into(), Value::Num(m)),
                ("unit".into(), Value::Num(unit)),
            ],
            children: (0..(k + m) as u32).map(ext).collect(),
            device: None,
        }
    }
    fn build(s: &Spec) -> Layout {
        Layout::build(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
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

    /// A device whose reads of some blocks fail on demand.
    struct Flaky {
        inner: MemDevice,
        fail: AtomicBool,
        /// Block range [lo, hi) whose reads fail while `fail` is set.
        lo: AtomicU64,
        hi: AtomicU64,
        /// Read requests served.
        reads: AtomicU64,
    }

    impl Device for Flaky {
        fn name(&self) -> &str {
            self.inner.name()
        }
        fn size(&self) -> u64 {
            self.inner.size()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
            let (b0, b1) = (offset / BS as u64, (offset + buf.len() as u64) / BS as u64);
            let (lo, hi) = (self.lo.load(Ordering::SeqCst), self.hi.load(Ordering::SeqCst));
            if self.fail.load(Ordering::SeqCst) && b0 < hi && lo < b1 {
                return Err(Error::Device(format!("{}: injected read failure", self.name())));
            }
            self.reads.fetch_add(1, Ordering::SeqCst);
            self.inner.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
            self.inner.write_at(buf, offset)
        }
        fn flush(&self) -> Result<()> {
            self.inner.flush()
        }
    }

    struct Env {
        storage: Storage,
        log: Mutex<Vec<NodeRecord>>,
        epoch: AtomicU64,
        flaky: Vec<Arc<Flaky>>,
    }

    impl Env {
        fn new(ndev: u32, blocks: u64) -> Env {
            let flaky: Vec<Arc<Flaky>> = (0..ndev)
                .map(|i| {
                    Arc::new(Flaky {
                        inner: MemDevice::new(format!("mem:{i}"), blocks * BS as u64),
                        fail: AtomicBool::new(false),
                        lo: AtomicU64::new(0),
                        hi: AtomicU64::new(u64::MAX),
                        reads: AtomicU64::new(0),
                    })
                })
                .collect();
            let devs = flaky.iter().map(|d| d.clone() as Arc<dyn Device>).collect::<Vec<_>>();
            let allocs = devs.iter().map(|d| Allocator::new(FIRST, d.size() / BS as u64)).collect();
            let devs = devs.into_iter().enumerate().map(|(i, d)| DeviceHandle::new(i as u32, d)).collect();
            Env { storage: Storage { devs, allocs }, log: Mutex::new(Vec::new()), epoch: AtomicU64::new(1), flaky }
        }
        fn io<T>(&self, f: impl FnOnce(&IoCtx) -> T) -> T {
            let sink = |c: NodeRecord| self.log.lock().push(c);
            f(&IoCtx {
                owner: 0,
                origin: crate::blocks::Origin::NONE,
                storage: &self.storage,
                epoch: self.epoch.load(Ordering::SeqCst),
                sink: &sink,
                repair: true,
            })
        }
        /// A journal batch commits: its frees are released, a new epoch opens.
        fn commit(&self) {
            let e = self.epoch.fetch_add(1, Ordering::SeqCst);
            for a in &self.storage.allocs {
                a.release(e);
            }
        }
        fn write(&self, l: &Layout, fblk: u64, data: &[u8]) -> Result<()> {
            self.io(|io| l.root().write(io, fblk, data))
        }
        fn try_read(&self, l: &Layout, fblk: u64, n: usize) -> Result<Vec<u8>> {
            let mut buf = vec![0xAA; n * BS];
            self.io(|io| l.root().read(io, fblk, &mut buf))?;
            Ok(buf)
        }
        fn read(&self, l: &Layout, fblk: u64, n: usize) -> Vec<u8> {
            self.try_read(l, fblk, n).unwrap_or_else(|e| panic!("read {fblk}+{n}: {e}"))
        }
        fn truncate(&self, l: &Layout, n: u64) {
            self.io(|io| l.root().truncate(io, n)).unwrap();
        }
        fn scrub(&self, l: &Layout, repair: bool, rebuild: &(dyn Fn(u32) -> bool + Sync)) -> ScrubTally {
            self.pass(l, repair, rebuild, false)
        }
        fn resilver(&self, l: &Layout, rebuild: &(dyn Fn(u32) -> bool + Sync)) -> ScrubTally {
            self.pass(l, true, rebuild, true)
        }
        fn pass(&self, l: &Layout, repair: bool, rebuild: &(dyn Fn(u32) -> bool + Sync), only: bool) -> ScrubTally {
            let tally = ScrubTally::default();
            let s = Scrub {
                repair,
                rebuild,
                resilver_only: only,
                tally: &tally,
                leftovers: &Leftovers::default(),
                verify: None,
            };
            self.io(|io| l.root().scrub(io, &s, 0, u64::MAX / 2)).unwrap();
            tally
        }
        fn reads(&self, d: usize) -> u64 {
            self.flaky[d].reads.load(Ordering::SeqCst)
        }
        /// Device `d` comes back empty (a new replacement), resilvering.
        fn replace(&self, d: usize) {
            let dev = self.storage.devs[d].dev();
            dev.write_at(&vec![0u8; dev.size() as usize - BS], BS as u64).unwrap();
            self.set(d, DeviceState::Resilvering);
        }
        fn set(&self, d: usize, st: DeviceState) {
            self.storage.devs[d].set_state(st);
        }
        /// Every device block is free or owned by exactly one extent of
        /// `layouts`, once deferred frees are released.
        fn check_accounting(&self, layouts: &[&Layout]) {
            let mut owned: Vec<Vec<(u64, u64)>> = vec![Vec::new(); self.storage.devs.len()];
            for l in layouts {
                l.extents(&mut |d, p, n| owned[d as usize].push((p, n)));
            }
            for (d, a) in self.storage.allocs.iter().enumerate() {
                a.release(u64::MAX);
                let mut all = owned[d].clone();
                all.extend(a.free_extents());
                all.sort_unstable();
                let mut pos = FIRST;
                for (s, n) in all {
                    assert_eq!(s, pos, "device {d}: block {pos} leaked or claimed twice");
                    pos = s + n;
                }
                assert_eq!(pos, a.total_blocks(), "device {d}: blocks leaked at the end");
            }
        }
    }

    fn state_of(l: &Layout) -> Vec<u8> {
        let mut e = Encoder::new();
        l.root().encode_state(&mut e);
        e.into_inner()
    }

    #[test]
    fn one_parity_unit_is_the_xor_of_the_data() {
        // m = 1 writes, scrubs and rebuilds with XOR, and must give the
        // bytes Reed-Solomon gives (pools written either way read alike).
        let mut rng = StdRng::seed_from_u64(11);
        for k in [1usize, 2, 3, 5, 8, 32] {
            for len in [64usize, 4096, 3 * 4096] {
                let shards: Vec<Vec<u8>> = (0..k).map(|_| (0..len).map(|_| rng.gen()).collect()).collect();
                let rs = reed_solomon_simd::encode(k, 1, &shards).unwrap();
                let mut x = vec![0u8; len];
                for s in &shards {
                    xor_into(&mut x, s);
                }
                assert_eq!(rs[0], x, "k={k} len={len}");
            }
        }
    }

    #[test]
    fn concatenated_shards_encode_like_separate_stripes() {
        // The write path encodes many stripes in one call: that must equal
        // encoding each stripe alone.
        let (k, m, ub) = (3, 2, 4096);
        let stripes: Vec<Vec<Vec<u8>>> = (0..4).map(|s| (0..k).map(|j| pattern(s * 10 + j, 1)).collect()).collect();
        let joined: Vec<Vec<u8>> =
            (0..k as usize).map(|j| stripes.iter().flat_map(|s| s[j].clone()).collect()).collect();
        let all = reed_solomon_simd::encode(k as usize, m, &joined).unwrap();
        for (i, s) in stripes.iter().enumerate() {
            let one = reed_solomon_simd::encode(k as usize, m, s).unwrap();
            for p in 0..m {
                assert_eq!(one[p], all[p][i * ub..(i + 1) * ub], "stripe {i} parity {p}");
            }
        }
    }

    #[test]
    fn bad_parameters_are_refused() {
        let mut s = parity(3, 1, 4096);
        s.children.pop();
        assert!(Layout::build(&s).err().unwrap().to_string().contains("needs 4 children, got 3"));
        let s = parity(2, 1, 6144);
        assert!(Layout::build(&s).is_err());
        let s = parity(2, 5, 4096);
        assert!(Layout::build(&s).is_err());
        let s = parity(33, 1, 4096);
        assert!(Layout::build(&s).is_err());
    }

    #[test]
    fn parity_rotates_over_every_child() {
        let g = Geometry { id: 0, k: 6, m: 1, unit: 1 };
        for p in 0..14 {
            let mut seen = 0u64;
            for j in 0..7 {
                let c = g.child_of(p, j);
                assert_eq!(g.shard_of(p, c), j);
                seen |= 1 << c;
            }
            assert_eq!(seen, 0x7f);
        }
        // Over n stripes each child holds parity once.
        let holders: Vec<usize> = (0..7).map(|p| g.child_of(p, 6)).collect();
        let mut sorted = holders.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..7).collect::<Vec<_>>(), "{holders:?}");
    }

    #[test]
    fn full_stripe_writes_read_back_and_spread_reads() {
        for (k, m, unit) in [(3, 1, 4096), (2, 2, 8192), (6, 1, 4096), (1, 3, 4096), (4, 2, 16384)] {
            let env = Env::new((k + m) as u32, 2048);
            let l = build(&parity(k, m, unit));
            let sd = (k * unit / BS as u64) as usize;
            let d = pattern(k * 10 + m, sd * 20);
            env.write(&l, 0, &d).unwrap();
            assert_eq!(env.read(&l, 0, sd * 20), d, "k={k} m={m}");
            // A sequential file is one run.
            let st = state_of(&l);
            assert_eq!(u32::from_le_bytes(st[..4].try_into().unwrap()), 1, "k={k} m={m}");
            // Reads reach every child.
            let before: Vec<u64> = env.storage.devs.iter().map(|h| h.stats.snapshot().reads).collect();
            env.read(&l, 0, sd * 20);
            for (i, h) in env.storage.devs.iter().enumerate() {
                assert!(h.stats.snapshot().reads > before[i], "k={k} m={m}: device {i} idle");
            }
            env.check_accounting(&[&l]);
        }
    }

    #[test]
    fn stripes_rewritten_piece_by_piece_keep_their_rotation() {
        // A file written in pieces smaller than a stripe moves each stripe
        // through several fresh physical ones. Where each lands must still
        // rotate with its logical number, so neighbouring stripes put their
        // units on different children (as HFS pattern A needs of a file of
        // one unit per reader).
        for (k, m, unit, piece) in [(6, 1, 8 * 4096, 5), (3, 1, 4096, 2), (2, 2, 4 * 4096, 3)] {
            let n = k + m;
            let env = Env::new(n as u32, 4096);
            let l = build(&parity(k, m, unit));
            let sd = k * unit / BS as u64;
            let total = sd * 9 + sd / 2;
            let d = pattern(k * 7 + m, total as usize);
            let mut f = 0;
            while f < total {
                let c = piece.min(total - f);
                env.write(&l, f, &d[f as usize * BS..(f + c) as usize * BS]).unwrap();
                f += c;
                if f % (3 * piece) == 0 {
                    env.commit();
                }
            }
            assert_eq!(env.read(&l, 0, total as usize), d, "k={k} m={m}");
            let st = state_of(&l);
            let runs = u32::from_le_bytes(st[..4].try_into().unwrap()) as usize;
            for r in 0..runs {
                let at = 4 + r * 24;
                let word = |i: usize| u64::from_le_bytes(st[at + i * 8..at + i * 8 + 8].try_into().unwrap());
                let (lg, ph) = (word(0), word(1));
                assert_eq!(ph % n, lg % n, "k={k} m={m}: logical stripe {lg} in physical {ph}");
            }
            env.check_accounting(&[&l]);
        }
    }

    #[test]
    fn small_reads_of_a_lost_unit_rebuild_a_window_once_and_never_stale_data() {
        // Units of 128 blocks: 4 KiB reads of a lost unit rebuild 64-block
        // windows, so a surviving child sees a few requests, not one a read.
        let env = Env::new(3, 4096);
        let l = build(&parity(2, 1, 128 * 4096));
        let reads = |d: usize| env.storage.devs[d].stats.snapshot().reads;
        let check = |want: &[u8]| {
            for b in 0..128u64 {
                assert_eq!(env.read(&l, b, 1), want[b as usize * BS..(b as usize + 1) * BS], "block {b}");
            }
        };
        let d1 = pattern(1, 256);
        env.write(&l, 0, &d1).unwrap();
        // Logical stripe 0 is in physical stripe 0: unit 0 on child 0.
        env.set(0, DeviceState::Missing);
        let before = reads(1);
        check(&d1);
        let n = reads(1) - before;
        assert!(n <= 4, "128 single-block reads of a lost unit cost {n} requests of a survivor");
        // A rewrite moves the stripe and frees physical stripe 0; the next
        // batch's write reuses it. Reads must see the new data, not windows
        // rebuilt from the old stripe.
        let d2 = pattern(2, 256);
        env.write(&l, 0, &d2).unwrap();
        check(&d2);
        env.commit();
        let d3 = pattern(3, 256);
        env.write(&l, 0, &d3).unwrap();
        let st = state_of(&l);
        assert_eq!(u64::from_le_bytes(st[12..20].try_into().unwrap()), 0, "physical stripe 0 reused");
        // Child 0 missed that write. Back online, windows rebuilt of its
        // unit are parts of it: they must not mark the unit rebuilt.
        env.set(0, DeviceState::Online);
        check(&d3);
        assert_eq!(l.root().health(&|_| false), Health::Degraded, "a part of a unit marked it rebuilt");
        env.scrub(&l, true, &|_| false);
        assert_eq!(l.root().health(&|_| false), Health::Ok);
        check(&d3);
        assert_eq!(env.read(&l, 0, 256), d3);
    }

    /// Random writes (partial and whole stripes), reads and truncates against
    /// a model, batches committing now and then so stripes are reused; then
    /// the decoded and the replayed trees read the same.
    fn exercise(s: &Spec, env: &Env, seed: u64, ops: usize) {
        const MAXB: u64 = 200;
        let l = build(s);
        let mut model = vec![0u8; MAXB as usize * BS];
        let mut rng = StdRng::seed_from_u64(seed);
        env.log.lock().clear();
        for i in 0..ops {
            match rng.gen_range(0..10) {
                0..=4 => {
                    let n = if rng.gen_bool(0.2) { rng.gen_range(1..=60) } else { rng.gen_range(1..=6) };
                    let f = rng.gen_range(0..=MAXB - n);
                    let d = pattern(seed * 1000 + i as u64, n as usize);
                    env.write(&l, f, &d).unwrap();
                    model[f as usize * BS..(f + n) as usize * BS].copy_from_slice(&d);
                }
                5..=7 => {
                    let n = rng.gen_range(1..=40);
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
                    let f = rng.gen_range(0..MAXB);
                    let first =
                        (f..MAXB).find(|&b| model[b as usize * BS..(b + 1) as usize * BS].iter().any(|&x| x != 0));
                    if let Some(b) = first {
                        let nd = l.root().next_data(f);
                        assert!(nd.is_some_and(|x| x >= f && x <= b), "{s:?}: next_data({f}) = {nd:?}, data at {b}");
                    }
                }
            }
            if rng.gen_bool(0.2) {
                env.commit();
            }
        }
        assert!(env.read(&l, 0, MAXB as usize) == model, "{s:?}: final contents");
        let bytes = encode(&l);
        let d = decode(&bytes).unwrap();
        assert!(env.read(&d, 0, MAXB as usize) == model, "{s:?}: after decode");
        assert_eq!(encode(&d), bytes);
        let r = build(s);
        for c in env.log.lock().iter() {
            r.apply(c).unwrap();
        }
        assert!(env.read(&r, 0, MAXB as usize) == model, "{s:?}: after replay");
        assert_eq!(state_of(&r), state_of(&l), "{s:?}: replayed state");
        env.check_accounting(&[&l]);
        env.truncate(&l, 0);
        env.check_accounting(&[]);
    }

    #[test]
    fn random_operations_match_a_model() {
        let geometries = [(3, 1, 4096), (2, 2, 8192), (1, 1, 4096), (4, 3, 4096), (2, 1, 65536)];
        for (i, (k, m, unit)) in geometries.into_iter().enumerate() {
            let env = Env::new((k + m) as u32, 8192);
            exercise(&parity(k, m, unit), &env, i as u64 + 1, 300);
        }
    }

    #[test]
    fn reads_survive_up_to_m_lost_children() {
        for m in 1..=3u64 {
            let k = 3;
            let n = (k + m) as usize;
            let env = Env::new(n as u32, 1024);
            let l = build(&parity(k, m, 4096));
            let d = pattern(m, 3 * 17 + 2);
            env.write(&l, 1, &d).unwrap();
            // Every set of up to m children down at once.
            for down in 1u64..(1 << n) {
                if down.count_ones() as u64 > m {
                    continue;
                }
                for c in bits(down) {
                    env.set(c, DeviceState::Missing);
                }
                assert_eq!(env.read(&l, 1, d.len() / BS), d, "m={m} down={down:#b}");
                // Unaligned pieces too.
                assert_eq!(env.read(&l, 5, 7), d[4 * BS..11 * BS], "m={m} down={down:#b}");
                for c in bits(down) {
                    env.set(c, DeviceState::Online);
                }
            }
            // One more is too many: the error names the devices.
            for c in 0..=m as usize {
                env.set(c, DeviceState::Missing);
            }
            let e = env.try_read(&l, 1, d.len() / BS).unwrap_err().to_string();
            assert!(e.contains("device 0 (mem:0)") && e.contains(&format!("device {m} (mem:{m})")), "{e}");
            assert!(e.contains(&format!("at most {m} can be rebuilt")), "{e}");
            for c in 0..=m as usize {
                env.set(c, DeviceState::Online);
            }
        }
    }

    #[test]
    fn failed_reads_are_rebuilt_and_repaired_in_place() {
        let env = Env::new(4, 1024);
        let l = build(&parity(3, 1, 4096));
        let d = pattern(7, 30);
        env.write(&l, 0, &d).unwrap();
        // Device 1 fails reads of everything: data comes from the others,
        // and the read rewrites what it rebuilt.
        env.flaky[1].fail.store(true, Ordering::SeqCst);
        assert_eq!(env.read(&l, 0, 30), d);
        let errors = env.storage.devs[1].errors().read;
        assert!(errors > 0);
        env.flaky[1].fail.store(false, Ordering::SeqCst);
        // Another child lost: the repaired units hold the right data.
        env.set(2, DeviceState::Missing);
        assert_eq!(env.read(&l, 0, 30), d);
        env.set(2, DeviceState::Online);
        // A bad block on one device and another on a second device in other
        // stripes: each stripe loses one unit only, the read succeeds.
        let mut p0 = 0;
        l.nodes()[1].extents(&mut |_, p, _| p0 = p);
        let mut p2 = 0;
        l.nodes()[3].extents(&mut |_, p, _| p2 = p);
        env.flaky[0].lo.store(p0, Ordering::SeqCst);
        env.flaky[0].hi.store(p0 + 1, Ordering::SeqCst);
        env.flaky[2].lo.store(p2 + 5, Ordering::SeqCst);
        env.flaky[2].hi.store(p2 + 6, Ordering::SeqCst);
        env.flaky[0].fail.store(true, Ordering::SeqCst);
        env.flaky[2].fail.store(true, Ordering::SeqCst);
        assert_eq!(env.read(&l, 0, 30), d);
    }

    #[test]
    fn degraded_writes_are_recorded_and_rebuilt_by_scrub() {
        let env = Env::new(5, 1024);
        let l = build(&parity(3, 2, 4096));
        let down = |_: u32| false;
        env.write(&l, 0, &pattern(1, 24)).unwrap();
        env.set(4, DeviceState::Missing);
        let d = pattern(2, 40);
        // Whole and partial stripes, written with a child missing.
        env.write(&l, 3, &d).unwrap();
        let mut model = pattern(1, 24);
        model.resize(43 * BS, 0);
        model[3 * BS..43 * BS].copy_from_slice(&d);
        assert_eq!(env.read(&l, 0, 43), model);
        assert_eq!(l.root().health(&down), Health::Degraded);
        // The missed units survive a checkpoint and a replay.
        let dec = decode(&encode(&l)).unwrap();
        assert_eq!(dec.root().health(&down), Health::Degraded);
        let rep = build(&parity(3, 2, 4096));
        for c in env.log.lock().iter() {
            rep.apply(c).unwrap();
        }
        assert_eq!(state_of(&rep), state_of(&l));
        // Device back: the missed units are holes in its child, never read
        // (whole stripes, and single blocks read straight from their unit).
        env.set(4, DeviceState::Online);
        assert_eq!(env.read(&l, 0, 43), model);
        for b in 0..43 {
            assert_eq!(env.read(&l, b, 1), model[b as usize * BS..(b as usize + 1) * BS], "block {b}");
        }
        // Still two failures allowed? Not for the degraded stripes until
        // rebuilt: lose two others and some stripe needs the missed unit.
        let t = env.scrub(&l, true, &|_| false);
        assert!(t.repaired.load(Ordering::Relaxed) > 0);
        assert!(t.unrecoverable.lock().is_empty());
        assert_eq!(l.root().health(&down), Health::Ok);
        env.set(0, DeviceState::Missing);
        env.set(1, DeviceState::Missing);
        assert_eq!(env.read(&l, 0, 43), model);
        env.set(0, DeviceState::Online);
        env.set(1, DeviceState::Online);
        // A second scrub finds nothing to do.
        let t = env.scrub(&l, true, &|_| false);
        assert_eq!(t.repaired.load(Ordering::Relaxed), 0);
        assert!(t.checked.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn parts_of_large_units_are_read_and_rebuilt_alone() {
        let env = Env::new(4, 2048);
        // Units of 16 blocks, stripes of 32.
        let l = build(&parity(2, 2, 65536));
        let mut model = pattern(9, 96);
        env.write(&l, 0, &model).unwrap();
        env.set(1, DeviceState::Missing);
        env.set(2, DeviceState::Missing);
        for b in (0..96u64).step_by(5) {
            let n = 3.min(96 - b) as usize;
            assert_eq!(env.read(&l, b, n), model[b as usize * BS..(b as usize + n) * BS], "block {b}");
        }
        env.set(1, DeviceState::Online);
        env.set(2, DeviceState::Online);
        // A write with child 3 away, then reads of single blocks: rebuilding
        // part of a missed unit must not mark it rebuilt.
        env.set(3, DeviceState::Missing);
        let d = pattern(10, 32);
        env.write(&l, 32, &d).unwrap();
        model[32 * BS..64 * BS].copy_from_slice(&d);
        env.set(3, DeviceState::Online);
        for b in 32..64u64 {
            assert_eq!(env.read(&l, b, 1), model[b as usize * BS..(b as usize + 1) * BS], "block {b}");
        }
        env.set(0, DeviceState::Missing);
        assert_eq!(env.read(&l, 0, 96), model);
        env.set(0, DeviceState::Online);
        // Single-block reads rebuild whole 16-block units here (the window
        // is larger) and so may rewrite a missed data unit; the whole read
        // above rebuilt it too; scrub rebuilds it if it holds parity.
        env.scrub(&l, true, &|_| false);
        assert_eq!(l.root().health(&|_| false), Health::Ok);
        env.set(3, DeviceState::Missing);
        env.set(2, DeviceState::Missing);
        assert_eq!(env.read(&l, 0, 96), model);
    }

    #[test]
    fn too_many_failed_children_fail_the_write_and_map_nothing() {
        let env = Env::new(3, 256);
        let l = build(&parity(2, 1, 4096));
        env.write(&l, 0, &pattern(1, 4)).unwrap();
        env.set(0, DeviceState::Missing);
        env.set(2, DeviceState::Missing);
        let e = env.write(&l, 0, &pattern(2, 4)).unwrap_err().to_string();
        assert!(e.contains("device 0 (mem:0)") && e.contains("device 2 (mem:2)"), "{e}");
        env.set(0, DeviceState::Online);
        env.set(2, DeviceState::Online);
        assert_eq!(env.read(&l, 0, 4), pattern(1, 4));
        env.check_accounting(&[&l]);
    }

    #[test]
    fn scrub_rebuilds_a_replaced_device() {
        let env = Env::new(4, 1024);
        let l = build(&parity(2, 2, 8192));
        let d = pattern(3, 64);
        env.write(&l, 0, &d).unwrap();
        // Device 1's contents vanish (a new, empty replacement).
        let blocks = 1024 * BS;
        env.storage.devs[1].dev().write_at(&vec![0u8; blocks - BS], BS as u64).unwrap();
        env.set(1, DeviceState::Resilvering);
        let t = env.scrub(&l, true, &|d| d == 1);
        // 16 stripes of 4 units, one unit (2 blocks) of each on device 1.
        assert_eq!(t.repaired.load(Ordering::Relaxed), 16 * 2, "every unit of device 1");
        env.set(1, DeviceState::Online);
        env.set(0, DeviceState::Missing);
        env.set(2, DeviceState::Missing);
        assert_eq!(env.read(&l, 0, 64), d);
    }

    #[test]
    fn a_resilver_reads_k_units_of_each_stripe_and_rebuilds_the_device() {
        let env = Env::new(4, 1024);
        let l = build(&parity(2, 2, 8192));
        let d = pattern(6, 64);
        env.write(&l, 0, &d).unwrap();
        env.replace(1);
        let before: Vec<u64> = (0..4).map(|i| env.reads(i)).collect();
        let t = env.resilver(&l, &|d| d == 1);
        assert_eq!(t.repaired.load(Ordering::Relaxed), 16 * 2, "every unit of device 1");
        assert!(t.unrecoverable.lock().is_empty());
        // Children 0 and 2 are enough; child 3 is not read at all.
        assert_eq!(env.reads(3), before[3], "the spare child was read");
        assert!(env.reads(0) > before[0] && env.reads(2) > before[2]);
        assert_eq!(t.checked.load(Ordering::Relaxed), 16 * 2 * 2, "k units of each stripe");
        env.set(1, DeviceState::Online);
        // Every unit on device 1 is right: data and parity alike.
        let t = env.scrub(&l, true, &|_| false);
        assert_eq!(t.repaired.load(Ordering::Relaxed), 0);
        env.set(0, DeviceState::Missing);
        env.set(2, DeviceState::Missing);
        assert_eq!(env.read(&l, 0, 64), d);
    }

    #[test]
    fn units_a_fetch_does_not_read_are_zeros_whatever_the_scratch_held() {
        let env = Env::new(4, 1024);
        let l = build(&parity(2, 2, 8192));
        let d = pattern(7, 64);
        env.write(&l, 0, &d).unwrap();
        // The same node, built again from its state, to call fetch on.
        let root = l.root();
        let params = root.params();
        let state = state_of(&l);
        let args = BuildArgs {
            id: root.id(),
            params: &params,
            device: None,
            children: root.children().to_vec(),
            state: Some(&state),
        };
        let node = new_parity(args).unwrap();
        let pieces = node.state.lock().pieces(0, 8);
        assert_eq!(pieces.len(), 1, "one run maps stripes 0..8");
        let p0 = pieces[0].1.unwrap();
        env.set(1, DeviceState::Missing);
        // The thread's scratch holds buffers full of another file's bytes.
        for _ in 0..8 {
            drop(Buf(vec![0xEE; 1 << 20]));
        }
        let plan = Plan { full: true, extra_bad: 0, w0: 0, wl: 2 };
        let f = env.io(|io| node.fetch(io, p0, 8, &|_| 0, plan));
        let ub = f.ub;
        let mut unread = 0;
        for c in 0..4 {
            for t in 0..8 {
                let unit = &f.bufs[c][t * ub..(t + 1) * ub];
                if f.have[t] >> c & 1 == 0 {
                    unread += 1;
                    assert!(unit.iter().all(|&b| b == 0), "unit of child {c}, stripe {t} shows stale bytes");
                }
            }
        }
        // The units read are the file's.
        for t in 0..8 {
            for j in 0..2 {
                if f.have[t] >> node.g.child_of(p0 + t as u64, j) & 1 == 1 {
                    let at = (t * 4 + j * 2) * BS;
                    assert_eq!(node.unit(&f, t, j), &d[at..at + ub], "stripe {t}, data unit {j}");
                }
            }
        }
        assert_eq!(unread, 8, "the missing child's units are not read");
    }

    #[test]
    fn a_resilver_that_meets_a_failing_unit_reads_the_whole_stripe() {
        let env = Env::new(4, 1024);
        let l = build(&parity(2, 2, 8192));
        let d = pattern(7, 64);
        env.write(&l, 0, &d).unwrap();
        env.replace(1);
        // Every read of device 0 fails: each stripe needs child 3 instead.
        env.flaky[0].fail.store(true, Ordering::SeqCst);
        let t = env.resilver(&l, &|d| d == 1);
        env.flaky[0].fail.store(false, Ordering::SeqCst);
        assert!(t.unrecoverable.lock().is_empty(), "{:?}", t.unrecoverable.lock());
        assert!(env.reads(3) > 0);
        // Device 1 was rebuilt in full; the units of device 0 that failed to
        // read were rewritten too, as a scrub rewrites them.
        env.set(1, DeviceState::Online);
        env.set(2, DeviceState::Missing);
        env.set(3, DeviceState::Missing);
        assert_eq!(env.read(&l, 0, 64), d);
    }

    #[test]
    fn a_resilver_leaves_a_node_without_the_device_unread() {
        let env = Env::new(4, 1024);
        let mut spec = parity(2, 1, 4096);
        spec.children = vec![ext(0), ext(2), ext(3)];
        let l = build(&spec);
        env.write(&l, 0, &pattern(8, 32)).unwrap();
        let before: Vec<u64> = (0..4).map(|i| env.reads(i)).collect();
        let t = env.resilver(&l, &|d| d == 1);
        assert_eq!(t.checked.load(Ordering::Relaxed), 0);
        assert_eq!((0..4).map(|i| env.reads(i)).collect::<Vec<_>>(), before);
        // A scrub of the same node reads every unit.
        let t = env.scrub(&l, true, &|d| d == 1);
        assert_eq!(t.checked.load(Ordering::Relaxed), 16 * 3);
    }

    #[test]
    fn scrub_finds_flipped_bits() {
        // m = 2: the bad unit is found and rewritten.
        let env = Env::new(5, 512);
        let l = build(&parity(3, 2, 4096));
        let d = pattern(4, 30);
        env.write(&l, 0, &d).unwrap();
        let mut p = 0;
        l.nodes()[2].extents(&mut |_, s, _| p = s);
        let dev = env.storage.devs[1].dev();
        let mut b = vec![0u8; BS];
        dev.read_at(&mut b, (p + 3) * BS as u64).unwrap();
        b[100] ^= 0x40;
        dev.write_at(&b, (p + 3) * BS as u64).unwrap();
        let t = env.scrub(&l, true, &|_| false);
        assert_eq!(t.repaired.load(Ordering::Relaxed), 1);
        assert!(t.unrecoverable.lock().is_empty());
        let t = env.scrub(&l, false, &|_| false);
        assert_eq!(t.repaired.load(Ordering::Relaxed), 0);
        assert!(t.unrecoverable.lock().is_empty());
        assert_eq!(env.read(&l, 0, 30), d);

        // m = 1: the stripe is reported, in file blocks.
        let env = Env::new(3, 512);
        let l = build(&parity(2, 1, 4096));
        env.write(&l, 0, &pattern(5, 10)).unwrap();
        let mut p = 0;
        l.nodes()[1].extents(&mut |_, s, _| p = s);
        let dev = env.storage.devs[0].dev();
        dev.read_at(&mut b, (p + 2) * BS as u64).unwrap();
        b[0] ^= 1;
        dev.write_at(&b, (p + 2) * BS as u64).unwrap();
        let t = env.scrub(&l, true, &|_| false);
        assert_eq!(*t.unrecoverable.lock(), vec![(4, 2)]);
    }

    #[test]
    fn a_crash_before_the_batch_commits_keeps_the_old_stripe() {
        let env = Env::new(4, 512);
        let l = build(&parity(3, 1, 4096));
        let old = pattern(1, 12);
        env.write(&l, 0, &old).unwrap();
        env.commit();
        let committed = encode(&l);
        // Partial and whole-stripe overwrites, not committed.
        env.write(&l, 1, &pattern(2, 2)).unwrap();
        env.write(&l, 3, &pattern(3, 6)).unwrap();
        env.truncate(&l, 5);
        // The devices now, read through the last committed tree.
        let after = decode(&committed).unwrap();
        assert_eq!(env.read(&after, 0, 12), old);
    }

    #[test]
    fn stripes_are_reused_only_after_their_batch() {
        let env = Env::new(3, 512);
        let l = build(&parity(2, 1, 4096));
        env.write(&l, 0, &pattern(1, 2)).unwrap();
        env.write(&l, 0, &pattern(2, 2)).unwrap();
        env.write(&l, 0, &pattern(3, 2)).unwrap();
        let phys = |l: &Layout| -> u64 {
            let st = state_of(l);
            u64::from_le_bytes(st[12..20].try_into().unwrap())
        };
        // Fresh stripes, each congruent to logical stripe 0 modulo the 3
        // children: 0, 3, 6.
        assert_eq!(phys(&l), 6, "same epoch: fresh stripes");
        env.commit();
        env.write(&l, 0, &pattern(4, 2)).unwrap();
        assert_eq!(phys(&l), 0, "next epoch: the first freed stripe");
        assert_eq!(env.read(&l, 0, 2), pattern(4, 2));
    }

    #[test]
    fn concurrent_writers_on_shared_stripes() {
        let env = Env::new(4, 4096);
        let l = build(&parity(3, 1, 4096));
        const THREADS: u64 = 6;
        const ROUNDS: u64 = 30;
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (env, l) = (&env, &l);
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(t);
                    for r in 0..ROUNDS {
                        // Thread t owns block t of every group of THREADS:
                        // neighbours share stripes (3 blocks each).
                        let g = rng.gen_range(0..40u64);
                        let f = g * THREADS + t;
                        let v = (t * 40 + r + 1) as u8;
                        env.write(l, f, &[v; BS]).unwrap();
                        assert!(env.read(l, f, 1).iter().all(|&b| b == v), "thread {t} round {r}");
                        if r % 7 == 0 {
                            env.commit();
                        }
                    }
                });
            }
        });
        // Replay each thread's last value per block: the final state is one
        // of them for every block, and decodes and replays the same.
        let all = env.read(&l, 0, (40 * THREADS) as usize);
        for b in 0..40 * THREADS {
            let t = b % THREADS;
            let blk = &all[b as usize * BS..(b as usize + 1) * BS];
            assert!(blk.iter().all(|&x| x == blk[0]), "block {b} torn");
            assert!(blk[0] == 0 || (blk[0] as u64 - 1) / 40 == t, "block {b} holds another thread's value");
        }
        let d = decode(&encode(&l)).unwrap();
        assert_eq!(env.read(&d, 0, (40 * THREADS) as usize), all);
        env.check_accounting(&[&l]);
    }

    #[test]
    fn concurrent_writers_match_a_model() {
        // Writers of whole different blocks in shared stripes, each keeping
        // its own model: nothing another thread does disturbs its blocks.
        let env = Env::new(5, 4096);
        let l = build(&parity(4, 1, 4096));
        const THREADS: usize = 4;
        let models: Vec<Vec<u8>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (env, l) = (&env, &l);
                    s.spawn(move || {
                        let mut rng = StdRng::seed_from_u64(t as u64 + 10);
                        let mut model = vec![0u8; 64 * BS];
                        for r in 0..40 {
                            // Thread t owns blocks 4i+t: every stripe is shared by all.
                            let i = rng.gen_range(0..64u64);
                            let d = pattern((t * 1000 + r) as u64, 1);
                            env.write(l, i * 4 + t as u64, &d).unwrap();
                            model[i as usize * BS..(i as usize + 1) * BS].copy_from_slice(&d);
                        }
                        model
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let all = env.read(&l, 0, 256);
        for (t, model) in models.iter().enumerate() {
            for i in 0..64 {
                let b = i * 4 + t;
                assert!(all[b * BS..(b + 1) * BS] == model[i * BS..(i + 1) * BS], "thread {t} block {b}");
            }
        }
    }

    fn rec(payload: &[u8]) -> NodeRecord {
        NodeRecord { node: 0, bytes: [&[1u8][..], payload].concat() }
    }

    #[test]
    fn hostile_records_are_corrupt_not_panics() {
        let l = build(&parity(2, 1, 4096));
        let e = |tag: u8, vals: &[u64]| {
            let mut e = Encoder::new();
            e.u8(tag);
            for &v in vals {
                e.u64(v);
            }
            e.into_inner()
        };
        let bad: Vec<Vec<u8>> = vec![
            vec![],
            vec![9],
            e(1, &[0, 0]),
            [e(1, &[0, 0, 1]), vec![0]].concat(),
            e(1, &[0, 0, 0]),
            e(1, &[u64::MAX, 0, 1]),
            e(1, &[u64::MAX / 2, 0, 1]),
            e(1, &[0, u64::MAX, 1]),
            e(3, &[0, 1, 0]),
            e(3, &[0, 1, 0b1000]),
            e(3, &[0, 1, 0b11]),
            e(3, &[0, 0, 1]),
            e(4, &[0, 1, 1 << 40]),
            e(4, &[u64::MAX, 2, 1]),
        ];
        for b in bad {
            match l.apply(&rec(&b)) {
                Err(Error::Corrupt { .. }) => {}
                other => panic!("{b:?}: {other:?}"),
            }
        }
        // Good ones apply.
        l.apply(&rec(&e(1, &[0, 0, 2]))).unwrap();
        l.apply(&rec(&e(3, &[1, 1, 0b100]))).unwrap();
        l.apply(&rec(&e(4, &[1, 1, 0b100]))).unwrap();
        l.apply(&rec(&e(2, &[0]))).unwrap();
    }

    #[test]
    fn hostile_state_is_corrupt_not_panics() {
        let g = Geometry { id: 0, k: 2, m: 1, unit: 1 };
        let st = |runs: &[(u64, u64, u64)], missed: &[(u64, u64, u64)], extra: &[u8]| {
            let mut e = Encoder::new();
            e.u32(runs.len() as u32);
            for &(a, b, c) in runs {
                e.u64(a).u64(b).u64(c);
            }
            e.u32(missed.len() as u32);
            for &(a, b, c) in missed {
                e.u64(a).u64(b).u64(c);
            }
            e.raw(extra);
            e.into_inner()
        };
        let ok = st(&[(0, 0, 4), (4, 10, 2)], &[(1, 2, 0b1), (10, 1, 0b100)], &[]);
        decode_state(&ok, &g, &mut State::default()).unwrap();
        let bad = [
            st(&[(0, 0, 4)], &[], &[1]),
            st(&[(0, 0, 0)], &[], &[]),
            st(&[(0, 0, 4), (2, 10, 2)], &[], &[]),
            st(&[(4, 0, 4), (0, 10, 2)], &[], &[]),
            st(&[(0, 0, 4), (4, 2, 2)], &[], &[]),
            st(&[(u64::MAX - 1, 0, 1)], &[], &[]),
            st(&[(0, 0, 4)], &[(5, 1, 1)], &[]),
            st(&[(0, 0, 4)], &[(3, 2, 1)], &[]),
            st(&[(0, 0, 4)], &[(1, 1, 0)], &[]),
            st(&[(0, 0, 4)], &[(1, 1, 0b11)], &[]),
            st(&[(0, 0, 4)], &[(1, 1, 0b1000)], &[]),
            st(&[(0, 0, 4)], &[(2, 1, 1), (1, 1, 1)], &[]),
            vec![0xff, 0xff, 0xff, 0xff],
            vec![1, 0],
        ];
        for b in bad {
            assert!(decode_state(&b, &g, &mut State::default()).is_err(), "{b:?}");
        }
        // And through the layout decoder: a clean error, never a panic.
        let l = build(&parity(2, 1, 4096));
        let mut bytes = encode(&l);
        let n = bytes.len();
        bytes[n - 1] ^= 0xff;
        let _ = decode(&bytes);
    }
}
