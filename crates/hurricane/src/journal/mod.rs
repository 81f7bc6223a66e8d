//! The write-ahead journal.
//!
//! Meta-data changes are logical [`Op`]s. A thread that changes meta-data
//! enters the [`Gate`] (a read lock on one of many cache-padded shards, so
//! writers on different cores never share a lock), applies its ops to the
//! in-memory state and logs them into its shard's buffer as one *group* that
//! commits atomically. The committer closes the gate for an instant (write
//! locks on every shard), takes every buffer in sequence order as one batch,
//! and writes it as a checksummed record to every copy of a circular
//! region, each copy on a device of its own (three on pools of three or
//! more devices; any one replays the pool, and replay merges them record
//! by record, [`replay`]).
//!
//! Ordered mode: the committer flushes every data device before it writes
//! the record, so data in newly allocated blocks is durable before the
//! meta-data that points at it.
//!
//! Verified mode: when every data write of a batch was made inside
//! [`crate::device::verified_by_recovery`] (a transaction's commit to
//! checksummed files), the record goes out with the data and one flush of
//! every device makes both durable. Such a record has its own magic; its
//! groups name the ranges they wrote (`Op::Verify`), and replay checks
//! them when it is the journal's last record: one whose data did not all
//! reach the disk was never acknowledged, and is dropped (`Fs::open`).
//! Only the last record can be in that state: the committer writes a record
//! only after the previous one's flush has returned.

pub mod op;

pub use op::{Ino, NewInode, NodeRecord, Op};

use crate::base::BLOCK_SIZE;
pub use crate::base::{Cursor, Region};
use crate::codec::{crc, Decoder, Encoder};
use crate::error::{Error, Result};
use crate::pool::Storage;
use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Capacity a shard's log buffer keeps between batches.
const SHARD_BUF_KEEP: usize = 4 << 20;

struct Shard {
    gate: RwLock<()>,
    /// Encoded groups: [seq u64][len u32][ops].
    buf: Mutex<Vec<u8>>,
}

pub struct Gate {
    shards: Box<[CachePadded<Shard>]>,
    seq: CachePadded<AtomicU64>,
    epoch: CachePadded<AtomicU64>,
}

thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

/// Proof that the caller is inside the gate: ops logged through it belong to
/// the current batch, and the committer waits for it before taking the batch.
pub struct Entered<'a> {
    gate: &'a Gate,
    shard: &'a Shard,
    _g: RwLockReadGuard<'a, ()>,
    epoch: u64,
}

impl Entered<'_> {
    /// The batch this change belongs to (deferred frees wait for it).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Logs ops that must commit together.
    pub fn log(&self, ops: &[Op]) {
        if ops.is_empty() {
            return;
        }
        let mut e = Encoder::with_capacity(64);
        e.u32(ops.len() as u32);
        for op in ops {
            op.encode(&mut e);
        }
        let mut buf = self.shard.buf.lock();
        // The sequence number is taken under the caller's state locks, so it
        // orders dependent groups the way they were applied.
        let seq = self.gate.seq.fetch_add(1, Ordering::Relaxed);
        buf.extend_from_slice(&seq.to_le_bytes());
        buf.extend_from_slice(&(e.buf.len() as u32).to_le_bytes());
        buf.extend_from_slice(&e.buf);
    }
}

/// Ops taken out of the gate, in the order they were applied.
#[derive(Default)]
pub struct Batch {
    pub epoch: u64,
    /// Payload: [u32 groups] then per group [u32 len][ops].
    pub groups: Vec<Vec<u8>>,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::with_capacity(self.groups.iter().map(|g| g.len() + 4).sum::<usize>() + 4);
        e.u32(self.groups.len() as u32);
        for g in &self.groups {
            e.bytes(g);
        }
        e.into_inner()
    }
    /// Adds a group from the committer itself (lazy time updates).
    pub fn push(&mut self, ops: &[Op]) {
        let mut e = Encoder::new();
        e.u32(ops.len() as u32);
        for op in ops {
            op.encode(&mut e);
        }
        self.groups.push(e.into_inner());
    }
}

