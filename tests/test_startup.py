"""Start-up cost: opening a report and reading its metadata (what ``info`` and ``ls`` do) imports no numpy, nor
SQLAlchemy's ORM, alembic, ml_dtypes (whose newer releases take a second to import) or any optional extra's packages;
neither does ``--help``; a tensor's values, read next in the same process, load numpy then and come back right; and
the schema revisions known without alembic are exactly alembic's.

Every check runs in a fresh interpreter (a subprocess), where ``sys.modules`` shows what a command imported.
No timings here: ``benchmarks/bench_read.py`` measures them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from alembic.script import ScriptDirectory

import reportdb
from reportdb.errors import SchemaError
from reportdb.store import schema
from reportdb.store.engine import connect, engine_for

from conftest import FIXTURES

#: Packages a command that only reads a report's counts and metadata has no use for (ml_dtypes: a bfloat16 tensor's
#: dtype is a name until its values are read).
HEAVY = ("sqlalchemy", "alembic", "ml_dtypes", "flask", "werkzeug", "waitress", "matplotlib", "psycopg", "zstandard")

pytestmark = pytest.mark.process  # every check runs in a fresh interpreter


def run_python(code: str, *args: str) -> list[str]:
    """Run ``code`` in a fresh interpreter and return its stdout lines (failing on a non-zero exit)."""
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


LOADED = "import sys; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in %r})))" % (
    HEAVY + ("numpy",),
)


@pytest.fixture()
def small_report(tmp_path: Path) -> Path:
    folder = tmp_path / "report"
    folder.mkdir()
    with reportdb.open(folder, "a") as report:
        report.put_tensor(1, np.arange(12, dtype=np.float32).reshape(3, 4), ttnn_dtype="FLOAT32", layout="ROW_MAJOR")
        report.put_tensor(2, np.ones(5, np.int32))
        report.put_tensor(3, np.ones((2, 3), ml_dtypes.bfloat16), ttnn_dtype="BFLOAT16", layout="TILE")
        with report.connection() as conn:
            conn.execute("INSERT INTO operations(operation_id, name, duration) VALUES (1, 'ttnn.add', 0.5)")
    return folder


def test_reading_a_report_imports_neither_numpy_nor_orm_until_needed(small_report: Path) -> None:
    """``open``, ``summary``, ``tensor_keys`` and ``tensor_info`` (what ``info`` and ``ls`` do) load none of the heavy
    packages, numpy included; the first ``tensor`` loads numpy (and a bfloat16 one ml_dtypes) and reads the values
    right; the first ``session()`` loads the ORM and still answers from the same connection."""
    code = (
        "import json, sys\n"
        "import reportdb, reportdb.cli\n"
        "r = reportdb.open(sys.argv[1])\n"
        "s = r.summary()\n"
        "infos = [r.tensor_info(t, k).to_json() for t, k in r.tensor_keys()]\n"
        f"{LOADED}\n"
        "values = [r.tensor(1).tolist(), r.tensor(2).tolist(), r.tensor(3).astype(float).tolist(), str(r.tensor(3).dtype)]\n"
        f"{LOADED}\n"
        "real = [sys.modules[m].np is sys.modules['numpy'] for m in ('reportdb.dtypes', 'reportdb.store.blobs')]\n"
        "from sqlalchemy import func, select\n"
        "from reportdb.models import Operation, StoredTensor\n"
        "with r.session() as session:\n"
        "    names = session.scalars(select(Operation.name)).all()\n"
        "    count = session.scalar(select(func.count()).select_from(StoredTensor))\n"
        "print(json.dumps([s.tensors, s.schema_revision == s.schema_head, len(infos), values, names, count, real]))\n"
        "print('sqlalchemy.orm' in sys.modules)\n"
        "r.close()\n"
    )
    metadata, values, answers, orm = run_python(code, str(small_report))
    assert json.loads(metadata) == []
    assert json.loads(values) == ["ml_dtypes", "numpy"]
    expected = [np.arange(12).reshape(3, 4).tolist(), [1] * 5, [[1.0] * 3] * 2, "bfloat16"]
    # after the first value read, the modules that read it hold numpy itself: later reads pay no lazy look-up
    assert json.loads(answers) == [3, True, 3, expected, ["ttnn.add"], 3, [True, True]]
    assert orm == "True"


def test_cli_info_and_ls_import_no_numpy(small_report: Path) -> None:
    """The ``info`` and ``ls`` commands' own code path, on a folder (which also looks for legacy tensor files), with a
    bfloat16 tensor stored: neither numpy nor anything heavier (no ORM, no alembic, no ml_dtypes, no extra's package).
    Reading a tensor's values right after, in the same process, loads numpy then and reads them right."""
    for command in (["info"], ["ls"], ["info", "--json"], ["ls", "--json"]):
        code = (
            "import json, sys\n"
            "from reportdb.cli import cli\n"
            "cli.main(sys.argv[1:], prog_name='reportdb', standalone_mode=False)\n"
            f"{LOADED}\n"
            "import reportdb\n"
            "with reportdb.open(sys.argv[2]) as r:\n"
            "    print(json.dumps([r.tensor(1).tolist(), float(r.tensor(3).astype(float).sum()), 'numpy' in sys.modules]))\n"
        )
        *output, loaded, values = run_python(code, command[0], str(small_report), *command[1:])
        assert json.loads(loaded) == [], command
        assert json.loads(values) == [np.arange(12).reshape(3, 4).tolist(), 6.0, True]
        if "--json" not in command:
            assert any("bfloat16" in line for line in output) == (command[0] == "ls"), output
            continue
        answer = json.loads("\n".join(output))
        assert (answer["tensors"] if command[0] == "info" else len(answer)) == 3


def test_help_imports_no_numpy() -> None:
    code = (
        "import json, sys\n"
        "from reportdb.cli import cli\n"
        "cli.main(['--help'], prog_name='reportdb', standalone_mode=False)\n"
        f"{LOADED}\n"
    )
    *output, loaded = run_python(code)
    assert json.loads(loaded) == [] and any("info" in line for line in output)


def test_reading_older_and_legacy_schemas_imports_no_alembic(tmp_path: Path) -> None:
    """Classifying a file as an older reportdb schema, or a legacy TTNN report, uses the revisions read as text (and
    needs no numpy)."""
    older = tmp_path / "older.sqlite"
    conn = connect(older, readonly=False)
    schema.upgrade(engine_for(conn, readonly=False), target="0002")
    conn.close()
    legacy = tmp_path / "legacy"
    shutil.copytree(FIXTURES / "ttnn-0.62.2-bin" / "report", legacy, ignore=shutil.ignore_patterns("tensors"))
    code = (
        "import json, sys\n"
        "import reportdb\n"
        "revisions = []\n"
        "for path in sys.argv[1:]:\n"
        "    with reportdb.open(path) as r:\n"
        "        revisions.append(r.summary().schema_revision)\n"
        "print(json.dumps(revisions))\n"
        f"{LOADED}\n"
    )
    revisions, loaded = run_python(code, str(older), str(legacy))
    assert json.loads(revisions) == ["0002", None]
    assert json.loads(loaded) == []


def _alembic_answer() -> tuple[set[str], str | None]:
    scripts = ScriptDirectory.from_config(schema._alembic_config())
    return {s.revision for s in scripts.walk_revisions()}, scripts.get_current_head()


def test_revisions_read_as_text_are_alembics() -> None:
    """The revisions and head that open-time classification uses equal alembic's, so the two cannot drift apart."""
    known, head = _alembic_answer()
    assert schema.known_revisions() == known and schema.head_revision() == head
    assert len(known) >= 4


def _scripts_folder(tmp_path: Path, extra: dict[str, str]) -> Path:
    """A copy of reportdb's migration scripts plus ``extra`` (file name -> source) in ``tmp_path/migrations``."""
    folder = tmp_path / "migrations"
    shutil.copytree(schema._migrations_folder(), folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name, source in extra.items():
        (folder / "versions" / name).write_text(source)
    return folder


_ANNOTATED = '''"""A later revision in alembic's current template style (annotated module variables)."""
from typing import Sequence, Union

revision: str = "0007"
down_revision: Union[str, Sequence[str], None] = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass
'''

_BRANCH = '''revision = "0007b"
down_revision = '0006'


def upgrade() -> None:
    pass
'''

_MERGE = '''"""Merges 0007 and 0007b.

revision = "0007c" (a docstring line that reads like one: the module's own assignment, after it, wins)
"""
revision = "0008"  # a trailing comment
down_revision = ("0007", "0007b")


def upgrade() -> None:
    pass
'''


def test_revisions_follow_added_scripts_as_alembic_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Added scripts, annotated variables, a branch and its merge: the text reading still equals alembic's walk."""
    folder = _scripts_folder(tmp_path, {"0007_a.py": _ANNOTATED, "0007_b.py": _BRANCH, "0008_merge.py": _MERGE})
    monkeypatch.setattr(schema, "_migrations_folder", lambda: folder)
    schema._revisions.cache_clear()
    try:
        known, head = _alembic_answer()
        assert known == {"0001", "0002", "0003", "0004", "0005", "0006", "0007", "0007b", "0008"} and head == "0008"
        assert schema.known_revisions() == known and schema.head_revision() == head
    finally:
        schema._revisions.cache_clear()


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("revision = make_name()\ndown_revision = '0006'\n", "declares no literal revision"),
        ("down_revision = '0006'\n", "declares no literal revision"),
        ("revision = 5\ndown_revision = '0006'\n", "declares no revision name"),
        ("revision = '0007'\ndown_revision = '0003'\n", "2 heads"),
    ],
)
def test_damaged_scripts_are_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, message: str
) -> None:
    folder = _scripts_folder(tmp_path, {"0007_bad.py": source})
    monkeypatch.setattr(schema, "_migrations_folder", lambda: folder)
    schema._revisions.cache_clear()
    try:
        with pytest.raises(SchemaError, match=message):
            schema.head_revision()
    finally:
        schema._revisions.cache_clear()
