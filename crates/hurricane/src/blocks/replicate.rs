//! `replicate`: every child holds a full copy. Writes go to all of them; a
//! read goes to one, chosen by the `read` policy, and falls back to the others
//! when that copy fails, so a file survives the loss of all but one replica.
//!
//! Self-heal: a copy whose read fails (device error, missing device, a
//! checksum mismatch below) is rewritten from a copy that read well, when the
//! request may repair (`IoCtx::repair`). A write that fails on some copies
//! but reaches at least one succeeds: each copy that failed records the range
//! as *missed* (persistent state, journalled), reads never use a copy for a
//! range it missed, and `scrub` rewrites missed ranges from a good copy and
//! clears them; a repairing read of a range a copy missed, once that copy
//! takes writes again, rewrites it too. The read policy is state too: it
//! changes at run time through a journalled record ([`live_changes`]).
//!
//! Under a `checksum` (`checksum[replicate[..]]`) the copies cannot tell
//! which of two differing copies rotted; the checksum hands its check down
//! ([`Block::read_verified`], [`Scrub::verify`]), and a copy whose block
//! fails it counts as a copy whose read failed: another serves, the failure
//! is counted on its devices, and it is healed (a scrub keeps the copy that
//! passes, not the one most copies agree with).
//!
//! Concurrency: every write, truncate, repair and resync holds an exclusive
//! *range lock* of this node on the file blocks it touches (readers take
//! none), from before it writes the first copy until its missed-range change
//! is made. So two overlapping writes reach every copy in the same order, and
//! a repair, which re-reads the good copy under the lock before rewriting the
//! bad one, can never put back data older than a write that has finished.
//! The missed sets have their own lock, held only to read or change them,
//! never during I/O. A read that raced a write may return either version, as
//! from one disk; it never returns a copy's data for a range that copy missed
//! before the read began.

use super::common::span;
use super::{
    Block, BlockType, BuildArgs, Health, IoCtx, Layout, NodeRecord, ParamKind, ParamSpec, Params, Scrub, Value, Verify,
    BLOCK_SIZE,
};
use crate::codec::{Decoder, Encoder};
use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

const POLICIES: &[&str] = &["least-loaded", "nearest", "primary", "round-robin"];

/// Version of the node's state and records.
const STATE_VERSION: u8 = 1;

pub static TYPE: BlockType = BlockType {
    name: "replicate",
    doc: "N full copies, one per child; reads pick a copy by policy, survive and heal failed copies; writes go on with copies down.",
    params: &[
        ParamSpec { key: "copies", kind: ParamKind::Int, default: None, min: 1, max: 16, doc: "number of copies (children)" },
        ParamSpec {
            key: "read",
            kind: ParamKind::Choice(POLICIES),
            default: Some("least-loaded"),
            min: 0,
            max: 0,
            doc: "which copy serves reads: least-loaded (fewest requests in flight on its devices), nearest (devices on the NUMA node nearest the reading CPU, then least loaded), primary (the first), or round-robin; changeable on a file holding data",
        },
    ],
    per_device: false,
    min_children: 1,
    max_children: 16,
    distinct_devices: false,
    width_param: Some("copies"),
    implied_width: None,
    state_version: Some(STATE_VERSION),
    in_metadata: false,
    build,
};

/// Writes at least this long go to the copies in parallel (smaller ones are
/// cheaper than a thread start).
const PARALLEL_MIN_BLOCKS: u64 = 64; // 256 KiB
/// Blocks scrubbed under one range lock.
const SCRUB_STEP: u64 = 256; // 1 MiB

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Policy {
    LeastLoaded = 0,
    /// Every device is treated as one NUMA node for now, so this is `Primary`.
    Nearest = 1,
    Primary = 2,
    RoundRobin = 3,
}

impl Policy {
    fn from_index(i: u8) -> Option<Policy> {
        Some(match i {
            0 => Policy::LeastLoaded,
            1 => Policy::Nearest,
            2 => Policy::Primary,
            3 => Policy::RoundRobin,
            _ => return None,
        })
    }
    fn from_word(w: &str) -> Option<Policy> {
        POLICIES.iter().position(|p| *p == w).and_then(|i| Policy::from_index(i as u8))
    }
    fn word(self) -> &'static str {
        POLICIES[self as usize]
    }
}

/// A change to a replicate node's state: its journal record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// Copy `copy` missed file blocks [fblk, fblk+len): it must not serve them.
    Miss { copy: u32, fblk: u64, len: u64 },
    /// Copy `copy` holds file blocks [fblk, fblk+len) again.
    Clear { copy: u32, fblk: u64, len: u64 },
    /// Missed ranges at or past file block `from` are dropped (a truncate).
    Truncate { from: u64 },
    /// Reads follow another policy.
    Policy(Policy),
}

