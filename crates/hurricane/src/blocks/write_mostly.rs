//! `write-mostly`: new data goes to whichever child is least loaded when it
//! is written (the shortest expected wait: the requests in flight on the
//! child's devices, each taking the device's recent service time; ties
//! taken in turn), and the node records, per `unit` of the file, which
//! child got it; reads and overwrites go where the data is. A device slowed by other
//! work (a rebuild, another tenant) then takes less of the new data instead
//! of holding every write back, as a stripe's fixed placement would.
//!
//! A child keeps its file blocks at the file's own block numbers (it holds
//! only the units placed on it; the rest are holes). A unit is placed by
//! the first write into it and stays on that child until a truncate or a
//! punch of the whole unit drops it. The placement map is the node's
//! persistent state, as runs of units; its records are `Place` (units on a
//! child), `Truncate` (units from one on dropped) and `Unplace` (units
//! dropped by a punch). The record of a placement goes in the journal group
//! of the write that made it, with the child's own records, so a crash
//! keeps both or neither.
//!
//! Concurrency: the map lock is held while units are looked up or placed,
//! never during child I/O. A unit is placed (in memory) before its data is
//! written, so two writers into one new unit agree on its child; a reader
//! racing that first write sees a hole, as it would in an `extent`.

use super::common::{chunks, devices_under, dispatch, group_pieces, span};
use super::{Block, BlockType, BuildArgs, IoCtx, ParamKind, ParamSpec, Params, Value, BLOCK_SIZE};
use crate::codec::{Decoder, Encoder};
use crate::error::{Error, Result};
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

pub static TYPE: BlockType = BlockType {
    name: "write-mostly",
    doc: "Each unit of new data goes to the least-loaded child when written (requests in flight times recent service time); where it went is recorded, reads find it.",
    params: &[
        ParamSpec {
            key: "unit",
            kind: ParamKind::Size,
            default: Some("1M"),
            min: BLOCK_SIZE as u64,
            max: 1 << 30,
            doc: "bytes placed together on one child (a multiple of 4K)",
        },
        ParamSpec { key: "width", kind: ParamKind::Int, default: None, min: 2, max: 256, doc: "number of children" },
    ],
    per_device: false,
    min_children: 2,
    max_children: 256,
    distinct_devices: true,
    width_param: Some("width"),
    implied_width: None,
    state_version: Some(1),
    in_metadata: false,
    build,
};

/// Requests at least this long go to their children in parallel.
const PARALLEL_MIN_BLOCKS: u64 = 256; // 1 MiB

/// A change to the placement map: its journal record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// Units [unit, unit+len) are on `child`.
    Place { unit: u64, len: u64, child: u8 },
    /// Every unit at or past `from` is dropped.
    Truncate { from: u64 },
    /// Units [unit, unit+len) are dropped.
    Unplace { unit: u64, len: u64 },
}

impl Change {
    fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        match *self {
            Change::Place { unit, len, child } => e.u8(1).u64(unit).u64(len).u8(child),
            Change::Truncate { from } => e.u8(2).u64(from),
            Change::Unplace { unit, len } => e.u8(3).u64(unit).u64(len),
        };
        e.into_inner()
    }

    /// Strict: unknown tags, trailing bytes, empty or overflowing runs and
    /// children the node has not are corrupt.
    fn decode(b: &[u8], id: u32, children: usize) -> Result<Change> {
        let mut d = Decoder::new(b, "write-mostly record");
        let c = match d.u8()? {
            1 => Change::Place { unit: d.u64()?, len: d.u64()?, child: d.u8()? },
            2 => Change::Truncate { from: d.u64()? },
            3 => Change::Unplace { unit: d.u64()?, len: d.u64()? },
            t => return Err(d.err(format!("unknown write-mostly change {t}"))),
        };
        d.expect_end()?;
        let bad = |why: String| Err(Error::corrupt("journal", format!("write-mostly node {id}: {why}")));
        match c {
            Change::Place { unit, len, child } => {
                if len == 0 || unit.checked_add(len).is_none() {
                    return bad(format!("placement of {len} units at {unit}"));
                }
                if usize::from(child) >= children {
                    return bad(format!("child {child} of {children}"));
                }
            }
            Change::Unplace { unit, len } if len == 0 || unit.checked_add(len).is_none() => {
                return bad(format!("unplacement of {len} units at {unit}"))
            }
            _ => {}
        }
        Ok(c)
    }
}

