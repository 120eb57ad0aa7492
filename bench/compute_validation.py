"""Validate the step-time predictor out of sample and compare it with the hand-set factors.

    PYTHONPATH=. python bench/compute_validation.py [--data ../shared/data/profiles]
        [--out docs/results/compute_validation.md]

Prints markdown tables (and writes them to ``--out``):

1. leave-one-device-out (all of a device's data, DeepBench kernels and step times, left out
   of training) for the graph predictor with the app's offset from other devices, without
   it, the roofline alone, and after one 1-GPU measurement on the held-out device;
2. leave-one-app-out (the app's step times left out; no offset);
3. the hand-set factor table of ``workbench/gpus.py`` applied to the T4 fit, on the V100
   (the only Zeus GPU in that table) next to the predictor on the same rows;
4. held-out configurations on the measured device: 5-fold cross-validation of the Pollux
   fit on T4.

Median APE is over every measured row of the class; "worst app" is the largest per-app
median. A few minutes on two cores.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.compute.train import (
    leave_one_app_out,
    leave_one_device_out,
    load_graphs,
    read_all_deepbench,
    read_step_times,
    summarise,
    train,
)

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ("1 GPU", "2-8 GPUs, 1 node", "multi-node")


def _pct(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{100 * x:.0f}%"


def table(rows: pd.DataFrame, preds: dict[str, str], title: str) -> str:
    """Markdown: one line per (device, config), a median/worst-app pair per predictor."""
    parts = {name: summarise(rows, col).set_index(["device", "config"])
             for name, col in preds.items()}
    keys = sorted(set().union(*(p.index for p in parts.values())),
                  key=lambda k: (k[0], CONFIGS.index(k[1])))
    head = "| held out | configs | rows | " + " | ".join(
        f"{n}: median | {n}: worst app" for n in preds) + " |"
    sep = "|---|---|---:|" + "---:|---:|" * len(preds)
    lines = [f"### {title}", "", head, sep]
    for k in keys:
        first = next(p for p in parts.values() if k in p.index)
        cells = []
        for p in parts.values():
            if k in p.index:
                r = p.loc[k]
                cells += [_pct(r["median"]), f"{_pct(r['worst_app'])} ({r['worst_app_name']})"]
            else:
                cells += ["-", "-"]
        lines.append(f"| {k[0]} | {k[1]} | {int(first.loc[k, 'size'])} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def pooled(rows: pd.DataFrame, col: str) -> dict[str, float]:
    """Median APE over every held-out row of a config class, and the worst (device, app)."""
    out = {}
    r = rows[rows[col].notna()]
    ape = (r[col] - r["step_time_s"]).abs() / r["step_time_s"]
    cls = np.where(r["gpus"] == 1, "1 GPU", np.where(r["nodes"] == 1, "2-8 GPUs, 1 node",
                                                     "multi-node"))
    for c in CONFIGS:
        sel = cls == c
        if sel.any():
            out[c] = float(np.median(ape[sel]))
            out[c + " worst"] = float(ape[sel].groupby([r["device"][sel], r["app"][sel]])
                                      .median().max())
    return out


def hand_set(steps: pd.DataFrame, data: Path, graphs: dict, kernels: pd.DataFrame
             ) -> str:
    """gpus.py factors on the V100 next to the predictor (trained without V100)."""
    from workbench.compute.train import predict_rows
    from workbench.fit import fit_pollux_app
    from workbench.gpus import derive_throughput
    from workbench.perf import iteration_time

    v = steps[(steps["device"] == "V100")].copy()
    fits = {a: fit_pollux_app(data / "pollux" / a) for a in v["app"].unique()}
    v["hand"] = [float(iteration_time(derive_throughput(fits[a].params, "V100"), 1, b))
                 for a, b in zip(v["app"], v["local_batch"], strict=True)]
    coef = train(None, exclude_devices=["V100"], kernels=kernels, steps=steps, graphs=graphs)
    v["pred"] = predict_rows(v, coef, graphs)
    lines = ["### Hand-set factors (`gpus.py`: V100 = 4x T4 compute) against the predictor, "
             "V100 held out", "",
             "| app (Zeus job on V100) | rows | hand-set: median APE | hand-set: worst row | "
             "predictor: median APE | predictor: worst row |", "|---|---:|---:|---:|---:|---:|"]
    for a, g in v.groupby("app"):
        h = (g["hand"] - g["step_time_s"]).abs() / g["step_time_s"]
        p = (g["pred"] - g["step_time_s"]).abs() / g["step_time_s"]
        lines.append(f"| {a} | {len(g)} | {_pct(h.median())} | {_pct(h.max())} | "
                     f"{_pct(p.median())} | {_pct(p.max())} |")
    h = (v["hand"] - v["step_time_s"]).abs() / v["step_time_s"]
    p = (v["pred"] - v["step_time_s"]).abs() / v["step_time_s"]
    lines.append(f"| all | {len(v)} | {_pct(h.median())} | {_pct(h.max())} | "
                 f"{_pct(p.median())} | {_pct(p.max())} |")
    return "\n".join(lines) + "\n"


def cv_fit(data: Path, folds: int = 5, seed: int = 0) -> str:
    """K-fold cross-validation of the Pollux fit on the measured device (T4)."""
    from workbench.fit import (
        POLLUX_APPS,
        fit_throughput_params,
        placement_iteration_time,
        read_pollux_timings,
    )

    lines = [f"### Held-out configurations on the measured device (T4, {folds}-fold)", "",
             "| app | rows | median APE (held-out rows) | in-sample median APE |",
             "|---|---:|---:|---:|"]
    rng = np.random.default_rng(seed)
    allp = []
    for app in POLLUX_APPS:
        rows = read_pollux_timings(data / "pollux" / app)
        fold = rng.integers(0, folds, len(rows))
        ape = np.full(len(rows), np.nan)
        for k in range(folds):
            tr, te = rows[fold != k], rows[fold == k]
            p = fit_throughput_params(tr)
            pred = placement_iteration_time(p, te["num_nodes"], te["num_replicas"],
                                            te["local_bsz"])
            ape[fold == k] = np.abs(pred - te["step_time"]) / te["step_time"]
        p = fit_throughput_params(rows)
        ins = np.abs(placement_iteration_time(p, rows["num_nodes"], rows["num_replicas"],
                                              rows["local_bsz"]) - rows["step_time"]
                     ) / rows["step_time"]
        allp.append(ape)
        lines.append(f"| {app} | {len(rows)} | {_pct(np.median(ape))} | "
                     f"{_pct(np.median(ins))} |")
    lines.append(f"| all | {sum(len(a) for a in allp)} | "
                 f"{_pct(np.median(np.concatenate(allp)))} | |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "profiles")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results"
                    / "compute_validation.md")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    t0 = time.perf_counter()
    kernels = read_all_deepbench(args.data)
    steps = read_step_times(args.data)
    graphs = load_graphs(steps["graph"].unique())
    lodo = leave_one_device_out(kernels, steps, graphs)
    loao = leave_one_app_out(kernels, steps, graphs)
    out = [
        "## Step-time predictor: validation (`bench/compute_validation.py`)", "",
        table(lodo, {"graph model": "pred", "no app offset": "pred_no_offset",
                     "roofline only": "pred_roofline"},
              "Leave one device out"),
        table(lodo, {"one 1-GPU measurement": "pred_calibrated"},
              "Leave one device out, after one 1-GPU measurement of the app on it"),
        table(loao, {"graph model": "pred"}, "Leave one app out"),
    ]
    summary = ["### Pooled over held-out devices", "",
               "| predictor | 1 GPU median | 1 GPU worst (device, app) | 2-8 GPUs median | "
               "2-8 GPUs worst | multi-node median |", "|---|---:|---:|---:|---:|---:|"]
    for name, frame, col in (("graph model, LODO", lodo, "pred"),
                             ("graph model, LODO, without the host-bound NCF",
                              lodo[lodo["app"] != "ncf"], "pred"),
                             ("no app offset, LODO", lodo, "pred_no_offset"),
                             ("roofline only, LODO", lodo, "pred_roofline"),
                             ("one measurement, LODO", lodo, "pred_calibrated"),
                             ("graph model, LOAO", loao, "pred")):
        s = pooled(frame, col)
        summary.append(f"| {name} | {_pct(s.get('1 GPU', np.nan))} | "
                       f"{_pct(s.get('1 GPU worst', np.nan))} | "
                       f"{_pct(s.get('2-8 GPUs, 1 node', np.nan))} | "
                       f"{_pct(s.get('2-8 GPUs, 1 node worst', np.nan))} | "
                       f"{_pct(s.get('multi-node', np.nan))} |")
    out.insert(2, "\n".join(summary) + "\n")
    out.append(hand_set(steps, args.data, graphs, kernels))
    out.append(cv_fit(args.data))
    text = "\n".join(out)
    print(text)
    print(f"({time.perf_counter() - t0:.0f} s)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
