//! The write-ahead journal.
//!
//! Meta-data changes are logical [`Op`]s. A thread that changes meta-data
//! enters the [`Gate`] (a read lock on one of many cache-padded shards, so
//! writers on different cores never share a lock), applies its ops to the
//! in-memory state and logs them into its shard's buffer as one *group* that
//! commits atomically. The committer closes the gate for an instant (write
//! locks on every shard), takes every buffer in sequence order as one batch,
//! and writes it as a checksummed record to a circular region on device 0,
//! and to a mirror of that region on device 1 in pools of two or more
//! devices (either copy alone replays the pool).
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

const REC_MAGIC: u64 = u64::from_le_bytes(*b"HCJRNL01");
/// A record written before its data was flushed (verified mode).
const REC_MAGIC_VERIFIED: u64 = u64::from_le_bytes(*b"HCJRNLV1");
const WRAP_MAGIC: u64 = u64::from_le_bytes(*b"HCJWRAP1");
const HDR: usize = 40;

fn header(magic: u64, salt: u64, seq: u64, nblocks: u32, payload: &[u8]) -> [u8; HDR] {
    let mut e = Encoder::with_capacity(HDR);
    e.u64(magic).u64(seq).u32(nblocks).u32(payload.len() as u32).u32(crc(payload)).u64(salt);
    let c = crc(&e.buf);
    e.u32(c);
    let mut h = [0u8; HDR];
    h.copy_from_slice(&e.buf);
    h
}

struct Header {
    magic: u64,
    seq: u64,
    nblocks: u64,
    len: usize,
    crc: u32,
}

/// A header of this pool's journal (the salt, from the pool id, keeps a
/// reformatted device's old records from being replayed into a new pool).
fn parse_header(b: &[u8], salt: u64) -> Option<Header> {
    let mut d = Decoder::new(&b[..HDR], "journal header");
    let magic = d.u64().ok()?;
    let seq = d.u64().ok()?;
    let nblocks = d.u32().ok()? as u64;
    let len = d.u32().ok()? as usize;
    let pcrc = d.u32().ok()?;
    let s = d.u64().ok()?;
    let hcrc = d.u32().ok()?;
    (crc(&b[..HDR - 4]) == hcrc && s == salt).then_some(Header { magic, seq, nblocks, len, crc: pcrc })
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

/// Appends one record. The caller has checked `fits` and flushes afterwards.
pub fn append(storage: &Storage, r: &Region, salt: u64, c: &mut Cursor, payload: &[u8]) -> Result<()> {
    append_as(storage, r, salt, c, payload, REC_MAGIC)
}

fn append_as(storage: &Storage, r: &Region, salt: u64, c: &mut Cursor, payload: &[u8], magic: u64) -> Result<()> {
    let n = record_blocks(payload.len());
    let dev =
        storage.devs.get(r.dev as usize).ok_or_else(|| Error::Device(format!("journal device {} missing", r.dev)))?;
    if c.head + n > r.blocks {
        let mut blk = vec![0u8; BLOCK_SIZE];
        blk[..HDR].copy_from_slice(&header(WRAP_MAGIC, salt, c.seq, 1, &[]));
        dev.write_blocks(r.start + c.head, &blk)?;
        c.head = 0;
    }
    let mut buf = vec![0u8; n as usize * BLOCK_SIZE];
    buf[..HDR].copy_from_slice(&header(magic, salt, c.seq, n as u32, payload));
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

/// Appends one record to the journal and its mirror (in parallel) and
/// flushes each copy (with [`Order::Verified`], every device of the pool).
/// A copy whose device takes no writes is skipped; one that fails marks its
/// device Faulted (the handle does) and is skipped from then on. Succeeds
/// when at least one copy is durable.
pub fn append_mirrored(
    storage: &Storage,
    r: &Region,
    mirror: Option<&Region>,
    salt: u64,
    c: &mut Cursor,
    payload: &[u8],
    order: Order,
) -> Result<()> {
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
        crate::device::verified_by_recovery(|| append_as(storage, reg, salt, &mut cc, payload, magic))?;
        if !verified {
            dev.flush()?;
        }
        Ok(cc)
    };
    let (a, b) = match mirror {
        None => (copy(r), None),
        Some(m) => crate::helpers::scope(|s| {
            let h = s.spawn(|| copy(m));
            let a = copy(r);
            let b = h.join().unwrap_or_else(|_| Err(Error::Device("journal mirror thread failed".into())));
            (a, Some(b))
        }),
    };
    let durable = |x: Result<Cursor>, reg: &Region| -> Result<Cursor> {
        let cc = x?;
        // After the pool-wide flush, a copy counts if its device took it.
        if verified && !storage.devs.get(reg.dev as usize).is_some_and(|d| d.state().writable()) {
            return Err(Error::Device(format!("journal device {} failed its flush", reg.dev)));
        }
        Ok(cc)
    };
    if verified && (a.is_ok() || b.as_ref().is_some_and(|b| b.is_ok())) {
        storage.flush_all()?;
    }
    let a = durable(a, r);
    let Some((b, m)) = b.zip(mirror) else {
        *c = a?;
        return Ok(());
    };
    let b = durable(b, m);
    match (a, b) {
        (Ok(ca), _) => {
            *c = ca;
            Ok(())
        }
        (Err(ea), Ok(cb)) => {
            tracing::warn!("journal copy on device {} failed, the mirror holds the record: {ea}", r.dev);
            *c = cb;
            Ok(())
        }
        (Err(ea), Err(eb)) => Err(Error::Device(format!(
            "journal: no copy could be written (device {}: {ea}; mirror on device {}: {eb})",
            r.dev, m.dev
        ))),
    }
}

/// Which copy of a mirrored journal replay took its records from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JournalCopy {
    /// The journal itself (also: both copies agreed).
    #[default]
    Primary,
    /// The mirror: the journal's device was unreadable or its copy ended sooner.
    Mirror,
}

