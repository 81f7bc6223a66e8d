//! Helpers shared by every block type: request checks, the argument and
//! state checks the framework runs before a constructor, block-range
//! arithmetic, and the split-and-dispatch of a request over children.

use super::ParamKind;
use super::{BlockType, BuildArgs, Value, BLOCK_SIZE};
use crate::error::{Error, Result};

/// Splits a run of file blocks [fblk, fblk+n) into pieces that each stay in
/// one `unit`-sized chunk: yields (chunk index, offset in chunk, length).
pub fn chunks(fblk: u64, n: u64, unit: u64) -> impl Iterator<Item = (u64, u64, u64)> {
    let mut pos = fblk;
    let end = fblk + n;
    std::iter::from_fn(move || {
        if pos >= end {
            return None;
        }
        let idx = pos / unit;
        let off = pos % unit;
        let len = (unit - off).min(end - pos);
        pos += len;
        Some((idx, off, len))
    })
}

thread_local! {
    static PROBING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the checksum mismatches this thread's reads find reported
/// to the caller alone: not counted against the devices, not logged as
/// errors. Recovery reads back data a crash may have cut off this way (a
/// journal record written in verified mode, `Fs::open`): a mismatch there
/// is an unacknowledged write that never reached the disk, not damage.
pub fn probing<R>(f: impl FnOnce() -> R) -> R {
    crate::base::with_flag(&PROBING, f)
}

/// Whether this thread's reads run under [`probing`].
pub(super) fn probing_now() -> bool {
    PROBING.with(|p| p.get())
}

/// File-block ranges held exclusively: a holder waits until no one holds a
/// range overlapping its own. Types that read, change and write back a
/// range in several steps (checksum, compress) hold it across them.
#[derive(Default)]
pub(super) struct RangeLock {
    ranges: parking_lot::Mutex<Vec<(u64, u64)>>,
    cv: parking_lot::Condvar,
}

/// A range held in a [`RangeLock`], let go when dropped.
pub(super) struct Held<'a> {
    lock: &'a RangeLock,
    range: (u64, u64),
}

impl RangeLock {
    /// Waits until no one holds a range overlapping [s, e), then holds it.
    pub(super) fn hold(&self, s: u64, e: u64) -> Held<'_> {
        let mut r = self.ranges.lock();
        while r.iter().any(|&(a, b)| a < e && s < b) {
            self.cv.wait(&mut r);
        }
        r.push((s, e));
        Held { lock: self, range: (s, e) }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut r = self.lock.ranges.lock();
        if let Some(i) = r.iter().position(|&x| x == self.range) {
            r.swap_remove(i);
        }
        self.lock.cv.notify_all();
    }
}

