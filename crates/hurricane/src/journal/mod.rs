//! The write-ahead journal.
//!
//! Meta-data changes are logical [`Op`]s. A thread that changes meta-data
//! enters the [`Gate`] (a read lock on one of many cache-padded shards, so
//! writers on different cores never share a lock), applies its ops to the
//! in-memory state and logs them into its shard's buffer as one *group* that
//! commits atomically. The committer closes the gate for an instant (write
//! locks on every shard), takes every buffer in sequence order as one batch,
//! and writes it as a checksummed record to a circular region on device 0.
//!
//! Ordered mode: the committer flushes every data device before it writes
//! the record, so data in newly allocated blocks is durable before the
//! meta-data that points at it.

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
        let mut all: Vec<(u64, Vec<u8>)> = Vec::new();
        for s in self.shards.iter() {
            let mut buf = s.buf.lock();
            let mut pos = 0;
            while pos + 12 <= buf.len() {
                let seq = u64::from_le_bytes(buf[pos..pos + 8].try_into().unwrap_or_default());
                let len = u32::from_le_bytes(buf[pos + 8..pos + 12].try_into().unwrap_or_default()) as usize;
                all.push((seq, buf[pos + 12..pos + 12 + len].to_vec()));
                pos += 12 + len;
            }
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

const REC_MAGIC: u64 = u64::from_le_bytes(*b"HCJRNL01");
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
    buf[..HDR].copy_from_slice(&header(REC_MAGIC, salt, c.seq, n as u32, payload));
    buf[HDR..HDR + payload.len()].copy_from_slice(payload);
    dev.write_blocks(r.start + c.head, &buf)?;
    c.head = (c.head + n) % r.blocks;
    c.seq += 1;
    Ok(())
}

/// Reads every valid record from the cursor's tail on, in order; returns
/// their payloads and the cursor after the last one. Stops at the first
/// block that is not the next record in sequence (a torn or stale record):
/// time is proportional to the journal, not the pool.
pub fn replay(storage: &Storage, r: &Region, salt: u64, start: Cursor) -> Result<(Vec<Vec<u8>>, Cursor)> {
    let dev =
        storage.devs.get(r.dev as usize).ok_or_else(|| Error::Device(format!("journal device {} missing", r.dev)))?;
    let mut c = Cursor { tail: start.tail, head: start.tail, seq: start.seq };
    let mut out = Vec::new();
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
        if h.magic == WRAP_MAGIC {
            scanned += r.blocks - c.head;
            c.head = 0;
            continue;
        }
        if h.magic != REC_MAGIC
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
        c.head = (c.head + h.nblocks) % r.blocks;
        c.seq += 1;
        scanned += h.nblocks;
    }
    Ok((out, c))
}
