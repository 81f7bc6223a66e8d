//! `hurricane.Pool`: an open pool and its namespace.

use crate::error::{closed, size_arg, OrRaise};
use crate::file::RawFile;
use crate::txn::Transaction;
use hurricane::device::{Device, MemDevice};
use hurricane::open::{OpenFile, OpenSpec};
use hurricane::{Creds, FormatOptions, Fs, Options, SetAttr};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// An open Hurricane pool: its files, layouts and directory defaults.
///
/// Make one with ``Pool.mkfs`` (image files or block devices) and open it
/// with ``Pool.open``, or make a pool in memory with ``Pool.memory``. A pool
/// is a context manager: leaving the ``with`` block closes it (a
/// checkpoint, then a clean shutdown). Paths are absolute within the pool.
#[pyclass(frozen, module = "hurricane._native")]
pub struct Pool {
    fs: Fs,
    closed: AtomicBool,
    origin: String,
}

fn text(path: PathBuf) -> PyResult<String> {
    path.into_os_string().into_string().map_err(|p| PyValueError::new_err(format!("path {p:?} is not valid UTF-8")))
}

fn format_options(
    layout: Option<String>,
    meta_layout: Option<String>,
    checksum: bool,
    journal_size: Option<&Bound<'_, PyAny>>,
) -> PyResult<FormatOptions> {
    Ok(FormatOptions {
        journal_size: journal_size.map(size_arg).transpose()?,
        default_layout: layout,
        meta_layout,
        checksum,
        name: None,
    })
}

fn options(read_only: bool, cache_size: Option<&Bound<'_, PyAny>>) -> PyResult<Options> {
    let mut o = Options { read_only, ..Options::default() };
    if let Some(c) = cache_size {
        o.cache_bytes = size_arg(c)?;
    }
    Ok(o)
}

/// The access a mode string asks for: (read, write, append, create,
/// truncate, exclusive).
pub(crate) struct Mode {
    pub read: bool,
    pub write: bool,
    pub append: bool,
    pub create: bool,
    pub truncate: bool,
    pub exclusive: bool,
}

/// Parses a binary mode as `open()` takes it: one of r, w, a, x, then
/// optionally + and b (in any order). Text mode is refused.
pub(crate) fn parse_mode(mode: &str) -> PyResult<Mode> {
    let bad = || PyValueError::new_err(format!("invalid mode: {mode:?} (binary modes only: r, w, a, x, with + and b)"));
    let mut chars = mode.chars();
    let first = chars.next().ok_or_else(bad)?;
    let (mut plus, mut b) = (false, false);
    for c in chars {
        match c {
            '+' if !plus => plus = true,
            'b' if !b => b = true,
            _ => return Err(bad()),
        }
    }
    let m = match first {
        'r' => Mode { read: true, write: plus, append: false, create: false, truncate: false, exclusive: false },
        'w' => Mode { read: plus, write: true, append: false, create: true, truncate: true, exclusive: false },
        'a' => Mode { read: plus, write: true, append: true, create: true, truncate: false, exclusive: false },
        'x' => Mode { read: plus, write: true, append: false, create: true, truncate: false, exclusive: true },
        _ => return Err(bad()),
    };
    Ok(m)
}

impl Pool {
    fn fs(&self) -> PyResult<&Fs> {
        if self.closed.load(Ordering::Acquire) {
            return Err(closed("pool"));
        }
        Ok(&self.fs)
    }

    fn wrap(fs: Fs, origin: String) -> Pool {
        Pool { fs, closed: AtomicBool::new(false), origin }
    }

