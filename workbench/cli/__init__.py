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

COMMANDS: dict[str, tuple[str, str]] = {
    "scenario": ("workbench.cli.scenario", "list, show, generate, build and delete scenarios"),
    "cubes": ("workbench.cli.scenario", "per-region mean, min and max of price and carbon"),
    "fit": ("workbench.cli.fit", "fit throughput/energy models to measured GPU profiles"),
    "profile": ("workbench.cli.profile",
                "sample GPU power/energy/utilisation with NVML while a command runs"),
    "plan": ("workbench.cli.plan",
             "simulate a policy over a scenario, store the run and export the plan"),
    "import": ("workbench.cli.imports", "import grid signals, job traces and GPU profiles"),
    "serve": ("workbench.cli.serve",
              "serve the web app (localhost unless --address says otherwise)"),
    "quote": ("workbench.cli.quote",
              "recommend a datacenter, configuration and start for a new job"),
    "sweep": ("workbench.cli.sweep",
              "run a grid of policies and knobs over seeds on Dask distributed"),
    "frontier": ("workbench.cli.frontier", "cost against carbon of a policy at several carbon "
                 "caps, beside the hindsight bound"),
    "flexibility": ("workbench.cli.flexibility",
                    "how many kW each site can shed, when, and what it costs"),
    "predict": ("workbench.cli.compute",
                "predict a job's step time on a device from its computation graph"),
    "devices": ("workbench.cli.compute", "list or add accelerator specs for the predictor"),
    "compute": ("workbench.cli.compute", "train the step-time predictor; time a training run"),
    "forecast": ("workbench.cli.forecast", "backtest price, carbon and job-arrival forecasts"),
    "runs": ("workbench.cli.runs", "list, show, compare, export or delete stored runs"),
    "data": ("workbench.cli.runs", "what the store holds: grid series, job sets, profiles"),
}
"""Every command: the module that registers it (``register(subparsers)``) and its one-line
help, as ``workbench --help`` lists it. A command's module is imported only when the
command is given (``--help`` and a small command start without the planners, scipy or
Pyomo); ``tests/test_cli_start.py`` keeps the help lines equal to the modules' own."""

COMMAND_MODULES: tuple[str, ...] = tuple(dict.fromkeys(m for m, _ in COMMANDS.values()))

log = logging.getLogger("workbench")

_TOP_VALUED = ("--db",)
"""Top-level options that take a value (skipped when looking for the command word)."""


def command_word(argv: Sequence[str]) -> str | None:
    """The command ``argv`` gives (its first word that is not a top-level option or an
    option's value), or None."""
    skip = False
    for word in argv:
        if skip:
            skip = False
            continue
        if word in _TOP_VALUED:
            skip = True
            continue
        if word.startswith("-"):
            continue
        return word
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``workbench`` parser. With ``argv``, only the module of the command it gives is
    imported (every other command is listed by its help line alone); without, every
    command's parser is built (documentation, tests)."""
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
    word = None if argv is None else command_word(argv)
    wanted = COMMAND_MODULES if argv is None else tuple(
        m for m in COMMAND_MODULES if word in COMMANDS and COMMANDS[word][0] == m)
    for name, (module, help_text) in COMMANDS.items():
        if module in wanted:
            if name not in sub.choices:
                importlib.import_module(module).register(sub)
        else:  # listed, not built: its module is not imported
            sub.add_parser(name, help=help_text, add_help=False)
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
    parser = build_parser(sys.argv[1:] if argv is None else list(argv))
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
    # Imported here, not at the top: `workbench --help` loads neither xarray nor DuckDB.
    from workbench.cubes import CubeError
    from workbench.io.errors import InputError, OutputError, bounded
    from workbench.model import ScenarioError
    from workbench.store import StoreError

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
