"""A ``-journal`` naming a super-journal: reportdb refuses every journal SQLite would follow, at every boundary of
SQLite's own rule (pager.c ``readSuperJournal``), and no message advises a write-mode open of such a report.

Rolling back a journal whose tail names a super-journal makes SQLite read the named file and delete it. SQLite
takes the name when the journal ends with ``name + 4-byte length + 4-byte checksum + 8-byte magic`` and the length
is at most the journal's size minus 16: the record may start at byte 0, with no journal header at all.
"""

from __future__ import annotations

import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import locked_from_elsewhere
import reportdb
from reportdb.errors import ReadOnlyError, UnsafeReportError
from reportdb.store import files

MAGIC = bytes.fromhex("d9d505f920a163d7")


def _db(path: Path) -> Path:
    """A small report (one table row, so SQLite finds its hot journal worth rolling back)."""
    with reportdb.open(path, "a"):
        pass
    return path


def _journal(db: Path, name: bytes, size: int, *, length: int | None = None, checksum: int | None = None) -> Path:
    """A ``-journal`` of ``size`` bytes ending with a super-journal record naming ``name``: non-zero filler (SQLite
    finds a journal hot only when its first byte is not zero), the name, ``length`` (default: the name's), the byte
    sum of the name (or ``checksum``) and the magic."""
    filler = b"x" * (size - 16 - len(name))
    record = name + struct.pack(">II", len(name) if length is None else length,
                                sum(name) if checksum is None else checksum) + MAGIC
    journal = Path(f"{db}-journal")
    journal.write_bytes(filler + record)
    assert journal.stat().st_size == size
    return journal


def _sqlite_deletes(db: Path) -> None:
    """What any write-mode open does: SQLite itself (no reportdb) reads the database and rolls its hot journal back."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchall()
    finally:
        conn.close()


CASES = [(size, size - 16 - extra) for size in range(16, 41) for extra in (0, 1, 4) if size - 16 - extra > 0]


@pytest.mark.parametrize("size, length", CASES)
def test_refused_exactly_when_sqlite_itself_deletes_the_named_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    size: int, length: int) -> None:
    """Journals of 16..40 bytes whose name is szJ-16 (the record at byte 0), szJ-17 and szJ-20 bytes long: SQLite
    deletes the named file (checked here with SQLite itself) and reportdb names it, for every one."""
    monkeypatch.chdir(tmp_path)
    db = _db(tmp_path / "db.sqlite")
    victim = Path("v" * length)  # a name relative to the current folder, as SQLite takes it
    victim.write_text("precious")
    journal = _journal(db, str(victim).encode(), size)
    assert files._super_journal(str(journal)) == str(victim).encode()
    with pytest.raises(UnsafeReportError, match="as its super-journal"):
        reportdb.open(db, "a")
    assert victim.exists()
    _sqlite_deletes(db)  # the rule mirrored: SQLite does delete it
    assert not victim.exists()


@pytest.mark.parametrize("size", [16, 17, 24, 40])
def test_a_length_past_the_journal_or_zero_names_nothing(tmp_path: Path, size: int) -> None:
    """A length of szJ-15 (the name would start before the file) or 0 is no name for SQLite, nor here."""
    journal = tmp_path / "db.sqlite-journal"
    for length in (size - 15, 0):
        journal.write_bytes(b"x" * (size - 16) + struct.pack(">II", length, 0) + MAGIC)
        assert files._super_journal(str(journal)) is None


def test_a_journal_under_16_bytes_or_without_the_magic_names_nothing(tmp_path: Path) -> None:
    journal = tmp_path / "db.sqlite-journal"
    journal.write_bytes((struct.pack(">II", 1, 0) + MAGIC)[1:])  # 15 bytes: no room for length, checksum and magic
    assert files._super_journal(str(journal)) is None
    journal.write_bytes(b"abc" + struct.pack(">II", 3, sum(b"abc")) + MAGIC[:7] + b"\0")
    assert files._super_journal(str(journal)) is None
    journal.write_bytes(b"abc" + struct.pack(">II", 3, sum(b"abc")) + MAGIC)
    assert files._super_journal(str(journal)) == b"abc"


def test_a_bad_checksum_is_refused_all_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite ignores a name whose checksum does not add up, but sums the name's bytes as C ``char``, signed on some
    platforms and unsigned on others: a name is refused whatever its checksum. The named file survives."""
    monkeypatch.chdir(tmp_path)
    db = _db(tmp_path / "db.sqlite")
    Path("abc").write_text("precious")
    _journal(db, b"abc", 19, checksum=12345)
    with pytest.raises(UnsafeReportError, match="'abc' as its super-journal"):
        reportdb.open(db, "a")
    assert Path("abc").read_text() == "precious"


def test_the_name_ends_at_its_first_nul(tmp_path: Path) -> None:
    """SQLite takes the name as a C string: ``abc\\0xyz`` names ``abc``; a name starting with NUL names nothing."""
    db = tmp_path / "db.sqlite"
    journal = _journal(db, b"abc\0xyz", 40)
    assert files._super_journal(str(journal)) == b"abc"
    journal = _journal(db, b"\0abc", 40)
    assert files._super_journal(str(journal)) is None


