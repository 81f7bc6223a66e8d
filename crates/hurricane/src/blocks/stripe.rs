//! `stripe`: round robin over the children by `unit` (RAID-0), so one large
//! request keeps every device busy.
//!
//! The geometry and the split-and-dispatch code live here in [`RoundRobin`],
//! which `regions` reuses with one large region per turn. The argument checks
//! every type's constructor needs are at the end of this file.

use super::{nblocks, Block, BlockType, BuildArgs, IoCtx, ParamKind, ParamSpec, Params, BLOCK_SIZE};
use crate::error::{Error, Result};
use crate::layout::Value;
use std::sync::Arc;

pub static TYPE: BlockType = BlockType {
    name: "stripe",
    doc: "Round robin over the children in units of `unit` bytes (RAID-0): large requests use every device at once.",
    params: &[
        ParamSpec {
            key: "unit",
            kind: ParamKind::Size,
            default: Some("1M"),
            min: BLOCK_SIZE as u64,
            max: 1 << 40,
            doc: "bytes stored on one child before moving to the next (a multiple of 4K)",
        },
        ParamSpec { key: "width", kind: ParamKind::Int, default: None, min: 1, max: 256, doc: "number of children" },
    ],
    per_device: false,
    min_children: 1,
    max_children: 256,
    distinct_devices: true,
    width_param: Some("width"),
    build,
};

fn build(a: BuildArgs) -> Result<Arc<dyn Block>> {
    RoundRobin::build(&TYPE, "unit", a)
}

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
        check_args(kind, &a)?;
        no_state(kind, &a)?;
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

/// A buffer that can be cut in two: `&[u8]` for writes, `&mut [u8]` for reads,
/// so one splitting routine serves both without copying.
pub(super) trait Split: Sized + Send {
    fn split(self, at: usize) -> (Self, Self);
}

impl Split for &[u8] {
    fn split(self, at: usize) -> (Self, Self) {
        self.split_at(at)
    }
}

impl Split for &mut [u8] {
    fn split(self, at: usize) -> (Self, Self) {
        self.split_at_mut(at)
    }
}

/// Runs each child's pieces in order. With `parallel`, different children run
/// on their own threads so their devices work at the same time. Returns the
/// first error, after every piece has been tried.
pub(super) fn dispatch<S: Send>(
    groups: Vec<(usize, Vec<(u64, S)>)>,
    parallel: bool,
    f: &(dyn Fn(usize, u64, S) -> Result<()> + Sync),
) -> Result<()> {
    let run = |(c, pieces): (usize, Vec<(u64, S)>)| -> Result<()> {
        let mut res = Ok(());
        for (cb, piece) in pieces {
            let r = f(c, cb, piece);
            if res.is_ok() {
                res = r;
            }
        }
        res
    };
    if !parallel || groups.len() < 2 {
        let mut res = Ok(());
        for g in groups {
            let r = run(g);
            if res.is_ok() {
                res = r;
            }
        }
        return res;
    }
    std::thread::scope(|s| {
        let run = &run;
        let mut groups = groups.into_iter();
        let first = groups.next();
        let handles: Vec<_> = groups.map(|g| s.spawn(move || run(g))).collect();
        // The calling thread takes one share instead of idling.
        let mut res = first.map_or(Ok(()), run);
        for h in handles {
            let r = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            if res.is_ok() {
                res = r;
            }
        }
        res
    })
}

// ---- Checks shared by every type in this directory ----

/// Number of blocks in a request, refusing partial blocks and block numbers
/// past 2^64.
pub(super) fn span(fblk: u64, len: usize) -> Result<u64> {
    if !len.is_multiple_of(BLOCK_SIZE) {
        return Err(Error::Invalid(format!("request of {len} bytes is not whole {BLOCK_SIZE}-byte blocks")));
    }
    let n = nblocks(len);
    fblk.checked_add(n).ok_or_else(|| Error::TooBig(format!("block {fblk} + {n}")))?;
    Ok(n)
}

/// The checks every constructor makes: parameters known, of the right kind
/// and in range (decoded layouts bypass the parser, so this is the last line),
/// the width parameter matching the children, the child count in bounds, and
/// a device exactly when the type is per-device.
pub(super) fn check_args(t: &BlockType, a: &BuildArgs) -> Result<()> {
    let name = t.name;
    for (k, v) in &a.params.0 {
        let p = t
            .params
            .iter()
            .find(|p| p.key == k)
            .ok_or_else(|| Error::Layout(format!("{name}: unknown parameter {k:?}")))?;
        let ok = match (p.kind, v) {
            (ParamKind::Size | ParamKind::Int, Value::Num(n)) => (p.min..=p.max).contains(n),
            (ParamKind::Choice(words), Value::Word(w)) => words.contains(&w.as_str()),
            _ => false,
        };
        if !ok {
            let shown = match v {
                Value::Num(n) => super::registry::show(p, *n),
                Value::Word(w) => w.clone(),
            };
            let want = match p.kind {
                ParamKind::Choice(words) => format!("one of {}", words.join(", ")),
                _ => format!("in [{}, {}]", super::registry::show(p, p.min), super::registry::show(p, p.max)),
            };
            return Err(Error::Layout(format!("{name}: {k}={shown} must be {want}")));
        }
    }
    for p in t.params {
        if !a.params.0.contains_key(p.key) && Some(p.key) != t.width_param {
            return Err(Error::Layout(format!("{name}: missing parameter {}", p.key)));
        }
    }
    let n = a.children.len();
    if n < t.min_children || n > t.max_children {
        let want = if t.max_children == 0 {
            "no children".to_string()
        } else {
            format!("{} to {} children", t.min_children, t.max_children)
        };
        return Err(Error::Layout(format!("{name} takes {want}, got {n}")));
    }
    if let Some(key) = t.width_param {
        if let Some(Value::Num(w)) = a.params.0.get(key) {
            if *w != n as u64 {
                return Err(Error::Layout(format!("{name}: {key}={w} but {n} children given")));
            }
        }
    }
    match (t.per_device, a.device) {
        (true, None) => Err(Error::Layout(format!("{name} needs a device (write {name}@N)"))),
        (false, Some(d)) => Err(Error::Layout(format!("{name} takes no device (got @{d})"))),
        _ => Ok(()),
    }
}

/// Composites keep no state of their own: any stored bytes are corrupt.
pub(super) fn no_state(t: &BlockType, a: &BuildArgs) -> Result<()> {
    match a.state {
        Some(s) if !s.is_empty() => {
            Err(Error::corrupt("layout", format!("{} node {} has {} bytes of state", t.name, a.id, s.len())))
        }
        _ => Ok(()),
    }
}
