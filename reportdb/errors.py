"""Every error reportdb raises on purpose is a ReportDBError, so callers can catch one type."""

from __future__ import annotations


class ReportDBError(Exception):
    """Base class of all errors raised on purpose by reportdb."""


class ReportNotFoundError(ReportDBError, FileNotFoundError):
    """The path names no report folder or database."""


class NotAReportError(ReportDBError):
    """The file exists but is not a report database: not SQLite, empty, or a database without the tables every report
    has (``reportdb.recognize``); it was not changed."""


class FormatError(ReportDBError):
    """A tensor file is malformed, truncated or of an unknown kind."""


class UnsafePickleError(FormatError):
    """A .pt pickle asked for something other than torch's tensor rebuild functions."""


class SidecarError(FormatError):
    """A comparison-records or tensor-lifetime sidecar cannot be read or kept whole; nothing was written."""


class UnsupportedDTypeError(ReportDBError):
    """A dtype (numpy, ttnn or torch) that reportdb cannot store or decode."""


class SchemaError(ReportDBError):
    """The database schema cannot be used as asked (read-only on an old schema, unknown layout...)."""


class SchemaTooNewError(SchemaError):
    """The database was written by a newer reportdb; it is left untouched."""


class CorruptionError(ReportDBError):
    """Stored bytes do not match their digest, or SQLite found the database file damaged or not a database."""


class DiskError(ReportDBError, OSError):
    """The disk refused a read or write of the report: it is full, or the device reported an I/O error. The file is
    not damaged by this (SQLite rolled the transaction back); free space or fix the device and run again."""


class ConstraintError(ReportDBError):
    """A write broke one of the report's own constraints (a duplicate key, a dangling reference, a NOT NULL column):
    the statement was refused and nothing of it was written."""


class ReportClosedError(ReportDBError):
    """The Report (or its connection) was used after ``close()``: open the report again to go on reading it."""


class ResourceLimitError(ReportDBError):
    """A query on the report made SQLite build a value larger than reportdb allows, or run out of memory: a hostile
    or damaged schema (an SQL function in a view, say) or a read too large for the memory there is."""


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
    reportdb's ``rdb_*`` names (in any letter case), triggers on reportdb's tables, or (for writes) triggers anywhere,
    generated columns, or a database or side file (``-journal``, ``-wal``, ``-shm``) that is not a regular file."""


class QueryTimeoutError(ReportDBError):
    """A query on the report ran longer than reportdb allows (a hostile or damaged schema can make one spin)."""


class TensorExistsError(ReportDBError):
    """A tensor is already stored under this id and rank."""


class ComparisonError(ReportDBError, ValueError):
    """compare() was called with invalid tolerances or thresholds."""


class PolicyError(ReportDBError, ValueError):
    """A tolerance policy file (or object) that cannot be used: the message names the file and line."""


class StatsError(ReportDBError, ValueError):
    """compute_stats was called with an invalid argument (bins < 1...)."""


class PlotUnavailableError(ReportDBError):
    """matplotlib is not installed."""


class PlotFormatError(ReportDBError, ValueError):
    """The output file's suffix names no picture format reportdb can write."""


class ExportFormatError(ReportDBError, ValueError):
    """The output path has a suffix reportdb cannot write."""


class OutputPathError(ReportDBError, OSError):
    """The output file cannot be created where the user asked (no such folder, no permission, disk full)."""


class MigrationError(ReportDBError):
    """A legacy report folder cannot be migrated as asked; nothing was changed."""


class NotAReportFolderError(MigrationError, ReportNotFoundError):
    """The path is not a report folder (a folder holding a TTNN ``db.sqlite``)."""


class VerificationError(MigrationError):
    """Stored tensors failed verification; the destination was not replaced."""


class UnreadableTensorFileError(MigrationError):
    """A tensor file could not be read and ``strict`` was asked for."""


class UnsafeFolderError(MigrationError, UnsafeReportError):
    """The report folder holds something reportdb refuses to read through: its ``db.sqlite`` is a symbolic link or
    not a regular file (a FIFO would block forever), or its schema puts a view under one of reportdb's names."""


