"""The one error type every importer raises on bad input."""

from __future__ import annotations

from pathlib import Path


class InputError(ValueError):
    """An input file cannot be imported; the message names the file, the place and the fix.

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
            where.append(f"column {column!r}")
        text = ", ".join(where) + f": {problem}"
        if fix:
            text += f"; {fix}"
        super().__init__(text)