def test_a_long_name_is_read_in_part_and_quoted_in_part(tmp_path: Path) -> None:
    """A name far longer than any path (SQLite's Unix VFS takes at most 512 bytes, Windows' more) is refused too, and
    the message quotes a bounded excerpt of it."""
    db = _db(tmp_path / "db.sqlite")
    _journal(db, b"n" * 200_000, 200_016)
    with pytest.raises(UnsafeReportError) as refused:
        reportdb.open(db, "a")
    assert len(str(refused.value)) < 2000


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reportdb", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


@pytest.mark.process
def test_upgrade_info_and_verify_refuse_a_19_byte_journal_and_the_file_survives(tmp_path: Path) -> None:
    """The 19-byte journal ``abc + length + checksum + magic`` once made ``reportdb upgrade`` (exit 0) delete ``abc``
    in the current folder, and ``info``/``verify`` advise ``reportdb.open(path, 'a')``, the open that deletes."""
    work = tmp_path / "work"
    work.mkdir()
    db = _db(tmp_path / "db.sqlite")
    (work / "abc").write_text("precious")
    _journal(db, b"abc", 19)
    for command in ("upgrade", "info", "verify"):
        done = _cli(command, str(db), cwd=work)
        assert done.returncode != 0, (command, done.stdout, done.stderr)
        assert "'abc' as its super-journal" in done.stderr and "Do not open the report for writing" in done.stderr
        assert "Open it once" not in done.stderr, done.stderr
        assert (work / "abc").read_text() == "precious"


@pytest.mark.parametrize("where", ["here", "elsewhere"])
def test_open_for_appending_refuses_and_the_named_file_survives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                where: str) -> None:
    """A journal that is nothing but the record (no header) naming a file in the current folder or elsewhere."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "report").mkdir()
    db = _db(tmp_path / "report" / "db.sqlite")
    victim = Path("abc") if where == "here" else tmp_path / "other" / "precious"
    victim.parent.mkdir(exist_ok=True)
    victim.write_text("precious")
    name = str(victim).encode()
    _journal(db, name, len(name) + 16)
    with pytest.raises(UnsafeReportError, match="as its super-journal"):
        reportdb.open(db, "a")
    with pytest.raises(UnsafeReportError, match="as its super-journal"):
        reportdb.upgrade(db)
    with pytest.raises(UnsafeReportError, match="Do not open the report for writing"):
        reportdb.open(db)
    assert victim.read_text() == "precious"


def test_advice_to_open_for_writing_is_given_only_for_a_harmless_journal(tmp_path: Path) -> None:
    """A hot journal with no super-journal may be rolled back (the advice stands); one naming a super-journal gets
    what is wrong instead, even where the journal appears after the open's own check."""
    db = _db(tmp_path / "db.sqlite")
    advice = "Open it once where it is writable (reportdb.open(path, 'a')), then read it"
    Path(f"{db}-journal").write_bytes(b"\xd9" * 600)
    assert files.write_open_advice(db, advice) == advice
    _journal(db, b"abc", 19)
    said = files.write_open_advice(db, advice)
    assert "Do not open the report for writing" in said and "Open it once" not in said


def test_a_read_only_open_of_a_hot_journal_says_to_roll_it_back(tmp_path: Path) -> None:
    """The harmless case keeps its advice: a hot journal naming no super-journal, which a read-only open cannot roll
    back, is left in place and the user told to open the report once for writing."""
    db = _db(tmp_path / "db.sqlite")
    Path(f"{db}-journal").write_bytes(b"\xd9" * 600)
    with pytest.raises(ReadOnlyError, match=r"Open it once where it is writable"):
        reportdb.open(db)
    assert Path(f"{db}-journal").exists()


@pytest.mark.process
@pytest.mark.parametrize("how", ["header", "read-only open"])
def test_reading_the_header_keeps_this_process_sqlite_lock(tmp_path: Path, how: str) -> None:
    """Reading the header opened and closed the database, and closing any descriptor of a file drops every POSIX lock
    the process holds on it, SQLite's included: with a writer of this process in its transaction, a read-only open of
    the same report let another process commit under that writer."""
    db = _db(tmp_path / "db.sqlite")
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        if how == "header":
            assert files._header(db).startswith(b"SQLite format 3\0")
        else:
            reportdb.open(db).close()
        assert locked_from_elsewhere(db) == "database is locked"
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert files._header(db).startswith(b"SQLite format 3\0")  # read through the descriptor kept, then closed
    assert not files._KEPT


@pytest.mark.process
def test_a_forked_child_reads_a_header_whatever_lock_the_parent_held(tmp_path: Path) -> None:
    """The lock guarding kept descriptors may be held by another thread at a fork; the child gets a fresh one."""
    import os
    import signal

    db = _db(tmp_path / "db.sqlite")
    with files._KEPT_LOCK:  # as another thread of this process might hold it when the fork happens
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.alarm(20)  # a child stuck on the lock dies instead of hanging the test
                files._header(db)
                code = 0
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
