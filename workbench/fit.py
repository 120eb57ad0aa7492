"""Fit the job models of :mod:`workbench.perf` to measured profiles.

Two public measurement sets are understood:

* **Pollux** (petuum/adaptdl, OSDI'21 artifact), one folder per application with
  ``placements.csv`` (``placement,local_bsz,step_time,sync_time``; a placement such as
  ``1444`` lists GPUs per node), ``scalability.csv``
  (``num_nodes,num_replicas,local_bsz,step_time,sync_time``) and ``validation-<batch>.csv``
  (per checkpoint of statistical progress: ``progress,iteration,metric,grad_sqr,grad_var``).
  The testbed had 4 GPUs per node (``g4dn.12xlarge``, NVIDIA T4).
* **Zeus** (ml-energy/zeus, NSDI'23) ``summary_power_<gpu>.csv``: time per epoch and mean
  board power per (dataset, network, batch size, optimizer, power limit) on one GPU.

Throughput is fitted as Pollux itself does (``adaptdl/goodput.py: fit_perf_params``): least
squares on the log errors of the compute time ``step_time - sync_time`` against
``alpha_c + beta_c * b`` and of the step time against the ``gamma`` overlap formula, with
a small pull of ``gamma`` towards 1 and of the retrogression terms towards 0.

The gradient noise scale is Pollux's pre-conditioned noise scale
``phi = m0 * grad_var / grad_sqr``: AdaptDL normalises ``grad_var`` to the variance of a
gradient of the initial batch ``m0`` (the smallest validated batch, as in Pollux's
simulator), so that ``E(m) = (phi + m0) / (phi + m)``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeAlias

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from workbench.io import bounds
from workbench.perf import (
    EfficiencyParams,
    EnergyParams,
    FloatArray,
    ThroughputParams,
    overlap_time,
    sync_time,
)

log = logging.getLogger(__name__)

POLLUX_APPS: tuple[str, ...] = ("cifar10", "imagenet", "bert", "deepspeech2", "yolov3", "ncf")
"""The six applications of the Pollux artifact."""

POLLUX_GPUS_PER_NODE = 4
"""GPUs per node in the Pollux testbed (placements list at most 4 GPUs per node)."""

POLLUX_MAX_LOCAL_BATCH: Mapping[str, int] = {"yolov3": 8}
"""Per-GPU batch caps that Pollux's simulator sets by hand (``applications.py``)."""

ZEUS_SAMPLES_PER_EPOCH: Mapping[str, int] = {
    # Training-set sizes (samples per epoch) of the Zeus datasets. The fitted power
    # predictions do not depend on them (a2 absorbs the constant); only a2's unit does.
    "cifar100": 50_000,  # CIFAR-100 training split
    "imagenet": 1_281_167,  # ILSVRC-2012 training split
    "librispeech": 281_241,  # LibriSpeech 960 h, all training utterances
    "movielens-1m": 4_970_845,  # 994,169 training ratings x (1 positive + 4 negatives), NCF
    "squad": 88_641,  # SQuAD v1.1 training features at max_seq_length 384 (BERT)
    "sentiment140": 1_600_000,  # Sentiment140 training tweets
}

ZEUS_NETWORK_FOR_APP: Mapping[str, tuple[str, str]] = {
    # Pollux application -> closest Zeus (dataset, network) for the power shape.
    "cifar10": ("cifar100", "shufflenetv2"),  # small-image CNN
    "imagenet": ("imagenet", "resnet50"),  # the same network and data
    "bert": ("squad", "bert_base_uncased"),  # Pollux's BERT fine-tunes on SQuAD too
    "deepspeech2": ("librispeech", "deepspeech2"),  # same network, other speech corpus
    "yolov3": ("imagenet", "resnet50"),  # no detector in Zeus: a large-image CNN
    "ncf": ("movielens-1m", "ncf"),  # same network and data
}


ArrayLikeF: TypeAlias = FloatArray | Sequence[float] | pd.Series


class ProfileDataError(ValueError):
    """A profile folder or file is missing or does not have the expected columns."""