    /// Opens `path` and wraps the instance in `hurricane.File`.
    fn open_file(
        &self,
        py: Python<'_>,
        path: String,
        mode: &str,
        spec: Option<&str>,
        layout: Option<&str>,
        perm: u32,
    ) -> PyResult<Py<PyAny>> {
        let fs = self.fs()?.clone();
        let m = parse_mode(mode)?;
        let spec = spec.map(OpenSpec::parse).transpose().or_raise()?;
        let mut o = OpenFile::options();
        o.read(m.read).write(m.write).append(m.append).create(m.create).truncate(m.truncate);
        o.create_new(m.exclusive).mode(perm);
        if let Some(l) = layout {
            o.layout(l);
        }
        if let Some(s) = spec {
            o.spec(s);
        }
        let f = py.detach(|| o.open(&fs, &path)).or_raise()?;
        let raw = RawFile::new(f, m.read, m.write);
        let cls = py.import("hurricane")?.getattr("File")?;
        Ok(cls.call1((raw, path, mode))?.unbind())
    }
}

#[pymethods]
impl Pool {
    /// Makes a new pool: ``devices`` image files of ``size`` bytes each in
    /// ``directory`` (``dev0.img``..., made as new files: one already there,
    /// or a link, is an error naming it), or, when ``paths`` is given, on those
    /// files or block devices (their whole size unless ``size`` is given),
    /// recorded in ``directory``. ``layout`` is the default layout of new
    /// files (default: striped over every device), ``checksum`` puts a
    /// checksum block above every leaf of new files. Returns the device paths.
    #[staticmethod]
    #[pyo3(signature = (directory, devices=3, size=None, *, paths=None, layout=None, meta_layout=None, checksum=true, journal_size=None))]
    #[allow(clippy::too_many_arguments)]
    fn mkfs(
        py: Python<'_>,
        directory: PathBuf,
        devices: u32,
        size: Option<&Bound<'_, PyAny>>,
        paths: Option<Vec<PathBuf>>,
        layout: Option<String>,
        meta_layout: Option<String>,
        checksum: bool,
        journal_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<String>> {
        let opts = format_options(layout, meta_layout, checksum, journal_size)?;
        let size = size.map(size_arg).transpose()?;
        match paths {
            Some(paths) => {
                py.detach(|| Fs::mkfs_devices(&directory, &paths, size, &opts)).or_raise()?;
                paths.into_iter().map(text).collect()
            }
            None => {
                if devices == 0 {
                    return Err(PyValueError::new_err("a pool needs at least one device"));
                }
                let size = size.unwrap_or(256 << 20);
                let made = py.detach(|| Fs::mkfs_dir(&directory, devices, size, &opts)).or_raise()?;
                made.into_iter().map(text).collect()
            }
        }
    }

    /// Opens the pool whose devices are recorded in ``directory``, or the
    /// pool found by name in a Ceph cluster,
    /// ``"rados:CEPHPOOL/NAME?conf=PATH"`` (builds with the ``rados``
    /// feature), replaying its journal if it was not closed cleanly. ``cache_size`` bounds the
    /// data-block cache (bytes or text such as ``"256M"``).
    #[staticmethod]
    #[pyo3(signature = (directory, *, read_only=false, cache_size=None))]
    fn open_pool(
        py: Python<'_>,
        directory: PathBuf,
        read_only: bool,
        cache_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Pool> {
        let opts = options(read_only, cache_size)?;
        let origin = directory.display().to_string();
        let fs = py
            .detach(|| {
                // A pool found by name in a Ceph cluster: this host's
                // directory for it, brought up to date from the cluster.
                let dir = match directory.to_str().filter(|d| hurricane::device::is_rados(d)) {
                    Some(loc) => hurricane::pool::published::locate(loc, &hurricane::pool::published::local_root())?,
                    None => directory.clone(),
                };
                Fs::open_dir(&dir, opts)
            })
            .or_raise()?;
        Ok(Pool::wrap(fs, origin))
    }

    /// A new pool of ``devices`` devices of ``size`` bytes each, in memory
    /// (gone when closed): for tests and scratch data.
    #[staticmethod]
    #[pyo3(signature = (devices=3, size=None, *, layout=None, checksum=true, cache_size=None))]
    fn memory(
        py: Python<'_>,
        devices: u32,
        size: Option<&Bound<'_, PyAny>>,
        layout: Option<String>,
        checksum: bool,
        cache_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Pool> {
        if devices == 0 {
            return Err(PyValueError::new_err("a pool needs at least one device"));
        }
        let size = size.map(size_arg).transpose()?.unwrap_or(64 << 20);
        let fopts = format_options(layout, None, checksum, None)?;
        let opts = options(false, cache_size)?;
        let fs = py
            .detach(|| {
                let devs: Vec<Arc<dyn Device>> = (0..devices)
                    .map(|i| Arc::new(MemDevice::new(format!("mem{i}"), size)) as Arc<dyn Device>)
                    .collect();
                Fs::format(devs.clone(), &fopts)?;
                Fs::open(devs, opts)
            })
            .or_raise()?;
        Ok(Pool::wrap(fs, format!("memory, {devices} devices")))
    }

    /// Creates a new file (``FileExistsError`` if the name is taken) with
    /// ``layout`` (default: its directory's default, else the pool's) and
    /// opens it for reading and writing; ``spec`` composes the open
    /// instance (``"cursor=per-thread,prefetch=next"``).
    #[pyo3(signature = (path, layout=None, *, mode=0o644, spec=None))]
    fn create(
        &self,
        py: Python<'_>,
        path: PathBuf,
        layout: Option<&str>,
        mode: u32,
        spec: Option<&str>,
    ) -> PyResult<Py<PyAny>> {
        self.open_file(py, text(path)?, "x+b", spec, layout, mode)
    }

    /// Opens a file as ``open()`` does, in binary: ``mode`` is one of
    /// r, w, a, x with optional + and b. ``spec`` composes the instance
    /// (cursor, prefetch, locks; default: the file's ``user.hurricane.open``,
    /// else its directory's, else the pool's); ``layout`` is the layout of a
    /// file this call creates.
    #[pyo3(signature = (path, mode="rb", *, spec=None, layout=None, perm=0o644))]
    fn open(
        &self,
        py: Python<'_>,
        path: PathBuf,
        mode: &str,
        spec: Option<&str>,
        layout: Option<&str>,
        perm: u32,
    ) -> PyResult<Py<PyAny>> {
        self.open_file(py, text(path)?, mode, spec, layout, perm)
    }

    /// A file's layout, canonical, as stored.
    fn layout(&self, py: Python<'_>, path: PathBuf) -> PyResult<String> {
        let (fs, p) = (self.fs()?, text(path)?);
        py.detach(|| fs.layout_of(&p)).or_raise()
    }

    /// Sets a file's layout: chosen for an empty file; a file holding data
    /// moves to it while it stays in use (the call returns once it is done).
    fn set_layout(&self, py: Python<'_>, path: PathBuf, spec: &str) -> PyResult<()> {
        let (fs, p) = (self.fs()?, text(path)?);
        py.detach(|| fs.set_layout(&p, spec)).or_raise()
    }

    /// A directory's default layout for files created in it ("" when none
    /// is set on it or above it).
    fn dir_layout(&self, py: Python<'_>, path: PathBuf) -> PyResult<String> {
        let (fs, p) = (self.fs()?, text(path)?);
        py.detach(|| fs.resolve(&p).and_then(|ino| fs.dir_layout_get(ino))).or_raise()
    }

    /// Sets a directory's default layout (inherited by its subdirectories
    /// that set none); ``""`` removes it.
    fn set_dir_layout(&self, py: Python<'_>, path: PathBuf, spec: &str) -> PyResult<()> {
        let (fs, p) = (self.fs()?, text(path)?);
        py.detach(|| fs.resolve(&p).and_then(|ino| fs.dir_layout_set(&Creds::root(), ino, spec))).or_raise()
    }

    /// The composition an open of ``path`` gets without a spec: the
    /// file's own ``user.hurricane.open``, else that of the nearest
    /// directory above the path, else the pool default.
    fn open_spec(&self, py: Python<'_>, path: PathBuf) -> PyResult<String> {
        let (fs, p) = (self.fs()?, text(path)?);
        py.detach(|| {
            let ino = fs.resolve(&p)?;
            let trimmed = p.trim_end_matches('/');
            let dir = match trimmed.rfind('/') {
                Some(0) | None => fs.resolve("/")?,
                Some(i) => fs.resolve(&trimmed[..i])?,
            };
            fs.open_spec_in(dir, ino)
        })
        .map(|s| s.to_string())
        .or_raise()
    }

    /// Records the composition a file (or the files of a directory) gets
    /// when opened without a spec (``user.hurricane.open``).
    fn set_open_spec(&self, py: Python<'_>, path: PathBuf, spec: &str) -> PyResult<()> {
        let (fs, p) = (self.fs()?, text(path)?);
        let spec = OpenSpec::parse(spec).or_raise()?.to_string();
        py.detach(|| {
            let ino = fs.resolve(&p)?;
            fs.setxattr(&Creds::root(), ino, hurricane::xattr::OPEN.as_bytes(), spec.as_bytes(), 0)
        })
        .or_raise()
    }

    /// Lets transactions write the file (``user.hurricane.txn``); other
    /// writes to it then take the same range locks.
    #[pyo3(signature = (path, on=true))]
    fn set_transactional(&self, py: Python<'_>, path: PathBuf, on: bool) -> PyResult<()> {
        let (fs, p) = (self.fs()?, text(path)?);
        let v: &[u8] = if on { b"1" } else { b"0" };
        py.detach(|| {
            let ino = fs.resolve(&p)?;
            fs.setxattr(&Creds::root(), ino, hurricane::xattr::TXN.as_bytes(), v, 0)
        })
        .or_raise()
    }

    /// Starts a transaction over files set transactional: ``with
    /// pool.transaction() as t: t.write(f, 0, b"...")`` commits at the end
    /// of the block, or aborts if it raised.
    fn transaction(&self) -> PyResult<Transaction> {
        Transaction::begin(self.fs()?)
    }

    /// ``os.stat_result`` of a path (of a symlink itself when
    /// ``follow_symlinks`` is false).
    #[pyo3(signature = (path, *, follow_symlinks=true))]
    fn stat<'py>(&self, py: Python<'py>, path: PathBuf, follow_symlinks: bool) -> PyResult<Bound<'py, PyAny>> {
        let (fs, p) = (self.fs()?, text(path)?);
        let a = py.detach(|| if follow_symlinks { fs.stat(&p) } else { fs.lstat(&p) }).or_raise()?;
        stat_result(py, &a)
    }

    /// Whether a path exists (following symlinks).
    fn exists(&self, py: Python<'_>, path: PathBuf) -> PyResult<bool> {
        let (fs, p) = (self.fs()?, text(path)?);
        match py.detach(|| fs.stat(&p)) {
            Ok(_) => Ok(true),
            Err(hurricane::Error::NotFound(_)) => Ok(false),
            Err(e) => Err(crate::error::to_py(e)),
        }
    }

    /// Names in a directory, without "." and "..".
    #[pyo3(signature = (path="/".into()))]
    fn listdir(&self, py: Python<'_>, path: PathBuf) -> PyResult<Vec<String>> {
        let (fs, p) = (self.fs()?, text(path)?);
        let items = py.detach(|| fs.read_dir(&p)).or_raise()?;
        Ok(items.into_iter().map(|e| String::from_utf8_lossy(&e.name).into_owned()).collect())
    }

    /// ``hurricane.DirEntry`` for each entry of a directory (name, path,
    /// inode, type, and ``stat()`` on demand), as ``os.scandir`` gives.
    #[pyo3(signature = (path="/".into()))]
    fn scandir<'py>(slf: &Bound<'py, Self>, py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyList>> {
        let p = text(path)?;
        let fs = slf.get().fs()?;
        let items = py.detach(|| fs.read_dir(&p)).or_raise()?;
        let cls = py.import("hurricane")?.getattr("DirEntry")?;
        let out = PyList::empty(py);
        for e in items {
            let name = String::from_utf8_lossy(&e.name).into_owned();
            out.append(cls.call1((slf, p.as_str(), name, e.ino, e.kind))?)?;
        }
        Ok(out)
    }

    /// Makes a directory.
    #[pyo3(signature = (path, mode=0o777))]
    fn mkdir(&self, py: Python<'_>, path: PathBuf, mode: u32) -> PyResult<()> {
        let (fs, p) = (self.fs()?, text(path)?);
        py.detach(|| fs.mkdir_path(&p, mode)).map(drop).or_raise()
    }

    /// Makes a directory and the ones above it that are missing.
    #[pyo3(signature = (path, mode=0o777, exist_ok=false))]
    fn makedirs(&self, py: Python<'_>, path: PathBuf, mode: u32, exist_ok: bool) -> PyResult<()> {
        let (fs, p) = (self.fs()?, text(path)?);
        if !exist_ok && py.detach(|| fs.stat(&p)).is_ok() {
            return Err(crate::error::to_py(hurricane::Error::Exists(p)));
        }
        py.detach(|| fs.mkdir_all(&p, mode)).map(drop).or_raise()
    }

    /// Removes an empty directory.
    fn rmdir(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        let (fs, p) = (self.fs()?, text(path)?);
        py.detach(|| match fs.lstat(&p) {
            Ok(a) if !a.is_dir() => Err(hurricane::Error::NotDir(p.clone())),
            Ok(_) => fs.remove(&p),
            Err(e) => Err(e),
        })
        .or_raise()
    }

    /// Removes a file or symlink (``IsADirectoryError`` for a directory).
    fn unlink(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        let (fs, p) = (self.fs()?, text(path)?);
        py.detach(|| match fs.lstat(&p) {
            Ok(a) if a.is_dir() => Err(hurricane::Error::IsDir(p.clone())),
            Ok(_) => fs.remove(&p),
            Err(e) => Err(e),
        })
        .or_raise()
    }

    /// Same as ``unlink``.
    fn remove(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        self.unlink(py, path)
    }

    /// Renames ``src`` to ``dst``, replacing a file there (POSIX rename).
    fn rename(&self, py: Python<'_>, src: PathBuf, dst: PathBuf) -> PyResult<()> {
        let (fs, s, d) = (self.fs()?, text(src)?, text(dst)?);
        py.detach(|| fs.rename_path(&s, &d)).or_raise()
    }

    /// Makes ``path`` a symlink to ``target``.
    fn symlink(&self, py: Python<'_>, target: &str, path: PathBuf) -> PyResult<()> {
        let (fs, p) = (self.fs()?, text(path)?);
        py.detach(|| fs.symlink_path(target, &p)).map(drop).or_raise()
    }

    /// The target of a symlink.
    fn readlink(&self, py: Python<'_>, path: PathBuf) -> PyResult<String> {
        let (fs, p) = (self.fs()?, text(path)?);
        let t = py.detach(|| fs.resolve_as(&Creds::root(), &p, false).and_then(|ino| fs.readlink(ino))).or_raise()?;
        Ok(String::from_utf8_lossy(&t).into_owned())
    }

    /// Makes ``dst`` a hard link to ``src``.
    fn link(&self, py: Python<'_>, src: PathBuf, dst: PathBuf) -> PyResult<()> {
        let (fs, s, d) = (self.fs()?, text(src)?, text(dst)?);
        py.detach(|| fs.hard_link(&s, &d)).map(drop).or_raise()
    }

    /// Changes a file's length.
    fn truncate(&self, py: Python<'_>, path: PathBuf, length: u64) -> PyResult<()> {
        let (fs, p) = (self.fs()?, text(path)?);
        let s = SetAttr { size: Some(length), ..SetAttr::default() };
        py.detach(|| fs.set_attr_path(&p, &s)).map(drop).or_raise()
    }

    /// Changes a path's permission bits.
    fn chmod(&self, py: Python<'_>, path: PathBuf, mode: u32) -> PyResult<()> {
        let (fs, p) = (self.fs()?, text(path)?);
        let s = SetAttr { mode: Some(mode & 0o7777), ..SetAttr::default() };
        py.detach(|| fs.set_attr_path(&p, &s)).map(drop).or_raise()
    }

    /// The value of an extended attribute (``OSError`` ENODATA if absent).
    fn getxattr(&self, py: Python<'_>, path: PathBuf, name: &str) -> PyResult<Vec<u8>> {
        let (fs, p) = (self.fs()?, text(path)?);
        py.detach(|| fs.resolve(&p).and_then(|ino| fs.getxattr(&Creds::root(), ino, name.as_bytes()))).or_raise()
    }

    /// Sets an extended attribute (Hurricane's own, ``user.hurricane.*``,
    /// are checked as on a mount).
    fn setxattr(&self, py: Python<'_>, path: PathBuf, name: &str, value: &[u8]) -> PyResult<()> {
        let (fs, p) = (self.fs()?, text(path)?);
        py.detach(|| fs.resolve(&p).and_then(|ino| fs.setxattr(&Creds::root(), ino, name.as_bytes(), value, 0)))
            .or_raise()
    }

    /// Names of a path's extended attributes.
    fn listxattr(&self, py: Python<'_>, path: PathBuf) -> PyResult<Vec<String>> {
        let (fs, p) = (self.fs()?, text(path)?);
        let names = py.detach(|| fs.resolve(&p).and_then(|ino| fs.listxattr(&Creds::root(), ino))).or_raise()?;
        Ok(names.into_iter().map(|n| String::from_utf8_lossy(&n).into_owned()).collect())
    }

    /// The pool's statistics: data cache, devices (requests and bytes),
    /// commits and checkpoints, small-file groups.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let fs = self.fs()?;
        let d = PyDict::new(py);
        let c = fs.cache_stats();
        let cache = PyDict::new(py);
        cache.set_item("capacity", c.capacity)?;
        cache.set_item("bytes", c.bytes)?;
        cache.set_item("blocks", c.blocks)?;
        cache.set_item("hits", c.hits)?;
        cache.set_item("misses", c.misses)?;
        cache.set_item("waits", c.waits)?;
        cache.set_item("prefetched", c.prefetched)?;
        d.set_item("cache", cache)?;
        let devices = PyList::empty(py);
        for (name, s) in fs.device_stats() {
            let dev = PyDict::new(py);
            dev.set_item("name", name)?;
            dev.set_item("reads", s.reads)?;
            dev.set_item("writes", s.writes)?;
            dev.set_item("read_bytes", s.read_bytes)?;
            dev.set_item("write_bytes", s.write_bytes)?;
            dev.set_item("flushes", s.flushes)?;
            devices.append(dev)?;
        }
        d.set_item("devices", devices)?;
        let (commits, checkpoints) = fs.commit_counts();
        d.set_item("commits", commits)?;
        d.set_item("checkpoints", checkpoints)?;
        d.set_item("unsynced_checkpoints", fs.unsynced_checkpoints())?;
        let g = fs.group_stats();
        let groups = PyDict::new(py);
        groups.set_item("groups_opened", g.groups_opened)?;
        groups.set_item("groups_taken_over", g.groups_taken_over)?;
        groups.set_item("placed_blocks", g.placed_blocks)?;
        groups.set_item("group_reads", g.group_reads)?;
        groups.set_item("blocks_read_ahead", g.blocks_read_ahead)?;
        groups.set_item("cache_hits", g.cache_hits)?;
        d.set_item("colocate", groups)?;
        let s = fs.statfs();
        let space = PyDict::new(py);
        space.set_item("block_size", s.bsize)?;
        space.set_item("blocks", s.blocks)?;
        space.set_item("blocks_free", s.bfree)?;
        space.set_item("files", s.files)?;
        space.set_item("files_free", s.ffree)?;
        d.set_item("space", space)?;
        Ok(d)
    }

