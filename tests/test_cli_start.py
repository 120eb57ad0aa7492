"""The ``workbench`` command starts without what it does not need (issue 37, item 7).

Every command took 3.6-4 s to start, ``--help`` included: every command's module, the
planners, scipy and Pyomo were imported up front. These tests check *what* is imported, in
a process of its own, never how long it takes (``bench/cli_start.py`` measures that).
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.cli import COMMANDS, build_parser, command_word

HEAVY = ("scipy", "pyomo", "highspy", "workbench.policies.lyapunov", "workbench.sim",
         "distributed", "panel")
"""Modules a small command must not load."""


def _loaded_after(argv: list[str]) -> set[str]:
    code = ("import json, sys\nfrom workbench.cli import main\n"
            f"rc = main({argv!r})\n"
            "sys.stdout.flush()\n"
            "print('@@' + json.dumps(sorted(sys.modules)), file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=120)
    line = [x for x in proc.stderr.splitlines() if x.startswith("@@")]
    assert line, proc.stderr
    return set(json.loads(line[0][2:]))


def _heavy(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_help_imports_no_command_and_no_numerics() -> None:
    loaded = _loaded_after(["--help"])
    assert _heavy(loaded) == []
    assert not {"pandas", "numpy", "xarray", "duckdb"} & loaded
    assert not [m for m in loaded if m.startswith("workbench.cli.") and m not in (
        "workbench.cli._args", "workbench.cli.__main__")]


@pytest.mark.parametrize("argv", [["scenario", "list"], ["runs", "list"]])
def test_a_small_command_loads_no_planner(tmp_path: Path, argv: list[str]) -> None:
    from workbench.store import Store

    db = tmp_path / "wb.duckdb"
    with Store(db):
        pass
    loaded = _loaded_after(["--db", str(db), *argv])
    assert _heavy(loaded) == []
    assert "workbench.cli.plan" not in loaded


def test_the_command_list_is_the_modules_own() -> None:
    """``COMMANDS`` (what ``--help`` lists without importing a module) says each command's
    help as its module registers it, and names every command."""
    registered: dict[str, tuple[str, str]] = {}
    for module in dict.fromkeys(m for m, _ in COMMANDS.values()):
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(module).register(sub)
        for choice in sub._choices_actions:
            registered[choice.dest] = (module, str(choice.help))
    assert registered == COMMANDS


@pytest.mark.parametrize("argv, word", [
    (["--help"], None), (["plan"], "plan"), (["--db", "x.duckdb", "runs", "list"], "runs"),
    (["-v", "--db=x", "quote", "--json"], "quote"), (["--db", "plan"], None),
])
def test_command_word(argv: list[str], word: str | None) -> None:
    assert command_word(argv) == word


def test_a_lazy_parser_builds_the_command_given() -> None:
    parser = build_parser(["runs", "list"])
    args = parser.parse_args(["runs", "list", "--json"])
    assert args.func is not None and args.json is True
    help_text = parser.format_help()
    for name in COMMANDS:
        assert name in help_text