impl Change {
    fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        match *self {
            Change::Miss { copy, fblk, len } => e.u8(1).u32(copy).u64(fblk).u64(len),
            Change::Clear { copy, fblk, len } => e.u8(2).u32(copy).u64(fblk).u64(len),
            Change::Truncate { from } => e.u8(3).u64(from),
            Change::Policy(p) => e.u8(4).u8(p as u8),
        };
        e.into_inner()
    }

    /// Strict: unknown tags or policies, trailing bytes, copies past the
    /// node's, empty ranges and ranges past 2^64 are corrupt.
    fn decode(b: &[u8], id: u32, copies: usize) -> Result<Change> {
        let mut d = Decoder::new(b, "replicate record");
        let c = match d.u8()? {
            t @ (1 | 2) => {
                let (copy, fblk, len) = (d.u32()?, d.u64()?, d.u64()?);
                if copy as usize >= copies || len == 0 || fblk.checked_add(len).is_none() {
                    return Err(Error::corrupt(
                        "journal",
                        format!("replicate node {id}: bad range of {len} blocks at {fblk} for copy {copy} of {copies}"),
                    ));
                }
                if t == 1 {
                    Change::Miss { copy, fblk, len }
                } else {
                    Change::Clear { copy, fblk, len }
                }
            }
            3 => Change::Truncate { from: d.u64()? },
            4 => {
                let p = d.u8()?;
                Change::Policy(Policy::from_index(p).ok_or_else(|| d.err(format!("unknown read policy {p}")))?)
            }
            t => return Err(d.err(format!("unknown replicate change {t}"))),
        };
        d.expect_end()?;
        Ok(c)
    }

    fn record(&self, id: u32) -> NodeRecord {
        NodeRecord { node: id, bytes: [&[STATE_VERSION][..], &self.encode()].concat() }
    }
}

/// Disjoint, non-touching ranges of file blocks: start -> end (exclusive).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn insert(&mut self, s: u64, e: u64) {
        if s >= e {
            return;
        }
        let (mut s, mut e) = (s, e);
        if let Some((&ps, &pe)) = self.0.range(..=s).next_back() {
            if pe >= s {
                s = ps;
                e = e.max(pe);
                self.0.remove(&ps);
            }
        }
        let after: Vec<(u64, u64)> = self.0.range(s..=e).map(|(&k, &v)| (k, v)).collect();
        for (k, v) in after {
            e = e.max(v);
            self.0.remove(&k);
        }
        self.0.insert(s, e);
    }

    /// Drops [s, e); true when something was dropped.
    fn remove(&mut self, s: u64, e: u64) -> bool {
        if s >= e {
            return false;
        }
        let mut changed = false;
        if let Some((&ps, &pe)) = self.0.range(..s).next_back() {
            if pe > s {
                self.0.insert(ps, s);
                if pe > e {
                    self.0.insert(e, pe);
                }
                changed = true;
            }
        }
        let inside: Vec<(u64, u64)> = self.0.range(s..e).map(|(&k, &v)| (k, v)).collect();
        for (k, v) in inside {
            self.0.remove(&k);
            if v > e {
                self.0.insert(e, v);
            }
            changed = true;
        }
        changed
    }

    fn overlaps(&self, s: u64, e: u64) -> bool {
        s < e && self.0.range(..e).next_back().is_some_and(|(_, &pe)| pe > s)
    }

    /// The parts of [s, e) these ranges cover, in order.
    fn pieces(&self, s: u64, e: u64) -> Vec<(u64, u64)> {
        if s >= e {
            return Vec::new();
        }
        let first = match self.0.range(..=s).next_back() {
            Some((&ps, &pe)) if pe > s => ps,
            _ => s,
        };
        self.0.range(first..e).map(|(&rs, &re)| (rs.max(s), re.min(e))).filter(|(a, b)| a < b).collect()
    }

    fn intersect(&self, o: &Ranges) -> Ranges {
        let mut out = Ranges::default();
        for (&s, &e) in &self.0 {
            for (a, b) in o.pieces(s, e) {
                out.0.insert(a, b);
            }
        }
        out
    }

    fn encode(&self, e: &mut Encoder) {
        e.u32(self.0.len() as u32);
        for (&s, &end) in &self.0 {
            e.u64(s).u64(end - s);
        }
    }

    /// Strict: empty, overflowing, unordered, overlapping or touching ranges
    /// are corrupt (the live form never holds them).
    fn decode(d: &mut Decoder) -> Result<Ranges> {
        let n = d.count(16)?;
        let mut out = Ranges::default();
        let mut prev_end: Option<u64> = None;
        for _ in 0..n {
            let (s, len) = (d.u64()?, d.u64()?);
            let e = s.checked_add(len).filter(|_| len > 0).ok_or_else(|| d.err(format!("bad range {s}+{len}")))?;
            if prev_end.is_some_and(|p| s <= p) {
                return Err(d.err(format!("range at {s} overlaps, touches or is out of order")));
            }
            prev_end = Some(e);
            out.0.insert(s, e);
        }
        Ok(out)
    }
}

/// Exclusive locks on ranges of file blocks.
#[derive(Default)]
struct RangeLocks {
    held: Mutex<Vec<(u64, u64)>>,
    freed: Condvar,
}

struct RangeGuard<'a> {
    locks: &'a RangeLocks,
    range: (u64, u64),
}

impl RangeLocks {
    fn lock(&self, s: u64, e: u64) -> RangeGuard<'_> {
        let mut held = self.held.lock();
        while held.iter().any(|&(hs, he)| hs < e && s < he) {
            self.freed.wait(&mut held);
        }
        held.push((s, e));
        RangeGuard { locks: self, range: (s, e) }
    }
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        let mut held = self.locks.held.lock();
        if let Some(i) = held.iter().position(|&r| r == self.range) {
            held.swap_remove(i);
        }
        drop(held);
        self.locks.freed.notify_all();
    }
}

