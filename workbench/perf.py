"""Job performance model: throughput, statistical efficiency, ECU and power (Pollux-style).

The model is a parameter record per (application, GPU type) plus vectorised numpy functions.
Every function broadcasts over its array arguments (GPU count ``n``, global batch ``m``,
gradient noise scale ``phi``), so one call evaluates a whole configuration menu.

Throughput (Pollux, OSDI'21), for ``n`` GPUs and global batch ``m``::

    T_comp = alpha_c + beta_c * m / n
    T_sync = 0                                 if n == 1
             alpha_r + beta_r * (n - 2)        if n <= gpus_per_node  (one node)
             alpha_n + beta_n * (n - 2)        otherwise              (across nodes)
    T_iter = (T_comp**gamma + T_sync**gamma) ** (1 / gamma)
    X      = m / T_iter                                                 samples/s

Statistical efficiency with gradient noise scale ``phi``: ``E(m) = (phi + m0) / (phi + m)``.
Effective compute utility: ``ECU = phase * X * E`` (effective samples per second).
Power of a running job (W, IT side): ``P = n * a1_w + a2_w_per_sps * X``, capped at
``n * max_power_w``; energy per slot = P x slot seconds x PUE. The DESIGN writes
``a2 * ECU``; we charge hardware throughput ``X`` because statistical efficiency changes
how useful a sample is, not how much power the GPUs draw.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from workbench.units import J_PER_KWH

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class ThroughputParams:
    """Pollux throughput parameters of one application on one GPU type.

    Attributes
    ----------
    alpha_c : float
        Fixed compute time per iteration, s (``T_comp = alpha_c + beta_c * m / n``).
    beta_c : float
        Compute time per sample of local batch, s/sample.
    alpha_n, beta_n : float
        Inter-node all-reduce time, s: ``T_sync = alpha_n + beta_n * (n - 2)`` (Pollux's
        names: ``n`` across nodes, ``r`` among the replicas of one node).
    alpha_r, beta_r : float
        Intra-node all-reduce time, s: ``T_sync = alpha_r + beta_r * (n - 2)``.
    gamma : float
        Overlap of compute and sync (>= 1): ``T_iter = (T_comp^g + T_sync^g)^(1/g)``;
        1 means no overlap, large values mean full overlap.
    """

    alpha_c: float
    beta_c: float
    alpha_n: float
    beta_n: float
    alpha_r: float
    beta_r: float
    gamma: float

    def __post_init__(self) -> None:
        for name in ("alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r"):
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"ThroughputParams.{name} must be >= 0, got {value!r}")
        if not np.isfinite(self.gamma) or self.gamma < 1.0:
            raise ValueError(f"ThroughputParams.gamma must be >= 1, got {self.gamma!r}")

    def scaled(
        self, speed: float, intra_sync_speed: float = 1.0, inter_sync_speed: float = 1.0
    ) -> ThroughputParams:
        """Parameters of a GPU ``speed`` times faster at compute.

        ``alpha_c, beta_c`` are divided by ``speed``; the intra-node (``alpha_r, beta_r``)
        and inter-node (``alpha_n, beta_n``) sync terms by ``intra_sync_speed`` and
        ``inter_sync_speed`` (1 by default: sync unchanged).
        """
        for name, v in (("speed", speed), ("intra_sync_speed", intra_sync_speed),
                        ("inter_sync_speed", inter_sync_speed)):
            if not v > 0:
                raise ValueError(f"ThroughputParams.scaled: {name} must be > 0, got {v!r}")
        return ThroughputParams(
            alpha_c=self.alpha_c / speed,
            beta_c=self.beta_c / speed,
            alpha_n=self.alpha_n / inter_sync_speed,
            beta_n=self.beta_n / inter_sync_speed,
            alpha_r=self.alpha_r / intra_sync_speed,
            beta_r=self.beta_r / intra_sync_speed,
            gamma=self.gamma,
        )


@dataclass(frozen=True)
class EfficiencyParams:
    """Statistical efficiency parameters of one application.

    Attributes
    ----------
    m0 : int
        Reference (initial) global batch size: ``E(m0) = 1``.
    min_batch, max_batch : int
        Global batch range the application trains well with.
    max_local_batch : int
        Largest per-GPU batch that fits in memory.
    phi_progress, phi_values : tuple of float
        Gradient noise scale ``phi`` at points of training progress in [0, 1]; ``phi`` is
        interpolated log-linearly between them (it grows as training proceeds).
    """

    m0: int
    min_batch: int
    max_batch: int
    max_local_batch: int
    phi_progress: tuple[float, ...]
    phi_values: tuple[float, ...]

    def __post_init__(self) -> None:
        if not 0 < self.min_batch <= self.m0 <= self.max_batch:
            raise ValueError(
                f"EfficiencyParams needs 0 < min_batch <= m0 <= max_batch, got "
                f"{self.min_batch}, {self.m0}, {self.max_batch}"
            )
        if self.max_local_batch <= 0:
            raise ValueError("EfficiencyParams.max_local_batch must be positive")
        if len(self.phi_progress) != len(self.phi_values) or not self.phi_progress:
            raise ValueError("phi_progress and phi_values must be non-empty and equally long")
        if any(np.diff(self.phi_progress) <= 0):
            raise ValueError("phi_progress must be strictly increasing")
        if any(v <= 0 or not np.isfinite(v) for v in self.phi_values):
            raise ValueError("phi_values must be positive and finite")

    def phi(self, progress: ArrayLike) -> FloatArray:
        """Gradient noise scale at training ``progress`` in [0, 1] (log-linear interpolation)."""
        p = np.clip(np.asarray(progress, dtype=float), 0.0, 1.0)
        return np.exp(np.interp(p, self.phi_progress, np.log(self.phi_values)))


@dataclass(frozen=True)
class EnergyParams:
    """Power model of one application on one GPU type: ``P = n * a1_w + a2_w_per_sps * X``.

    Attributes
    ----------
    a1_w : float
        Power per allocated GPU independent of throughput, W.
    a2_w_per_sps : float
        Extra power per sample/s of hardware throughput, W/(sample/s).
    max_power_w : float
        Per-GPU power ceiling (board limit), W.
    """

    a1_w: float
    a2_w_per_sps: float
    max_power_w: float

    def __post_init__(self) -> None:
        if self.a1_w < 0 or self.a2_w_per_sps < 0 or self.max_power_w <= 0:
            raise ValueError(
                "EnergyParams needs a1_w >= 0, a2_w_per_sps >= 0 and max_power_w > 0"
            )


@dataclass(frozen=True)
class JobProfile:
    """Throughput, efficiency and power parameters of ``app`` on ``gpu_type``.

    ``derived`` is True when the parameters were not fitted to measurements on this GPU
    type (``source`` says how they were obtained). ``step_time_interval`` is set on
    *predicted* profiles (:mod:`workbench.compute`): factors ``(lo, hi)`` such that the true
    step time lies in ``[lo * T_iter, hi * T_iter]`` with about 90 % probability (the 5-95 %
    range of the predictor's error on devices held out of its training).
    """

    app: str
    gpu_type: str
    throughput: ThroughputParams
    efficiency: EfficiencyParams
    energy: EnergyParams
    derived: bool = False
    source: str = ""
    step_time_interval: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        iv = self.step_time_interval
        if iv is not None and not (len(iv) == 2 and 0 < iv[0] <= 1.0 <= iv[1] < float("inf")):
            raise ValueError(f"JobProfile {self.app}/{self.gpu_type}: step_time_interval "
                             f"must be (lo, hi) with 0 < lo <= 1 <= hi, got {iv!r}")

    @property
    def predicted(self) -> bool:
        """True for a profile from the step-time predictor (it carries an interval)."""
        return self.step_time_interval is not None


def overlap_time(t_comp: Any, t_sync: Any, gamma: float) -> Any:
    """Pollux's iteration time ``T_iter = (T_comp^g + T_sync^g)^(1/g)``, s.

    The one definition of the overlap of compute and gradient synchronisation: ``g = 1``
    adds them (no overlap), a large ``g`` tends to ``max(T_comp, T_sync)`` (full overlap).
    Broadcasts over numpy arrays; floats in, float out.
    """
    return (t_comp**gamma + t_sync**gamma) ** (1.0 / gamma)


def sync_time(p: ThroughputParams, n: ArrayLike, multi_node: ArrayLike) -> FloatArray:
    """All-reduce time ``T_sync`` of ``n`` replicas, s: 0 for ``n = 1``, else
    ``alpha_r + beta_r (n - 2)`` on one node and ``alpha_n + beta_n (n - 2)`` where
    ``multi_node`` is true."""
    n_arr = np.asarray(n, dtype=float)
    retro = np.maximum(n_arr - 2.0, 0.0)
    intra = p.alpha_r + p.beta_r * retro
    inter = p.alpha_n + p.beta_n * retro
    return np.where(n_arr <= 1, 0.0, np.where(np.asarray(multi_node, dtype=bool), inter, intra))


def iteration_time(
    p: ThroughputParams, n: ArrayLike, m: ArrayLike, gpus_per_node: int = 8
) -> FloatArray:
    """Seconds per iteration ``T_iter = (T_comp^g + T_sync^g)^(1/g)`` (see module docstring):
    ``T_comp = alpha_c + beta_c m / n``, across nodes when ``n > gpus_per_node``."""
    n_arr = np.asarray(n, dtype=float)
    m_arr = np.asarray(m, dtype=float)
    t_comp = p.alpha_c + p.beta_c * m_arr / n_arr
    t_sync = sync_time(p, n_arr, n_arr > gpus_per_node)
    return np.asarray(overlap_time(t_comp, t_sync, p.gamma), dtype=float)


def throughput(
    p: ThroughputParams, n: ArrayLike, m: ArrayLike, gpus_per_node: int = 8
) -> FloatArray:
    """Hardware throughput ``X = m / T_iter`` in samples per second."""
    return np.asarray(m, dtype=float) / iteration_time(p, n, m, gpus_per_node)


def efficiency(phi: ArrayLike, m0: float, m: ArrayLike) -> FloatArray:
    """Statistical efficiency ``E(m) = (phi + m0) / (phi + m)``; 1 at ``m = m0``."""
    phi_arr = np.asarray(phi, dtype=float)
    return (phi_arr + m0) / (phi_arr + np.asarray(m, dtype=float))


def ecu(
    profile: JobProfile,
    n: ArrayLike,
    m: ArrayLike,
    progress: ArrayLike = 0.0,
    phase: float = 1.0,
    gpus_per_node: int = 8,
    phi: ArrayLike | None = None,
) -> FloatArray:
    """Effective compute utility ``ECU = phase * X(n, m) * E(m)`` in effective samples/s.

    ``phi`` defaults to the profile's trajectory at ``progress``; pass an online estimate
    to override it.
    """
    phi_arr = profile.efficiency.phi(progress) if phi is None else np.asarray(phi, dtype=float)
    x = throughput(profile.throughput, n, m, gpus_per_node)
    return phase * x * efficiency(phi_arr, profile.efficiency.m0, m)


def power_w(profile: JobProfile, n: ArrayLike, m: ArrayLike, gpus_per_node: int = 8) -> FloatArray:
    """IT power of a running job, W: ``min(n * a1_w + a2_w_per_sps * X, n * max_power_w)``."""
    n_arr = np.asarray(n, dtype=float)
    e = profile.energy
    x = throughput(profile.throughput, n, m, gpus_per_node)
    return np.minimum(n_arr * e.a1_w + e.a2_w_per_sps * x, n_arr * e.max_power_w)


def energy_kwh(
    profile: JobProfile,
    n: ArrayLike,
    m: ArrayLike,
    duration_s: float,
    pue: float = 1.0,
    gpus_per_node: int = 8,
) -> FloatArray:
    """Facility energy of running ``duration_s`` seconds: ``P * duration_s / 3.6e6 * pue``."""
    return power_w(profile, n, m, gpus_per_node) * duration_s / J_PER_KWH * pue


def batch_bounds(profile: JobProfile, n: int) -> tuple[int, int]:
    """Feasible global batch range on ``n`` GPUs: memory caps the local batch."""
    eff = profile.efficiency
    hi = min(eff.max_batch, n * eff.max_local_batch)
    lo = min(eff.min_batch, hi)
    return lo, hi


def golden_section_max(
    f: Callable[[float], float], lo: float, hi: float, tol: float = 0.5, max_iter: int = 60
) -> float:
    """Argmax of a unimodal ``f`` on ``[lo, hi]`` by golden-section search."""
    if hi <= lo:
        return lo
    inv_phi = (np.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    c = b - inv_phi * (b - a)
    d = a + inv_phi * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(max_iter):
        if b - a <= tol:
            break
        if fc >= fd:
            b, d, fd = d, c, fc
            c = b - inv_phi * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + inv_phi * (b - a)
            fd = f(d)
    candidates = [lo, hi, a, b, c, d]
    return max(candidates, key=f)


def best_batch(
    profile: JobProfile,
    n: int,
    progress: float = 0.0,
    objective: str | Callable[[float], float] = "ecu",
    gpus_per_node: int = 8,
    phi: float | None = None,
) -> int:
    """Best integer global batch on ``n`` GPUs for an objective, by golden-section search.

    ``objective`` is ``"ecu"`` (effective samples/s), ``"ecu_per_kwh"`` (effective samples
    per joule of IT energy, up to a constant) or a callable of the batch size to maximise.
    Both named objectives are unimodal in ``m``.
    """
    lo, hi = batch_bounds(profile, n)
    if callable(objective):
        f = objective
    elif objective == "ecu":

        def f(m: float) -> float:
            return float(ecu(profile, n, m, progress, gpus_per_node=gpus_per_node, phi=phi))

    elif objective == "ecu_per_kwh":

        def f(m: float) -> float:
            u = ecu(profile, n, m, progress, gpus_per_node=gpus_per_node, phi=phi)
            return float(u / power_w(profile, n, m, gpus_per_node))

    else:
        raise ValueError(f"unknown objective {objective!r}; use 'ecu', 'ecu_per_kwh' or a callable")
    m_star = golden_section_max(f, float(lo), float(hi))
    best = max({int(np.floor(m_star)), int(np.ceil(m_star))} & set(range(lo, hi + 1)) or {lo},
               key=f)
    return int(best)


# --------------------------------------------------------------------------- serialisation

PROFILES_SCHEMA_VERSION = 2
"""Version 2 writes the sync terms under Pollux's names (``alpha_n, beta_n`` inter-node);
version 1 had the two pairs the other way round and is still read (:func:`throughput_from_dict`)."""

_OLD_SYNC_NAMES = {"alpha_n": "alpha_r", "beta_n": "beta_r", "alpha_r": "alpha_n",
                   "beta_r": "beta_n"}


def profile_to_dict(profile: JobProfile) -> dict[str, Any]:
    """Plain-JSON form of a :class:`JobProfile` (tuples become lists)."""
    return {
        "app": profile.app,
        "gpu_type": profile.gpu_type,
        "derived": profile.derived,
        "source": profile.source,
        "throughput": asdict(profile.throughput),
        "efficiency": {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in asdict(profile.efficiency).items()
        },
        "energy": asdict(profile.energy),
        **({"step_time_interval": list(profile.step_time_interval)}
           if profile.step_time_interval is not None else {}),
    }


def throughput_from_dict(d: Mapping[str, Any], *, pollux_names: bool = True
                         ) -> ThroughputParams:
    """:class:`ThroughputParams` from its plain-JSON form.

    ``pollux_names`` False reads a record written before the sync terms took Pollux's names
    (``profiles.json`` version 1, a store's profile without ``"sync_names"``): its
    ``alpha_n, beta_n`` were the intra-node pair and ``alpha_r, beta_r`` the inter-node one.
    """
    values = {k: float(v) for k, v in d.items()}
    if not pollux_names:
        values = {_OLD_SYNC_NAMES.get(k, k): v for k, v in values.items()}
    return ThroughputParams(**values)


def profile_from_dict(d: Mapping[str, Any], *, pollux_names: bool = True) -> JobProfile:
    """Inverse of :func:`profile_to_dict`; validation errors name the offending profile.
    ``pollux_names``: see :func:`throughput_from_dict`."""
    try:
        eff = dict(d["efficiency"])
        eff["phi_progress"] = tuple(float(x) for x in eff["phi_progress"])
        eff["phi_values"] = tuple(float(x) for x in eff["phi_values"])
        return JobProfile(
            app=str(d["app"]),
            gpu_type=str(d["gpu_type"]),
            throughput=throughput_from_dict(d["throughput"], pollux_names=pollux_names),
            efficiency=EfficiencyParams(**eff),
            energy=EnergyParams(**{k: float(v) for k, v in d["energy"].items()}),
            derived=bool(d.get("derived", False)),
            source=str(d.get("source", "")),
            step_time_interval=_interval(d.get("step_time_interval")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        name = f"{d.get('app', '?')}/{d.get('gpu_type', '?')}" if isinstance(d, Mapping) else "?"
        raise ValueError(f"invalid job profile {name}: {exc}") from exc


def _interval(v: Any) -> tuple[float, float] | None:
    """``[lo, hi]`` from JSON as a tuple, or None."""
    return None if v is None else (float(v[0]), float(v[1]))


def profiles_to_json(profiles: Iterable[JobProfile]) -> dict[str, Any]:
    """Document ``{"schema_version": 2, "profiles": [...]}`` for ``data/profiles.json``."""
    return {
        "schema_version": PROFILES_SCHEMA_VERSION,
        "profiles": [profile_to_dict(p) for p in profiles],
    }


def profiles_from_json(doc: Mapping[str, Any]) -> list[JobProfile]:
    """Profiles from a document written by :func:`profiles_to_json` (this version or 1)."""
    version = doc.get("schema_version")
    if version not in (1, PROFILES_SCHEMA_VERSION):
        raise ValueError(
            f"profiles document has schema_version {version!r}; this workbench reads 1 and "
            f"{PROFILES_SCHEMA_VERSION} (regenerate it with `workbench fit defaults`)"
        )
    return [profile_from_dict(p, pollux_names=version != 1) for p in doc["profiles"]]


def default_profiles_path() -> Path:
    """Path of the shipped ``profiles.json``.

    Looks in the package (``workbench/data/profiles.json``, present in a wheel) and then in
    the repository's ``data/`` folder next to the package (an editable install).
    """
    here = Path(__file__).resolve().parent
    for candidate in (here / "data" / "profiles.json", here.parent / "data" / "profiles.json"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"profiles.json not found in {here / 'data'} or {here.parent / 'data'}; "
        "regenerate it with `workbench fit defaults --profiles ../shared/data/profiles`"
    )


def with_shipped(stored: Sequence[JobProfile]) -> list[JobProfile]:
    """``stored`` profiles, then the shipped ones (:func:`load_default_profiles`) for every
    (app, GPU type) they lack: a store holding profiles of other apps only still has these."""
    have = {(p.app, p.gpu_type) for p in stored}
    return [*stored, *(p for p in load_default_profiles() if (p.app, p.gpu_type) not in have)]


def load_default_profiles(path: Path | str | None = None) -> list[JobProfile]:
    """The shipped fitted and derived profiles (six Pollux apps x scenario GPU types).

    Parameters
    ----------
    path : path, optional
        Another profiles document; defaults to :func:`default_profiles_path`.
    """
    p = Path(path) if path is not None else default_profiles_path()
    return profiles_from_json(json.loads(p.read_text()))
