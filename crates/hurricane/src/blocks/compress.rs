//! `compress`: one child, the file cut into chunks of `chunk` bytes, each
//! stored compressed (zstd or lz4) when that saves at least one block, and
//! raw otherwise. Chunk `i` lives at the child's file blocks
//! `[i*C, i*C + s)`, C blocks to a chunk and `s` the blocks its stored bytes
//! fill; the rest of the chunk's range in the child is a hole, so the
//! child (an `extent`, a `stripe` of them...) holds only the compressed
//! bytes. A chunk of zeros is stored as nothing at all.
//!
//! The node's state is the chunk index: per stored chunk its stored length,
//! how it is stored and, for a compressed one, the crc32c of its
//! uncompressed bytes. A compressed chunk is read whole, decompressed and
//! verified against that crc; one that fails either is an I/O error
//! ([`Error::Checksum`], so a redundant parent reads another copy), never
//! data. Raw chunks are read in part, as a plain child would be.
//!
//! Writes of part of a chunk read, merge and store the chunk again. The new
//! stored bytes go copy-on-write where the child can punch holes and its
//! devices have room: the chunk's old blocks are punched (their space comes
//! back only when the request's journal batch commits), the new ones are
//! written to fresh space, and the new index entry is recorded in the same
//! batch. A crash before the batch commits leaves the old entry over the
//! old bytes; after it, the new ones. (`extent`, `checksum`, `stripe`,
//! `regions` and `replicate` punch; `parity` does not, but never writes a
//! stripe in place either, and a child that never overwrites in place,
//! such as `log`, is not punched ahead of the write.)
//!
//! Concurrency: readers and writers hold the chunks they touch in a range
//! lock (whole chunks), so a reader never sees a chunk half rewritten and
//! two writers of one chunk never merge into each other's old bytes.
//!
//! Counters of every compress node in the process (bytes in and out, how
//! chunks were stored, time spent compressing and decompressing) are in
//! [`stats`], which `hurricane stats` prints.

use super::common::{chunks, span, RangeLock};
use super::{Block, BlockType, BuildArgs, IoCtx, ParamKind, ParamSpec, Params, Value, BLOCK_SIZE};
use crate::codec::{Decoder, Encoder};
use crate::error::{Error, Result};
use parking_lot::RwLock;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

const ALGOS: &[&str] = &["lz4", "zstd"];

pub static TYPE: BlockType = BlockType {
    name: "compress",
    doc: "Stores the file in chunks compressed with zstd or lz4 (raw where that saves nothing); chunks of zeros take no space.",
    params: &[
        ParamSpec {
            key: "algo",
            kind: ParamKind::Choice(ALGOS),
            default: Some("zstd"),
            min: 0,
            max: 0,
            doc: "compressor: zstd (smaller) or lz4 (faster)",
        },
        ParamSpec {
            key: "level",
            kind: ParamKind::Int,
            default: Some("3"),
            min: 1,
            max: 19,
            doc: "zstd level, 1 (fastest) to 19 (smallest); lz4 has a single level",
        },
        ParamSpec {
            key: "chunk",
            kind: ParamKind::Size,
            default: Some("64K"),
            min: BLOCK_SIZE as u64,
            max: 1 << 20,
            doc: "bytes compressed together (a multiple of 4K)",
        },
    ],
    per_device: false,
    min_children: 1,
    max_children: 1,
    distinct_devices: false,
    width_param: None,
    implied_width: None,
    state_version: Some(1),
    in_metadata: false,
    build,
};

const BS: usize = BLOCK_SIZE;

/// How a chunk's bytes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Raw = 0,
    Lz4 = 1,
    Zstd = 2,
}

impl Method {
    fn from_u8(b: u8) -> Option<Method> {
        match b {
            0 => Some(Method::Raw),
            1 => Some(Method::Lz4),
            2 => Some(Method::Zstd),
            _ => None,
        }
    }
}

/// One stored chunk: its stored bytes (a whole chunk when raw), how they
/// are stored, and the crc32c of the uncompressed chunk (0 when raw).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Chunk {
    len: u32,
    method: Method,
    crc: u32,
}

/// A change to a compress node's index: its journal record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// Chunk `idx` is now stored as `chunk`.
    Set { idx: u64, chunk: Chunk },
    /// Chunks [from, to) are dropped (read as zeros; truncate: to = MAX).
    Drop { from: u64, to: u64 },
}

