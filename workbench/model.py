"""Frozen domain records: datacenters, GPU pools, links, jobs and the scenario that holds them.

Units live in field names (``power_kw``, ``bandwidth_gbps``, ``checkpoint_gb``). Times are
timezone-aware UTC :class:`datetime.datetime` values. Every record validates itself in
``__post_init__`` and its error says which field to fix.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal, Protocol

import pandas as pd

from workbench.clock import SLOT_TOLERANCE, as_utc, slot_index  # noqa: F401  (re-exported)
from workbench.errors import ScenarioError
from workbench.supply import NO_SUPPLY, Supply

if TYPE_CHECKING:
    import xarray as xr

    from workbench.perf import JobProfile

JobKind = Literal["training", "inference"]
JOB_KINDS: tuple[str, ...] = ("training", "inference")


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ScenarioError(message)


def _positive(value: float, what: str) -> None:
    _require(
        isinstance(value, int | float) and math.isfinite(value) and value > 0,
        f"{what} must be a positive number, got {value!r}",
    )


def _non_negative(value: float, what: str) -> None:
    _require(
        isinstance(value, int | float) and math.isfinite(value) and value >= 0,
        f"{what} must be a non-negative number, got {value!r}",
    )


@dataclass(frozen=True)
class Datacenter:
    """A datacenter in one grid region.

    Attributes
    ----------
    name : str
        Unique key, e.g. ``"guangzhou"``.
    region : str
        Grid region whose price and carbon apply: a ``region`` coordinate of the cube.
    grid_zone : str
        Grid zone code (e.g. ``"CN-GD"``), informational.
    timezone : str
        IANA timezone of the site; tariff windows are in local time.
    pue : float
        Power usage effectiveness (>= 1): facility energy = IT energy x PUE.
    idle_power_kw : float
        Facility baseline IT power drawn whatever runs (not attributed to jobs).
    """

    name: str
    region: str
    grid_zone: str
    timezone: str
    pue: float
    idle_power_kw: float = 0.0

    def __post_init__(self) -> None:
        _require(bool(self.name), "datacenter name must not be empty")
        _require(bool(self.region), f"datacenter {self.name!r}: region must not be empty")
        _require(
            isinstance(self.pue, int | float) and 1.0 <= self.pue <= 3.0,
            f"datacenter {self.name!r}: pue must be between 1.0 and 3.0, got {self.pue!r}",
        )
        _non_negative(self.idle_power_kw, f"datacenter {self.name!r}: idle_power_kw")


@dataclass(frozen=True)
class GpuPool:
    """``count`` accelerators of one type in one datacenter.

    Attributes
    ----------
    idle_power_w, max_power_w : float
        Per-accelerator board power when idle and at full load (W).
    gpus_per_node : int
        Accelerators per server; a job larger than this spans nodes (inter-node sync).
    """

    datacenter: str
    gpu_type: str
    count: int
    idle_power_w: float
    max_power_w: float
    gpus_per_node: int = 8

    def __post_init__(self) -> None:
        where = f"GPU pool {self.datacenter}/{self.gpu_type}"
        _require(
            isinstance(self.count, int) and self.count > 0,
            f"{where}: count must be a positive integer, got {self.count!r}",
        )
        _non_negative(self.idle_power_w, f"{where}: idle_power_w")
        _positive(self.max_power_w, f"{where}: max_power_w")
        _require(
            self.max_power_w >= self.idle_power_w,
            f"{where}: max_power_w ({self.max_power_w}) is below idle_power_w "
            f"({self.idle_power_w})",
        )
        _require(
            isinstance(self.gpus_per_node, int) and self.gpus_per_node > 0,
            f"{where}: gpus_per_node must be a positive integer",
        )


@dataclass(frozen=True)
class Link:
    """A network path between two datacenters (used in both directions).

    Attributes
    ----------
    bandwidth_gbps : float
        Usable bandwidth for checkpoint transfer, Gbit/s.
    latency_ms : float
        Round-trip latency, ms (bounds where an inference service may run).
    transfer_energy_kwh_per_gb : float
        Network energy to move one GB across this link, kWh/GB.
    """

    src: str
    dst: str
    bandwidth_gbps: float
    latency_ms: float
    transfer_energy_kwh_per_gb: float = 0.0

    def __post_init__(self) -> None:
        where = f"link {self.src}->{self.dst}"
        _require(self.src != self.dst, f"{where}: a link joins two different datacenters")
        _positive(self.bandwidth_gbps, f"{where}: bandwidth_gbps")
        _non_negative(self.latency_ms, f"{where}: latency_ms")
        _non_negative(self.transfer_energy_kwh_per_gb, f"{where}: transfer_energy_kwh_per_gb")

    def transfer_s(self, size_gb: float) -> float:
        """Seconds to move ``size_gb`` gigabytes: ``8 * size_gb / bandwidth_gbps``."""
        return 8.0 * size_gb / self.bandwidth_gbps


@dataclass(frozen=True)
class Job:
    """A training job or an inference service.

    Attributes
    ----------
    job_id : str
        Unique key.
    kind : {"training", "inference"}
        Training jobs may wait, pause, resize and move; inference services run every slot
        from ``arrival`` to ``end`` in a datacenter within ``max_latency_ms`` of ``home``.
    app : str
        Application whose performance profile applies (e.g. ``"cifar10"``).
    arrival : datetime
        When the job may first run (UTC).
    home : str
        Datacenter where its data lives (and where the ``asap-home`` baseline runs it).
    requested_gpus : int
        GPU count the user asked for.
    gpu_counts : tuple of int
        Allowed GPU-count menu (must contain ``requested_gpus``).
    gpu_types : tuple of str
        Allowed accelerator types; empty means any.
    batch_size : int
        Requested global batch size (the baselines' choice).
    work_samples : float
        Training: total effective samples to process (progress 1.0 = done). Inference: 0.
    deadline : datetime or None
        Training: when it must be done (UTC), or None.
    checkpoint_gb : float
        Checkpoint size moved on migration.
    dataset_gb : float
        Size of the job's dataset (inference: its model and data), GB. It lives at
        ``home`` and travels the first time the job runs in a datacenter that lacks it
        (:mod:`workbench.outcome`).
    end : datetime or None
        Inference: when the service stops.
    max_latency_ms : float or None
        Inference: round-trip latency bound from ``home``.
    load_fraction : float
        Inference: average accelerator load in [0, 1] (sets its power draw).
    """

    job_id: str
    kind: JobKind
    app: str
    arrival: datetime
    home: str
    requested_gpus: int
    gpu_counts: tuple[int, ...]
    batch_size: int
    work_samples: float = 0.0
    deadline: datetime | None = None
    checkpoint_gb: float = 1.0
    gpu_types: tuple[str, ...] = ()
    end: datetime | None = None
    max_latency_ms: float | None = None
    load_fraction: float = 0.5
    dataset_gb: float = 0.0

    def __post_init__(self) -> None:
        where = f"job {self.job_id!r}"
        _require(bool(self.job_id), "job_id must not be empty")
        _require(self.kind in JOB_KINDS, f"{where}: kind must be one of {JOB_KINDS}")
        object.__setattr__(self, "arrival", as_utc(self.arrival))
        if self.deadline is not None:
            object.__setattr__(self, "deadline", as_utc(self.deadline))
        if self.end is not None:
            object.__setattr__(self, "end", as_utc(self.end))
        object.__setattr__(self, "gpu_counts", tuple(sorted(set(self.gpu_counts))))
        object.__setattr__(self, "gpu_types", tuple(self.gpu_types))
        _require(
            isinstance(self.requested_gpus, int) and self.requested_gpus > 0,
            f"{where}: requested_gpus must be a positive integer",
        )
        _require(
            all(isinstance(n, int) and n > 0 for n in self.gpu_counts) and bool(self.gpu_counts),
            f"{where}: gpu_counts must be a non-empty list of positive integers",
        )
        _require(
            self.requested_gpus in self.gpu_counts,
            f"{where}: requested_gpus {self.requested_gpus} is not in gpu_counts "
            f"{list(self.gpu_counts)}; add it to the menu",
        )
        _require(
            isinstance(self.batch_size, int) and self.batch_size > 0,
            f"{where}: batch_size must be a positive integer",
        )
        _non_negative(self.checkpoint_gb, f"{where}: checkpoint_gb")
        _non_negative(self.dataset_gb, f"{where}: dataset_gb")
        if self.kind == "training":
            _positive(self.work_samples, f"{where}: work_samples")
            if self.deadline is not None:
                _require(
                    self.deadline > self.arrival,
                    f"{where}: deadline {self.deadline.isoformat()} is not after arrival "
                    f"{self.arrival.isoformat()}",
                )
        else:
            _require(self.end is not None, f"{where}: an inference service needs an end time")
            assert self.end is not None
            _require(self.end > self.arrival, f"{where}: end must be after arrival")
            _require(
                0.0 <= self.load_fraction <= 1.0,
                f"{where}: load_fraction must be in [0, 1], got {self.load_fraction}",
            )

    @property
    def is_training(self) -> bool:
        return self.kind == "training"

    def allows(self, gpu_type: str) -> bool:
        """Whether the job may run on ``gpu_type``."""
        return not self.gpu_types or gpu_type in self.gpu_types


class _StaticFacts(Protocol):
    """A scenario's static description (the interface :class:`Scenario` and
    :class:`ScenarioView` implement, each a record with these fields) and the lookups on
    it, one implementation for both."""

    name: str
    datacenters: tuple[Datacenter, ...]
    pools: tuple[GpuPool, ...]
    links: tuple[Link, ...]
    profiles: tuple[JobProfile, ...]
    start: datetime
    slot_s: int
    n_slots: int

    def datacenter(self, name: str) -> Datacenter:
        for dc in self.datacenters:
            if dc.name == name:
                return dc
        raise KeyError(f"unknown datacenter {name!r}")

    def profile(self, app: str, gpu_type: str) -> JobProfile:
        for p in self.profiles:
            if p.app == app and p.gpu_type == gpu_type:
                return p
        raise KeyError(f"no profile for app {app!r} on {gpu_type!r}")

    def link(self, a: str, b: str) -> Link | None:
        """The link joining ``a`` and ``b`` in either direction, or None (the first such
        link in ``links``)."""
        return self._link_index.get((a, b))

    @functools.cached_property
    def _link_index(self) -> dict[tuple[str, str], Link]:
        """``(a, b)`` and ``(b, a)`` -> the first link joining them: a fleet of 50
        datacenters has 1,225 links, and the slot options ask for one per job and site."""
        out: dict[tuple[str, str], Link] = {}
        for lk in self.links:
            out.setdefault((lk.src, lk.dst), lk)
            out.setdefault((lk.dst, lk.src), lk)
        return out

    def latency_ms(self, a: str, b: str) -> float:
        """Round-trip latency between two datacenters (0 for the same one, inf if unlinked)."""
        if a == b:
            return 0.0
        lk = self.link(a, b)
        return math.inf if lk is None else lk.latency_ms

    def pools_at(self, datacenter: str) -> tuple[GpuPool, ...]:
        return tuple(p for p in self.pools if p.datacenter == datacenter)

    def slot_starts(self) -> list[datetime]:
        return [self.start + timedelta(seconds=self.slot_s * t) for t in range(self.n_slots)]

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.slot_s * self.n_slots)

    def slot_of(self, when: datetime, *, after: bool = False) -> int:
        """Index of the slot containing ``when`` (with ``after``: the first slot starting at
        or after it); may be < 0 or >= n_slots (:func:`slot_index`)."""
        return slot_index(self.start, self.slot_s, when, after=after)

    @property
    def regions(self) -> tuple[str, ...]:
        """Grid regions of the datacenters, sorted."""
        return tuple(sorted({d.region for d in self.datacenters}))


@dataclass(frozen=True, eq=False)
class Scenario(_StaticFacts):
    """Everything a policy and the simulator need: sites, pools, links, jobs, profiles, cube.

    Attributes
    ----------
    start : datetime
        First slot's start (UTC).
    slot_s : int
        Slot length in seconds.
    n_slots : int
        Number of slots in the horizon.
    grid : xarray.Dataset
        Cube over ``(time, region)`` with ``price_per_kwh`` and ``carbon_g_per_kwh``
        (see :mod:`workbench.cubes`), at the scenario's slot length.
    profiles : tuple of JobProfile
        Performance and energy parameters per (application, GPU type).
    currency : str
        Currency of ``price_per_kwh``.
    history : xarray.Dataset or None
        Hourly cube of the gap-free hours right before ``start`` (at most 160 days), from the
        store's imported series (:func:`workbench.cubes.history_cube`): what forecast models
        learn from. None when the store holds none (generated scenarios).
    supply : Supply
        On-site renewables, PPAs, batteries and demand charges (:mod:`workbench.supply`);
        empty: every datacenter draws from the grid alone and pays energy only.
    """

    name: str
    datacenters: tuple[Datacenter, ...]
    pools: tuple[GpuPool, ...]
    links: tuple[Link, ...]
    jobs: tuple[Job, ...]
    profiles: tuple[JobProfile, ...]
    grid: xr.Dataset
    start: datetime
    slot_s: int
    n_slots: int
    currency: str = "CNY"
    description: str = ""
    history: xr.Dataset | None = None
    supply: Supply = NO_SUPPLY

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", as_utc(self.start))
        for name in ("datacenters", "pools", "links", "jobs", "profiles"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        _require(
            isinstance(self.slot_s, int) and self.slot_s > 0, "slot_s must be a positive integer"
        )
        _require(
            isinstance(self.n_slots, int) and self.n_slots > 0,
            "n_slots must be a positive integer",
        )
        names = [d.name for d in self.datacenters]
        _require(bool(names), f"scenario {self.name!r} has no datacenters")
        _unique(names, "datacenter")
        _unique([j.job_id for j in self.jobs], "job_id")
        _unique([(p.datacenter, p.gpu_type) for p in self.pools], "GPU pool (datacenter, type)")
        _unique([(p.app, p.gpu_type) for p in self.profiles], "profile (app, gpu_type)")
        known = set(names)
        for pool in self.pools:
            _require(
                pool.datacenter in known,
                f"GPU pool {pool.datacenter}/{pool.gpu_type} names an unknown datacenter; "
                f"known: {sorted(known)}",
            )
        for link in self.links:
            for end in (link.src, link.dst):
                _require(end in known, f"link {link.src}->{link.dst}: unknown datacenter {end!r}")
        gpu_types = {p.gpu_type for p in self.pools}
        profiled = {(p.app, p.gpu_type) for p in self.profiles}
        for job in self.jobs:
            _require(
                job.home in known,
                f"job {job.job_id!r}: home {job.home!r} is not a datacenter; known: "
                f"{sorted(known)}",
            )
            usable = [g for g in gpu_types if job.allows(g)]
            _require(
                bool(usable),
                f"job {job.job_id!r}: none of its GPU types {list(job.gpu_types)} exist in "
                f"any pool ({sorted(gpu_types)})",
            )
            if job.is_training:
                missing = [g for g in usable if (job.app, g) not in profiled]
                _require(
                    not missing,
                    f"job {job.job_id!r}: no performance profile for app {job.app!r} on "
                    f"{missing}; a GPU type the device table knows gets a predicted one "
                    "when the scenario is built: add the device (`workbench devices add "
                    "SPEC.json`), or import or measure a profile (`workbench import "
                    "profiles`, `workbench compute measure`)",
                )
        regions = {str(r) for r in self.grid["region"].values}
        absent = sorted({d.region for d in self.datacenters} - regions)
        _require(not absent, f"grid cube lacks regions {absent} used by datacenters")
        if self.history is not None:
            hist_regions = {str(r) for r in self.history["region"].values}
            lacking = sorted({d.region for d in self.datacenters} - hist_regions)
            _require(not lacking, f"history cube lacks regions {lacking} used by datacenters")
            last = pd.Timestamp(self.history["time"].values[-1]) + pd.Timedelta(
                seconds=int(self.history.attrs["slot_s"]))
            _require(last == pd.Timestamp(self.start).tz_convert("UTC").tz_localize(None),
                     f"history cube ends at {last}, not at the scenario start "
                     f"{self.start.isoformat()}")
        _require(
            self.grid.sizes["time"] >= self.n_slots,
            f"grid cube has {self.grid.sizes['time']} time steps, fewer than n_slots "
            f"{self.n_slots}",
        )
        self.supply.check(names, self.n_slots)

    def jobs_of_kind(self, kind: JobKind) -> tuple[Job, ...]:
        return tuple(j for j in self.jobs if j.kind == kind)

    def view(self, *, ignore: Iterable[str] = (),
             power_limits: tuple[float, ...] = ()) -> ScenarioView:
        """What an operator knows in advance: the static description, without the true
        prices and carbon (``grid``), without the future arrivals (``jobs``) and without
        the sources' future output (:meth:`workbench.supply.Supply.static`).

        ``ignore`` (levers of :data:`workbench.supply.LEVERS`) leaves out what a policy is
        to plan without; ``power_limits`` is the menu of GPU power limits it may choose
        from (fractions of each GPU's maximum board power; empty: full power only).
        """
        drop = frozenset(ignore)
        return ScenarioView(
            name=self.name, datacenters=self.datacenters, pools=self.pools, links=self.links,
            profiles=self.profiles, start=self.start, slot_s=self.slot_s,
            n_slots=self.n_slots, currency=self.currency, description=self.description,
            supply=self.supply.without(drop).static(),
            power_limits=() if "power-limits" in drop else tuple(power_limits),
        )

    def without(self, ignore: Iterable[str]) -> Scenario:
        """The scenario as a policy that ignores ``ignore`` plans it (its supply
        :meth:`~workbench.supply.Supply.without` those levers): what a hindsight policy is
        handed for ``--ignore``."""
        drop = frozenset(ignore)
        if not drop & {"supply", "demand-charges"}:
            return self
        return dataclasses.replace(self, supply=self.supply.without(drop))


@dataclass(frozen=True, eq=False)
class ScenarioView(_StaticFacts):
    """A scenario's static facts as policies see them (:meth:`Scenario.view`).

    The same attribute names as :class:`Scenario` for sites, pools, links, profiles and
    the clock, but no ``grid`` (the true prices and carbon) and no ``jobs`` (future
    arrivals): a policy learns jobs from ``SlotState.jobs`` and prices from the
    :class:`~workbench.forecast.Forecast`.
    """

    name: str
    datacenters: tuple[Datacenter, ...]
    pools: tuple[GpuPool, ...]
    links: tuple[Link, ...]
    profiles: tuple[JobProfile, ...]
    start: datetime
    slot_s: int
    n_slots: int
    currency: str = "CNY"
    description: str = ""
    supply: Supply = NO_SUPPLY
    """Static supply facts (no source output: that comes with the forecast)."""
    power_limits: tuple[float, ...] = ()
    """Menu of GPU power limits, fractions of each GPU's maximum board power (empty: full
    power only; :mod:`workbench.power_limits`)."""


def _unique(keys: Iterable[object], what: str) -> None:
    seen: set[object] = set()
    for k in keys:
        _require(k not in seen, f"duplicate {what} {k!r}")
        seen.add(k)
