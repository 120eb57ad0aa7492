"""The typed schema of a scenario TOML config (``workbench scenario build --config``).

The config is validated once, at the edge, into :class:`ScenarioConfig` (pydantic v2,
strict: a number must be written as a number, unknown keys are refused, NaN and infinities
are refused, a timezone must exist). :func:`validate_config` turns the first problem into one
line naming the key and the fix, e.g.::

    [scenario] days: 'three' is not a number; give the horizon in days, e.g. days = 7

The keys and their meaning are documented in the README ("Scenarios from your own data").
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from workbench.io.errors import quoted
from workbench.model import ScenarioError, as_utc

log = logging.getLogger(__name__)


class ConfigError(ScenarioError):
    """A scenario config does not follow the schema; the message names the key and the fix."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


def _time(value: Any, key: str) -> str:
    if isinstance(value, datetime):
        value = value.isoformat()
    if not isinstance(value, str):
        raise ValueError(f"{key} must be an ISO time")
    try:
        as_utc(value)
    except (ValueError, OverflowError):
        raise ValueError(f"{value!r} is not an ISO time") from None
    return value


class ScenarioSection(_Section):
    """``[scenario]``: the horizon and slot."""

    name: str | None = Field(None, description="a name, e.g. name = \"de-week\"")
    description: str = Field("", description="free text")
    start: str | datetime = Field(description="an ISO time, e.g. start = "
                                  "\"2023-07-10T00:00:00Z\"")
    end: str | datetime | None = Field(None, description="an ISO time after start")
    days: float | None = Field(None, gt=0, le=3660, description="the horizon in days, e.g. "
                               "days = 7")
    hours: float | None = Field(None, gt=0, le=87840, description="the horizon in hours, e.g. "
                                "hours = 24")
    slot_minutes: float = Field(60.0, gt=0, le=1440, description="the slot length in minutes, "
                                "e.g. slot_minutes = 15")
    currency: str | None = Field(None, pattern=r"^[A-Z]{3}$", description="a three-letter "
                                 "ISO code, e.g. currency = \"EUR\"")
    fill: Literal["none", "hold"] = Field("none", description="'none' or 'hold'")

    @field_validator("start", "end", mode="before")
    @classmethod
    def _iso(cls, v: Any) -> Any:
        return None if v is None else _time(v, "the time")


def _zone(name: str) -> str:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown timezone {name!r}") from None
    return name


class DatacenterEntry(_Section):
    """``[[datacenters]]``: one site and the grid series it draws from."""

    name: str = Field(min_length=1, description="a unique site name")
    region: str = Field(min_length=1, description="the imported grid series' --region name")
    grid_zone: str | None = Field(None, description="a grid zone code, e.g. \"DE-LU\"")
    timezone: str = Field("UTC", description="an IANA name such as Europe/Berlin or UTC")
    pue: float = Field(ge=1.0, le=3.0, description="the PUE, a number in [1, 3], e.g. "
                       "pue = 1.2")
    idle_power_kw: float = Field(0.0, ge=0, le=1e6, description="kW >= 0")

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        return _zone(v)


class PoolEntry(_Section):
    """``[[pools]]``: GPUs of one type at one datacenter."""

    datacenter: str = Field(min_length=1, description="a [[datacenters]] name")
    gpu_type: str = Field(min_length=1, description="e.g. \"A100\"")
    count: int = Field(ge=1, le=10**7, description="a whole number of GPUs >= 1")
    idle_power_w: float = Field(ge=0, le=5000, description="W per GPU, >= 0")
    max_power_w: float = Field(gt=0, le=5000, description="W per GPU, > 0")
    gpus_per_node: int = Field(8, ge=1, le=1024, description="a whole number >= 1")


class NetworkSection(_Section):
    """``[network]``: links of every pair from a latency matrix."""

    latency_matrix: str | None = Field(None, description="a CSV path (relative to the config)")
    bandwidth_gbps: float | None = Field(None, gt=0, le=1e6, description="Gbit/s > 0")
    transfer_energy_kwh_per_gb: float = Field(0.0, ge=0, le=100, description="kWh/GB >= 0")