impl Change {
    fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        match *self {
            Change::Set { idx, chunk } => e.u8(1).u64(idx).u32(chunk.len).u8(chunk.method as u8).u32(chunk.crc),
            Change::Drop { from, to } => e.u8(2).u64(from).u64(to),
        };
        e.into_inner()
    }
}

/// The geometry a node's records and state are checked against.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    id: u32,
    /// File blocks per chunk.
    cblocks: u64,
}

impl Geometry {
    fn chunk_bytes(&self) -> u32 {
        (self.cblocks as usize * BS) as u32
    }

    /// Chunks past this one would have file blocks past 2^64.
    fn last_chunk(&self) -> u64 {
        u64::MAX / self.cblocks - 1
    }

    /// Strict: an entry whose chunk lies past 2^64 blocks, an empty or
    /// overlong length, a raw chunk that is not whole, an unknown method.
    fn check(&self, idx: u64, len: u32, method: u8, crc: u32) -> std::result::Result<Chunk, String> {
        let Some(method) = Method::from_u8(method) else {
            return Err(format!("chunk {idx}: unknown storage method {method}"));
        };
        if idx > self.last_chunk() {
            return Err(format!("chunk {idx} lies past the largest file"));
        }
        let ok = match method {
            Method::Raw => len == self.chunk_bytes() && crc == 0,
            _ => len > 0 && len < self.chunk_bytes(),
        };
        if !ok {
            return Err(format!("chunk {idx}: {len} stored bytes ({method:?}) in chunks of {}", self.chunk_bytes()));
        }
        Ok(Chunk { len, method, crc })
    }

    fn decode_change(&self, b: &[u8]) -> Result<Change> {
        let mut d = Decoder::new(b, "compress record");
        let c = match d.u8()? {
            1 => {
                let idx = d.u64()?;
                let (len, method, crc) = (d.u32()?, d.u8()?, d.u32()?);
                let chunk = self
                    .check(idx, len, method, crc)
                    .map_err(|e| Error::corrupt("journal", format!("compress node {}: {e}", self.id)))?;
                Change::Set { idx, chunk }
            }
            2 => {
                let (from, to) = (d.u64()?, d.u64()?);
                if from >= to {
                    return Err(Error::corrupt(
                        "journal",
                        format!("compress node {}: bad drop of chunks {from}..{to}", self.id),
                    ));
                }
                Change::Drop { from, to }
            }
            t => return Err(d.err(format!("unknown compress change {t}"))),
        };
        d.expect_end()?;
        Ok(c)
    }

    /// Decodes `count, (idx, len, method, crc)*`, refusing bad entries and
    /// unordered or repeated chunks.
    fn decode_state(&self, s: &[u8]) -> Result<BTreeMap<u64, Chunk>> {
        let mut d = Decoder::new(s, "compress index");
        let count = d.count(17)?;
        let mut map = BTreeMap::new();
        let mut next = 0u64;
        for i in 0..count {
            let idx = d.u64()?;
            let (len, method, crc) = (d.u32()?, d.u8()?, d.u32()?);
            let chunk = self.check(idx, len, method, crc).map_err(|e| d.err(e))?;
            if i > 0 && idx < next {
                return Err(d.err(format!("chunk {idx} repeated or out of order")));
            }
            next = idx + 1;
            map.insert(idx, chunk);
        }
        d.expect_end()?;
        Ok(map)
    }
}

fn apply(map: &mut BTreeMap<u64, Chunk>, c: Change) {
    match c {
        Change::Set { idx, chunk } => {
            map.insert(idx, chunk);
        }
        Change::Drop { from, to } => {
            let gone: Vec<u64> = map.range(from..to).map(|(&k, _)| k).collect();
            for k in gone {
                map.remove(&k);
            }
        }
    }
}

/// Counters of every compress node in the process.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CompressStats {
    /// Chunks stored compressed, stored raw (compression saved less than a
    /// block), and stored as nothing (all zeros).
    pub chunks_compressed: u64,
    pub chunks_raw: u64,
    pub chunks_zero: u64,
    /// Uncompressed bytes of the chunks stored, and the bytes they took.
    pub bytes_in: u64,
    pub bytes_stored: u64,
    /// Time spent compressing and decompressing, and the bytes decompressed.
    pub compress_ns: u64,
    pub decompress_ns: u64,
    pub bytes_decompressed: u64,
}

