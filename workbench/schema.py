"""Record schemas: the columns of every row that crosses layers, each defined once.

A :class:`Field` says a column's name, type, unit and meaning, and where it goes: the CSV
exports (``csv``) and the store (``since``: the store schema version whose table first held
it; None: not stored). The simulator builds its rows by these names
(:meth:`Record.row_type`), the plan CSV writer and reader take their columns and types from
them (:mod:`workbench.io.plan_csv`), the store makes its tables and their migrations from
them (:mod:`workbench.store.schema`), and the app reads the same names.

Records here:

- :data:`PLAN_ROW`: one job in one slot (:attr:`workbench.sim.RunResult.plan`, the plan CSV,
  the store's ``plan_rows``);
- :data:`MIGRATION`: one data movement between datacenters (``migrations``);
- :data:`JOB`: one job of a job set or scenario as the store keeps it (``jobs``);
- :data:`JOB_OUTCOME`: one job's outcome in a run (:attr:`workbench.sim.RunResult.jobs`);
- :data:`JOBS_CSV`: one job in the jobs CSV (``workbench plan --jobs-out``);
- :data:`GRID_ROW`: one region's price and carbon at one UTC time (``grid_series``).

Units: ``{currency}`` is the scenario's currency (e.g. CNY); times are UTC.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DTYPES: dict[str, Any] = {
    "text": object, "json": object, "time": object, "int": np.int64, "float": np.float64,
    "bool": np.bool_,
}
"""The numpy dtype a column of each kind is accumulated in (times and text as objects)."""


@dataclass(frozen=True)
class Field:
    """One column of a record.

    Parameters
    ----------
    name : str
        Column name (with its unit where it has one: ``energy_kwh``, ``lost_s``).
    dtype : str
        ``text``, ``json`` (text holding JSON), ``time`` (UTC), ``int``, ``float`` or ``bool``.
    unit : str
        What one unit of the value is (``kWh``, ``{currency}``, ``kg CO2``); empty for text.
    doc : str
        What the value is.
    csv : bool
        Whether the CSV export of the record has the column.
    since : int or None
        Store schema version that added the column to the record's table (None: not stored).
    required : bool
        The store refuses a row without it (``NOT NULL``).
    default : float, bool or None
        The value a migration gives the rows already stored when it adds the column.
    """

    name: str
    dtype: str
    unit: str = ""
    doc: str = ""
    csv: bool = False
    since: int | None = None
    required: bool = False
    default: float | bool | None = None

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"field {self.name!r}: unknown dtype {self.dtype!r}; use one of "
                             f"{sorted(DTYPES)}")


class Record:
    """An ordered set of :class:`Field` s: one kind of row."""

    def __init__(self, name: str, fields: Sequence[Field]) -> None:
        self.name = name
        self.fields: tuple[Field, ...] = tuple(fields)
        self._by_name = {f.name: f for f in self.fields}
        if len(self._by_name) != len(self.fields):
            raise ValueError(f"record {name!r} names a field twice")

    def __repr__(self) -> str:
        return f"Record({self.name!r}, {len(self.fields)} fields)"

    def __getitem__(self, name: str) -> Field:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    @property
    def names(self) -> tuple[str, ...]:
        """Every column, in order."""
        return tuple(f.name for f in self.fields)

    @property
    def csv_names(self) -> tuple[str, ...]:
        """The CSV export's columns, in file order."""
        return tuple(f.name for f in self.fields if f.csv)

    @property
    def stored(self) -> tuple[Field, ...]:
        """The fields the store keeps, in the record's order."""
        return tuple(f for f in self.fields if f.since is not None)

    def names_of(self, dtype: str, among: Iterable[str] | None = None) -> tuple[str, ...]:
        """Columns of one dtype, in order (only those in ``among`` when given)."""
        keep = None if among is None else set(among)
        return tuple(f.name for f in self.fields
                     if f.dtype == dtype and (keep is None or f.name in keep))

    def dtypes(self, names: Iterable[str] | None = None) -> dict[str, Any]:
        """Column -> numpy dtype (:data:`DTYPES`) for ``names`` (default: every column)."""
        return {n: DTYPES[self[n].dtype] for n in (self.names if names is None else names)}

    def row_type(self, names: Sequence[str] | None = None) -> Callable[..., tuple[Any, ...]]:
        """A named tuple of ``names`` (default: every column), made by keyword: rows built
        by name whose transpose (``zip(*rows)``) gives the columns in the order of
        ``names``."""
        fields = list(self.names if names is None else names)
        unknown = [n for n in fields if n not in self]
        if unknown:
            raise KeyError(f"record {self.name!r} has no fields {unknown}")
        return namedtuple(f"{self.name.title().replace('_', '')}Row", fields)


