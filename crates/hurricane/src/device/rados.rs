//! A device whose blocks live in a Ceph cluster: RADOS objects of a fixed
//! size (`CHUNK`, 4 MiB), one per chunk of the device, named
//! `PREFIX.CHUNK` (the chunk's index in 16 hex digits) in one RADOS pool.
//! `object_prefix` gives the prefix mkfs names a pool's device by,
//! `hurricane.<pool id>.<device index>` (docs/FORMAT.md, "Devices in RADOS").
//!
//! A request is cut at chunk boundaries and every piece is sent at once as an
//! asynchronous librados operation; the request returns when all are done.
//! Requests from many threads are all in flight together, so a stripe over
//! several rados devices keeps the cluster busy. An object never written
//! reads as zeros (a read of a missing object or past an object's end).
//! RADOS acknowledges a write only once every copy has it, so a completed
//! write is already durable in the cluster: `flush` waits for nothing but
//! operations still in flight.
//!
//! One writer at a time: a pool with devices in a cluster is opened for
//! writing under a [`RadosLease`], an exclusive RADOS lock with a duration
//! on an object beside the pool's first rados device, renewed by a thread
//! while the pool is open. A second writer anywhere is refused, naming the
//! holder; a host that dies stops renewing, and the lock expires after its
//! duration so another host can open the pool and replay its journal. A
//! holder whose renewal fails (the lock expired, or was broken) has lost the
//! pool: it stops writing (`is_lost`). A renewal that fails for a reason
//! that may pass (a timeout, a full pool) is tried again until a whole
//! duration has passed since the last one that succeeded. Past that, the
//! holder stops writing too, but goes on trying to take the lock again
//! while the cluster does not answer; once it answers, the holder takes
//! the pool back only if no other host held it meanwhile: it holds the
//! lock again and the lease object still records this holder's own
//! address (every holder records its own when it takes the pool over, and
//! a clean release removes it). Otherwise the pool stays lost, for good.
//!
//! Fencing: a holder that stalled past its lease (a paused process, a
//! partition) does not know it lost the pool until it runs again, and may
//! have writes in flight. So the holder records its client address in the
//! lease object (`LEASE_WRITER_XATTR`), and the next holder blocklists that
//! address before it replays the journal: the OSDs refuse the old holder's
//! operations from then on. The lease and the pool's devices share one
//! connection per cluster (`RadosConnections`), so this fences the
//! devices' writes. A pool with devices in several clusters records the
//! holder's address in each of them too (with the cluster's fsid), and the
//! next holder blocklists each in its own cluster.
//!
//! Errors from the cluster say what happened and to which object: an
//! operation its OSD does not answer within `rados_osd_op_timeout` (the
//! config file's, else `RadosOptions::op_timeout`) fails as timed out; a
//! full pool fails writes at once with `NoSpace` (librados would wait for
//! room without a timeout; the io contexts set FULL_TRY); a blocklisted
//! client is told it was fenced. Timeouts and full pools are transient
//! (`Device::transient`): they do not fault the device, and later requests
//! are tried.
//!
//! librados is reached through the `ceph` crate's bindings, behind the
//! `rados` cargo feature.

use super::Device;
use crate::error::{Error, Result};
use ceph::rados as ffi;
use std::ffi::{CStr, CString};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Bytes of the device per RADOS object.
pub const CHUNK: u64 = 4 << 20;

// librados calls the `ceph` crate does not bind (librados.h of Pacific,
// 16.2, and later; the crate binds only the older `rados_blacklist_add`).
#[link(name = "rados", kind = "dylib")]
extern "C" {
    fn rados_blocklist_add(cluster: ffi::rados_t, client_address: *mut libc::c_char, expire_seconds: u32) -> i32;
    fn rados_getaddrs(cluster: ffi::rados_t, addrs: *mut *mut libc::c_char) -> i32;
    fn rados_set_pool_full_try(io: ffi::rados_ioctx_t);
}

/// How a cluster connection behaves where its config file says nothing.
#[derive(Debug, Clone)]
pub struct RadosOptions {
    /// The client's name (`client.ID`), `admin` unless set.
    pub id: String,
    /// How long connecting may take before it fails (`client_mount_timeout`).
    pub connect_timeout: Duration,
    /// How long an operation may wait for its OSD (an OSD down, a pool
    /// whose placement groups are not active) before it fails with a
    /// timeout (`rados_osd_op_timeout`); without one it waits for ever.
    pub op_timeout: Duration,
}

impl Default for RadosOptions {
    fn default() -> Self {
        RadosOptions {
            id: "admin".into(),
            connect_timeout: Duration::from_secs(30),
            op_timeout: Duration::from_secs(60),
        }
    }
}

/// A connection to a Ceph cluster, shared by the devices in its pools.
pub struct RadosCluster {
    handle: ffi::rados_t,
    conf: String,
    /// The operation timeout in force (`rados_osd_op_timeout`), for messages.
    op_timeout: f64,
}

// SAFETY: a `rados_t` is a handle to librados' thread-safe client; the
// library allows calls on it from any thread.
unsafe impl Send for RadosCluster {}
// SAFETY: as above; the handle is only used through librados calls.
unsafe impl Sync for RadosCluster {}

impl Drop for RadosCluster {
    fn drop(&mut self) {
        // SAFETY: the handle came from rados_create, every io context made
        // from it is gone (each device holds an Arc of the cluster), and it
        // is shut down once.
        unsafe { ffi::rados_shutdown(self.handle) }
    }
}

pub(super) fn os_err(ret: i32) -> io::Error {
    io::Error::from_raw_os_error(-ret)
}

pub(super) fn cstring(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::Invalid(format!("{what} {s:?} contains a NUL byte")))
}