struct Replicate {
    id: u32,
    policy: AtomicU8,
    children: Vec<Arc<dyn Block>>,
    /// Devices under each child, found once at build.
    devices: Vec<Vec<u32>>,
    /// Breaks ties between equally loaded copies in turn; the round-robin turn.
    next: AtomicUsize,
    /// Per copy: file blocks it missed and must not serve until resynced.
    missed: RwLock<Vec<Ranges>>,
    locks: RangeLocks,
}

fn build(a: BuildArgs) -> Result<Arc<dyn Block>> {
    let word = a.params.word("read")?;
    let policy =
        Policy::from_word(word).ok_or_else(|| Error::Layout(format!("replicate: unknown read policy {word:?}")))?;
    let devices = a.children.iter().map(super::common::devices_under).collect();
    let n = a.children.len();
    let missed = match a.state {
        Some(s) => decode_state(s, n)?,
        None => vec![Ranges::default(); n],
    };
    Ok(Arc::new(Replicate {
        id: a.id,
        policy: AtomicU8::new(policy as u8),
        children: a.children,
        devices,
        next: AtomicUsize::new(0),
        missed: RwLock::new(missed),
        locks: RangeLocks::default(),
    }))
}

/// Empty (nothing missed), or one range list per copy.
fn decode_state(s: &[u8], copies: usize) -> Result<Vec<Ranges>> {
    if s.is_empty() {
        return Ok(vec![Ranges::default(); copies]);
    }
    let mut d = Decoder::new(s, "replicate state");
    let mut out = Vec::with_capacity(copies);
    for _ in 0..copies {
        out.push(Ranges::decode(&mut d)?);
    }
    d.expect_end()?;
    Ok(out)
}

/// Credits `n` repaired blocks of `b` at `fblk` to the devices holding them
/// (`common::each_device_of`).
fn credit_repair(b: &Arc<dyn Block>, io: &IoCtx, fblk: u64, n: u64) {
    super::common::each_device_of(b, fblk, n, &mut |d, k| {
        if let Some(h) = io.storage.devs.get(d as usize) {
            h.count_repaired(k);
        }
    });
}

/// Runs of [s, e) where `b` may hold data (its `next_data` says so).
fn data_blocks(b: &Arc<dyn Block>, s: u64, e: u64) -> Vec<bool> {
    let mut out = vec![false; (e - s) as usize];
    let mut pos = s;
    while pos < e {
        match b.next_data(pos) {
            Some(x) if x == pos => {
                out[(pos - s) as usize] = true;
                pos += 1;
            }
            Some(x) if x > pos => pos = x,
            _ => break,
        }
    }
    out
}

/// Maximal runs of `true` in `v`, as (offset, length).
/// Blocks of `buf` (file blocks from `f`) that the check from above finds
/// wrong, by index.
fn refused<'b>(v: Verify<'b>, f: u64, buf: &'b [u8]) -> impl Iterator<Item = usize> + 'b {
    buf.chunks_exact(BLOCK_SIZE).enumerate().filter(move |&(k, b)| v(f + k as u64, b) == Some(false)).map(|(k, _)| k)
}

fn runs(v: &[bool]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < v.len() {
        if v[i] {
            let s = i;
            while i < v.len() && v[i] {
                i += 1;
            }
            out.push((s as u64, (i - s) as u64));
        } else {
            i += 1;
        }
    }
    out
}

fn blocks(buf: &[u8], off: u64, len: u64) -> &[u8] {
    &buf[off as usize * BLOCK_SIZE..(off + len) as usize * BLOCK_SIZE]
}

impl Replicate {
    fn policy(&self) -> Policy {
        Policy::from_index(self.policy.load(Relaxed)).unwrap_or(Policy::LeastLoaded)
    }

    /// The copy a read should try first.
    fn pick(&self, io: &IoCtx) -> usize {
        let n = self.children.len();
        let load = |c: usize| -> u64 {
            self.devices[c].iter().filter_map(|&d| io.storage.devs.get(d as usize)).map(|h| h.stats.load()).sum()
        };
        match self.policy() {
            Policy::Primary => 0,
            Policy::RoundRobin => self.next.fetch_add(1, Relaxed) % n,
            Policy::LeastLoaded => {
                let start = self.next.fetch_add(1, Relaxed) % n;
                // Strictly lower load wins, so equal loads go to `start`, which rotates.
                (0..n).map(|i| (start + i) % n).min_by_key(|&c| load(c)).unwrap_or(0)
            }
            Policy::Nearest => {
                // The copy whose farthest device is nearest the calling
                // CPU's node (a device on no known node counts as local),
                // then the least loaded of those.
                let here = crate::numa::current_node();
                let far = |c: usize| -> u32 {
                    let Some(here) = here else { return crate::numa::LOCAL };
                    self.devices[c]
                        .iter()
                        .filter_map(|&d| io.storage.devs.get(d as usize).and_then(|h| h.numa_node()))
                        .map(|node| crate::numa::distance(here, node))
                        .max()
                        .unwrap_or(crate::numa::LOCAL)
                };
                let start = self.next.fetch_add(1, Relaxed) % n;
                (0..n).map(|i| (start + i) % n).min_by_key(|&c| (far(c), load(c))).unwrap_or(0)
            }
        }
    }

