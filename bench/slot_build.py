"""The slot MILP's build and solve times at two revisions, on the same problems, in one run.

Usage::

    python bench/slot_build.py --base REV [--sizes 200x4x8,1000x6x8,3000x8x8] [--rounds 2]

The base revision's ``workbench`` and ``tests`` are exported (``git archive``) into a scratch
folder; the current working tree is the head. Each round times both sides, one after the
other, each in its own process, on the synthetic problems of ``tests/helpers_policies.py``
(``synthetic_slot_problem(jobs, datacenters, configurations, seed=1)``): the HiGHS arrays
(``build_arrays``), the fast solve (``FastSlotSolver(method="auto", reuse=False)``), the
greedy fallback (``greedy_choice``) and the Pyomo model (``create_slot_model``, up to 50,000
options); medians over 7 repeats. Prints per size and step the mean over the rounds of both
sides and ``head / base``, and checks that both sides reach the same objective.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("build_s", "solve_s", "greedy_s", "pyomo_build_s")


def measure(sizes: list[tuple[int, int, int]]) -> dict[str, dict[str, Any]]:
    """Median seconds of each step per size, with the tree on ``sys.path`` first."""
    from helpers_policies import synthetic_slot_problem

    from workbench.optim.fallback import greedy_choice
    from workbench.optim.fastslot import FastSlotSolver
    from workbench.optim.slotarrays import build_arrays
    from workbench.optim.slotpyomo import create_slot_model

    out: dict[str, dict[str, Any]] = {}
    for size in sizes:
        prob = synthetic_slot_problem(*size, seed=1)
        times: dict[str, list[float]] = {s: [] for s in STEPS}
        objective = None
        steps = {"build_s": partial(build_arrays, prob),
                 "solve_s": partial(FastSlotSolver(method="auto", reuse=False), prob,
                                    mip_rel_gap=1e-3, time_limit_s=30.0),
                 "greedy_s": partial(greedy_choice, prob),
                 "pyomo_build_s": partial(create_slot_model, prob)}
        for rep in range(7):
            for name, step in steps.items():
                if name == "pyomo_build_s" and (rep >= 2 or prob.n_options > 50_000):
                    continue
                t0 = time.perf_counter()
                got = step()
                times[name].append(time.perf_counter() - t0)
                if name == "solve_s":
                    objective = got[1].objective
        out["x".join(map(str, size))] = {
            "options": prob.n_options, "objective": objective,
            **{s: median(v) if v else None for s, v in times.items()}}
    return out


def run_side(tree: Path, sizes: str) -> dict[str, dict[str, Any]]:
    """:func:`measure` in a child process with ``tree`` first on its path."""
    code = (f"import sys, json; sys.path[:0] = [{str(tree)!r}, {str(tree / 'tests')!r}, "
            f"{str(ROOT / 'bench')!r}]; import slot_build as b; "
            f"print(json.dumps(b.measure(b.parse_sizes({sizes!r}))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=tree)
    return json.loads(done.stdout.strip().splitlines()[-1])


def parse_sizes(text: str) -> list[tuple[int, int, int]]:
    return [tuple(int(x) for x in s.split("x")) for s in text.split(",")]  # type: ignore[misc]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="a revision (e.g. main, a sha)")
    ap.add_argument("--sizes", default="200x4x8,1000x6x8,3000x8x8")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    rows: dict[tuple[str, str], dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        archive = subprocess.run(["git", "archive", args.base, "workbench", "tests"], cwd=ROOT,
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        for _ in range(args.rounds):
            for side, tree in (("base", base), ("head", ROOT)):
                for size, res in run_side(tree, args.sizes).items():
                    for step in (*STEPS, "objective"):
                        if res[step] is not None:
                            rows.setdefault((size, step), {}).setdefault(side, []).append(
                                float(res[step]))
    for (size, step), sides in rows.items():
        b, h = (sum(sides[s]) / len(sides[s]) for s in ("base", "head"))
        if step == "objective":
            print(f"{size:10s} objective      base {b:.6f}  head {h:.6f}  "
                  f"{'same' if abs(b - h) <= 1e-9 * max(abs(b), 1.0) else 'DIFFERENT'}")
        else:
            print(f"{size:10s} {step:14s} base {b * 1e3:9.2f} ms  head {h * 1e3:9.2f} ms  "
                  f"head/base {h / b:5.2f}")


if __name__ == "__main__":
    main()