class LinkEntry(_Section):
    """``[[links]]``: one explicit link."""

    src: str = Field(min_length=1, description="a datacenter name")
    dst: str = Field(min_length=1, description="a datacenter name")
    bandwidth_gbps: float | None = Field(None, gt=0, le=1e6, description="Gbit/s > 0")
    latency_ms: float = Field(ge=0, le=1e5, description="ms >= 0")
    transfer_energy_kwh_per_gb: float | None = Field(None, ge=0, le=100,
                                                     description="kWh/GB >= 0")


class LlmJobEntry(_Section):
    """``[[jobs.llm]]``: one LLM training job defined by its model config
    (:mod:`workbench.llm_jobs`); give ``tokens`` or ``steps``."""

    job_id: str = Field(min_length=1, description="a unique name")
    model_config_path: str = Field(alias="model_config", min_length=1, description=(
        "a Hugging Face config.json (path relative to the scenario config)"))
    purpose: Literal["pretrain", "finetune"] = Field("pretrain", description=(
        "'pretrain' or 'finetune'"))
    seq_len: int = Field(ge=1, le=1_000_000, description="tokens per sequence, >= 1")
    global_batch: int = Field(ge=1, le=10**7, description="sequences per step, >= 1")
    tokens: float | None = Field(None, gt=0, le=1e16, description="tokens to train on, > 0")
    steps: int | None = Field(None, ge=1, le=10**10, description="optimizer steps, >= 1")
    precision: Literal["fp32", "bf16"] = Field("bf16", description="'fp32' or 'bf16'")
    pretrained_tokens: float | None = Field(None, ge=0, le=1e16, description=(
        "tokens the model saw before a fine-tune (default 300e9)"))
    home: str = Field(min_length=1, description="a datacenter name")
    arrival_hours: float = Field(0.0, ge=0, le=87840, description="hours after the start")
    deadline_hours: float | None = Field(None, gt=0, le=87840, description=(
        "hours after its arrival"))
    gpus: int = Field(8, ge=1, le=4096, description="GPUs requested, >= 1")
    gpu_counts: list[int] | None = Field(None, min_length=1, description=(
        "allowed GPU counts, e.g. [1, 2, 4, 8, 16]"))
    gpu_types: list[str] | None = Field(None, min_length=1, description="GPU type names")
    checkpoint_gb: float | None = Field(None, ge=0, le=1e6, description=(
        "GB >= 0 (default: FP32 weights and Adam states, 12 B per parameter)"))
    dataset_gb: float | None = Field(None, ge=0, le=1e6, description=(
        "GB >= 0 (default: the tokens as token ids, and a fine-tune's weights)"))
    activation_checkpointing: bool = Field(False, description=(
        "recompute each block in the backward pass"))
    zero: Literal[0, 1, 2, 3] = Field(0, description=(
        "ZeRO/FSDP stage over a node's replicas (the job then takes whole nodes)"))

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True,
                              populate_by_name=True, protected_namespaces=())

    @property
    def model_config_file(self) -> str:
        """The ``model_config`` key (a path)."""
        return self.model_config_path


class JobsSection(_Section):
    """``[jobs]``: which stored job set, realigned how, and LLM jobs defined here."""

    set: str | None = Field(None, min_length=1, description=(
        "an imported job set (import jobs --into)"))
    llm: list[LlmJobEntry] = Field(default_factory=list, description=(
        "[[jobs.llm]] tables: LLM jobs by model config"))
    align: Literal["start", "none"] = Field("start", description="'start' or 'none'")
    offset_hours: float = Field(0.0, ge=-87840, le=87840, description="hours, a finite number")
    homes: list[str] | None = Field(None, min_length=1, description="datacenter names")
    limit: int | None = Field(None, ge=1, description="a whole number of jobs >= 1")
    max_gpus: int | None = Field(None, ge=1, description="a whole number >= 1")
    work_scale: float = Field(1.0, gt=0, le=1e6, description="a factor > 0")
    min_deadline_h: float | None = Field(None, gt=0, le=87840, description="hours > 0")