/// Units placed: first unit -> (units, child), disjoint runs.
#[derive(Default)]
struct Map {
    runs: BTreeMap<u64, (u64, u8)>,
}

impl Map {
    /// The child holding unit `u`.
    fn child(&self, u: u64) -> Option<usize> {
        match self.runs.range(..=u).next_back() {
            Some((&s, &(l, c))) if s + l > u => Some(usize::from(c)),
            _ => None,
        }
    }

    /// Drops units [from, to), splitting the runs it cuts.
    fn remove(&mut self, from: u64, to: u64) {
        if let Some((&s, &(l, c))) = self.runs.range(..from).next_back() {
            if s + l > from {
                self.runs.insert(s, (from - s, c));
                if s + l > to {
                    self.runs.insert(to, (s + l - to, c));
                }
            }
        }
        let inside: Vec<(u64, (u64, u8))> = self.runs.range(from..to).map(|(&s, &v)| (s, v)).collect();
        for (s, (l, c)) in inside {
            self.runs.remove(&s);
            if s + l > to {
                self.runs.insert(to, (s + l - to, c));
            }
        }
    }

    /// Places units [u, u+len) on child `c`, joining a run that ends at `u`
    /// on the same child.
    fn place(&mut self, u: u64, len: u64, c: u8) {
        self.remove(u, u + len);
        let (mut s, mut l) = (u, len);
        if let Some((&ps, &(pl, pc))) = self.runs.range(..u).next_back() {
            if ps + pl == u && pc == c {
                s = ps;
                l += pl;
            }
        }
        if let Some(&(nl, nc)) = self.runs.get(&(u + len)) {
            if nc == c {
                self.runs.remove(&(u + len));
                l += nl;
            }
        }
        self.runs.insert(s, (l, c));
    }

    fn apply(&mut self, c: Change) {
        match c {
            Change::Place { unit, len, child } => self.place(unit, len, child),
            Change::Truncate { from } => self.remove(from, u64::MAX),
            Change::Unplace { unit, len } => self.remove(unit, unit.saturating_add(len)),
        }
    }
}

/// Decodes `count, (first unit, units, child)*`: runs in order, apart, not
/// empty, on children the node has.
fn decode_runs(s: &[u8], children: usize) -> Result<BTreeMap<u64, (u64, u8)>> {
    let mut d = Decoder::new(s, "write-mostly map");
    let count = d.count(17)?;
    let mut runs = BTreeMap::new();
    let mut end = 0u64;
    for _ in 0..count {
        let (u, l, c) = (d.u64()?, d.u64()?, d.u8()?);
        let e = u.checked_add(l).filter(|_| l > 0 && u >= end);
        let Some(e) = e else {
            return Err(d.err(format!("run of {l} units at {u} is empty, overflows or overlaps")));
        };
        if usize::from(c) >= children {
            return Err(d.err(format!("child {c} of {children}")));
        }
        runs.insert(u, (l, c));
        end = e;
    }
    d.expect_end()?;
    Ok(runs)
}

struct WriteMostly {
    id: u32,
    /// Blocks per unit.
    unit: u64,
    children: Vec<Arc<dyn Block>>,
    /// The devices under each child, whose requests in flight are its load.
    devices: Vec<Vec<u32>>,
    map: RwLock<Map>,
    /// Turn for ties between equally loaded children.
    next: AtomicUsize,
}

