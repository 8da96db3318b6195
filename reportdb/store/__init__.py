"""Storage layer under ``Report``: connection settings (engine), open-time schema decisions (schema), chunked blobs
(blobs, bulk, codec), the tensor write path (tensors) and the reading and checking of tensor rows (rows), with the
writer's WAL checkpoint thread (checkpoint), the file's early writeback (writeback) and the digests computed before
a write (prepared); the helper thread pools
they share with ``numeric`` and ``web`` are ``reportdb.pools``. The ORM models of the report
and ``rdb_*`` tables are ``reportdb.models``."""