/// Decodes a batch payload into its groups of ops.
pub fn decode_payload(payload: &[u8]) -> Result<Vec<Vec<Op>>> {
    let mut d = Decoder::new(payload, "journal record");
    let n = d.count(4)?;
    let mut groups = Vec::with_capacity(n);
    for _ in 0..n {
        let g = d.bytes()?;
        let mut gd = Decoder::new(g, "journal group");
        let k = gd.count(1)?;
        let mut ops = Vec::with_capacity(k);
        for _ in 0..k {
            ops.push(Op::decode(&mut gd)?);
        }
        gd.expect_end()?;
        groups.push(ops);
    }
    d.expect_end()?;
    Ok(groups)
}

impl Gate {
    pub fn new(shards: usize) -> Self {
        let shards = (0..shards.max(1))
            .map(|_| CachePadded::new(Shard { gate: RwLock::new(()), buf: Mutex::new(Vec::new()) }))
            .collect();
        Gate { shards, seq: CachePadded::new(AtomicU64::new(0)), epoch: CachePadded::new(AtomicU64::new(1)) }
    }

    pub fn enter(&self) -> Entered<'_> {
        let i = SHARD.with(|s| {
            if s.get() == usize::MAX {
                s.set(NEXT_SHARD.fetch_add(1, Ordering::Relaxed));
            }
            s.get()
        }) % self.shards.len();
        let shard = &self.shards[i];
        let g = shard.gate.read();
        Entered { gate: self, shard, _g: g, epoch: self.epoch.load(Ordering::Acquire) }
    }

    /// Closes the gate, takes every logged group in order, runs `f` on the
    /// batch while no change can happen (to add ops or snapshot state), and
    /// opens a new epoch.
    pub fn capture<R>(&self, f: impl FnOnce(&mut Batch) -> R) -> (Batch, R) {
        let guards: Vec<_> = self.shards.iter().map(|s| s.gate.write()).collect();
        let epoch = self.epoch.load(Ordering::Acquire);
        // Sized first: grown one group at a time, the list was copied over
        // and over while every writer waits.
        let count: usize = self.shards.iter().map(|s| groups(&s.buf.lock()).count()).sum();
        let mut all: Vec<(u64, Vec<u8>)> = Vec::with_capacity(count);
        for s in self.shards.iter() {
            let mut buf = s.buf.lock();
            all.extend(groups(&buf).map(|(seq, g)| (seq, g.to_vec())));
            // The buffer keeps its memory for the next batch: grown again
            // from nothing after every commit, its reallocations touched
            // fresh pages, and the page faults landed on the threads logging
            // changes (a tenth of a create's time through the mount).
            buf.clear();
            buf.shrink_to(SHARD_BUF_KEEP);
        }
        all.sort_unstable_by_key(|(s, _)| *s);
        let mut batch = Batch { epoch, groups: all.into_iter().map(|(_, g)| g).collect() };
        let r = f(&mut batch);
        self.epoch.store(epoch + 1, Ordering::Release);
        drop(guards);
        (batch, r)
    }

    pub fn current_epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }
}

/// The groups a shard's buffer holds, as logged ([seq u64][len u32][ops]
/// each): (seq, ops).
fn groups(buf: &[u8]) -> impl Iterator<Item = (u64, &[u8])> {
    let mut pos = 0;
    std::iter::from_fn(move || {
        let head = buf.get(pos..pos + 12)?;
        let seq = u64::from_le_bytes(head[..8].try_into().unwrap_or_default());
        let len = u32::from_le_bytes(head[8..].try_into().unwrap_or_default()) as usize;
        let ops = buf.get(pos + 12..pos + 12 + len)?;
        pos += 12 + len;
        Some((seq, ops))
    })
}

// Records of format 6 carry the epoch of the open that wrote them.
const REC_MAGIC: u64 = u64::from_le_bytes(*b"HCJRNL02");
/// A record written before its data was flushed (verified mode).
const REC_MAGIC_VERIFIED: u64 = u64::from_le_bytes(*b"HCJRNLV2");
const WRAP_MAGIC: u64 = u64::from_le_bytes(*b"HCJWRAP2");
const HDR: usize = 48;
// Records of pools before format 6 (no epoch: read as epoch 0), replayed
// by the first open of such a pool and never written.
const OLD_REC_MAGIC: u64 = u64::from_le_bytes(*b"HCJRNL01");
const OLD_REC_MAGIC_VERIFIED: u64 = u64::from_le_bytes(*b"HCJRNLV1");
const OLD_WRAP_MAGIC: u64 = u64::from_le_bytes(*b"HCJWRAP1");
const OLD_HDR: usize = 40;