def mape(pred: ArrayLikeF, true: ArrayLikeF) -> float:
    """Median absolute percentage error ``median(|pred - true| / |true|)`` (a fraction)."""
    p = np.asarray(pred, dtype=float)
    t = np.asarray(true, dtype=float)
    return float(np.median(np.abs(p - t) / np.abs(t)))


# --------------------------------------------------------------------------- throughput


def _read_csv(path: Path, columns: Sequence[str]) -> pd.DataFrame:
    if not path.is_file():
        raise ProfileDataError(f"{path} not found; check the profiles folder you passed")
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ProfileDataError(
            f"{path} is not a readable CSV ({exc}); restore the file from its source"
        ) from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ProfileDataError(f"{path} lacks columns {missing}; found {list(df.columns)}")
    if df.empty:
        raise ProfileDataError(f"{path} has a header but no rows; restore the file from its "
                               "source")
    return df


def _bounded(df: pd.DataFrame, path: Path, column: str, bound: bounds.Bound) -> None:
    """Raise :class:`ProfileDataError` at the first row of ``column`` outside ``bound``
    (numbers only: text, NaN and infinities are outside)."""
    values = pd.to_numeric(df[column], errors="coerce").to_numpy(float)
    bad = bound.outside(values)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ProfileDataError(
            f"{path}, line {i + 2}, column {column!r}: '{df[column].iloc[i]}' is outside the "
            f"plausible {bound.quantity} range {bound.describe()} ({bound.why}); correct the "
            "row or restore the file from its source")


def read_pollux_timings(app_dir: Path | str) -> pd.DataFrame:
    """Step-time rows of one Pollux application from placements and scalability files.

    Returns
    -------
    pandas.DataFrame
        Columns ``source`` (``placements``/``scalability``), ``num_nodes``,
        ``num_replicas``, ``local_bsz``, ``step_time`` and ``sync_time`` (s).
    """
    d = Path(app_dir)
    pl = _read_csv(d / "placements.csv", ["placement", "local_bsz", "step_time", "sync_time"])
    _timings_bounded(pl, d / "placements.csv")
    digits = pl["placement"].astype(str)
    if not digits.str.fullmatch(r"[1-9]+").all():
        i = int(np.flatnonzero(~digits.str.fullmatch(r"[1-9]+").to_numpy())[0])
        raise ProfileDataError(
            f"{d / 'placements.csv'}, line {i + 2}, column 'placement': {digits.iloc[i]!r} is "
            "not a placement (one digit 1-9 per node: GPUs on that node); correct the row")
    pl = pl.assign(
        num_nodes=digits.str.len(),
        num_replicas=digits.map(lambda s: sum(int(c) for c in s)),
        source="placements",
    )
    sc = _read_csv(
        d / "scalability.csv",
        ["num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"],
    ).assign(source="scalability")
    _timings_bounded(sc, d / "scalability.csv")
    cols = ["source", "num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"]
    return pd.concat([pl[cols], sc[cols]], ignore_index=True)


def _timings_bounded(df: pd.DataFrame, path: Path) -> None:
    """Step times in (0 s, 1 day), sync times in [0 s, 1 day], local batches >= 1."""
    _bounded(df, path, "step_time", bounds.STEP_TIME)
    _bounded(df, path, "sync_time", bounds.SYNC_TIME)
    _bounded(df, path, "local_bsz", bounds.Bound("local batch size", "samples", 1.0, 1e7,
                                                 "at least one sample per GPU"))


def placement_iteration_time(
    p: ThroughputParams, num_nodes: ArrayLikeF, num_replicas: ArrayLikeF, local_bsz: ArrayLikeF
) -> FloatArray:
    """Seconds per iteration for an explicit placement.

    ``T_comp = alpha_c + beta_c * b`` with local batch ``b``; ``T_sync`` is 0 on one GPU,
    ``alpha_r + beta_r * (n - 2)`` on one node and ``alpha_n + beta_n * (n - 2)`` across
    nodes (``n`` replicas, :func:`workbench.perf.sync_time`); ``T_iter =
    (T_comp^g + T_sync^g)^(1/g)`` (:func:`workbench.perf.overlap_time`). Unlike
    :func:`workbench.perf.iteration_time`, the node count is given, not implied by packing.
    """
    nn = np.asarray(num_nodes, dtype=float)
    nr = np.asarray(num_replicas, dtype=float)
    b = np.asarray(local_bsz, dtype=float)
    t_comp = p.alpha_c + p.beta_c * b
    t_sync = sync_time(p, nr, nn > 1)
    return np.asarray(overlap_time(t_comp, t_sync, p.gamma), dtype=float)


