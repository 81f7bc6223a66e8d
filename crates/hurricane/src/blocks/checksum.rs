//! `checksum`: one child, and a crc32c of every file block written through
//! it, kept in the node's state. Every block read is verified against its
//! checksum; a mismatch is an I/O error ([`Error::Checksum`]) naming the
//! node, the file block and the child's devices, counted on the device that
//! holds the block (where the child places each block on one device),
//! and the bad bytes are never handed up. Blocks never written are holes and
//! are not verified. Under a redundant parent (`replicate[checksum[..],..]`)
//! the error tells the parent which copy is bad. Above one that
//! [`Block::verifies_copies`] (`checksum[replicate[..]]`) the node hands its
//! check down instead ([`Block::read_verified`] on a read that fails it,
//! [`super::Scrub::verify`] in a scrub), so the child picks, block by
//! block, the copy that matches, and rewrites the others.
//!
//! Checksums are kept as runs of consecutive file blocks (4 bytes per 4 KiB
//! block), each run inside one aligned group of [`RUN`] blocks, so updates
//! copy at most one group and the state costs a few bytes per run beyond the
//! checksums themselves.
//!
//! Overwrites go copy-on-write when the child can punch holes: the child's
//! old blocks are punched (their space is freed only once the request's
//! journal batch commits), the new data goes to fresh space, and the new
//! checksums are recorded in the same batch. A crash before the batch
//! commits leaves the old mapping, the old checksums and the old data;
//! after it, the new ones. Written in place, a crash could leave new data
//! under old checksums, and the old data, synced, would read as an error:
//! so an overwrite the child's devices have no room to copy is refused
//! with ENOSPC before anything changes (the engine reclaims space and
//! tries again, `Fs::with_room`), never written in place.
//!
//! Concurrency: a writer (and truncate, punch) holds the file range it
//! changes in `busy` across the child write and the checksum update, so two
//! writers of one block never leave one's data under the other's checksum.
//! A reader holds nothing: it reads the child and verifies against the
//! checksums as they are then. A read racing a write of the same block can
//! see old data with new checksums (or a punched hole); so on a mismatch
//! only, the reader takes the range in `busy` (waiting for writers to
//! finish), reads and verifies again. Still wrong is corruption.

use super::common::{chunks, span, RangeLock};
use super::{Block, BlockType, BuildArgs, IoCtx, Params, BLOCK_SIZE};
use crate::codec::{Decoder, Encoder};
use crate::error::{Error, Result};
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;

pub static TYPE: BlockType = BlockType {
    name: "checksum",
    doc: "Verifies every block read against a crc32c kept in the layout; a mismatch is an I/O error, never data.",
    params: &[],
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

/// Checksum runs never cross a multiple of this many file blocks (4 MiB of
/// data, 4 KiB of checksums): the unit of the in-memory map and of records.
pub const RUN: u64 = 1024;

/// A block of zeros: what a failed `write_zeroes` meant to store.
static ZEROS: [u8; BLOCK_SIZE] = [0; BLOCK_SIZE];

/// The checksum of one file block.
pub fn block_sum(block: &[u8]) -> u32 {
    crc32c::crc32c(block)
}

/// A change to a checksum node's state: its journal record.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    /// File blocks [fblk, fblk+sums.len()) now hold data with these
    /// checksums. At most [`RUN`] blocks.
    Set { fblk: u64, sums: Vec<u32> },
    /// Checksums of file blocks [from, to) are dropped (truncate: to = MAX).
    Drop { from: u64, to: u64 },
    /// Every checksum at or past `from` moves by `delta` blocks; for a
    /// negative delta those of the `-delta` blocks below `from` are dropped
    /// first (a collapsed range).
    Shift { from: u64, delta: i64 },
}

