"""``blobs.crc32`` (zlib-ng's, through which every crc32 of chunk bytes goes) is zlib's crc32 bit for bit: the same
values on random bytes of every length around the 4 KiB block grain and the folding widths, with a running start
value, on every buffer a read or a write hands it (bytes, memoryview slices, numpy arrays); so files written before
and after the switch, and by either, check alike."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from reportdb.errors import CorruptionError
from reportdb.store import blobs

LENGTHS = [0, 1, 2, 3, 7, 15, 16, 17, 31, 63, 64, 65, 127, 255, 256, 257, 1023, 4095, 4096, 4097, 8191, 8192,
           65535, 65536, (1 << 20) + 3, (4 << 20) + 1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_crc32_equals_zlib_on_random_bytes_of_many_lengths(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for n in LENGTHS:
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert blobs.crc32(data) == zlib.crc32(data), n
        start = int(rng.integers(0, 1 << 32))
        assert blobs.crc32(data, start) == zlib.crc32(data, start), (n, start)


def test_crc32_runs_on_like_zlib_across_pieces() -> None:
    """A crc carried from piece to piece (the writer's tail after its blocks) is the crc of the whole, as zlib's."""
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, (1 << 20) + 3, dtype=np.uint8).tobytes()
    for cut in (0, 1, 4095, 4096, 4097, 500_000, len(data)):
        running = blobs.crc32(data[cut:], blobs.crc32(data[:cut]))
        assert running == zlib.crc32(data) == zlib.crc32(data[cut:], zlib.crc32(data[:cut]))


def test_crc32_takes_the_buffers_reads_and_writes_hand_it() -> None:
    rng = np.random.default_rng(3)
    array = rng.standard_normal((64, 1024)).astype(np.float32)
    view = memoryview(array.tobytes())
    assert blobs.crc32(array) == zlib.crc32(array)  # a contiguous ndarray
    assert blobs.crc32(array[5]) == zlib.crc32(array[5].tobytes())
    for lo in (0, 1, 4093, 4096, 100_000):
        assert blobs.crc32(view[lo : lo + 4096]) == zlib.crc32(view[lo : lo + 4096])
    assert blobs.crc32(bytearray(b"reportdb")) == zlib.crc32(b"reportdb")
    assert blobs.crc32(b"123456789") == 0xCBF43926  # the crc-32 check value: the polynomial is zlib's


@pytest.mark.parametrize("nbytes", [1, 4095, 4096, 4097, 3 * 4096, (1 << 20) + 3])
def test_block_crcs_are_zlibs_of_each_block(nbytes: int) -> None:
    data = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    raw = data.tobytes()
    crcs = blobs.block_crcs(data)
    assert crcs.dtype == np.uint32
    assert crcs.tolist() == [zlib.crc32(raw[i : i + blobs.CRC_BLOCK]) for i in range(0, nbytes, blobs.CRC_BLOCK)]
    assert blobs.combine_crcs(crcs, nbytes, blobs.CRC_BLOCK) == zlib.crc32(raw)


def test_check_crc_refuses_a_changed_byte() -> None:
    data = bytearray(np.random.default_rng(5).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    crc = zlib.crc32(data)
    blobs.check_crc(0, crc, bytes(data), "tensor 1")
    data[1234] ^= 0x01
    with pytest.raises(CorruptionError, match="tensor 1: chunk 0 failed its integrity check"):
        blobs.check_crc(0, crc, bytes(data), "tensor 1")
