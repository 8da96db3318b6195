"""What needs no server of the object-storage team store: the locations a store takes, the object names of chunks
and back, and the ordered fetching a pull bounds its memory with."""

from __future__ import annotations

import importlib
import threading
import time

import pytest

from reportdb.errors import InvalidArgumentError
from reportdb.team import objects

pull = importlib.import_module("reportdb.team.pull")  # the module (reportdb.team.pull is the function)


@pytest.mark.parametrize("given, location, prefix", [
    ("s3://lab-reports", "s3://lab-reports/", ""),
    ("s3://lab-reports/", "s3://lab-reports/", ""),
    ("s3://lab-reports/team/chunks/", "s3://lab-reports/team/chunks/", "team/chunks/"),
    ("s3://a.b-c/x", "s3://a.b-c/x/", "x/"),
])
def test_locations_are_normalized(given: str, location: str, prefix: str) -> None:
    store = objects.ObjectStore.parse(given)
    assert (store.location, store.prefix, store.bucket) == (location, prefix, location[5:].split("/")[0])


@pytest.mark.parametrize("given", ["", "s3://", "s3://ab/x", "s3://Bucket/x", "s3://a..b/x", "gs://bucket/x",
                                   "s3://bucket/a//b", "s3://bucket/a\nb", "s3://" + "b" * 64])
def test_unusable_locations_are_refused(given: str) -> None:
    with pytest.raises(InvalidArgumentError, match="chunks location"):
        objects.ObjectStore.parse(given)


def test_object_names_stand_for_chunk_keys() -> None:
    digest = bytes(range(32))
    assert objects.key_name(digest, "", 123) == digest.hex()  # a raw chunk: its content address alone
    assert objects.parse_key(digest.hex()) == (digest, "", -1)
    named = objects.key_name(digest, "zstd", 0xDEADBEEF)
    assert named == f"{digest.hex()}.zstd.deadbeef" and objects.parse_key(named) == (digest, "zstd", 0xDEADBEEF)
    for other in ("notes.txt", digest.hex()[:-1], digest.hex().upper(), digest.hex() + ".zstd", digest.hex() + "/x"):
        assert objects.parse_key(other) is None  # no push makes such a name: gc never touches it


def test_ordered_keeps_the_order_and_bounds_what_is_in_flight() -> None:
    running, most = 0, 0
    lock = threading.Lock()

    def fetch(i: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.002 * (i % 3))
        with lock:
            running -= 1
        return i * i

    assert list(objects.ordered(range(40), fetch, 4)) == [(i, i * i) for i in range(40)]
    assert 1 <= most <= 4


def test_ordered_raises_the_first_failure() -> None:
    def fetch(i: int) -> int:
        if i == 5:
            raise ValueError("five")
        return i

    seen = []
    with pytest.raises(ValueError, match="five"):
        for i, _ in objects.ordered(range(100), fetch, 3):
            seen.append(i)
    assert seen == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("page_size", [512, 4096, 65536])
@pytest.mark.parametrize("nbytes", [1, 32 << 10, 4 << 20, 64 << 20])
def test_a_pull_caches_the_pages_of_two_chunks(page_size: int, nbytes: int) -> None:
    """The page cache a pull writes chunks through holds two chunks' overflow pages (a chunk's ``zeroblob`` pages are
    still cached when its bytes are written over them), and never less than its floor."""
    kib = pull._write_cache_kib(nbytes, page_size)
    assert kib >= pull.WRITE_CACHE_KIB
    assert kib * 1024 // page_size >= 2 * (-(-nbytes // (page_size - 4)) + 1)