impl Change {
    fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        match self {
            Change::Set { fblk, sums } => {
                e.u8(1).u64(*fblk).u32(sums.len() as u32);
                for s in sums {
                    e.u32(*s);
                }
            }
            Change::Drop { from, to } => {
                e.u8(2).u64(*from).u64(*to);
            }
            Change::Shift { from, delta } => {
                e.u8(3).u64(*from).u64(*delta as u64);
            }
        }
        e.into_inner()
    }

    /// Strict: unknown tags, trailing bytes, empty or overlong sets, sets
    /// past 2^64 and empty drops are corrupt.
    fn decode(b: &[u8], id: u32) -> Result<Change> {
        let mut d = Decoder::new(b, "checksum record");
        let c = match d.u8()? {
            1 => {
                let fblk = d.u64()?;
                let n = d.count(4)?;
                if n == 0 || n as u64 > RUN || fblk.checked_add(n as u64).is_none() {
                    return Err(Error::corrupt(
                        "journal",
                        format!("checksum node {id}: bad set of {n} checksums at file block {fblk}"),
                    ));
                }
                let mut sums = Vec::with_capacity(n);
                for _ in 0..n {
                    sums.push(d.u32()?);
                }
                Change::Set { fblk, sums }
            }
            2 => {
                let (from, to) = (d.u64()?, d.u64()?);
                if from >= to {
                    return Err(Error::corrupt(
                        "journal",
                        format!("checksum node {id}: bad drop of file blocks {from}..{to}"),
                    ));
                }
                Change::Drop { from, to }
            }
            3 => {
                let (from, delta) = (d.u64()?, d.u64()? as i64);
                if delta == 0 || from.checked_add_signed(delta).is_none() {
                    return Err(Error::corrupt(
                        "journal",
                        format!("checksum node {id}: bad shift by {delta} at file block {from}"),
                    ));
                }
                Change::Shift { from, delta }
            }
            t => return Err(d.err(format!("unknown checksum change {t}"))),
        };
        d.expect_end()?;
        Ok(c)
    }
}

/// file block -> checksums of consecutive blocks from there: disjoint,
/// non-empty runs, none crossing a multiple of [`RUN`].
#[derive(Default)]
struct Sums {
    runs: BTreeMap<u64, Vec<u32>>,
}

impl Sums {
    /// Applies a change (live and at replay alike).
    fn apply(&mut self, c: &Change) {
        match c {
            Change::Set { fblk, sums } => self.set(*fblk, sums),
            Change::Drop { from, to } => self.remove(*from, *to),
            Change::Shift { from, delta } => {
                if *delta < 0 {
                    self.remove(from.saturating_sub(delta.unsigned_abs()), *from);
                }
                // The checksums past `from`, in runs of consecutive blocks,
                // set again at their new places (regrouped by RUN).
                let mut moved: Vec<(u64, Vec<u32>)> = Vec::new();
                self.each(*from, u64::MAX, |b, sum| match moved.last_mut() {
                    Some((s, v)) if *s + v.len() as u64 == b => v.push(sum),
                    _ => moved.push((b, vec![sum])),
                });
                self.remove(*from, u64::MAX);
                for (b, v) in moved {
                    if let Some(nb) = b.checked_add_signed(*delta).filter(|nb| nb.checked_add(v.len() as u64).is_some())
                    {
                        self.set(nb, &v);
                    }
                }
            }
        }
    }

    /// Calls `f(fblk, sum)` for every block of [f, end) that has a checksum.
    fn each(&self, f: u64, end: u64, mut g: impl FnMut(u64, u32)) {
        let start = match self.runs.range(..=f).next_back() {
            Some((&k, v)) if k + v.len() as u64 > f => k,
            _ => f,
        };
        for (&k, v) in self.runs.range(start..end) {
            let s = k.max(f);
            let e = (k + v.len() as u64).min(end);
            for b in s..e {
                g(b, v[(b - k) as usize]);
            }
        }
    }

    fn any(&self, f: u64, end: u64) -> bool {
        if let Some((&k, v)) = self.runs.range(..=f).next_back() {
            if k + v.len() as u64 > f {
                return true;
            }
        }
        self.runs.range(f..end).next().is_some()
    }