fn header(magic: u64, salt: u64, seq: u64, epoch: u64, nblocks: u32, payload: &[u8]) -> [u8; HDR] {
    let mut e = Encoder::with_capacity(HDR);
    e.u64(magic).u64(seq).u64(epoch).u32(nblocks).u32(payload.len() as u32).u32(crc(payload)).u64(salt);
    let c = crc(&e.buf);
    e.u32(c);
    let mut h = [0u8; HDR];
    h.copy_from_slice(&e.buf);
    h
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Record,
    Verified,
    Wrap,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    kind: Kind,
    seq: u64,
    epoch: u64,
    nblocks: u64,
    len: usize,
    crc: u32,
    /// Where the payload starts in the record.
    at: usize,
}

/// A header of this pool's journal (the salt, from the pool id, keeps a
/// reformatted device's old records from being replayed into a new pool),
/// of either record format.
fn parse_header(b: &[u8], salt: u64) -> Option<Header> {
    let mut d = Decoder::new(b.get(..HDR)?, "journal header");
    let magic = d.u64().ok()?;
    let (kind, old) = match magic {
        REC_MAGIC => (Kind::Record, false),
        REC_MAGIC_VERIFIED => (Kind::Verified, false),
        WRAP_MAGIC => (Kind::Wrap, false),
        OLD_REC_MAGIC => (Kind::Record, true),
        OLD_REC_MAGIC_VERIFIED => (Kind::Verified, true),
        OLD_WRAP_MAGIC => (Kind::Wrap, true),
        _ => return None,
    };
    let seq = d.u64().ok()?;
    let epoch = if old { 0 } else { d.u64().ok()? };
    let nblocks = d.u32().ok()? as u64;
    let len = d.u32().ok()? as usize;
    let pcrc = d.u32().ok()?;
    let s = d.u64().ok()?;
    let at = if old { OLD_HDR } else { HDR };
    let hcrc = d.u32().ok()?;
    (crc(&b[..at - 4]) == hcrc && s == salt).then_some(Header { kind, seq, epoch, nblocks, len, crc: pcrc, at })
}

/// Blocks a record with `payload_len` bytes takes.
pub fn record_blocks(payload_len: usize) -> u64 {
    (HDR + payload_len).div_ceil(BLOCK_SIZE) as u64
}

/// Whether a record of `payload_len` bytes fits (with a possible wrap marker)
/// without overwriting the live part of the journal.
pub fn fits(r: &Region, c: &Cursor, payload_len: usize) -> bool {
    let need = record_blocks(payload_len) + (r.blocks - c.head).min(record_blocks(payload_len));
    c.used(r) + need < r.blocks
}

/// Where the journal's records go: its copies (the first is the one the
/// superblock calls the journal; all have the same size, each on a device
/// of its own), the pool's salt, and the epoch of the open writing them.
#[derive(Debug, Clone)]
pub struct Copies {
    pub regions: Vec<Region>,
    pub salt: u64,
    /// Raised by every writable open, above every epoch any copy holds:
    /// replay never follows a record of an older epoch after a newer one,
    /// so records a copy kept from a history the pool abandoned (written
    /// while the other copies were away) are never taken for new ones.
    pub epoch: u64,
}

/// Epochs of opens of one superblock generation differ in their low
/// bits.
const EPOCH_SPAN: u64 = 1 << 20;

/// The epoch of a writable open's records: above every epoch an earlier
/// open can have written. Each writable open writes its superblocks (a
/// generation above the last) before it appends, so an open finding
/// generation `generation` is above every earlier one when its epoch's
/// high bits exceed that generation; and above `seen`, the newest epoch
/// replay found in any copy (should a superblock write have been lost).
/// The low bits are random: two opens that each found the same newest
/// superblock (a device away from one, another away from the other) get
/// different epochs, so replay takes one history whole, never a mix.
pub fn next_epoch(generation: u64, seen: u64) -> u64 {
    use rand::Rng;
    let base = generation.saturating_add(1).saturating_mul(EPOCH_SPAN).max((seen | (EPOCH_SPAN - 1)).saturating_add(1));
    base.saturating_add(rand::thread_rng().gen_range(0..EPOCH_SPAN))
}

