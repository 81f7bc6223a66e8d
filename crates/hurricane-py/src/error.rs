//! Engine errors as Python exceptions.

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::PyErr;

/// `OSError(errno, message)`: Python's constructor returns the subclass
/// that matches the errno (`FileNotFoundError` for ENOENT, ...).
pub fn to_py(e: hurricane::Error) -> PyErr {
    PyOSError::new_err((e.errno(), e.to_string()))
}

/// The result of an engine call, its error raised in Python.
pub trait OrRaise<T> {
    fn or_raise(self) -> Result<T, PyErr>;
}

impl<T> OrRaise<T> for hurricane::Result<T> {
    fn or_raise(self) -> Result<T, PyErr> {
        self.map_err(to_py)
    }
}

/// Operations on a closed pool, file or transaction.
pub fn closed(what: &str) -> PyErr {
    PyValueError::new_err(format!("I/O operation on closed {what}"))
}

/// A size given as an int or as text with a unit ("64M", "1G").
pub fn size_arg(v: &pyo3::Bound<'_, pyo3::PyAny>) -> Result<u64, PyErr> {
    use pyo3::types::PyAnyMethods;
    if let Ok(n) = v.extract::<u64>() {
        return Ok(n);
    }
    let s: String = v.extract().map_err(|_| PyValueError::new_err("a size is an int or text such as \"64M\""))?;
    hurricane::units::parse_size(&s).map_err(|e| PyValueError::new_err(format!("size {s:?}: {e}")))
}
