"""Reads land in NumPy arrays in place; writes take arrays as they are."""

import numpy as np
import pytest


def write_array(pool, path, arr, layout=None):
    with pool.create(path, layout=layout) as f:
        assert f.write(arr) == arr.nbytes


def test_readinto_fills_the_array_in_place(pool):
    src = np.arange(1 << 18, dtype=np.float64)
    write_array(pool, "/a.f64", src, layout="regions(size=512K,width=4)")
    dst = np.zeros_like(src)
    address = dst.ctypes.data
    with pool.open("/a.f64") as f:
        assert f.readinto(dst) == src.nbytes
    # No copy: the bytes arrived in the array's own memory.
    assert dst.ctypes.data == address
    np.testing.assert_array_equal(dst, src)


def test_readinto_a_view_writes_through_to_its_base(pool):
    src = np.arange(1000, dtype=np.int32)
    write_array(pool, "/b", src)
    base = np.full(2000, -1, dtype=np.int32)
    view = base[500:1500]  # contiguous view into base
    with pool.open("/b") as f:
        f.readinto(view)
    np.testing.assert_array_equal(base[500:1500], src)
    assert (base[:500] == -1).all() and (base[1500:] == -1).all()


def test_2d_arrays_in_either_order(pool):
    m = np.arange(64 * 48, dtype=np.float32).reshape(64, 48)
    write_array(pool, "/c", m)
    out = np.empty((64, 48), dtype=np.float32)
    with pool.open("/c") as f:
        f.readinto(out)
    np.testing.assert_array_equal(out, m)
    # Fortran order: the bytes are taken in memory order.
    fo = np.asfortranarray(m)
    write_array(pool, "/d", fo)
    back = np.empty((48, 64), dtype=np.float32)
    with pool.open("/d") as f:
        f.readinto(back)
    np.testing.assert_array_equal(back.T, m)


def test_unusable_buffers_are_refused(pool):
    write_array(pool, "/e", np.ones(100, dtype=np.uint8))
    with pool.open("/e") as f:
        with pytest.raises(TypeError, match="read-only"):
            f.readinto(b"immutable bytes")
        ro = np.zeros(10, dtype=np.uint8)
        ro.flags.writeable = False
        with pytest.raises(TypeError, match="read-only"):
            f.readinto(ro)
        strided = np.zeros(100, dtype=np.uint8)[::2]
        with pytest.raises(BufferError):
            f.readinto(strided)
        with pytest.raises(TypeError):
            f.readinto([0] * 10)


def test_memmap_style_region_update(pool):
    # One region rewritten from a slice of a bigger array.
    big = np.arange(1 << 16, dtype=np.uint16)
    write_array(pool, "/g", big)
    patch = np.full(1000, 7, dtype=np.uint16)
    with pool.open("/g", "r+b") as f:
        f.write_at(patch, 2 * 30_000)
        out = np.empty_like(big)
        f.readinto_at(out, 0)
    big[30_000:31_000] = 7
    np.testing.assert_array_equal(out, big)
