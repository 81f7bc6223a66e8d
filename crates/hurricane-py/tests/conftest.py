import os

import pytest

import hurricane


def pattern(n: int, seed: int = 0) -> bytes:
    """n bytes that differ with position and seed (no repeating blocks)."""
    import random

    return random.Random(seed).randbytes(n)


@pytest.fixture
def pool():
    """A four-device pool in memory."""
    with hurricane.Pool.memory(devices=4, size="64M") as p:
        yield p


@pytest.fixture
def pool_dir(tmp_path):
    """A directory holding a fresh three-device pool of image files."""
    d = tmp_path / "pool"
    paths = hurricane.Pool.mkfs(d, devices=3, size="64M")
    assert [os.path.basename(p) for p in paths] == ["dev0.img", "dev1.img", "dev2.img"]
    return d