/// What replay found in the journal.
#[derive(Debug)]
pub struct Replayed {
    /// Payloads of the valid records, in order.
    pub records: Vec<Vec<u8>>,
    /// The cursor after the last of them.
    pub end: Cursor,
    /// Which copy they came from.
    pub copy: JournalCopy,
    /// When the last record was written in verified mode ([`Order`]): the
    /// cursor before it, where the journal goes on should recovery find its
    /// data incomplete and drop it.
    pub verify_last: Option<Cursor>,
}

/// Replays a mirrored journal: reads both copies from the same cursor and
/// takes the one whose valid record sequence reaches further (each record is
/// checksummed; a torn or damaged record ends a copy). A copy on an
/// unreadable device is skipped. When the copies differ, returns the blocks
/// to copy onto the other one (see [`resync`]).
pub fn replay_mirrored(
    storage: &Storage,
    r: &Region,
    mirror: Option<&Region>,
    salt: u64,
    start: Cursor,
) -> Result<Replayed> {
    let Some(m) = mirror else {
        return replay_records(storage, r, salt, start);
    };
    let a = replay_records(storage, r, salt, start);
    let b = replay_records(storage, m, salt, start);
    match (a, b) {
        (Ok(a), Ok(b)) => {
            if b.end.seq > a.end.seq {
                tracing::warn!(
                    "journal copy on device {} ends at record {}, its mirror on device {} at {}: replaying the mirror",
                    r.dev,
                    a.end.seq,
                    m.dev,
                    b.end.seq
                );
                Ok(Replayed { copy: JournalCopy::Mirror, ..b })
            } else {
                if a.end.seq > b.end.seq {
                    tracing::warn!(
                        "journal mirror on device {} ends at record {}, the journal on device {} at {}",
                        m.dev,
                        b.end.seq,
                        r.dev,
                        a.end.seq
                    );
                }
                Ok(a)
            }
        }
        (Ok(a), Err(e)) => {
            tracing::warn!("journal mirror on device {} unreadable, replaying the journal: {e}", m.dev);
            Ok(a)
        }
        (Err(e), Ok(b)) => {
            tracing::warn!("journal on device {} unreadable, replaying its mirror: {e}", r.dev);
            Ok(Replayed { copy: JournalCopy::Mirror, ..b })
        }
        (Err(ea), Err(eb)) => Err(Error::Device(format!(
            "journal: no copy is readable (device {}: {ea}; mirror on device {}: {eb})",
            r.dev, m.dev
        ))),
    }
}