ACTIONS: tuple[str, ...] = ("start", "run", "migrate", "pause", "resume", "finish")
"""What a job does in a slot (the plan's ``action`` column)."""

PLAN_ROW = Record("plan", (
    Field("slot_start", "time", "UTC", "start of the slot", csv=True, since=1, required=True),
    Field("slot_end", "time", "UTC", "end of the slot", csv=True, since=1, required=True),
    Field("job_id", "text", doc="the job", csv=True, since=1, required=True),
    Field("region", "text", doc="the datacenter it runs in (where it waits when paused)",
          csv=True, since=1),
    Field("gpu_type", "text", doc="GPU type; empty when it does not run", csv=True, since=1),
    Field("n_gpus", "int", "GPUs", "GPUs it runs on; 0 when it does not run", csv=True,
          since=1),
    Field("batch_size", "int", "samples", "global batch; 0 when it does not run", csv=True,
          since=1),
    Field("action", "text", doc=f"one of {', '.join(ACTIONS)}", csv=True, since=1,
          required=True),
    Field("energy_kwh", "float", "kWh", "facility energy (IT x PUE) charged to the job, "
          "transfers included", csv=True, since=1),
    Field("cost", "float", "{currency}", "electricity cost of that energy", csv=True, since=1),
    Field("carbon_kg", "float", "kg CO2", "carbon of that energy", csv=True, since=1),
    Field("price_per_kwh", "float", "{currency}/kWh", "price where it runs", csv=True,
          since=1),
    Field("carbon_g_per_kwh", "float", "gCO2/kWh", "carbon intensity where it runs",
          csv=True, since=1),
    Field("progress", "float", "fraction of the job's work", "work done in the slot",
          csv=True, since=1),
    Field("transfer_gb", "float", "GB", "data moved into the datacenter for this row "
          "(dataset and/or checkpoint)", csv=True, since=3, default=0.0),
    Field("lost_s", "float", "s", "seconds of the slot lost to restart and transfer",
          csv=True, since=3, default=0.0),
    Field("power_limit_w", "float", "W per GPU", "GPU power limit it ran under (the GPU's "
          "maximum board power when none was set); 0 when it does not run", csv=True,
          since=7),
    Field("renewable_kwh", "float", "kWh", "part of energy_kwh from the datacenter's "
          "renewables and PPAs (its slot's supply mix, pro rata)", csv=True, since=7),
    Field("battery_kwh", "float", "kWh", "part of energy_kwh from its battery", csv=True,
          since=7),
    Field("grid_kwh", "float", "kWh", "part of energy_kwh from the grid", csv=True, since=7),
    Field("slot", "int", doc="slot index (0 = the scenario's start)"),
    Field("kind", "text", doc="training or inference"),
    Field("home", "text", doc="the job's home datacenter"),
    Field("grid_region", "text", doc="grid region of the datacenter"),
    Field("used_s", "float", "s", "seconds of the slot the job ran or was served"),
    Field("movement_kwh", "float", "kWh", "transfer and restart energy (what the "
          "attribution of a saving calls movement)", since=6),
    Field("remaining", "float", "fraction of the job's work", "work left after the slot "
          "(1 for a service)"),
    Field("limit_saved_kwh", "float", "kWh", "energy the same progress would have taken more "
          "at full power (what the attribution of a saving calls power limits)", since=7),
))
"""One job in one slot: the simulator's plan, the plan CSV (``csv`` fields) and the
store's ``plan_rows`` (``since`` fields)."""

