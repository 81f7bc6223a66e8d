//! The pool's permanent errors: files with data that no copy could supply,
//! as `zpool status -v` lists "permanent errors in the following files".
//!
//! Any read, scrub, device replacement or `fsck --data` that finds file
//! data it cannot read or verify on any copy records the file here, with
//! the byte ranges, what found it and when. An entry goes away when the
//! file is deleted, when its damaged ranges are all written again (or
//! truncated away), when a scrub reads the whole file clean, and when the
//! list is cleared (`hurricane status --clear-errors`).
//!
//! The list is kept in memory and written with the checkpoint, whole, to
//! the store's `errors` table whenever it changed (docs/FORMAT.md, "The
//! meta-data store"); the operations that record errors deliberately
//! (scrub, replacement, `fsck --data` with `--repair`, clearing) end with a
//! checkpoint, so what they found is durable when they return. An error a
//! plain read meets becomes durable with the next checkpoint. A change the
//! journal makes durable first (a deleted file) while the list still names
//! it is settled as the pool opens: entries of inodes that no longer exist
//! are dropped (inode numbers are never reused).
//!
//! A read that fails because a device is down (missing, faulted) is not
//! recorded: the device's state says so, and `status` counts the files it
//! took down as lost. A scrub or replacement records what it could not
//! rebuild whatever the cause.

use super::Fs;
use crate::codec::{Decoder, Encoder};
use crate::error::{Error, Result};
use crate::journal::Ino;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// What found an error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum ErrorSource {
    /// A read of the file.
    Read = 1,
    /// A scrub (or the resilver that finishes a replacement).
    #[default]
    Scrub = 2,
    /// A device replacement's copy or rebuild.
    Replace = 3,
    /// `fsck --data`.
    Fsck = 4,
}

impl ErrorSource {
    pub fn name(self) -> &'static str {
        match self {
            ErrorSource::Read => "read",
            ErrorSource::Scrub => "scrub",
            ErrorSource::Replace => "replace",
            ErrorSource::Fsck => "fsck",
        }
    }
    fn from_u8(v: u8) -> Option<ErrorSource> {
        Some(match v {
            1 => ErrorSource::Read,
            2 => ErrorSource::Scrub,
            3 => ErrorSource::Replace,
            4 => ErrorSource::Fsck,
            _ => return None,
        })
    }
}

impl std::fmt::Display for ErrorSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One file's permanent error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataError {
    pub ino: Ino,
    /// Damaged byte ranges (offset, length): sorted, disjoint, not empty.
    pub ranges: Vec<(u64, u64)>,
    /// What found it last.
    pub source: ErrorSource,
    /// When it was first and last found (ns since the Unix epoch).
    pub first: i64,
    pub last: i64,
    /// What was found (the error's text, at most [`DETAIL_MAX`] bytes).
    pub detail: String,
}

/// The longest detail kept with an entry.
pub const DETAIL_MAX: usize = 256;
/// The version byte of an entry's record.
const RECORD_VERSION: u8 = 1;

impl DataError {
    /// The record kept in the store's `errors` table (docs/FORMAT.md).
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        e.u8(RECORD_VERSION).u8(self.source as u8).i64(self.first).i64(self.last);
        e.u32(self.ranges.len() as u32);
        for &(o, l) in &self.ranges {
            e.u64(o).u64(l);
        }
        e.str(&self.detail);
        e.into_inner()
    }

    /// Strict: the version, a known source, ranges sorted, disjoint, not
    /// empty and inside 2^64, a detail of UTF-8 no longer than
    /// [`DETAIL_MAX`], nothing after.
    pub fn decode(ino: Ino, b: &[u8]) -> Result<DataError> {
        let mut d = Decoder::new(b, "permanent error record");
        let v = d.u8()?;
        if v != RECORD_VERSION {
            return Err(d.err(format!("record version {v} is not {RECORD_VERSION}")));
        }
        let s = d.u8()?;
        let source = ErrorSource::from_u8(s).ok_or_else(|| d.err(format!("unknown source {s}")))?;
        let first = d.i64()?;
        let last = d.i64()?;
        let n = d.count(16)?;
        let mut ranges = Vec::with_capacity(n);
        let mut end = 0u64;
        for i in 0..n {
            let (o, l) = (d.u64()?, d.u64()?);
            let e = o.checked_add(l).filter(|_| l > 0).ok_or_else(|| d.err(format!("bad range {o}+{l}")))?;
            if i > 0 && o <= end {
                return Err(d.err(format!("range {o}+{l} overlaps, touches or precedes the one before")));
            }
            end = e;
            ranges.push((o, l));
        }
        let detail = d.str()?.to_string();
        if detail.len() > DETAIL_MAX {
            return Err(d.err(format!("detail of {} bytes", detail.len())));
        }
        d.expect_end()?;
        if ranges.is_empty() {
            return Err(Error::corrupt("permanent error record", format!("inode {ino}: no damaged range")));
        }
        Ok(DataError { ino, ranges, source, first, last, detail })
    }
}