class InferenceEntry(_Section):
    """``[[inference]]``: one always-on inference service."""

    job_id: str = Field(min_length=1, description="a unique name")
    app: str = Field(min_length=1, description="a profiled application")
    home: str = Field(min_length=1, description="a datacenter name")
    gpu_type: str = Field(min_length=1, description="e.g. \"A100\"")
    gpus: int = Field(ge=1, le=4096, description="a whole number >= 1")
    max_latency_ms: float = Field(gt=0, le=1e5, description="ms > 0")
    load_fraction: float = Field(0.5, gt=0, le=1, description="a fraction in (0, 1]")
    checkpoint_gb: float = Field(1.0, ge=0, le=1e5, description="GB >= 0")
    dataset_gb: float | None = Field(None, ge=0, le=1e6, description=(
        "GB >= 0 (data that travels on its first placement away from home; default: its "
        "checkpoint_gb)"))


class SupplyEntry(_Section):
    """``[[supply]]``: one renewable plant, PPA or battery at a datacenter
    (:mod:`workbench.supply`; which keys a kind needs is checked by :func:`validate_config`)."""

    datacenter: str = Field(min_length=1, description="a [[datacenters]] name")
    kind: Literal["solar", "wind", "ppa", "battery"] = Field(description=(
        "'solar', 'wind', 'ppa' or 'battery'"))
    name: str | None = Field(None, min_length=1, description="a unique name (default: "
                             "<datacenter>-<kind>-<n>)")
    capacity_kw: float | None = Field(None, gt=0, le=1e8, description=(
        "nameplate (AC) kW > 0, e.g. capacity_kw = 2000"))
    latitude: float | None = Field(None, ge=-90, le=90, description="degrees in [-90, 90]")
    longitude: float | None = Field(None, ge=-180, le=180, description=(
        "degrees in [-180, 180]"))
    tilt_deg: float = Field(20.0, ge=0, le=90, description="degrees in [0, 90]")
    azimuth_deg: float = Field(180.0, ge=0, lt=360, description=(
        "degrees in [0, 360): 0 = north, 180 = south"))
    altitude_m: float = Field(0.0, ge=-500, le=9000, description="metres above sea level")
    losses: float = Field(0.14, ge=0, lt=1, description=(
        "a fraction in [0, 1) of DC output lost (wiring, soiling, mismatch)"))
    series: str | None = Field(None, min_length=1, description=(
        "an imported series (workbench import grid csv ... --kind generation|irradiance|"
        "wind-speed --region NAME)"))
    turbine_type: str | None = Field(None, min_length=1, description=(
        "a windpowerlib turbine type, e.g. \"E-126/4200\""))
    hub_height_m: float | None = Field(None, gt=0, le=300, description="metres > 0")
    measurement_height_m: float | None = Field(None, gt=0, le=300, description=(
        "metres > 0: where the wind speed series was measured (default: hub height)"))
    roughness_length_m: float = Field(0.15, gt=0, le=5, description="metres > 0")
    volume_kw: float | None = Field(None, ge=0, le=1e8, description=(
        "a PPA's flat contracted power, kW >= 0"))
    shape_kw: list[float] | None = Field(None, min_length=24, max_length=24, description=(
        "a PPA's contracted kW for each local hour 0..23 (24 numbers >= 0)"))
    price_per_kwh: float = Field(0.0, ge=-1e3, le=1e3, description=(
        "currency per kWh (default 0; a PPA's contract price)"))
    carbon_g_per_kwh: float = Field(0.0, ge=0, le=2000, description="gCO2/kWh >= 0")
    take_or_pay: bool = Field(True, description="true or false (a PPA paid for its whole "
                              "volume whether used or not)")
    export_price_per_kwh: float | None = Field(None, ge=-1e3, le=1e3, description=(
        "currency per kWh paid for surplus (default: surplus is curtailed)"))
    energy_kwh: float | None = Field(None, gt=0, le=1e9, description="battery kWh > 0")
    power_kw: float | None = Field(None, gt=0, le=1e8, description="battery kW > 0")
    round_trip_efficiency: float = Field(0.9, gt=0, le=1, description="a fraction in (0, 1]")
    soc_initial: float = Field(0.5, ge=0, le=1, description="a fraction of energy_kwh")
    soc_min: float = Field(0.1, ge=0, le=1, description="a fraction of energy_kwh")
    soc_max: float = Field(1.0, gt=0, le=1, description="a fraction of energy_kwh")