MIGRATION = Record("migration", (
    Field("slot_start", "time", "UTC", "slot in which the data moved", csv=True, since=1,
          required=True),
    Field("job_id", "text", doc="the job", csv=True, since=1, required=True),
    Field("from_region", "text", doc="datacenter the data left", csv=True, since=1,
          required=True),
    Field("to_region", "text", doc="datacenter the data went to", csv=True, since=1,
          required=True),
    Field("checkpoint_gb", "float", "GB", "checkpoint moved", csv=True, since=1),
    Field("dataset_gb", "float", "GB", "dataset moved", csv=True, since=3, default=0.0),
    Field("transfer_gb", "float", "GB", "all data moved", csv=True, since=3),
    Field("transfer_s", "float", "s", "transfer time", csv=True, since=1),
    Field("moved", "text", doc="dataset, checkpoint or dataset+checkpoint", csv=True,
          since=3),
    Field("expected_gain", "float", doc="the policy's expected gain of the move (NaN: none "
          "given)", csv=True, since=1),
    Field("reason", "text", doc="why it moved", csv=True, since=1),
))
"""One data movement between datacenters (a checkpoint move, or a dataset's first trip
away from home): the run's migrations, the migrations CSV and the store's ``migrations``."""

JOB = Record("job", (
    Field("scenario", "text", doc="the job set or scenario it belongs to", since=1,
          required=True),
    Field("job_id", "text", doc="the job", since=1, required=True),
    Field("kind", "text", doc="training or inference", since=1, required=True),
    Field("app", "text", doc="application (its performance profile)", since=1,
          required=True),
    Field("arrival_utc", "time", "UTC", "arrival", since=1, required=True),
    Field("home", "text", doc="home datacenter (where its data lives)", since=1,
          required=True),
    Field("requested_gpus", "int", "GPUs", "GPUs asked for", since=1, required=True),
    Field("gpu_counts", "json", "GPUs", "allowed GPU counts (JSON list)", since=1,
          required=True),
    Field("batch_size", "int", "samples", "requested global batch", since=1, required=True),
    Field("work_samples", "float", "samples", "total work in effective samples", since=1,
          required=True),
    Field("deadline_utc", "time", "UTC", "deadline (none: empty)", since=1),
    Field("checkpoint_gb", "float", "GB", "checkpoint size", since=1, required=True),
    Field("gpu_types", "json", doc="allowed GPU types (JSON list; empty: any)", since=1,
          required=True),
    Field("end_utc", "time", "UTC", "end of an inference service", since=1),
    Field("max_latency_ms", "float", "ms", "latency bound of a service from its home",
          since=1),
    Field("load_fraction", "float", "fraction", "a service's load between idle and max "
          "power", since=1, required=True),
    Field("dataset_gb", "float", "GB", "dataset size", since=3, default=0.0),
))
"""One job as the store keeps it (``jobs``, keyed by set name and job id)."""

JOB_OUTCOME = Record("job_outcome", (
    Field("job_id", "text"), Field("kind", "text"), Field("app", "text"),
    Field("home", "text"),
    Field("arrival", "time", "UTC"), Field("deadline", "time", "UTC"),
    Field("first_start", "time", "UTC", "first slot it ran"),
    Field("finish_time", "time", "UTC", "when a training job finished"),
    Field("jct_h", "float", "h", "completion time after arrival"),
    Field("finished", "bool"),
    Field("deadline_met", "bool", doc="None: no deadline inside the horizon"),
    Field("remaining", "float", "fraction of the job's work"),
    Field("slots_active", "int", "slots"), Field("slots_run", "int", "slots"),
    Field("migrations", "int", "moves", "moves of its checkpoint"),
    Field("energy_kwh", "float", "kWh"), Field("cost", "float", "{currency}"),
    Field("carbon_kg", "float", "kg CO2"), Field("transfer_gb", "float", "GB"),
    Field("lost_s", "float", "s"),
    Field("reason", "text", doc="why it did not finish or was not fully served"),
))
"""One job's outcome in a run (:attr:`workbench.sim.RunResult.jobs`)."""

JOBS_CSV = Record("jobs_csv", (
    Field("job_id", "text", csv=True), Field("kind", "text", csv=True),
    Field("home", "text", csv=True),
    Field("arrival", "time", "UTC", csv=True), Field("deadline", "time", "UTC", csv=True),
    Field("first_start", "time", "UTC", csv=True),
    Field("finish", "time", "UTC", "when a training job finished (empty if it did not; "
          "a service: empty)", csv=True),
    Field("missed", "bool", doc="true when it missed its deadline (finished late, or not "
          "done by a deadline inside the horizon)", csv=True),
    Field("energy_kwh", "float", "kWh", csv=True),
    Field("cost", "float", "{currency}", csv=True),
    Field("carbon_kg", "float", "kg CO2", csv=True),
    Field("transfer_gb", "float", "GB", "all data moved for it", csv=True),
    Field("lost_s", "float", "s", "seconds lost to restarts and transfers", csv=True),
    Field("migrations", "int", "moves", "moves of its checkpoint", csv=True),
))
"""One job in the jobs CSV (``workbench plan --jobs-out``)."""

