"""The model forecast revised within its day: how accurate, and what plans it makes.

Usage::

    python bench/forecast_revision.py [--data ../shared/data] [--only NAME,...]
                                      [--slot-minutes M]

On the battery's scenarios whose honest forecast is the ``model`` forecast (by default every
one of ``bench/battery.py``'s for which the product picks it), the forecaster is fitted once
and told three ways (:data:`workbench.forecast.scenario.REVISIONS`): the day-ahead median as
issued (``none``), revised by the current slot's error where the truth left the issued band
(``band``, the default), or revised by every slot's error (``always``), the error carried
ahead at the persistence of the forecaster's past errors
(:meth:`~workbench.forecast.scenario.ModelForecast.revised`). For each:

- the forecast's accuracy: the mean absolute error of what a policy at each slot is told
  about the next 1-6 and 1-24 hours (every region; price in the scenario currency per kWh,
  carbon in g/kWh), and how often the truth left the band;
- the plans: the default policy's cost, carbon, deadline misses, ``captured`` (the share of
  the hindsight saving, as in ``bench/battery.py``) and wall time, against ``asap-home`` and
  the hindsight bound run once (neither reads the forecast's revision).

``--slot-minutes M`` rebuilds the scenarios at ``M``-minute slots (a what-if: the forecast
is hourly, the look-ahead re-plans by the clock once an hour, so at 15 minutes a band miss
re-plans up to three slots earlier than the clock would). Prints a table; writes nothing.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from battery import build, captured, default_policy, forecast_mode, scenarios
from common import run_policy

from workbench import runner
from workbench.forecast import forecast
from workbench.forecast.scenario import REVISIONS, ModelForecast
from workbench.model import Scenario

LEADS_H = (6, 24)


def skill(sc: Scenario, fm: ModelForecast) -> dict[str, float]:
    """Mean absolute error over the next 1-6 and 1-24 hours of what each slot is told, per
    variable, and the share of (slot, region) pairs whose truth left the band."""
    cube = sc.grid
    slot_s = int(cube.attrs["slot_s"])
    n = sc.n_slots
    out: dict[str, float] = {}
    errs: dict[str, dict[int, list[np.ndarray]]] = {
        v: {h: [] for h in LEADS_H} for v in ("price_per_kwh", "carbon_g_per_kwh")}
    truths = {v: np.asarray(cube[v].values, dtype=float) for v in errs}
    missed = 0
    for t in range(n - 1):
        fc = forecast(cube, t, mode="model", model=fm)
        missed += len(fc.band_miss)
        for var, told in (("price_per_kwh", fc.price_per_kwh),
                          ("carbon_g_per_kwh", fc.carbon_g_per_kwh)):
            truth = truths[var]
            for h in LEADS_H:
                k = min(int(round(h * 3600 / slot_s)), n - 1 - t)
                errs[var][h].append(np.abs(told[1:k + 1] - truth[t + 1:t + 1 + k]).ravel())
    for var, by_h in errs.items():
        for h, e in by_h.items():
            out[f"{var}_mae_{h}h"] = float(np.mean(np.concatenate(e)))
    out["band_miss_share"] = missed / (2 * (n - 1) * cube.sizes["region"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2]
                    / "shared" / "data")
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--slot-minutes", type=int, default=None,
                    help="rebuild the scenarios at this slot length (a what-if)")
    args = ap.parse_args()
    specs = copy.deepcopy(scenarios())
    if args.slot_minutes is not None:
        for spec in specs.values():
            spec["config"]["scenario"]["slot_minutes"] = args.slot_minutes
    names = args.only.split(",") if args.only else list(specs)
    default = default_policy()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        built = build(args.data, Path(tmp), names, Path(tmp), specs)
    for name, sc in built.items():
        if forecast_mode(sc) != "model":
            print(f"  {name}: its honest forecast is not the model forecast; skipped",
                  file=sys.stderr)
            continue
        fitted = runner.fit_forecast(sc, "model")
        assert fitted is not None
        asap = float(run_policy(sc, "asap-home", fitted)[0].metrics["cost"])
        _, _, bound = run_policy(sc, "offline", fitted)
        assert bound is not None
        for revise in REVISIONS:
            fm = dataclasses.replace(fitted, revise=revise)
            res, wall, _ = run_policy(sc, default, fm)
            m = res.metrics
            rows.append({"scenario": name, "revise": revise, **skill(sc, fm),
                         "cost": float(m["cost"]), "carbon_kg": float(m["carbon_kg"]),
                         "misses": int(m["deadline_misses"]),
                         "captured": captured(asap, float(m["cost"]), bound.cost),
                         "wall_s": wall})
            print(f"  {name:>20} {revise:>7}: cost {m['cost']:.3f}  {wall:.1f} s",
                  file=sys.stderr, flush=True)
    if not rows:
        sys.exit("no scenario with the model forecast among those asked")
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.4g}"))


if __name__ == "__main__":
    main()
