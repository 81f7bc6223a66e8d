//! Round-robin geometry and request splitting, shared by `stripe` (small
//! units) and `regions` (one large region per child per turn).

use super::common::{dispatch, span, Split};
use super::{Block, BlockType, BuildArgs, IoCtx, Params, Scrub, ScrubTally, Value, BLOCK_SIZE};
use crate::error::{Error, Result};
use std::sync::Arc;

/// Requests at least this long go to several children in parallel even when
/// they cover fewer than 4 units: one device alone would be the bottleneck.
const PARALLEL_MIN_BLOCKS: u64 = 256; // 1 MiB

/// File block b lives in unit u = b / unit, on child u % width, at child block
/// (u / width) * unit + b % unit. Used by `stripe` (small units) and
/// `regions` (one large region per child per turn).
pub(super) struct RoundRobin {
    id: u32,
    kind: &'static BlockType,
    /// Name of the parameter that holds the unit size in bytes.
    unit_key: &'static str,
    /// Unit length in blocks.
    unit: u64,
    children: Vec<Arc<dyn Block>>,
}

impl RoundRobin {
    pub(super) fn build(kind: &'static BlockType, unit_key: &'static str, a: BuildArgs) -> Result<Arc<dyn Block>> {
        let bytes = a.params.num(unit_key)?;
        if bytes == 0 || !bytes.is_multiple_of(BLOCK_SIZE as u64) {
            return Err(Error::Layout(format!("{}: {unit_key}={bytes} is not a multiple of 4K", kind.name)));
        }
        Ok(Arc::new(RoundRobin { id: a.id, kind, unit_key, unit: bytes / BLOCK_SIZE as u64, children: a.children }))
    }

    fn width(&self) -> u64 {
        self.children.len() as u64
    }

    /// (child, child block) holding file block `b`.
    fn locate(&self, b: u64) -> (usize, u64) {
        let u = b / self.unit;
        ((u % self.width()) as usize, (u / self.width()) * self.unit + b % self.unit)
    }

    /// The file block that child `c` stores at child block `cb` (None when it
    /// would not fit in 64 bits).
    fn file_block(&self, c: usize, cb: u64) -> Option<u64> {
        (cb / self.unit)
            .checked_mul(self.width())?
            .checked_add(c as u64)?
            .checked_mul(self.unit)?
            .checked_add(cb % self.unit)
    }

    /// How many blocks child `c` keeps when the file has `n` blocks.
    fn child_len(&self, c: usize, n: u64) -> u64 {
        let (units, rem) = (n / self.unit, n % self.unit);
        let w = self.width();
        let c = c as u64;
        let full = units / w + u64::from(c < units % w);
        full * self.unit + if c == units % w { rem } else { 0 }
    }

    /// The first block of child `c` that holds a file block at or after `b`.
    fn child_start(&self, c: usize, b: u64) -> u64 {
        let u = b / self.unit;
        let (row, turn, c) = (u / self.width(), u % self.width(), c as u64);
        if c == turn {
            row * self.unit + b % self.unit
        } else if c > turn {
            row * self.unit
        } else {
            (row + 1).saturating_mul(self.unit)
        }
    }

    /// Splits a request into one list of (child block, buffer piece) per child.
    fn split<S: Split>(&self, fblk: u64, n: u64, mut buf: S) -> Vec<(usize, Vec<(u64, S)>)> {
        let mut per: Vec<Vec<(u64, S)>> = (0..self.children.len()).map(|_| Vec::new()).collect();
        for (u, off, len) in super::chunks(fblk, n, self.unit) {
            let (piece, rest) = buf.split(len as usize * BLOCK_SIZE);
            buf = rest;
            let c = (u % self.width()) as usize;
            per[c].push(((u / self.width()) * self.unit + off, piece));
        }
        per.into_iter().enumerate().filter(|(_, v)| !v.is_empty()).collect()
    }

    fn parallel(&self, n: u64) -> bool {
        self.width() > 1 && (n >= 4 * self.unit || n >= PARALLEL_MIN_BLOCKS)
    }
}