impl CompressStats {
    /// Uncompressed over stored bytes of the chunks stored (1.0 when none).
    pub fn ratio(&self) -> f64 {
        if self.bytes_stored == 0 {
            1.0
        } else {
            self.bytes_in as f64 / self.bytes_stored as f64
        }
    }
}

struct Counters([AtomicU64; 8]);
static COUNTERS: Counters = Counters([const { AtomicU64::new(0) }; 8]);
const C_COMPRESSED: usize = 0;
const C_RAW: usize = 1;
const C_ZERO: usize = 2;
const C_IN: usize = 3;
const C_STORED: usize = 4;
const C_COMPRESS_NS: usize = 5;
const C_DECOMPRESS_NS: usize = 6;
const C_DECOMPRESSED: usize = 7;

fn count(i: usize, n: u64) {
    COUNTERS.0[i].fetch_add(n, Relaxed);
}

/// The counters of every compress node in this process since it started.
pub fn stats() -> CompressStats {
    let g = |i: usize| COUNTERS.0[i].load(Relaxed);
    CompressStats {
        chunks_compressed: g(C_COMPRESSED),
        chunks_raw: g(C_RAW),
        chunks_zero: g(C_ZERO),
        bytes_in: g(C_IN),
        bytes_stored: g(C_STORED),
        compress_ns: g(C_COMPRESS_NS),
        decompress_ns: g(C_DECOMPRESS_NS),
        bytes_decompressed: g(C_DECOMPRESSED),
    }
}

thread_local! {
    /// A zstd compression context per thread, kept at the level last used
    /// (making one costs more than compressing a small chunk).
    static ZSTD_C: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> = const { RefCell::new(None) };
    static ZSTD_D: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// Compresses `data` with `method` into `out` (cleared first); false when
/// the compressor fails or needs more than `limit` bytes.
fn compress_into(method: Method, level: i32, data: &[u8], limit: usize, out: &mut Vec<u8>) -> bool {
    out.clear();
    match method {
        Method::Raw => false,
        Method::Lz4 => {
            out.resize(lz4_flex::block::get_maximum_output_size(data.len()), 0);
            match lz4_flex::block::compress_into(data, out) {
                Ok(n) if n <= limit => {
                    out.truncate(n);
                    true
                }
                _ => false,
            }
        }
        Method::Zstd => ZSTD_C.with(|c| {
            let mut c = c.borrow_mut();
            if c.as_ref().is_none_or(|(l, _)| *l != level) {
                *c = zstd::bulk::Compressor::new(level).ok().map(|z| (level, z));
            }
            let Some((_, z)) = c.as_mut() else { return false };
            out.reserve(zstd::zstd_safe::compress_bound(data.len()));
            matches!(z.compress_to_buffer(data, out), Ok(n) if n <= limit)
        }),
    }
}

/// Decompresses `src` into `dst`, which it must fill exactly.
fn decompress_into(method: Method, src: &[u8], dst: &mut [u8]) -> bool {
    match method {
        Method::Raw => false,
        Method::Lz4 => matches!(lz4_flex::block::decompress_into(src, dst), Ok(n) if n == dst.len()),
        Method::Zstd => ZSTD_D.with(|d| {
            let mut d = d.borrow_mut();
            if d.is_none() {
                *d = zstd::bulk::Decompressor::new().ok();
            }
            let Some(z) = d.as_mut() else { return false };
            matches!(z.decompress_to_buffer(src, dst), Ok(n) if n == dst.len())
        }),
    }
}

/// A chunk compressed and ready to be written.
enum Packed {
    /// All zeros: stored as nothing.
    Zero,
    /// Stored as it is.
    Raw,
    /// Stored as these bytes (padded to whole blocks).
    Compressed(Chunk, Vec<u8>),
}

/// A compressed chunk a read expands: (chunk, first block wanted, entry,
/// where the wanted blocks go, the outcome).
type Expansion<'b> = (u64, u64, Chunk, &'b mut [u8], Result<()>);

/// Requests of at least this many chunks compress or decompress them on
/// several threads (one chunk takes tens to hundreds of microseconds, a
/// thread start a few).
const PARALLEL_MIN_CHUNKS: usize = 2;