    /// Sets the checksums of [f, f+sums.len()), joining runs it touches in
    /// the same group of [`RUN`] blocks.
    fn set(&mut self, f: u64, sums: &[u32]) {
        for (idx, off, len) in chunks(f, sums.len() as u64, RUN) {
            let group = idx * RUN;
            let (s, e) = (group + off, group + off + len);
            let src = &sums[(s - f) as usize..(e - f) as usize];
            // Runs of this group that overlap or touch [s, e).
            let touching: Vec<(u64, u64)> = self
                .runs
                .range(group..(e + 1).min(group + RUN))
                .map(|(&k, v)| (k, k + v.len() as u64))
                .filter(|&(_, ke)| ke >= s)
                .collect();
            let start = touching.first().map_or(s, |&(k, _)| k.min(s));
            let end = touching.last().map_or(e, |&(_, ke)| ke.max(e));
            let mut merged = vec![0u32; (end - start) as usize];
            for (k, ke) in touching {
                if let Some(v) = self.runs.remove(&k) {
                    merged[(k - start) as usize..(ke - start) as usize].copy_from_slice(&v);
                }
            }
            merged[(s - start) as usize..(e - start) as usize].copy_from_slice(src);
            self.runs.insert(start, merged);
        }
    }

    /// Drops the checksums of [f, end).
    fn remove(&mut self, f: u64, end: u64) {
        let start = match self.runs.range(..f).next_back() {
            Some((&k, v)) if k + v.len() as u64 > f => k,
            _ => f,
        };
        let keys: Vec<u64> = self.runs.range(start..end).map(|(&k, _)| k).collect();
        for k in keys {
            let Some(mut v) = self.runs.remove(&k) else { continue };
            let ke = k + v.len() as u64;
            if ke > end {
                self.runs.insert(end, v[(end - k) as usize..].to_vec());
            }
            if k < f {
                v.truncate((f - k) as usize);
                self.runs.insert(k, v);
            }
        }
    }

    /// Blocks with a checksum.
    #[cfg(test)]
    fn blocks(&self) -> u64 {
        self.runs.values().map(|v| v.len() as u64).sum()
    }
}

/// Decodes `count, (fblk, len, len × sum)*`, refusing empty, overlong,
/// group-crossing, overflowing, overlapping or unordered runs.
fn decode_state(s: &[u8]) -> Result<Sums> {
    let mut d = Decoder::new(s, "checksum state");
    let count = d.count(16)?;
    let mut sums = Sums::default();
    let mut end = 0u64;
    for _ in 0..count {
        let f = d.u64()?;
        let n = d.u32()? as u64;
        let last = f.checked_add(n).and_then(|e| e.checked_sub(1));
        let Some(last) = last.filter(|_| n > 0 && n <= RUN) else {
            return Err(d.err(format!("bad run of {n} checksums at file block {f}")));
        };
        if f / RUN != last / RUN {
            return Err(d.err(format!("run of {n} checksums at file block {f} crosses a {RUN}-block group")));
        }
        if f < end {
            return Err(d.err(format!("run at file block {f} overlaps or is out of order")));
        }
        end = last + 1;
        let raw = d.take(n as usize * 4)?;
        let v = raw.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        sums.runs.insert(f, v);
    }
    d.expect_end()?;
    Ok(sums)
}

struct Checksum {
    id: u32,
    children: Vec<Arc<dyn Block>>,
    /// Devices under the child, found once at build (named in errors).
    devices: Vec<u32>,
    sums: RwLock<Sums>,
    busy: RangeLock,
}

fn build(a: BuildArgs) -> Result<Arc<dyn Block>> {
    let mut devices: Vec<u32> = a.children.iter().flat_map(super::common::devices_under).collect();
    devices.sort_unstable();
    devices.dedup();
    let sums = match a.state {
        Some(s) => decode_state(s)?,
        None => Sums::default(),
    };
    Ok(Arc::new(Checksum {
        id: a.id,
        children: a.children,
        devices,
        sums: RwLock::new(sums),
        busy: RangeLock::default(),
    }))
}