/// Copies the live part of the journal (from the cursor's tail to its head)
/// from one copy to the other, so both hold every record replay found and
/// later appends continue both. `to`'s device must be writable; the caller
/// flushes.
pub fn resync(storage: &Storage, from: &Region, to: &Region, c: &Cursor) -> Result<()> {
    let get = |reg: &Region| {
        storage.devs.get(reg.dev as usize).ok_or_else(|| Error::Device(format!("journal device {} missing", reg.dev)))
    };
    let (src, dst) = (get(from)?, get(to)?);
    let mut pieces = Vec::new();
    if c.head >= c.tail {
        pieces.push((c.tail, c.head - c.tail));
    } else {
        pieces.push((c.tail, from.blocks - c.tail));
        pieces.push((0, c.head));
    }
    const STEP: u64 = 256;
    let mut buf = Vec::new();
    for (s, n) in pieces {
        let mut pos = 0;
        while pos < n {
            let k = (n - pos).min(STEP);
            buf.resize(k as usize * BLOCK_SIZE, 0);
            src.read_blocks(from.start + s + pos, &mut buf)?;
            dst.write_blocks(to.start + s + pos, &buf)?;
            pos += k;
        }
    }
    Ok(())
}

/// Reads every valid record from the cursor's tail on, in order; returns
/// their payloads and the cursor after the last one. Stops at the first
/// block that is not the next record in sequence (a torn or stale record):
/// time is proportional to the journal, not the pool.
pub fn replay(storage: &Storage, r: &Region, salt: u64, start: Cursor) -> Result<(Vec<Vec<u8>>, Cursor)> {
    let rp = replay_records(storage, r, salt, start)?;
    Ok((rp.records, rp.end))
}

/// [`replay`], noting whether the last record was written in verified mode.
fn replay_records(storage: &Storage, r: &Region, salt: u64, start: Cursor) -> Result<Replayed> {
    let dev =
        storage.devs.get(r.dev as usize).ok_or_else(|| Error::Device(format!("journal device {} missing", r.dev)))?;
    let mut c = Cursor { tail: start.tail, head: start.tail, seq: start.seq };
    let mut at_wrap: Option<Cursor> = None;
    let mut out = Vec::new();
    let mut verify_last = None;
    let mut scanned = 0u64;
    let mut blk = vec![0u8; BLOCK_SIZE];
    while scanned < r.blocks {
        if c.head >= r.blocks {
            c.head = 0;
        }
        dev.read_blocks(r.start + c.head, &mut blk)?;
        let Some(h) = parse_header(&blk, salt) else { break };
        if h.seq != c.seq {
            break;
        }
        // The cursor before this record (and a wrap marker ahead of it).
        let before = at_wrap.take().unwrap_or(c);
        if h.magic == WRAP_MAGIC {
            at_wrap = Some(c);
            scanned += r.blocks - c.head;
            c.head = 0;
            continue;
        }
        if !(h.magic == REC_MAGIC || h.magic == REC_MAGIC_VERIFIED)
            || h.nblocks == 0
            || c.head + h.nblocks > r.blocks
            || h.len as u64 + HDR as u64 > h.nblocks * BLOCK_SIZE as u64
        {
            break;
        }
        let mut rec = vec![0u8; (h.nblocks as usize) * BLOCK_SIZE];
        dev.read_blocks(r.start + c.head, &mut rec)?;
        let payload = &rec[HDR..HDR + h.len];
        if crc(payload) != h.crc {
            break;
        }
        out.push(payload.to_vec());
        verify_last = (h.magic == REC_MAGIC_VERIFIED).then_some(before);
        c.head = (c.head + h.nblocks) % r.blocks;
        c.seq += 1;
        scanned += h.nblocks;
    }
    Ok(Replayed { records: out, end: c, copy: JournalCopy::Primary, verify_last })
}
