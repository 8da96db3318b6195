"""A store is someone else's data too: rows of a real PostgreSQL team store crafted after a push (sizes, counts,
texts, chunk bytes) are refused by pull and by a remote read with a clear error, before anything is sized from
them, and nothing is left at the destination."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pg_server import dump, make_report
from tamper import edit_stored_rows, forge_stored_chunk
import reportdb
from reportdb import team
from reportdb.errors import CorruptionError, FormatError
from reportdb.team import tables

pytestmark = [pytest.mark.process, pytest.mark.service]


@pytest.fixture
def pushed(team_url: str, tmp_path: Path) -> str:
    team.push(make_report(tmp_path / "src", seed=1), team_url, name="r")
    return team_url


def _craft(url: str, sql: str, params: Any = ()) -> None:
    import psycopg  # here, not at import: only PostgreSQL tests need it (collection stays quick)
    with psycopg.connect(url) as conn:
        assert conn.execute(sql.encode(), params).rowcount > 0


def _refused(url: str, out: Path, match: str) -> None:
    with pytest.raises(CorruptionError, match=match):
        team.pull(url, "r", out)
    assert not out.exists()


def test_unusable_file_facts_are_refused(pushed: str, tmp_path: Path) -> None:
    _craft(pushed, "UPDATE team_report SET info = info || '{\"user_version\": \"x\"}'::jsonb")
    _refused(pushed, tmp_path / "a", "user_version 'x'")
    _craft(pushed, "UPDATE team_report SET info = info || '{\"user_version\": 0, \"page_size\": 3000}'::jsonb")
    _refused(pushed, tmp_path / "b", "page size 3000")


def test_a_table_text_above_its_bound_is_not_even_sent(pushed: str, tmp_path: Path) -> None:
    _craft(pushed, "UPDATE team_table SET ddl = ddl || repeat(' ', %s) WHERE ord = 0", (2 << 20,))
    _refused(pushed, tmp_path / "a", "no usable definition .* bytes, at most")


def test_a_column_list_that_is_not_one_is_refused(pushed: str, tmp_path: Path) -> None:
    _craft(pushed, "UPDATE team_table SET columns = '\"abc\"'::jsonb WHERE ord = 0")
    _refused(pushed, tmp_path / "a", "no usable column list")
    _craft(pushed, "UPDATE team_table SET columns = to_jsonb(array_fill('c'::text, ARRAY[40000])) WHERE ord = 0")
    _refused(pushed, tmp_path / "b", "no usable column list")


def test_too_many_tables_are_refused(pushed: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules["reportdb.team.pull"], "MAX_TABLES", 3)  # the package exports a pull function
    _refused(pushed, tmp_path / "a", "more than 3 tables")


def test_a_rows_part_above_the_bound_is_refused(pushed: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tables, "MAX_PART_BYTES", 1 << 16)
    _craft(pushed, "UPDATE team_rows SET data = data || convert_to(repeat(' ', 70000), 'UTF8')"
           " WHERE (table_ord, part) = (SELECT table_ord, part FROM team_rows ORDER BY table_ord, part LIMIT 1)")
    _refused(pushed, tmp_path / "a", r"is 7\d{4,} bytes, not a part a push writes \(at most 65536")


def test_push_cuts_parts_below_the_bound_and_refuses_a_row_above_it(team_url: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    src = make_report(tmp_path / "src", seed=2, operations=40)
    monkeypatch.setattr(tables, "MAX_PART_BYTES", 1 << 12)
    team.push(src, team_url, name="small parts")
    import psycopg
    with psycopg.connect(team_url) as conn:
        sizes = [r[0] for r in conn.execute("SELECT octet_length(data) FROM team_rows")]
    assert max(sizes) <= 1 << 12 and len(sizes) > 10
    back = Path(team.pull(team_url, "small parts", tmp_path / "back").path)
    assert dump(back) == dump(src / "db.sqlite")
    with reportdb.open(src, "a") as report, report.connection() as conn:
        conn.execute("INSERT INTO operations (operation_id, name) VALUES (999, ?)", ("x" * 5000,))
    with pytest.raises(FormatError, match="table operations takes .* more than the team store's 4096 per part"):
        team.push(src, team_url, name="big row")


def test_chunks_of_the_wrong_size_are_refused_by_pull_and_by_a_remote_read(pushed: str, tmp_path: Path) -> None:
    with reportdb.open(team.report_url(pushed, "r")) as remote:  # opened while the store is sound
        keys = remote.tensor_keys()
        _craft(pushed, "UPDATE team_chunk SET data = data || '\\x00'::bytea")
        for key in keys:
            with pytest.raises(CorruptionError, match="with 32769 bytes, which its row .32768 bytes. does not allow"):
                remote.tensor(*key)
    _refused(pushed, tmp_path / "a", r"holds 32769 bytes, not the 32768")
    _craft(pushed, "UPDATE team_report_chunk SET nbytes = %s WHERE chunk_id = (SELECT min(chunk_id)"
           " FROM team_report_chunk)", (1 << 40,))
    _refused(pushed, tmp_path / "b", "claims 1099511627776 bytes")


def test_a_remote_read_refuses_chunks_it_did_not_ask_for_or_missing_ones(pushed: str) -> None:
    with reportdb.open(team.report_url(pushed, "r")) as remote:
        key = remote.tensor_keys()[0]
        _craft(pushed, "DELETE FROM team_chunk")
        with pytest.raises(CorruptionError, match="the store lacks 4 of its chunks"):
            remote.tensor(*key)


def test_a_flipped_chunk_byte_is_refused_by_pull(pushed: str, tmp_path: Path) -> None:
    forge_stored_chunk(pushed, keep=False)
    _refused(pushed, tmp_path / "a", "fail their crc32 check")


def test_chunk_bytes_forged_with_their_crc32_kept_are_refused_by_pull(pushed: str, tmp_path: Path) -> None:
    """Other bytes under the same address and crc32: only the content address tells; pulled, the tensor would read
    back as 1024.0 where the pushed report holds other values, every crc32 matching."""
    forge_stored_chunk(pushed)
    _refused(pushed, tmp_path / "a", "do not match its blake3 content address")


def _renamed(row: list[Any]) -> list[Any]:
    return [("ttnn.evil" if v == "ttnn.op1" else v) for v in row]


def test_a_report_row_edited_in_the_store_is_refused_by_pull_and_by_a_remote_open(pushed: str, tmp_path: Path) -> None:
    edit_stored_rows(pushed, "operations", _renamed)
    _refused(pushed, tmp_path / "a", "does not match the digest it was pushed with")
    with pytest.raises(CorruptionError, match="does not match the digest"):
        reportdb.open(team.report_url(pushed, "r"))


def test_a_chunk_list_or_table_definition_changed_in_the_store_is_refused(pushed: str, tmp_path: Path) -> None:
    _craft(pushed, "UPDATE team_table SET ddl = regexp_replace(ddl, '\\(', '(planted INTEGER DEFAULT 7, ')"
           " WHERE name = 'operations'")  # a table that restores, one column more
    _refused(pushed, tmp_path / "a", "does not match the digest")
    _craft(pushed, "UPDATE team_table SET ddl = replace(ddl, 'planted INTEGER DEFAULT 7, ', '') WHERE name = 'operations'")
    team.pull(pushed, "r", tmp_path / "b")  # put back: pulled again
    _craft(pushed, "UPDATE team_report_chunk SET chunk_id = -chunk_id - 1")  # the same chunks under other row ids
    _refused(pushed, tmp_path / "c", "does not match the digest")


def test_cli_pull_of_a_tampered_store_fails_in_one_line(pushed: str, tmp_path: Path) -> None:
    edit_stored_rows(pushed, "operations", _renamed)
    out = subprocess.run([sys.executable, "-m", "reportdb", "pull", pushed, "r", "-o", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "does not match the digest" in out.stderr and not (tmp_path / "out").exists()


def test_a_remote_read_refuses_chunk_bytes_forged_with_their_crc32_kept(pushed: str) -> None:
    with reportdb.open(team.report_url(pushed, "r")) as remote:
        keys = remote.tensor_keys()
        forge_stored_chunk(pushed)
        refused = 0
        for key in keys:
            try:
                remote.tensor(*key)
            except CorruptionError as exc:
                assert "do not match its blake3 content address" in str(exc)
                refused += 1
        assert refused == 1  # the tensor that has the forged chunk; the others read as pushed