    /// Every device under copy `c` passes `ok` (readable, writable).
    fn copy_is(&self, io: &IoCtx, c: usize, ok: fn(crate::device::DeviceState) -> bool) -> bool {
        self.devices[c].iter().all(|&d| io.storage.devs.get(d as usize).is_some_and(|h| ok(h.state())))
    }

    /// Copies a read tries, in order: the policy's pick first, copies on a
    /// device that is down last; copies in `skip` (they missed the range) never.
    fn order(&self, io: &IoCtx, skip: u32) -> Vec<usize> {
        let n = self.children.len();
        let first = self.pick(io);
        let (mut up, mut down) = (Vec::with_capacity(n), Vec::new());
        for c in (0..n).map(|i| (first + i) % n) {
            if skip & (1 << c) != 0 {
                continue;
            }
            if self.copy_is(io, c, crate::device::DeviceState::readable) {
                up.push(c);
            } else {
                down.push(c);
            }
        }
        up.extend(down);
        up
    }

    /// Splits [f, f+n) where the set of copies that missed blocks changes:
    /// (start, length, mask of copies that missed it).
    fn segments(&self, f: u64, n: u64) -> Vec<(u64, u64, u32)> {
        let end = f + n;
        let missed = self.missed.read();
        if missed.iter().all(|m| !m.overlaps(f, end)) {
            return vec![(f, n, 0)];
        }
        let mut cuts = vec![f, end];
        for m in missed.iter() {
            for (s, e) in m.pieces(f, end) {
                cuts.push(s);
                cuts.push(e);
            }
        }
        cuts.sort_unstable();
        cuts.dedup();
        cuts.windows(2)
            .map(|w| {
                let mask = missed
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| m.overlaps(w[0], w[0] + 1))
                    .fold(0u32, |acc, (c, _)| acc | (1 << c));
                (w[0], w[1] - w[0], mask)
            })
            .collect()
    }

    /// Applies a change (live and at replay alike).
    fn change(&self, c: Change) {
        match c {
            Change::Miss { copy, fblk, len } => {
                if let Some(m) = self.missed.write().get_mut(copy as usize) {
                    m.insert(fblk, fblk + len);
                }
            }
            Change::Clear { copy, fblk, len } => {
                if let Some(m) = self.missed.write().get_mut(copy as usize) {
                    m.remove(fblk, fblk + len);
                }
            }
            Change::Truncate { from } => {
                for m in self.missed.write().iter_mut() {
                    m.remove(from, u64::MAX);
                }
            }
            Change::Policy(p) => self.policy.store(p as u8, Relaxed),
        }
    }

    /// Makes a change live and journals it.
    fn commit(&self, io: &IoCtx, c: Change) {
        self.change(c);
        io.record(&TYPE, self.id, &c.encode());
    }

    /// Copy `c` missed [f, f+n): recorded so reads avoid it until resynced.
    fn mark_missed(&self, io: &IoCtx, c: usize, f: u64, n: u64, why: &Error) {
        // A copy on a device known to be down misses every write: said once
        // by the device's change of state, not on every request.
        if self.copy_is(io, c, crate::device::DeviceState::writable) {
            tracing::warn!(node = self.id, copy = c, fblk = f, blocks = n, error = %why,
                "replica missed a write; its copy of the range is stale until resynced");
        } else {
            tracing::debug!(node = self.id, copy = c, fblk = f, blocks = n, error = %why, "replica on a down device missed a write");
        }
        self.commit(io, Change::Miss { copy: c as u32, fblk: f, len: n });
    }

    /// Copy `c` is current again over [f, f+n).
    fn mark_current(&self, io: &IoCtx, c: usize, f: u64, n: u64) {
        if self.missed.read()[c].overlaps(f, f + n) {
            self.commit(io, Change::Clear { copy: c as u32, fblk: f, len: n });
        }
    }

    /// With a check from above (`verify`), fails copy `c`'s read of `buf`
    /// (file blocks from `f`) if a block of it fails the check, counting
    /// those blocks on the copy's devices.
    fn check_copy(&self, io: &IoCtx, c: usize, f: u64, buf: &[u8], verify: Option<Verify<'_>>) -> Result<()> {
        let Some(v) = verify else { return Ok(()) };
        let bad: Vec<u64> = refused(v, f, buf).map(|k| f + k as u64).collect();
        let Some(&first) = bad.first() else { return Ok(()) };
        self.count_bad(io, c, &bad);
        let more = if bad.len() > 1 { format!(" and {} more", bad.len() - 1) } else { String::new() };
        Err(Error::Checksum(format!(
            "replicate node {}: copy {c} of file block {first}{more} does not match the checksum above it",
            self.id
        )))
    }

    /// Counts the blocks `bad` (file blocks) of copy `c` that failed the
    /// check from above as checksum errors of the devices holding them
    /// (not while recovery probes).
    fn count_bad(&self, io: &IoCtx, c: usize, bad: &[u64]) {
        if super::common::probing_now() {
            return;
        }
        let Some(child) = self.children.get(c) else { return };
        for &b in bad {
            super::common::each_device_of(child, b, 1, &mut |d, k| {
                if let Some(h) = io.storage.devs.get(d as usize) {
                    h.count_checksum_errors(k);
                }
            });
        }
    }

    /// Reads one segment whose missed copies are `skip`; returns the copy
    /// that served it whole, or None when no copy could and it was served
    /// in pieces: a range no copy reads whole is split in two, so blocks bad
    /// in different copies are still served (and healed).
    fn read_segment(
        &self,
        io: &IoCtx,
        f: u64,
        buf: &mut [u8],
        skip: u32,
        verify: Option<Verify<'_>>,
    ) -> Result<Option<usize>> {
        let n = (buf.len() / BLOCK_SIZE) as u64;
        let order = self.order(io, skip);
        if order.is_empty() {
            return Err(Error::Device(format!(
                "replicate node {}: every copy of blocks {f}+{n} missed a write (devices {:?})",
                self.id, self.devices
            )));
        }
        let mut failed = Vec::new();
        let mut err = None;
        for &c in &order {
            match self.children[c].read(io, f, buf).and_then(|()| self.check_copy(io, c, f, buf, verify)) {
                Ok(()) => {
                    if !failed.is_empty() {
                        self.heal(io, f, n, c, &failed, verify);
                    }
                    return Ok(Some(c));
                }
                Err(e) => {
                    let probed = matches!(e, Error::Checksum(_)) && super::common::probing_now();
                    if !probed && self.copy_is(io, c, crate::device::DeviceState::readable) {
                        tracing::warn!(node = self.id, copy = c, fblk = f, blocks = n, error = %e,
                            "replica read failed, trying another copy");
                    }
                    failed.push(c);
                    err.get_or_insert(e);
                }
            }
        }
        if n < 2 {
            return Err(err.unwrap_or_else(|| Error::Device("replicate: no copies".into())));
        }
        // Every copy failed somewhere in the range: each half is served by
        // whichever copy can, and the copies that failed the whole range are
        // rewritten from it.
        let half = n / 2;
        let (a, b) = buf.split_at_mut(half as usize * BLOCK_SIZE);
        let mut res = Ok(None);
        for (hf, hbuf) in [(f, a), (f + half, b)] {
            let hn = (hbuf.len() / BLOCK_SIZE) as u64;
            match self.read_segment(io, hf, hbuf, skip, verify) {
                Ok(Some(c)) => {
                    let others: Vec<usize> = failed.iter().copied().filter(|&o| o != c).collect();
                    self.heal(io, hf, hn, c, &others, verify);
                }
                Ok(None) => {}
                Err(e) => {
                    if res.is_ok() {
                        res = Err(e);
                    }
                }
            }
        }
        res
    }

    /// A read, each copy's blocks also passing `verify` where one is given.
    fn read_checked(&self, io: &IoCtx, fblk: u64, buf: &mut [u8], verify: Option<Verify<'_>>) -> Result<()> {
        let n = span(fblk, buf.len())?;
        if n == 0 {
            return Ok(());
        }
        let mut done = 0usize;
        for (f, len, skip) in self.segments(fblk, n) {
            let bytes = len as usize * BLOCK_SIZE;
            let served = self.read_segment(io, f, &mut buf[done..done + bytes], skip, verify)?;
            // Copies that missed this range and can take writes again (their
            // device came back) are resynced from the copy that served it.
            if let (Some(good), true) = (served, skip != 0 && io.repair) {
                let behind: Vec<usize> = (0..self.children.len()).filter(|&c| skip & (1 << c) != 0).collect();
                self.heal(io, f, len, good, &behind, verify);
            }
            done += bytes;
        }
        Ok(())
    }

    /// Rewrites copies `bad` of [f, f+n) from copy `good` (self-heal, and
    /// resync of copies that missed the range), clearing what they missed.
    /// Under the range lock the good copy is read again (a write may have
    /// finished since), and nothing is done if it missed the range meanwhile
    /// or no longer passes the check from above.
    fn heal(&self, io: &IoCtx, f: u64, n: u64, good: usize, bad: &[usize], verify: Option<Verify<'_>>) {
        if !io.repair {
            return;
        }
        let bad: Vec<usize> =
            bad.iter().copied().filter(|&c| self.copy_is(io, c, crate::device::DeviceState::writable)).collect();
        if bad.is_empty() {
            return;
        }
        let _g = self.locks.lock(f, f + n);
        let mut data = vec![0u8; n as usize * BLOCK_SIZE];
        let stale = self.missed.read()[good].overlaps(f, f + n);
        if stale
            || self.children[good].read(io, f, &mut data).is_err()
            || verify.is_some_and(|v| refused(v, f, &data).next().is_some())
        {
            return;
        }
        let good_data = data_blocks(&self.children[good], f, f + n);
        for c in bad {
            // Blocks either copy holds (holes in both already agree).
            let mine = data_blocks(&self.children[c], f, f + n);
            let want: Vec<bool> = good_data.iter().zip(&mine).map(|(a, b)| *a || *b).collect();
            let mut done = 0;
            let mut failed = false;
            for (off, len) in runs(&want) {
                match self.children[c].write(io, f + off, blocks(&data, off, len)) {
                    Ok(()) => {
                        credit_repair(&self.children[c], io, f + off, len);
                        done += len;
                    }
                    Err(e) => {
                        self.mark_missed(io, c, f, n, &e);
                        failed = true;
                        break;
                    }
                }
            }
            // Written from the current good copy under the lock: whatever
            // the copy missed here (before, or by a write since) it holds now.
            if !failed {
                self.mark_current(io, c, f, n);
            }
            if done > 0 {
                tracing::info!(
                    node = self.id,
                    copy = c,
                    from = good,
                    fblk = f,
                    blocks = done,
                    "repaired a replica from a good copy"
                );
            }
        }
    }

    /// Scrubs [pos, pos+len) under its range lock: reads every copy, picks a
    /// good one per block, rewrites the others (with `s.repair`).
    fn scrub_step(&self, io: &IoCtx, s: &Scrub, pos: u64, len: u64) -> Result<()> {
        let end = pos + len;
        let nc = self.children.len();
        let lb = len as usize;
        let _g = self.locks.lock(pos, end);
        let missed: Vec<Vec<bool>> = {
            let m = self.missed.read();
            m.iter()
                .map(|r| {
                    let mut v = vec![false; lb];
                    for (a, b) in r.pieces(pos, end) {
                        v[(a - pos) as usize..(b - pos) as usize].fill(true);
                    }
                    v
                })
                .collect()
        };
        let mut bufs = vec![vec![0u8; lb * BLOCK_SIZE]; nc];
        let mut ok = vec![vec![false; lb]; nc];
        let has: Vec<Vec<bool>> = self.children.iter().map(|child| data_blocks(child, pos, end)).collect();
        // Every copy that is trusted and readable, read at once.
        let mut reads = Vec::with_capacity(nc);
        for (c, (buf, ok)) in bufs.iter_mut().zip(ok.iter_mut()).enumerate() {
            if self.devices[c].iter().any(|&d| (s.rebuild)(d)) {
                continue; // rebuilt wholesale: nothing on it is trusted
            }
            if !self.copy_is(io, c, crate::device::DeviceState::readable) {
                continue;
            }
            reads.push((c, buf, ok));
        }
        let read_copy = |(c, buf, ok): (usize, &mut Vec<u8>, &mut Vec<bool>)| {
            let child = &self.children[c];
            s.tally.checked(len);
            if child.read(io, pos, buf).is_ok() {
                ok.fill(true);
            } else {
                for k in 0..lb {
                    let b = &mut buf[k * BLOCK_SIZE..(k + 1) * BLOCK_SIZE];
                    ok[k] = child.read(io, pos + k as u64, b).is_ok();
                }
            }
            for k in 0..lb {
                ok[k] &= !missed[c][k];
            }
            // A block the check from above refuses is bad, however many
            // copies agree with it.
            if let Some(v) = s.verify {
                let mut refused_blocks = Vec::new();
                for k in refused(v, pos, buf) {
                    if ok[k] {
                        ok[k] = false;
                        refused_blocks.push(pos + k as u64);
                    }
                }
                let bad = refused_blocks.len();
                if bad > 0 {
                    self.count_bad(io, c, &refused_blocks);
                    tracing::warn!(
                        node = self.id,
                        copy = c,
                        fblk = pos,
                        blocks = bad,
                        "scrub: copy does not match the checksum above it"
                    );
                }
            }
        };
        if reads.len() > 1 {
            crate::helpers::scope(|sc| {
                let mut it = reads.into_iter();
                let first = it.next();
                let hs: Vec<_> = it.map(|r| sc.spawn(|| read_copy(r))).collect();
                if let Some(r) = first {
                    read_copy(r);
                }
                for h in hs {
                    if let Err(p) = h.join() {
                        std::panic::resume_unwind(p);
                    }
                }
            });
        } else {
            reads.into_iter().for_each(read_copy);
        }
        // Per block: the copy to trust, and the copies to rewrite from it.
        let mut source: Vec<Option<usize>> = vec![None; lb];
        let mut target = vec![vec![false; lb]; nc];
        let mut lost = vec![false; lb];
        let mut mismatches = 0u64;
        for k in 0..lb {
            let blk = |c: usize| &bufs[c][k * BLOCK_SIZE..(k + 1) * BLOCK_SIZE];
            let good: Vec<usize> = (0..nc).filter(|&c| ok[c][k]).collect();
            let Some(&first) = good.first() else {
                lost[k] = true;
                continue;
            };
            // Copies that read well but differ: the largest group of equal
            // copies wins (ties: the lowest copy); the others are rewritten.
            let mut best = first;
            if good.iter().any(|&c| blk(c) != blk(first)) {
                mismatches += 1;
                let votes = |c: usize| good.iter().filter(|&&o| blk(o) == blk(c)).count();
                best = good.iter().copied().max_by_key(|&c| (votes(c), std::cmp::Reverse(c))).unwrap_or(first);
                tracing::warn!(node = self.id, fblk = pos + k as u64, chosen = best, copies = ?good,
                    "replicas differ; keeping the copy most of them agree with");
            }
            source[k] = Some(best);
            for c in 0..nc {
                target[c][k] = !ok[c][k] || blk(c) != blk(best);
            }
        }
        if mismatches > 0 {
            tracing::warn!(node = self.id, fblk = pos, blocks = len, mismatches, "scrub found differing replicas");
        }
        for (off, l) in runs(&lost) {
            s.tally.lost(pos + off, l);
        }
        if !s.repair {
            return Ok(());
        }
        // One copy the source of every block (the usual case, and every
        // block of a rebuild): write from its buffer as it is.
        let first = source.iter().flatten().next().copied();
        let one = first.filter(|&c0| source.iter().all(|s| s.is_none_or(|c| c == c0)));
        let assembled;
        let good: &[u8] = match one {
            Some(c) => &bufs[c],
            None => {
                let mut g = vec![0u8; lb * BLOCK_SIZE];
                for k in 0..lb {
                    if let Some(c) = source[k] {
                        g[k * BLOCK_SIZE..(k + 1) * BLOCK_SIZE]
                            .copy_from_slice(&bufs[c][k * BLOCK_SIZE..(k + 1) * BLOCK_SIZE]);
                    }
                }
                assembled = g;
                &assembled
            }
        };
        for c in 0..nc {
            // Blocks to write: where the copy is bad and either side holds
            // data (both holes agree already).
            let write: Vec<bool> =
                (0..lb).map(|k| target[c][k] && source[k].is_some_and(|sc| has[sc][k] || has[c][k])).collect();
            let mut current: Vec<bool> = (0..lb).map(|k| missed[c][k] && source[k].is_some() && !write[k]).collect();
            if write.iter().any(|&w| w) && self.copy_is(io, c, crate::device::DeviceState::writable) {
                for (off, l) in runs(&write) {
                    match self.children[c].write(io, pos + off, blocks(good, off, l)) {
                        Ok(()) => {
                            s.tally.repaired(l);
                            credit_repair(&self.children[c], io, pos + off, l);
                            current[off as usize..(off + l) as usize].fill(true);
                        }
                        Err(e) => {
                            if !missed[c][off as usize..(off + l) as usize].iter().all(|&m| m) {
                                self.mark_missed(io, c, pos + off, l, &e);
                            }
                        }
                    }
                }
            }
            for (off, l) in runs(&current) {
                self.mark_current(io, c, pos + off, l);
            }
        }
        Ok(())
    }

    /// A write of blocks [fblk, fblk+n) to every copy (`one(c)` writes copy
    /// `c`), under the range lock: copies that fail are recorded as having
    /// missed the range, and the write fails only if every copy did (or a
    /// device is full).
    fn write_copies(&self, io: &IoCtx, fblk: u64, n: u64, one: &(dyn Fn(usize) -> Result<()> + Sync)) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let _g = self.locks.lock(fblk, fblk + n);
        let nc = self.children.len();
        let results: Vec<Result<()>> = if n >= PARALLEL_MIN_BLOCKS && nc > 1 {
            crate::helpers::scope(|s| {
                let handles: Vec<_> = (1..nc).map(|c| s.spawn(move || one(c))).collect();
                // The calling thread takes the first copy instead of idling.
                let mut out = vec![one(0)];
                for h in handles {
                    out.push(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
                }
                out
            })
        } else {
            (0..nc).map(one).collect()
        };
        if results.iter().all(|r| r.is_err()) {
            let mut first = None;
            for r in results {
                if let Err(e) = r {
                    first.get_or_insert(e);
                }
            }
            return Err(first.unwrap_or_else(|| Error::Device("replicate: no copies".into())));
        }
        // At least one copy is current: the others missed the range.
        let mut no_space = None;
        for (c, r) in results.into_iter().enumerate() {
            match r {
                Ok(()) => self.mark_current(io, c, fblk, n),
                Err(e) => {
                    self.mark_missed(io, c, fblk, n, &e);
                    if matches!(e, Error::NoSpace(_)) {
                        no_space.get_or_insert(e);
                    }
                }
            }
        }
        // A full device is the caller's to know about, not a fault to ride out.
        match no_space {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Block for Replicate {
    fn parent_block(&self, child: usize, cblk: u64) -> Option<u64> {
        (child < self.children().len()).then_some(cblk)
    }
    fn id(&self) -> u32 {
        self.id
    }
    fn kind(&self) -> &'static BlockType {
        &TYPE
    }
    fn params(&self) -> Params {
        let mut p = Params::default();
        p.0.insert("copies".into(), Value::Num(self.children.len() as u64));
        p.0.insert("read".into(), Value::Word(self.policy().word().into()));
        p
    }
    fn children(&self) -> &[Arc<dyn Block>] {
        &self.children
    }

    fn read(&self, io: &IoCtx, fblk: u64, buf: &mut [u8]) -> Result<()> {
        self.read_checked(io, fblk, buf, None)
    }

    fn verifies_copies(&self) -> bool {
        true
    }

    fn read_verified(&self, io: &IoCtx, fblk: u64, buf: &mut [u8], verify: Verify<'_>) -> Result<()> {
        self.read_checked(io, fblk, buf, Some(verify))
    }

    fn write(&self, io: &IoCtx, fblk: u64, buf: &[u8]) -> Result<()> {
        let n = span(fblk, buf.len())?;
        self.write_copies(io, fblk, n, &|c| self.children[c].write(io, fblk, buf))
    }

    fn write_zeroes(&self, io: &IoCtx, fblk: u64, n: u64) -> Result<()> {
        fblk.checked_add(n).ok_or_else(|| Error::TooBig(format!("block {fblk} + {n}")))?;
        self.write_copies(io, fblk, n, &|c| self.children[c].write_zeroes(io, fblk, n))
    }

    fn truncate(&self, io: &IoCtx, nblocks: u64) -> Result<()> {
        let _g = self.locks.lock(nblocks, u64::MAX);
        let mut res = Ok(());
        for child in &self.children {
            let r = child.truncate(io, nblocks);
            if res.is_ok() {
                res = r;
            }
        }
        if self.missed.read().iter().any(|m| m.overlaps(nblocks, u64::MAX)) {
            self.commit(io, Change::Truncate { from: nblocks });
        }
        res
    }

    /// Punches every copy. Copies that punched hold the range again (holes,
    /// read as zeros); a copy that could not, beside one that did, missed
    /// the range: reads avoid it until a scrub resyncs it. If no copy can
    /// punch, nothing changed and the node cannot either.
    fn punch(&self, io: &IoCtx, fblk: u64, n: u64) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        fblk.checked_add(n).ok_or_else(|| Error::TooBig(format!("replicate node {}: punch {fblk}+{n}", self.id)))?;
        let _g = self.locks.lock(fblk, fblk + n);
        let results: Vec<Result<()>> = self.children.iter().map(|c| c.punch(io, fblk, n)).collect();
        if !results.iter().any(|r| r.is_ok()) {
            return results.into_iter().next().unwrap_or(Ok(()));
        }
        for (c, r) in results.iter().enumerate() {
            match r {
                Ok(()) => self.mark_current(io, c, fblk, n),
                Err(e) => self.mark_missed(io, c, fblk, n, e),
            }
        }
        Ok(())
    }

    fn encode_state(&self, e: &mut Encoder) {
        let m = self.missed.read();
        if m.iter().all(|r| r.is_empty()) {
            return;
        }
        for r in m.iter() {
            r.encode(e);
        }
    }

    fn apply(&self, payload: &[u8]) -> Result<()> {
        self.change(Change::decode(payload, self.id, self.children.len())?);
        Ok(())
    }

    fn next_data(&self, fblk: u64) -> Option<u64> {
        self.children.iter().filter_map(|c| c.next_data(fblk)).min()
    }

    fn capacity(&self) -> u64 {
        self.children.iter().map(|c| c.capacity()).min().unwrap_or(u64::MAX)
    }

    /// Lost only where no copy can serve a range (every copy lost, or the
    /// copies left all missed it); degraded with any copy down or behind.
    fn health(&self, down: &dyn Fn(u32) -> bool) -> Health {
        let hs: Vec<Health> = self.children.iter().map(|c| c.health(down)).collect();
        let missed = self.missed.read();
        let mut common: Option<Ranges> = None;
        for (c, h) in hs.iter().enumerate() {
            if *h == Health::Lost {
                continue;
            }
            let m = &missed[c];
            common = Some(match common {
                None => m.clone(),
                Some(x) => x.intersect(m),
            });
        }
        match common {
            None => Health::Lost,
            Some(x) if !x.is_empty() => Health::Lost,
            _ if hs.iter().any(|h| *h != Health::Ok) || missed.iter().any(|m| !m.is_empty()) => Health::Degraded,
            _ => Health::Ok,
        }
    }

    /// Reads every copy of every block holding data, compares them, and
    /// (with `s.repair`) rewrites bad, differing, missed and rebuilt copies
    /// from a good one, clearing what was missed.
    /// Steps of the range run several at once, each under its own range
    /// lock, so every copy's device has requests queued.
    fn scrub(&self, io: &IoCtx, s: &Scrub, fblk: u64, n: u64) -> Result<()> {
        if s.skips(self) {
            return Ok(());
        }
        let end = fblk.saturating_add(n);
        let mut pos = fblk;
        let mut steps = Vec::new();
        while pos < end {
            // Holes hold nothing to verify.
            match self.next_data(pos) {
                Some(d) if d < end => pos = pos.max(d),
                _ => break,
            }
            let len = SCRUB_STEP.min(end - pos);
            steps.push((pos, len));
            pos += len;
        }
        super::common::run_steps(&steps, super::common::SCRUB_WORKERS, &|&(pos, len)| self.scrub_step(io, s, pos, len))
    }
}

