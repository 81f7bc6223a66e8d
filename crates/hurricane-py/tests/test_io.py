"""hurricane.File follows io.RawIOBase."""

import array
import io

import numpy as np
import pytest

from conftest import pattern


def test_is_a_raw_io_object(pool):
    with pool.create("/a") as f:
        assert isinstance(f, io.RawIOBase)
        assert f.readable() and f.writable() and f.seekable()
        assert not f.isatty()
        with pytest.raises(io.UnsupportedOperation):
            f.fileno()
    assert f.closed
    with pytest.raises(ValueError):
        f.read()
    with pytest.raises(ValueError):
        f.write(b"x")


def test_read_write_seek_tell_truncate(pool):
    with pool.create("/a") as f:
        assert f.write(b"hello world") == 11
        assert f.tell() == 11
        assert f.seek(6) == 6
        assert f.read(5) == b"world"
        assert f.read(5) == b""
        assert f.seek(-5, io.SEEK_END) == 6
        assert f.seek(-1, io.SEEK_CUR) == 5
        assert f.read() == b" world"
        assert f.truncate(5) == 5
        assert f.size == 5
        f.seek(0)
        assert f.read() == b"hello"
        f.seek(2)
        assert f.truncate() == 2, "truncate() cuts at the cursor"
        with pytest.raises(ValueError):
            f.seek(-1)
        with pytest.raises(ValueError):
            f.seek(0, 3)
        # Writing past the end leaves a hole that reads as zeros.
        f.seek(10)
        f.write(b"!")
        f.seek(0)
        assert f.read() == b"he" + bytes(8) + b"!"


def test_write_takes_any_buffer(pool):
    with pool.create("/b") as f:
        f.write(bytearray(b"ab"))
        f.write(memoryview(b"--cd--")[2:4])
        f.write(array.array("B", [101, 102]))
        f.write(np.array([0x6867], dtype="<u2"))  # bytes "gh"
        with pytest.raises(TypeError):
            f.write("text")
        f.seek(0)
        assert f.read() == b"abcdefgh"


def test_buffered_wrappers_and_lines(pool):
    lines = [b"first\n", b"second\n", b"third"]
    with pool.create("/lines") as f:
        f.write(b"".join(lines))
    with pool.open("/lines") as raw:
        assert list(raw) == lines
    with io.BufferedReader(pool.open("/lines"), buffer_size=4) as br:
        assert br.readline() == lines[0]
        assert br.read() == b"".join(lines[1:])
    with io.TextIOWrapper(io.BufferedReader(pool.open("/lines")), encoding="utf-8") as t:
        assert t.read().splitlines() == ["first", "second", "third"]


def test_modes(pool):
    with pool.open("/m", "wb") as f:
        f.write(b"12345")
        assert not f.readable()
        with pytest.raises(io.UnsupportedOperation):
            f.read()
    with pool.open("/m", "w+b") as f:  # w truncates
        assert f.read() == b""
        f.write(b"abc")
    with pool.open("/m", "ab") as f:  # a appends wherever the cursor is
        f.seek(0)
        f.write(b"def")
    with pool.open("/m", "rb") as f:
        assert f.read() == b"abcdef"
        assert not f.writable()
        with pytest.raises(io.UnsupportedOperation):
            f.write(b"x")
    with pool.open("/m", "r+b") as f:
        f.write(b"A")
        assert f.read() == b"bcdef"
    with pytest.raises(FileExistsError):
        pool.open("/m", "xb")
    with pool.open("/new", "x") as f:
        assert f.mode == "xb"
        f.write(b"n")
    with pytest.raises(FileNotFoundError):
        pool.open("/missing", "rb")
    for bad in ("rt", "r+r", "", "q", "wa", "rbb"):
        with pytest.raises(ValueError, match="invalid mode"):
            pool.open("/m", bad)


def test_positioned_io_leaves_the_cursor(pool):
    body = pattern(100_000, seed=1)
    with pool.create("/p") as f:
        f.write(body)
        f.seek(10)
        assert f.read_at(5, 50_000) == body[50_000:50_005]
        buf = bytearray(100)
        assert f.readinto_at(buf, 99_950) == 50
        assert bytes(buf[:50]) == body[99_950:]
        assert f.write_at(b"XY", 0) == 2
        assert f.tell() == 10
        assert f.read(3) == body[10:13]
        assert f.read_at(2, 0) == b"XY"


def test_sync_and_stats(pool):
    with pool.create("/s") as f:
        f.write(b"z" * 10_000)
        f.sync()
        before = pool.stats()["commits"]
        f.write(b"more")
        f.sync()
        assert pool.stats()["commits"] > before
        assert f.stats()["reads"] == 0
        f.seek(0)
        f.read()
        assert f.stats()["reads"] == 1
