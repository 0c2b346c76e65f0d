"""User-facing errors: one line that names the file, the record and the problem."""

from __future__ import annotations


class BencaoError(Exception):
    """An error caused by the user's input or configuration.

    The CLI prints ``str(err)`` on one line and exits non-zero, without a traceback.
    """


class InputError(BencaoError):
    """Bad input data: names the file, the record (line or row) and what is wrong."""

    def __init__(self, path: object, problem: str, record: object | None = None):
        self.path = str(path)
        self.record = record
        self.problem = problem
        where = self.path if record is None else f"{self.path}:{record}"
        super().__init__(f"{where}: {problem}")


class ConfigError(BencaoError):
    """A configuration file or override that cannot be used."""


class InvalidValue(BencaoError, ValueError):
    """A value that cannot be stored (an empty name, a control character, a lone surrogate, a name
    over the length limit). Raised where the value is checked, without the file; the ingestion
    registry turns it into an :class:`InputError` naming the file and the record being read."""


class DiskFull(BencaoError):
    """The file system (or the SQLite store's size limit) ran out of space while writing."""


def is_disk_full(exc: BaseException) -> bool:
    """An OSError ENOSPC/EDQUOT, or SQLite's SQLITE_FULL ("database or disk is full")."""
    import errno

    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        return True
    if isinstance(exc, OSError) and exc.errno is None:  # numpy's tofile on a full disk: "3025 requested and 2032 written"
        import re

        if re.fullmatch(r"\d+ requested and \d+ written", str(exc)):
            return True
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and code & 0xFF == 13:  # SQLITE_FULL
        return True
    return type(exc).__name__ == "OperationalError" and "database or disk is full" in str(exc)
