"""Hurricane pools from Python.

The in-process Hurricane engine: a pool of devices whose files each have
their own layout (stripes, regions, replicas, parity, small-file groups...)
and whose open instances each compose their own cursor, prefetch and lock
policies, without a kernel crossing. Reads and writes release the GIL and
move data straight between the engine and any Python buffer (``bytearray``,
``memoryview``, NumPy arrays).

>>> import hurricane
>>> with hurricane.Pool.memory(devices=2, size="32M") as pool:
...     with pool.create("/a.bin", layout="regions(size=1M,width=2)") as f:
...         f.write(b"hello")
...     pool.layout("/a.bin").startswith("regions(size=1M)")
5
True

Errors are ``OSError`` with the engine's errno, so the usual subclasses
apply (``FileNotFoundError``, ``FileExistsError``, ``PermissionError``,
``IsADirectoryError``...); a malformed layout or open spec is an
``OSError`` with errno ``EINVAL`` and the parser's message.
"""

from __future__ import annotations

import io
import os
import stat as _stat

from . import _native
from ._native import BLOCK_SIZE, RangeLock, RawFile, Transaction, layout_types, read_regions

__all__ = [
    "BLOCK_SIZE",
    "DirEntry",
    "File",
    "Pool",
    "RangeLock",
    "RawFile",
    "Transaction",
    "layout_types",
    "read_regions",
]


class _PoolOrFileOpen:
    """``Pool.open(directory)`` opens a pool; ``pool.open(path, mode)`` a file."""

    def __get__(self, pool, owner):
        if pool is None:
            return owner._open_pool
        return pool._open_file


class Pool:
    """An open Hurricane pool: its files, layouts and directory defaults.

    ``Pool.mkfs(directory, devices, size)`` makes a pool of image files (or,
    with ``paths=``, on block devices), ``Pool.open(directory)`` opens one,
    ``Pool.memory(devices, size)`` makes one in memory. A pool is a context
    manager: leaving the ``with`` block closes it (a checkpoint, then a clean
    shutdown). Paths are absolute within the pool.
    """

    __slots__ = ("_pool",)

    def __init__(self, native: _native.Pool):
        if not isinstance(native, _native.Pool):
            raise TypeError("use Pool.open, Pool.mkfs or Pool.memory")
        self._pool = native

    mkfs = staticmethod(_native.Pool.mkfs)
    open = _PoolOrFileOpen()

    @classmethod
    def _open_pool(cls, directory, *, read_only: bool = False, cache_size=None) -> "Pool":
        return cls(_native.Pool.open_pool(directory, read_only=read_only, cache_size=cache_size))

    _open_pool.__func__.__doc__ = _native.Pool.open_pool.__doc__

    @classmethod
    def memory(cls, devices: int = 3, size=None, *, layout=None, checksum: bool = True, cache_size=None) -> "Pool":
        return cls(_native.Pool.memory(devices, size, layout=layout, checksum=checksum, cache_size=cache_size))

    memory.__func__.__doc__ = _native.Pool.memory.__doc__

    def _open_file(self, path, mode: str = "rb", *, spec=None, layout=None, perm: int = 0o644) -> "File":
        return self._pool.open(path, mode, spec=spec, layout=layout, perm=perm)

    _open_file.__doc__ = _native.Pool.open.__doc__

    @property
    def default_layout(self) -> str:
        """The layout new files get where no directory default applies."""
        return self._pool.default_layout

    @property
    def closed(self) -> bool:
        return self._pool.closed

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc) -> bool:
        self._pool.close()
        return False

    def __repr__(self) -> str:
        return repr(self._pool)


