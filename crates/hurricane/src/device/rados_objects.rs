//! Whole small objects of one RADOS pool, read and written in one
//! synchronous call each: what a pool keeps in its cluster besides its
//! devices' chunks (its description, `pool::published`).

use super::rados::{cstring, os_err, RadosCluster};
use crate::error::{Error, Result};
use ceph::rados as ffi;
use std::io;
use std::sync::Arc;

/// librados' `LIBRADOS_CREATE_EXCLUSIVE`: a create that fails with EEXIST
/// when the object is there.
const CREATE_EXCLUSIVE: libc::c_int = 1;

/// The largest object [`RadosObjects::read`] takes: these are descriptions,
/// not data.
pub const MAX_OBJECT: u64 = 1 << 20;

/// One RADOS pool of a cluster, for whole-object reads and writes.
pub struct RadosObjects {
    _cluster: Arc<RadosCluster>,
    ioctx: ffi::rados_ioctx_t,
    pool: String,
}

// SAFETY: an io context is librados' thread-safe handle, used only through
// librados calls, and destroyed once on drop.
unsafe impl Send for RadosObjects {}
// SAFETY: as above.
unsafe impl Sync for RadosObjects {}

impl Drop for RadosObjects {
    fn drop(&mut self) {
        // SAFETY: every call on the context is synchronous, so none is in
        // flight; the cluster outlives it (held by `self`).
        unsafe { ffi::rados_ioctx_destroy(self.ioctx) }
    }
}

impl RadosObjects {
    /// The RADOS pool `pool` through an open connection.
    pub fn on(cluster: Arc<RadosCluster>, pool: &str) -> Result<RadosObjects> {
        let ioctx = cluster.io_context(pool, &format!("rados:{pool}"))?;
        Ok(RadosObjects { _cluster: cluster, ioctx, pool: pool.to_string() })
    }

    fn err(&self, op: &str, name: &str, ret: i32) -> Error {
        let cause = os_err(ret);
        let what = format!("rados:{}/{name}", self.pool);
        Error::io(&what, io::Error::new(cause.kind(), format!("{op}: {cause}")))
    }

    /// Whether the object `name` is there.
    pub fn exists(&self, name: &str) -> Result<bool> {
        let oid = cstring(name, "object name")?;
        let (mut size, mut mtime) = (0u64, 0 as libc::time_t);
        // SAFETY: a live context, a NUL-terminated name and valid places
        // for the size and time.
        let ret = unsafe { ffi::rados_stat(self.ioctx, oid.as_ptr(), &mut size, &mut mtime) };
        match ret {
            0.. => Ok(true),
            r if r == -libc::ENOENT => Ok(false),
            r => Err(self.err("stat", name, r)),
        }
    }

    /// The whole object `name`, or None when there is none.
    pub fn read(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let oid = cstring(name, "object name")?;
        let (mut size, mut mtime) = (0u64, 0 as libc::time_t);
        // SAFETY: a live context, a NUL-terminated name and valid places
        // for the size and time.
        let ret = unsafe { ffi::rados_stat(self.ioctx, oid.as_ptr(), &mut size, &mut mtime) };
        if ret == -libc::ENOENT {
            return Ok(None);
        }
        if ret < 0 {
            return Err(self.err("stat", name, ret));
        }
        if size > MAX_OBJECT {
            return Err(Error::corrupt(
                format!("rados:{}/{name}", self.pool),
                format!("{size} bytes, more than a pool description holds ({MAX_OBJECT})"),
            ));
        }
        let mut buf = vec![0u8; size as usize];
        // SAFETY: `buf` is valid for `buf.len()` bytes, which librados
        // fills at most.
        let ret = unsafe { ffi::rados_read(self.ioctx, oid.as_ptr(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if ret == -libc::ENOENT {
            return Ok(None);
        }
        if ret < 0 {
            return Err(self.err("read", name, ret));
        }
        buf.truncate(ret as usize);
        Ok(Some(buf))
    }

    /// Replaces the object `name` with `data` in one atomic operation; with
    /// `exclusive`, fails with [`Error::Exists`] if the object is there.
    pub fn write(&self, name: &str, data: &[u8], exclusive: bool) -> Result<()> {
        let oid = cstring(name, "object name")?;
        // SAFETY: creates an empty operation, released below.
        let op = unsafe { ffi::rados_create_write_op() };
        if op.is_null() {
            return Err(self.err("write", name, -libc::ENOMEM));
        }
        // SAFETY: a live operation, context and name; `data` is valid for
        // its length until the synchronous operate returns; the operation
        // is released once, after it.
        let ret = unsafe {
            if exclusive {
                ffi::rados_write_op_create(op, CREATE_EXCLUSIVE, std::ptr::null());
            }
            ffi::rados_write_op_write_full(op, data.as_ptr().cast(), data.len());
            let ret = ffi::rados_write_op_operate(op, self.ioctx, oid.as_ptr(), std::ptr::null_mut(), 0);
            ffi::rados_release_write_op(op);
            ret
        };
        if ret == -libc::EEXIST {
            return Err(Error::Exists(format!("rados:{}/{name}", self.pool)));
        }
        if ret < 0 {
            return Err(self.err("write", name, ret));
        }
        Ok(())
    }
}
