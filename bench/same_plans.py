"""Do two commits plan the same? seed3 under every policy and the real-grid battery.

Usage::

    python bench/same_plans.py --base REV [--head REV|WORKTREE] [--quick] [--seed3-only]
                               [--rtol 1e-9] [--cache DIR]

For each side the script checks the revision out into a scratch ``git worktree`` (``WORKTREE``
means the current working tree, uncommitted changes included) and, with that tree first on
``PYTHONPATH``, runs what a user would run there:

- ``workbench scenario generate seed3 --seed 0`` and ``workbench plan --scenario seed3
  --policy P --no-baseline --json`` for every policy of :data:`POLICIES`;
- ``python bench/battery.py --json`` (the 12 real-grid scenarios of that revision's battery,
  every policy; ``--quick``: its four quick scenarios).

It then compares cost, carbon and deadline misses of every (scenario, policy) pair and prints
the largest relative difference. Exit status 0 when every pair agrees within ``--rtol``
(relative to ``max(|a|, |b|, 1e-12)``; misses must be equal), 1 otherwise. A committed
revision's outputs are cached by commit hash under ``--cache`` (default
``$TMPDIR/wb-same-plans``), so the base side is computed once per commit.

The faces are used on purpose: the library's internals are what a restructuring changes,
the ``plan --json`` and battery contracts are what it must not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ("asap-home", "greedy", "cheapest-at-arrival", "wait-for-cheap", "carbon-scaling",
            "goodput-only", "threshold", "lyapunov", "lookahead", "offline")
KEYS = ("cost", "carbon_kg", "deadline_misses")
DATA = ROOT.parent / "shared" / "data"

Outputs = dict[str, dict[str, float]]
"""``"scenario/policy"`` -> ``{cost, carbon_kg, deadline_misses}``."""


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def _run(cmd: list[str], tree: Path, log: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    with log.open("a") as err:
        err.write(f"$ {' '.join(cmd)}\n")
        err.flush()
        proc = subprocess.run(cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=err,
                              text=True)
    if proc.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        sys.exit(f"failed in {tree} (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return proc.stdout


def _last_json(text: str, opener: str) -> Any:
    """The last JSON document printed on its own lines, starting with ``opener``."""
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(opener):
            try:
                return json.loads("\n".join(lines[i:]))
            except json.JSONDecodeError:
                continue
    raise ValueError(f"no JSON document starting with {opener!r} in the output")


def outputs(tree: Path, work: Path, quick: bool, seed3_only: bool) -> Outputs:
    """Plan seed3 under every policy and run the battery in ``tree``."""
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.txt"
    py = sys.executable
    db = str(work / "seed3.duckdb")
    out: Outputs = {}
    _run([py, "-m", "workbench", "--db", db, "scenario", "generate", "seed3", "--seed", "0"],
         tree, log)
    for policy in POLICIES:
        print(f"  {tree.name}: seed3 {policy}", file=sys.stderr, flush=True)
        text = _run([py, "-m", "workbench", "--db", db, "plan", "--scenario", "seed3",
                     "--policy", policy, "--no-baseline", "--json", "--no-progress"], tree, log)
        obj = _last_json(text, "{")
        out[f"seed3/{policy}"] = {k: float(obj[k]) for k in KEYS}
    if seed3_only:
        return out
    print(f"  {tree.name}: battery", file=sys.stderr, flush=True)
    # The scratch worktree has no ../shared beside it: the data is this checkout's.
    cmd = [py, "bench/battery.py", "--json", "--db-dir", str(work / "battery"), "--data",
           str(DATA)]
    if quick:
        cmd.append("--quick")
    _run(cmd, tree, log)
    # The battery's table (its JSON lacks carbon in older revisions): written in the scratch
    # tree, never in this checkout.
    table = pd.read_csv(tree / "docs" / "results" / "battery.csv")
    for row in table.to_dict("records"):
        out[f"{row['scenario']}/{row['policy']}"] = {k: float(row[k]) for k in KEYS}
    return out


def side(rev: str, cache: Path, quick: bool, seed3_only: bool) -> tuple[str, Outputs]:
    """The outputs of ``rev`` (a commit, or ``WORKTREE``), from the cache when committed."""
    scope = "seed3" if seed3_only else "quick" if quick else "full"
    if rev == "WORKTREE":
        with tempfile.TemporaryDirectory(prefix="wb-same-") as tmp:
            # A copy of what git would commit (tracked and untracked, not ignored files), so
            # that the battery writes its tables there, not here.
            tree = Path(tmp) / "worktree"
            files = _git("ls-files", "-co", "--exclude-standard", "-z").split("\0")
            for name in filter(None, files):
                src = ROOT / name
                if src.is_file():
                    (tree / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, tree / name)
            return "working tree", outputs(tree, Path(tmp) / "work", quick, seed3_only)
    sha = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    cached = cache / f"{sha}-{scope}.json"
    if cached.exists():
        return sha[:10], json.loads(cached.read_text())
    with tempfile.TemporaryDirectory(prefix="wb-same-") as tmp:
        tree = Path(tmp) / sha[:10]
        _git("worktree", "add", "--detach", str(tree), sha)
        try:
            got = outputs(tree, Path(tmp) / "work", quick, seed3_only)
        finally:
            _git("worktree", "remove", "--force", str(tree))
    cache.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(got, indent=1, sort_keys=True))
    return sha[:10], got


def rel(a: float, b: float) -> float:
    if math.isnan(a) and math.isnan(b):
        return 0.0
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def compare(base: Outputs, head: Outputs, rtol: float) -> tuple[list[str], bool]:
    """Lines of a report and whether every pair agrees."""
    lines: list[str] = []
    ok = True
    missing = sorted(set(base) ^ set(head))
    if missing:
        ok = False
        lines.append(f"pairs on one side only: {', '.join(missing)}")
    worst = 0.0
    for key in sorted(set(base) & set(head)):
        a, b = base[key], head[key]
        diffs = {k: rel(a[k], b[k]) for k in KEYS}
        worst = max(worst, diffs["cost"], diffs["carbon_kg"])
        bad = (diffs["cost"] > rtol or diffs["carbon_kg"] > rtol
               or a["deadline_misses"] != b["deadline_misses"])
        if bad:
            ok = False
            lines.append(f"DIFFERS {key}: cost {a['cost']:.10g} -> {b['cost']:.10g}, carbon "
                         f"{a['carbon_kg']:.10g} -> {b['carbon_kg']:.10g} kg, misses "
                         f"{a['deadline_misses']:g} -> {b['deadline_misses']:g}")
    n = len(set(base) & set(head))
    lines.append(f"{n} (scenario, policy) pairs compared; largest relative difference of cost "
                 f"or carbon {worst:.3g} (tolerance {rtol:g}); "
                 + ("all the same" if ok else "NOT the same"))
    return lines, ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="a revision (e.g. main, a sha)")
    ap.add_argument("--head", default="WORKTREE",
                    help="a revision, or WORKTREE (default): the current working tree")
    ap.add_argument("--quick", action="store_true", help="the battery's quick scenarios only")
    ap.add_argument("--seed3-only", action="store_true", help="seed3 only, no battery")
    ap.add_argument("--rtol", type=float, default=1e-9)
    ap.add_argument("--cache", type=Path,
                    default=Path(tempfile.gettempdir()) / "wb-same-plans")
    args = ap.parse_args()
    name_a, base = side(args.base, args.cache, args.quick, args.seed3_only)
    name_b, head = side(args.head, args.cache, args.quick, args.seed3_only)
    print(f"base {name_a}, head {name_b}")
    for key in sorted(set(base) & set(head)):
        a, b = base[key], head[key]
        print(f"  {key:40} cost {a['cost']:14.6f} {b['cost']:14.6f}  carbon "
              f"{a['carbon_kg']:12.4f} {b['carbon_kg']:12.4f}  misses "
              f"{a['deadline_misses']:4g} {b['deadline_misses']:4g}")
    lines, ok = compare(base, head, args.rtol)
    print("\n".join(lines))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
