"""Every block type round-trips data written from Python."""

import numpy as np
import pytest

import hurricane
from conftest import pattern

# (layout as written, size, how the stored layout starts)
CASES = [
    ("extent@0", 1_000_003, "checksum[extent@0]"),
    ("stripe(unit=64K,width=3)", 3_333_333, "stripe(unit=64K)["),
    ("regions(size=1M,width=3)", 2_500_000, "regions(size=1M)["),
    ("replicate(copies=2)[stripe(width=2),stripe(width=2)]", 1_234_567, "replicate["),
    ("inline", 100, "inline"),
    ("checksum[extent@2]", 300_001, "checksum[extent@2]"),
    ("parity(data=3,parity=1)", 2_000_000, "parity(data=3)["),
    ("compress(algo=lz4,chunk=16K)[extent@1]", 700_001, "compress(algo=lz4,chunk=16K)[checksum[extent@1]]"),
    ("table(map=0-64K:1;64K-1M:0;1M-:1)[extent@0,extent@2]", 1_500_000, "table(map=0-64K:1;64K-1M:0;1M-:1)["),
    ("write-mostly(unit=64K,width=3)", 2_000_001, "write-mostly(unit=64K)["),
    ("log(segment=256K)@3", 1_700_001, "checksum[log(segment=256K)@3]"),
    ("colocate@1", 12_000, "checksum[colocate"),
]


def test_every_block_type_is_covered():
    covered = {spec.replace("[", "(").replace("@", "(").split("(")[0] for spec, _, _ in CASES}
    names = {name for name, _ in hurricane.layout_types()}
    assert names <= covered, f"block types without a round trip here: {names - covered}"


@pytest.mark.parametrize("spec,size,shown", CASES, ids=[c[0].split("(")[0].split("@")[0].split("[")[0] for c in CASES])
def test_round_trip(pool, spec, size, shown):
    body = pattern(size, seed=size)
    with pool.create("/f", layout=spec) as f:
        assert f.write(body) == size
    assert pool.layout("/f").startswith(shown)
    assert pool.stat("/f").st_size == size
    pool.drop_caches()
    with pool.open("/f") as f:
        assert f.read() == body
        # The same bytes into a NumPy array, in place.
        arr = np.empty(size, dtype=np.uint8)
        assert f.readinto_at(arr, 0) == size
        assert arr.tobytes() == body
    # Overwrite the middle and read it back around the seams.
    mid = size // 3
    patch = pattern(min(size - mid, 100_000), seed=7)
    with pool.open("/f", "r+b") as f:
        f.seek(mid)
        f.write(patch)
    want = body[:mid] + patch + body[mid + len(patch):]
    with pool.open("/f") as f:
        assert f.read() == want


def test_layouts_survive_close_and_reopen(pool_dir):
    body = pattern(1_500_000, seed=3)
    with hurricane.Pool.open(pool_dir) as p:
        p.makedirs("/d/e")
        with p.create("/d/e/regions.bin", layout="regions(size=512K,width=3)") as f:
            f.write(body)
        with p.create("/d/rep.bin", layout="replicate(copies=2)") as f:
            f.write(body[:70_000])
    with hurricane.Pool.open(pool_dir) as p:
        assert p.layout("/d/e/regions.bin").startswith("regions(size=512K)[")
        with p.open("/d/e/regions.bin") as f:
            assert f.read() == body
        with p.open("/d/rep.bin") as f:
            assert f.read() == body[:70_000]
    with hurricane.Pool.open(pool_dir, read_only=True) as p:
        with pytest.raises(OSError) as e:
            p.create("/new")
        assert e.value.errno == 30  # EROFS


def test_a_pool_dropped_without_close_keeps_what_was_written(pool_dir):
    import gc

    p = hurricane.Pool.open(pool_dir)
    f = p.create("/late", layout="extent@1")
    f.write(b"written just before the last reference went")
    del f, p
    gc.collect()
    with hurricane.Pool.open(pool_dir) as p:
        with p.open("/late") as f:
            assert f.read() == b"written just before the last reference went"


def test_set_layout_moves_a_file_with_data(pool):
    body = pattern(900_000, seed=9)
    with pool.create("/m", layout="extent@0") as f:
        f.write(body)
    pool.set_layout("/m", "stripe(unit=64K,width=4)")
    assert pool.layout("/m").startswith("stripe(unit=64K)[")
    with pool.open("/m") as f:
        assert f.read() == body


def test_directory_default_layout(pool):
    pool.mkdir("/small")
    pool.set_dir_layout("/small", "colocate(group=128K)@2")
    assert pool.dir_layout("/small") == "colocate(group=128K)@2"
    with pool.create("/small/a") as f:
        f.write(b"x" * 5000)
    assert "colocate(group=128K)@2" in pool.layout("/small/a")
    pool.mkdir("/small/sub")
    with pool.create("/small/sub/b") as f:
        f.write(b"y")
    assert "colocate" in pool.layout("/small/sub/b"), "subdirectories inherit the default"
    pool.set_dir_layout("/small", "")
    assert pool.dir_layout("/small") == ""
    with pool.create("/small/c") as f:
        f.write(b"z")
    assert "colocate" not in pool.layout("/small/c")
