"""GPU power limits: time and power of a training step at a limit, fitted on Zeus.

A power limit ``L`` (W per GPU, set with ``nvidia-smi -pl``) caps the board power; the GPU
lowers its clocks, so a step takes longer and draws less. Zeus (You et al., NSDI'23)
measured time per epoch and average power of five DNNs at many batch sizes and limits on
four GPUs (``summary_power_<gpu>.csv``). The model here is fitted to those measurements.

**The model.** With ``P`` the job's board power per GPU at the default (maximum) limit
``L_max`` and ``u = L / P`` the limit relative to what the job draws unlimited::

    power(u) = softmin(1, c u) = (1 + (c u)^-k)^(-1/k)      (a smooth min(1, c u))
    time(u)  = 1 + a exp(-b u)                              (clocks fall below u ~ 1)

    power factor  r_P(L) = power(u) / power(u_max)          u_max = L_max / P
    time factor   r_t(L) = time(u)  / time(u_max)

anchored so that ``r_P = r_t = 1`` at the default limit (the profile's power and speed are
those at full power). Energy per unit of work scales by ``r_P * r_t``: a lower limit saves
energy while the clocks still have headroom (``u`` near or above 1) and costs time fast
below it. Four parameters ``(c, k, a, b)`` per GPU, fitted by robust least squares on the
log ratios of time and power to the measurement at the GPU's highest limit.

**Validation** (:func:`leave_one_limit_out`): per GPU, each limit in turn is held out, the
model refitted on the others and the held-out rows predicted from their own top-limit
measurement; errors in ``docs/results.md`` (``bench/green_power.py``).

**Unmeasured GPUs** (the scenario's H800, A100, Ascend 910B): the fit pooled over the four
GPUs, with an interval from leave-one-GPU-out predictions (the 5-95 % range of predicted /
measured time and power on the GPU held out): :func:`model_for`.

The fits ship in ``workbench/data/compute/power_limits.json`` (:func:`write_power_limits`
rewrites it from the Zeus folder; ``workbench fit power-limits``).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

log = logging.getLogger(__name__)

MIN_FRACTION = 0.4
"""Lowest power limit the menu may hold, as a fraction of the GPU's maximum board power:
NVIDIA boards accept limits down to roughly a third to a half of their TDP, and the Zeus
measurements reach 0.33 (A40, 100 of 300 W) to 0.5 (P100, 125 of 250 W)."""

DEFAULT_MENU: tuple[float, ...] = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)
"""The menu of power limits a run offers when asked for one without fractions (``--power-limits
default``): full power and five lower limits in steps of a tenth of each GPU's maximum board
power (against a coarser menu: ``docs/results.md``, section 10)."""

ZEUS_GPUS: tuple[str, ...] = ("a40", "p100", "rtx6000", "v100")
"""The GPUs with Zeus power traces (``summary_power_<gpu>.csv``)."""

POOLED = "pooled"
"""Key of the fit pooled over every measured GPU (used for unmeasured ones)."""

_START = (1.05, 6.0, 40.0, 7.0)


@dataclass(frozen=True)
class PowerLimitParams:
    """``(c, k, a, b)`` of the module's model (all > 0)."""

    c: float
    k: float
    a: float
    b: float

    def power(self, u: NDArray[np.float64] | float) -> NDArray[np.float64]:
        """``(1 + (c u)^-k)^(-1/k)``, the relative power at limit ``u`` (not anchored)."""
        uu = np.maximum(np.asarray(u, dtype=float), 1e-9)
        return np.asarray((1.0 + (self.c * uu) ** (-self.k)) ** (-1.0 / self.k))

    def time(self, u: NDArray[np.float64] | float) -> NDArray[np.float64]:
        """``1 + a exp(-b u)``, the relative step time at limit ``u`` (not anchored)."""
        return np.asarray(1.0 + self.a * np.exp(-self.b * np.asarray(u, dtype=float)))