impl RadosCluster {
    /// Connects to the cluster that the config file `conf` (a `ceph.conf`)
    /// names.
    pub fn connect(conf: &Path, opts: &RadosOptions) -> Result<Arc<RadosCluster>> {
        let conf_s = conf.display().to_string();
        let fail = |what: &str, ret: i32| Error::Device(format!("rados cluster of {conf_s}: {what}: {}", os_err(ret)));
        let id = cstring(&opts.id, "rados client id")?;
        let path = cstring(&conf_s, "config path")?;
        let mut handle: ffi::rados_t = std::ptr::null_mut();
        // SAFETY: `handle` is a valid place for the new handle and `id` a
        // NUL-terminated string that outlives the call.
        let ret = unsafe { ffi::rados_create(&mut handle, id.as_ptr()) };
        if ret < 0 {
            return Err(fail("cannot create a client", ret));
        }
        // From here the handle is shut down on every path.
        let mut cluster = RadosCluster { handle, conf: conf_s.clone(), op_timeout: 0.0 };
        // SAFETY: a created, unconnected handle and a NUL-terminated path.
        let ret = unsafe { ffi::rados_conf_read_file(cluster.handle, path.as_ptr()) };
        if ret < 0 {
            return Err(fail("cannot read the config file", ret));
        }
        // Timeouts the config file leaves at librados' defaults.
        if cluster.get("rados_osd_op_timeout").as_deref().map(|v| v.parse::<f64>().unwrap_or(0.0) == 0.0) == Some(true)
        {
            cluster.set("rados_osd_op_timeout", &opts.op_timeout.as_secs_f64().to_string())?;
            cluster.set("rados_mon_op_timeout", &opts.op_timeout.as_secs_f64().to_string())?;
        }
        if cluster.get("client_mount_timeout").as_deref().map(|v| v.parse::<f64>().unwrap_or(0.0) == 300.0)
            == Some(true)
        {
            cluster.set("client_mount_timeout", &opts.connect_timeout.as_secs_f64().to_string())?;
        }
        cluster.op_timeout = cluster.get("rados_osd_op_timeout").and_then(|v| v.parse().ok()).unwrap_or(0.0);
        // SAFETY: a created handle with its configuration read.
        let ret = unsafe { ffi::rados_connect(cluster.handle) };
        if ret < 0 {
            return Err(fail("cannot connect", ret));
        }
        Ok(Arc::new(cluster))
    }

    /// The path of the config file the cluster was reached through.
    pub fn conf(&self) -> &str {
        &self.conf
    }

    /// This client's address, as the cluster sees it and as
    /// `rados_blocklist_add` takes it (`127.0.0.1:0/NONCE`): one per
    /// connection, so blocklisting it fences this connection and no other.
    pub fn addrs(&self) -> Result<String> {
        let mut out: *mut libc::c_char = std::ptr::null_mut();
        // SAFETY: a connected handle and a valid place for the string,
        // which librados allocates and `rados_buffer_free` releases.
        let ret = unsafe { rados_getaddrs(self.handle, &mut out) };
        if ret < 0 || out.is_null() {
            return Err(Error::Device(format!("rados cluster of {}: no client address: {}", self.conf, os_err(ret))));
        }
        // SAFETY: librados returned a NUL-terminated string, released once.
        let s = unsafe {
            let s = CStr::from_ptr(out).to_string_lossy().into_owned();
            ffi::rados_buffer_free(out);
            s
        };
        Ok(s)
    }

    /// The cluster's fsid (`rados_cluster_fsid`), which names it the same
    /// from every host, whatever config file reaches it.
    pub fn fsid(&self) -> Result<String> {
        let mut buf = [0u8; 64];
        // SAFETY: a connected handle and a buffer valid for its length,
        // into which librados writes the fsid and its NUL.
        let ret = unsafe { ffi::rados_cluster_fsid(self.handle, buf.as_mut_ptr().cast(), buf.len()) };
        if ret < 0 {
            return Err(Error::Device(format!("rados cluster of {}: no fsid: {}", self.conf, os_err(ret))));
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len()).min(ret as usize);
        Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
    }

    /// Blocklists the client at `addr` (another process's connection): the
    /// OSDs refuse its operations from the next map on (`EBLOCKLISTED`),
    /// for librados' default time (`mon_osd_blocklist_default_expire`, an
    /// hour). Returns once this client has the map that says so.
    pub fn blocklist(&self, addr: &str) -> Result<()> {
        let a = cstring(addr, "client address")?;
        // SAFETY: a connected handle and a NUL-terminated string librados
        // only reads (the binding takes it as mutable).
        let ret = unsafe { rados_blocklist_add(self.handle, a.as_ptr().cast_mut(), 0) };
        if ret < 0 {
            return Err(Error::Device(format!(
                "rados cluster of {}: cannot blocklist the client at {addr}: {}",
                self.conf,
                os_err(ret)
            )));
        }
        Ok(())
    }

    /// A new io context on the RADOS pool `pool` (for `what`, in messages),
    /// destroyed by its owner. A write in it to a full pool (over its
    /// quota, or its OSDs full) fails at once with EDQUOT or ENOSPC, which
    /// the file system reports, where librados would otherwise wait without
    /// a timeout until the pool is not full (`rados_set_pool_full_try`;
    /// deletes still go through, freeing space).
    pub(super) fn io_context(&self, pool: &str, what: &str) -> Result<ffi::rados_ioctx_t> {
        let pool_c = cstring(pool, "RADOS pool name")?;
        let mut ioctx: ffi::rados_ioctx_t = std::ptr::null_mut();
        // SAFETY: a connected cluster handle, a NUL-terminated pool name and
        // a valid place for the new context.
        let ret = unsafe { ffi::rados_ioctx_create(self.handle, pool_c.as_ptr(), &mut ioctx) };
        if ret == -libc::ENOENT {
            return Err(Error::Device(format!("{what}: the cluster of {} has no pool {pool}", self.conf)));
        }
        if ret < 0 {
            return Err(Error::Device(format!("{what}: cannot open pool {pool}: {}", os_err(ret))));
        }
        // SAFETY: a live io context.
        unsafe { rados_set_pool_full_try(ioctx) };
        Ok(ioctx)
    }

