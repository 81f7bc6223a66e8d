//! The Python binding of Hurricane's native API (`import hurricane`).
//!
//! The extension module `hurricane._native` holds the engine's objects:
//! [`pool::Pool`] (an open pool: namespace, layouts, directory defaults,
//! statistics), [`file::RawFile`] (an open instance with its cursor,
//! prefetch and lock policies) and [`txn::Transaction`]. The pure-Python
//! part of the package (`python/hurricane/`) wraps `RawFile` in
//! `hurricane.File`, an `io.RawIOBase`, so that buffered readers, `shutil`
//! and NumPy's `readinto` see an ordinary binary file.
//!
//! Every call that may wait on a device or a lock releases the GIL
//! (`Python::detach`): threads reading regions of one file run in parallel,
//! as HFS's access pattern A does in Rust. Data moves between the engine and
//! Python buffers without copies (`buffer.rs`). Engine errors become
//! `OSError` with the engine's errno, which Python maps to the matching
//! subclass (`FileNotFoundError`, `PermissionError`, ...).

mod buffer;
mod error;
mod file;
mod pool;
mod txn;

use pyo3::prelude::*;

/// Hurricane pools from Python: per-file layouts and per-open policies on
/// the in-process engine.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<pool::Pool>()?;
    m.add_class::<file::RawFile>()?;
    m.add_class::<file::RangeLock>()?;
    m.add_class::<txn::Transaction>()?;
    m.add_function(wrap_pyfunction!(pool::layout_types, m)?)?;
    m.add_function(wrap_pyfunction!(file::read_regions, m)?)?;
    m.add("BLOCK_SIZE", hurricane::base::BLOCK_SIZE)?;
    Ok(())
}
