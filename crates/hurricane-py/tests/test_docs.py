"""The examples in the package's docstrings run."""

import doctest

import hurricane


def test_docstring_examples():
    result = doctest.testmod(hurricane)
    assert result.attempted > 0 and result.failed == 0


def test_public_names_have_docstrings():
    for name in hurricane.__all__:
        assert getattr(hurricane, name).__doc__, name
    for name in ("create", "layout", "set_layout", "stat", "listdir", "scandir", "rename", "unlink", "stats"):
        assert getattr(hurricane.Pool, name).__doc__, f"Pool.{name}"
    for name in ("readinto", "read_at", "write_at", "sync"):
        assert getattr(hurricane.File, name).__doc__, f"File.{name}"
