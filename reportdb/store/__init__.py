"""Storage layer under ``Report``: connection settings (engine), open-time schema decisions (schema), chunked blobs
(blobs, bulk, codec), the tensor write path (tensors) and the reading and checking of tensor rows (rows), with their
helper threads (pools, checkpoint) and the digests computed before a write (prepared). The ORM models of the report
and ``rdb_*`` tables are ``reportdb.models``."""
