"""Replace the absolute folder a fixture was made in by the path relative to the checkout, in the texts ttnn wrote.

ttnn records the source file of each operation's caller (stack traces, ``source_files``, the tensor-lifetime sidecar
and table), so a report made by ``comparison_sidecars.py`` names the folder its maker ran it from, a developer's
worktree. This rewrites every ``<folder>/tests/data/make/`` to ``tests/data/make/`` in the report folder's JSON
files and in the text cells of its ``db.sqlite`` (only those; no other byte of a value changes), so a fixture says
nothing about the machine that made it. Standard library only:

    python neutral_paths.py REPORT_FOLDER
"""

from __future__ import annotations

import re
import sqlite3
import sys
from pathlib import Path

#: An absolute folder ending in the checkout's fixture-maker folder, as a caller's file path in ttnn's records.
MADE_IN = re.compile(r"/[^\s\"']*?/(tests/data/make/)")


def neutral(text: str) -> str:
    """``text`` with every absolute ``.../tests/data/make/`` made relative to the checkout."""
    return MADE_IN.sub(r"\1", text)


def rewrite(folder: Path) -> int:
    """Rewrite the report folder's JSON files and its database's text cells; the number of cells and files changed."""
    changed = 0
    for path in sorted(folder.glob("*.json")):
        text = path.read_text()
        if neutral(text) != text:
            path.write_text(neutral(text))
            changed += 1
    with sqlite3.connect(folder / "db.sqlite") as conn:
        tables = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for column in [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]:
                rows = conn.execute(f'SELECT rowid, "{column}" FROM "{table}" WHERE typeof("{column}") = \'text\' '
                                    f'AND "{column}" LIKE \'%/tests/data/make/%\'').fetchall()
                for rowid, value in rows:
                    conn.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = ?', (neutral(value), rowid))
                changed += len(rows)
    return changed


if __name__ == "__main__":
    print(f"{rewrite(Path(sys.argv[1]))} files and cells made neutral")