/// Sorted, merged (touching ranges joined), empty ones dropped.
fn normalise(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.retain(|r| r.1 > 0);
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (o, l) in v {
        let e = o.saturating_add(l);
        match out.last_mut() {
            Some(m) if m.0 + m.1 >= o => m.1 = m.1.max(e - m.0),
            _ => out.push((o, e - o)),
        }
    }
    out
}

/// `ranges` less [off, end).
fn subtract(ranges: &[(u64, u64)], off: u64, end: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for &(o, l) in ranges {
        let e = o + l;
        if e <= off || o >= end {
            out.push((o, l));
            continue;
        }
        if o < off {
            out.push((o, off - o));
        }
        if e > end {
            out.push((end, e - end));
        }
    }
    out
}

fn cut_detail(s: &str) -> String {
    if s.len() <= DETAIL_MAX {
        return s.to_string();
    }
    let mut n = DETAIL_MAX;
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    s[..n].to_string()
}

/// The list in memory (see the module notes).
#[derive(Default)]
pub(crate) struct ErrorList {
    by_ino: Mutex<BTreeMap<Ino, DataError>>,
    /// Entries held: a write or truncate of a pool with none looks no further.
    count: AtomicUsize,
    /// Changed since the last checkpoint took it.
    changed: AtomicBool,
}

impl ErrorList {
    fn set_count(&self, m: &BTreeMap<Ino, DataError>) {
        self.count.store(m.len(), Ordering::Release);
        self.changed.store(true, Ordering::Release);
    }

    fn is_empty(&self) -> bool {
        self.count.load(Ordering::Acquire) == 0
    }

    /// The list as the store holds it; a record that does not decode is
    /// dropped (and the table rewritten at the next checkpoint).
    pub(crate) fn load(&self, records: Vec<(Ino, Vec<u8>)>) {
        let mut m = self.by_ino.lock();
        let mut bad = false;
        for (ino, rec) in records {
            match DataError::decode(ino, &rec) {
                Ok(e) => {
                    m.insert(ino, e);
                }
                Err(e) => {
                    tracing::warn!("permanent error list: inode {ino}: {e}; entry dropped");
                    bad = true;
                }
            }
        }
        self.count.store(m.len(), Ordering::Release);
        self.changed.store(bad, Ordering::Release);
    }

    /// Records damage to `ino` over `ranges` (bytes). `replace`: the
    /// caller checked the whole file, so these are all its damaged ranges.
    pub(crate) fn note(&self, ino: Ino, ranges: &[(u64, u64)], source: ErrorSource, detail: &str, replace: bool) {
        let ranges = normalise(ranges.to_vec());
        if ranges.is_empty() {
            return;
        }
        let now = super::now();
        let mut m = self.by_ino.lock();
        match m.get_mut(&ino) {
            Some(e) => {
                e.ranges = if replace { ranges } else { normalise(e.ranges.iter().chain(&ranges).copied().collect()) };
                e.source = source;
                e.last = now;
                e.detail = cut_detail(detail);
            }
            None => {
                m.insert(ino, DataError { ino, ranges, source, first: now, last: now, detail: cut_detail(detail) });
            }
        }
        self.set_count(&m);
    }

    /// `ino` is gone, or was found clean: its entry goes.
    pub(crate) fn forget(&self, ino: Ino) -> bool {
        if self.is_empty() {
            return false;
        }
        let mut m = self.by_ino.lock();
        let had = m.remove(&ino).is_some();
        if had {
            self.set_count(&m);
        }
        had
    }