class MigrationWriteError(MigrationError):
    """Writing the new database failed (disk full, file size limit, I/O error); the message names what was kept."""


class RowsRefusedError(ReportDBError):
    """Rows the report's own constraints refused when their batch was written (a duplicate key, a dangling
    reference); every other row and tensor of the batch was committed."""


class InvalidArgumentError(ReportDBError, ValueError):
    """reportdb was called with an argument it cannot take (a mode, a slice, a compression name, a put's arrays, a
    command's options); the message says which and what it takes. Nothing was changed."""


class SpecError(InvalidArgumentError):
    """Tensor metadata (spec, distribution, placements, shapes) is malformed; read from a report, it becomes a
    CorruptionError naming the tensor."""


class UnsupportedArgumentsError(InvalidArgumentError):
    """An operation's recorded arguments (or inputs) that its replay reference cannot read or does not model;
    ``names`` lists each one, never guessed at (``reportdb replay`` reports them as ``unsupported_arguments``)."""

    def __init__(self, names: list[str], reason: str) -> None:
        super().__init__(f"unsupported arguments {', '.join(names)}: {reason}")
        self.names = tuple(names)
        self.reason = reason


class ConfigError(InvalidArgumentError):
    """A Writer setting, given as an argument or a ``REPORTDB_*`` environment variable, has an invalid value."""


class RowError(InvalidArgumentError):
    """A row given to the Writer does not fit the report's table (unknown table or column, a value SQLite cannot
    store); it is refused when added, before anything is queued."""


class ReadOnlyError(ReportDBError):
    """A write was asked of a report opened read-only, or of one that cannot be written where it lies."""


class ReportLockedError(ReportDBError):
    """Another process held the report's write lock for longer than reportdb waits."""


class WriterError(ReportDBError):
    """The Writer cannot take more work: it is closed, or its background write failed (the cause is chained)."""


class TtnnError(ReportDBError):
    """The installed ttnn cannot be used as asked (a version without the hook, fast runtime mode, a tensor whose
    values it cannot give back)."""


class TeamStoreError(ReportDBError):
    """The team store's PostgreSQL server cannot be reached, refused the login or a statement, or went away during an
    operation; nothing partial is visible to others (a push resumes when run again)."""


class ObjectStoreError(TeamStoreError):
    """The object storage (S3 or S3-compatible) that holds a team store's chunk bytes cannot be reached, refused the
    credentials or a request; nothing partial is visible to others (a push resumes when run again)."""


class MissingObjectError(CorruptionError):
    """An object a team store names (a chunk's bytes) is not in its bucket: deleted behind the store's back. The
    reports that use it cannot be pulled; ``reportdb verify URL`` lists them, pushing them again restores it."""


class ReportExistsError(ReportDBError):
    """The team store already holds a different report under this name, or a push of different content under it is
    under way or was interrupted; push under another name or delete it first. A Writer raises it for a report whose
    run has finished (write elsewhere, remove it, or ``append=True``) and, appending, for an operation already there."""


#: The most characters of a value from a report or tensor file that an error message shows (:func:`excerpt`).
EXCERPT_CHARS = 200


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """A bounded ``repr`` of ``value`` for an error message: at most ``limit`` characters, built without walking all
    of a large or deeply nested value (a hostile file's list of 14,000 references to one list of 30,000 items would
    make ``repr`` build gigabytes)."""
    import reprlib

    class _Bounded(reprlib.Repr):
        def repr_bytes(self, x: bytes, level: int) -> str:  # reprlib would repr() all of it, then cut
            return repr(bytes(x[:limit])) + ("..." if len(x) > limit else "")

        repr_bytearray = repr_bytes

        def repr_int(self, x: int, level: int) -> str:  # a huge int's decimal digits cost quadratic time
            return repr(x) if x.bit_length() <= 4 * limit else f"<an int of {x.bit_length()} bits>"

    shown = _Bounded()
    shown.maxlevel, shown.maxstring, shown.maxother, shown.maxlong = 3, limit, limit, limit
    shown.maxlist = shown.maxtuple = shown.maxdict = shown.maxset = shown.maxfrozenset = shown.maxdeque = 8
    text = shown.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
