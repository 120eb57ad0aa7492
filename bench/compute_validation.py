"""Validate the step-time predictors out of sample and compare them with their baselines.

    PYTHONPATH=. python bench/compute_validation.py [--data ../shared/data/profiles]
        [--out docs/results/compute_validation.md] [--part transformers|apps|all]
        [--with-mlp]

Prints markdown tables (and writes them to ``--out``).

Transformers (the kernel-level predictor, NeuSight's measurements; ``--part transformers``):

A. kernel level: leave-one-device-out median and worst-decile APE per kernel kind and held-out
   device, the roofline alone beside, and every candidate model form's score;
B. model level: every measured NeuSight step predicted with the kernel model and launch
   terms fitted without its device; per device and per model, training and inference
   apart, beside the roofline alone and the kernel sum without launch terms;
C. BF16: the FP32-trained GEMM model on DeepBench's FP16 tensor-core GEMMs.

The Pollux apps (the graph-aggregated predictor; ``--part apps``):

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


def apps_part(data: Path) -> list[str]:
    kernels = read_all_deepbench(data)
    steps = read_step_times(data)
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
    out.append(hand_set(steps, data, graphs, kernels))
    out.append(cv_fit(data))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "profiles")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results"
                    / "compute_validation.md")
    ap.add_argument("--part", choices=("transformers", "apps", "all"), default="all")
    ap.add_argument("--with-mlp", action="store_true",
                    help="also score the MLP form (slow; it extrapolates badly)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    t0 = time.perf_counter()
    out: list[str] = []
    if args.part in ("transformers", "all"):
        out += transformer_part(args.data, args.with_mlp)
    if args.part in ("apps", "all"):
        out += apps_part(args.data)
    text = "\n".join(out)
    print(text)
    print(f"({time.perf_counter() - t0:.0f} s)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)



# --------------------------------------------------------------------------- transformers


def _ape(pred: pd.Series, true: pd.Series) -> pd.Series:
    return (pred - true).abs() / true


def kernel_tables(held: pd.DataFrame, scores: pd.DataFrame) -> str:
    """A: per kind and held-out device, median APE of the model and of the roofline."""
    h = held.assign(ape=_ape(held["pred_s"], held["time_s"]),
                    roof=_ape(held["roof_s"], held["time_s"]))
    groups = sorted(h["group"].unique())
    lines = ["### Kernel level, leave one device out (NeuSight kernels)", "",
             "Median APE of the kernel model on the held-out device (roofline alone in "
             "brackets); the last column pools every held-out kernel of the kind, and its "
             "90th percentile.", "",
             "| kind | kernels | " + " | ".join(groups) + " | pooled median | pooled p90 |",
             "|---|---:|" + "---:|" * (len(groups) + 2)]
    for kind, g in h.groupby("kind"):
        cells = []
        for dev in groups:
            d = g[g["group"] == dev]
            cells.append(f"{_pct(d['ape'].median())} ({_pct(d['roof'].median())})"
                         if len(d) else "-")
        lines.append(f"| {kind} | {len(g)} | " + " | ".join(cells)
                     + f" | {_pct(g['ape'].median())} | {_pct(g['ape'].quantile(0.9))} |")
    per_dev = [f"{_pct(h.loc[h['group'] == d, 'ape'].median())}" for d in groups]
    lines.append(f"| all kinds | {len(h)} | " + " | ".join(per_dev)
                 + f" | {_pct(h['ape'].median())} | {_pct(h['ape'].quantile(0.9))} |")
    lines += ["", "Candidates (mean over held-out devices of the median APE; the lowest is "
              "shipped):", "", "| kind | " + " | ".join(
                  f"{f} ({d})" for f, d in scores[["form", "device_features"]]
                  .drop_duplicates().itertuples(index=False)) + " |",
              "|---|" + "---:|" * len(scores[["form", "device_features"]].drop_duplicates())]
    for kind, g in scores.groupby("kind", sort=False):
        lines.append(f"| {kind} | " + " | ".join(_pct(v) for v in g["score"]) + " |")
    return "\n".join(lines) + "\n"


def model_tables(lodo: pd.DataFrame) -> str:
    """B: model-level leave-one-device-out per device and per model, modes apart."""
    r = lodo.assign(ape=_ape(lodo["pred_s"], lodo["step_time_s"]),
                    roof=_ape(lodo["pred_roofline_s"], lodo["step_time_s"]),
                    kern=_ape(lodo["pred_kernels_s"], lodo["step_time_s"]))
    out = ["### Model level, leave one device out (NeuSight step times)", "",
           "Every measured step of BERT-large, GPT-2 large, GPT-3 XL and 2.7B, OPT-1.3B and "
           "Switch-XL (inference on five GPUs, training on the V100), predicted with the "
           "kernel model and launch terms fitted without the step's device.", ""]
    for key, title in (("group", "device"), ("model", "model")):
        out += [f"#### By {title}", "",
                f"| mode | {title} | steps | median APE | worst APE | roofline only: median"
                " | kernel sum, no launch terms: median |", "|---|---|---:|---:|---:|---:|---:|"]
        for (mode, k), g in r.groupby(["mode", key]):
            out.append(f"| {mode} | {k} | {len(g)} | {_pct(g['ape'].median())} | "
                       f"{_pct(g['ape'].max())} | {_pct(g['roof'].median())} | "
                       f"{_pct(g['kern'].median())} |")
        out.append("")
    out += ["#### Pooled", "", "| mode | steps | median APE | worst APE (device, model) | "
            "roofline only: median | roofline only: worst |", "|---|---:|---:|---:|---:|---:|"]
    for mode, g in r.groupby("mode"):
        w = g.loc[g["ape"].idxmax()]
        out.append(f"| {mode} | {len(g)} | {_pct(g['ape'].median())} | {_pct(w['ape'])} "
                   f"({w['group']}, {w['model']} b{w['batch']}) | {_pct(g['roof'].median())} | "
                   f"{_pct(g['roof'].max())} |")
    return "\n".join(out) + "\n"


def half_table(err: pd.DataFrame, widening: float) -> str:
    """C: the FP32-trained GEMM model on FP16 tensor-core GEMMs."""
    lines = ["### BF16 extrapolation: DeepBench GEMMs, FP32 against FP16 tensor cores", "",
             "log(measured / predicted) of the FP32-trained linear model on DeepBench's GEMMs "
             "(FP32 peak and 4-byte operands, or the tensor-core FP16 peak and 2-byte "
             "operands); the shipped BF16 interval is the FP32 one widened by the ratio of "
             f"the 5-95 % ranges, x{widening:.2f}.", "",
             "| device | precision | GEMMs | median | 5 % | 95 % |",
             "|---|---|---:|---:|---:|---:|"]
    for (dev, prec), g in err.groupby(["device", "precision"]):
        e = g["log_error"]
        lines.append(f"| {dev} | {prec} | {len(g)} | {e.median():+.2f} | {e.quantile(0.05):+.2f}"
                     f" | {e.quantile(0.95):+.2f} |")
    return "\n".join(lines) + "\n"


def transformer_part(data: Path, with_mlp: bool) -> list[str]:
    from workbench.compute.kernel_train import CANDIDATES, MLP_CANDIDATE
    from workbench.compute.predict import load_coefficients
    from workbench.compute.step_train import train_transformer_predictor

    candidates = (*CANDIDATES, MLP_CANDIDATE) if with_mlp else CANDIDATES
    tr = train_transformer_predictor(data, load_coefficients().sync, candidates=candidates)
    t = tr.terms
    deltas = ", ".join(f"{k} {1e6 * v:.0f}" for k, v in t.delta_s.items())
    head = (f"Timer costs removed per kernel (us): {deltas}; host launch floor "
            f"{1e6 * t.launch_s:.1f} us (fitted on every step); interval (training) "
            f"x{np.exp(t.interval_train[0]):.2f}"
            f"..x{np.exp(t.interval_train[1]):.2f}, (inference) "
            f"x{np.exp(t.interval_inference[0]):.2f}..x{np.exp(t.interval_inference[1]):.2f}")
    return ["## Transformers: kernel-level predictor (`bench/compute_validation.py`)", "",
            kernel_tables(tr.kernels.held_out, tr.kernels.scores), model_tables(tr.lodo),
            half_table(tr.half_errors, t.bf16_widening), head + "\n",
            app_kernel_table(data, dict(tr.kernels.without), tr.kernels.model)]


def app_kernel_table(data: Path, without: dict, full: object) -> str:
    """Item 6: the apps' GEMM kernels (DeepBench, ten GPUs) under the DeepBench-trained
    correction of the apps' predictor against the kernel-level model, device held out."""
    from workbench.compute.devices import BUILTIN_DEVICES
    from workbench.compute.predict import Coefficients, kernel_time_s
    from workbench.compute.train import fit_kernel_weights, read_all_deepbench

    k = read_all_deepbench(data)
    g = k[k["kind"] == "gemm"]
    lines = ["### The apps' kernels: DeepBench GEMMs, device held out", "",
             "| device | GEMMs | apps' correction (DeepBench-trained): median APE | "
             "kernel-level model (NeuSight-trained): median APE |", "|---|---:|---:|---:|"]
    cur_all, new_all = [], []
    for dev in sorted(g["device"].unique()):
        rows = g[g["device"] == dev]
        coef = Coefficients(kernel_weights=fit_kernel_weights(k[k["device"] != dev],
                                                              BUILTIN_DEVICES))
        cur = np.array([kernel_time_s("gemm", f, b, n, BUILTIN_DEVICES[dev], coef)
                        for f, b, n in zip(rows["flops"], rows["bytes"], rows["kernels"],
                                           strict=True)])
        model = without.get(dev, full)  # a NeuSight device: the model fitted without it
        dims = np.zeros((len(rows), 7), dtype=np.int64)
        dims[:, 0], dims[:, 1], dims[:, 2], dims[:, 3] = 1, rows["m"], rows["n"], rows["k"]
        new, _ = model.predict_s("linear", dims, rows["flops"].to_numpy(float),  # type: ignore[attr-defined]
                                 rows["bytes"].to_numpy(float), None, BUILTIN_DEVICES[dev])
        t = rows["time_s"].to_numpy(float)
        cur_all.append(np.abs(cur - t) / t)
        new_all.append(np.abs(new - t) / t)
        lines.append(f"| {dev} | {len(rows)} | {_pct(np.median(cur_all[-1]))} | "
                     f"{_pct(np.median(new_all[-1]))} |")
    lines.append(f"| all | {sum(len(c) for c in cur_all)} | "
                 f"{_pct(np.median(np.concatenate(cur_all)))} | "
                 f"{_pct(np.median(np.concatenate(new_all)))} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
