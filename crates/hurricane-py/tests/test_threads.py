"""Reads release the GIL: threads reading one file overlap in time."""

import threading
import time

import numpy as np
import pytest

import hurricane


def test_threads_read_concurrently(pool):
    n = 4
    region = 8 << 20
    src = np.random.default_rng(5).integers(0, 255, n * region, dtype=np.uint8)
    with pool.create("/big", layout=f"regions(size=1M,width={n})") as f:
        f.write(src)
    bufs = [np.empty(region, dtype=np.uint8) for _ in range(n)]
    spans = [None] * n
    barrier = threading.Barrier(n)
    with pool.open("/big", spec="cursor=per-thread,prefetch=none") as f:

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
    # Every thread entered its read before any finished: the reads ran at
    # once, which they cannot while one of them holds the GIL.
    last_start = max(s for s, _, _ in spans)
    first_end = min(e for _, e, _ in spans)
    assert last_start < first_end, f"reads did not overlap: {spans}"


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
