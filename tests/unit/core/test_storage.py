"""The storage interface behaves the same on the local workspace and on S3 (moto's stand-in)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aifab.core.storage import Store, get_store


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, workspace: Path) -> Store:
    if request.param == "s3":
        request.getfixturevalue("s3_storage")
    return get_store()


def test_default_store_is_the_workspace_directory(workspace: Path) -> None:
    store = get_store()
    assert store.is_local
    assert Path(store.root) == workspace.resolve()
    assert store.url("lake/x") == str(workspace.resolve() / "lake" / "x")


def test_s3_uri_selects_the_object_store(s3_storage: str) -> None:
    store = get_store()
    assert not store.is_local
    assert store.uri == s3_storage
    assert store.url("lake/x") == f"{s3_storage}/lake/x"


def test_round_trip_list_and_delete(store: Store, tmp_path: Path) -> None:
    assert store.write_bytes("a/b/c.txt", b"hello")
    assert store.exists("a/b/c.txt") and store.size("a/b/c.txt") == 5
    assert store.read_bytes("a/b/c.txt") == b"hello"
    src = tmp_path / "f.bin"
    src.write_bytes(b"x" * 1000)
    store.put_file(src, "a/d.bin")
    assert store.list("a") == ["a/b/c.txt", "a/d.bin"]
    store.get_file("a/d.bin", tmp_path / "back" / "d.bin")
    assert (tmp_path / "back" / "d.bin").read_bytes() == b"x" * 1000
    store.delete("a/d.bin")
    store.delete("a/never")
    assert store.list("a") == ["a/b/c.txt"]
    assert store.list("nothing/here") == []
    with pytest.raises(FileNotFoundError):
        store.read_bytes("a/never")


def test_write_once_keeps_the_first_object(store: Store) -> None:
    assert store.write_bytes("objects/k", b"first", once=True)
    assert not store.write_bytes("objects/k", b"second", once=True)
    assert store.read_bytes("objects/k") == b"first"


def test_directories_copy_both_ways(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "idx"
    (src / "sub").mkdir(parents=True)
    (src / "a.json").write_text("{}")
    (src / "sub" / "b.bin").write_bytes(b"\0\1")
    assert store.put_dir(src, "indexes/kb1") == ["indexes/kb1/a.json", "indexes/kb1/sub/b.bin"]
    back = tmp_path / "back"
    store.get_dir("indexes/kb1", back)
    assert (back / "sub" / "b.bin").read_bytes() == b"\0\1"


def test_an_uri_without_bucket_is_refused() -> None:
    from aifab.core.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="names no bucket"):
        Store("s3://")