class DemandChargeEntry(_Section):
    """``[[demand_charges]]``: what a datacenter pays on its power per billing month: a
    price per kW of the month's peak grid import, a URDB tariff's demand structures, or a
    capacity charge per kVA."""

    datacenter: str = Field(min_length=1, description="a [[datacenters]] name")
    name: str | None = Field(None, min_length=1, description="a unique name")
    price_per_kw_month: float | None = Field(None, gt=0, le=1e4, description=(
        "currency per kW of the month's peak > 0, e.g. price_per_kw_month = 20"))
    urdb: str | None = Field(None, min_length=1, description=(
        "a URDB tariff JSON (path relative to the config) with a demand structure"))
    item: int = Field(0, ge=0, description="which tariff of a URDB 'items' list")
    capacity_kva: float | None = Field(None, gt=0, le=1e8, description="transformer kVA > 0")
    price_per_kva_month: float | None = Field(None, gt=0, le=1e4, description=(
        "currency per kVA of capacity per month > 0"))


class GridEventEntry(_Section):
    """``[[grid_events]]``: a datacenter asked to hold its grid import under a limit for some
    hours, announced some hours ahead (:mod:`workbench.events`)."""

    datacenter: str = Field(min_length=1, description="a [[datacenters]] name")
    start: str | datetime | float = Field(description=(
        "an ISO time (UTC unless it names its offset), e.g. start = \"2025-07-14T14:00\" "
        "or start = 2025-07-14T14:00:00Z, or hours after the horizon's start, e.g. "
        "start = 30"))
    hours: float = Field(gt=0, le=24 * 366, description="how long it lasts, hours > 0")
    limit_kw: float | None = Field(None, ge=0, le=1e9, description=(
        "the most the site may import at its meter, kW"))
    cut_pct: float | None = Field(None, gt=0, le=100, description=(
        "or a cut of the plan's own import, % in (0, 100]"))
    notice_hours: float = Field(2.0, ge=0, le=24 * 366, description=(
        "hours before start that it is announced >= 0"))
    payment_per_kwh: float = Field(0.0, ge=0, le=1e4, description=(
        "paid per kWh shed, currency >= 0"))
    penalty_per_kwh: float = Field(0.0, ge=0, le=1e4, description=(
        "charged per kWh above the limit, currency >= 0"))
    name: str | None = Field(None, min_length=1, description="a label")


class ScenarioConfig(_Section):
    """A whole scenario config; ``base_dir`` is the config file's folder."""

    scenario: ScenarioSection = Field(description="a [scenario] table with start and one of "
                                      "end, days, hours")
    datacenters: list[DatacenterEntry] = Field(min_length=1, description="at least one "
                                               "[[datacenters]] table")
    pools: list[PoolEntry] = Field(default_factory=list, description="[[pools]] tables")
    network: NetworkSection = Field(default_factory=lambda: NetworkSection.model_validate({}),
                                    description="a table")
    links: list[LinkEntry] = Field(default_factory=list, description="[[links]] tables")
    jobs: JobsSection | None = Field(None, description="a [jobs] table")
    inference: list[InferenceEntry] = Field(default_factory=list,
                                            description="[[inference]] tables")
    supply: list[SupplyEntry] = Field(default_factory=list, description="[[supply]] tables")
    demand_charges: list[DemandChargeEntry] = Field(default_factory=list, description=(
        "[[demand_charges]] tables"))
    grid_events: list[GridEventEntry] = Field(default_factory=list, description=(
        "[[grid_events]] tables"))
    base_dir: str = Field(".", alias="_base_dir")

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True,
                              populate_by_name=True)


