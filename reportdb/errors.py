"""Every error reportdb raises on purpose is a ReportDBError, so callers can catch one type."""

from __future__ import annotations


class ReportDBError(Exception):
    """Base class of all errors raised on purpose by reportdb."""


class ReportNotFoundError(ReportDBError, FileNotFoundError):
    """The path names no report folder or database."""


class NotAReportError(ReportDBError):
    """The file exists but is not a SQLite database."""


class FormatError(ReportDBError):
    """A tensor file is malformed, truncated or of an unknown kind."""


class UnsafePickleError(FormatError):
    """A .pt pickle asked for something other than torch's tensor rebuild functions."""


class UnsupportedDTypeError(ReportDBError):
    """A dtype (numpy, ttnn or torch) that reportdb cannot store or decode."""


class SchemaError(ReportDBError):
    """The database schema cannot be used as asked (read-only on an old schema, unknown layout...)."""


class SchemaTooNewError(SchemaError):
    """The database was written by a newer reportdb; it is left untouched."""


class CorruptionError(ReportDBError):
    """Stored bytes do not match their digest."""


class CompressionUnavailableError(ReportDBError):
    """Compression was asked for, or a stored chunk is compressed, and no zstd library is installed."""


class TensorNotFoundError(ReportDBError, KeyError):
    """No tensor is stored under the given id and rank."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class AssemblyError(ReportDBError):
    """A multi-device tensor cannot be assembled into one array; read its shards instead."""


class UnsafeReportError(ReportDBError):
    """The report holds something reportdb refuses to run or write through: a view or a non-table under one of
    reportdb's ``rdb_*`` names, triggers on reportdb's tables, or (for writes) triggers anywhere."""


class QueryTimeoutError(ReportDBError):
    """A query on the report ran longer than reportdb allows (a hostile or damaged schema can make one spin)."""
