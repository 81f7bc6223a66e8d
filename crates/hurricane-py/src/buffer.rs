//! Python buffers as byte slices, without copies.
//!
//! A buffer is taken with the GIL held (`PyObject_GetBuffer`): while the
//! `Py_buffer` is held, its exporter keeps the memory alive and of fixed
//! size (a `bytearray` refuses to resize, a NumPy array keeps its data).
//! The I/O then runs with the GIL released on the address and length taken
//! from it, and the buffer is released with the GIL held again. Two Python
//! threads that hand the same memory to concurrent calls race on its bytes
//! as they would with `os.readv`; each byte still comes from one request.

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;

/// A contiguous buffer held for one call.
pub struct Held {
    buf: PyUntypedBuffer,
}

/// Its memory as plain numbers, which the GIL-released part may carry
/// across threads (`Python::detach` needs a `Send` closure).
#[derive(Clone, Copy)]
pub struct Span {
    addr: usize,
    len: usize,
}

impl Held {
    /// Any object with the buffer protocol whose memory is one contiguous
    /// run (C or Fortran order: the bytes are taken in memory order);
    /// `writable` refuses read-only ones.
    pub fn get(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Held> {
        let buf = PyUntypedBuffer::get(obj)
            .map_err(|_| PyTypeError::new_err(format!("a bytes-like object is required, not '{}'", type_name(obj))))?;
        if writable && buf.readonly() {
            return Err(PyTypeError::new_err(format!(
                "readinto() needs a writable buffer, and this '{}' is read-only",
                type_name(obj)
            )));
        }
        if !(buf.is_c_contiguous() || buf.is_fortran_contiguous()) {
            return Err(PyBufferError::new_err("the buffer is not contiguous"));
        }
        Ok(Held { buf })
    }

    pub fn span(&self) -> Span {
        Span { addr: self.buf.buf_ptr() as usize, len: self.buf.len_bytes() }
    }
}

impl Span {
    pub fn len(&self) -> usize {
        self.len
    }

    /// # Safety
    /// The [`Held`] this came from must still be held (not released).
    pub unsafe fn bytes<'a>(&self) -> &'a [u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the held Py_buffer keeps `len` bytes at `addr` alive and
        // fixed for as long as the caller holds it (see the module docs).
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }

    /// # Safety
    /// The [`Held`] this came from must still be held and writable.
    pub unsafe fn bytes_mut<'a>(&self) -> &'a mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as `bytes`; `Held::get(.., true)` refused read-only
        // buffers, so the exporter lets us write these bytes.
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) }
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "object".into())
}
