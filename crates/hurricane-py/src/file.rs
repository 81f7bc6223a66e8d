//! `RawFile`: an open instance (cursor, prefetch, locks) of one file, the
//! engine side of `hurricane.File`.

use crate::buffer::{Held, Span};
use crate::error::{closed, OrRaise};
use hurricane::open::{LockMode, OpenFile, OpenSpec, RangeGuard};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::io::SeekFrom;
use std::sync::{Mutex, RwLock, RwLockReadGuard};

/// An open file instance. Reads and writes release the GIL; the cursor is
/// the instance's (shared by all threads) or each thread's own
/// (``cursor=per-thread``), as the spec says.
#[pyclass(frozen, module = "hurricane._native")]
pub struct RawFile {
    /// `None` once closed. Calls hold it shared while they run, so `close`
    /// waits for them.
    f: RwLock<Option<OpenFile>>,
    readable: bool,
    writable: bool,
}

type Guard<'a> = RwLockReadGuard<'a, Option<OpenFile>>;

impl RawFile {
    pub fn new(f: OpenFile, readable: bool, writable: bool) -> RawFile {
        RawFile { f: RwLock::new(Some(f)), readable, writable }
    }

    fn open(&self) -> PyResult<Guard<'_>> {
        let g = self.f.read().map_err(|_| PyOSError::new_err("file state poisoned"))?;
        if g.is_none() {
            return Err(closed("file"));
        }
        Ok(g)
    }

    /// The engine's inode number, for transactions.
    pub fn ino(&self) -> PyResult<u64> {
        let g = self.open()?;
        Ok(inner(&g).ino())
    }

    /// Runs `io` on the instance over `buffer`'s bytes with the GIL
    /// released: a read (`reading`: the file open for reading, the buffer
    /// writable) or a write. The buffer is held until `io` has returned.
    fn with_buffer<R: Send>(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        reading: bool,
        io: impl FnOnce(&OpenFile, Span) -> hurricane::Result<R> + Send,
    ) -> PyResult<R> {
        self.check(!reading)?;
        let held = Held::get(buffer, reading)?;
        let span = held.span();
        let g = self.open()?;
        let f = inner(&g);
        let r = py.detach(|| io(f, span)).or_raise();
        drop(held);
        r
    }

    pub(crate) fn check(&self, write: bool) -> PyResult<()> {
        let (ok, what) = if write { (self.writable, "writing") } else { (self.readable, "reading") };
        if ok {
            Ok(())
        } else {
            Err(unsupported(&format!("File not open for {what}")))
        }
    }
}

#[allow(clippy::expect_used)]
fn inner<'a>(g: &'a Guard<'_>) -> &'a OpenFile {
    // `RawFile::open` returned this guard only after seeing `Some`.
    g.as_ref().expect("checked open")
}

/// `io.UnsupportedOperation`, as Python's own files raise for a read of a
/// write-only file.
fn unsupported(msg: &str) -> PyErr {
    Python::attach(|py| match py.import("io").and_then(|io| io.getattr("UnsupportedOperation")) {
        Ok(cls) => PyErr::from_value(cls.call1((msg,)).unwrap_or(cls)),
        Err(e) => e,
    })
}

#[pymethods]
impl RawFile {
    /// Reads into ``buffer`` (any writable bytes-like object: bytearray,
    /// memoryview, NumPy array) at the cursor, without copies; returns the
    /// count (0 at the end of the file).
    fn readinto(&self, py: Python<'_>, buffer: &Bound<'_, PyAny>) -> PyResult<usize> {
        // SAFETY: `with_buffer` holds the buffer (writable) until `io` returns.
        self.with_buffer(py, buffer, true, |f, span| f.read(unsafe { span.bytes_mut() }))
    }

    /// Reads into ``buffer`` at ``offset`` without moving the cursor.
    fn readinto_at(&self, py: Python<'_>, buffer: &Bound<'_, PyAny>, offset: u64) -> PyResult<usize> {
        // SAFETY: `with_buffer` holds the buffer (writable) until `io` returns.
        self.with_buffer(py, buffer, true, |f, span| f.read_at(unsafe { span.bytes_mut() }, offset))
    }

