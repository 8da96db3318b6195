"""What a report's files must be before SQLite opens them, and how to open one without writing.

SQLite trusts the files it is given: a FIFO or a device where the database or a side file should be blocks or reads
endless bytes, and a hot ``-journal`` that names a super-journal makes SQLite delete the named file wherever it is.
:func:`check_files` looks at them first with ``stat`` and reads (never opens blocking) what SQLite would act on;
:func:`readonly_uri` picks the URI that reads a database, in either journal mode, without creating or changing a file.
"""

from __future__ import annotations

import os
import stat
import struct
import sys
import threading
from pathlib import Path

from ..errors import ReadOnlyError, ReportDBError, UnsafeReportError, excerpt

#: The side files SQLite may open beside a database: every one must be a regular file (:func:`check_files`).
SIDE_FILES = ("-journal", "-wal", "-shm")
_HEADER = b"SQLite format 3\x00"


def _side(path: Path, suffix: str) -> Path:
    return Path(f"{path}{suffix}")


def readonly_uri(path: Path) -> str:
    """The URI that reads ``path`` without writing or creating anything.

    A rollback-journal file opens with ``mode=ro&readonly_shm=1``: should a writer put it in WAL mode while this
    connection is open (:func:`share_file`), it reads through the writer's ``-shm`` without writing its read mark
    there (another process's connection; within one process SQLite shares one mapping of the ``-shm``). A WAL file
    (header bytes 18/19 == 2) would make ``mode=ro`` create ``-wal`` and ``-shm`` (or fail where the folder is not
    writable), so: with no side files, or an empty
    ``-wal`` and no ``-shm`` (no connection is live, all is in the file), it opens ``immutable=1``; with both
    side files it reads through the existing ``-shm`` opened read-only (``readonly_shm=1``), which also sees
    what a live writer has committed. A ``-wal`` holding content with no ``-shm`` to read it through cannot be
    read without creating a file: that is refused rather than silently reading stale data.
    """
    wal, shm = _side(path, "-wal"), _side(path, "-shm")
    base = path.resolve().as_uri()
    header = _header(path)
    is_wal = len(header) == 100 and header.startswith(_HEADER) and header[18] == 2 and header[19] == 2
    wal_size = wal.stat().st_size if wal.exists() else None
    if wal_size is not None and shm.exists():
        return f"{base}?mode=ro&readonly_shm=1"
    if wal_size:
        raise ReadOnlyError(write_open_advice(
            path,
            f"{path}: its {wal.name} holds {wal_size} bytes of committed changes not yet copied into the database, "
            f"and there is no {shm.name} to read them through without creating a file (a writer crashed, or the file "
            f"was copied without it). Open it once with write access (`reportdb upgrade {path}`, or "
            f"reportdb.open(path, 'a')) to fold them in, then read it"
        ))
    if is_wal or wal_size is not None:
        return f"{base}?immutable=1"
    return f"{base}?mode=ro&readonly_shm=1"


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def check_files(path: Path) -> None:
    """Refuse a database, or a side file SQLite would open beside it (``-journal``, ``-wal``, ``-shm``), that is not a
    regular file: opening a FIFO blocks until someone writes to it (every command hung), and a device reads as
    anything (``/dev/zero`` read as an empty report). Looked at with ``stat``, which opens nothing: the database may be
    a symbolic link to a regular file (SQLite then keeps its side files beside the link's target, looked at too), a
    side file must be a regular file itself. UnsafeReportError names what was found and what to do."""
    try:
        found = path.stat()
    except FileNotFoundError:
        found = None
    except OSError as exc:
        raise ReportDBError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    if found is not None and not stat.S_ISREG(found.st_mode):
        raise UnsafeReportError(
            f"{path}: is {_kind_of(found.st_mode)}, not a regular file; reportdb reads a report only from a regular "
            "file (reading this one could block forever or read endless bytes). Check what put it there"
        )
    real = os.path.realpath(path) if found is not None and os.path.islink(path) else str(path)
    for base in {str(path), real}:
        for suffix in SIDE_FILES:
            try:
                mode = os.lstat(base + suffix).st_mode
            except OSError:
                continue
            if not stat.S_ISREG(mode):
                raise UnsafeReportError(
                    f"{base}{suffix}: is {_kind_of(mode)}, not a regular file, where SQLite keeps the database's "
                    f"{suffix[1:]} file; opening it could block forever or write elsewhere. Remove it (nothing of the "
                    f"report is in it), then open {path} again"
                )
        named = _super_journal(base + "-journal")
        if named is not None:
            raise UnsafeReportError(super_journal_problem(Path(base + "-journal"), named))


def super_journal_problem(journal: Path, named: bytes) -> str:
    """What is wrong with a ``-journal`` that names a super-journal, and what to do that opens nothing for writing:
    any write-mode open (``reportdb upgrade``, ``reportdb.open(path, 'a')``, a Writer) would roll it back."""
    return (
        f"{journal}: names {excerpt(named.decode('utf-8', 'replace'))} as its super-journal (a transaction across "
        "several databases, which reportdb never writes): rolling it back, which any write-mode open of the report "
        "does (`reportdb upgrade`, reportdb.open(path, 'a'), a Writer), makes SQLite read that file and delete it, "
        f"wherever it is. Do not open the report for writing. Look at {journal.name} first; if it is not a journal "
        "you expect, remove it (or copy the database file alone, without it) and run `reportdb verify` on what is "
        "left (the unfinished transaction it would undo may be left half-written); else ask for a copy made after "
        "its writer finished"
    )