pub(crate) fn nblocks(buf_len: usize) -> u64 {
    (buf_len / BLOCK_SIZE) as u64
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

/// Groups a request's pieces by child for [`dispatch`]: `pieces` are (child
/// block, child, blocks) in request order, a `None` child a hole whose part
/// of `buf` goes nowhere. Each child gets its pieces of `buf` in order.
pub(super) fn group_pieces<S: Split>(
    pieces: &[(u64, Option<usize>, u64)],
    children: usize,
    mut buf: S,
) -> Vec<(usize, Vec<(u64, S)>)> {
    let mut per: Vec<Vec<(u64, S)>> = (0..children).map(|_| Vec::new()).collect();
    for &(cb, c, len) in pieces {
        let (piece, rest) = buf.split(len as usize * BLOCK_SIZE);
        buf = rest;
        if let Some(v) = c.and_then(|c| per.get_mut(c)) {
            v.push((cb, piece));
        }
    }
    per.into_iter().enumerate().filter(|(_, v)| !v.is_empty()).collect()
}

/// Runs each child's pieces in order. With `parallel`, different children
/// run on helper threads (`helpers::scope`) so their devices work at the
/// same time. Returns the first error, after every piece has been tried.
pub(super) fn dispatch<S: Send>(
    groups: Vec<(usize, Vec<(u64, S)>)>,
    parallel: bool,
    f: &(dyn Fn(usize, u64, S) -> Result<()> + Sync),
) -> Result<()> {
    // A piece that timed out (a device over the network that does not
    // answer) fails the request; the pieces after it, which would each wait
    // out the same timeout, are not tried.
    let run = |(c, pieces): (usize, Vec<(u64, S)>)| -> Result<()> {
        let mut res = Ok(());
        for (cb, piece) in pieces {
            let r = f(c, cb, piece);
            if res.is_ok() {
                res = r;
            }
            if res.as_ref().is_err_and(Error::is_timed_out) {
                break;
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
            if res.as_ref().is_err_and(Error::is_timed_out) {
                break;
            }
        }
        return res;
    }
    crate::helpers::scope(|s| {
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

/// Number of blocks in a request, refusing partial blocks and block numbers
/// past 2^64.
pub fn span(fblk: u64, len: usize) -> Result<u64> {
    if !len.is_multiple_of(BLOCK_SIZE) {
        return Err(Error::Invalid(format!("request of {len} bytes is not whole {BLOCK_SIZE}-byte blocks")));
    }
    let n = nblocks(len);
    fblk.checked_add(n).ok_or_else(|| Error::TooBig(format!("block {fblk} + {n}")))?;
    Ok(n)
}

/// The checks the framework makes on every node before its type's
/// constructor runs: parameters known, of the right kind and in range
/// (decoded layouts bypass the parser, so this is the last line), the width
/// parameter matching the children, the child count in bounds, and a device
/// exactly when the type is per-device.
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
            // The type checks the syntax; a decoded word must still be one a
            // spec could hold.
            (ParamKind::Text { .. }, Value::Word(w)) => {
                !w.is_empty() && w.len() <= 4096 && w.chars().all(|c| !c.is_whitespace() && !"()[],@=".contains(c))
            }
            _ => false,
        };
        if !ok {
            let shown = match v {
                Value::Num(n) => super::registry::show(p, *n),
                Value::Word(w) => w.clone(),
            };
            let want = match p.kind {
                ParamKind::Choice(words) => format!("one of {}", words.join(", ")),
                ParamKind::Text { syntax, .. } => format!("of the form {syntax}"),
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

/// Checks a decoded node's state framing against its type and strips the
/// version byte: a type without state must have none, and a stateful type's
/// state is empty (a new node) or starts with the type's state version.
pub(super) fn check_state<'s>(t: &BlockType, id: u32, state: &'s [u8]) -> Result<Option<&'s [u8]>> {
    let corrupt = |what: String| Error::corrupt("layout", format!("{} node {id}: {what}", t.name));
    match (t.state_version, state.split_first()) {
        (_, None) => Ok(None),
        (None, Some(_)) => Err(corrupt(format!("{} bytes of state for a type that keeps none", state.len()))),
        (Some(want), Some((&v, rest))) if v == want => Ok(Some(rest)),
        (Some(want), Some((&v, _))) => Err(corrupt(format!("state version {v}, this build reads version {want}"))),
    }
}

/// Scrub through `map_range` where the node offers it (each piece is
/// scrubbed by its child, so every copy below is visited), else by reading.
pub(super) fn scrub_default<B: super::Block + ?Sized>(
    b: &B,
    io: &super::IoCtx,
    s: &super::Scrub,
    fblk: u64,
    n: u64,
) -> Result<()> {
    if s.skips(b) {
        return Ok(());
    }
    let mut pieces = Vec::new();
    if !b.children().is_empty() && b.map_range(fblk, n, &mut |ff, c, cf, len| pieces.push((ff, c, cf, len))) {
        for (ff, c, cf, len) in pieces {
            let child = b.children().get(c).ok_or_else(|| Error::Layout(format!("map_range named child {c}")))?;
            // The child reports lost ranges in its own block numbers; each
            // piece is contiguous in both, so they translate back by offset.
            let sub = super::ScrubTally::default();
            child.scrub(io, &s.with_tally(&sub), cf, len)?;
            for (lf, ll) in s.tally.absorb(sub) {
                s.tally.lost(ff + lf.saturating_sub(cf), ll);
            }
        }
        return Ok(());
    }
    scrub_by_read(b, io, s, fblk, n)
}

/// Scrub by reading: every data-holding run of [fblk, fblk+n) is read
/// through the node (which verifies checksums and heals where it can); a
/// piece that fails is retried block by block and what still fails is
/// reported unrecoverable.
pub fn scrub_by_read<B: super::Block + ?Sized>(
    b: &B,
    io: &super::IoCtx,
    s: &super::Scrub,
    fblk: u64,
    n: u64,
) -> Result<()> {
    const STEP: u64 = 256; // 1 MiB
    let end = fblk.saturating_add(n);
    let mut pos = fblk;
    let mut buf = vec![0u8; STEP as usize * BLOCK_SIZE];
    while pos < end {
        // Holes hold nothing to verify.
        match b.next_data(pos) {
            Some(d) if d < end => pos = pos.max(d),
            _ => break,
        }
        let len = STEP.min(end - pos);
        let piece = &mut buf[..len as usize * BLOCK_SIZE];
        if b.read(io, pos, piece).is_err() {
            for k in pos..pos + len {
                if b.read(io, k, &mut piece[..BLOCK_SIZE]).is_err() {
                    s.tally.lost(k, 1);
                }
            }
        }
        s.tally.checked(len);
        pos += len;
    }
    Ok(())
}

/// Every device under `b` (its own and its descendants'), sorted, each once:
/// what a composite names in errors and weighs for load.
/// Calls `f(device, blocks)` for the devices that hold blocks [fblk,
/// fblk+n) of `b`: exactly where the composition says (down through
/// [`super::Block::map_range`] to the leaf), otherwise every device under
/// the node where the composition stops saying (each of a replicate's
/// copies, a parity stripe's members). What a checksum error or a repair
/// is counted against.
pub fn each_device_of(b: &std::sync::Arc<dyn super::Block>, fblk: u64, n: u64, f: &mut dyn FnMut(u32, u64)) {
    if let Some(d) = b.device() {
        f(d, n);
        return;
    }
    let mut pieces = Vec::new();
    if b.map_range(fblk, n, &mut |_, c, cf, len| pieces.push((c, cf, len))) {
        for (c, cf, len) in pieces {
            if let Some(child) = b.children().get(c) {
                each_device_of(child, cf, len, f);
            }
        }
        return;
    }
    for c in b.children() {
        each_device_of(c, fblk, n, f);
    }
}

pub(super) fn devices_under(b: &std::sync::Arc<dyn super::Block>) -> Vec<u32> {
    fn walk(b: &std::sync::Arc<dyn super::Block>, out: &mut Vec<u32>) {
        out.extend(b.device());
        for c in b.children() {
            walk(c, out);
        }
    }
    let mut out = Vec::new();
    walk(b, &mut out);
    out.sort_unstable();
    out.dedup();
    out
}

/// Scrub steps in flight at once per node: each reads its own range, so a
/// scrub keeps several requests queued on every device (as `btrfs scrub`
/// does) instead of waiting for one range before asking for the next.
pub(super) const SCRUB_WORKERS: usize = 4;

/// Runs `f` on every step, up to `workers` at once (the calling thread
/// among them), steps started in order. Stops starting steps after the
/// first error and returns it.
pub(super) fn run_steps<T: Sync>(steps: &[T], workers: usize, f: &(dyn Fn(&T) -> Result<()> + Sync)) -> Result<()> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let workers = workers.clamp(1, steps.len().max(1));
    if workers == 1 {
        return steps.iter().try_for_each(f);
    }
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let first_err = parking_lot::Mutex::new(None);
    let work = || loop {
        if failed.load(Ordering::Relaxed) {
            return;
        }
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(step) = steps.get(i) else { return };
        if let Err(e) = f(step) {
            failed.store(true, Ordering::Relaxed);
            first_err.lock().get_or_insert(e);
        }
    };
    crate::helpers::scope(|s| {
        let hs: Vec<_> = (1..workers).map(|_| s.spawn(work)).collect();
        work();
        for h in hs {
            if let Err(p) = h.join() {
                std::panic::resume_unwind(p);
            }
        }
    });
    first_err.into_inner().map_or(Ok(()), Err)
}

/// [`super::Block::write_zeroes`] for types with nothing better: zeros
/// written through the type's own `write`, a bounded buffer at a time.
pub(super) fn write_zeroes_by_write<B: super::Block + ?Sized>(
    b: &B,
    io: &super::IoCtx,
    fblk: u64,
    n: u64,
) -> Result<()> {
    const CHUNK: u64 = 256;
    let zeros = vec![0u8; CHUNK.min(n) as usize * super::BLOCK_SIZE];
    let mut f = fblk;
    while f < fblk + n {
        let k = CHUNK.min(fblk + n - f);
        b.write(io, f, &zeros[..k as usize * super::BLOCK_SIZE])?;
        f += k;
    }
    Ok(())
}