_SECTIONS = {"scenario": "[scenario]", "network": "[network]", "jobs": "[jobs]",
             "datacenters": "[[datacenters]]", "pools": "[[pools]]", "links": "[[links]]",
             "inference": "[[inference]]", "jobs.llm": "[[jobs.llm]]",
             "supply": "[[supply]]", "demand_charges": "[[demand_charges]]",
             "grid_events": "[[grid_events]]"}
_MODELS: dict[str, type[BaseModel]] = {
    "scenario": ScenarioSection, "network": NetworkSection, "jobs": JobsSection,
    "datacenters": DatacenterEntry, "pools": PoolEntry, "links": LinkEntry,
    "inference": InferenceEntry, "jobs.llm": LlmJobEntry, "supply": SupplyEntry,
    "demand_charges": DemandChargeEntry, "grid_events": GridEventEntry,
}


def _nested(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """``('jobs', 'llm', 0, 'seq_len')`` -> ``('jobs.llm', 0, 'seq_len')``: the one nested
    array of tables reads like a top-level one."""
    return (f"{loc[0]}.{loc[1]}", *loc[2:]) if loc[:2] == ("jobs", "llm") else loc


def _where(loc: tuple[int | str, ...]) -> tuple[str, str | None]:
    """``('datacenters', 0, 'pue')`` -> ``("[[datacenters]] entry 0", "pue")``."""
    loc = _nested(loc)
    if not loc:
        return "the config", None
    head = str(loc[0])
    where = _SECTIONS.get(head, head)
    rest = list(loc[1:])
    if rest and isinstance(rest[0], int):
        where += f" entry {rest.pop(0)}"
    key = ".".join(str(x) for x in rest) or None
    return where, key


def _hint(loc: tuple[int | str, ...]) -> str:
    loc = _nested(loc)
    section = str(loc[0]) if loc else ""
    names = [x for x in loc[1:] if isinstance(x, str)]
    model = _MODELS.get(section)
    if model is None:
        field = ScenarioConfig.model_fields.get(section)
        return (field.description or "") if field else ""
    if not names:
        return ScenarioConfig.model_fields[section].description or ""
    field = model.model_fields.get(names[0])
    return (field.description or "") if field else ""


def _message(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    extra = [e for e in errors if e["type"] == "extra_forbidden"]
    if extra:
        where, _ = _where(tuple(extra[0]["loc"][:-1]))
        same = sorted(str(e["loc"][-1]) for e in extra if e["loc"][:-1] == extra[0]["loc"][:-1])
        if where == "the config":
            return (f"unknown config sections {same}; known: {sorted(_SECTIONS)}")
        model = _MODELS[str(_nested(tuple(extra[0]["loc"]))[0])]
        known = sorted(f.alias or n for n, f in model.model_fields.items())
        return f"{where}: unknown keys {same}; known: {known}"
    e = errors[0]
    loc = tuple(e["loc"])
    # A union (str | datetime) reports one error per member: keep the first member's.
    loc = tuple(x for x in loc if x not in ("str", "datetime", "function-after[_iso(), str]"))
    where, key = _where(loc)
    hint = _hint(loc)
    if e["type"] == "missing":
        text = f"{where} lacks {key!r}" if key else f"the config lacks {where}"
        return text + (f"; give {hint}" if hint else "")
    value = e.get("input")
    shown = quoted(value) if not isinstance(value, (dict, list)) else type(value).__name__
    msg = str(e["msg"])
    if e["type"] in ("float_type", "int_type", "float_parsing", "int_parsing",
                     "int_from_float"):
        msg = "is not a number" if e["type"].startswith("float") else "is not a whole number"
    elif e["type"] == "finite_number":
        msg = "is not a finite number"
    elif e["type"] == "value_error":
        msg = "is invalid: " + msg.removeprefix("Value error, ")
    elif msg.startswith("Input should be "):
        msg = "must be " + msg.removeprefix("Input should be ")
    else:
        msg = "is invalid: " + msg[0].lower() + msg[1:]
    return f"{where} {key}: {shown} {msg}" + (f"; give {hint}" if hint else "")


PLAN_BYTES_PER_SLOT = 4096
"""Memory a scenario takes per slot to build and plan, bytes: its cube, the simulator's
per-slot record and its jobs' plan rows. Measured 2.1 KB a slot (four regions, 160 jobs:
`scenario build` then an asap-home plan, 1-minute slots over 3 days; the build alone 156 B
a slot at 2.6 M slots), doubled for the policies' own arrays."""

MEMORY_SHARE = 0.5
"""Share of the machine's memory one scenario's slots may take (the rest: the process,
the solver, the other runs of a sweep)."""


def machine_cores() -> int:
    """CPU cores this process may use: its affinity set, or the container's cgroup quota
    (``/sys/fs/cgroup/cpu.max``) where that is lower; at least 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return max(n, 1)
    if quota.isdigit() and period.isdigit() and int(period) > 0:
        n = min(n, -(-int(quota) // int(period)))
    return max(n, 1)


def bounded_workers(asked: int, what: str) -> int:
    """``asked`` worker processes (or threads), at most :func:`machine_cores`: more only
    share the cores, each with its own memory (``sweep --workers 1024`` on two cores
    started a process per worker). Says so in one warning when it lowers the count."""
    cores = machine_cores()
    if asked <= cores:
        return asked
    log.warning("%s: %d workers asked, this machine has %d cores: running %d", what, asked,
                cores, cores)
    return cores


def machine_memory_bytes() -> int:
    """Memory this process may use: the machine's physical memory, or the container's
    cgroup limit where that is lower (``/sys/fs/cgroup/memory.max``)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return int(total)
    return int(min(total, int(limit))) if limit.isdigit() else int(total)


def horizon(sc: ScenarioSection) -> tuple[datetime, int, int]:
    """``(start, slot_s, n_slots)`` of a ``[scenario]`` table: the slot length rounded to
    whole seconds and the horizon ``end - start`` (or ``days``, ``hours``) in slots.

    Raises
    ------
    ConfigError
        The slot is shorter than a second, or the horizon is not a positive multiple of it.
    """
    start = as_utc(str(sc.start.isoformat() if isinstance(sc.start, datetime) else sc.start))
    slot_s = int(round(sc.slot_minutes * 60))
    if slot_s <= 0:
        raise ConfigError("[scenario] slot_minutes must be at least one second")
    if sc.end is not None:
        end = as_utc(str(sc.end.isoformat() if isinstance(sc.end, datetime) else sc.end))
        span = (end - start).total_seconds()
    else:
        span = (sc.days or 0.0) * 86400 + (sc.hours or 0.0) * 3600
    if span <= 0 or span % slot_s:
        raise ConfigError(f"[scenario] the horizon ({span:g} s) must be a positive multiple "
                          f"of the slot ({slot_s} s)")
    return start, slot_s, int(span // slot_s)


def _check_slot_count(n_slots: int, slot_s: int, memory_bytes: int) -> None:
    """Refuse a horizon whose slots need more than :data:`MEMORY_SHARE` of
    ``memory_bytes`` at :data:`PLAN_BYTES_PER_SLOT` each; the message gives the numbers and
    a slot length that fits."""
    most = int(memory_bytes * MEMORY_SHARE // PLAN_BYTES_PER_SLOT)
    if n_slots <= most:
        return
    span_s = n_slots * slot_s
    fits = next((m for m in (1, 5, 15, 30, 60, 120, 360, 1440) if span_s / (m * 60) <= most),
                None)
    hint = (f"slot_minutes = {fits} gives {span_s // (fits * 60):,} slots"
            if fits else "no slot length of a day or less fits it")
    raise ConfigError(
        f"[scenario] {n_slots:,} slots of {slot_s:,} s over {span_s / 86400:,.4g} days need "
        f"about {n_slots * PLAN_BYTES_PER_SLOT / 2**30:,.0f} GiB to build and plan "
        f"({PLAN_BYTES_PER_SLOT:,} B a slot), more than half of this machine's "
        f"{memory_bytes / 2**30:,.1f} GiB allows ({most:,} slots); use longer slots "
        f"({hint}) or a shorter horizon")


def validate_config(cfg: Mapping[str, Any], memory_bytes: int | None = None
                    ) -> ScenarioConfig:
    """Validate a parsed TOML mapping against :class:`ScenarioConfig`.

    ``memory_bytes`` bounds the slot count (default :func:`machine_memory_bytes`).

    Raises
    ------
    ConfigError
        One line naming the section, entry and key, what is wrong and the fix. Also for
        cross-key rules: exactly one of ``end``, ``days``, ``hours``; a horizon that is a
        whole number of slots, no more of them than the machine's memory holds.
    """
    try:
        config = ScenarioConfig.model_validate(dict(cfg))
    except ValidationError as exc:
        raise ConfigError(_message(exc)) from None
    sc = config.scenario
    given = [k for k in ("end", "days", "hours") if getattr(sc, k) is not None]
    if len(given) != 1:
        raise ConfigError(f"[scenario] needs exactly one of end, days, hours (has {given}); "
                          "e.g. days = 7")
    _, slot_s, n_slots = horizon(sc)
    _check_slot_count(n_slots, slot_s,
                      machine_memory_bytes() if memory_bytes is None else memory_bytes)
    _check_unique([d.name for d in config.datacenters], "[[datacenters]]", "name",
                  "give every datacenter its own name")
    _check_unique([frozenset((lk.src, lk.dst)) for lk in config.links], "[[links]]",
                  "src/dst", "give each pair of datacenters one link (it serves both "
                  "directions)")
    names = {d.name for d in config.datacenters}
    for i, e in enumerate(config.supply):
        _check_supply(i, e, names)
    for i, d in enumerate(config.demand_charges):
        _check_demand(i, d, names)
    for i, ev in enumerate(config.grid_events):
        _check_site(f"[[grid_events]] entry {i}", ev.datacenter, names)
        if (ev.limit_kw is None) == (ev.cut_pct is None):
            raise ConfigError(f"[[grid_events]] entry {i}: give limit_kw (kW at the meter) or "
                              "cut_pct (% of the plan's import), one of them")
    return config


_KIND_KEYS: dict[str, set[str]] = {
    "solar": {"capacity_kw", "latitude", "longitude", "tilt_deg", "azimuth_deg", "altitude_m",
              "losses", "series", "price_per_kwh", "carbon_g_per_kwh", "export_price_per_kwh"},
    "wind": {"capacity_kw", "series", "turbine_type", "hub_height_m", "measurement_height_m",
             "roughness_length_m", "price_per_kwh", "carbon_g_per_kwh",
             "export_price_per_kwh"},
    "ppa": {"capacity_kw", "volume_kw", "shape_kw", "series", "price_per_kwh",
            "carbon_g_per_kwh", "take_or_pay", "export_price_per_kwh"},
    "battery": {"energy_kwh", "power_kw", "round_trip_efficiency", "soc_initial", "soc_min",
                "soc_max"},
}
"""The keys each kind of ``[[supply]]`` entry takes (besides datacenter, kind and name)."""


def _check_site(where: str, name: str, datacenters: set[str]) -> None:
    """A one-line :class:`ConfigError` unless ``name`` is one of the ``[[datacenters]]``."""
    if name not in datacenters:
        raise ConfigError(f"{where} datacenter: {name!r} is not a [[datacenters]] name; "
                          f"known: {', '.join(sorted(datacenters)) or 'none'}; name one of "
                          "them, or add that datacenter")


def _check_supply(i: int, e: SupplyEntry, datacenters: set[str]) -> None:
    """The cross-key rules of one ``[[supply]]`` entry, as one-line :class:`ConfigError`."""
    where = f"[[supply]] entry {i}"
    _check_site(where, e.datacenter, datacenters)
    given = {k for k in e.model_fields_set if k not in ("datacenter", "kind", "name")}
    foreign = sorted(given - _KIND_KEYS[e.kind])
    if foreign:
        raise ConfigError(f"{where}: a {e.kind} entry takes no {', '.join(foreign)}; its keys: "
                          f"{', '.join(sorted(_KIND_KEYS[e.kind]))}")
    def need(*keys: str, hint: str) -> None:
        lacking = [k for k in keys if getattr(e, k) is None]
        if lacking:
            raise ConfigError(f"{where} ({e.kind}) lacks {', '.join(lacking)}; give {hint}")
    if e.kind == "solar":
        need("capacity_kw", hint="the nameplate kW, e.g. capacity_kw = 2000")
        if e.series is None:
            need("latitude", "longitude", hint="the site for the clear-sky model, e.g. "
                 "latitude = -33.87, longitude = 151.21 (or series = \"NAME\")")
    elif e.kind == "wind":
        need("capacity_kw", hint="the nameplate kW, e.g. capacity_kw = 4200")
        need("series", hint="an imported wind speed (m/s) or generation (kW) series, e.g. "
             "series = \"SITE-WIND\"")
        if e.turbine_type is not None:
            need("hub_height_m", hint="the turbine's hub height, e.g. hub_height_m = 135")
    elif e.kind == "ppa":
        shapes = [k for k in ("volume_kw", "shape_kw", "series") if getattr(e, k) is not None]
        if len(shapes) != 1:
            raise ConfigError(f"{where} (ppa) needs exactly one of volume_kw, shape_kw, series "
                              f"(has {shapes or 'none'}); e.g. volume_kw = 500")
        if e.shape_kw is not None and any(not (v >= 0) for v in e.shape_kw):
            raise ConfigError(f"{where} (ppa) shape_kw: every hour's kW must be >= 0")
    else:
        need("energy_kwh", "power_kw", hint="the battery's size, e.g. energy_kwh = 4000, "
             "power_kw = 1000")
        if not e.soc_min < e.soc_max:
            raise ConfigError(f"{where} (battery): soc_min ({e.soc_min:g}) must be below "
                              f"soc_max ({e.soc_max:g})")
        if not e.soc_min <= e.soc_initial <= e.soc_max:
            raise ConfigError(f"{where} (battery): soc_initial ({e.soc_initial:g}) must lie "
                              f"between soc_min ({e.soc_min:g}) and soc_max ({e.soc_max:g})")


def _check_demand(i: int, d: DemandChargeEntry, datacenters: set[str]) -> None:
    """The cross-key rules of one ``[[demand_charges]]`` entry."""
    where = f"[[demand_charges]] entry {i}"
    _check_site(where, d.datacenter, datacenters)
    if (d.capacity_kva is None) != (d.price_per_kva_month is None):
        raise ConfigError(f"{where}: capacity_kva and price_per_kva_month come together")
    if d.price_per_kw_month is not None and d.urdb is not None:
        raise ConfigError(f"{where}: give price_per_kw_month or urdb, not both")
    if d.price_per_kw_month is None and d.urdb is None and d.capacity_kva is None:
        raise ConfigError(f"{where} lacks a charge; give price_per_kw_month = 20, urdb = "
                          "\"tariff.json\", or capacity_kva with price_per_kva_month")


def _check_unique(keys: list[Any], section: str, key: str, fix: str) -> None:
    """Raise :class:`ConfigError` at the first entry whose ``key`` repeats an earlier one."""
    seen: dict[Any, int] = {}
    for i, k in enumerate(keys):
        if k in seen:
            shown = " and ".join(sorted(k)) if isinstance(k, frozenset) else repr(k)
            raise ConfigError(f"{section} entry {i} {key}: {shown} repeats entry {seen[k]}; "
                              f"{fix}")
        seen[k] = i