fn build(a: BuildArgs) -> Result<Arc<dyn Block>> {
    let bytes = a.params.num("unit")?;
    if !bytes.is_multiple_of(BLOCK_SIZE as u64) {
        return Err(Error::Layout(format!("write-mostly: unit={bytes} is not a multiple of 4K")));
    }
    if a.children.len() > usize::from(u8::MAX) + 1 {
        return Err(Error::Layout(format!("write-mostly: {} children (at most 256)", a.children.len())));
    }
    let mut map = Map::default();
    if let Some(s) = a.state {
        map.runs = decode_runs(s, a.children.len())?;
    }
    let devices = a.children.iter().map(devices_under).collect();
    Ok(Arc::new(WriteMostly {
        id: a.id,
        unit: bytes / BLOCK_SIZE as u64,
        children: a.children,
        devices,
        map: RwLock::new(map),
        next: AtomicUsize::new(0),
    }))
}

impl WriteMostly {
    /// Each child's devices as (requests in flight, recent service time in
    /// ns): a device with no time yet gets the mean of those that have one.
    fn loads(&self, io: &IoCtx) -> Vec<Vec<(u64, u64)>> {
        let raw: Vec<Vec<(u64, Option<u64>)>> = self
            .devices
            .iter()
            .map(|ds| {
                ds.iter()
                    .filter_map(|&d| io.storage.devs.get(d as usize))
                    .map(|h| (h.stats.load(), h.stats.service_ns()))
                    .collect()
            })
            .collect();
        let known: Vec<u64> = raw.iter().flatten().filter_map(|x| x.1).collect();
        let mean = if known.is_empty() { 1 } else { known.iter().sum::<u64>() / known.len() as u64 };
        raw.into_iter().map(|ds| ds.into_iter().map(|(l, t)| (l, t.unwrap_or(mean).max(1))).collect()).collect()
    }

    /// The wait a new request to child `c` can expect: on each of its
    /// devices, the requests ahead of it (in flight, and the `given` units
    /// this request already put there) and itself, times the device's
    /// recent service time.
    fn wait(loads: &[(u64, u64)], given: u64) -> u128 {
        loads.iter().map(|&(l, t)| u128::from(l + given + 1) * u128::from(t)).sum()
    }

    /// The pieces of [fblk, fblk+n) as (file block, child or None for a
    /// hole, length), placing the units a write reaches that have no child
    /// yet (`place`): the least loaded child, counting what this request
    /// gives each, ties in turn. Placements are recorded.
    fn pieces(&self, io: Option<&IoCtx>, fblk: u64, n: u64) -> Vec<(u64, Option<usize>, u64)> {
        let mut out: Vec<(u64, Option<usize>, u64)> = Vec::new();
        let mut push = |f: u64, c: Option<usize>, l: u64| match out.last_mut() {
            Some(p) if p.1 == c && p.0 + p.2 == f => p.2 += l,
            _ => out.push((f, c, l)),
        };
        let Some(io) = io else {
            let m = self.map.read();
            for (u, off, len) in chunks(fblk, n, self.unit) {
                push(u * self.unit + off, m.child(u), len);
            }
            return out;
        };
        let k = self.children.len();
        let mut given = vec![0u64; k];
        let loads = self.loads(io);
        let mut m = self.map.write();
        // Placements made, recorded as runs of units on one child.
        let mut placed: Vec<Change> = Vec::new();
        for (u, off, len) in chunks(fblk, n, self.unit) {
            let c = match m.child(u) {
                Some(c) => c,
                None => {
                    let start = self.next.fetch_add(1, Relaxed) % k;
                    let c =
                        (0..k).map(|i| (start + i) % k).min_by_key(|&c| Self::wait(&loads[c], given[c])).unwrap_or(0);
                    m.apply(Change::Place { unit: u, len: 1, child: c as u8 });
                    match placed.last_mut() {
                        Some(Change::Place { unit, len, child }) if *unit + *len == u && usize::from(*child) == c => {
                            *len += 1
                        }
                        _ => placed.push(Change::Place { unit: u, len: 1, child: c as u8 }),
                    }
                    c
                }
            };
            // Each unit counts as one request more on its child.
            given[c] += 1;
            push(u * self.unit + off, Some(c), len);
        }
        drop(m);
        for ch in placed {
            io.record(&TYPE, self.id, &ch.encode());
        }
        out
    }
}