    fn get(&self, option: &str) -> Option<String> {
        let name = CString::new(option).ok()?;
        let mut buf = vec![0u8; 256];
        // SAFETY: `buf` has room for `buf.len()` bytes, which librados
        // fills with a NUL-terminated value.
        let ret = unsafe { ffi::rados_conf_get(self.handle, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if ret < 0 {
            return None;
        }
        CStr::from_bytes_until_nul(&buf).ok().map(|s| s.to_string_lossy().into_owned())
    }

    fn set(&self, option: &str, value: &str) -> Result<()> {
        let name = cstring(option, "option")?;
        let val = cstring(value, "value")?;
        // SAFETY: both are NUL-terminated strings that outlive the call.
        let ret = unsafe { ffi::rados_conf_set(self.handle, name.as_ptr(), val.as_ptr()) };
        if ret < 0 {
            return Err(Error::Device(format!("rados cluster of {}: cannot set {option}: {}", self.conf, os_err(ret))));
        }
        Ok(())
    }
}

pub use super::rados_spec::object_prefix;

/// One device of a pool, stored in RADOS objects.
pub struct RadosDevice {
    cluster: Arc<RadosCluster>,
    ioctx: ffi::rados_ioctx_t,
    name: String,
    prefix: String,
    size: u64,
}

// SAFETY: an io context may be used from many threads at once (librados
// serialises what it must internally); it is destroyed only on drop.
unsafe impl Send for RadosDevice {}
// SAFETY: as above.
unsafe impl Sync for RadosDevice {}

impl Drop for RadosDevice {
    fn drop(&mut self) {
        // SAFETY: every request waited for its operations, so none is in
        // flight; the cluster handle outlives the context (held by `self`).
        unsafe {
            ffi::rados_aio_flush(self.ioctx);
            ffi::rados_ioctx_destroy(self.ioctx);
        }
    }
}

/// A piece of a request within one chunk: (chunk, offset in the object,
/// offset in the caller's buffer, length).
type Piece = (u64, u64, usize, usize);

/// An operation in flight: its completion and the object it is on.
struct Pending {
    comp: ffi::rados_completion_t,
    oid: CString,
    /// Bytes asked for (reads: the rest of the piece is zero-filled).
    len: usize,
}

impl Pending {
    /// Waits for the operation and returns its result (bytes for a read).
    fn wait(self) -> i32 {
        // SAFETY: `comp` is a live completion of an operation that was
        // submitted; it is released once, here, after the operation ended.
        unsafe {
            ffi::rados_aio_wait_for_complete(self.comp);
            let ret = ffi::rados_aio_get_return_value(self.comp);
            ffi::rados_aio_release(self.comp);
            ret
        }
    }
}

impl RadosDevice {
    /// A device of `size` bytes whose objects are `PREFIX.CHUNK` in the
    /// RADOS pool `pool`. Nothing is written: a new device reads as zeros.
    pub fn open(cluster: Arc<RadosCluster>, pool: &str, prefix: &str, size: u64) -> Result<RadosDevice> {
        let name = format!("rados:{pool}/{prefix}");
        if prefix.is_empty() || prefix.contains('\0') {
            return Err(Error::Invalid(format!("{name}: object prefix must be a non-empty string without NUL")));
        }
        let ioctx = cluster.io_context(pool, &name)?;
        Ok(RadosDevice { cluster, ioctx, name, prefix: prefix.to_string(), size })
    }

    /// Connects to the cluster of `conf` and opens a device on it.
    pub fn connect(conf: &Path, pool: &str, prefix: &str, size: u64) -> Result<RadosDevice> {
        let cluster = RadosCluster::connect(conf, &RadosOptions::default())?;
        Self::open(cluster, pool, prefix, size)
    }

    /// The cluster this device is in.
    pub fn cluster(&self) -> &Arc<RadosCluster> {
        &self.cluster
    }

    /// The name of the object holding chunk `chunk`.
    pub fn object_name(&self, chunk: u64) -> String {
        format!("{}.{chunk:016x}", self.prefix)
    }

    fn oid(&self, chunk: u64) -> Result<CString> {
        cstring(&self.object_name(chunk), "object name")
    }

    fn check(&self, offset: u64, len: usize) -> Result<()> {
        if offset.checked_add(len as u64).is_none_or(|end| end > self.size) {
            return Err(Error::Device(format!(
                "{}: request of {len} bytes at {offset} is past the end ({} bytes)",
                self.name, self.size
            )));
        }
        Ok(())
    }

    /// The pieces of `len` bytes at `offset`, one per chunk: (chunk, offset
    /// in the object, offset in the caller's buffer, length).
    fn pieces(offset: u64, len: usize) -> impl Iterator<Item = Piece> {
        let mut at = 0usize;
        std::iter::from_fn(move || {
            if at == len {
                return None;
            }
            let pos = offset + at as u64;
            let in_obj = pos % CHUNK;
            let n = ((CHUNK - in_obj) as usize).min(len - at);
            let piece = (pos / CHUNK, in_obj, at, n);
            at += n;
            Some(piece)
        })
    }

    fn new_completion(&self) -> Result<ffi::rados_completion_t> {
        let mut comp: ffi::rados_completion_t = std::ptr::null_mut();
        // SAFETY: no callbacks, and a valid place for the completion.
        let ret = unsafe { ffi::rados_aio_create_completion(std::ptr::null_mut(), None, None, &mut comp) };
        if ret < 0 {
            return Err(Error::Device(format!("{}: cannot create a completion: {}", self.name, os_err(ret))));
        }
        Ok(comp)
    }

    /// The error of operation `op` on object `oid`: what the cluster said,
    /// in words that say what to do about it.
    fn op_err(&self, op: &str, oid: &CStr, ret: i32) -> Error {
        let oid = oid.to_string_lossy();
        let cause = os_err(ret);
        match -ret {
            libc::EDQUOT => Error::NoSpace(format!(
                "{}: {op} of object {oid} refused: the RADOS pool is over its quota ({cause}; \
                 `ceph osd pool set-quota` raises it)",
                self.name
            )),
            libc::ENOSPC => Error::NoSpace(format!(
                "{}: {op} of object {oid} refused: the RADOS pool is full, its OSDs are full ({cause})",
                self.name
            )),
            libc::ETIMEDOUT => Error::io(
                &self.name,
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{op} of object {oid} timed out after {}s (rados_osd_op_timeout): its OSD does not \
                         answer (down, stalled or unreachable)",
                        self.cluster.op_timeout
                    ),
                ),
            ),
            // EBLOCKLISTED, which librados returns as ESHUTDOWN.
            libc::ESHUTDOWN => Error::io(
                &self.name,
                io::Error::new(
                    cause.kind(),
                    format!(
                        "{op} of object {oid} refused: this client is blocklisted (fenced) by the cluster; \
                         another host has taken the pool over"
                    ),
                ),
            ),
            _ => Error::io(&self.name, io::Error::new(cause.kind(), format!("{op} of object {oid}: {cause}"))),
        }
    }

