"""Optional zstd compression of stored chunks, used only where a sample shows it pays.

The library is the standard ``compression.zstd`` (Python 3.14+), else ``zstandard`` (the ``reportdb[zstd]``
extra); neither is imported until a chunk is compressed or decompressed.

Choices, measured on a 2-core VM with zstandard 0.25 and 4 MiB chunks: level 1 compresses ReLU'd bfloat16
activations 1.98x at ~180 MB/s where level 3 gets 2.01x at ~110 MB/s; on bfloat16 normals (1.29x), a
bfloat16 ramp, few-valued int8 and zeros level 3 is no smaller (larger on the ramp and int8), so level 1.
A blob larger than the sample is sampled by compressing 4 windows of 16 KiB spread from its start to its
end (64 KiB: 0.2-0.5 ms): the windows see the body of a tensor whose first rows are padding or zeros, and
an incompressible blob costs that sample, not a compression of every chunk. Both the sample and each chunk
must shrink by at least ``MIN_SAVING`` (10%), since every read of a compressed chunk pays for decompressing
it (~350 MB/s per thread on that VM): random float32 saves ~8% (its exponent bytes) and stays raw.
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Iterator, Literal, Protocol

from .._lazy import lazy_module

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
else:  # numpy is imported on first use: opening a report and reading its metadata need none
    np = lazy_module("numpy", globals(), "np")

from ..errors import CompressionUnavailableError, CorruptionError, InvalidArgumentError

Compression = Literal["none", "zstd"]
COMPRESSIONS: tuple[str, ...] = ("none", "zstd")
ZSTD = "zstd"
LEVEL = 1
SAMPLE_WINDOWS = 4
SAMPLE_WINDOW = 16 << 10
MIN_SAVING = 0.10
_INSTALL = "install reportdb[zstd] (pip install zstandard)"


class _Zstd(Protocol):
    error: type[Exception]

    def compress(self, data: memoryview) -> bytes: ...

    def content_size(self, frame: bytes) -> int | None: ...

    def decompress(self, frame: bytes, nbytes: int) -> bytes: ...

    def pieces(self, frame: bytes, size: int) -> Iterator[bytes]: ...


class _Stdlib:
    """``compression.zstd`` (Python 3.14+); its one-shot functions keep no state, so threads need nothing."""

    def __init__(self) -> None:
        from compression import zstd  # type: ignore[import-not-found]

        self._zstd = zstd
        self.error: type[Exception] = zstd.ZstdError

    def compress(self, data: memoryview) -> bytes:
        return self._zstd.compress(data, level=LEVEL)

    def content_size(self, frame: bytes) -> int | None:
        return self._zstd.get_frame_info(frame).decompressed_size

    def decompress(self, frame: bytes, nbytes: int) -> bytes:
        # One frame, at most ``nbytes`` out: the one-shot ``decompress`` would decode every concatenated frame.
        return self._zstd.ZstdDecompressor().decompress(frame, max_length=nbytes)

    def pieces(self, frame: bytes, size: int) -> Iterator[bytes]:
        decompressor = self._zstd.ZstdDecompressor()
        piece = decompressor.decompress(frame, max_length=size)
        while piece:
            yield piece
            if decompressor.eof:
                return
            piece = decompressor.decompress(b"", max_length=size)


class _Zstandard:
    """The ``zstandard`` package; its contexts are not thread-safe, so each thread has its own."""

    def __init__(self) -> None:
        import zstandard

        self._zstd = zstandard
        self._local = threading.local()
        self.error: type[Exception] = zstandard.ZstdError

    def compress(self, data: memoryview) -> bytes:
        if not hasattr(self._local, "cctx"):
            self._local.cctx = self._zstd.ZstdCompressor(level=LEVEL)  # writes the content size in the frame
        return self._local.cctx.compress(data)

    def content_size(self, frame: bytes) -> int | None:
        size = self._zstd.frame_content_size(frame)
        return None if size < 0 else size

    def decompress(self, frame: bytes, nbytes: int) -> bytes:
        if not hasattr(self._local, "dctx"):
            self._local.dctx = self._zstd.ZstdDecompressor()
        return self._local.dctx.decompress(frame, max_output_size=nbytes)  # the first frame only

    def pieces(self, frame: bytes, size: int) -> Iterator[bytes]:
        reader = self._zstd.ZstdDecompressor().stream_reader(frame, read_across_frames=False)
        with reader:
            while piece := reader.read(size):
                yield piece


@functools.cache
def _backend() -> _Zstd:
    for backend in (_Stdlib, _Zstandard):
        try:
            return backend()
        except ImportError:
            continue
    raise ImportError("no zstd library")


def _zstd(missing: str = "compression='zstd' needs a zstd library and none is installed") -> _Zstd:
    try:
        return _backend()
    except ImportError:
        raise CompressionUnavailableError(f"{missing}; {_INSTALL}") from None


def codec_for(compression: str) -> str | None:
    """The codec stored for a ``compression`` option (``"none"`` -> None); checks that zstd can be used."""
    if compression not in COMPRESSIONS:
        raise InvalidArgumentError(f"compression must be one of {', '.join(map(repr, COMPRESSIONS))}, not {compression!r}")
    if compression == "none":
        return None
    _zstd()
    return ZSTD


def check_codec(codec: str | None) -> None:
    """Refuse a codec name that chunks cannot be written with."""
    if codec not in (None, ZSTD):
        raise InvalidArgumentError(f"unknown chunk codec {codec!r}; known: {ZSTD!r} (or None for raw bytes)")


def worth_compressing(data: np.ndarray) -> bool:
    """Whether a blob's bytes (flat uint8) look compressible: its sample windows shrink by ``MIN_SAVING``.

    A blob no larger than the sample is its own sample, and each of its chunks decides for itself.
    """
    n = int(data.nbytes)
    sample = SAMPLE_WINDOWS * SAMPLE_WINDOW
    if n <= sample:
        return True
    step = (n - SAMPLE_WINDOW) // (SAMPLE_WINDOWS - 1)
    zstd = _zstd()
    stored = sum(len(zstd.compress(data[i * step : i * step + SAMPLE_WINDOW].data)) for i in range(SAMPLE_WINDOWS))
    return stored <= (1 - MIN_SAVING) * sample


def compress(piece: np.ndarray) -> bytes | None:
    """A chunk's bytes (flat uint8) as one zstd frame, or None when that does not save ``MIN_SAVING``."""
    frame = _zstd().compress(piece.data)
    return frame if len(frame) <= (1 - MIN_SAVING) * piece.nbytes else None