impl Checksum {
    fn child(&self) -> Result<&Arc<dyn Block>> {
        self.children.first().ok_or_else(|| Error::Layout(format!("checksum node {}: no child", self.id)))
    }

    /// File blocks of `buf` (starting at `fblk`) whose data does not match
    /// their checksum.
    fn mismatches(&self, fblk: u64, buf: &[u8]) -> Vec<u64> {
        let end = fblk + (buf.len() / BLOCK_SIZE) as u64;
        let mut bad = Vec::new();
        self.sums.read().each(fblk, end, |b, sum| {
            let at = (b - fblk) as usize * BLOCK_SIZE;
            if block_sum(&buf[at..at + BLOCK_SIZE]) != sum {
                bad.push(b);
            }
        });
        bad
    }

    /// Whether one block read for file block `b` matches its checksum;
    /// `None` for a block with none (never written).
    fn verifies(&self, b: u64, data: &[u8]) -> Option<bool> {
        let mut ok = None;
        self.sums.read().each(b, b + 1, |_, sum| ok = Some(block_sum(data) == sum));
        ok
    }

    /// Applies and journals new checksums for [fblk, fblk+n) from `buf`.
    fn publish(&self, io: &IoCtx, fblk: u64, buf: &[u8]) {
        let n = (buf.len() / BLOCK_SIZE) as u64;
        self.publish_with(io, fblk, n, &|s, len| {
            let at = (s - fblk) as usize * BLOCK_SIZE;
            buf[at..at + len as usize * BLOCK_SIZE].chunks_exact(BLOCK_SIZE).map(block_sum).collect()
        });
    }

    /// Applies and journals checksums for [fblk, fblk+n), one record per
    /// group, `sums(s, len)` giving those of blocks [s, s+len).
    fn publish_with(&self, io: &IoCtx, fblk: u64, n: u64, sums: &dyn Fn(u64, u64) -> Vec<u32>) {
        for (idx, off, len) in chunks(fblk, n, RUN) {
            let s = idx * RUN + off;
            let c = Change::Set { fblk: s, sums: sums(s, len) };
            self.sums.write().apply(&c);
            io.record(&TYPE, self.id, &c.encode());
        }
    }

    fn drop_sums(&self, io: &IoCtx, from: u64, to: u64) {
        let c = Change::Drop { from, to };
        let mut m = self.sums.write();
        if !m.any(from, to) {
            return;
        }
        m.apply(&c);
        io.record(&TYPE, self.id, &c.encode());
    }

    /// Whether an overwrite of [fblk, fblk+n) can go to fresh space: every
    /// device under the child has room for all of it beside what it holds,
    /// past the allocator's reserve (which data never takes).
    fn room_for_copy(&self, io: &IoCtx, n: u64) -> bool {
        self.devices.iter().all(|&d| io.storage.allocs.get(d as usize).is_some_and(|a| a.free_for_data() >= n))
    }