    /// Submits one operation per chunk piece of `len` bytes at `offset`
    /// (`submit(completion, object, offset in the object, offset in the
    /// caller's buffer, length)`, returning librados' result), all before
    /// waiting for any, then waits for every submitted one even if a later
    /// submission failed: the caller's buffer is free again when this
    /// returns. Returns the pieces and the bytes each operation reported.
    fn each_piece(
        &self,
        op: &str,
        offset: u64,
        len: usize,
        mut submit: impl FnMut(ffi::rados_completion_t, &CStr, u64, usize, usize) -> i32,
    ) -> Result<(Vec<Piece>, Vec<usize>)> {
        let pieces: Vec<_> = Self::pieces(offset, len).collect();
        // Every name first: once an operation is submitted, nothing may
        // return before it is waited for.
        let oids = pieces.iter().map(|p| self.oid(p.0)).collect::<Result<Vec<_>>>()?;
        let mut pending = Vec::with_capacity(pieces.len());
        let mut submit_err = None;
        for (&(_, in_obj, at, n), oid) in pieces.iter().zip(oids) {
            let comp = match self.new_completion() {
                Ok(c) => c,
                Err(e) => {
                    submit_err = Some(e);
                    break;
                }
            };
            let ret = submit(comp, &oid, in_obj, at, n);
            if ret < 0 {
                // SAFETY: the completion was never handed to an operation.
                unsafe { ffi::rados_aio_release(comp) };
                submit_err = Some(self.op_err(op, &oid, ret));
                break;
            }
            pending.push(Pending { comp, oid, len: n });
        }
        let mut got = vec![0usize; pending.len()];
        let waited = self.wait_all(op, pending, |i, n| got[i] = n as usize);
        if let Some(e) = submit_err {
            return Err(e);
        }
        waited?;
        Ok((pieces, got))
    }