@dataclass(frozen=True)
class PowerLimitModel:
    """The fitted model of one GPU (or the pooled one) and how far to trust it.

    ``time_interval`` and ``power_interval`` are the 5 and 95 % of predicted / measured on
    GPUs held out (pooled model) or on limits held out (a measured GPU); ``lolo_*`` the
    median absolute relative errors of its leave-one-limit-out validation.
    """

    gpu: str
    params: PowerLimitParams
    source: str
    time_interval: tuple[float, float] = (1.0, 1.0)
    power_interval: tuple[float, float] = (1.0, 1.0)
    lolo_time_error: float = math.nan
    lolo_power_error: float = math.nan
    rows: int = 0

    def factors(self, limit_w: float, gpu_power_w: float, max_power_w: float
                ) -> tuple[float, float]:
        """``(r_t, r_P)``: how much longer a step takes and how much less power the job
        draws at ``limit_w`` than at ``max_power_w``, for a job drawing ``gpu_power_w`` per
        GPU at full power (see the module docstring). Exactly ``(1, 1)`` at or above the
        maximum; ``r_t >= 1`` and ``r_P <= min(1, L / P)`` (an average under its cap)."""
        if limit_w >= max_power_w or gpu_power_w <= 0:
            return 1.0, 1.0
        u = limit_w / gpu_power_w
        u_max = max_power_w / gpu_power_w
        p = self.params
        r_t = float(p.time(u) / p.time(u_max))
        r_p = float(p.power(u) / p.power(u_max))
        return max(r_t, 1.0), min(r_p, 1.0, u)


def gpu_key(gpu_type: str) -> str:
    """``"RTX 6000"`` -> ``"rtx6000"``: the key of a GPU type among the fits."""
    return re.sub(r"[^a-z0-9]", "", gpu_type.lower())


def check_menu(fractions: Sequence[float]) -> tuple[float, ...]:
    """The menu sorted from full power down, with 1.0 included; raises ValueError unless
    every fraction lies in [:data:`MIN_FRACTION`, 1]."""
    out = {1.0}
    for f in fractions:
        if isinstance(f, bool) or not isinstance(f, int | float) or not (
                math.isfinite(f) and MIN_FRACTION <= f <= 1.0):
            raise ValueError(f"power limit {f!r} must be a fraction of the GPU's maximum board "
                             f"power in [{MIN_FRACTION:g}, 1], e.g. 0.7")
        out.add(float(f))
    return tuple(sorted(out, reverse=True))


# -- Zeus measurements ------------------------------------------------------------------------
def read_zeus_limits(path: str | Path) -> pd.DataFrame:
    """A Zeus ``summary_power_<gpu>.csv`` as one row per workload and limit: ``network,
    batch_size, optimizer, limit_w, time_s, power_w`` (repeats averaged) with the same
    workload's ``top_limit_w, top_time_s, top_power_w`` at its highest measured limit."""
    p = Path(path)
    try:
        raw = pd.read_csv(p)
    except pd.errors.EmptyDataError:
        raise ValueError(f"{p}: the file is empty; pass a Zeus summary_power_<gpu>.csv"
                         ) from None
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ValueError(f"{p}: cannot read a Zeus power trace ({exc})") from None
    need = {"network", "batch_size", "optimizer", "power_limit", "time_per_epoch",
            "average_power"}
    missing = sorted(need - set(raw.columns))
    if missing:
        raise ValueError(f"{p}: not a Zeus power trace (lacks {missing})")
    for col in ("power_limit", "time_per_epoch", "average_power"):
        values = pd.to_numeric(raw[col], errors="coerce")
        bad = ~np.isfinite(values.to_numpy(float))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{p}, line {i + 2}, column {col!r}: {raw[col].iloc[i]!r} is not "
                             "a finite number; correct the row")
        raw[col] = values
    keys = ["network", "batch_size", "optimizer"]
    d = raw.groupby([*keys, "power_limit"], as_index=False)[
        ["time_per_epoch", "average_power"]].mean()
    d = d.rename(columns={"power_limit": "limit_w", "time_per_epoch": "time_s",
                          "average_power": "power_w"})
    d = d[(d["time_s"] > 0) & (d["power_w"] > 0)]
    top = d.loc[d.groupby(keys)["limit_w"].idxmax(), [*keys, "limit_w", "time_s", "power_w"]]
    top = top.rename(columns={"limit_w": "top_limit_w", "time_s": "top_time_s",
                              "power_w": "top_power_w"})
    return d.merge(top, on=keys).reset_index(drop=True)