_LOG_FLOOR = -25.0  # exp(-25) ~ 1e-11 s: "absent" in practice

INTER_NODE_PRIOR = 1.1
"""Pollux's prior for a profile without multi-node rows: crossing nodes syncs at least this
many times slower than staying in one (``alpha_n >= 1.1 alpha_r``, ``beta_n >= 1.1
beta_r``), never for free."""


def _unpack(x: FloatArray) -> ThroughputParams:
    a = np.exp(x[:6])
    return ThroughputParams(
        alpha_c=float(a[0]),
        beta_c=float(a[1]),
        alpha_r=float(a[2]),
        beta_r=float(a[3]),
        alpha_n=float(a[4]),
        beta_n=float(a[5]),
        gamma=float(x[6]),
    )


def fit_throughput_params(timings: pd.DataFrame) -> ThroughputParams:
    """Fit :class:`~workbench.perf.ThroughputParams` to step-time rows, Pollux-style.

    Minimises, over ``log`` of the six time coefficients and ``gamma`` in ``[1, 10]``::

        sum_rows (log T_comp_pred - log(step_time - sync_time))^2
      + sum_rows (log T_iter_pred - log step_time)^2
      + 1e-3 * (gamma - 1)^2 + 1e-2 * ((beta_r/alpha_r)^2 + (beta_n/alpha_n)^2)

    (the regularisers are Pollux's: prefer little overlap and optimistic scaling). Terms
    with no supporting rows (no multi-node rows, no more than two replicas) stay at ~0,
    except that without multi-node rows the inter-node terms take Pollux's prior
    (:data:`INTER_NODE_PRIOR`): ``alpha_n = max(alpha_n, 1.1 alpha_r)``, ``beta_n``
    likewise.

    Parameters
    ----------
    timings : pandas.DataFrame
        Columns ``num_nodes``, ``num_replicas``, ``local_bsz``, ``step_time``,
        ``sync_time`` (see :func:`read_pollux_timings`).
    """
    nn = timings["num_nodes"].to_numpy(float)
    nr = timings["num_replicas"].to_numpy(float)
    b = timings["local_bsz"].to_numpy(float)
    step = timings["step_time"].to_numpy(float)
    comp = step - timings["sync_time"].to_numpy(float)
    comp_ok = comp > 0
    if not comp_ok.all():
        log.warning("%d rows have sync_time >= step_time; their compute term is ignored",
                    int((~comp_ok).sum()))
    log_step = np.log(step)
    log_comp = np.log(np.where(comp_ok, comp, 1.0))
    n_rows = len(step)
    if n_rows < 3:
        raise ProfileDataError(f"need at least 3 timing rows to fit throughput, got {n_rows}")
    if not comp_ok.any():
        raise ProfileDataError(
            f"every one of the {n_rows} timing rows has sync_time >= step_time, so no row "
            "measures compute time; check that the two columns are not swapped")

    lower = np.full(7, _LOG_FLOOR)
    upper = np.full(7, 5.0)
    lower[6], upper[6] = 1.0, 10.0
    x0 = np.array([np.log(np.median(comp[comp_ok]) / 2), np.log(1e-3),
                   np.log(1e-2), np.log(1e-4), np.log(1e-2), np.log(1e-4), 1.5])
    has_inter = bool(np.any(nn > 1))
    has_intra = bool(np.any((nn == 1) & (nr > 1)))
    fixed: dict[int, float] = {}
    if not has_inter:
        fixed |= {4: _LOG_FLOOR, 5: _LOG_FLOOR}
    if not has_intra:
        fixed |= {2: _LOG_FLOOR, 3: _LOG_FLOOR}
    if not np.any(nr > 2):
        fixed |= {3: _LOG_FLOOR, 5: _LOG_FLOOR}
    free = [i for i in range(7) if i not in fixed]
    w = 1.0 / np.sqrt(n_rows)  # residuals are RMS-normalised like Pollux's objective

    def full(xf: FloatArray) -> FloatArray:
        x = x0.copy()
        x[free] = xf
        for i, v in fixed.items():
            x[i] = v
        return x

    def residuals(xf: FloatArray) -> FloatArray:
        p = _unpack(full(xf))
        t_comp = p.alpha_c + p.beta_c * b
        r1 = np.where(comp_ok, np.log(t_comp) - log_comp, 0.0)
        r2 = np.log(placement_iteration_time(p, nn, nr, b)) - log_step
        reg = [
            np.sqrt(1e-3) * (p.gamma - 1.0),
            np.sqrt(1e-2) * p.beta_r / max(p.alpha_r, 1e-12),
            np.sqrt(1e-2) * p.beta_n / max(p.alpha_n, 1e-12),
        ]
        return np.concatenate([w * r1, w * r2, reg])

    x_init = np.clip(x0[free], lower[free] + 1e-9, upper[free] - 1e-9)
    best = None
    # gamma makes the surface non-convex: start from a few overlap levels, keep the best.
    for g0 in (1.2, 2.5, 6.0):
        xi = x_init.copy()
        if 6 in free:
            xi[free.index(6)] = g0
        res = least_squares(residuals, xi, bounds=(lower[free], upper[free]), method="trf")
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None
    params = _unpack(full(best.x))
    if not has_inter:  # no row says what crossing nodes costs: never less than one node
        params = replace(params, alpha_n=max(params.alpha_n, INTER_NODE_PRIOR * params.alpha_r),
                         beta_n=max(params.beta_n, INTER_NODE_PRIOR * params.beta_r))
    log.debug("fitted %s (cost %.4g)", params, best.cost)
    return params


