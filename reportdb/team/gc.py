"""Garbage collection in a team store: removing reports and the chunks only they used, and the staging rows of
pushes that were killed and never run again.

Removing is two transactions. The first deletes the report rows (their tables, rows, history and chunk references go
with them), so they are gone for readers at once, and notes the chunk keys they referenced. The second, holding the
collector's advisory lock exclusively, deletes those chunks that no reference names any more. Pushes reference their
chunks before uploading, check "already stored" only under the same lock held shared, and hold their staging row
(``FOR KEY SHARE``) while a batch uploads (``push.py``), so a chunk a push counts on is never taken, and a push
whose staging row was collected stops at its next batch instead of leaving chunks nothing references.

A push's staging row records its last activity in ``pushed_at`` (set when claimed or resumed, and after every
batch). One older than ``stale_after`` (:data:`STALE_AFTER` by default, ``REPORTDB_TEAM_STALE_HOURS`` overrides it)
belongs to a push nobody reran: the next push or delete on the store collects it.

In a store keeping chunk bytes in object storage (``objects.py``) the same protocol covers the objects: a
``team_object`` row is deleted, and its object with it, only under the lock held exclusively and only when no
reference (of a published report or of a push under way) names its key, and the row goes first (a row must never
name an object that is gone). Objects without a row (a push killed between its upload and its batch's commit) are
found by listing the bucket (``collect_objects``, ``reportdb gc``), checked and deleted under the same lock.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import ConfigError, InvalidArgumentError, ReportDBError
from . import objects, server

if TYPE_CHECKING:  # pragma: no cover
    import psycopg

#: How long a push's staging row may sit untouched before it counts as the leftover of a killed push.
STALE_AFTER = timedelta(hours=24)
STALE_ENV = "REPORTDB_TEAM_STALE_HOURS"


def stale_after(value: timedelta | float | None = None) -> timedelta:
    """The age after which a staging row is collected: ``value`` (a timedelta or seconds), else the environment's
    ``REPORTDB_TEAM_STALE_HOURS``, else :data:`STALE_AFTER`. Zero or less is refused: a running push would lose its
    row."""
    if value is None:
        text = os.environ.get(STALE_ENV)
        if text is None or not text.strip():
            return STALE_AFTER
        try:
            hours = float(text)
        except ValueError:
            hours = float("nan")
        if not 0 < hours < 1e6:
            raise ConfigError(f"{STALE_ENV}={text!r}: give a number of hours above 0 (such as 24)")
        return timedelta(hours=hours)
    if isinstance(value, bool) or not isinstance(value, (timedelta, int, float)):
        raise InvalidArgumentError(f"stale_after must be a timedelta or a number of seconds, not {value!r}")
    age = value if isinstance(value, timedelta) else timedelta(seconds=value)
    if not age > timedelta(0):
        raise InvalidArgumentError(f"stale_after must be above zero (a running push would lose its row), not {value!r}")
    return age


def remove(conn: "psycopg.Connection[Any]", report_ids: Sequence[int],
           bucket: objects.ObjectStore | None = None) -> tuple[int, int]:
    """Delete reports ``report_ids`` (rows locked by the caller's open, implicit transaction, which this commits) and
    then collect their chunks that no other report references: returns (chunks collected, their stored bytes). In a
    store keeping chunks in ``bucket``, their objects are deleted too (``_drop_objects``)."""
    candidates = conn.execute(
        "SELECT DISTINCT digest, codec, crc32 FROM team_report_chunk WHERE report_id = ANY(%s)", (list(report_ids),)
    ).fetchall()
    conn.execute("DELETE FROM team_report WHERE id = ANY(%s)", (list(report_ids),))
    conn.commit()
    if not candidates:
        return 0, 0
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (server.GC_LOCK,))
        conn.execute("CREATE TEMP TABLE team_gc (digest bytea, codec text, crc32 bigint) ON COMMIT DROP")
        with conn.cursor().copy("COPY team_gc (digest, codec, crc32) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["bytea", "text", "int8"])
            for c in candidates:
                copy.write_row(c)
        gone = conn.execute(
            f"DELETE FROM {'team_chunk' if bucket is None else 'team_object'} c USING team_gc g"
            " WHERE c.digest = g.digest AND c.codec = g.codec AND c.crc32 = g.crc32 AND NOT EXISTS (SELECT 1 FROM"
            " team_report_chunk r WHERE r.digest = c.digest AND r.codec = c.codec AND r.crc32 = c.crc32)"
            " RETURNING c.nbytes, c.digest, c.codec, c.crc32"
        ).fetchall()
        failed = None if bucket is None else _drop_objects(bucket, [(bytes(r[1]), r[2], r[3]) for r in gone])
    if failed is not None:
        raise failed
    return len(gone), sum(int(r[0]) for r in gone)


def _drop_objects(bucket: objects.ObjectStore, keys: Sequence[tuple[bytes, str, int]]) -> BaseException | None:
    """Delete the objects of ``keys`` (their rows deleted in the caller's transaction, under the collector's lock
    held exclusively, which no push can pass to find a chunk stored or to upload one); returns the error that stopped
    it, if any, for the caller to raise *after* committing: a row must never outlive its object (a push would count
    on it), while an object left without a row is only garbage, which ``collect_objects`` takes later."""
    try:
        bucket.delete([bucket.key(*k) for k in keys])
    except ReportDBError as exc:
        return exc
    return None


def collect_objects(conn: "psycopg.Connection[Any]", store: server.StoreURL, bucket: objects.ObjectStore,
                    grace: timedelta) -> int:
    """Delete the objects under the bucket's prefix that no ``team_object`` row and no chunk reference names and that
    are older than ``grace`` (those a push killed between its upload and its batch's commit left, or a delete that
    failed half-way): returns how many. The bucket is listed first, without a lock; each candidate is then checked
    and deleted under the collector's lock held exclusively, as ``remove`` does, so an object a push counts on (its
    references are committed before it looks or uploads) is never taken."""
    from datetime import datetime, timezone

    cutoff = datetime.now(timezone.utc) - grace
    removed = 0
    names: list[str] = []
    for name, modified in bucket.listing():  # a page of names at a time: memory does not grow with the bucket
        if modified < cutoff:
            names.append(name)
        if len(names) == objects.DELETE_BATCH:
            removed += _drop_unnamed(conn, store, bucket, names)
            names = []
    return removed + (_drop_unnamed(conn, store, bucket, names) if names else 0)


def _drop_unnamed(conn: "psycopg.Connection[Any]", store: server.StoreURL, bucket: objects.ObjectStore,
                  names: list[str]) -> int:
    """Delete the objects ``names`` (listed under the bucket's prefix) that no row names, checked and deleted under
    the collector's lock held exclusively; returns how many."""
    keys = [objects.parse_key(n[len(bucket.prefix):]) for n in names]
    with server.mapped(store, "collecting unused objects"), conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (server.GC_LOCK,))
        named = {(bytes(d), c, crc if c else -1) for d, c, crc in conn.execute(
            "SELECT digest, codec, crc32 FROM team_object WHERE digest = ANY(%(d)s) UNION ALL SELECT digest, codec,"
            " crc32 FROM team_report_chunk WHERE digest = ANY(%(d)s)", {"d": [k[0] for k in keys if k]})}
        unused = [n for n, k in zip(names, keys) if k is not None and k not in named]
        bucket.delete(unused)
    return len(unused)


def collect_stale(conn: "psycopg.Connection[Any]", store: server.StoreURL, age: timedelta,
                  bucket: objects.ObjectStore | None = None) -> tuple[int, int, int]:
    """Remove the staging rows untouched for longer than ``age`` and the chunks only they referenced (their objects in
    ``bucket``): returns (reports, chunks, bytes) collected. Rows a push holds right now are skipped (``SKIP
    LOCKED``)."""
    with server.mapped(store, "collecting the leftovers of killed pushes"):
        try:  # the SELECT opens the transaction that remove() commits
            ids = [r[0] for r in conn.execute(
                "SELECT id FROM team_report WHERE state = 'staging' AND pushed_at < now() - %s"
                " FOR UPDATE SKIP LOCKED", (age,))]
            if not ids:
                conn.rollback()
                return 0, 0, 0
            chunks, nbytes = remove(conn, ids, bucket)
        except BaseException:
            conn.rollback()
            raise
    return len(ids), chunks, nbytes