def _checked_frame(codec: str, stored: bytes, nbytes: int, where: str) -> _Zstd:
    """The zstd library to decode stored chunk ``where`` with, once its codec is known and its frame declares
    ``nbytes`` (reportdb always writes the size): checked before anything is decoded, so a damaged or hostile frame
    cannot make a reader allocate more than the size the chunk's row was checked for."""
    if codec != ZSTD:
        raise CorruptionError(f"{where} is stored with unknown codec {codec!r}; the database file is damaged")
    zstd = _zstd(f"{where} is zstd-compressed and no zstd library is installed to read it")
    try:
        declared = zstd.content_size(stored)
    except zstd.error as exc:
        raise _undecodable(where, exc) from None
    if declared is None:
        raise CorruptionError(f"{where} is a zstd frame that does not declare its size; the database file is damaged")
    if declared != nbytes:
        raise CorruptionError(f"{where} decompresses to {declared} bytes, not {nbytes}; the database file is damaged")
    return zstd


def _undecodable(where: str, exc: Exception) -> CorruptionError:
    return CorruptionError(f"{where} cannot be decompressed ({exc}); the database file is damaged")


def decompress(codec: str, stored: bytes, nbytes: int, where: str) -> bytes:
    """The ``nbytes`` raw bytes of a stored chunk (already crc-checked) in one piece; ``where`` names it in errors.
    The frame is checked first (:func:`_checked_frame`) and no more than ``nbytes`` are decoded."""
    zstd = _checked_frame(codec, stored, nbytes, where)
    try:
        raw = zstd.decompress(stored, nbytes)
    except zstd.error as exc:
        raise _undecodable(where, exc) from None
    if len(raw) != nbytes:
        raise CorruptionError(f"{where} decompressed to {len(raw)} bytes, not {nbytes}; the database file is damaged")
    return raw


#: Raw bytes a compressed chunk is decompressed in at a time by :func:`pieces`: what reading a chunk costs in memory
#: beyond its share of the result, whatever size its frame declares.
PIECE = 1 << 20


def pieces(codec: str, stored: bytes, nbytes: int, where: str, size: int = PIECE) -> Iterator[bytes]:
    """The ``nbytes`` raw bytes of a stored chunk (already crc-checked), decompressed a piece of at most ``size`` bytes
    at a time (``where`` names it in errors): a reader that needs only the start of a chunk (a window) stops early,
    and one that needs it all copies each piece to its place, so no chunk is ever held whole, decompressed, in memory
    (a hostile frame of 1 GiB of zeros made a 10-element window cost 1.09 GB). The frame must declare ``nbytes``, as
    reportdb writes it (:func:`_checked_frame`); more or fewer bytes than that are a CorruptionError."""
    zstd = _checked_frame(codec, stored, nbytes, where)
    done = 0
    try:
        for piece in zstd.pieces(stored, size):
            done += len(piece)
            if done > nbytes:
                break
            yield piece
    except zstd.error as exc:
        raise _undecodable(where, exc) from None
    if done != nbytes:
        found = f"ends after {done} bytes" if done < nbytes else "holds more bytes"
        raise CorruptionError(f"{where} cannot be decompressed: its frame {found}, not the {nbytes} it declares; the "
                              "database file is damaged")