fn append_as(storage: &Storage, r: &Region, j: &Copies, c: &mut Cursor, payload: &[u8], magic: u64) -> Result<()> {
    let n = record_blocks(payload.len());
    let dev =
        storage.devs.get(r.dev as usize).ok_or_else(|| Error::Device(format!("journal device {} missing", r.dev)))?;
    if c.head + n > r.blocks {
        let mut blk = vec![0u8; BLOCK_SIZE];
        blk[..HDR].copy_from_slice(&header(WRAP_MAGIC, j.salt, c.seq, j.epoch, 1, &[]));
        dev.write_blocks(r.start + c.head, &blk)?;
        c.head = 0;
    }
    let mut buf = vec![0u8; n as usize * BLOCK_SIZE];
    buf[..HDR].copy_from_slice(&header(magic, j.salt, c.seq, j.epoch, n as u32, payload));
    buf[HDR..HDR + payload.len()].copy_from_slice(payload);
    dev.write_blocks(r.start + c.head, &buf)?;
    c.head = (c.head + n) % r.blocks;
    c.seq += 1;
    Ok(())
}

/// How a record is made durable with the data its ops point at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The data was flushed first; the record's copies are flushed after.
    Ordered,
    /// The data is not flushed yet: the record is written with the verified
    /// magic and one flush of every device makes record and data durable.
    Verified,
}

/// Appends one record to every copy of the journal (in parallel) and
/// flushes each copy (with [`Order::Verified`], every device of the pool).
/// A copy whose device takes no writes is skipped; one that fails marks its
/// device Faulted (the handle does) and is skipped from then on. Succeeds
/// when at least one copy is durable, and returns how many are: the caller
/// tells a pool whose record has fewer copies than it keeps.
pub fn append(storage: &Storage, j: &Copies, c: &mut Cursor, payload: &[u8], order: Order) -> Result<usize> {
    let (magic, verified) = match order {
        Order::Ordered => (REC_MAGIC, false),
        Order::Verified => (REC_MAGIC_VERIFIED, true),
    };
    // The journal's own writes never wait for ordered mode's flush.
    let copy = |reg: &Region| -> Result<Cursor> {
        let dev = storage
            .devs
            .get(reg.dev as usize)
            .ok_or_else(|| Error::Device(format!("journal device {} missing", reg.dev)))?;
        dev.check_writable()?;
        let mut cc = *c;
        crate::device::verified_by_recovery(|| append_as(storage, reg, j, &mut cc, payload, magic))?;
        if !verified {
            dev.flush()?;
        }
        Ok(cc)
    };
    let results: Vec<Result<Cursor>> = match j.regions.as_slice() {
        [] => return Err(Error::Device("journal: no copy".into())),
        [one] => vec![copy(one)],
        [first, rest @ ..] => crate::helpers::scope(|s| {
            let hs: Vec<_> = rest.iter().map(|r| s.spawn(move || copy(r))).collect();
            let mut v = vec![copy(first)];
            v.extend(
                hs.into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Err(Error::Device("journal copy thread failed".into())))),
            );
            v
        }),
    };
    if verified && results.iter().any(|r| r.is_ok()) {
        storage.flush_all()?;
    }
    let mut done = None;
    let mut durable = 0;
    let mut errs = Vec::new();
    for (reg, r) in j.regions.iter().zip(results) {
        // After the pool-wide flush, a copy counts if its device took it.
        let r = r.and_then(|cc| {
            if verified && !storage.devs.get(reg.dev as usize).is_some_and(|d| d.state().writable()) {
                return Err(Error::Device(format!("journal device {} failed its flush", reg.dev)));
            }
            Ok(cc)
        });
        match r {
            Ok(cc) => {
                durable += 1;
                done = Some(cc);
            }
            Err(e) => errs.push(format!("device {}: {e}", reg.dev)),
        }
    }
    match done {
        Some(cc) => {
            if !errs.is_empty() && errs.len() < j.regions.len() {
                tracing::debug!("journal record on {durable} of {} copies ({})", j.regions.len(), errs.join("; "));
            }
            *c = cc;
            Ok(durable)
        }
        None => Err(Error::Device(format!("journal: no copy could be written ({})", errs.join("; ")))),
    }
}