/// The records that turn `cur` into `new` on a file that holds data, where
/// that can be done in place: the trees must be the same but for the read
/// policy of replicate nodes. Anything else is refused (a layout holding
/// data is changed by migrating it).
pub fn live_changes(cur: &Layout, new: &Layout) -> Result<Vec<NodeRecord>> {
    let refuse = |why: String| Err(Error::Invalid(format!("layout of a file holding data: {why}")));
    if cur.nodes().len() != new.nodes().len() {
        return refuse("only the read policy of replicate nodes can change".into());
    }
    let mut out = Vec::new();
    for (i, (a, b)) in cur.nodes().iter().zip(new.nodes()).enumerate() {
        let (mut pa, mut pb) = (a.params().0, b.params().0);
        let same_shape =
            a.kind().name == b.kind().name && a.device() == b.device() && a.children().len() == b.children().len();
        if !same_shape {
            return refuse(format!("node {i} differs; only the read policy of replicate nodes can change"));
        }
        if a.kind().name == TYPE.name {
            let (ra, rb) = (pa.remove("read"), pb.remove("read"));
            if ra != rb {
                let Some(Value::Word(w)) = rb else { return refuse(format!("node {i}: no read policy")) };
                let p = Policy::from_word(&w).ok_or_else(|| Error::Layout(format!("unknown read policy {w:?}")))?;
                out.push(Change::Policy(p).record(i as u32));
            }
        }
        if pa != pb {
            return refuse(format!(
                "parameters of {} node {i} differ; only a replicate read policy can change",
                a.kind().name
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