impl Block for RoundRobin {
    fn parent_block(&self, child: usize, cblk: u64) -> Option<u64> {
        (child < self.children.len()).then(|| self.file_block(child, cblk)).flatten()
    }
    fn id(&self) -> u32 {
        self.id
    }
    fn kind(&self) -> &'static BlockType {
        self.kind
    }
    fn params(&self) -> Params {
        let mut p = Params::default();
        p.0.insert(self.unit_key.into(), Value::Num(self.unit * BLOCK_SIZE as u64));
        p.0.insert("width".into(), Value::Num(self.width()));
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
        if fblk / self.unit == (fblk + n - 1) / self.unit {
            // Within one unit: no splitting, no allocation.
            let (c, cb) = self.locate(fblk);
            return self.children[c].read(io, cb, buf);
        }
        let groups = self.split(fblk, n, buf);
        dispatch(groups, self.parallel(n), &|c, cb, piece: &mut [u8]| self.children[c].read(io, cb, piece))
    }

    fn write(&self, io: &IoCtx, fblk: u64, buf: &[u8]) -> Result<()> {
        let n = span(fblk, buf.len())?;
        if n == 0 {
            return Ok(());
        }
        if fblk / self.unit == (fblk + n - 1) / self.unit {
            let (c, cb) = self.locate(fblk);
            return self.children[c].write(io, cb, buf);
        }
        let groups = self.split(fblk, n, buf);
        dispatch(groups, self.parallel(n), &|c, cb, piece: &[u8]| self.children[c].write(io, cb, piece))
    }

    fn can_shift(&self, from: u64, delta: i64) -> bool {
        // Whole rows only (a row: one unit on every child), so each unit
        // keeps its child and every child moves by the same rows.
        let row = self.unit * self.width();
        from.is_multiple_of(row)
            && delta.unsigned_abs().is_multiple_of(row)
            && from.checked_add_signed(delta).is_some()
            && self.children.iter().all(|c| c.can_shift(from / self.width(), delta / self.width() as i64))
    }

    fn shift(&self, io: &IoCtx, from: u64, delta: i64) -> Result<()> {
        if !self.can_shift(from, delta) {
            return Err(Error::NotSupported(format!(
                "{} node {}: ranges collapsed or inserted must be whole rows of {} bytes",
                self.kind.name,
                self.id,
                self.unit * self.width() * BLOCK_SIZE as u64
            )));
        }
        let (cf, cd) = (from / self.width(), delta / self.width() as i64);
        for c in &self.children {
            c.shift(io, cf, cd)?;
        }
        Ok(())
    }

    fn truncate(&self, io: &IoCtx, nblocks: u64) -> Result<()> {
        // Every child is truncated even if one fails, so they stay consistent.
        let mut res = Ok(());
        for (c, child) in self.children.iter().enumerate() {
            let r = child.truncate(io, self.child_len(c, nblocks));
            if res.is_ok() {
                res = r;
            }
        }
        res
    }

    fn map_range(&self, fblk: u64, n: u64, f: &mut dyn FnMut(u64, usize, u64, u64)) -> bool {
        let mut pos = fblk;
        for (u, off, len) in super::chunks(fblk, n, self.unit) {
            f(pos, (u % self.width()) as usize, (u / self.width()) * self.unit + off, len);
            pos += len;
        }
        true
    }

    /// Each child's pieces are scrubbed on a thread of their own (for
    /// large ranges), so a scrub keeps every device busy as a read does.
    fn scrub(&self, io: &IoCtx, s: &Scrub, fblk: u64, n: u64) -> Result<()> {
        if s.skips(self) {
            return Ok(());
        }
        let mut per: Vec<Vec<(u64, u64, u64)>> = (0..self.children.len()).map(|_| Vec::new()).collect();
        self.map_range(fblk, n, &mut |ff, c, cf, len| per[c].push((ff, cf, len)));
        let run = |c: usize, pieces: &[(u64, u64, u64)]| -> Result<()> {
            for &(ff, cf, len) in pieces {
                // The child reports lost ranges in its own block numbers; a
                // piece is contiguous in both, so they translate by offset.
                let sub = ScrubTally::default();
                self.children[c].scrub(io, &s.with_tally(&sub), cf, len)?;
                for (lf, ll) in s.tally.absorb(sub) {
                    s.tally.lost(ff + lf.saturating_sub(cf), ll);
                }
            }
            Ok(())
        };
        let busy: Vec<usize> = (0..per.len()).filter(|&c| !per[c].is_empty()).collect();
        if !self.parallel(n) || busy.len() < 2 {
            return busy.iter().try_for_each(|&c| run(c, &per[c]));
        }
        crate::helpers::scope(|t| {
            let (run, per) = (&run, &per);
            let hs: Vec<_> = busy.iter().map(|&c| t.spawn(move || run(c, &per[c]))).collect();
            let mut res = Ok(());
            for h in hs {
                let r = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                if res.is_ok() {
                    res = r;
                }
            }
            res
        })
    }

    fn next_data(&self, fblk: u64) -> Option<u64> {
        let found = self.children.iter().enumerate().filter_map(|(c, child)| {
            let cb = child.next_data(self.child_start(c, fblk))?;
            self.file_block(c, cb)
        });
        found.min()
    }

    fn capacity(&self) -> u64 {
        // The first file block whose child block is past that child's capacity.
        let limits = self.children.iter().enumerate().map(|(c, child)| match child.capacity() {
            u64::MAX => u64::MAX,
            cap => self.file_block(c, cap).unwrap_or(u64::MAX),
        });
        limits.min().unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Layout, Leftovers, NodeRecord, Scrub, ScrubTally, Spec};
    use super::*;
    use crate::device::{Device, DeviceHandle, DeviceState, MemDevice};
    use crate::pool::{Allocator, Storage};

    const BS: u64 = BLOCK_SIZE as u64;

    fn spec(kind: &str, key: &str, unit: u64, width: u32) -> Spec {
        let ext = |d| Spec { kind: "extent".into(), params: vec![], children: vec![], device: Some(d) };
        Spec {
            kind: kind.into(),
            params: vec![(key.into(), Value::Num(unit))],
            children: (0..width).map(ext).collect(),
            device: None,
        }
    }

    fn storage(n: u32) -> Storage {
        let devs: Vec<Arc<dyn Device>> =
            (0..n).map(|i| Arc::new(MemDevice::new(format!("mem:{i}"), 512 * BS)) as Arc<dyn Device>).collect();
        let allocs = devs.iter().map(|d| Allocator::new(1, d.size() / BS)).collect();
        Storage { devs: devs.into_iter().enumerate().map(|(i, d)| DeviceHandle::new(i as u32, d)).collect(), allocs }
    }

    #[test]
    fn map_range_agrees_with_placement() {
        for (kind, key, unit) in [("stripe", "unit", 3 * BS), ("regions", "size", 5 * BS)] {
            let l = Layout::build(&spec(kind, key, unit, 3)).unwrap();
            let rr = l.root();
            for (fblk, n) in [(0, 1), (1, 17), (7, 40), (14, 1)] {
                let mut next = fblk;
                let mut seen = Vec::new();
                assert!(rr.map_range(fblk, n, &mut |ff, c, cf, len| seen.push((ff, c, cf, len))));
                for (ff, c, cf, len) in seen {
                    assert_eq!(ff, next, "{kind}: pieces in file order without gaps");
                    next += len;
                    // Every block of the piece is where a write puts it.
                    for k in 0..len {
                        let mut probe = Vec::new();
                        rr.map_range(ff + k, 1, &mut |_, c2, cf2, _| probe.push((c2, cf2)));
                        assert_eq!(probe, vec![(c, cf + k)], "{kind}: block {}", ff + k);
                    }
                }
                assert_eq!(next, fblk + n, "{kind}: the pieces cover the range");
            }
        }
    }

    /// A repairing scrub of file blocks [0, n) of `l`.
    fn scrub(l: &Layout, io: &IoCtx, n: u64) -> ScrubTally {
        let tally = ScrubTally::default();
        let s = Scrub {
            repair: true,
            rebuild: &|_| false,
            resilver_only: false,
            tally: &tally,
            leftovers: &Leftovers::default(),
            verify: None,
        };
        l.root().scrub(io, &s, 0, n).unwrap();
        tally
    }

    #[test]
    fn scrub_reports_exactly_the_blocks_of_a_lost_child() {
        let st = storage(3);
        let l = Layout::build(&spec("stripe", "unit", 2 * BS, 3)).unwrap();
        let sink = |_: NodeRecord| {};
        let io =
            IoCtx { owner: 0, origin: crate::blocks::Origin::NONE, storage: &st, epoch: 1, sink: &sink, repair: true };
        l.root().write(&io, 0, &vec![7u8; 12 * BLOCK_SIZE]).unwrap();
        let tally = scrub(&l, &io, 12);
        assert_eq!(tally.checked.into_inner(), 12);
        assert!(tally.unrecoverable.into_inner().is_empty());

        st.devs[1].set_state(DeviceState::Missing);
        let tally = scrub(&l, &io, 12);
        let mut lost: Vec<u64> = tally.unrecoverable.into_inner().into_iter().flat_map(|(s, n)| s..s + n).collect();
        lost.sort_unstable();
        // Units 1 and 4 (blocks 2-3 and 8-9) are on child 1.
        assert_eq!(lost, vec![2, 3, 8, 9]);

        // A large range: the children are scrubbed on helper threads,
        // and lost ranges still come back in file blocks.
        let st = storage(3);
        let io =
            IoCtx { owner: 0, origin: crate::blocks::Origin::NONE, storage: &st, epoch: 1, sink: &sink, repair: true };
        let l = Layout::build(&spec("stripe", "unit", 8 * BS, 3)).unwrap();
        l.root().write(&io, 0, &vec![9u8; 600 * BLOCK_SIZE]).unwrap();
        st.devs[2].set_state(DeviceState::Missing);
        let tally = scrub(&l, &io, 600);
        assert_eq!(tally.checked.into_inner(), 600);
        let mut lost: Vec<u64> = tally.unrecoverable.into_inner().into_iter().flat_map(|(s, n)| s..s + n).collect();
        lost.sort_unstable();
        let want: Vec<u64> = (0..600).filter(|b| (b / 8) % 3 == 2).collect();
        assert_eq!(lost, want);
    }
}
