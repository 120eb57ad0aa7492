"""Shared helpers of the bench scripts: run policies, tabulate, write CSV/markdown tables.

Bench scripts are not tests: they print tables and ratios against a baseline run in the same
process and write them to ``docs/results/``. Run them from the repository root.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.forecast import ModelForecast
from workbench.metrics import attribute_savings
from workbench.model import Scenario
from workbench.policies.base import HindsightBound
from workbench.runner import ForecastSettings, RunSpec, simulate_spec
from workbench.sim import RunResult

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"

POLICY_COLUMNS: tuple[str, ...] = (
    "policy", "cost", "cost_vs_asap", "carbon_kg", "carbon_vs_asap", "energy_kwh",
    "energy_moved_kwh", "energy_offpeak_kwh", "offpeak_share", "mean_jct_h", "p95_jct_h",
    "deadline_misses", "jobs_finished", "migrations", "transfer_gb", "lost_h",
    "saved_efficiency", "saved_temporal", "saved_spatial", "saved_movement",
    "saved_power_limits", "fallbacks",
    "decide_s_mean", "wall_s",
)
"""Columns of the policy tables; ``saved_*`` split the saving against asap-home
(:func:`workbench.metrics.attribute_savings`, scenario currency; ``saved_power_limits`` is 0
where no run drew under a GPU power limit)."""


def run_policy(scenario: Scenario, name: str, fitted: ModelForecast | None = None,
               power_limits: tuple[float, ...] | None = None, forecast_mode: str | None = None,
               **knobs: Any) -> tuple[RunResult, float, HindsightBound | None]:
    """Simulate ``name`` with ``knobs`` through the runner (the honest default forecast, or
    ``forecast_mode`` as a what-if; ``fitted`` its model forecast, fitted once per scenario
    by the caller; ``power_limits`` the GPU power-limit menu, None: the run's default);
    returns the run, its wall time and its hindsight bound (None but for ``offline``). The
    spec's forecaster is ``fitted``'s."""
    told = ForecastSettings(forecast_mode) if fitted is None else ForecastSettings(
        forecast_mode, model=fitted.model)
    spec = RunSpec(scenario.name, name, knobs=knobs, forecast=told, baseline=False)
    if power_limits is not None:
        spec = dataclasses.replace(spec, power_limits=power_limits)
    t0 = time.perf_counter()
    result, bound = simulate_spec(spec, scenario, fitted=fitted)
    return result, time.perf_counter() - t0, bound


def policy_row(name: str, result: RunResult, wall_s: float,
               base: Mapping[str, Any] | None, base_result: RunResult | None = None,
               scenario: Scenario | None = None) -> dict[str, Any]:
    m = result.metrics
    energy = float(m["energy_kwh"])
    row = {
        "policy": name, "cost": m["cost"], "carbon_kg": m["carbon_kg"], "energy_kwh": energy,
        "energy_moved_kwh": m["energy_moved_kwh"], "energy_offpeak_kwh": m["energy_offpeak_kwh"],
        "offpeak_share": m["energy_offpeak_kwh"] / energy if energy else math.nan,
        "mean_jct_h": m["mean_jct_h"], "p95_jct_h": m["p95_jct_h"],
        "deadline_misses": m["deadline_misses"],
        "jobs_finished": f"{m['jobs_finished']}/{m['jobs_total']}",
        "migrations": m["migrations"], "fallbacks": m["fallbacks"],
        "decide_s_mean": m["decide_s_mean"], "wall_s": wall_s,
        "transfer_gb": m["transfer_gb"], "lost_h": m["lost_s"] / 3600.0,
    }
    if base is not None:
        row["cost_vs_asap"] = m["cost"] / base["cost"]
        row["carbon_vs_asap"] = m["carbon_kg"] / base["carbon_kg"]
    parts = (attribute_savings(result, base_result, scenario)["cost"]
             if base_result is not None and scenario is not None else {})
    levers = {"power_limits": 0.0} if parts else {}
    for key in ("efficiency", "temporal", "spatial", "movement", "power_limits"):
        row[f"saved_{key}"] = {**levers, **parts}.get(key, math.nan)
    return row


def write_table(frame: pd.DataFrame, stem: str, title: str, notes: Iterable[str] = (),
                digits: int = 3) -> None:
    """``docs/results/<stem>.csv`` and ``<stem>.md`` (a markdown table with notes)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    frame.to_csv(RESULTS / f"{stem}.csv", index=False)
    md = [f"# {title}", "", _markdown(frame, digits), ""]
    md += [f"- {n}" for n in notes]
    (RESULTS / f"{stem}.md").write_text("\n".join(md) + "\n")


def cost_carbon_bars(table: pd.DataFrame, stem: str, title: str, currency: str,
                     optimum_cost: float | None = None) -> None:
    """``docs/results/<stem>.png``: cost and carbon per policy, the hindsight bound as a
    line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    ax[0].barh(table.policy, table.cost, color="tab:blue")
    ax[0].set_xlabel(f"electricity cost ({currency})")
    if optimum_cost is not None:
        ax[0].axvline(optimum_cost, color="k", ls="--", label="hindsight bound")
        ax[0].legend()
    ax[1].barh(table.policy, table.carbon_kg, color="tab:green")
    ax[1].set_xlabel("carbon (kg CO2)")
    ax[1].set_yticklabels([])
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(RESULTS / f"{stem}.png", dpi=120)


def _markdown(frame: pd.DataFrame, digits: int) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            if not math.isfinite(v):
                return "-"
            return f"{v:,.{digits}g}" if abs(v) < 1 else f"{v:,.{max(digits - 1, 1)}f}"
        return str(v)

    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in frame.iterrows():
        lines.append("| " + " | ".join(fmt(r[c]) for c in cols) + " |")
    return "\n".join(lines)