    /// The layout new files get where no directory default applies.
    #[getter]
    fn default_layout(&self) -> PyResult<String> {
        Ok(self.fs()?.default_layout())
    }

    /// Makes everything done so far durable (one journal write).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let fs = self.fs()?;
        py.detach(|| fs.sync()).or_raise()
    }

    /// Writes a checkpoint of the meta-data and empties the journal.
    fn checkpoint(&self, py: Python<'_>) -> PyResult<()> {
        let fs = self.fs()?;
        py.detach(|| fs.checkpoint()).or_raise()
    }

    /// Empties the data caches, so that the next reads come from the devices.
    fn drop_caches(&self) -> PyResult<()> {
        self.fs()?.drop_caches();
        Ok(())
    }

    /// Closes the pool: a checkpoint and a clean shutdown. Files still open
    /// from it fail from then on. Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let fs = &self.fs;
        py.detach(|| fs.close()).or_raise()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { "closed" } else { "open" };
        format!("<hurricane.Pool {} ({state})>", self.origin)
    }
}

/// A pool dropped without `close` (the last reference gone, or the
/// interpreter exiting) is closed then, so that what was written is not
/// left to the journal's next replay.
impl Drop for Pool {
    fn drop(&mut self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            if let Err(e) = self.fs.close() {
                eprintln!("hurricane: closing {} when it was dropped: {e}", self.origin);
            }
        }
    }
}

