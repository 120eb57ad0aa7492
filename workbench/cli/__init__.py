"""The ``workbench`` command: parses arguments once, then calls the library.

Each sub-command group lives in its own module with a ``register(subparsers)`` function that
adds its parsers and sets ``func`` (taking the parsed namespace, returning an exit status).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from workbench.cli._args import Parser, fail
from workbench.cubes import CubeError
from workbench.io.errors import InputError, OutputError, bounded
from workbench.model import ScenarioError
from workbench.store import StoreError

COMMAND_MODULES: tuple[str, ...] = (
    "workbench.cli.scenario",
    "workbench.cli.fit",
    "workbench.cli.profile",
    "workbench.cli.plan",
    "workbench.cli.imports",
    "workbench.cli.serve",
    "workbench.cli.quote",
    "workbench.cli.sweep",
    "workbench.cli.frontier",
    "workbench.cli.compute",
    "workbench.cli.forecast",
    "workbench.cli.runs",
)

log = logging.getLogger("workbench")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="workbench",
        description="Compute-power fusion planning workbench: plan where, when and how AI jobs "
        "run across GPU datacenters so that they follow cheap and clean electricity.",
    )
    parser.add_argument(
        "--db",
        default="workbench.duckdb",
        help="DuckDB store file (default: ./workbench.duckdb)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    _common_after(parser)
    return parser


def _common_after(parser: argparse.ArgumentParser) -> None:
    """Let ``--db`` and ``-v`` follow the command too (``workbench runs list --db X``).

    Each leaf command gets copies whose default is ``SUPPRESS``: given after the command they
    override the value before it; absent, the top-level default stands.
    """
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for child in dict.fromkeys(action.choices.values()):
            if any(isinstance(a, argparse._SubParsersAction) for a in child._actions):
                _common_after(child)
                continue
            flags = {s for a in child._actions for s in a.option_strings}
            if "--db" not in flags:
                child.add_argument("--db", default=argparse.SUPPRESS,
                                   help="DuckDB store file (also accepted before the command)")
            if "-v" not in flags and "--verbose" not in flags:
                child.add_argument("-v", "--verbose", action="store_true",
                                   default=argparse.SUPPRESS, help="log debug messages")


QUIET_LOGGERS: tuple[str, ...] = ("distributed", "dask", "tornado", "bokeh")
"""Third-party loggers held at WARNING unless ``-v`` (a local Dask cluster logs ~30 INFO
lines per start)."""


def quiet_loggers(verbose: bool) -> None:
    """Hold the :data:`QUIET_LOGGERS` at WARNING (DEBUG with ``-v``).

    Importing ``distributed`` sets its loggers from Dask's ``logging`` config (``distributed:
    info``): a command that imports it calls this again afterwards.
    """
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.WARNING)


def missing_store(args: argparse.Namespace) -> str | None:
    """Why a command that only reads the store cannot run (its ``--db`` file is absent), or
    None. Such commands set ``reads_store=True`` in their parser's defaults: opening the
    store would create an empty file and report "no runs" for a mistyped path. Commands
    that write a store (``scenario generate``, ``import``, ``plan``) create it."""
    db = str(args.db)
    if not getattr(args, "reads_store", False) or db == ":memory:" or Path(db).exists() \
            or not Path(db).parent.is_dir():
        return None  # a missing folder: the store says so (and creates nothing)
    return (f"store {db} does not exist; check --db, or create one with `workbench scenario "
            "generate seed3`, `workbench import ...` or `workbench plan`")


def _not_a_run_warning(record: logging.LogRecord) -> bool:
    """False for a log record that repeats a run's warning
    (``workbench.sim.results.RUN_WARNING``): the commands print a run's warnings themselves,
    once each."""
    return not getattr(record, "run_warning", False)


def progress_wanted(args: argparse.Namespace) -> bool:
    """tqdm bars only on a terminal, and not with ``--no-progress``: a log file or a pipe
    gets no bar lines."""
    return not getattr(args, "no_progress", False) and sys.stderr.isatty()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or an argument error already printed as one line
        return exc.code if isinstance(exc.code, int) else 2
    root = logging.getLogger()
    before = set(root.handlers)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:  # the terminal gets a run's warnings once, from the command
        for handler in set(root.handlers) - before:
            handler.addFilter(_not_a_run_warning)
    quiet_loggers(args.verbose)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    missing = missing_store(args)
    if missing:
        return fail(missing)
    try:
        rc = int(args.func(args) or 0)
        sys.stdout.flush()  # here, so that a closed pipe is caught below, not at exit
        return rc
    except (StoreError, ScenarioError, CubeError, InputError, OutputError) as exc:
        return fail(exc)  # bounded: a message quoting a huge header stays one short line
    except BrokenPipeError:
        # The reader of stdout went away (`workbench data list | head`): not an error of
        # ours. Silence the flush at exit and end as a process killed by SIGPIPE would.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print("error: interrupted; nothing of an unfinished run or import was stored",
              file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last resort: one line, never a traceback
        # Bad input has its own error types above; anything reaching here is a bug or an
        # environment problem (disk full, permissions). -v shows where it came from.
        log.debug("unexpected error", exc_info=True)
        what = bounded(str(exc).strip().splitlines()[0]) if str(exc).strip() else ""
        hint = "the traceback is in the log above" if args.verbose else \
            "rerun with -v for the traceback"
        print(f"error: unexpected {type(exc).__name__}"
              + (f": {what}" if what else "") + f"; {hint}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