/// One record (or wrap marker) replay took: where it lies, which copy it
/// was read from, and which copies hold it as well.
#[derive(Debug, Clone)]
pub struct Piece {
    pub head: u64,
    pub nblocks: u64,
    /// Bit `i` set: copy `i` holds this record, verified.
    pub holders: u64,
}

/// What replay found in the journal.
#[derive(Debug)]
pub struct Replayed {
    /// Payloads of the valid records, in order.
    pub records: Vec<Vec<u8>>,
    /// The cursor after the last of them.
    pub end: Cursor,
    /// When the last record was written in verified mode ([`Order`]): the
    /// cursor before it, where the journal goes on should recovery find its
    /// data incomplete and drop it.
    pub verify_last: Option<Cursor>,
    /// The records and wrap markers taken, in order.
    pub pieces: Vec<Piece>,
    /// The newest epoch any copy holds at a record's place (taken or not):
    /// the next open's epoch is above it.
    pub max_epoch: u64,
    /// Copies that could not be read at all.
    pub unreadable: Vec<u32>,
}

impl Replayed {
    /// Devices of the copies missing a record or marker the others hold
    /// (among those that could be read).
    pub fn lagging(&self, j: &Copies) -> Vec<u32> {
        j.regions
            .iter()
            .enumerate()
            .filter(|(i, r)| !self.unreadable.contains(&r.dev) && self.pieces.iter().any(|p| p.holders & (1 << i) == 0))
            .map(|(_, r)| r.dev)
            .collect()
    }
}