/// Runs `f` on every item, the items split over up to as many threads as
/// the process has CPUs (the calling thread takes the first share).
fn par_each<T: Send>(items: &mut [T], f: &(dyn Fn(&mut T) + Sync)) {
    let parts = crate::affinity::cpus().min(items.len());
    if parts < 2 || items.len() < PARALLEL_MIN_CHUNKS {
        items.iter_mut().for_each(f);
        return;
    }
    let per = items.len().div_ceil(parts);
    crate::helpers::scope(|s| {
        let mut groups = items.chunks_mut(per);
        let first = groups.next();
        let hs: Vec<_> = groups.map(|g| s.spawn(move || g.iter_mut().for_each(f))).collect();
        if let Some(g) = first {
            g.iter_mut().for_each(f);
        }
        for h in hs {
            h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        }
    });
}

struct Compress {
    g: Geometry,
    algo: Method,
    level: u32,
    children: Vec<Arc<dyn Block>>,
    /// Devices under the child (room for copy-on-write is checked on them).
    devices: Vec<u32>,
    map: RwLock<BTreeMap<u64, Chunk>>,
    busy: RangeLock,
}

fn build(a: BuildArgs) -> Result<Arc<dyn Block>> {
    let bytes = a.params.num("chunk")?;
    // Rounding would make the built tree print back as another layout.
    if !bytes.is_multiple_of(BS as u64) {
        return Err(Error::Layout(format!("compress: chunk={bytes} is not a multiple of 4K")));
    }
    let algo = match a.params.word("algo")? {
        "lz4" => Method::Lz4,
        _ => Method::Zstd,
    };
    let level = a.params.num("level")? as u32;
    let g = Geometry { id: a.id, cblocks: bytes / BS as u64 };
    let map = match a.state {
        Some(s) => g.decode_state(s)?,
        None => BTreeMap::new(),
    };
    let mut devices: Vec<u32> = a.children.iter().flat_map(super::common::devices_under).collect();
    devices.sort_unstable();
    devices.dedup();
    Ok(Arc::new(Compress {
        g,
        algo,
        level,
        children: a.children,
        devices,
        map: RwLock::new(map),
        busy: RangeLock::default(),
    }))
}

impl Compress {
    fn child(&self) -> Result<&Arc<dyn Block>> {
        self.children.first().ok_or_else(|| Error::Layout(format!("compress node {}: no child", self.g.id)))
    }

    fn blocks_of(len: u32) -> u64 {
        (len as u64).div_ceil(BS as u64)
    }

    fn bad_chunk(&self, idx: u64, why: &str) -> Error {
        tracing::error!(node = self.g.id, chunk = idx, "compressed chunk {why}");
        Error::Checksum(format!("compress node {}: chunk {idx} (file block {}) {why}", self.g.id, idx * self.g.cblocks))
    }

    /// Decompresses chunk `idx` (`chunk`, stored compressed) from `stored`
    /// into `dst` and verifies it.
    fn expand(&self, idx: u64, chunk: Chunk, stored: &[u8], dst: &mut [u8]) -> Result<()> {
        let t = Instant::now();
        let ok = decompress_into(chunk.method, &stored[..chunk.len as usize], dst);
        count(C_DECOMPRESS_NS, t.elapsed().as_nanos() as u64);
        if !ok {
            return Err(self.bad_chunk(idx, "does not decompress"));
        }
        count(C_DECOMPRESSED, dst.len() as u64);
        if crc32c::crc32c(dst) != chunk.crc {
            return Err(self.bad_chunk(idx, "does not match its checksum"));
        }
        Ok(())
    }

    /// The whole of chunk `idx` as the file sees it (the caller holds it).
    fn load(&self, io: &IoCtx, idx: u64) -> Result<Vec<u8>> {
        let c = self.g.cblocks;
        let mut out = vec![0u8; c as usize * BS];
        let entry = self.map.read().get(&idx).copied();
        match entry {
            None => {}
            Some(Chunk { method: Method::Raw, .. }) => self.child()?.read(io, idx * c, &mut out)?,
            Some(ch) => {
                let mut stored = vec![0u8; Self::blocks_of(ch.len) as usize * BS];
                self.child()?.read(io, idx * c, &mut stored)?;
                self.expand(idx, ch, &stored, &mut out)?;
            }
        }
        Ok(out)
    }

    /// Applies and journals a change to the index.
    fn publish(&self, io: &IoCtx, c: Change) {
        apply(&mut self.map.write(), c);
        io.record(&TYPE, self.g.id, &c.encode());
    }

