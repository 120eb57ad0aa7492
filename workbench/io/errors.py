"""The error types of files read and written, and the one way a message quotes user data.

Every message that repeats what a user gave (a cell, a header, a name, a path) quotes it
through :func:`quoted` or :func:`listed`, which bound it; :func:`bounded` caps a whole
message, so that no input (a 200,000-column header, a 2 MB cell) makes an error line longer
than :data:`MESSAGE_CHARS`.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable
from pathlib import Path

QUOTE_CHARS = 80
"""Characters of one quoted value a message shows (its start; the rest is counted)."""

LIST_ITEMS = 8
"""Items of a quoted list a message shows (the first ones; the rest are counted)."""

MESSAGE_CHARS = 2000
"""Characters an error message may take at most (its start and its end are kept)."""


def quoted(value: object, limit: int = QUOTE_CHARS) -> str:
    """``repr(value)`` of at most about ``limit`` characters: a longer one keeps its start
    and says how long it was, e.g. ``'aaaa…' (2,000,000 characters)``."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = len(value) if isinstance(value, str | bytes) else len(text)
    return f"{text[:limit]}… ({size:,} characters)"


def listed(items: Iterable[object], limit: int = LIST_ITEMS) -> str:
    """A list of quoted items, at most ``limit`` of them: ``['a', 'b', …] and 199,998
    more``; each item bounded by :func:`quoted`."""
    values = list(items)
    shown = ", ".join(quoted(v) for v in values[:limit])
    if len(values) <= limit:
        return f"[{shown}]"
    return f"[{shown}, …] and {len(values) - limit:,} more"


def bounded(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text`` of at most about ``limit`` characters: a longer one keeps its first two
    thirds and its last third (where the fix is) around a count of what was cut."""
    if len(text) <= limit:
        return text
    head, tail = (2 * limit) // 3, limit // 3
    return f"{text[:head]} …[{len(text) - head - tail:,} characters cut]… {text[-tail:]}"


class InputError(ValueError):
    """An input file cannot be imported; the message names the file, the place and the fix.

    The message is :func:`bounded` (a problem that quotes a huge header stays one short
    line).

    Attributes
    ----------
    path : str
        The file being read.
    line : int or None
        1-based line number in the file (the header is line 1 of a CSV without preamble).
    column : str or None
        The column (or JSON key) at fault.
    """

    def __init__(
        self,
        path: str | Path,
        problem: str,
        fix: str = "",
        line: int | None = None,
        column: str | None = None,
    ) -> None:
        self.path = str(path)
        self.line = line
        self.column = column
        self.problem = problem
        self.fix = fix
        where = [self.path]
        if line is not None:
            where.append(f"line {line}")
        if column is not None:
            where.append(f"column {quoted(column)}")
        text = ", ".join(where) + f": {problem}"
        if fix:
            text += f"; {fix}"
        super().__init__(bounded(text))


class OutputError(OSError):
    """An output file cannot be written (a full disk, a read-only file system, no
    permission); the message names the file, the cause and the fix. Nothing was written
    under the file's name (:class:`workbench.io.plan_csv.AtomicFile` removes its temporary
    file)."""


_CAUSES = {
    errno.ENOSPC: ("the disk is full (no space left on the device)",
                   "free space there, or write the file to another disk"),
    errno.EDQUOT: ("the disk quota is used up", "free space there, or write the file to "
                   "another disk"),
    errno.EFBIG: ("the file is larger than its file system allows", "write it to another disk"),
    errno.EROFS: ("the file system is read-only", "write the file to a writable folder"),
    errno.EACCES: ("no permission to write there", "write the file to a writable folder"),
    errno.EPERM: ("no permission to write there", "write the file to a writable folder"),
}


def output_error(exc: OSError, path: str | Path) -> OutputError:
    """The one-line :class:`OutputError` of a failed write of ``path``: the cause in words
    (full disk, quota, read-only, permission) and the fix. An :class:`OutputError` is
    returned as it is."""
    if isinstance(exc, OutputError):
        return exc
    cause, fix = _CAUSES.get(exc.errno or 0, (exc.strerror or str(exc),
                                               "write the file to a writable folder"))
    return OutputError(bounded(f"cannot write {path}: {cause}; {fix} (nothing was written "
                               "under that name)"))