    /// Bytes [off, off+len) of `ino` were written again: they are no
    /// longer damaged.
    pub(crate) fn written(&self, ino: Ino, off: u64, len: u64) {
        if self.is_empty() || len == 0 {
            return;
        }
        self.cut(ino, off, off.saturating_add(len));
    }

    /// `ino` was truncated to `size` bytes: what lay past it is gone.
    pub(crate) fn truncated(&self, ino: Ino, size: u64) {
        if self.is_empty() {
            return;
        }
        self.cut(ino, size, u64::MAX);
    }

    fn cut(&self, ino: Ino, off: u64, end: u64) {
        let mut m = self.by_ino.lock();
        let Some(e) = m.get_mut(&ino) else { return };
        let left = subtract(&e.ranges, off, end);
        if left == e.ranges {
            return;
        }
        if left.is_empty() {
            m.remove(&ino);
            tracing::info!(ino, "permanent error cleared: the damaged data was written again");
        } else {
            e.ranges = left;
        }
        self.set_count(&m);
    }

    /// Drops entries of inodes for which `exists` says no.
    pub(crate) fn retain(&self, exists: impl Fn(Ino) -> bool) {
        let mut m = self.by_ino.lock();
        let before = m.len();
        m.retain(|&ino, _| exists(ino));
        if m.len() != before {
            self.set_count(&m);
        }
    }

    /// Empties the list; returns how many entries it held.
    pub(crate) fn clear(&self) -> usize {
        let mut m = self.by_ino.lock();
        let n = m.len();
        m.clear();
        self.set_count(&m);
        n
    }

    pub(crate) fn entries(&self) -> Vec<DataError> {
        self.by_ino.lock().values().cloned().collect()
    }

    /// The whole list for the checkpoint's `errors` table when it changed
    /// since the last one took it.
    pub(crate) fn take_changed(&self) -> Option<Vec<(Ino, Vec<u8>)>> {
        if !self.changed.swap(false, Ordering::AcqRel) {
            return None;
        }
        Some(self.by_ino.lock().values().map(|e| (e.ino, e.encode())).collect())
    }

    /// A checkpoint that took the list failed: the next one writes it.
    pub(crate) fn unwritten(&self) {
        self.changed.store(true, Ordering::Release);
    }
}

/// Whether a failed read of file data is one for the list: the data was
/// read and found wrong, or a device failed to read it. A device that is
/// down (its requests refused at once: a `Device` error) is not: its state
/// says so.
pub(crate) fn is_data_error(e: &Error) -> bool {
    matches!(e, Error::Checksum(_) | Error::Io { .. } | Error::RawIo(_) | Error::Corrupt { .. })
}

impl Fs {
    /// The pool's permanent errors (see the module notes), by inode.
    pub fn data_errors(&self) -> Vec<DataError> {
        self.inner.errors.entries()
    }

    /// Records damage to `ino` over `ranges` (bytes) found by `source`.
    /// `whole`: the caller checked the whole file, so these ranges replace
    /// those recorded before.
    pub fn note_data_error(&self, ino: Ino, ranges: &[(u64, u64)], source: ErrorSource, detail: &str, whole: bool) {
        tracing::error!(ino, ?ranges, %source, "permanent error: {detail}");
        self.inner.errors.note(ino, ranges, source, detail, whole);
    }

    /// Empties the list of permanent errors and makes that durable;
    /// returns how many files it named.
    pub fn clear_data_errors(&self) -> Result<usize> {
        self.check_writable()?;
        let n = self.inner.errors.clear();
        self.checkpoint()?;
        tracing::info!("permanent error list cleared ({n} files)");
        Ok(n)
    }

    /// Makes what the list holds now durable (a checkpoint) when it
    /// changed and the pool is writable; a failure is logged, not returned
    /// (the next checkpoint writes it).
    pub(crate) fn persist_data_errors(&self) {
        if self.inner.read_only || !self.inner.errors.changed.load(Ordering::Acquire) {
            return;
        }
        if let Err(e) = self.checkpoint() {
            tracing::warn!("permanent error list not written yet: {e}");
        }
    }