def predict_rows(rows: pd.DataFrame, params: PowerLimitParams
                 ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Predicted time (s) and power (W) of each row from its workload's top-limit
    measurement: ``t_top * r_t``, ``P_top * r_P`` (the anchored model)."""
    u = rows["limit_w"].to_numpy(float) / rows["top_power_w"].to_numpy(float)
    u1 = rows["top_limit_w"].to_numpy(float) / rows["top_power_w"].to_numpy(float)
    t = rows["top_time_s"].to_numpy(float) * params.time(u) / params.time(u1)
    pw = rows["top_power_w"].to_numpy(float) * params.power(u) / params.power(u1)
    return t, pw


def fit_params(rows: pd.DataFrame) -> PowerLimitParams:
    """Fit ``(c, k, a, b)`` to measured rows: robust least squares (soft L1, scale 0.1) on
    ``log(predicted / measured)`` of time and of power, parameters in logs (all > 0)."""
    from scipy.optimize import least_squares

    if rows.empty:
        raise ValueError("no measurements to fit a power-limit model to")
    t_meas = rows["time_s"].to_numpy(float)
    p_meas = rows["power_w"].to_numpy(float)

    def residuals(z: NDArray[np.float64]) -> NDArray[np.float64]:
        par = PowerLimitParams(*np.exp(z).tolist())
        t, pw = predict_rows(rows, par)
        return np.concatenate([np.log(t / t_meas), np.log(pw / p_meas)])

    res = least_squares(residuals, np.log(_START), loss="soft_l1", f_scale=0.1)
    return PowerLimitParams(*np.exp(res.x).tolist())


def _errors(rows: pd.DataFrame, params: PowerLimitParams
            ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Predicted / measured time and power of ``rows``."""
    t, pw = predict_rows(rows, params)
    return t / rows["time_s"].to_numpy(float), pw / rows["power_w"].to_numpy(float)


def leave_one_limit_out(rows: pd.DataFrame) -> pd.DataFrame:
    """Hold out each measured limit in turn (its rows below the workload's top limit),
    refit on the rest and predict it: one row per held-out limit with ``limit_w, rows,
    time_error, power_error`` (median absolute relative errors) and the ratios' lists."""
    out = []
    for limit in sorted(rows["limit_w"].unique()):
        test = rows[(rows["limit_w"] == limit) & (rows["limit_w"] < rows["top_limit_w"])]
        if test.empty:
            continue
        par = fit_params(rows[rows["limit_w"] != limit])
        rt, rp = _errors(test, par)
        out.append({"limit_w": float(limit), "rows": len(test),
                    "time_error": float(np.median(np.abs(rt - 1))),
                    "power_error": float(np.median(np.abs(rp - 1))),
                    "time_ratio": rt.tolist(), "power_ratio": rp.tolist()})
    return pd.DataFrame(out)


def fit_zeus(zeus_dir: str | Path, gpus: Sequence[str] = ZEUS_GPUS) -> dict[str, PowerLimitModel]:
    """A model per Zeus GPU (with its leave-one-limit-out errors and interval) and the
    pooled model (interval from leave-one-GPU-out), keyed by :func:`gpu_key` and
    :data:`POOLED`."""
    d = Path(zeus_dir)
    if not d.is_dir():
        raise ValueError(f"{d} is not a folder; pass the Zeus folder (profiles/zeus)")
    frames = {}
    for g in gpus:
        path = d / f"summary_power_{g}.csv"
        if not path.is_file():
            raise ValueError(f"{path} not found; pass the folder with summary_power_<gpu>.csv")
        frames[g] = read_zeus_limits(path)
    out: dict[str, PowerLimitModel] = {}
    for g, rows in frames.items():
        cv = leave_one_limit_out(rows)
        if cv.empty:
            raise ValueError(f"{d / f'summary_power_{g}.csv'}: no workload was measured at "
                             "two or more power limits; a fit needs each workload at several "
                             "limits (Zeus's summary_power files have them)")
        rt = np.concatenate([np.asarray(v) for v in cv["time_ratio"]])
        rp = np.concatenate([np.asarray(v) for v in cv["power_ratio"]])
        out[gpu_key(g)] = PowerLimitModel(
            gpu=g, params=fit_params(rows), source=f"fit to Zeus {path_name(g)}",
            time_interval=_interval(rt), power_interval=_interval(rp),
            lolo_time_error=float(np.median(np.abs(rt - 1))),
            lolo_power_error=float(np.median(np.abs(rp - 1))), rows=len(rows))
    held_t, held_p = [], []
    for g in frames:
        rest = pd.concat([f for h, f in frames.items() if h != g])
        test = frames[g][frames[g]["limit_w"] < frames[g]["top_limit_w"]]
        rt, rp = _errors(test, fit_params(rest))
        held_t.append(rt)
        held_p.append(rp)
    everything = pd.concat(list(frames.values()))
    t_all, p_all = np.concatenate(held_t), np.concatenate(held_p)
    out[POOLED] = PowerLimitModel(
        gpu=POOLED, params=fit_params(everything),
        source=f"fit pooled over Zeus {', '.join(frames)}; interval leave-one-GPU-out",
        time_interval=_interval(t_all), power_interval=_interval(p_all),
        lolo_time_error=float(np.median(np.abs(t_all - 1))),
        lolo_power_error=float(np.median(np.abs(p_all - 1))), rows=len(everything))
    return out


def path_name(gpu: str) -> str:
    return f"summary_power_{gpu}.csv"


def _interval(ratio: NDArray[np.float64]) -> tuple[float, float]:
    lo, hi = np.percentile(ratio, [5, 95])
    return float(lo), float(hi)


# -- shipped fits -----------------------------------------------------------------------------
def models_to_json(models: Mapping[str, PowerLimitModel]) -> dict[str, Any]:
    return {k: {**asdict(m), "params": asdict(m.params)} for k, m in models.items()}


def models_from_json(doc: Mapping[str, Any]) -> dict[str, PowerLimitModel]:
    out = {}
    for k, m in doc.items():
        out[k] = PowerLimitModel(
            gpu=str(m["gpu"]), params=PowerLimitParams(**m["params"]), source=str(m["source"]),
            time_interval=tuple(m["time_interval"]),  # type: ignore[arg-type]
            power_interval=tuple(m["power_interval"]),  # type: ignore[arg-type]
            lolo_time_error=float(m["lolo_time_error"]),
            lolo_power_error=float(m["lolo_power_error"]), rows=int(m["rows"]))
    return out


def write_power_limits(zeus_dir: str | Path, path: str | Path | None = None) -> Path:
    """Refit on the Zeus folder and write the shipped JSON (default: the package's)."""
    target = Path(path) if path is not None else Path(str(
        resources.files("workbench") / "data" / "compute" / "power_limits.json"))
    models = fit_zeus(zeus_dir)
    target.write_text(json.dumps(models_to_json(models), indent=1, sort_keys=True) + "\n")
    shipped_models.cache_clear()
    log.info("wrote power-limit fits of %s to %s", ", ".join(models), target)
    return target


@lru_cache(maxsize=1)
def shipped_models() -> dict[str, PowerLimitModel]:
    """The shipped fits (read once per process: a package file that does not change)."""
    text = (resources.files("workbench") / "data" / "compute" / "power_limits.json").read_text()
    return models_from_json(json.loads(text))


def model_for(gpu_type: str) -> PowerLimitModel:
    """The fit of ``gpu_type`` if Zeus measured it, else the pooled model."""
    models = shipped_models()
    return models.get(gpu_key(gpu_type), models[POOLED])


def limit_factors(gpu_type: str, fraction: float, gpu_power_w: float, max_power_w: float
                  ) -> tuple[float, float]:
    """``(r_t, r_P)`` of a limit at ``fraction`` of ``max_power_w`` for a job drawing
    ``gpu_power_w`` per GPU unlimited (:meth:`PowerLimitModel.factors`); ``(1, 1)`` at
    full power."""
    if fraction >= 1.0:
        return 1.0, 1.0
    return model_for(gpu_type).factors(fraction * max_power_w, gpu_power_w, max_power_w)


__all__ = ["DEFAULT_MENU", "MIN_FRACTION", "POOLED", "ZEUS_GPUS", "PowerLimitModel",
           "PowerLimitParams", "check_menu", "fit_params", "fit_zeus", "gpu_key",
           "leave_one_limit_out", "limit_factors", "model_for", "predict_rows",
           "read_zeus_limits", "shipped_models", "write_power_limits"]
