"""Readers of NeuSight's public measurements (``../shared/data/profiles/neusight``, MIT).

The folder (a snapshot of the NeuSight artifact, Lee et al., *NeuSight: Forecasting GPU
Performance for Deep Learning Training and Inference*, ASPLOS 2025) holds

* ``kernels/<op>/<device>.csv.gz``: measured kernels (``Latency`` ms) with their shapes:
  ``linear``/``bmm`` ``B, M, N, K`` (an ``M x K`` result reduced over ``N``, as the launch
  grids show); ``conv`` ``B, Input_Channel, Output_Channel,
  Kernel_Szie, Input_Size, Stride, Padding``; ``ln``, ``softmax`` and ten element-wise
  ops ``B, H`` (rows, columns);
* ``step_times/<device>/<model>-<train|inf>-<seq>-<batch>[-fusion].json``: measured step
  (``e2e_latency``, ``fw_latency``, ``bwall_latency``, ms);
* ``opgraphs/<model>-<mode>-<seq>-<batch>[-dp4|-tp4|-pp4_k].csv.gz``: each configuration's
  operator graph (``FwOps``/``BwOps``/``AccOps``: ``[kind, shape]`` lists; one transformer
  block plus embedding and head, except Switch whose graph is whole);
* ``model_configs/*.json`` (Hugging Face configs), ``device_configs/*.json``.

Only the data are read; none of NeuSight's code is used.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench.compute.devices import BUILTIN_DEVICES, normalise_device_name
from workbench.units import MS_PER_S

DEVICE_FILES: Mapping[str, str] = {
    "Tesla_P4": "P4", "Tesla_P100-PCIE-16GB": "P100", "Tesla_T4": "T4",
    "Tesla_V100-PCIE-32GB": "V100", "NVIDIA_A100-PCIE-40GB": "A100-PCIe-40GB",
    "NVIDIA_A100_80GB_PCIe": "A100-PCIe-80GB",
}
"""Kernel and step-time file stems -> built-in device (the A100 convolutions were measured
on an 80 GB PCIe card, everything else on the 40 GB one)."""

HELD_OUT_GROUP: Mapping[str, str] = {"A100-PCIe-40GB": "A100", "A100-PCIe-80GB": "A100"}
"""Devices that leave-one-device-out holds out together (both A100 PCIe cards)."""

ELEMENTWISE_OPS: Mapping[str, str] = {
    "add": "binary", "mul": "binary", "div": "binary", "pow": "binary",
    "addu": "unary", "mulu": "unary", "divu": "unary", "powu": "pow", "gelu": "gelu",
    "relu": "relu", "tanh": "tanh",
}
"""NeuSight element-wise kernel folders -> the ``op`` of :class:`~workbench.compute.opgraph.
Kernel` (``*u``: a tensor and a scalar)."""

KERNEL_FOLDERS = ("linear", "bmm", "conv", "ln", "softmax", *ELEMENTWISE_OPS)

STEP_NAME = re.compile(r"(?P<model>.+?)-(?P<mode>train|inf)-(?P<seq>\d+)-(?P<batch>\d+)"
                       r"(?P<fusion>-fusion)?$")


class NeuSightDataError(ValueError):
    """A NeuSight file is missing or not in the expected layout."""


def _root(folder: Path | str) -> Path:
    p = Path(folder)
    if (p / "neusight").is_dir():
        p = p / "neusight"
    if not (p / "kernels").is_dir():
        raise NeuSightDataError(f"{p} holds no kernels/ folder; pass "
                                "../shared/data/profiles (or its neusight/ folder)")
    return p


def _device(stem: str) -> str:
    if stem in DEVICE_FILES:
        return DEVICE_FILES[stem]
    return normalise_device_name(stem.replace("_", " "), BUILTIN_DEVICES)


def read_kernels(folder: Path | str, ops: tuple[str, ...] = KERNEL_FOLDERS) -> pd.DataFrame:
    """Every measured kernel of ``ops`` in one frame.

    Columns ``device`` (built-in name), ``kind`` (``linear``, ``bmm``, ``conv``, ``ln``,
    ``softmax``, ``elementwise``), ``op`` (element-wise: :data:`ELEMENTWISE_OPS`), ``d0..d6``
    (the dims of :class:`~workbench.compute.opgraph.Kernel`; conv: ``B, C_in, C_out, k, H,
    stride, pad``), ``time_s``.
    """
    root = _root(folder)
    frames = []
    for op in ops:
        for f in sorted((root / "kernels" / op).glob("*.csv.gz")):
            d = pd.read_csv(f)
            dev = _device(f.name.removesuffix(".csv.gz"))
            out = pd.DataFrame({"device": dev, "time_s": d["Latency"].to_numpy(float) / MS_PER_S})
            if op in ("linear", "bmm"):
                # The launch grids show an M x K result reduced over N (a 128x64 tile grid
                # of ceil(K/128) x ceil(M/64)): in Kernel's (B, rows, cols, reduction) order.
                out["kind"], out["op"] = op, ""
                dims = [d["B"], d["M"], d["K"], d["N"]]
            elif op == "conv":
                out["kind"], out["op"] = "conv", ""
                dims = [d["B"], d["Input_Channel"], d["Output_Channel"], d["Kernel_Szie"],
                        d["Input_Size"], d["Stride"], d["Padding"]]
            elif op in ("ln", "softmax"):
                out["kind"], out["op"] = op, ""
                dims = [d["B"], d["H"]]
            else:
                out["kind"], out["op"] = "elementwise", ELEMENTWISE_OPS[op]
                dims = [d["B"] * d["H"]]
            for i, col in enumerate(dims):
                out[f"d{i}"] = col.to_numpy(np.int64)
            frames.append(out)
    if not frames:
        raise NeuSightDataError(f"no kernel files under {root / 'kernels'}")
    df = pd.concat(frames, ignore_index=True)
    for i in range(7):
        if f"d{i}" not in df:
            df[f"d{i}"] = 0
        df[f"d{i}"] = df[f"d{i}"].fillna(0).astype(np.int64)
    return df


def read_step_times(folder: Path | str, fusion: bool = False) -> pd.DataFrame:
    """Measured steps: ``device, model, mode (train|inference), seq_len, batch,
    step_time_s, forward_s, backward_s`` (``fusion``: the fused-kernel runs instead)."""
    root = _root(folder)
    rows = []
    for f in sorted((root / "step_times").glob("*/*.json")):
        m = STEP_NAME.fullmatch(f.stem)
        if m is None or bool(m.group("fusion")) != fusion:
            continue
        j = json.loads(f.read_text())
        rows.append({"device": _device(f.parent.name), "model": m.group("model"),
                     "mode": "train" if m.group("mode") == "train" else "inference",
                     "seq_len": int(m.group("seq")), "batch": int(m.group("batch")),
                     "step_time_s": float(j["e2e_latency"]) / MS_PER_S,
                     "forward_s": float(j["fw_latency"]) / MS_PER_S,
                     "backward_s": float(j["bwall_latency"]) / MS_PER_S})
    if not rows:
        raise NeuSightDataError(f"no step-time files under {root / 'step_times'}")
    return pd.DataFrame(rows)


def model_config(folder: Path | str, model: str) -> dict[str, Any]:
    """The Hugging Face config NeuSight measured ``model`` with."""
    p = _root(folder) / "model_configs" / f"{model}.json"
    if not p.is_file():
        raise NeuSightDataError(f"no model config {p.name} in {p.parent}")
    return dict(json.loads(p.read_text()))


_KIND = {"Linear": "linear", "BMM": "bmm", "VECsoftmax": "softmax", "VECln": "ln"}


def read_opgraph(path: Path | str) -> pd.DataFrame:
    """One NeuSight operator graph: a row per listed kernel with ``node`` (the fx node),
    ``phase`` (``forward``, ``backward``, ``accumulate``), ``kind`` (``linear``, ``bmm``,
    ``softmax``, ``ln``, or NeuSight's own name), ``dims`` (linear ``(1, M, N, K)`` and bmm
    ``(B, M, N, K)`` in :class:`~workbench.compute.opgraph.Kernel`'s order, else NeuSight's
    shape) and ``flops`` (GEMMs: ``2 B M N K``; others 0)."""
    d = pd.read_csv(path)
    rows = []
    for _, r in d.iterrows():
        for col, phase in (("FwOps", "forward"), ("BwOps", "backward"),
                           ("AccOps", "accumulate")):
            for kind, shape in ast.literal_eval(str(r[col])):
                k = _KIND.get(kind, kind)
                dims: tuple[Any, ...] = tuple(shape) if isinstance(shape, list | tuple) else ()
                flops = 0.0
                if k == "linear":  # NeuSight writes (M, K, N)
                    m_, k_, n_ = (int(x) for x in dims)
                    dims, flops = (1, m_, n_, k_), 2.0 * m_ * n_ * k_
                elif k == "bmm":  # (B, M, K, N)
                    b_, m_, k_, n_ = (int(x) for x in dims)
                    dims, flops = (b_, m_, n_, k_), 2.0 * b_ * m_ * n_ * k_
                rows.append({"node": r["Name"], "phase": phase, "kind": k, "dims": dims,
                             "flops": flops})
    return pd.DataFrame(rows)
