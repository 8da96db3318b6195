"""Chunk bytes of a team store in S3-compatible object storage (``push --chunks s3://BUCKET/PREFIX``).

PostgreSQL keeps what is queried (reports, rows, chunk references) and, per chunk kept in the bucket, a
``team_object`` row (its key and stored size); the bytes are objects named by their content address, so identical
content is one object whoever pushed it. The store remembers its bucket in ``team_meta`` (key ``chunks``), so every
other command finds it without a flag.

The client is boto3 (``pip install 'reportdb[s3]'``), imported on first use: botocore reads credentials, region and
endpoint from every standard place (``AWS_*`` variables, ``~/.aws/config`` and ``credentials`` with profiles,
``AWS_ENDPOINT_URL`` for MinIO, Ceph RGW or any S3-compatible server), and one client is safe to share between
threads. An upload sends the chunk's crc32 (which the report already holds) as the object's ``x-amz-checksum-crc32``,
so the server refuses bytes damaged on the way, and is confirmed by the checksum it echoes (or, from a server that
keeps none, by a HEAD of the object's size) before the PostgreSQL transaction that names it commits. What comes back
is never trusted: an object's size is checked against its row before it is read, and its bytes against the chunk's
crc32 and content address by the caller (``pull.prove_chunk``).
"""

from __future__ import annotations

import base64
import collections
import re
import threading
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, TypeVar

from ..errors import InvalidArgumentError, MissingObjectError, ObjectStoreError, ReportDBError
from . import server

if TYPE_CHECKING:  # pragma: no cover
    import psycopg

#: The team_meta key under which a store keeps its object location.
META_KEY = "chunks"
#: Objects fetched ahead of the one being written by a pull (each up to a chunk's size: memory is bounded by it).
FETCH_AHEAD = 16
#: Keys per DeleteObjects request (S3's limit).
DELETE_BATCH = 1000
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_KEY = re.compile(r"([0-9a-f]{64})(?:\.([a-z0-9]+)\.([0-9a-f]{8}))?")

T = TypeVar("T")
R = TypeVar("R")


def key_name(digest: bytes, codec: str, crc32: int) -> str:
    """The object name of a chunk under the prefix: its content address in hex; a compressed chunk's also names the
    codec and the crc32 of its stored bytes (the same content compressed otherwise is another object)."""
    return digest.hex() if not codec else f"{digest.hex()}.{codec}.{crc32:08x}"


def parse_key(name: str) -> tuple[bytes, str, int] | None:
    """The chunk key (digest, codec, crc32) an object name stands for; None for a name no push makes."""
    m = _KEY.fullmatch(name)
    if m is None:
        return None
    digest = bytes.fromhex(m.group(1))
    return (digest, "", -1) if m.group(2) is None else (digest, m.group(2), int(m.group(3), 16))


def _boto3() -> Any:
    try:
        import boto3
    except ImportError as exc:
        raise ReportDBError(
            f"chunks in object storage need boto3, which is not installed ({exc}): pip install 'reportdb[s3]'"
        ) from None
    return boto3