    /// Up to ``size`` bytes at the cursor (to the end of the file when
    /// ``size`` is negative).
    #[pyo3(signature = (size=-1))]
    fn read<'py>(&self, py: Python<'py>, size: i64) -> PyResult<Bound<'py, PyBytes>> {
        self.check(false)?;
        let g = self.open()?;
        let f = inner(&g);
        let data = py
            .detach(|| {
                // Never more than is left: a huge size allocates nothing extra.
                let left = f.len()?.saturating_sub(f.position());
                let want = u64::try_from(size).map_or(left, |n| n.min(left));
                let mut v = vec![0u8; usize::try_from(want).unwrap_or(usize::MAX).min(1 << 31)];
                let n = f.read(&mut v)?;
                v.truncate(n);
                Ok::<_, hurricane::Error>(v)
            })
            .or_raise()?;
        Ok(PyBytes::new(py, &data))
    }

    /// Up to ``size`` bytes at ``offset`` without moving the cursor.
    fn read_at<'py>(&self, py: Python<'py>, size: usize, offset: u64) -> PyResult<Bound<'py, PyBytes>> {
        self.check(false)?;
        let g = self.open()?;
        let f = inner(&g);
        let data = py
            .detach(|| {
                let left = f.len()?.saturating_sub(offset);
                let want = (size as u64).min(left).min(1 << 31) as usize;
                let mut v = vec![0u8; want];
                let n = f.read_at(&mut v, offset)?;
                v.truncate(n);
                Ok::<_, hurricane::Error>(v)
            })
            .or_raise()?;
        Ok(PyBytes::new(py, &data))
    }

    /// Writes ``data`` (any bytes-like object) at the cursor (at the end in
    /// append mode); returns the count.
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<usize> {
        // SAFETY: `with_buffer` holds the buffer until `io` returns.
        self.with_buffer(py, data, false, |f, span| f.write(unsafe { span.bytes() }))
    }

    /// Writes ``data`` at ``offset`` without moving the cursor.
    fn write_at(&self, py: Python<'_>, data: &Bound<'_, PyAny>, offset: u64) -> PyResult<usize> {
        // SAFETY: `with_buffer` holds the buffer until `io` returns.
        self.with_buffer(py, data, false, |f, span| f.write_at(unsafe { span.bytes() }, offset))
    }

    /// Moves the cursor (whence 0: from the start, 1: from the cursor, 2:
    /// from the end); returns the new position.
    #[pyo3(signature = (offset, whence=0))]
    fn seek(&self, offset: i64, whence: i32) -> PyResult<u64> {
        let to = match whence {
            0 => SeekFrom::Start(
                u64::try_from(offset).map_err(|_| PyValueError::new_err(format!("negative seek position {offset}")))?,
            ),
            1 => SeekFrom::Current(offset),
            2 => SeekFrom::End(offset),
            _ => return Err(PyValueError::new_err(format!("invalid whence ({whence}, should be 0, 1 or 2)"))),
        };
        let g = self.open()?;
        inner(&g).seek(to).or_raise()
    }

    /// The cursor's position (the calling thread's with a per-thread cursor).
    fn tell(&self) -> PyResult<u64> {
        let g = self.open()?;
        Ok(inner(&g).position())
    }

    /// Sets the file's length; returns it.
    fn truncate(&self, py: Python<'_>, size: u64) -> PyResult<u64> {
        self.check(true)?;
        let g = self.open()?;
        let f = inner(&g);
        py.detach(|| f.fs().truncate(f.ino(), size)).or_raise()?;
        Ok(size)
    }

    /// Makes the file's data and meta-data durable.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let g = self.open()?;
        let f = inner(&g);
        py.detach(|| f.fs().fsync(f.ino())).or_raise()
    }

    /// The file's length in bytes.
    #[getter]
    fn size(&self) -> PyResult<u64> {
        let g = self.open()?;
        inner(&g).len().or_raise()
    }

    /// The file's inode number.
    #[getter(ino)]
    fn py_ino(&self) -> PyResult<u64> {
        self.ino()
    }

    /// The composition in force (``cursor=...,prefetch=...,locks=...``);
    /// assigning a spec changes it while the file is open.
    #[getter]
    fn spec(&self) -> PyResult<String> {
        let g = self.open()?;
        Ok(inner(&g).spec().to_string())
    }

    #[setter]
    fn set_spec(&self, spec: &str) -> PyResult<()> {
        let s = OpenSpec::parse(spec).or_raise()?;
        let g = self.open()?;
        inner(&g).set_spec(s);
        Ok(())
    }

    /// The file's layout, canonical.
    #[getter]
    fn layout(&self, py: Python<'_>) -> PyResult<String> {
        let g = self.open()?;
        let f = inner(&g);
        py.detach(|| f.fs().layout_get(f.ino())).or_raise()
    }

    /// What the instance did: reads, prefetch requests and blocks.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let g = self.open()?;
        let f = inner(&g);
        let s = f.stats();
        let d = PyDict::new(py);
        d.set_item("reads", s.reads)?;
        d.set_item("prefetch_requests", s.prefetch_requests)?;
        d.set_item("prefetch_blocks", s.prefetch_blocks)?;
        d.set_item("prefetch_issued", s.prefetch_issued)?;
        d.set_item("pattern", format!("{:?}", f.pattern()))?;
        Ok(d)
    }

    /// An advisory lock on bytes ``[start, start+length)`` of this
    /// instance (``length`` 0: to the end), exclusive or shared, waiting
    /// (GIL released) for other threads' conflicting locks; with
    /// ``blocking=False`` a conflict raises ``BlockingIOError`` at once.
    /// With ``spec="locks=auto"`` every read and write of the instance takes
    /// such a lock on its bytes. Release it with ``release()`` or a ``with``
    /// block.
    #[pyo3(signature = (start, length, exclusive=true, blocking=true))]
    fn lock(&self, py: Python<'_>, start: u64, length: u64, exclusive: bool, blocking: bool) -> PyResult<RangeLock> {
        let g = self.open()?;
        let f = inner(&g);
        let mode = if exclusive { LockMode::Exclusive } else { LockMode::Shared };
        let guard = if blocking { py.detach(|| f.lock(start, length, mode)) } else { f.try_lock(start, length, mode) };
        Ok(RangeLock { guard: Mutex::new(Some(guard.or_raise()?)) })
    }

    fn readable(&self) -> bool {
        self.readable
    }

    fn writable(&self) -> bool {
        self.writable
    }

    /// Ends the instance (after the calls running on it return).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let f = py.detach(|| match self.f.write() {
            Ok(mut g) => Ok(g.take()),
            Err(_) => Err(()),
        });
        drop(f.map_err(|()| PyOSError::new_err("file state poisoned"))?);
        Ok(())
    }

    #[getter]
    fn closed(&self) -> bool {
        self.f.read().map(|g| g.is_none()).unwrap_or(true)
    }
}

