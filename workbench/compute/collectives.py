"""Collective communication as NCCL runs it inside one server, fitted on measured times.

Every collective over ``n`` GPUs of one node is a latency plus the bytes each GPU moves over
its link (the ring algorithm's bus volume; NCCL's ``busbw`` convention, Jeaugey, *NCCL 2.0*,
GTC 2017)::

    all-reduce      t = alpha + 2 (n - 1) / n * S / (eta * B)
    all-gather      t = alpha + (n - 1) / n * S / (eta * B)      S: the gathered tensor
    reduce-scatter  t = alpha + (n - 1) / n * S / (eta * B)      S: the tensor reduced
    send/receive    t = alpha_p2p + S / (eta_p2p * B)   (the all-reduce's terms on a link
                                                         kind without send/receive rows)

with ``B`` the device's per-direction link bandwidth inside its server
(:attr:`~workbench.compute.devices.DeviceSpec.intra_node_gb_s`: NVLink/NVSwitch/HCCS on SXM
parts, PCIe on PCIe cards; ``devices add`` overrides it). ``alpha`` and ``eta`` are fitted
per link kind (:func:`link_kind`: ``nvlink`` above 64 GB/s per direction, else ``pcie``) on
Vidur's measured NCCL all-reduce and send/receive times (``profiles/vidur/network``:
DGX A100 and DGX H100 on NVSwitch, pairs of A100/H100 PCIe cards on an NVLink bridge, and
four of them, which cross PCIe), by least squares on the relative error over messages of
64 KiB and more (:func:`fit_collectives`). All-gather and reduce-scatter, which were not
measured, take the all-reduce's terms (a ring all-reduce is a reduce-scatter followed by an
all-gather). Across servers the ring runs at the slower of the link and the server's
network share (:func:`workbench.compute.predict.sync_time_s`, fitted on the Pollux apps).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workbench.compute.devices import DeviceSpec
from workbench.compute.predict import SyncModel, sync_time_s

LINK_KINDS = ("nvlink", "pcie")
NVLINK_MIN_GB_S = 64.0
"""Per-direction bandwidth above which a node's link is NVLink-class (PCIe 5.0 x16 is 63)."""
COLLECTIVES_SCHEMA_VERSION = 1

VIDUR_SERVERS: Mapping[str, Mapping[int, tuple[str, float]]] = {
    "a100_dgx": {2: ("nvlink", 300.0), 4: ("nvlink", 300.0), 8: ("nvlink", 300.0)},
    "h100_dgx": {2: ("nvlink", 450.0), 4: ("nvlink", 450.0), 8: ("nvlink", 450.0)},
    "a100_pairwise_nvlink": {2: ("nvlink", 300.0), 4: ("pcie", 31.5)},
    "h100_pairwise_nvlink": {2: ("nvlink", 300.0), 4: ("pcie", 63.0)},
}
"""Per Vidur server folder and GPU count: the link kind and its per-direction GB/s. DGX
A100: NVLink 3 through NVSwitch, 300 GB/s; DGX H100: NVLink 4, 450 GB/s; the pairwise
servers' NVLink bridge joins two PCIe cards (600 GB/s total, 300 per direction), and four
GPUs cross PCIe 4.0 x16 (A100, 31.5 GB/s) or PCIe 5.0 x16 (H100, 63 GB/s)."""
MIN_FIT_BYTES = 2**16


@dataclass(frozen=True)
class LinkFit:
    """``alpha`` (s) and ``eta`` of one collective on one link kind, and its fit's error."""

    latency_s: float
    efficiency: float
    median_ape: float = 0.0
    rows: int = 0


@dataclass(frozen=True)
class Collectives:
    """The fitted collective terms (``workbench/data/compute/collectives.json``)."""

    all_reduce: Mapping[str, LinkFit]
    send_recv: Mapping[str, LinkFit]
    trained_on: Mapping[str, Any] = field(default_factory=dict)