/// Replays the journal from `start` over all its copies at once, record by
/// record: at each place it takes the record with the expected sequence
/// number, of the newest epoch no older than the last record taken, that
/// reads back whole from some copy (each record is checksummed). So a copy
/// torn or damaged in one range is read past through the others, a copy
/// that missed records while its device was away is passed over, and a
/// copy holding records of a history the pool abandoned (same sequence
/// numbers, an older epoch) is never followed. Replay ends where no copy
/// holds the next record. The first record taken is of epoch `floor` or
/// newer (the epoch the checkpoint it starts from was written in). A copy
/// on an unreadable device is skipped; at least one must be read.
pub fn replay(storage: &Storage, j: &Copies, start: Cursor, floor: u64) -> Result<Replayed> {
    let regions = &j.regions;
    let blocks = regions.first().map_or(0, |r| r.blocks);
    let mut unreadable: Vec<u32> = Vec::new();
    let mut errs = Vec::new();
    let readable: Vec<bool> = regions
        .iter()
        .map(|r| match storage.devs.get(r.dev as usize) {
            Some(d) if d.state().readable() => true,
            Some(d) => {
                errs.push(format!("device {} is {}", r.dev, d.state()));
                false
            }
            None => {
                errs.push(format!("device {} is not in the pool", r.dev));
                false
            }
        })
        .collect();
    for (r, ok) in regions.iter().zip(&readable) {
        if !ok {
            unreadable.push(r.dev);
        }
    }
    let mut live: Vec<bool> = readable.clone();
    let read = |i: usize, at: u64, buf: &mut [u8]| -> Result<()> {
        let r = &regions[i];
        storage.devs[r.dev as usize].read_blocks(r.start + at, buf)
    };
    let mut c = Cursor { tail: start.tail, head: start.tail, seq: start.seq };
    let mut at_wrap: Option<Cursor> = None;
    let mut out = Vec::new();
    let mut pieces = Vec::new();
    let mut verify_last = None;
    let mut scanned = 0u64;
    let mut last_epoch = floor;
    let mut max_epoch = 0u64;
    let mut blk = vec![0u8; BLOCK_SIZE];
    while scanned < blocks {
        if c.head >= blocks {
            c.head = 0;
        }
        // Each copy's header here, if it is the next in sequence.
        let mut heads: Vec<(usize, Header)> = Vec::new();
        for i in 0..regions.len() {
            if !live[i] {
                continue;
            }
            if let Err(e) = read(i, c.head, &mut blk) {
                tracing::warn!("journal copy on device {} unreadable at block {}: {e}", regions[i].dev, c.head);
                errs.push(format!("device {}: {e}", regions[i].dev));
                live[i] = false;
                unreadable.push(regions[i].dev);
                continue;
            }
            let Some(h) = parse_header(&blk, j.salt) else { continue };
            if h.seq != c.seq {
                continue;
            }
            max_epoch = max_epoch.max(h.epoch);
            let sane = h.kind == Kind::Wrap
                || (h.nblocks > 0
                    && c.head + h.nblocks <= blocks
                    && h.len as u64 + h.at as u64 <= h.nblocks * BLOCK_SIZE as u64);
            if sane && h.epoch >= last_epoch {
                heads.push((i, h));
            }
        }
        // Newest epoch first; the first that reads back whole is taken.
        heads.sort_by_key(|(i, h)| (std::cmp::Reverse(h.epoch), *i));
        let mut taken: Option<(Header, Option<Vec<u8>>)> = None;
        let mut holders = 0u64;
        for (i, h) in &heads {
            if taken.as_ref().is_some_and(|(t, _)| t != h) {
                continue;
            }
            if h.kind == Kind::Wrap {
                holders |= 1 << i;
                taken.get_or_insert((*h, None));
                continue;
            }
            let mut rec = vec![0u8; (h.nblocks as usize) * BLOCK_SIZE];
            if let Err(e) = read(*i, c.head, &mut rec) {
                tracing::warn!("journal copy on device {} unreadable at block {}: {e}", regions[*i].dev, c.head);
                continue;
            }
            let payload = &rec[h.at..h.at + h.len];
            if crc(payload) != h.crc {
                continue;
            }
            holders |= 1 << i;
            if taken.is_none() {
                taken = Some((*h, Some(payload.to_vec())));
            }
        }
        let Some((h, payload)) = taken else { break };
        last_epoch = h.epoch;
        // The cursor before this record (and a wrap marker ahead of it).
        let before = at_wrap.take().unwrap_or(c);
        if h.kind == Kind::Wrap {
            pieces.push(Piece { head: c.head, nblocks: 1, holders });
            at_wrap = Some(c);
            scanned += blocks - c.head;
            c.head = 0;
            continue;
        }
        pieces.push(Piece { head: c.head, nblocks: h.nblocks, holders });
        out.push(payload.unwrap_or_default());
        verify_last = (h.kind == Kind::Verified).then_some(before);
        c.head = (c.head + h.nblocks) % blocks;
        c.seq += 1;
        scanned += h.nblocks;
    }
    // Where no copy could be read on, what lies beyond is unknown.
    if !live.iter().any(|&l| l) {
        return Err(Error::Device(format!("journal: no copy is readable ({})", errs.join("; "))));
    }
    unreadable.sort_unstable();
    unreadable.dedup();
    Ok(Replayed { records: out, end: c, verify_last, pieces, max_epoch, unreadable })
}

