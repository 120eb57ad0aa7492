"""How long the ``workbench`` command takes to start: ``--help`` and small commands.

Each command runs in its own process (the way a user meets it), ``--repeat`` times; the
median wall time is printed beside the baseline measured in the same run: a process that
builds the parser of every command (what every command did before commands were imported
lazily: each command's module, the planners, scipy and Pyomo). Usage::

    PYTHONPATH=$PWD python bench/cli_start.py [--repeat 5] [--db workbench.duckdb]

``--db`` names a store for the small commands (a temporary copy of it is read; without
one, an empty temporary store with a built-in scenario listed is made).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EAGER = "from workbench.cli import build_parser; build_parser()"
"""The baseline: every command's parser built, so every command module imported."""


def _median_s(argv: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--db", type=Path, default=None)
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "wb.duckdb"
        if args.db is not None:
            shutil.copy(args.db, db)
        else:
            subprocess.run([py, "-m", "workbench.cli", "--db", str(db), "scenario", "generate",
                            "seed3"], check=True, stdout=subprocess.DEVNULL)
        cases = {
            "python -c pass (the interpreter alone)": [py, "-c", "pass"],
            "every command's parser built (baseline)": [py, "-c", EAGER],
            "workbench --help": [py, "-m", "workbench.cli", "--help"],
            "workbench scenario list": [py, "-m", "workbench.cli", "--db", str(db),
                                        "scenario", "list"],
            "workbench runs list": [py, "-m", "workbench.cli", "--db", str(db), "runs",
                                    "list"],
            "workbench plan --help": [py, "-m", "workbench.cli", "plan", "--help"],
        }
        got = {name: _median_s(argv, args.repeat) for name, argv in cases.items()}
    base = got["every command's parser built (baseline)"]
    print(f"{'case':<44}{'median s':>10}{'vs baseline':>13}")
    for name, secs in got.items():
        print(f"{name:<44}{secs:>10.2f}{secs / base:>12.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