def link_kind(dev: DeviceSpec) -> str:
    """``nvlink`` (NVLink, NVSwitch, HCCS) or ``pcie``, from the node's link bandwidth."""
    return "nvlink" if dev.intra_node_gb_s > NVLINK_MIN_GB_S else "pcie"


def _terms(table: Mapping[str, LinkFit], dev: DeviceSpec) -> LinkFit:
    return table.get(link_kind(dev)) or table["nvlink"]


def all_reduce_s(nbytes: float, n: int, dev: DeviceSpec, c: Collectives, nodes: int = 1,
                 sync: SyncModel | None = None, inter_node_gbit_s: float | None = None
                 ) -> float:
    """One all-reduce of ``nbytes`` over ``n`` GPUs (0 on one GPU), s; across ``nodes`` > 1
    servers the Pollux-fitted ring of :func:`workbench.compute.predict.sync_time_s`."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    if nodes > 1:
        return sync_time_s(nbytes, n, nodes, dev, sync or SyncModel(), inter_node_gbit_s)
    f = _terms(c.all_reduce, dev)
    return f.latency_s + 2.0 * (n - 1) / n * nbytes / (f.efficiency * dev.intra_node_gb_s * 1e9)


def all_gather_s(nbytes: float, n: int, dev: DeviceSpec, c: Collectives, nodes: int = 1,
                 sync: SyncModel | None = None, inter_node_gbit_s: float | None = None
                 ) -> float:
    """One all-gather (or reduce-scatter) whose full tensor is ``nbytes``: half a ring
    all-reduce's volume, the same latency, s."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    f = _terms(c.all_reduce, dev)
    full = all_reduce_s(nbytes, n, dev, c, nodes, sync, inter_node_gbit_s)
    return f.latency_s + 0.5 * (full - f.latency_s)


reduce_scatter_s = all_gather_s


def send_recv_s(nbytes: float, dev: DeviceSpec, c: Collectives) -> float:
    """One point-to-point transfer of ``nbytes`` between two GPUs of one node, s."""
    if nbytes <= 0:
        return 0.0
    f = c.send_recv.get(link_kind(dev)) or _terms(c.all_reduce, dev)
    return f.latency_s + nbytes / (f.efficiency * dev.intra_node_gb_s * 1e9)


# --------------------------------------------------------------------------- fitting


def read_vidur_network(folder: Path | str) -> Any:
    """Intra-node rows of Vidur's network profiles: ``server, op, kind, n, size, t_s, bw``
    (median over ranks of the measured median, seconds; ``bw`` GB/s per direction)."""
    import pandas as pd

    root = Path(folder)
    rows = []
    for server, by_n in VIDUR_SERVERS.items():
        for op in ("all_reduce", "send_recv"):
            f = root / server / f"{op}.csv.gz"
            if not f.is_file():
                continue
            d = pd.read_csv(f)
            col = f"time_stats.{op}.median"
            if col not in d.columns:
                raise ValueError(f"{f}: lacks column {col!r}; pass Vidur's network profiles")
            d = d[d["devices_per_node"] == d["num_workers"]]
            for n, g in d.groupby("num_workers"):
                if int(n) not in by_n:
                    continue
                kind, bw = by_n[int(n)]
                med = g.groupby("size")[col].median()
                rows += [(server, op, kind, int(n), float(s), float(t) * 1e-3, bw)
                         for s, t in med.items()]
    out = pd.DataFrame(rows, columns=["server", "op", "kind", "n", "size", "t_s", "bw"])
    return out[out["size"] >= MIN_FIT_BYTES].reset_index(drop=True)


def _volume(rows: Any) -> np.ndarray:
    """Seconds at 100 % of the link: the ring's bus bytes over the link bandwidth."""
    n = rows["n"].to_numpy(float)
    factor = np.where(rows["op"].to_numpy() == "all_reduce", 2.0 * (n - 1) / n, 1.0)
    return np.asarray(factor * rows["size"].to_numpy(float) / (rows["bw"].to_numpy(float) * 1e9))