impl Block for WriteMostly {
    fn id(&self) -> u32 {
        self.id
    }
    fn kind(&self) -> &'static BlockType {
        &TYPE
    }
    fn params(&self) -> Params {
        let mut p = Params::default();
        p.0.insert("unit".into(), Value::Num(self.unit * BLOCK_SIZE as u64));
        p.0.insert("width".into(), Value::Num(self.children.len() as u64));
        p
    }
    fn children(&self) -> &[Arc<dyn Block>] {
        &self.children
    }

    fn read(&self, io: &IoCtx, fblk: u64, buf: &mut [u8]) -> Result<()> {
        let n = span(fblk, buf.len())?;
        let pieces = self.pieces(None, fblk, n);
        // Units on no child read as zeros.
        let mut at = 0usize;
        for &(_, c, len) in &pieces {
            let bytes = len as usize * BLOCK_SIZE;
            if c.is_none() {
                buf[at..at + bytes].fill(0);
            }
            at += bytes;
        }
        let groups = group_pieces(&pieces, self.children.len(), buf);
        dispatch(groups, n >= PARALLEL_MIN_BLOCKS, &|c, cb, piece: &mut [u8]| self.children[c].read(io, cb, piece))
    }

    fn write(&self, io: &IoCtx, fblk: u64, buf: &[u8]) -> Result<()> {
        let n = span(fblk, buf.len())?;
        let pieces = self.pieces(Some(io), fblk, n);
        let groups = group_pieces(&pieces, self.children.len(), buf);
        dispatch(groups, n >= PARALLEL_MIN_BLOCKS, &|c, cb, piece: &[u8]| self.children[c].write(io, cb, piece))
    }

    fn write_zeroes(&self, io: &IoCtx, fblk: u64, n: u64) -> Result<()> {
        fblk.checked_add(n).ok_or_else(|| Error::TooBig(format!("block {fblk} + {n}")))?;
        for (f, c, len) in self.pieces(Some(io), fblk, n) {
            if let Some(c) = c {
                self.children[c].write_zeroes(io, f, len)?;
            }
        }
        Ok(())
    }

    fn truncate(&self, io: &IoCtx, nblocks: u64) -> Result<()> {
        // Units wholly past the end lose their placement; every child drops
        // what it holds past the end (each is tried even if one fails).
        let from = nblocks.div_ceil(self.unit);
        {
            let mut m = self.map.write();
            if m.runs.range(..).next_back().is_some_and(|(&s, &(l, _))| s + l > from) {
                let c = Change::Truncate { from };
                m.apply(c);
                io.record(&TYPE, self.id, &c.encode());
            }
        }
        let mut res = Ok(());
        for child in &self.children {
            let r = child.truncate(io, nblocks);
            if res.is_ok() {
                res = r;
            }
        }
        res
    }

    fn punch(&self, io: &IoCtx, fblk: u64, n: u64) -> Result<()> {
        let end = fblk.checked_add(n).ok_or_else(|| Error::TooBig(format!("block {fblk} + {n}")))?;
        for (f, c, len) in self.pieces(None, fblk, n) {
            if let Some(c) = c {
                self.children[c].punch(io, f, len)?;
            }
        }
        // Whole units punched hold nothing: a later write places them anew.
        let (u0, u1) = (fblk.div_ceil(self.unit), end / self.unit);
        if u0 < u1 {
            let mut m = self.map.write();
            let c = Change::Unplace { unit: u0, len: u1 - u0 };
            m.apply(c);
            io.record(&TYPE, self.id, &c.encode());
        }
        Ok(())
    }

    fn map_range(&self, fblk: u64, n: u64, f: &mut dyn FnMut(u64, usize, u64, u64)) -> bool {
        for (b, c, len) in self.pieces(None, fblk, n) {
            if let Some(c) = c {
                f(b, c, b, len);
            }
        }
        true
    }

    fn encode_state(&self, e: &mut Encoder) {
        let m = self.map.read();
        e.u32(m.runs.len() as u32);
        for (&u, &(l, c)) in &m.runs {
            e.u64(u).u64(l).u8(c);
        }
    }

    fn apply(&self, payload: &[u8]) -> Result<()> {
        let c = Change::decode(payload, self.id, self.children.len())?;
        self.map.write().apply(c);
        Ok(())
    }

    fn next_data(&self, fblk: u64) -> Option<u64> {
        // A child holds data only inside the units placed on it.
        let runs: Vec<(u64, u64, usize)> = {
            let m = self.map.read();
            let u = fblk / self.unit;
            let first = match m.runs.range(..=u).next_back() {
                Some((&s, &(l, _))) if s + l > u => s,
                _ => u,
            };
            m.runs.range(first..).map(|(&s, &(l, c))| (s, l, usize::from(c))).collect()
        };
        for (s, l, c) in runs {
            let (a, b) = ((s * self.unit).max(fblk), (s + l).saturating_mul(self.unit));
            if let Some(d) = self.children[c].next_data(a).filter(|&d| d < b) {
                return Some(d);
            }
        }
        None
    }

    fn capacity(&self) -> u64 {
        self.children.iter().map(|c| c.capacity()).min().unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testenv::{build, decode, encode, pattern, Env, BS};
    use super::super::{Layout, NodeRecord, Spec};
    use super::*;

    fn ext(d: u32) -> Spec {
        Spec { kind: "extent".into(), params: vec![], children: vec![], device: Some(d) }
    }
    fn wm(unit: u64, kids: Vec<Spec>) -> Spec {
        Spec {
            kind: "write-mostly".into(),
            params: vec![("unit".into(), Value::Num(unit))],
            children: kids,
            device: None,
        }
    }
    fn per_device(l: &Layout) -> [u64; 3] {
        let mut per = [0u64; 3];
        l.extents(&mut |d, _, n| per[d as usize] += n);
        per
    }

    #[test]
    fn new_data_avoids_a_loaded_device_and_reads_back() {
        let env = Env::new(3, 4096);
        let l = build(&wm(16 << 10, vec![ext(0), ext(1), ext(2)]));
        // The devices equally fast (the memory devices' own times are the
        // host's noise), device 1 busy: requests in flight on it.
        for h in env.storage.devs.iter() {
            h.stats.pin_service_ns(1000);
        }
        let busy: Vec<_> = (0..8).map(|_| env.storage.devs[1].stats.begin()).collect();
        let data = pattern(3, 96);
        env.write(&l, 0, &data).unwrap();
        assert_eq!(env.read(&l, 0, 96), data);
        // 24 units: each idle device takes 8 (a unit counts as one request)
        // before the loaded one is as attractive; the rest spread evenly.
        let per = per_device(&l);
        assert_eq!(per.iter().sum::<u64>(), 96);
        assert!(per[1] * 2 < per[0] && per[1] * 2 < per[2], "{per:?}: the loaded device got as much");
        // A smaller write goes only to the idle devices.
        env.write(&l, 200, &data[..32 * BS]).unwrap();
        let after = per_device(&l);
        assert_eq!(after[1], per[1], "{after:?}: the loaded device got new data");
        drop(busy);
        // Overwrites stay where the data is; unplaced units read as zeros.
        let per = per_device(&l);
        let over = pattern(4, 8);
        env.write(&l, 10, &over).unwrap();
        assert_eq!(per_device(&l), per);
        let mut want = data.clone();
        want[10 * BS..18 * BS].copy_from_slice(&over);
        assert_eq!(env.read(&l, 0, 96), want);
        assert!(env.read(&l, 100, 20).iter().all(|&b| b == 0));
        assert_eq!(l.root().next_data(96), Some(200));
        assert_eq!(env.read(&l, 200, 32), data[..32 * BS]);
        // The placement survives encoding, and the records rebuild it.
        let again = decode(&encode(&l)).unwrap();
        assert_eq!(env.read(&again, 0, 96), want);
        let fresh = build(&wm(16 << 10, vec![ext(0), ext(1), ext(2)]));
        for r in env.changes() {
            fresh.apply(&r).unwrap();
        }
        assert_eq!(encode(&fresh), encode(&l));
        env.check_accounting(&[&l]);
    }

    #[test]
    fn truncate_and_punch_drop_placements() {
        let env = Env::new(3, 4096);
        let l = build(&wm(16 << 10, vec![ext(0), ext(1), ext(2)]));
        let data = pattern(5, 64);
        env.write(&l, 0, &data).unwrap();
        env.truncate(&l, 30);
        assert_eq!(env.read(&l, 0, 30), data[..30 * BS]);
        assert!(env.read(&l, 30, 34).iter().all(|&b| b == 0));
        assert_eq!(l.root().next_data(30), None);
        // A punch of whole units frees their space and placement.
        env.io(|io| l.root().punch(io, 4, 20)).unwrap();
        env.commit();
        let mut want = data[..30 * BS].to_vec();
        want[4 * BS..24 * BS].fill(0);
        assert_eq!(env.read(&l, 0, 30), want);
        assert_eq!(l.root().next_data(4), Some(24));
        assert_eq!(per_device(&l).iter().sum::<u64>(), 4 + 6);
        env.check_accounting(&[&l]);
    }

    #[test]
    fn hostile_records_and_state_are_corrupt() {
        let l = build(&wm(16 << 10, vec![ext(0), ext(1)]));
        let rec = |f: &dyn Fn(&mut Encoder)| {
            let mut e = Encoder::new();
            e.u8(1);
            f(&mut e);
            NodeRecord { node: 0, bytes: e.into_inner() }
        };
        let bad = [
            rec(&|e| {
                e.u8(1).u64(0).u64(0).u8(0);
            }), // empty placement
            rec(&|e| {
                e.u8(1).u64(u64::MAX).u64(2).u8(0);
            }), // overflow
            rec(&|e| {
                e.u8(1).u64(0).u64(1).u8(2);
            }), // no such child
            rec(&|e| {
                e.u8(3).u64(5).u64(0);
            }), // empty unplacement
            rec(&|e| {
                e.u8(9);
            }), // unknown change
            rec(&|e| {
                e.u8(2);
            }), // truncated
        ];
        for r in &bad {
            assert!(matches!(l.apply(r), Err(Error::Corrupt { .. })), "{:?}", r.bytes);
        }
        let state = |runs: &[(u64, u64, u8)]| {
            let mut e = Encoder::new();
            e.u32(runs.len() as u32);
            for &(u, n, c) in runs {
                e.u64(u).u64(n).u8(c);
            }
            e.into_inner()
        };
        for runs in [vec![(0, 0, 0)], vec![(0, 4, 0), (2, 4, 1)], vec![(0, 1, 5)], vec![(u64::MAX, 2, 0)]] {
            assert!(decode_runs(&state(&runs), 2).is_err(), "{runs:?}");
        }
        assert!(decode_runs(&state(&[(0, 2, 0), (2, 3, 1)]), 2).is_ok());
        assert!(decode_runs(&[1, 0, 0], 2).is_err());
    }

    #[test]
    fn prints_and_decodes_back() {
        let l = build(&wm(64 << 10, vec![ext(0), ext(1)]));
        assert_eq!(l.spec().to_string(), "write-mostly(unit=64K)[extent@0,extent@1]");
        let bytes = encode(&l);
        assert_eq!(encode(&decode(&bytes).unwrap()), bytes);
    }
}