GRID_ROW = Record("grid", (
    Field("time_utc", "time", "UTC", "start of the interval", since=1, required=True),
    Field("region", "text", doc="grid series name", since=1, required=True),
    Field("price_per_kwh", "float", "{currency}/kWh", "electricity price", since=1),
    Field("currency", "text", doc="ISO currency of the price", since=1),
    Field("carbon_g_per_kwh", "float", "gCO2/kWh", "grid carbon intensity", since=1),
    Field("source", "text", doc="where the row came from", since=1),
))
"""One grid region's price and carbon intensity at one UTC time (``grid_series``, long
format)."""

SITE_SLOT = Record("site_slot", (
    Field("slot_start", "time", "UTC", "start of the slot", csv=True),
    Field("datacenter", "text", doc="the site", csv=True),
    Field("load_kw", "float", "kW", "the site's load: its jobs (IT x PUE, transfers at both "
          "ends) and its idle load", csv=True),
    Field("grid_import_kw", "float", "kW", "what it imports at its grid connection: the "
          "load plus battery charging less own supply and battery discharge", csv=True),
    Field("price_per_kwh", "float", "{currency}/kWh", "the grid's price", csv=True),
    Field("carbon_g_per_kwh", "float", "gCO2/kWh", "the grid's carbon intensity", csv=True),
    Field("grid_kwh", "float", "kWh", "energy imported", csv=True),
    Field("renewable_kwh", "float", "kWh", "own renewables and PPAs used", csv=True),
    Field("curtailed_kwh", "float", "kWh", "surplus renewables thrown away", csv=True),
    Field("exported_kwh", "float", "kWh", "surplus renewables sold", csv=True),
    Field("charge_kwh", "float", "kWh", "into the battery", csv=True),
    Field("discharge_kwh", "float", "kWh", "out of the battery", csv=True),
    Field("soc_kwh", "float", "kWh", "battery state of charge at the slot's end", csv=True),
    Field("grid_charge", "float", "{currency}", "grid energy at the grid's price (the "
          "bill's energy part)", csv=True),
    Field("ppa_charge", "float", "{currency}", "own supply's settlement, take-or-pay "
          "included", csv=True),
    Field("export_credit", "float", "{currency}", "exported energy at the export price",
          csv=True),
    Field("energy_charge", "float", "{currency}", "grid_charge + ppa_charge - "
          "export_credit", csv=True),
    Field("carbon_kg", "float", "kg CO2", "carbon of what came from where", csv=True),
    Field("no_jobs_grid_kwh", "float", "kWh", "the same site running no job: energy "
          "imported", csv=True),
    Field("no_jobs_energy_charge", "float", "{currency}", "the same site running no job: "
          "energy charge", csv=True),
    Field("no_jobs_carbon_kg", "float", "kg CO2", "the same site running no job: carbon",
          csv=True),
))
"""One datacenter in one slot as the site meter reads it (:mod:`workbench.meter`): the
slot records hold each field but ``slot_start`` and ``datacenter`` as
``site:<field>:<datacenter>`` (:func:`site_key`); the sites CSV (``plan --sites-out``) is
one row per site and slot. Demand and capacity charges are on the metered peaks over the
billing period, so they are in the bill (:mod:`workbench.bill`), not in a slot's row."""


def site_key(field: str, datacenter: str) -> str:
    """The slot record's key of one :data:`SITE_SLOT` field of one datacenter."""
    return f"site:{field}:{datacenter}"


PLAN_STORED_COLUMNS: tuple[str, ...] = tuple(n for n in PLAN_ROW.names
                                             if n not in ("slot_start", "slot_end"))
"""Plan columns the simulator accumulates (``slot_start``/``slot_end`` follow from
``slot``)."""

PLAN_EXTRA_COLUMNS: tuple[str, ...] = tuple(n for n in PLAN_ROW.names
                                            if n not in PLAN_ROW.csv_names)
"""Columns of :attr:`workbench.sim.RunResult.plan` beyond the plan CSV's."""