@dataclass
class ObjectStore:
    """The bucket and prefix (``s3://BUCKET/PREFIX``) where a team store keeps its chunk bytes, with one boto3 client
    shared by the threads of a push or pull (made on first use, with a connection for each of ``connections``)."""

    location: str
    bucket: str
    prefix: str
    connections: int = 16
    _client: Any = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def parse(cls, location: str, connections: int = 16) -> "ObjectStore":
        """``s3://BUCKET[/PREFIX]``: a bucket name as S3 allows them and a prefix of printable characters (a trailing
        ``/`` is added); anything else is an InvalidArgumentError saying what to give."""
        if not isinstance(location, str) or not location.startswith("s3://"):
            raise InvalidArgumentError(f"chunks location {location!r}: give s3://BUCKET/PREFIX")
        bucket, _, prefix = location[5:].partition("/")
        if not _BUCKET.fullmatch(bucket) or ".." in bucket:
            raise InvalidArgumentError(f"chunks location {location!r}: {bucket!r} is not an S3 bucket name "
                                       "(3 to 63 lowercase letters, digits, dots and hyphens)")
        prefix = prefix.strip("/")
        if len(prefix) > 512 or any(ord(c) < 32 or ord(c) == 127 or c == "\\" for c in prefix) or "//" in prefix:
            raise InvalidArgumentError(f"chunks location {location!r}: the prefix must be printable text of at most "
                                       "512 characters without empty parts")
        prefix = f"{prefix}/" if prefix else ""
        return cls(f"s3://{bucket}/{prefix}", bucket, prefix, connections)

    @property
    def client(self) -> Any:
        """The boto3 S3 client (credentials, region and endpoint from the standard places); made once."""
        with self._lock:
            if self._client is None:
                from botocore.config import Config

                # retries as configured (AWS_RETRY_MODE, AWS_MAX_ATTEMPTS, ~/.aws/config); no checksums of botocore's
                # own: the put sends the chunk's crc32, and what comes back is checked by crc32 and content address
                config = Config(max_pool_connections=self.connections, request_checksum_calculation="when_required",
                                response_checksum_validation="when_required")
                with self._mapped("connecting"):
                    self._client = _boto3().session.Session().client("s3", config=config)
            return self._client

    def check(self) -> None:
        """Raise an ObjectStoreError unless the bucket exists and answers (before a store is pointed at it)."""
        with self._mapped(f"looking up bucket {self.bucket}"):
            try:
                self.client.head_bucket(Bucket=self.bucket)
            except self.client.exceptions.ClientError as exc:
                if _code(exc) in ("404", "NoSuchBucket", "NotFound"):
                    raise ObjectStoreError(f"{self.location}: there is no bucket {self.bucket!r} there; check that the "
                                           "bucket exists (and AWS_ENDPOINT_URL, for a server other than AWS)") from None
                raise

    def key(self, digest: bytes, codec: str, crc32: int) -> str:
        """The object key of a chunk: the prefix and its name (``key_name``)."""
        return self.prefix + key_name(digest, codec, crc32)

    def _mapped(self, doing: str) -> Any:
        """A context in which botocore's errors become ObjectStoreErrors saying what was being done."""
        return _Mapped(self, doing)

    def put(self, key: str, data: Any, crc32: int) -> None:
        """Upload ``data`` as ``key`` and confirm the server holds exactly it: the server checks the crc32 sent with
        it, and its echo (else a HEAD of the object's size) confirms it before this returns."""
        sent = base64.b64encode(crc32.to_bytes(4, "big")).decode()
        with self._mapped(f"uploading {key}"):
            answer = self.client.put_object(Bucket=self.bucket, Key=key, Body=data, ContentLength=len(data),
                                            ChecksumAlgorithm="CRC32", ChecksumCRC32=sent)
            echoed = answer.get("ChecksumCRC32")
            if echoed is not None:
                confirmed = echoed == sent
            else:
                confirmed = self.head(key) == len(data)
        if not confirmed:
            raise ObjectStoreError(f"{self.location}: the object storage did not confirm {key} as sent; push again")

    def head(self, key: str) -> int | None:
        """The size of object ``key``, None when there is none."""
        with self._mapped(f"looking up {key}"):
            try:
                return int(self.client.head_object(Bucket=self.bucket, Key=key)["ContentLength"])
            except self.client.exceptions.ClientError as exc:
                if _code(exc) in ("404", "NoSuchKey", "NotFound"):
                    return None
                raise

    def get(self, key: str, size: int, what: str) -> bytes:
        """The bytes of object ``key``, which must be ``size`` long (checked from its header before the body is
        read, and again after): a missing object is a MissingObjectError, another size a CorruptionError."""
        from ..errors import CorruptionError

        with self._mapped(f"downloading {key}"):
            try:
                answer = self.client.get_object(Bucket=self.bucket, Key=key)
            except self.client.exceptions.NoSuchKey:
                raise MissingObjectError(
                    f"{what}: its object {self.location}{key[len(self.prefix):]} is missing from the bucket (deleted "
                    "behind the store's back); `reportdb verify --repair` on the store lists the reports hit, and then "
                    "pushing one again restores it") from None
            body = answer["Body"]
            try:
                if answer.get("ContentLength") != size:
                    raise CorruptionError(
                        f"{what}: its object {key} holds {answer.get('ContentLength')} bytes, not the {size} the store "
                        "names (truncated or replaced in the bucket); refused: push the report again from the original")
                data = body.read()
            finally:
                body.close()
        if len(data) != size:
            raise CorruptionError(f"{what}: its object {key} came with {len(data)} bytes, not {size}; refused")
        return bytes(data)

    def delete(self, keys: list[str]) -> None:
        """Delete objects ``keys`` (an absent one is no error)."""
        for start in range(0, len(keys), DELETE_BATCH):
            part = keys[start:start + DELETE_BATCH]
            with self._mapped("deleting unused objects"):
                answer = self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in part], "Quiet": True})
            errors = answer.get("Errors") or []
            if errors:
                raise ObjectStoreError(f"{self.location}: {len(errors)} objects could not be deleted "
                                       f"({errors[0].get('Code')}: {errors[0].get('Message')}); run the delete again")

    def listing(self) -> Iterator[tuple[str, datetime]]:
        """Every object under the prefix that names a chunk: (key, last modified)."""
        with self._mapped("listing the bucket"):
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix)
            for page in pages:
                for item in page.get("Contents") or []:
                    if parse_key(item["Key"][len(self.prefix):]) is not None:
                        yield item["Key"], item["LastModified"]


