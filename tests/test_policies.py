"""The registry's policies on degenerate scenarios: none kills the process.

A native solver's crash (SIGSEGV) cannot be caught in Python; every policy runs here in a
subprocess, so that one fails its test naming the policy instead of ending the test run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from workbench.policies import POLICY_NAMES

TESTS = Path(__file__).resolve().parent

_RUN = r"""
import sys
sys.path.insert(0, sys.argv[1])
import helpers_sim as H
from workbench.policies import POLICY_NAMES, make_policy, needs_truth
from workbench.sim import simulate

scenarios = {
    "empty": H.tiny_scenario(),
    "one job": H.tiny_scenario([H.training("j1")]),
    "one GPU each": H.tiny_scenario([H.training(f"j{i}") for i in range(3)], gpus_a=1,
                                     gpus_b=1),
}
for name in POLICY_NAMES:
    for label, sc in scenarios.items():
        print(name, "on", label, flush=True)
        policy = make_policy(name, truth=sc if needs_truth(name) else None)
        try:
            res = simulate(sc, policy, forecast_mode="perfect")
        finally:
            getattr(policy, "close", lambda: None)()
        assert res.metrics["cost"] >= 0.0
print("all ran")
"""


@pytest.mark.slow
def test_every_policy_runs_on_empty_and_tiny_scenarios_without_dying() -> None:
    """Every registered policy on a scenario without jobs, with one job and with one GPU
    per site for three jobs (the grouped look-ahead died with SIGSEGV on the first: a window LP with
    no job columns, ``workbench.optim.highs.get_basis``)."""
    proc = subprocess.run([sys.executable, "-c", _RUN, str(TESTS)], capture_output=True,
                          text=True, timeout=600)
    out = proc.stdout.strip().splitlines()
    assert proc.returncode == 0, (f"died ({proc.returncode}) at {out[-1:] or '(start)'}: "
                                  f"{proc.stderr[-2000:]}")
    assert out[-1] == "all ran"
    assert sum(" on " in line for line in out) == 3 * len(POLICY_NAMES)