def fit_link(rows: Any) -> LinkFit:
    """``alpha`` and ``eta`` minimising the squared relative error over ``rows``."""
    t = rows["t_s"].to_numpy(float)
    a = np.c_[np.ones(len(t)), _volume(rows)] / t[:, None]
    (alpha, inv_eta), *_ = np.linalg.lstsq(a, np.ones(len(t)), rcond=None)
    fit = LinkFit(max(float(alpha), 0.0), 1.0 / max(float(inv_eta), 1e-6))
    ape = np.abs(predict_rows(rows, fit) / t - 1.0)
    return LinkFit(fit.latency_s, fit.efficiency, float(np.median(ape)), int(len(t)))


def predict_rows(rows: Any, fit: LinkFit) -> np.ndarray:
    """The model's time of each row under ``fit``, s."""
    return np.asarray(fit.latency_s + _volume(rows) / fit.efficiency)


def fit_collectives(folder: Path | str) -> Collectives:
    """Fit all-reduce and send/receive per link kind on Vidur's network profiles."""
    rows = read_vidur_network(folder)
    if rows.empty:
        raise FileNotFoundError(f"{folder}: no Vidur network profiles (<server>/"
                                "all_reduce.csv.gz); pass ../shared/data/profiles/vidur/network")
    out: dict[str, dict[str, LinkFit]] = {"all_reduce": {}, "send_recv": {}}
    for op in out:
        for kind in LINK_KINDS:
            sel = rows[(rows["op"] == op) & (rows["kind"] == kind)]
            if len(sel) >= 2:
                out[op][kind] = fit_link(sel)
    if "nvlink" not in out["all_reduce"] or "nvlink" not in out["send_recv"]:
        raise ValueError(f"{folder}: no NVLink all-reduce or send/receive rows to fit")
    return Collectives(out["all_reduce"], out["send_recv"],
                       {"source": "Vidur network profiles (microsoft/vidur @ 7d47513)",
                        "servers": sorted(rows["server"].unique().tolist()),
                        "rows": int(len(rows))})


# --------------------------------------------------------------------------- files


def collectives_path() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "compute" / "collectives.json"


def write_collectives(c: Collectives, path: Path | str) -> None:
    """Write the fit as JSON atomically."""
    from dataclasses import asdict

    from workbench.io.plan_csv import atomic_write

    d = {"schema_version": COLLECTIVES_SCHEMA_VERSION,
         "all_reduce": {k: asdict(v) for k, v in c.all_reduce.items()},
         "send_recv": {k: asdict(v) for k, v in c.send_recv.items()},
         "trained_on": dict(c.trained_on)}
    with atomic_write(path) as fh:
        fh.write(json.dumps(d, indent=1) + "\n")


def read_collectives(path: Path | str | None = None) -> Collectives:
    """The shipped (or another file's) collective terms."""
    p = Path(path) if path is not None else collectives_path()
    if not p.is_file():
        raise FileNotFoundError(f"{p} not found; fit with `workbench compute train`")
    d = json.loads(p.read_text())
    if d.get("schema_version") != COLLECTIVES_SCHEMA_VERSION:
        raise ValueError(f"{p}: schema_version {d.get('schema_version')!r}; refit")

    def table(x: Mapping[str, Any]) -> dict[str, LinkFit]:
        return {k: LinkFit(float(t["latency_s"]), float(t["efficiency"]),
                           float(t.get("median_ape", 0.0)), int(t.get("rows", 0)))
                for k, t in x.items()}

    return Collectives(table(d["all_reduce"]), table(d["send_recv"]),
                       dict(d.get("trained_on", {})))


@functools.lru_cache(maxsize=1)
def shipped_collectives() -> Collectives:
    """:func:`read_collectives` of the shipped file, read once."""
    return read_collectives()
