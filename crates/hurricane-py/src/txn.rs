//! `hurricane.Transaction`: the engine's embedded transactions over files.

use crate::buffer::Held;
use crate::error::{closed, OrRaise};
use crate::file::RawFile;
use hurricane::Fs;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use std::sync::Mutex;

/// A transaction over files set transactional (``Pool.set_transactional``):
/// its writes are buffered and its reads see them; ``commit`` makes them
/// all durable at once, ``abort`` drops them. As a context manager it
/// commits when the block ends normally and aborts when it raises.
#[pyclass(frozen, module = "hurricane._native")]
pub struct Transaction {
    t: Mutex<Option<hurricane::Transaction>>,
}

/// The `RawFile` of a `hurricane.File` (or a `RawFile` itself).
pub fn raw_of<'py>(file: &Bound<'py, PyAny>) -> PyResult<Bound<'py, RawFile>> {
    if let Ok(r) = file.cast::<RawFile>() {
        return Ok(r.clone());
    }
    let raw = file.getattr("_raw").map_err(|_| PyTypeError::new_err("expected a hurricane.File"))?;
    raw.cast_into::<RawFile>().map_err(|_| PyTypeError::new_err("expected a hurricane.File"))
}

impl Transaction {
    pub fn begin(fs: &Fs) -> PyResult<Transaction> {
        let t = fs.begin().or_raise()?;
        Ok(Transaction { t: Mutex::new(Some(t)) })
    }

    fn with<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&hurricane::Transaction) -> hurricane::Result<R> + Send,
    ) -> PyResult<R> {
        py.detach(|| {
            let g = self.t.lock().map_err(|_| closed("transaction"))?;
            let t = g.as_ref().ok_or_else(|| closed("transaction"))?;
            f(t).or_raise()
        })
    }

    fn take(&self) -> PyResult<Option<hurricane::Transaction>> {
        Ok(self.t.lock().map_err(|_| closed("transaction"))?.take())
    }
}

#[pymethods]
impl Transaction {
    /// Writes ``data`` at ``offset`` of ``file`` in the transaction
    /// (locking those bytes against other transactions); returns the count.
    fn write(&self, py: Python<'_>, file: &Bound<'_, PyAny>, offset: u64, data: &Bound<'_, PyAny>) -> PyResult<usize> {
        let raw = raw_of(file)?;
        raw.get().check(true)?;
        let ino = raw.get().ino()?;
        let held = Held::get(data, false)?;
        let span = held.span();
        // SAFETY: `held` is held until after the call.
        let n = self.with(py, move |t| t.write_ino(ino, offset, unsafe { span.bytes() }))?;
        drop(held);
        Ok(n)
    }

    /// Up to ``size`` bytes at ``offset`` of ``file`` as the transaction
    /// sees them (its own writes included).
    fn read<'py>(
        &self,
        py: Python<'py>,
        file: &Bound<'py, PyAny>,
        offset: u64,
        size: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let ino = raw_of(file)?.get().ino()?;
        let data = self.with(py, move |t| {
            let left = t.size_ino(ino)?.saturating_sub(offset);
            let mut v = vec![0u8; (size as u64).min(left).min(1 << 31) as usize];
            let n = t.read_ino(ino, offset, &mut v)?;
            v.truncate(n);
            Ok(v)
        })?;
        Ok(PyBytes::new(py, &data))
    }

    /// The transaction's id (the one deadlock errors name).
    #[getter]
    fn id(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |t| Ok(t.id()))
    }

    /// Makes every write of the transaction durable, all or none.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let t = self.take()?.ok_or_else(|| closed("transaction"))?;
        py.detach(|| t.commit()).or_raise()
    }

    /// Drops the transaction's writes and releases its locks.
    fn abort(&self) -> PyResult<()> {
        if let Some(t) = self.take()? {
            t.abort();
        }
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*exc))]
    fn __exit__(&self, py: Python<'_>, exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        let raised = exc.get_item(0).map(|e| !e.is_none()).unwrap_or(false);
        if raised {
            self.abort()?;
        } else if self.t.lock().map(|g| g.is_some()).unwrap_or(false) {
            self.commit(py)?;
        }
        Ok(false)
    }
}