    /// Waits for every operation; the first failure is the request's error
    /// (all are waited for first: the caller's buffer must outlive them).
    fn wait_all(&self, op: &str, pending: Vec<Pending>, mut on_done: impl FnMut(usize, i32)) -> Result<()> {
        let mut first = None;
        for (i, p) in pending.into_iter().enumerate() {
            let len = p.len;
            let oid = p.oid.clone();
            let ret = p.wait();
            // A missing object reads as zeros, and is already zeroed.
            if ret < 0 && !(ret == -libc::ENOENT && (op == "read" || op == "zero")) {
                first.get_or_insert_with(|| self.op_err(op, &oid, ret));
            } else {
                on_done(i, if ret < 0 { 0 } else { ret.min(len as i32) });
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Device for RadosDevice {
    fn name(&self) -> &str {
        &self.name
    }

    /// An OSD that did not answer in time (stalled, restarting, a network
    /// partition) and a full pool are the cluster's state, not damage to
    /// this device: the request fails, and the next is tried.
    fn transient(&self, e: &Error) -> bool {
        match e {
            Error::NoSpace(_) => true,
            Error::Io { source, .. } => source.kind() == io::ErrorKind::TimedOut,
            _ => false,
        }
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.check(offset, buf.len())?;
        let base = buf.as_mut_ptr();
        let (pieces, got) = self.each_piece("read", offset, buf.len(), |comp, oid, in_obj, at, n| {
            // SAFETY: the piece `at..at + n` lies inside `buf` (pieces cover
            // exactly 0..buf.len()), pieces do not overlap, and `buf` is
            // borrowed until every submitted operation has been waited for
            // (`each_piece` waits for all before it returns).
            unsafe { ffi::rados_aio_read(self.ioctx, oid.as_ptr(), comp, base.add(at).cast(), n, in_obj) }
        })?;
        // What an object does not hold (never written, or written only up
        // to a lower offset) reads as zeros.
        for (&(_, _, at, n), &g) in pieces.iter().zip(&got) {
            buf[at + g..at + n].fill(0);
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.check(offset, buf.len())?;
        self.each_piece("write", offset, buf.len(), |comp, oid, in_obj, at, n| {
            let piece = &buf[at..at + n];
            // SAFETY: `piece` is valid for `n` bytes until the operation is
            // waited for (`each_piece` waits for all before it returns;
            // librados also copies it on submission).
            unsafe { ffi::rados_aio_write(self.ioctx, oid.as_ptr(), comp, piece.as_ptr().cast(), n, in_obj) }
        })
        .map(drop)
    }

    fn flush(&self) -> Result<()> {
        // SAFETY: a live io context; this waits for its operations in flight.
        let ret = unsafe { ffi::rados_aio_flush(self.ioctx) };
        if ret < 0 {
            return Err(Error::io(&self.name, io::Error::new(os_err(ret).kind(), format!("flush: {}", os_err(ret)))));
        }
        Ok(())
    }

    /// Zeroes without sending zeros: a chunk the range covers whole loses
    /// its object (a missing object reads as zeros), a part of one is
    /// zeroed in place by a RADOS `zero` operation. All go out together.
    fn zero_range(&self, offset: u64, len: u64) -> Result<bool> {
        let len = usize::try_from(len)
            .map_err(|_| Error::Invalid(format!("{}: zeroing {len} bytes at {offset}", self.name)))?;
        self.check(offset, len)?;
        // Each `zero` is a write operation of its own, released once done.
        let mut ops = Vec::new();
        let r = self.each_piece("zero", offset, len, |comp, oid, in_obj, _, n| {
            if in_obj == 0 && n as u64 == CHUNK {
                // SAFETY: a live io context, a NUL-terminated name and a
                // fresh completion, waited for by `each_piece`.
                return unsafe { ffi::rados_aio_remove(self.ioctx, oid.as_ptr(), comp) };
            }
            // SAFETY: creates an empty operation, released below.
            let op = unsafe { ffi::rados_create_write_op() };
            if op.is_null() {
                return -libc::ENOMEM;
            }
            ops.push(op);
            // SAFETY: a live operation, io context and completion, and a
            // NUL-terminated name; the operation outlives the wait.
            unsafe {
                ffi::rados_write_op_zero(op, in_obj, n as u64);
                ffi::rados_aio_write_op_operate(op, self.ioctx, comp, oid.as_ptr(), std::ptr::null_mut(), 0)
            }
        });
        for op in ops {
            // SAFETY: every operation was waited for (`each_piece` returns
            // only after all it submitted are done), and is released once.
            unsafe { ffi::rados_release_write_op(op) };
        }
        r.map(|_| true)
    }

    /// Each request is a round trip to the cluster.
    fn seeks(&self) -> bool {
        true
    }

    /// Space the pool frees goes back to the cluster: objects cost there.
    fn reclaims_freed(&self) -> bool {
        true
    }

    /// A chunk's object goes when the whole chunk is free.
    fn discard_unit(&self) -> u64 {
        CHUNK
    }

    /// Removes the objects of the chunks the range covers whole (they read
    /// as zeros again); parts of chunks are left as they are.
    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        let end = offset.saturating_add(len).min(self.size);
        let first = offset.div_ceil(CHUNK);
        let last = end / CHUNK; // exclusive
        let mut pending = Vec::new();
        for chunk in first..last {
            let oid = self.oid(chunk)?;
            let comp = self.new_completion()?;
            // SAFETY: a live io context, a NUL-terminated name and a fresh
            // completion, waited for below.
            let ret = unsafe { ffi::rados_aio_remove(self.ioctx, oid.as_ptr(), comp) };
            if ret < 0 {
                // SAFETY: the completion was never handed to an operation.
                unsafe { ffi::rados_aio_release(comp) };
                break;
            }
            pending.push(Pending { comp, oid, len: 0 });
        }
        for p in pending {
            let oid = p.oid.clone();
            let ret = p.wait();
            if ret < 0 && ret != -libc::ENOENT {
                tracing::debug!(device = %self.name, error = %self.op_err("remove", &oid, ret), "discard");
            }
        }
        Ok(())
    }
}

/// The name of the lock a writer of a pool holds.
pub const LEASE_LOCK: &str = "hurricane-writer";
/// How long a lease lasts without renewal, unless the caller says.
pub const LEASE_DURATION: Duration = super::rados_spec::DEFAULT_LEASE_DURATION;
/// librados' `LIBRADOS_LOCK_FLAG_MUST_RENEW`: renew a lock this client
/// holds, and fail if it does not hold it any more.
const LOCK_FLAG_MUST_RENEW: u8 = 2;
/// The extended attribute of the lease object that names the holder's
/// client address while it holds the lease (removed on a clean release):
/// the next holder blocklists that address before it writes anything.
pub const LEASE_WRITER_XATTR: &str = "hurricane.writer";

/// The exclusive right to write a pool, held in the cluster (module docs).
/// Dropping it stops the renewals and releases the lock.
pub struct RadosLease {
    shared: Arc<LeaseShared>,
    renewer: Option<std::thread::JoinHandle<()>>,
    /// Left to expire rather than released (`abandon`).
    abandoned: bool,
}

struct LeaseShared {
    cluster: Arc<RadosCluster>,
    /// The connections to the pool's other clusters (its devices in them):
    /// this holder's address in each is recorded, and fenced by the next.
    others: Vec<Arc<RadosCluster>>,
    ioctx: ffi::rados_ioctx_t,
    /// What is locked, for messages: `rados:POOL/OBJECT`.
    what: String,
    oid: CString,
    name: CString,
    cookie: CString,
    desc: CString,
    duration: Duration,
    lost: Arc<AtomicBool>,
    stop: Mutex<bool>,
    wake: Condvar,
}

// SAFETY: the io context is librados' thread-safe handle, used only through
// librados calls; the rest is plain data and synchronised state.
unsafe impl Send for LeaseShared {}
// SAFETY: as above.
unsafe impl Sync for LeaseShared {}

impl LeaseShared {
    /// Blocklists every address of the previous holder's record `prev`
    /// (`record`) that is not one of this holder's (`own`), each in its own
    /// cluster: the first line in the lease's, each `FSID ADDRESS` line in
    /// the cluster of that fsid. A cluster the pool no longer has devices
    /// in holds none of its data, and is left alone.
    fn fence(&self, prev: &str, own: &str) -> Result<()> {
        let mut lines = prev.lines().map(str::trim).filter(|l| !l.is_empty());
        let mine: Vec<&str> = own.lines().collect();
        let clusters = || std::iter::once(&self.cluster).chain(&self.others);
        if let Some(first) = lines.next().filter(|a| !mine.contains(a)) {
            tracing::warn!(
                "{}: the previous writer (client at {first}) did not release the pool: blocklisting it so that \
                 it can write no more",
                self.what
            );
            self.cluster.blocklist(first)?;
        }
        for line in lines.filter(|l| !mine.contains(l)) {
            let Some((fsid, addr)) = line.split_once(' ') else {
                return Err(Error::corrupt(&self.what, format!("the recorded writer {line:?} is not FSID ADDRESS")));
            };
            let mut found = None;
            for c in clusters() {
                if c.fsid()? == fsid {
                    found = Some(c);
                    break;
                }
            }
            match found {
                Some(c) => {
                    tracing::warn!(
                        "{}: blocklisting the previous writer in cluster {fsid} too (client at {addr})",
                        self.what
                    );
                    c.blocklist(addr.trim())?;
                }
                None => tracing::warn!(
                    "{}: the previous writer also wrote to cluster {fsid}, where this pool has no device now: \
                     not fenced there",
                    self.what
                ),
            }
        }
        Ok(())
    }

    fn lock(&self, flags: u8) -> i32 {
        let mut tv = libc::timeval {
            tv_sec: self.duration.as_secs() as libc::time_t,
            tv_usec: self.duration.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: a live io context, NUL-terminated strings that outlive the
        // call, and a timeval librados only reads.
        unsafe {
            ffi::rados_lock_exclusive(
                self.ioctx,
                self.oid.as_ptr(),
                self.name.as_ptr(),
                self.cookie.as_ptr(),
                self.desc.as_ptr(),
                &mut tv,
                flags,
            )
        }
    }

    /// After the lease lapsed (no renewal for its duration, the cluster
    /// not answering): holds the lock again (renewed if the lock still
    /// names this holder, taken afresh if it expired and went), and then
    /// keeps it only if the lease object still records this client's
    /// address. Any other holder since would have recorded its own (or
    /// removed it on a clean release), and would have blocklisted this
    /// client, whose calls then fail for good.
    fn regain(&self) -> Regain {
        let mut ret = self.lock(LOCK_FLAG_MUST_RENEW);
        if ret == -libc::ENOENT {
            ret = self.lock(0);
        }
        if ret < 0 {
            return if transient(ret) {
                Regain::Again(os_err(ret).to_string())
            } else {
                let by = self.holders().map_or(String::new(), |h| format!(", held by {h}"));
                Regain::Never(format!("{}{by}", os_err(ret)))
            };
        }
        let own = match self.record() {
            Ok(a) => a,
            Err(e) => return self.give_back(format!("this client's address: {e}")),
        };
        match self.writer() {
            Ok(w) if w == own => Regain::Regained,
            Ok(w) if w.is_empty() => {
                self.give_back("the lease object records no writer: another host held the pool and released it".into())
            }
            Ok(w) => self.give_back(format!("the lease object records another writer, the client at {w}")),
            // Held: the next try renews it and reads again.
            Err(ret) if transient(ret) => Regain::Again(format!("reading the writer: {}", os_err(ret))),
            Err(ret) => self.give_back(format!("reading the writer: {}", os_err(ret))),
        }
    }

    /// What this holder records on the lease object
    /// (`LEASE_WRITER_XATTR`): its address on the lease's connection, then
    /// a line `FSID ADDRESS` for each connection to another cluster.
    fn record(&self) -> Result<String> {
        let mut r = self.cluster.addrs()?;
        for c in &self.others {
            r.push_str(&format!("\n{} {}", c.fsid()?, c.addrs()?));
        }
        Ok(r)
    }

    /// Releases a lock taken back in vain.
    fn give_back(&self, why: String) -> Regain {
        // SAFETY: a live io context and NUL-terminated strings.
        let ret = unsafe { ffi::rados_unlock(self.ioctx, self.oid.as_ptr(), self.name.as_ptr(), self.cookie.as_ptr()) };
        if ret < 0 && ret != -libc::ENOENT {
            tracing::warn!("{}: releasing the lease: {}", self.what, os_err(ret));
        }
        Regain::Never(why)
    }

    /// The writer's address recorded on the lease object ("" if none), or
    /// the error of reading it.
    fn writer(&self) -> std::result::Result<String, i32> {
        let xattr = CString::new(LEASE_WRITER_XATTR).map_err(|_| -libc::EINVAL)?;
        let mut buf = vec![0u8; 4096];
        // SAFETY: a live io context, NUL-terminated names and a buffer
        // valid for `buf.len()` bytes.
        let n = unsafe {
            ffi::rados_getxattr(self.ioctx, self.oid.as_ptr(), xattr.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
        };
        if n == -libc::ENOENT || n == -libc::ENODATA {
            return Ok(String::new());
        }
        if n < 0 {
            return Err(n);
        }
        Ok(String::from_utf8_lossy(&buf[..n as usize]).trim().to_string())
    }

    /// Who holds the lock now, in words ("client.4123 (HOST pid PID) at
    /// ADDR"), or None when nobody does.
    fn holders(&self) -> Option<String> {
        let mut exclusive: libc::c_int = 0;
        let (mut tag, mut clients, mut cookies, mut addrs) =
            (vec![0u8; 256], vec![0u8; 4096], vec![0u8; 4096], vec![0u8; 4096]);
        let (mut tag_len, mut clients_len, mut cookies_len, mut addrs_len) =
            (tag.len(), clients.len(), cookies.len(), addrs.len());
        // SAFETY: every buffer is valid for the length passed beside it,
        // which librados reads and updates.
        let n = unsafe {
            ffi::rados_list_lockers(
                self.ioctx,
                self.oid.as_ptr(),
                self.name.as_ptr(),
                &mut exclusive,
                tag.as_mut_ptr().cast(),
                &mut tag_len,
                clients.as_mut_ptr().cast(),
                &mut clients_len,
                cookies.as_mut_ptr().cast(),
                &mut cookies_len,
                addrs.as_mut_ptr().cast(),
                &mut addrs_len,
            )
        };
        if n <= 0 {
            return None;
        }
        let first = |b: &[u8], len: usize| {
            let b = &b[..len.min(b.len())];
            String::from_utf8_lossy(b.split(|&c| c == 0).next().unwrap_or_default()).into_owned()
        };
        Some(format!(
            "{} ({}) at {}",
            first(&clients, clients_len),
            first(&cookies, cookies_len),
            first(&addrs, addrs_len)
        ))
    }
}

impl RadosLease {
    /// Takes the lease on `object` in the RADOS pool `pool` for `holder` (a
    /// description: host and process), or fails with [`Error::Busy`] naming
    /// the client that holds it. Renewed every third of `duration` until
    /// dropped.
    pub fn take(
        cluster: Arc<RadosCluster>,
        pool: &str,
        object: &str,
        holder: &str,
        duration: Duration,
    ) -> Result<RadosLease> {
        Self::take_with(cluster, Vec::new(), pool, object, holder, duration)
    }

    /// [`RadosLease::take`] for a pool that also has devices in the
    /// clusters of `others` (their connections, which the devices use):
    /// the previous holder is fenced in each, and this one recorded.
    pub fn take_with(
        cluster: Arc<RadosCluster>,
        others: Vec<Arc<RadosCluster>>,
        pool: &str,
        object: &str,
        holder: &str,
        duration: Duration,
    ) -> Result<RadosLease> {
        let what = format!("rados:{pool}/{object}");
        // Renewals in a full pool fail (and are tried again) rather than
        // wait until it is not full (`RadosCluster::io_context`).
        let ioctx = cluster.io_context(pool, &what)?;
        // The cookie tells holders apart: this process, and this lease in it.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let cookie = format!("{holder} lease {}", NEXT.fetch_add(1, Ordering::Relaxed));
        let shared = Arc::new(LeaseShared {
            cluster,
            others,
            ioctx,
            what: what.clone(),
            oid: cstring(object, "lease object")?,
            name: cstring(LEASE_LOCK, "lock name")?,
            cookie: cstring(&cookie, "lease holder")?,
            desc: cstring(&format!("hurricane pool written by {holder}"), "lease holder")?,
            duration,
            lost: Arc::new(AtomicBool::new(false)),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let mut ret = shared.lock(0);
        if (ret == -libc::EBUSY || ret == -libc::EEXIST) && shared.holders().is_none() {
            // The holder's lease expired between the two calls: the lock
            // is free now, and taking it is what the caller asked.
            ret = shared.lock(0);
        }
        if ret == -libc::EBUSY || ret == -libc::EEXIST {
            let by = shared.holders().unwrap_or_else(|| "another client".into());
            return Err(Error::Busy(format!(
                "{what}: the pool is open for writing elsewhere, by {by}; its lease expires once that writer \
                 has stopped renewing it for the lease's duration"
            )));
        }
        if ret < 0 {
            return Err(Error::io(
                &what,
                io::Error::new(os_err(ret).kind(), format!("cannot take the lease: {}", os_err(ret))),
            ));
        }
        // Held. If this process dropped it here, the lock is released.
        let mut lease = RadosLease { shared, renewer: None, abandoned: false };
        lease.fence_previous()?;
        let s = lease.shared.clone();
        let renewer = std::thread::Builder::new()
            .name("hurricane-lease".into())
            .spawn(move || renew(&s))
            .map_err(|e| Error::io(&what, e))?;
        lease.renewer = Some(renewer);
        Ok(lease)
    }

    /// Fences the previous holder, if it did not release the lease (it
    /// died, or stalled past its lease and may wake up and write again):
    /// the address it recorded is blocklisted, so the OSDs refuse anything
    /// it still sends, before this holder replays the journal or writes.
    /// Then records this holder's own address for the next one.
    fn fence_previous(&mut self) -> Result<()> {
        let s = &*self.shared;
        let own = s.record()?;
        let xattr = cstring(LEASE_WRITER_XATTR, "xattr name")?;
        let prev = s.writer().map_err(|n| {
            Error::io(
                &s.what,
                io::Error::new(os_err(n).kind(), format!("cannot read the previous holder: {}", os_err(n))),
            )
        })?;
        // The same record is these very connections taking the lease again
        // (they abandoned it): nothing to fence.
        if !prev.is_empty() && prev != own {
            s.fence(&prev, &own).map_err(|e| {
                Error::Device(format!("{}: cannot fence the previous writer, so not taking over: {e}", s.what))
            })?;
        }
        // SAFETY: a live io context, NUL-terminated names and a value of
        // `own.len()` bytes.
        let ret =
            unsafe { ffi::rados_setxattr(s.ioctx, s.oid.as_ptr(), xattr.as_ptr(), own.as_ptr().cast(), own.len()) };
        if ret < 0 {
            return Err(Error::io(
                &s.what,
                io::Error::new(os_err(ret).kind(), format!("cannot record this holder: {}", os_err(ret))),
            ));
        }
        Ok(())
    }

    /// Whether the lease was lost (a renewal failed): the pool must not be
    /// written any more.
    pub fn is_lost(&self) -> bool {
        self.shared.lost.load(Ordering::Acquire)
    }

    /// The flag `is_lost` reads, for a holder that checks it on its own.
    pub fn lost_flag(&self) -> Arc<AtomicBool> {
        self.shared.lost.clone()
    }

    /// What is locked: `rados:POOL/OBJECT`.
    pub fn what(&self) -> &str {
        &self.shared.what
    }

    /// Stops renewing without releasing the lock, as a host that died
    /// would: the lock expires after its duration (tests).
    pub fn abandon(mut self) {
        self.abandoned = true;
        self.stop_renewer();
        // The lock is left to expire; the io context goes with `shared`.
        self.shared.lost.store(true, Ordering::Release);
    }

    fn stop_renewer(&mut self) {
        if let Ok(mut stop) = self.shared.stop.lock() {
            *stop = true;
        }
        self.shared.wake.notify_all();
        if let Some(h) = self.renewer.take() {
            let _ = h.join();
        }
    }
}

/// Errors of a lock call that may pass: the cluster did not answer in
/// time, or the pool is full.
fn transient(ret: i32) -> bool {
    matches!(-ret, libc::ETIMEDOUT | libc::ENOSPC | libc::EDQUOT | libc::EAGAIN | libc::EINTR)
}

/// What an attempt to take a lapsed lease back found.
enum Regain {
    Regained,
    /// The cluster did not answer: try again.
    Again(String),
    /// Another host held the pool, or this client was fenced: lost for good.
    Never(String),
}

/// The renewer: every third of the duration, renew (only while still held).
/// A renewal that fails for a reason that may pass (the OSD does not answer
/// in time, the pool is full) is tried again, every tenth of the duration,
/// until the lease may have expired since the last renewal that succeeded:
/// then another host may have it, so it is lost, and the renewer tries to
/// take it back ([`LeaseShared::regain`]) until the cluster answers. One
/// the cluster refuses for good (the lock is not this client's any more,
/// or this client is blocklisted) loses it at once and for good.
fn renew(s: &LeaseShared) {
    let period = s.duration / 3;
    let mut renewed = std::time::Instant::now();
    let mut wait = period;
    let sleep = |wait: Duration| -> bool {
        let Ok(guard) = s.stop.lock() else { return false };
        let Ok((stop, _)) = s.wake.wait_timeout_while(guard, wait, |stop| !*stop) else { return false };
        !*stop
    };
    loop {
        if !sleep(wait) {
            return;
        }
        let ret = s.lock(LOCK_FLAG_MUST_RENEW);
        if ret >= 0 {
            renewed = std::time::Instant::now();
            wait = period;
            continue;
        }
        let lapsed = renewed.elapsed() >= s.duration;
        if transient(ret) && !lapsed {
            tracing::warn!(
                "{}: the lease could not be renewed ({}); trying again while it lasts ({:.1?} since the last renewal)",
                s.what,
                os_err(ret),
                renewed.elapsed()
            );
            wait = s.duration / 10;
            continue;
        }
        s.lost.store(true, Ordering::Release);
        let why = match -ret {
            libc::ESHUTDOWN => "this client was blocklisted: another host took the pool over".to_string(),
            libc::ENOENT | libc::EBUSY => "the lock is not this client's any more".to_string(),
            _ if lapsed => format!("{}, and {:.1?} passed since the last renewal", os_err(ret), renewed.elapsed()),
            _ => os_err(ret).to_string(),
        };
        if !transient(ret) {
            tracing::error!(
                "{}: the lease could not be renewed ({why}): this process no longer writes the pool",
                s.what
            );
            return;
        }
        tracing::error!(
            "{}: the lease could not be renewed ({why}): writes are refused until it is taken back, which \
             happens when the cluster answers again if no other host took the pool over meanwhile",
            s.what
        );
        // Lapsed in a stall: take it back once the cluster answers.
        loop {
            if !sleep(s.duration / 10) {
                return;
            }
            match s.regain() {
                Regain::Regained => break,
                Regain::Again(why) => tracing::debug!("{}: the lease is not back yet ({why})", s.what),
                Regain::Never(why) => {
                    tracing::error!(
                        "{}: the lease cannot be taken back ({why}): this process no longer writes the pool",
                        s.what
                    );
                    return;
                }
            }
        }
        tracing::warn!(
            "{}: the lease is back after {:.1?} without a renewal, and no other host held the pool meanwhile: \
             writes go on",
            s.what,
            renewed.elapsed()
        );
        renewed = std::time::Instant::now();
        s.lost.store(false, Ordering::Release);
        wait = period;
    }
}

impl Drop for RadosLease {
    fn drop(&mut self) {
        self.stop_renewer();
        if !self.abandoned && !self.is_lost() {
            // A clean release: nobody to fence after this holder.
            if let Ok(x) = CString::new(LEASE_WRITER_XATTR) {
                // SAFETY: a live io context and NUL-terminated strings.
                let ret = unsafe { ffi::rados_rmxattr(self.shared.ioctx, self.shared.oid.as_ptr(), x.as_ptr()) };
                if ret < 0 && ret != -libc::ENOENT && ret != -libc::ENODATA {
                    tracing::warn!("{}: clearing the holder's address: {}", self.shared.what, os_err(ret));
                }
            }
            // SAFETY: a live io context and NUL-terminated strings.
            let ret = unsafe {
                ffi::rados_unlock(
                    self.shared.ioctx,
                    self.shared.oid.as_ptr(),
                    self.shared.name.as_ptr(),
                    self.shared.cookie.as_ptr(),
                )
            };
            if ret < 0 && ret != -libc::ENOENT {
                tracing::warn!("{}: releasing the lease: {}", self.shared.what, os_err(ret));
            }
        }
    }
}

impl Drop for LeaseShared {
    fn drop(&mut self) {
        // SAFETY: no operation is in flight on the context (the lock calls
        // are synchronous), and the cluster outlives it (held above).
        unsafe { ffi::rados_ioctx_destroy(self.ioctx) }
    }
}
