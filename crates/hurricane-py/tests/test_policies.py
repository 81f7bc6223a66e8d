"""Per-open compositions (cursor, prefetch, locks) from Python threads."""

import threading

import pytest

from conftest import pattern


def test_per_thread_cursors_read_their_own_regions(pool):
    n, region = 4, 256 * 1024
    body = pattern(n * region, seed=11)
    with pool.create("/m", layout="regions(size=256K,width=4)") as f:
        f.write(body)
    got = [None] * n
    with pool.open("/m", spec="cursor=per-thread,prefetch=distance(d=4,a=1,per=thread)") as f:
        assert f.spec.startswith("cursor=per-thread")
        barrier = threading.Barrier(n)

        def reader(i):
            f.seek(i * region)
            barrier.wait()
            chunks = [f.read(16 * 1024) for _ in range(region // (16 * 1024))]
            got[i] = (b"".join(chunks), f.tell())

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # This thread's own cursor never moved.
        assert f.tell() == 0
    for i in range(n):
        data, pos = got[i]
        assert data == body[i * region:(i + 1) * region], f"thread {i} read another region"
        assert pos == (i + 1) * region


def test_shared_cursor_is_one_stream(pool):
    body = pattern(64 * 1024, seed=2)
    with pool.create("/s") as f:
        f.write(body)
    with pool.open("/s", spec="cursor=shared") as f:
        parts = []
        lock = threading.Lock()

        def reader():
            while True:
                with lock:
                    chunk = f.read(4096)
                    if not chunk:
                        return
                    parts.append(chunk)

        threads = [threading.Thread(target=reader) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert b"".join(parts) == body


def test_spec_changes_while_open_and_defaults(pool):
    pool.mkdir("/d")
    pool.set_open_spec("/d", "cursor=per-thread,prefetch=next")
    with pool.create("/d/f") as f:
        f.write(bytes(100_000))
    assert pool.open_spec("/d/f").startswith("cursor=per-thread,prefetch=next")
    with pool.open("/d/f") as f:
        assert f.spec.startswith("cursor=per-thread,prefetch=next")
        f.spec = "cursor=shared,prefetch=none"
        assert f.spec.startswith("cursor=shared,prefetch=none")
    with pool.open("/d/f", spec="prefetch=distance(d=8,a=2)") as f:
        f.read()
        assert f.stats()["prefetch_requests"] > 0


def test_transactions(pool):
    with pool.create("/acct") as f:
        f.write(bytes(8192))
    pool.set_transactional("/acct")
    f = pool.open("/acct", "r+b")
    with pool.transaction() as t:
        t.write(f, 0, b"AAAA")
        assert t.read(f, 0, 4) == b"AAAA", "a transaction sees its own writes"
        assert f.read_at(4, 0) == bytes(4), "others do not, before the commit"
    assert f.read_at(4, 0) == b"AAAA"
    with pytest.raises(RuntimeError):
        with pool.transaction() as t:
            t.write(f, 0, b"BBBB")
            raise RuntimeError("abort")
    assert f.read_at(4, 0) == b"AAAA", "a block that raised is aborted"
    t = pool.transaction()
    t.write(f, 4096, b"C")
    t.abort()
    with pytest.raises(ValueError, match="closed transaction"):
        t.commit()
    assert f.read_at(1, 4096) == b"\0"
    with pool.create("/plain") as g:
        with pool.transaction() as t:
            with pytest.raises(OSError, match="not protected"):
                t.write(g, 0, b"x")
    f.close()


def test_other_writers_wait_for_a_transaction_with_the_gil_released(pool):
    """A plain write to bytes a transaction holds waits for its commit;
    meanwhile this thread runs Python code and commits, which it could not
    do if the waiting write held the GIL."""
    with pool.create("/p") as f:
        f.write(bytes(4096))
    pool.set_transactional("/p")
    f = pool.open("/p", "r+b")
    t = pool.transaction()
    t.write(f, 0, b"T")
    done = threading.Event()

    def writer():
        f.write_at(b"W", 0)
        done.set()

    w = threading.Thread(target=writer)
    w.start()
    assert not done.wait(0.3), "the write should wait for the transaction"
    t.commit()
    w.join(timeout=30)
    assert done.is_set()
    assert f.read_at(1, 0) == b"W"
    f.close()
