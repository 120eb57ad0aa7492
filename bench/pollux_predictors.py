"""The six Pollux apps: graph model against kernel model, each device held out; the choice.

    PYTHONPATH=. python bench/pollux_predictors.py [--data ../shared/data/profiles]
        [--write] [--profiles data/profiles.json]

Prints, from ``workbench.compute.app_train.held_out_predictions`` (every measured app step
predicted by both predictors fitted without the step's device):

1. per app and GPU count, the median and max APE of each predictor;
2. per app and configuration class (1 GPU; 2-8 GPUs of a node; several nodes);
3. per app and held-out device, one GPU;
4. the per-app choice (``workbench.compute.app_train.choose``) against the shipped table
   ``workbench/data/compute/app_predictors.json`` (``--write`` rewrites it);
5. pooled over the apps: each predictor alone and the chosen one per app;
6. the shipped H800/A100/Ascend 910B profiles (``--profiles``, as committed) against the
   same profiles predicted now by the graph model alone and through the chosen path: the
   step time on one GPU at ``m0`` and the throughput on 8 GPUs at the largest local batch,
   and the change from the shipped one in %.

About two minutes on two cores (LightGBM refits 18 kernel models).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.compute.app_train import CONFIGS, choose, errors, held_out_predictions
from workbench.compute.apps import (
    AppChoice,
    app_predictors_path,
    read_app_predictors,
    write_app_predictors,
)
from workbench.compute.train import load_graphs

ROOT = Path(__file__).resolve().parent.parent


def _pct(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{100 * x:.1f}"


def _table(e: pd.DataFrame, keys: list[str]) -> str:
    head = "| " + " | ".join(keys) + (" | rows | graph: median % | graph: max % | "
                                      "kernel: median % | kernel: max % |")
    lines = [head, "|" + "---|" * len(keys) + "---:|" * 5]
    for r in e.itertuples(index=False):
        d = r._asdict()
        lines.append("| " + " | ".join(str(d[k]) for k in keys) + f" | {d['rows']} | "
                     + " | ".join(_pct(d[c]) for c in ("graph_median", "graph_max",
                                                       "kernel_median", "kernel_max")) + " |")
    return "\n".join(lines)


def profile_changes(shipped_path: Path, data: Path) -> str:
    """The shipped profiles against the same profiles predicted by the graph model alone and
    through the chosen path (each app's efficiency fitted on the T4, as
    ``workbench fit defaults`` does)."""
    from workbench.fit import fit_pollux_app
    from workbench.perf import profiles_from_json, throughput
    from workbench.profiles import predict_profile

    old = profiles_from_json(json.loads(shipped_path.read_text()))
    choice = read_app_predictors()
    graph_only = {a: AppChoice(a, "graph") for a in choice}
    fits: dict = {}
    lines = ["| app | gpu | predictor | 1 GPU at m0, step s: shipped | graph model now | "
             "chosen path | change % | 8 GPUs at max local batch, samples/s: shipped | "
             "graph model now | chosen path | change % |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in sorted(old, key=lambda p: (p.app, p.gpu_type)):
        if not p.derived:
            continue  # the T4 fit is measured, not predicted
        if p.app not in fits:
            fits[p.app] = fit_pollux_app(data / "pollux" / p.app).efficiency
        new = predict_profile(p.app, fits[p.app], None, p.gpu_type)
        now = predict_profile(p.app, fits[p.app], None, p.gpu_type, choices=graph_only)
        m0, ml = p.efficiency.m0, p.efficiency.max_local_batch
        t = [m0 / float(throughput(q.throughput, 1, m0)) for q in (p, now, new)]
        x = [float(throughput(q.throughput, 8, 8 * ml)) for q in (p, now, new)]
        c = choice.get(p.app)
        lines.append(f"| {p.app} | {p.gpu_type} | {c.predictor if c else 'graph'} | "
                     + " | ".join(f"{v:.4f}" for v in t)
                     + f" | {100 * (t[2] / t[0] - 1):+.1f} | "
                     + " | ".join(f"{v:,.0f}" for v in x)
                     + f" | {100 * (x[2] / x[0] - 1):+.1f} |")
    return "\n".join(lines)


def pooled(pred: pd.DataFrame, choices: dict) -> str:
    """Pooled over the apps: each predictor, and the chosen one per app."""
    chosen = pred.assign(chosen_pred=[r["kernel_pred"] if choices[r["app"]].predictor
                                      == "kernel" else r["graph_pred"]
                                      for _, r in pred.iterrows()])
    lines = ["| predictor | 1 GPU: rows | median % | worst app (median %) | max % | "
             "2-8 GPUs, 1 node: median % | max % | multi-node: median % |",
             "|---|---:|---:|---|---:|---:|---:|---:|"]
    for name, col in (("graph model", "graph_pred"), ("kernel model (5 apps it represents)",
                                                       "kernel_pred"),
                      ("chosen per app", "chosen_pred")):
        r = chosen[chosen[col].notna()]
        ape = (r[col] - r["step_time_s"]).abs() / r["step_time_s"]
        one = r["gpus"] == 1
        by_app = ape[one].groupby(r.loc[one, "app"]).median()
        mid = r["config"] == CONFIGS[1]
        multi = r["config"] == CONFIGS[2]
        lines.append(f"| {name} | {int(one.sum())} | {_pct(ape[one].median())} | "
                     f"{by_app.idxmax()} ({_pct(by_app.max())}) | {_pct(ape[one].max())} | "
                     f"{_pct(ape[mid].median())} | {_pct(ape[mid].max())} | "
                     f"{_pct(ape[multi].median())} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "profiles")
    ap.add_argument("--write", action="store_true",
                    help=f"rewrite {app_predictors_path().relative_to(ROOT)}")
    ap.add_argument("--profiles", type=Path, default=ROOT / "data" / "profiles.json",
                    help="the profiles to compare with (default: the shipped ones)")
    ap.add_argument("--profiles-only", action="store_true",
                    help="only part 6 (the profiles; seconds, no held-out fits)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    t0 = time.perf_counter()
    if args.profiles_only:
        print(profile_changes(args.profiles, args.data))
        return
    pred = held_out_predictions(args.data)
    print("## 1. Held-out APE per app and GPU count (device held out of both predictors)\n")
    print(_table(errors(pred, ["app", "gpus"]), ["app", "gpus"]))
    print("\n## 2. Per app and configuration\n")
    e = errors(pred, ["app", "config"])
    e["order"] = e["config"].map(CONFIGS.index)
    print(_table(e.sort_values(["app", "order"]).drop(columns="order"), ["app", "config"]))
    print("\n## 3. One GPU, per app and held-out device\n")
    print(_table(errors(pred[pred["gpus"] == 1], ["app", "device"]), ["app", "device"]))
    print("\n## 4. The choice\n")
    choices = choose(pred, load_graphs(sorted(pred["app"].unique())))
    shipped = read_app_predictors()
    print("| app | chosen | shipped table | reason |\n|---|---|---|---|")
    for a, c in choices.items():
        s = shipped.get(a)
        print(f"| {a} | {c.predictor} | {s.predictor if s else '(none)'} | {c.reason} |")
    if args.write:
        write_app_predictors(choices, app_predictors_path(),
                             source="bench/pollux_predictors.py --write: leave-one-device-"
                                    "out on ../shared/data/profiles (Zeus, Pollux)")
        print(f"\nwrote {app_predictors_path()}")
    print("\n## 5. Pooled over the apps\n")
    print(pooled(pred, choices))
    print("\n## 6. Shipped profiles re-predicted through the chosen path\n")
    print(profile_changes(args.profiles, args.data))
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