/// An `os.stat_result` from an engine attribute (times in ns).
fn stat_result<'py>(py: Python<'py>, a: &hurricane::Attr) -> PyResult<Bound<'py, PyAny>> {
    let secs = |ns: i64| ns.div_euclid(1_000_000_000);
    let float = |ns: i64| ns as f64 / 1e9;
    // st_mode, st_ino, st_dev, st_nlink, st_uid, st_gid, st_size, then the
    // integer times, then (by index) the float times, the ns times, blksize,
    // blocks and rdev, as os.stat_result takes them.
    let fields = (
        (a.mode, a.ino, 0u64, a.nlink, a.uid, a.gid, a.size),
        (secs(a.atime), secs(a.mtime), secs(a.ctime)),
        (float(a.atime), float(a.mtime), float(a.ctime)),
        (a.atime, a.mtime, a.ctime),
        (a.blksize, a.blocks, a.rdev),
    );
    let ((m, i, d, n, u, g, s), (ai, mi, ci), (af, mf, cf), (an, mn, cn), (bs, bl, rd)) = fields;
    let seq = (m, i, d, n, u, g, s, ai, mi, ci).into_pyobject(py)?;
    let extra = PyDict::new(py);
    extra.set_item("st_atime", af)?;
    extra.set_item("st_mtime", mf)?;
    extra.set_item("st_ctime", cf)?;
    extra.set_item("st_atime_ns", an)?;
    extra.set_item("st_mtime_ns", mn)?;
    extra.set_item("st_ctime_ns", cn)?;
    extra.set_item("st_blksize", bs)?;
    extra.set_item("st_blocks", bl)?;
    extra.set_item("st_rdev", rd)?;
    py.import("os")?.getattr("stat_result")?.call1((seq, extra))
}

/// The block types of the layout grammar, with their parameters: a list of
/// ``(name, doc)``.
#[pyfunction]
pub fn layout_types() -> Vec<(String, String)> {
    hurricane::blocks::registry::TYPES.iter().map(|t| (t.name.to_string(), t.doc.to_string())).collect()
}