    /// Punches the child's blocks of chunk `idx` (copy-on-write before a
    /// store, or space given back): where the child cannot punch, or its
    /// devices lack room for a second copy of the chunk, the chunk is
    /// overwritten in place instead.
    fn punch_chunk(&self, io: &IoCtx, idx: u64, for_copy: bool) -> Result<()> {
        let c = self.g.cblocks;
        if for_copy && !self.child()?.overwrites_in_place() {
            return Ok(());
        }
        if for_copy
            && !self
                .devices
                .iter()
                .all(|&d| io.storage.allocs.get(d as usize).is_some_and(|a| a.free_blocks() >= c * 2))
        {
            return Ok(());
        }
        match self.child()?.punch(io, idx * c, c) {
            Ok(()) | Err(Error::NotSupported(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Stores `data` (one whole chunk) as chunk `idx` (the caller holds it).
    fn store(&self, io: &IoCtx, idx: u64, data: &[u8]) -> Result<()> {
        let packed = self.pack(data);
        self.put(io, idx, data, packed)
    }

    /// Compresses one whole chunk: how it will be stored.
    fn pack(&self, data: &[u8]) -> Packed {
        if data.iter().all(|&b| b == 0) {
            count(C_ZERO, 1);
            return Packed::Zero;
        }
        // Worth it only if it saves at least one block.
        let limit = data.len() - BS;
        let t = Instant::now();
        let mut bytes = Vec::new();
        let compressed = compress_into(self.algo, self.level as i32, data, limit, &mut bytes);
        count(C_COMPRESS_NS, t.elapsed().as_nanos() as u64);
        count(C_IN, data.len() as u64);
        if !compressed {
            count(C_RAW, 1);
            count(C_STORED, data.len() as u64);
            return Packed::Raw;
        }
        count(C_COMPRESSED, 1);
        let chunk = Chunk { len: bytes.len() as u32, method: self.algo, crc: crc32c::crc32c(data) };
        bytes.resize(Self::blocks_of(chunk.len) as usize * BS, 0);
        count(C_STORED, bytes.len() as u64);
        Packed::Compressed(chunk, bytes)
    }

    /// Writes chunk `idx` as `packed` (made from `data`) and records it
    /// (the caller holds the chunk).
    fn put(&self, io: &IoCtx, idx: u64, data: &[u8], packed: Packed) -> Result<()> {
        let c = self.g.cblocks;
        let had = self.map.read().contains_key(&idx);
        let (chunk, bytes) = match packed {
            Packed::Zero => {
                if had {
                    self.punch_chunk(io, idx, false)?;
                    self.publish(io, Change::Drop { from: idx, to: idx + 1 });
                }
                return Ok(());
            }
            Packed::Raw => (Chunk { len: self.g.chunk_bytes(), method: Method::Raw, crc: 0 }, data),
            Packed::Compressed(ref chunk, ref bytes) => (*chunk, &bytes[..]),
        };
        if had {
            self.punch_chunk(io, idx, true)?;
        }
        let child = self.child()?;
        let r = child.write(io, idx * c, bytes);
        // A stored chunk shorter than the one before leaves the old one's
        // tail behind where the child could not punch: dropped now.
        if r.is_ok() && had {
            let s = Self::blocks_of(chunk.len);
            if s < c {
                match child.punch(io, idx * c + s, c - s) {
                    Ok(()) | Err(Error::NotSupported(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        // On failure the index keeps the old entry: reading it then fails
        // verification (or finds the old bytes), never passes off a mix.
        r?;
        self.publish(io, Change::Set { idx, chunk });
        Ok(())
    }

    /// Zeroes file blocks [fblk, fblk+n): whole chunks are dropped, parts
    /// of chunks rewritten (the caller holds the chunks).
    fn zero(&self, io: &IoCtx, fblk: u64, n: u64) -> Result<()> {
        let c = self.g.cblocks;
        for (idx, off, len) in chunks(fblk, n, c) {
            if !self.map.read().contains_key(&idx) {
                continue;
            }
            if len == c {
                self.put(io, idx, &[], Packed::Zero)?;
            } else {
                let mut data = self.load(io, idx)?;
                data[off as usize * BS..(off + len) as usize * BS].fill(0);
                self.store(io, idx, &data)?;
            }
        }
        Ok(())
    }
}

impl Block for Compress {
    fn id(&self) -> u32 {
        self.g.id
    }
    fn kind(&self) -> &'static BlockType {
        &TYPE
    }
    fn params(&self) -> Params {
        let mut p = Params::default();
        let algo = if self.algo == Method::Lz4 { "lz4" } else { "zstd" };
        p.0.insert("algo".into(), Value::Word(algo.into()));
        p.0.insert("level".into(), Value::Num(self.level as u64));
        p.0.insert("chunk".into(), Value::Num(self.g.cblocks * BS as u64));
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
        let c = self.g.cblocks;
        let child = self.child()?;
        let (first, last) = (fblk / c, (fblk + n - 1) / c);
        let _held = self.busy.hold(first * c, (last + 1).saturating_mul(c));
        let entries: Vec<(u64, Option<Chunk>)> = {
            let m = self.map.read();
            (first..=last).map(|i| (i, m.get(&i).copied())).collect()
        };
        // One child read covers every chunk of the request: whole chunks
        // where they are compressed, only the blocks asked for of raw ones
        // at either end (holes between stored chunks cost no I/O).
        let raw = |e: &Option<Chunk>| e.is_none_or(|ch| ch.method == Method::Raw);
        let from = if raw(&entries[0].1) { fblk } else { first * c };
        let to = if raw(&entries[entries.len() - 1].1) { fblk + n } else { (last + 1) * c };
        let all_raw = entries.iter().all(|(_, e)| raw(e));
        if all_raw {
            // Nothing to expand: the child's blocks are the file's (holes of
            // dropped chunks read as zeros).
            child.read(io, fblk, buf)?;
            for (idx, off, len) in chunks(fblk, n, c) {
                if entries[(idx - first) as usize].1.is_none() {
                    let at = (idx * c + off - fblk) as usize * BS;
                    buf[at..at + len as usize * BS].fill(0);
                }
            }
            return Ok(());
        }
        let mut stored = vec![0u8; (to - from) as usize * BS];
        child.read(io, from, &mut stored)?;
        let src_at = |b: u64| (b - from) as usize * BS;
        // Every chunk's part of `buf`, in order; compressed ones are
        // expanded on several threads when there are several.
        let mut expand: Vec<Expansion> = Vec::new();
        let mut rest = &mut buf[..];
        for (idx, off, len) in chunks(fblk, n, c) {
            let (dst, tail) = std::mem::take(&mut rest).split_at_mut(len as usize * BS);
            rest = tail;
            match entries[(idx - first) as usize].1 {
                None => dst.fill(0),
                Some(Chunk { method: Method::Raw, .. }) => {
                    let s = src_at(idx * c + off);
                    dst.copy_from_slice(&stored[s..s + dst.len()]);
                }
                Some(ch) => expand.push((idx, off, ch, dst, Ok(()))),
            }
        }
        par_each(&mut expand, &|(idx, off, ch, dst, res)| {
            let src = &stored[src_at(*idx * c)..];
            *res = if dst.len() as u64 == c * BS as u64 {
                self.expand(*idx, *ch, src, dst)
            } else {
                let mut whole = vec![0u8; c as usize * BS];
                self.expand(*idx, *ch, src, &mut whole).map(|()| {
                    let at = *off as usize * BS;
                    let n = dst.len();
                    dst.copy_from_slice(&whole[at..at + n]);
                })
            };
        });
        expand.into_iter().try_for_each(|(.., res)| res)
    }

    fn write(&self, io: &IoCtx, fblk: u64, buf: &[u8]) -> Result<()> {
        let n = span(fblk, buf.len())?;
        if n == 0 {
            return Ok(());
        }
        let c = self.g.cblocks;
        let (first, last) = (fblk / c, (fblk + n - 1) / c);
        if last > self.g.last_chunk() {
            return Err(Error::TooBig(format!("compress node {}: block {fblk} + {n}", self.g.id)));
        }
        let _held = self.busy.hold(first * c, (last + 1) * c);
        // Each chunk whole (partial ones merged with what they hold), then
        // compressed (on several threads for several chunks), then written
        // and recorded in order.
        let mut jobs: Vec<(u64, std::borrow::Cow<[u8]>, Option<Packed>)> = Vec::new();
        for (idx, off, len) in chunks(fblk, n, c) {
            let at = (idx * c + off - fblk) as usize * BS;
            let src = &buf[at..at + len as usize * BS];
            let data = if len == c {
                std::borrow::Cow::Borrowed(src)
            } else {
                let mut data = self.load(io, idx)?;
                data[off as usize * BS..(off + len) as usize * BS].copy_from_slice(src);
                std::borrow::Cow::Owned(data)
            };
            jobs.push((idx, data, None));
        }
        par_each(&mut jobs, &|(_, data, packed)| *packed = Some(self.pack(data)));
        for (idx, data, packed) in jobs {
            let packed =
                packed.ok_or_else(|| Error::Invalid(format!("compress node {}: chunk {idx} not packed", self.g.id)))?;
            self.put(io, idx, &data, packed)?;
        }
        Ok(())
    }

    fn write_zeroes(&self, io: &IoCtx, fblk: u64, n: u64) -> Result<()> {
        let end = fblk.checked_add(n).ok_or_else(|| Error::TooBig(format!("block {fblk} + {n}")))?;
        if n == 0 {
            return Ok(());
        }
        let c = self.g.cblocks;
        let _held = self.busy.hold(fblk / c * c, end.div_ceil(c).saturating_mul(c));
        self.zero(io, fblk, n)
    }

    fn truncate(&self, io: &IoCtx, nblocks: u64) -> Result<()> {
        let c = self.g.cblocks;
        let keep = nblocks.div_ceil(c);
        let _held = self.busy.hold(nblocks / c * c, u64::MAX);
        if !nblocks.is_multiple_of(c) {
            // The last chunk kept: its blocks past the end read as zeros
            // from now on.
            let tail = c - nblocks % c;
            self.zero(io, nblocks, tail)?;
        }
        self.child()?.truncate(io, keep.saturating_mul(c))?;
        if self.map.read().range(keep..).next().is_some() {
            self.publish(io, Change::Drop { from: keep, to: u64::MAX });
        }
        Ok(())
    }

    fn punch(&self, io: &IoCtx, fblk: u64, n: u64) -> Result<()> {
        self.write_zeroes(io, fblk, n)
    }

    fn encode_state(&self, e: &mut Encoder) {
        let m = self.map.read();
        e.u32(m.len() as u32);
        for (&idx, ch) in m.iter() {
            e.u64(idx).u32(ch.len).u8(ch.method as u8).u32(ch.crc);
        }
    }

    fn apply(&self, payload: &[u8]) -> Result<()> {
        let c = self.g.decode_change(payload)?;
        apply(&mut self.map.write(), c);
        Ok(())
    }

    /// Scrubs the child's stored blocks of each chunk of [fblk, fblk+n)
    /// (its copies or parity are the child's to verify and rebuild), then,
    /// but in a resilver, reads each compressed chunk back and checks that
    /// it expands to its checksum. A chunk of which anything is lost is
    /// lost whole (within the range). Each chunk is held as a read holds
    /// it, so no write replaces it meanwhile.
    fn scrub(&self, io: &IoCtx, s: &super::Scrub, fblk: u64, n: u64) -> Result<()> {
        if n == 0 || s.skips(self) {
            return Ok(());
        }
        let c = self.g.cblocks;
        let child = self.child()?;
        let end = fblk.saturating_add(n);
        let (first, last) = (fblk / c, (end - 1) / c);
        let stored: Vec<u64> = self.map.read().range(first..=last).map(|(&i, _)| i).collect();
        for idx in stored {
            let _held = self.busy.hold(idx * c, (idx + 1) * c);
            let Some(ch) = self.map.read().get(&idx).copied() else { continue };
            let blocks = Self::blocks_of(ch.len);
            let sub = super::ScrubTally::default();
            child.scrub(io, &s.with_tally(&sub), idx * c, blocks)?;
            let mut lost = !s.tally.absorb(sub).is_empty();
            if !lost && ch.method != Method::Raw && !s.resilver_only {
                lost = self.load(io, idx).is_err();
            }
            if lost {
                let (a, b) = ((idx * c).max(fblk), ((idx + 1) * c).min(end));
                s.tally.lost(a, b - a);
            }
        }
        Ok(())
    }

    fn next_data(&self, fblk: u64) -> Option<u64> {
        let c = self.g.cblocks;
        let idx = fblk / c;
        let m = self.map.read();
        if m.contains_key(&idx) {
            return Some(fblk);
        }
        m.range(idx + 1..).next().map(|(&i, _)| i * c)
    }

    fn capacity(&self) -> u64 {
        let c = self.g.cblocks;
        self.children.first().map_or(0, |ch| ch.capacity() / c * c)
    }
}

#[cfg(test)]
mod tests;