/// A held advisory lock of a file instance (``File.lock``).
#[pyclass(frozen, module = "hurricane._native")]
pub struct RangeLock {
    guard: Mutex<Option<RangeGuard>>,
}

#[pymethods]
impl RangeLock {
    /// Releases the lock (again: nothing).
    fn release(&self) {
        let g = self.guard.lock().map(|mut g| g.take());
        drop(g);
    }

    /// Whether the lock is still held.
    #[getter]
    fn held(&self) -> bool {
        self.guard.lock().map(|g| g.is_some()).unwrap_or(false)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.release();
        false
    }

    fn __repr__(&self) -> String {
        match self.guard.lock().ok().and_then(|g| g.as_ref().map(|g| (g.start, g.end, g.mode))) {
            Some((s, e, m)) => format!("<hurricane.RangeLock {m:?} [{s}, {e}) held>"),
            None => "<hurricane.RangeLock released>".into(),
        }
    }
}

/// HFS access pattern A from Rust threads, for comparison with the same
/// from Python threads: ``threads`` threads each read their own
/// ``1/threads`` of the file, in ``chunk``-byte reads through a per-thread
/// cursor of this instance, into their slice of ``out`` (a writable buffer
/// at least the file's size) or, without one, into a buffer of their own.
/// Returns the bytes read.
#[pyfunction]
#[pyo3(signature = (file, threads, chunk, out=None))]
pub fn read_regions(
    py: Python<'_>,
    file: &Bound<'_, PyAny>,
    threads: usize,
    chunk: usize,
    out: Option<&Bound<'_, PyAny>>,
) -> PyResult<u64> {
    if threads == 0 || chunk == 0 {
        return Err(PyValueError::new_err("threads and chunk must be positive"));
    }
    let raw = crate::txn::raw_of(file)?;
    let raw = raw.get();
    raw.check(false)?;
    let g = raw.open()?;
    let f = inner(&g);
    let size = f.len().or_raise()?;
    let region = size.div_ceil(threads as u64);
    let held = out.map(|o| Held::get(o, true)).transpose()?;
    let span = held.as_ref().map(Held::span);
    if let Some(s) = span {
        if (s.len() as u64) < size {
            return Err(PyValueError::new_err(format!("out holds {} bytes, the file {size}", s.len())));
        }
    }
    let total = py.detach(|| {
        // SAFETY: `held` is held until after the call.
        let dest: Option<&mut [u8]> = span.map(|s| unsafe { s.bytes_mut() });
        let mut slices: Vec<Option<&mut [u8]>> = match dest {
            Some(d) => d[..size as usize].chunks_mut(region.max(1) as usize).map(Some).collect(),
            None => Vec::new(),
        };
        slices.resize_with(threads, || None);
        std::thread::scope(|s| {
            let handles: Vec<_> = slices
                .into_iter()
                .enumerate()
                .map(|(i, dest)| {
                    let f = f.clone();
                    s.spawn(move || -> hurricane::Result<u64> {
                        let i = i as u64;
                        let (start, end) = ((i * region).min(size), ((i + 1) * region).min(size));
                        let mut own = Vec::new();
                        let dest = match dest {
                            Some(d) => d,
                            None => {
                                own.resize(chunk, 0u8);
                                &mut own[..]
                            }
                        };
                        let in_place = dest.len() as u64 >= end - start && end > start;
                        let mut done = 0u64;
                        f.seek(SeekFrom::Start(start))?;
                        while start + done < end {
                            let want = (end - start - done).min(chunk as u64) as usize;
                            let buf = if in_place {
                                &mut dest[done as usize..done as usize + want]
                            } else {
                                &mut dest[..want]
                            };
                            let n = f.read(buf)?;
                            if n == 0 {
                                break;
                            }
                            done += n as u64;
                        }
                        Ok(done)
                    })
                })
                .collect();
            let mut total = 0;
            for h in handles {
                total += h.join().map_err(|_| hurricane::Error::Invalid("reader thread panicked".into()))??;
            }
            Ok(total)
        })
    });
    drop(held);
    total.or_raise()
}
