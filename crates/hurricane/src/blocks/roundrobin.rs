//! Round-robin geometry and request splitting, shared by `stripe` (small
//! units) and `regions` (one large region per child per turn).

use super::common::{dispatch, span, Split};
use super::{Block, BlockType, BuildArgs, IoCtx, Params, Value, BLOCK_SIZE};
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