    /// Before an overwrite of [fblk, fblk+n) (the caller holds it): where
    /// the child would overwrite in place and the range holds data,
    /// punches the child's blocks, so the new data goes to fresh space
    /// (copy-on-write); without room for that, refuses with
    /// [`Error::NoSpace`], nothing changed. A child that never overwrites
    /// in place (`log`) is left alone: punching first would only let go
    /// of the old data before the new has a place.
    fn punch_for_copy(&self, io: &IoCtx, child: &Arc<dyn Block>, fblk: u64, n: u64) -> Result<()> {
        if child.overwrites_in_place() && self.sums.read().any(fblk, fblk + n) {
            if !self.room_for_copy(io, n) {
                return Err(Error::NoSpace(format!(
                    "checksum node {}: no room on {} to copy an overwrite of {n} blocks (never written in place)",
                    self.id,
                    Self::device_names(io, &self.devices)
                )));
            }
            match child.punch(io, fblk, n) {
                Ok(()) | Err(Error::NotSupported(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// After the child failed a write of [fblk, fblk+n) (`meant(i)`: the
    /// bytes block `fblk + i` was to hold): part of the range may hold the
    /// new data, part the old, part nothing (the copy-on-write punch took
    /// the old blocks; a hole reads as zeros without touching a device).
    /// Each block is left with checksums that verify only what it may
    /// serve: the new data where it arrived, the old where the old is still
    /// there whole, nothing over a hole never written. Anything else (the
    /// zeros of a punched hole, bytes half written) gets the new data's
    /// checksum, which it does not match, so a redundant parent rebuilds
    /// the block and a plain file's read of it fails rather than return
    /// zeros or stray bytes as data. A range the child cannot read back
    /// gets the new data's checksums throughout.
    fn settle_failed<'m>(
        &self,
        io: &IoCtx,
        child: &Arc<dyn Block>,
        fblk: u64,
        n: u64,
        meant: &dyn Fn(usize) -> &'m [u8],
    ) {
        let nb = n as usize;
        let mut now = vec![0u8; nb * BLOCK_SIZE];
        let read = child.read(io, fblk, &mut now).is_ok();
        let mut old = vec![None; nb];
        self.sums.read().each(fblk, fblk + n, |b, sum| old[(b - fblk) as usize] = Some(sum));
        let want: Vec<Option<u32>> = (0..nb)
            .map(|i| {
                let (m, held) = (meant(i), &now[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE]);
                if !read || held == m {
                    return Some(block_sum(m));
                }
                match old[i] {
                    Some(o) if o == block_sum(held) => None,
                    None if held.iter().all(|&x| x == 0) => None,
                    _ => Some(block_sum(m)),
                }
            })
            .collect();
        let mut i = 0;
        while i < nb {
            if want[i].is_none() {
                i += 1;
                continue;
            }
            let mut j = i + 1;
            while j < nb && want[j].is_some() {
                j += 1;
            }
            self.publish_with(io, fblk + i as u64, (j - i) as u64, &|s, len| {
                let at = (s - fblk) as usize;
                want[at..at + len as usize].iter().map(|w| w.unwrap_or_default()).collect()
            });
            i = j;
        }
    }

    fn device_names(io: &IoCtx, devices: &[u32]) -> String {
        let names: Vec<String> = devices
            .iter()
            .map(|&d| match io.storage.devs.get(d as usize) {
                Some(h) => format!("device {d} ({})", h.name()),
                None => format!("device {d}"),
            })
            .collect();
        if names.is_empty() {
            "no device".into()
        } else {
            names.join(", ")
        }
    }

    /// The error for blocks that failed verification: each counted on the
    /// device that holds it (`common::each_device_of`: the one leaf under a
    /// `stripe`, every copy's under a `replicate`), and logged.
    fn corrupt(&self, io: &IoCtx, bad: &[u64]) -> Error {
        let first = bad.first().copied().unwrap_or_default();
        if super::common::probing_now() {
            return Error::Checksum(format!(
                "checksum node {}: file block {first} does not hold the data written",
                self.id
            ));
        }
        let mut held = std::collections::BTreeSet::new();
        if let Ok(child) = self.child() {
            for &b in bad {
                super::common::each_device_of(child, b, 1, &mut |d, k| {
                    held.insert(d);
                    if let Some(h) = io.storage.devs.get(d as usize) {
                        h.count_checksum_errors(k);
                    }
                });
            }
        }
        let more = match bad.len() {
            0 | 1 => String::new(),
            n => format!(" and {} more", n - 1),
        };
        let devs = Self::device_names(io, &held.into_iter().collect::<Vec<u32>>());
        tracing::error!(node = self.id, fblk = first, blocks = bad.len(), devices = %devs, "checksum mismatch");
        Error::Checksum(format!("checksum node {}: file block {first}{more} on {devs}", self.id))
    }
}

impl Block for Checksum {
    fn parent_block(&self, child: usize, cblk: u64) -> Option<u64> {
        (child == 0).then_some(cblk)
    }
    fn id(&self) -> u32 {
        self.id
    }
    fn kind(&self) -> &'static BlockType {
        &TYPE
    }
    fn params(&self) -> Params {
        Params::default()
    }
    fn children(&self) -> &[Arc<dyn Block>] {
        &self.children
    }

    fn read(&self, io: &IoCtx, fblk: u64, buf: &mut [u8]) -> Result<()> {
        let n = span(fblk, buf.len())?;
        let child = self.child()?;
        child.read(io, fblk, buf)?;
        if self.mismatches(fblk, buf).is_empty() {
            return Ok(());
        }
        // A write may have raced this read: once no writer holds the range,
        // read and verify again, this time letting a child that keeps
        // copies choose, block by block, one that matches.
        let _held = self.busy.hold(fblk, fblk + n);
        child.read_verified(io, fblk, buf, &|b, data| self.verifies(b, data))?;
        let bad = self.mismatches(fblk, buf);
        if bad.is_empty() {
            return Ok(());
        }
        for &b in &bad {
            let at = (b - fblk) as usize * BLOCK_SIZE;
            buf[at..at + BLOCK_SIZE].fill(0);
        }
        Err(self.corrupt(io, &bad))
    }

    fn write(&self, io: &IoCtx, fblk: u64, buf: &[u8]) -> Result<()> {
        let n = span(fblk, buf.len())?;
        if n == 0 {
            return Ok(());
        }
        let child = self.child()?;
        let _held = self.busy.hold(fblk, fblk + n);
        self.punch_for_copy(io, child, fblk, n)?;
        match child.write(io, fblk, buf) {
            Ok(()) => {
                self.publish(io, fblk, buf);
                Ok(())
            }
            Err(e) => {
                self.settle_failed(io, child, fblk, n, &|i| &buf[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE]);
                Err(e)
            }
        }
    }

    /// As `write` of zeros, but the child zeroes the space without the
    /// bytes being sent where it can (an image file's unwritten extents):
    /// what preallocation (`fallocate`) writes.
    fn write_zeroes(&self, io: &IoCtx, fblk: u64, n: u64) -> Result<()> {
        let end = fblk.checked_add(n).ok_or_else(|| Error::TooBig(format!("block {fblk} + {n}")))?;
        if n == 0 {
            return Ok(());
        }
        let child = self.child()?;
        let _held = self.busy.hold(fblk, end);
        self.punch_for_copy(io, child, fblk, n)?;
        let zero = block_sum(&[0u8; BLOCK_SIZE]);
        match child.write_zeroes(io, fblk, n) {
            Ok(()) => {
                self.publish_with(io, fblk, n, &|_, len| vec![zero; len as usize]);
                Ok(())
            }
            Err(e) => {
                for (idx, off, len) in chunks(fblk, n, RUN) {
                    self.settle_failed(io, child, idx * RUN + off, len, &|_| &ZEROS);
                }
                Err(e)
            }
        }
    }

    fn truncate(&self, io: &IoCtx, nblocks: u64) -> Result<()> {
        let _held = self.busy.hold(nblocks, u64::MAX);
        self.child()?.truncate(io, nblocks)?;
        self.drop_sums(io, nblocks, u64::MAX);
        Ok(())
    }

    fn can_shift(&self, from: u64, delta: i64) -> bool {
        self.children.first().is_some_and(|c| c.can_shift(from, delta))
    }

    fn shift(&self, io: &IoCtx, from: u64, delta: i64) -> Result<()> {
        if delta == 0 {
            return Ok(());
        }
        let _held = self.busy.hold(from.saturating_sub(delta.min(0).unsigned_abs()), u64::MAX);
        // The child first: if it refuses, nothing here has moved.
        self.child()?.shift(io, from, delta)?;
        let c = Change::Shift { from, delta };
        self.sums.write().apply(&c);
        io.record(&TYPE, self.id, &c.encode());
        Ok(())
    }

    fn punch(&self, io: &IoCtx, fblk: u64, n: u64) -> Result<()> {
        let end = fblk.checked_add(n).ok_or_else(|| Error::TooBig(format!("block {fblk} + {n}")))?;
        if n == 0 {
            return Ok(());
        }
        let _held = self.busy.hold(fblk, end);
        self.child()?.punch(io, fblk, n)?;
        self.drop_sums(io, fblk, end);
        Ok(())
    }

    fn encode_state(&self, e: &mut Encoder) {
        let m = self.sums.read();
        e.u32(m.runs.len() as u32);
        for (&f, v) in &m.runs {
            e.u64(f).u32(v.len() as u32);
            for s in v {
                e.u32(*s);
            }
        }
    }

    fn apply(&self, payload: &[u8]) -> Result<()> {
        let c = Change::decode(payload, self.id)?;
        self.sums.write().apply(&c);
        Ok(())
    }

    /// Over a child that [`Block::verifies_copies`], the child scrubs its
    /// copies against the checksums (so a copy that rotted is the one
    /// rewritten, even where copies tie), each [`RUN`] of blocks held as a
    /// writer holds it, so data and checksums agree while it is read.
    /// Otherwise the range is read through this node, which verifies it.
    fn scrub(&self, io: &IoCtx, s: &super::Scrub, fblk: u64, n: u64) -> Result<()> {
        let child = self.child()?;
        if !child.verifies_copies() {
            return super::common::scrub_default(self, io, s, fblk, n);
        }
        if s.skips(self) {
            return Ok(());
        }
        let verify = |b: u64, data: &[u8]| self.verifies(b, data);
        let end = fblk.saturating_add(n);
        let mut pos = fblk;
        while pos < end {
            // Holes hold nothing to verify.
            match self.next_data(pos) {
                Some(d) if d < end => pos = pos.max(d),
                _ => break,
            }
            let len = (RUN - pos % RUN).min(end - pos);
            let _held = self.busy.hold(pos, pos + len);
            let sub = super::ScrubTally::default();
            let mut cs = s.with_tally(&sub);
            cs.verify = Some(&verify);
            child.scrub(io, &cs, pos, len)?;
            for (lf, ll) in s.tally.absorb(sub) {
                s.tally.lost(lf, ll);
            }
            pos += len;
        }
        Ok(())
    }

    fn next_data(&self, fblk: u64) -> Option<u64> {
        self.children.first().and_then(|c| c.next_data(fblk))
    }

    fn capacity(&self) -> u64 {
        self.children.first().map_or(0, |c| c.capacity())
    }
}

/// Blocks with a checksum in a node of this type (tests and size figures).
#[cfg(test)]
pub(crate) fn checksummed_blocks(b: &dyn Block) -> Option<u64> {
    if b.kind().name != TYPE.name {
        return None;
    }
    let mut e = Encoder::new();
    b.encode_state(&mut e);
    decode_state(&e.buf).ok().map(|s| s.blocks())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_set_joins_and_splits_at_groups() {
        let mut s = Sums::default();
        s.set(0, &[1, 2, 3]);
        s.set(3, &[4]);
        assert_eq!(s.runs.len(), 1);
        s.set(10, &[9; 5]);
        assert_eq!(s.runs.len(), 2);
        s.set(2, &[7; 9]); // bridges both: [0, 15)
        assert_eq!(s.runs.len(), 1);
        assert_eq!(s.runs[&0].len(), 15);
        s.set(RUN - 2, &[5; 4]);
        assert_eq!(s.runs.get(&(RUN - 2)).map(Vec::len), Some(2));
        assert_eq!(s.runs.get(&RUN).map(Vec::len), Some(2));
        let mut got = Vec::new();
        s.each(0, 20, |b, v| got.push((b, v)));
        assert_eq!(got.len(), 15);
        assert_eq!(got[1], (1, 2));
        assert_eq!(got[2], (2, 7));
        assert_eq!(s.blocks(), 19);
    }

    #[test]
    fn sums_remove_cuts_runs() {
        let mut s = Sums::default();
        s.set(0, &(0..20).collect::<Vec<u32>>());
        s.remove(5, 8);
        assert_eq!(s.blocks(), 17);
        assert!(!s.any(5, 8));
        assert!(s.any(4, 5) && s.any(8, 9));
        let mut got = Vec::new();
        s.each(0, 20, |b, v| got.push((b, v)));
        assert!(got.iter().all(|&(b, v)| b as u32 == v));
        s.remove(3, u64::MAX);
        assert_eq!(s.blocks(), 3);
        s.remove(0, 1);
        assert_eq!(s.runs.keys().copied().collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn state_round_trips_and_refuses_bad_runs() {
        let mut s = Sums::default();
        s.set(3, &[1, 2, 3]);
        s.set(RUN * 5 + 7, &[9]);
        let b = Checksum {
            id: 0,
            children: Vec::new(),
            devices: Vec::new(),
            sums: RwLock::new(s),
            busy: RangeLock::default(),
        };
        let mut e = Encoder::new();
        b.encode_state(&mut e);
        let back = decode_state(&e.buf).unwrap();
        assert_eq!(back.runs, b.sums.read().runs);

        let run = |f: u64, sums: &[u32]| {
            let mut e = Encoder::new();
            e.u64(f).u32(sums.len() as u32);
            for s in sums {
                e.u32(*s);
            }
            e.into_inner()
        };
        let state = |runs: &[Vec<u8>]| {
            let mut e = Encoder::new();
            e.u32(runs.len() as u32);
            for r in runs {
                e.raw(r);
            }
            e.into_inner()
        };
        let bad = |b: Vec<u8>, what: &str| {
            let err = decode_state(&b).err().unwrap_or_else(|| panic!("{what}: accepted"));
            assert!(matches!(err, Error::Corrupt { .. }), "{what}: {err}");
        };
        bad(state(&[run(0, &[])]), "empty run");
        bad(state(&[run(RUN - 1, &[1, 2])]), "run crossing a group");
        bad(state(&[run(u64::MAX, &[1])]), "run past 2^64");
        bad(state(&[run(4, &[1, 2]), run(5, &[3])]), "overlapping runs");
        bad(state(&[run(8, &[1]), run(4, &[3])]), "unordered runs");
        let mut long = run(0, &[1]);
        long[8..12].copy_from_slice(&((RUN + 1) as u32).to_le_bytes());
        long.extend(std::iter::repeat_n(0u8, RUN as usize * 4));
        bad(state(&[long]), "run longer than a group");
        let mut trailing = state(&[run(0, &[1])]);
        trailing.push(0);
        bad(trailing, "trailing bytes");
        let mut short = state(&[run(0, &[1, 2])]);
        short.pop();
        bad(short, "truncated sums");
        let mut e = Encoder::new();
        e.u32(u32::MAX);
        bad(e.into_inner(), "huge count");
    }

    #[test]
    fn records_are_strict() {
        let set = Change::Set { fblk: 9, sums: vec![1, 2] };
        assert_eq!(Change::decode(&set.encode(), 0).unwrap(), set);
        let drop = Change::Drop { from: 3, to: u64::MAX };
        assert_eq!(Change::decode(&drop.encode(), 0).unwrap(), drop);
        let bad = |b: Vec<u8>, what: &str| {
            let err = Change::decode(&b, 4).err().unwrap_or_else(|| panic!("{what}: accepted"));
            assert!(matches!(err, Error::Corrupt { .. }), "{what}: {err}");
        };
        bad(vec![], "empty");
        bad(vec![9], "unknown tag");
        let mut t = set.encode();
        t.push(0);
        bad(t, "trailing byte");
        let mut t = set.encode();
        t.pop();
        bad(t, "short");
        bad(Change::Set { fblk: 0, sums: vec![] }.encode(), "empty set");
        bad(Change::Set { fblk: 0, sums: vec![0; RUN as usize + 1] }.encode(), "set longer than a group");
        bad(Change::Set { fblk: u64::MAX, sums: vec![0] }.encode(), "set past 2^64");
        bad(Change::Drop { from: 5, to: 5 }.encode(), "empty drop");
        bad(Change::Drop { from: 6, to: 5 }.encode(), "reversed drop");
        let mut e = Encoder::new();
        e.u8(1).u64(0).u32(u32::MAX);
        bad(e.into_inner(), "huge count");
    }
}