def _delegate(name: str):
    native = getattr(_native.Pool, name)

    def method(self, *args, **kwargs):
        return getattr(self._pool, name)(*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = native.__doc__
    return method


for _name in (
    "create", "layout", "set_layout", "dir_layout", "set_dir_layout", "open_spec", "set_open_spec",
    "set_transactional", "transaction", "stat", "exists", "listdir", "scandir", "mkdir", "makedirs",
    "rmdir", "unlink", "remove", "rename", "symlink", "readlink", "link", "truncate", "chmod",
    "getxattr", "setxattr", "listxattr", "stats", "sync", "checkpoint", "drop_caches", "close",
):
    setattr(Pool, _name, _delegate(_name))
del _name


class File(io.RawIOBase):
    """An open Hurricane file, following ``io.RawIOBase``.

    Made by ``Pool.open`` and ``Pool.create``. ``readinto`` fills any
    writable buffer in place and ``write`` takes any bytes-like object, both
    with the GIL released; ``read_at``/``readinto_at``/``write_at`` are
    positioned and leave the cursor alone. The cursor is shared by the
    instance or is each thread's own (``spec="cursor=per-thread"``), so
    threads can each stream their own region of one file. ``spec`` can be
    changed while the file is open (``f.spec = "prefetch=next"``).
    """

    def __init__(self, raw: RawFile, name: str, mode: str):
        super().__init__()
        self._raw = raw
        self.name = name
        self.mode = mode if "b" in mode else mode + "b"

    # -- io.RawIOBase ----------------------------------------------------

    def readable(self) -> bool:
        """Whether the file was opened for reading."""
        self._checkClosed()
        return self._raw.readable()

    def writable(self) -> bool:
        """Whether the file was opened for writing."""
        self._checkClosed()
        return self._raw.writable()

    def seekable(self) -> bool:
        """Always true."""
        self._checkClosed()
        return True

    def readinto(self, buffer) -> int:
        """Reads into ``buffer`` (any writable contiguous buffer) at the
        cursor, in place, the GIL released; returns the count (0 at the end)."""
        self._checkClosed()
        return self._raw.readinto(buffer)

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes at the cursor (all that is left when negative)."""
        self._checkClosed()
        return self._raw.read(-1 if size is None else size)

    def readall(self) -> bytes:
        """Everything from the cursor to the end."""
        return self.read(-1)

    def write(self, data) -> int:
        """Writes ``data`` (any bytes-like object) at the cursor, or at the
        end in append mode, the GIL released; returns the count."""
        self._checkClosed()
        return self._raw.write(data)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        """Moves the cursor (the calling thread's, with a per-thread cursor)."""
        self._checkClosed()
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        """The cursor's position."""
        self._checkClosed()
        return self._raw.tell()

    def truncate(self, size: int | None = None) -> int:
        """Sets the file's length (default: the cursor's position)."""
        self._checkClosed()
        return self._raw.truncate(self._raw.tell() if size is None else size)

    def flush(self) -> None:
        """Nothing to do: use ``sync()`` for durability."""
        # Writes go to the engine as they are made: nothing is held here.
        self._checkClosed()

    def fileno(self) -> int:
        """Raises ``io.UnsupportedOperation``: the file lives in the process."""
        raise io.UnsupportedOperation("a Hurricane file has no file descriptor")

    def isatty(self) -> bool:
        """Always false."""
        self._checkClosed()
        return False

    def close(self) -> None:
        """Ends the instance (after calls running on it return)."""
        if not self.closed:
            try:
                super().close()
            finally:
                self._raw.close()

    # -- Hurricane -------------------------------------------------------

    def readinto_at(self, buffer, offset: int) -> int:
        """Reads into ``buffer`` at ``offset``; the cursor does not move."""
        self._checkClosed()
        return self._raw.readinto_at(buffer, offset)

    def read_at(self, size: int, offset: int) -> bytes:
        """Up to ``size`` bytes at ``offset``; the cursor does not move."""
        self._checkClosed()
        return self._raw.read_at(size, offset)

    def write_at(self, data, offset: int) -> int:
        """Writes ``data`` at ``offset``; the cursor does not move."""
        self._checkClosed()
        return self._raw.write_at(data, offset)

    def lock(self, start: int, length: int, exclusive: bool = True, blocking: bool = True) -> RangeLock:
        """An advisory lock on ``[start, start+length)`` of this instance
        (``length`` 0: to the end); a context manager. Waits, GIL released,
        for conflicting locks of other threads (``blocking=False``: raises
        ``BlockingIOError``). With ``spec="locks=auto"`` reads and writes
        take such locks themselves."""
        self._checkClosed()
        return self._raw.lock(start, length, exclusive, blocking)

    def sync(self) -> None:
        """Makes the file's data and meta-data durable (``fsync``)."""
        self._checkClosed()
        self._raw.sync()

    @property
    def size(self) -> int:
        """The file's length in bytes."""
        return self._raw.size

    @property
    def ino(self) -> int:
        """The file's inode number."""
        return self._raw.ino

    @property
    def layout(self) -> str:
        """The file's layout, canonical, as stored."""
        return self._raw.layout

    @property
    def spec(self) -> str:
        """The open composition in force; assign a spec to change it."""
        return self._raw.spec

    @spec.setter
    def spec(self, value: str) -> None:
        self._raw.spec = value

    def stats(self) -> dict:
        """What this instance did: reads and prefetch requests."""
        return self._raw.stats()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<hurricane.File name={self.name!r} mode={self.mode!r} ({state})>"


class DirEntry:
    """An entry of ``Pool.scandir``, shaped as ``os.DirEntry``."""

    __slots__ = ("_pool", "name", "path", "_ino", "_kind", "_cached")

    # ``kind`` is the entry's file type as ``stat.S_IFMT`` gives it.

    def __init__(self, pool: Pool, directory: str, name: str, ino: int, kind: int):
        self._pool = pool
        self.name = name
        self.path = directory.rstrip("/") + "/" + name
        self._ino = ino
        self._kind = kind
        self._cached = None

    def inode(self) -> int:
        return self._ino

    def _type(self, follow_symlinks: bool):
        if self._kind == _stat.S_IFLNK and follow_symlinks:
            try:
                return _stat.S_IFMT(self.stat().st_mode)
            except FileNotFoundError:
                return None
        return self._kind

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return self._type(follow_symlinks) == _stat.S_IFDIR

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return self._type(follow_symlinks) == _stat.S_IFREG

    def is_symlink(self) -> bool:
        return self._kind == _stat.S_IFLNK

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        if follow_symlinks and self._cached is not None:
            return self._cached
        st = self._pool.stat(self.path, follow_symlinks=follow_symlinks)
        if follow_symlinks:
            self._cached = st
        return st

    def __fspath__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"<hurricane.DirEntry {self.name!r}>"