def write_open_advice(path: Path, advice: str) -> str:
    """``advice`` (which tells the user to open ``path`` for writing, e.g. to roll back a hot journal), unless a
    ``-journal`` of ``path`` names a super-journal: then what is wrong instead (:func:`super_journal_problem`), since
    that open would delete the named file. Every message advising a write-mode open is built through here."""
    for base in dict.fromkeys((str(path), os.path.realpath(path))):
        named = _super_journal(base + "-journal")
        if named is not None:
            return super_journal_problem(Path(base + "-journal"), named)
    return advice


#: The magic number that begins every journal header and ends a super-journal record (SQLite's pager.c).
_JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")
#: Bytes of a super-journal name read to tell whether it is empty and to quote it (SQLite's names are at most 512 on
#: Unix; a longer one is refused all the same).
_NAME_READ = 1024


def _super_journal(journal: str) -> bytes | None:
    """The super-journal name SQLite would follow in a rollback journal, or None when it would follow none.

    SQLite (pager.c ``readSuperJournal``, run by every rollback of a hot journal) reads the journal's last 16 bytes: a
    4-byte big-endian length ``len``, a 4-byte checksum and the 8-byte journal magic; it takes ``len`` bytes before
    them as the name when the journal holds at least 16 bytes, ``0 < len <= size - 16`` (so the name may start at
    byte 0, with no journal header at all), ``len`` is below the VFS's longest path and the checksum matches; the name
    ends at its first NUL, and an empty one is no name. It then reads the named file as a list of journals and
    deletes it. Refused here is every journal SQLite might follow on any platform, so two of its checks are left out:
    the longest path differs between VFSes (512 bytes on Unix, far more on Windows) and the checksum sums the name's
    bytes as C ``char``, signed on x86 and unsigned on ARM. Read without blocking."""
    try:
        fd = os.open(journal, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None  # no journal (or none readable, which SQLite could not roll back either)
    try:
        found = os.fstat(fd)
        size = found.st_size
        if not stat.S_ISREG(found.st_mode) or size < 16:
            return None
        tail = os.pread(fd, 16, size - 16)
        length = int.from_bytes(tail[:4], "big")
        if len(tail) != 16 or tail[8:] != _JOURNAL_MAGIC or not 0 < length <= size - 16:
            return None
        # The name's first bytes are enough to tell an empty name and to quote it; SQLite reads all of it.
        name = os.pread(fd, min(length, _NAME_READ), size - 16 - length).split(b"\0", 1)[0]
        return name or None
    finally:
        os.close(fd)


def _header(path: Path) -> bytes:
    """The first 100 bytes of the database file, read without blocking (``O_NONBLOCK``: a FIFO swapped in after
    :func:`check_files` looked would block an ordinary open) and without closing a descriptor this process may hold a
    lock through (:func:`let_go`; a descriptor it kept of the same file is read instead of opening another)."""
    found = os.stat(path)
    with _KEPT_LOCK:
        for fd, kept in _KEPT.items():
            if kept == (found.st_dev, found.st_ino):
                header = os.pread(fd, 100, 0)
                _close_free()
                return header
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
                 | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafeReportError(f"{path}: is not a regular file; reportdb reads a report only from a regular file")
        return os.pread(fd, 100, 0)
    finally:
        let_go(fd)


#: Descriptors of database files not closed yet, each with its file's (st_dev, st_ino): see :func:`let_go`.
_KEPT: dict[int, tuple[int, int]] = {}
_KEPT_LOCK = threading.Lock()


def _after_fork() -> None:
    """A forked child's fresh lock: another thread may have held the parent's at the fork, and none runs here."""
    global _KEPT_LOCK
    _KEPT_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def let_go(fd: int) -> None:
    """Close ``fd``, a descriptor of a database file, once no lock is held on the file.

    Closing any descriptor of a file drops every POSIX (``fcntl``) lock this process holds on it, SQLite's included:
    a writer in another process could then commit under this process's open transaction, or have its journal deleted
    under it. So a descriptor is closed only where the file is seen free of locks (Linux's open-file-description lock
    query sees this process's own locks too); else it is kept, read again by :func:`_header`, and closed by a later
    call that finds its file free. Where that cannot be seen (no ``F_OFD_GETLK``: macOS, the BSDs) it is kept for the
    process's life, one per file. Not closed: another thread's SQLite connection taking its first lock between the
    query and the close, which no code outside SQLite can exclude."""
    if sys.platform == "win32":  # a LockFileEx lock belongs to its own handle: closing another one keeps it
        os.close(fd)
        return
    found = os.fstat(fd)
    with _KEPT_LOCK:
        _KEPT[fd] = (found.st_dev, found.st_ino)
        _close_free()


def _close_free() -> None:
    """Close every kept descriptor whose file is now free of locks (called holding ``_KEPT_LOCK``)."""
    for kept in list(_KEPT):
        if not _locked(kept):
            del _KEPT[kept]
            os.close(kept)


#: ``struct flock`` as Linux's ``F_OFD_GETLK`` takes it: type, whence, start, length, pid.
_FLOCK = struct.Struct("@hhqqi")


def _locked(fd: int) -> bool:
    """Whether any process, this one included, may hold a lock on the file of ``fd`` (True where that cannot be
    told). An open file description's lock query conflicts with every POSIX lock on the file, its own process's too;
    ``fd`` holds none of its own."""
    try:
        import fcntl
    except ImportError:
        return True
    query = getattr(fcntl, "F_OFD_GETLK", None)
    if query is None:
        return True
    try:
        answer = fcntl.fcntl(fd, query, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
    except OSError:
        return True
    return bool(_FLOCK.unpack(answer)[0] != fcntl.F_UNLCK)
