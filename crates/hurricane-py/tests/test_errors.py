"""Engine errors reach Python as the matching OSError subclass."""

import errno

import pytest

import hurricane


def test_errno_subclasses(pool):
    pool.mkdir("/d")
    with pool.create("/d/f") as f:
        f.write(b"x")
    with pytest.raises(FileNotFoundError) as e:
        pool.stat("/nope")
    assert e.value.errno == errno.ENOENT
    with pytest.raises(FileExistsError):
        pool.mkdir("/d")
    with pytest.raises(FileExistsError):
        pool.create("/d/f")
    with pytest.raises(IsADirectoryError):
        pool.open("/d")
    with pytest.raises(IsADirectoryError):
        pool.unlink("/d")
    with pytest.raises(NotADirectoryError):
        pool.listdir("/d/f")
    with pytest.raises(NotADirectoryError):
        pool.rmdir("/d/f")
    with pytest.raises(OSError) as e:
        pool.rmdir("/d")
    assert e.value.errno == errno.ENOTEMPTY
    with pytest.raises(FileNotFoundError):
        pool.rename("/missing", "/x")
    with pytest.raises(OSError) as e:
        pool.getxattr("/d/f", "user.absent")
    assert e.value.errno == errno.ENODATA
    with pytest.raises(OSError) as e:
        pool.create("/" + "n" * 300)
    assert e.value.errno == errno.ENAMETOOLONG


def test_bad_layouts_are_refused_with_the_parsers_message(pool):
    cases = [
        ("strip(unit=64K)", "unknown block type"),
        ("stripe(unit=64K", "column"),
        ("stripe(unit=3K,width=2)", "unit"),
        ("extent@9", "device"),
    ]
    for spec, words in cases:
        with pytest.raises(OSError) as e:
            pool.create("/bad", layout=spec)
        assert e.value.errno == errno.EINVAL, spec
        assert words in str(e.value), f"{spec}: {e.value}"
        assert not pool.exists("/bad"), f"{spec}: a refused create left a file"
    pool.mkdir("/d")
    with pytest.raises(OSError) as e:
        pool.set_dir_layout("/d", "regions(size=,width=2)")
    assert e.value.errno == errno.EINVAL


def test_bad_open_specs_are_refused(pool):
    with pool.create("/f") as f:
        f.write(b"1")
    with pytest.raises(OSError) as e:
        pool.open("/f", spec="cursor=sideways")
    assert e.value.errno == errno.EINVAL and "cursor" in str(e.value)
    with pool.open("/f") as f:
        with pytest.raises(OSError) as e:
            f.spec = "prefetch=distance(d=0)"
        assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError):
        pool.set_open_spec("/f", "locks=maybe")


def test_closed_pool(tmp_path):
    p = hurricane.Pool.memory(devices=1, size="16M")
    f = p.create("/f")
    p.close()
    p.close()  # a second close does nothing
    assert p.closed
    with pytest.raises(ValueError, match="closed pool"):
        p.listdir("/")
    with pytest.raises(OSError):
        f.write(b"late")


def test_bad_pool_arguments(tmp_path):
    with pytest.raises(FileNotFoundError):
        hurricane.Pool.open(tmp_path / "nothing-here")
    with pytest.raises(ValueError):
        hurricane.Pool.memory(devices=0)
    with pytest.raises(ValueError, match="size"):
        hurricane.Pool.memory(devices=1, size="lots")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "dev0.img").write_bytes(b"\0" * 4096)
    with pytest.raises(OSError):
        hurricane.Pool.open(tmp_path / "junk")
    with pytest.raises(TypeError):
        hurricane.Pool(object())


def test_hostile_arguments(pool):
    with pool.create("/f") as f:
        f.write(b"abc")
    with pytest.raises(OSError) as e:
        pool.create("/bad\0name")
    assert e.value.errno == errno.EINVAL
    with pool.open("/f") as f:
        # A huge size reads what there is, without allocating for the rest.
        assert f.read(1 << 60) == b"abc"
        assert f.read_at(1 << 60, 1) == b"bc"
        assert f.read_at(10, 1 << 62) == b""
        with pytest.raises(OverflowError):
            f.read_at(1, -1)
        with pytest.raises(TypeError):
            f.readinto(None)
    with pytest.raises(TypeError):
        pool.stat(42)
    with pytest.raises(OSError) as e:
        pool.open("/f", "r+b").write_at(b"x", 1 << 62)
    assert e.value.errno == errno.EFBIG