def _code(exc: BaseException) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


class _Mapped:
    """Raise botocore's errors as ObjectStoreErrors naming the location and what to check (ReportDBErrors pass)."""

    def __init__(self, store: ObjectStore, doing: str) -> None:
        self.store, self.doing = store, doing

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None or isinstance(exc, ReportDBError) or not type(exc).__module__.startswith(("botocore", "boto3")):
            return
        code = _code(exc)
        hint = "check the credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws/credentials)" \
            if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch") \
            or type(exc).__name__ in ("NoCredentialsError", "PartialCredentialsError") else \
            "check that the bucket exists" if code == "NoSuchBucket" else \
            "check the endpoint (AWS_ENDPOINT_URL) and region (AWS_REGION), and that the server runs"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ObjectStoreError(f"{self.store.location}: the object storage failed while {self.doing} ({first}); {hint}; "
                               "nothing partial is visible to others") from exc


def location(conn: "psycopg.Connection[Any]") -> str | None:
    """The object location a store keeps chunk bytes in (``team_meta``), None when it keeps them in PostgreSQL."""
    row = conn.execute("SELECT value FROM team_meta WHERE key = %s", (META_KEY,)).fetchone()
    return row[0] if row and isinstance(row[0], str) else None


def open_store(conn: "psycopg.Connection[Any]", store: server.StoreURL, connections: int = 16) -> ObjectStore | None:
    """The store's ObjectStore, None when its chunks are in PostgreSQL (its tables must exist)."""
    with server.mapped(store, "reading where its chunks are"), conn.transaction():
        found = location(conn)
    return None if found is None else ObjectStore.parse(found, connections)


def adopt(conn: "psycopg.Connection[Any]", store: server.StoreURL, chunks: str | None,
          connections: int = 16) -> ObjectStore | None:
    """The object store a push writes to: the one the store remembers; ``chunks`` must then be that one. A store
    without one takes ``chunks`` only while it holds no chunk in PostgreSQL (its ``team_object`` table is made, and
    the store marked schema 2, which older reportdb versions refuse rather than misread)."""
    wanted = None if chunks is None else ObjectStore.parse(chunks, connections)
    with server.mapped(store, "reading where its chunks are"), conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (server.SCHEMA_LOCK,))
        found = location(conn)
        if found is None and wanted is not None:
            wanted.check()
            held = conn.execute("SELECT EXISTS (SELECT 1 FROM team_chunk)").fetchone()
            if held and held[0]:
                raise InvalidArgumentError(
                    f"{store.display} keeps its chunks in PostgreSQL; object storage ({wanted.location}) can be "
                    "chosen only for a new store: push to a new database with --chunks")
            for statement in server.object_ddl():
                conn.execute(statement.encode())
            conn.execute("INSERT INTO team_meta (key, value) VALUES (%s, %s)", (META_KEY, wanted.location))
            conn.execute("UPDATE team_meta SET value = '2' WHERE key = 'schema_version'")
            return wanted
    if found is None:
        return None
    if wanted is not None and wanted.location != found:
        raise InvalidArgumentError(f"{store.display} keeps its chunks in {found}, not {wanted.location}: "
                                   "leave --chunks out (the store remembers its location)")
    return ObjectStore.parse(found, connections)


def ordered(items: Iterable[T], fetch: Callable[[T], R], workers: int = FETCH_AHEAD,
            pool: Executor | None = None) -> Iterator[tuple[T, R]]:
    """``(item, fetch(item))`` in the order of ``items``, with up to ``workers`` calls in flight ahead of the one
    handed out (memory: that many objects), on ``pool`` (else threads of its own); the first call to fail raises
    here, and the calls not started are cancelled."""
    workers = max(1, workers)
    if pool is None:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reportdb-objects") as own:
            yield from ordered(items, fetch, workers, own)
        return
    window: collections.deque[tuple[T, Future[R]]] = collections.deque()
    try:
        for item in items:
            window.append((item, pool.submit(fetch, item)))
            if len(window) > workers:
                done, future = window.popleft()
                yield done, future.result()
        while window:
            done, future = window.popleft()
            yield done, future.result()
    finally:
        for _, future in window:
            future.cancel()
        for _, future in window:  # none outlives the call (a caller may close what they use)
            if not future.cancelled():
                future.exception()
