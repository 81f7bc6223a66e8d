"""Directories, names and attributes."""

import stat

import pytest


def test_directories_and_names(pool):
    pool.makedirs("/a/b/c")
    pool.makedirs("/a/b/c", exist_ok=True)
    with pytest.raises(FileExistsError):
        pool.makedirs("/a/b/c")
    for n in ("x", "y", "z"):
        with pool.create(f"/a/b/{n}") as f:
            f.write(n.encode() * 3)
    assert sorted(pool.listdir("/a/b")) == ["c", "x", "y", "z"]
    entries = {e.name: e for e in pool.scandir("/a/b")}
    assert entries["c"].is_dir() and not entries["c"].is_file()
    assert entries["x"].is_file() and entries["x"].path == "/a/b/x"
    assert entries["x"].stat().st_size == 3
    assert entries["x"].inode() == pool.stat("/a/b/x").st_ino
    pool.rename("/a/b/x", "/a/x2")
    assert not pool.exists("/a/b/x") and pool.exists("/a/x2")
    pool.rename("/a/x2", "/a/b/y")  # replaces y
    with pool.open("/a/b/y") as f:
        assert f.read() == b"xxx"
    pool.unlink("/a/b/y")
    pool.remove("/a/b/z")
    pool.rmdir("/a/b/c")
    assert pool.listdir("/a/b") == []


def test_links_and_attributes(pool):
    with pool.create("/t", mode=0o600) as f:
        f.write(b"target")
    st = pool.stat("/t")
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_nlink == 1 and st.st_size == 6
    assert st.st_mtime_ns > 0 and abs(st.st_mtime - st.st_mtime_ns / 1e9) < 1e-3
    pool.symlink("/t", "/s")
    assert pool.readlink("/s") == "/t"
    assert stat.S_ISLNK(pool.stat("/s", follow_symlinks=False).st_mode)
    assert pool.stat("/s").st_ino == st.st_ino
    with pool.open("/s") as f:
        assert f.read() == b"target"
    [entry] = [e for e in pool.scandir("/") if e.name == "s"]
    assert entry.is_symlink() and entry.is_file() and not entry.is_file(follow_symlinks=False)
    pool.link("/t", "/h")
    assert pool.stat("/t").st_nlink == 2
    pool.chmod("/t", 0o640)
    assert stat.S_IMODE(pool.stat("/h").st_mode) == 0o640
    pool.truncate("/h", 3)
    with pool.open("/t") as f:
        assert f.read() == b"tar"
    pool.setxattr("/t", "user.note", b"kept")
    assert pool.getxattr("/t", "user.note") == b"kept"
    assert "user.note" in pool.listxattr("/t")


def test_unlinked_open_file_stays_readable(pool):
    with pool.create("/gone") as f:
        f.write(b"still here")
        pool.unlink("/gone")
        f.seek(0)
        assert f.read() == b"still here"
    assert not pool.exists("/gone")


def test_stats(pool):
    with pool.create("/f", layout="stripe(unit=64K,width=4)") as f:
        f.write(bytes(1 << 20))
    pool.sync()
    s = pool.stats()
    assert set(s) >= {"cache", "devices", "commits", "checkpoints", "colocate", "space"}
    assert len(s["devices"]) == 4
    assert sum(d["write_bytes"] for d in s["devices"]) >= 1 << 20
    assert s["space"]["blocks_free"] < s["space"]["blocks"]
    pool.drop_caches()
    with pool.open("/f") as f:
        f.read()
    after = pool.stats()
    assert sum(d["read_bytes"] for d in after["devices"]) >= sum(d["read_bytes"] for d in s["devices"]) + (1 << 20)