@dataclass(frozen=True)
class ThroughputFit:
    """Result of fitting one Pollux application's throughput.

    Attributes
    ----------
    app : str
        Application name (the folder name).
    params : ThroughputParams
        Fitted parameters (``alpha_r, beta_r`` intra-node, ``alpha_n, beta_n`` inter-node).
    efficiency : EfficiencyParams
        Batch bounds and the ``phi`` trajectory from the validation files.
    mape : float
        Median absolute percentage error of the predicted step time over ``rows``.
    rows : pandas.DataFrame
        The timing rows with the prediction ``pred_step_time`` and ``ape``.
    """

    app: str
    params: ThroughputParams
    efficiency: EfficiencyParams
    mape: float
    rows: pd.DataFrame = field(repr=False)


def fit_pollux_app(app_dir: Path | str) -> ThroughputFit:
    """Fit throughput and efficiency parameters of one Pollux application folder."""
    d = Path(app_dir)
    rows = read_pollux_timings(d)
    params = fit_throughput_params(rows)
    pred = placement_iteration_time(params, rows["num_nodes"], rows["num_replicas"],
                                    rows["local_bsz"])
    rows = rows.assign(pred_step_time=pred,
                       ape=np.abs(pred - rows["step_time"]) / rows["step_time"])
    eff = fit_efficiency_params(d, max_local_batch=_max_local_batch(d.name, rows))
    err = mape(pred, rows["step_time"])
    log.info("%s: step-time median APE %.1f%% over %d rows", d.name, 100 * err, len(rows))
    return ThroughputFit(app=d.name, params=params, efficiency=eff, mape=err, rows=rows)


def _max_local_batch(app: str, rows: pd.DataFrame) -> int:
    return int(POLLUX_MAX_LOCAL_BATCH.get(app, rows["local_bsz"].max()))


# --------------------------------------------------------------------------- efficiency

_VALIDATION_RE = re.compile(r"validation-(\d+)\.csv$")


def read_pollux_validation(app_dir: Path | str) -> dict[int, pd.DataFrame]:
    """Validation files of one Pollux application, keyed by global batch size (sorted)."""
    d = Path(app_dir)
    out: dict[int, pd.DataFrame] = {}
    for path in d.glob("validation-*.csv"):
        m = _VALIDATION_RE.search(path.name)
        if m:
            out[int(m.group(1))] = _read_csv(path, ["progress", "grad_sqr", "grad_var"])
    if not out:
        raise ProfileDataError(f"no validation-<batch>.csv files in {d}")
    return dict(sorted(out.items()))