/// Makes every writable copy hold what replay took: each record or
/// marker a copy lacks is copied from one that holds it. Returns the
/// devices of the copies rewritten. The caller flushes.
pub fn resync(storage: &Storage, j: &Copies, rp: &Replayed) -> Result<Vec<u32>> {
    let mut fixed = Vec::new();
    for (i, to) in j.regions.iter().enumerate() {
        let Some(dst) = storage.devs.get(to.dev as usize).filter(|d| d.state().writable() && d.state().readable())
        else {
            continue;
        };
        let mut wrote = false;
        for p in rp.pieces.iter().filter(|p| p.holders & (1 << i) == 0) {
            let Some(k) = (0..j.regions.len()).find(|k| p.holders & (1 << k) != 0) else { continue };
            let from = &j.regions[k];
            let mut buf = vec![0u8; p.nblocks as usize * BLOCK_SIZE];
            storage.devs[from.dev as usize].read_blocks(from.start + p.head, &mut buf)?;
            dst.write_blocks(to.start + p.head, &buf)?;
            wrote = true;
        }
        if wrote {
            fixed.push(to.dev);
        }
    }
    Ok(fixed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{Device, DeviceHandle, MemDevice};
    use crate::pool::Allocator;
    use std::sync::Arc;

    const BLOCKS: u64 = 64;

    fn storage(n: usize) -> (Storage, Vec<Arc<MemDevice>>) {
        let mems: Vec<Arc<MemDevice>> =
            (0..n).map(|i| Arc::new(MemDevice::new(format!("m{i}"), BLOCKS * BLOCK_SIZE as u64))).collect();
        let devs = mems.iter().enumerate().map(|(i, m)| DeviceHandle::new(i as u32, m.clone() as Arc<dyn Device>));
        let s = Storage {
            devs: devs.collect::<Vec<_>>().into(),
            allocs: (0..n).map(|_| Allocator::new(0, BLOCKS)).collect::<Vec<_>>().into(),
        };
        (s, mems)
    }

    fn copies(n: u32, epoch: u64) -> Copies {
        Copies { regions: (0..n).map(|d| Region { dev: d, start: 0, blocks: BLOCKS }).collect(), salt: 9, epoch }
    }

    fn payload(i: u64) -> Vec<u8> {
        vec![i as u8; 100 + (i as usize * 1000) % 6000]
    }

    /// Three copies, each damaged in a different record: replay takes
    /// every record from a copy that holds it, and after the copies are
    /// brought up to date each one alone replays them all.
    #[test]
    fn copies_damaged_in_different_records_replay_whole() {
        let (s, mems) = storage(3);
        let j = copies(3, 5);
        let start = Cursor { tail: 0, head: 0, seq: 1 };
        let mut c = start;
        let mut heads = Vec::new();
        for i in 0..9 {
            heads.push(c.head);
            assert_eq!(append(&s, &j, &mut c, &payload(i), Order::Ordered).unwrap(), 3);
        }
        for (dev, rec) in [(0usize, 2usize), (1, 5), (2, 7)] {
            let at = (heads[rec] * BLOCK_SIZE as u64) + HDR as u64 + 10;
            mems[dev].write_at(&[0xee], at).unwrap();
        }
        let rp = replay(&s, &j, start, 0).unwrap();
        assert_eq!(rp.records, (0..9).map(payload).collect::<Vec<_>>());
        assert_eq!(rp.end, c);
        assert_eq!(rp.lagging(&j), [0, 1, 2]);
        assert_eq!(resync(&s, &j, &rp).unwrap(), [0, 1, 2]);
        for d in 0..3u32 {
            let one = Copies { regions: vec![j.regions[d as usize]], ..j.clone() };
            assert_eq!(replay(&s, &one, start, 0).unwrap().records.len(), 9, "copy {d} alone");
        }
    }

    /// Records of the format before epochs replay (as epoch 0), and new
    /// records follow them; a record of an epoch older than the one before
    /// it ends replay, as does one older than the floor it starts from.
    #[test]
    fn records_before_epochs_replay_and_older_epochs_end_replay() {
        let (s, mems) = storage(1);
        let start = Cursor { tail: 0, head: 0, seq: 1 };
        // A record as a format-5 pool wrote it: the 40-byte header.
        let p = b"old ops".to_vec();
        let mut e = Encoder::new();
        e.u64(OLD_REC_MAGIC).u64(1).u32(1).u32(p.len() as u32).u32(crc(&p)).u64(9);
        let hc = crc(&e.buf);
        e.u32(hc);
        let mut blk = e.into_inner();
        blk.extend_from_slice(&p);
        blk.resize(BLOCK_SIZE, 0);
        mems[0].write_at(&blk, 0).unwrap();
        let mut c = Cursor { tail: 0, head: 1, seq: 2 };
        append(&s, &copies(1, 7), &mut c, b"new", Order::Ordered).unwrap();
        append(&s, &copies(1, 3), &mut c, b"older epoch", Order::Ordered).unwrap();
        let rp = replay(&s, &copies(1, 0), start, 0).unwrap();
        assert_eq!(rp.records, [b"old ops".to_vec(), b"new".to_vec()]);
        assert_eq!(rp.max_epoch, 7);
        // From a checkpoint of epoch 7 on, the format-5 record is not taken.
        assert!(replay(&s, &copies(1, 0), start, 7).unwrap().records.is_empty());
        assert!(next_epoch(0, rp.max_epoch) > 7 && next_epoch(3, 0) >= 4 * EPOCH_SPAN);
    }
}
