"""Reads release the GIL: threads reading one file overlap in time."""

import threading
import time

import numpy as np
import pytest

import hurricane


def test_a_read_waiting_for_a_lock_lets_other_threads_run(pool):
    """A read of an instance with locks=auto waits for an exclusive lock this
    thread holds; meanwhile this thread runs Python code and releases the
    lock, which it could not do if the waiting read held the GIL."""
    with pool.create("/l") as f:
        f.write(b"before")
    f = pool.open("/l", "r+b", spec="locks=auto")
    got = []
    lock = f.lock(0, 0)
    reader = threading.Thread(target=lambda: got.append(f.read_at(6, 0)))
    reader.start()
    reader.join(timeout=0.3)
    assert reader.is_alive() and not got, "the read should wait for the lock"
    spins = sum(1 for _ in range(100_000))  # Python runs while it waits
    lock.release()
    reader.join(timeout=30)
    assert got == [b"before"] and spins == 100_000
    with f.lock(0, 3, exclusive=False), f.lock(3, 3, exclusive=False):
        with pytest.raises(BlockingIOError):
            f.lock(0, 6, blocking=False)
    f.close()


def test_threads_read_concurrently(pool):
    """Reads overlap in time: while one thread is inside a read, another
    enters its own. With the GIL held through a read, two reads could only
    touch at an interpreter switch, never share most of their time."""
    n = 2
    region = 32 << 20
    src = np.random.default_rng(5).integers(0, 255, n * region, dtype=np.uint8)
    with pool.create("/big", layout=f"regions(size=1M,width={n})") as f:
        f.write(src)
    bufs = [np.empty(region, dtype=np.uint8) for _ in range(n)]
    best = 0.0
    with pool.open("/big", spec="cursor=per-thread,prefetch=none") as f:
        for attempt in range(5):
            spans = [None] * n
            barrier = threading.Barrier(n)

            def reader(i):
                barrier.wait()
                t0 = time.perf_counter()
                got = f.readinto_at(bufs[i], i * region)
                spans[i] = (t0, time.perf_counter(), got)

            threads = [threading.Thread(target=reader, args=(i,)) for i in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for i in range(n):
                assert spans[i][2] == region
                np.testing.assert_array_equal(bufs[i], src[i * region:(i + 1) * region])
            (a0, a1, _), (b0, b1, _) = spans
            overlap = max(0.0, min(a1, b1) - max(a0, b0))
            best = max(best, overlap / min(a1 - a0, b1 - b0))
            if best > 0.5:
                break
    assert best > 0.5, f"the reads shared at most {best:.0%} of the shorter one's time"


def test_rust_reference_reader_reads_every_byte(pool):
    data = bytes(range(256)) * 4096
    with pool.create("/r", layout="regions(size=256K,width=4)") as f:
        f.write(data)
    with pool.open("/r", spec="cursor=per-thread") as f:
        assert hurricane.read_regions(f, 4, 64 * 1024) == len(data)
        assert hurricane.read_regions(f, 3, 100_000) == len(data)
        out = bytearray(len(data))
        assert hurricane.read_regions(f, 3, 100_000, out) == len(data)
        assert out == data, "each Rust thread filled its own slice"
        with pytest.raises(ValueError, match="holds"):
            hurricane.read_regions(f, 2, 4096, bytearray(10))