def noise_scale(grad_sqr: ArrayLikeF, grad_var: ArrayLikeF, m0: float) -> FloatArray:
    """Pollux's pre-conditioned gradient noise scale ``phi = m0 * grad_var / grad_sqr``.

    ``grad_var`` is the gradient variance at the initial batch ``m0`` (AdaptDL's
    normalisation), ``grad_sqr`` the squared norm of the true gradient. Entries with a
    non-positive or non-finite ratio come back as NaN.
    """
    sqr = np.asarray(grad_sqr, dtype=float)
    var = np.asarray(grad_var, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        phi = m0 * var / sqr
    return np.where(np.isfinite(phi) & (phi > 0), phi, np.nan)


def phi_trajectory(
    validation: Mapping[int, pd.DataFrame], m0: int, n_knots: int = 16
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Gradient-noise-scale trajectory over training progress in [0, 1].

    Row ``i`` of an ``N``-row validation file holds the statistics of the ``i``-th equal
    slice of statistical progress, so it sits at progress ``(i + 0.5) / N``. At each row the
    geometric median over the batch-size runs is taken (runs at larger batches see a larger
    ``phi`` late in training; Pollux interpolates between them, we keep one central
    trajectory). The first row is kept as a knot of its own; the others are pooled into
    at most ``n_knots - 1`` equal progress bins by the median of ``log phi``.
    """
    n_rows = min(len(df) for df in validation.values())
    logs = np.vstack([
        np.log(noise_scale(df["grad_sqr"].to_numpy()[:n_rows],
                           df["grad_var"].to_numpy()[:n_rows], m0))
        for df in validation.values()
    ])
    with np.errstate(all="ignore"):
        per_row = np.nanmedian(np.where(np.isfinite(logs), logs, np.nan), axis=0)
    prog = (np.arange(n_rows) + 0.5) / n_rows
    ok = np.isfinite(per_row)
    if not ok.any():
        raise ProfileDataError("no finite positive gradient noise scale in the validation files")
    prog, per_row = prog[ok], per_row[ok]
    # The first checkpoint is its own knot: phi is smallest and changes fastest there.
    knots_p, knots_v = [float(prog[0])], [float(np.exp(per_row[0]))]
    rest_p, rest_v = prog[1:], per_row[1:]
    n_bins = min(n_knots - 1, len(rest_p))
    if n_bins > 0:
        edges = np.linspace(rest_p[0], rest_p[-1] + 1e-12, n_bins + 1)
        idx = np.clip(np.digitize(rest_p, edges) - 1, 0, n_bins - 1)
        for k in range(n_bins):
            sel = idx == k
            if sel.any():
                knots_p.append(float(np.median(rest_p[sel])))
                knots_v.append(float(np.exp(np.median(rest_v[sel]))))
    return tuple(knots_p), tuple(knots_v)


def fit_efficiency_params(app_dir: Path | str, max_local_batch: int) -> EfficiencyParams:
    """Efficiency parameters of one Pollux application from its validation files.

    ``m0`` and ``min_batch`` are the smallest validated batch (Pollux's initial batch),
    ``max_batch`` the largest; ``phi`` follows :func:`phi_trajectory`.
    """
    validation = read_pollux_validation(app_dir)
    m0 = min(validation)
    p, v = phi_trajectory(validation, m0)
    return EfficiencyParams(
        m0=m0,
        min_batch=m0,
        max_batch=max(validation),
        max_local_batch=int(max_local_batch),
        phi_progress=p,
        phi_values=v,
    )


# --------------------------------------------------------------------------- energy


@dataclass(frozen=True)
class EnergyFit:
    """Power model fitted to one (dataset, network) on one GPU from a Zeus power trace.

    ``P = a1_w + a2_w_per_sps * X`` per GPU at the largest power limit, with ``X`` in
    samples/s (``samples_per_epoch / time_per_epoch``).
    """

    gpu: str
    dataset: str
    network: str
    params: EnergyParams
    mape: float
    rows: pd.DataFrame = field(repr=False)

    @property
    def full_load_power_w(self) -> float:
        """Predicted power at the fastest measured configuration, W."""
        x_max = float(self.rows["throughput_sps"].max())
        return float(self.params.a1_w + self.params.a2_w_per_sps * x_max)


def read_zeus_power(path: Path | str) -> pd.DataFrame:
    """Rows of a Zeus ``summary_power_<gpu>.csv`` at the GPU's largest power limit.

    Adds ``throughput_sps = samples_per_epoch / time_per_epoch`` (see
    :data:`ZEUS_SAMPLES_PER_EPOCH`).
    """
    p = Path(path)
    df = _read_csv(p, ["dataset", "network", "batch_size", "power_limit", "time_per_epoch",
                       "average_power"])
    _bounded(df, p, "power_limit", bounds.POWER_LIMIT)
    _bounded(df, p, "time_per_epoch", bounds.EPOCH_TIME)
    limit_w = pd.to_numeric(df["power_limit"]).to_numpy(float)
    power = pd.to_numeric(df["average_power"], errors="coerce").to_numpy(float)
    for i in np.flatnonzero(bounds.power_bound(1.0).outside(power / limit_w))[:1]:
        raise ProfileDataError(
            f"{p}, line {int(i) + 2}, column 'average_power': '{df['average_power'].iloc[i]}' "
            f"W is outside the plausible average power range (0, {2 * limit_w[i]:g}] W (more "
            f"than 0 W and at most twice the row's {limit_w[i]:g} W power limit); correct the "
            "row or restore the file from its source")
    df = df[df["power_limit"] == df["power_limit"].max()].copy()
    unknown = sorted(set(df["dataset"]) - set(ZEUS_SAMPLES_PER_EPOCH))
    if unknown:
        raise ProfileDataError(f"{p}: unknown dataset size for {unknown}; add them to "
                               "ZEUS_SAMPLES_PER_EPOCH")
    df["throughput_sps"] = df["dataset"].map(ZEUS_SAMPLES_PER_EPOCH) / df["time_per_epoch"]
    return df.reset_index(drop=True)


def fit_energy_params(rows: pd.DataFrame, max_power_w: float) -> EnergyParams:
    """Fit ``average_power = a1_w + a2_w_per_sps * throughput_sps`` on relative errors.

    Non-negative least squares of ``(a1 + a2 X_i) / P_i - 1`` (the relative error, the
    quantity the median APE reports), so low-power rows weigh as much as high-power ones.
    """
    from scipy.optimize import nnls

    x = rows["throughput_sps"].to_numpy(float)
    y = rows["average_power"].to_numpy(float)
    scale = float(x.max()) or 1.0  # condition the design matrix
    design = np.column_stack([np.ones_like(x), x / scale]) / y[:, None]
    coef, _ = nnls(design, np.ones_like(y))
    return EnergyParams(a1_w=float(coef[0]), a2_w_per_sps=float(coef[1] / scale),
                        max_power_w=float(max_power_w))


def fit_zeus_gpu(profiles_dir: Path | str, gpu: str) -> list[EnergyFit]:
    """Fit one :class:`EnergyFit` per (dataset, network) of ``summary_power_<gpu>.csv``.

    ``profiles_dir`` is either the Zeus folder or the parent ``profiles`` folder.
    """
    d = Path(profiles_dir)
    path = d / f"summary_power_{gpu.lower()}.csv"
    if not path.is_file() and (d / "zeus").is_dir():
        path = d / "zeus" / f"summary_power_{gpu.lower()}.csv"
    rows = read_zeus_power(path)
    limit = float(rows["power_limit"].max())
    fits = []
    for (ds, net), g in rows.groupby(["dataset", "network"], sort=True):
        params = fit_energy_params(g, max_power_w=limit)
        pred = params.a1_w + params.a2_w_per_sps * g["throughput_sps"].to_numpy()
        g = g.assign(pred_power=pred, ape=np.abs(pred - g["average_power"]) / g["average_power"])
        err = mape(pred, g["average_power"])
        log.info("%s %s/%s: power median APE %.1f%% over %d rows", gpu, ds, net, 100 * err,
                 len(g))
        fits.append(EnergyFit(gpu=gpu.lower(), dataset=str(ds), network=str(net),
                              params=params, mape=err, rows=g.reset_index(drop=True)))
    return fits