    /// After a failed read of `len` bytes at `off` of `ino`: finds the
    /// blocks that fail on their own (up to [`PROBE_MAX_BLOCKS`]; a longer
    /// read is recorded whole) and records them.
    pub(crate) fn note_read_error(&self, ino: Ino, lay: &crate::blocks::Layout, off: u64, len: u64, e: &Error) {
        if !is_data_error(e) || len == 0 {
            return;
        }
        const BS: u64 = crate::device::BLOCK_SIZE as u64;
        let (first, last) = (off / BS, (off + len).div_ceil(BS));
        let mut bad = Vec::new();
        if last - first <= PROBE_MAX_BLOCKS {
            let io = self.reader_io(ino);
            let mut b = vec![0u8; BS as usize];
            for f in first..last {
                // Counted against the devices once, by the read that failed.
                if let Err(e) = crate::blocks::probing_checksums(|| lay.root().read(&io, f, &mut b)) {
                    if is_data_error(&e) {
                        bad.push((f * BS, BS));
                    }
                }
            }
        } else {
            bad.push((first * BS, (last - first) * BS));
        }
        if !bad.is_empty() {
            self.note_data_error(ino, &bad, ErrorSource::Read, &e.to_string(), false);
        }
    }
}

/// The longest failed read probed block by block to find its bad blocks.
pub const PROBE_MAX_BLOCKS: u64 = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ranges: Vec<(u64, u64)>) -> DataError {
        DataError { ino: 7, ranges, source: ErrorSource::Scrub, first: 1, last: 2, detail: "checksum".into() }
    }

    #[test]
    fn records_round_trip_and_refuse_damage() {
        let e = entry(vec![(0, 4096), (8192, 100)]);
        assert_eq!(DataError::decode(7, &e.encode()).unwrap(), e);
        let bad = |b: Vec<u8>, what: &str| {
            assert!(DataError::decode(7, &b).is_err(), "{what}: accepted");
        };
        let good = e.encode();
        let mut t = good.clone();
        t.push(0);
        bad(t, "trailing byte");
        bad(good[..good.len() - 1].to_vec(), "short");
        let mut t = good.clone();
        t[0] = 9;
        bad(t, "version");
        let mut t = good.clone();
        t[1] = 0;
        bad(t, "source");
        bad(entry(vec![]).encode(), "no range");
        bad(entry(vec![(0, 0)]).encode(), "empty range");
        bad(entry(vec![(8192, 1), (0, 1)]).encode(), "unordered");
        bad(entry(vec![(0, 10), (10, 1)]).encode(), "touching");
        bad(entry(vec![(u64::MAX, 2)]).encode(), "past 2^64");
        let mut long = entry(vec![(0, 1)]);
        long.detail = "x".repeat(DETAIL_MAX + 1);
        bad(long.encode(), "long detail");
    }

    #[test]
    fn writes_and_truncates_clear_what_they_cover() {
        let l = ErrorList::default();
        l.note(5, &[(4096, 4096), (0, 4096), (40960, 4096)], ErrorSource::Read, "x", false);
        assert_eq!(l.entries()[0].ranges, vec![(0, 8192), (40960, 4096)]);
        l.written(5, 0, 4096);
        assert_eq!(l.entries()[0].ranges, vec![(4096, 4096), (40960, 4096)]);
        l.truncated(5, 40960);
        assert_eq!(l.entries()[0].ranges, vec![(4096, 4096)]);
        l.written(5, 4000, 5000);
        assert!(l.entries().is_empty());
        l.note(6, &[(0, 1)], ErrorSource::Fsck, "x", false);
        assert!(l.take_changed().is_some());
        assert!(l.take_changed().is_none());
        assert!(l.forget(6));
        assert_eq!(l.take_changed(), Some(vec![]));
        // A whole-file check replaces what was recorded.
        l.note(8, &[(0, 10)], ErrorSource::Read, "x", false);
        l.note(8, &[(100, 10)], ErrorSource::Scrub, "y", true);
        assert_eq!(l.entries()[0].ranges, vec![(100, 10)]);
        assert_eq!(l.entries()[0].source, ErrorSource::Scrub);
    }
}
