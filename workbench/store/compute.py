"""The store's measurements: NVML profiling sessions, operator-added devices and timed
training steps (:mod:`workbench.measure`, :mod:`workbench.compute`)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import pandas as pd

from workbench.store.base import StoreBase, insert_frame, naive_utc
from workbench.store.errors import StoreError
from workbench.store.schema import COMPUTE_MEASUREMENTS


class ComputeTables(StoreBase):
    """Profiling sessions, device specs and step-time measurements."""

    def save_gpu_profile(self, summary: dict[str, Any], samples: pd.DataFrame) -> str:
        """Store one NVML profiling session (summary row and its samples); returns its id."""
        profile_id = uuid.uuid4().hex[:12]
        row = pd.DataFrame([{
            "profile_id": profile_id, "name": summary["name"],
            "started_utc": naive_utc(summary.get("started_utc")),
            "duration_s": summary.get("duration_s"), "mean_power_w": summary.get("mean_power_w"),
            "energy_j": summary.get("energy_j"), "n_gpus": summary.get("n_gpus"),
            "command": summary.get("command"),
        }])
        frame = samples.copy()
        frame.insert(0, "profile_id", profile_id)
        with self.transaction() as con:
            insert_frame(con, "gpu_profile_runs", row)
            insert_frame(con, "gpu_profile_samples", frame)
        return profile_id

    def save_device(self, name: str, spec_json: str) -> None:
        """Insert or replace one device spec (JSON text) under ``name``."""
        with self.transaction() as con:
            con.execute("INSERT OR REPLACE INTO devices (name, spec) VALUES (?, ?)",
                        [name, spec_json])

    def delete_device(self, name: str) -> None:
        """Remove the device stored under ``name`` (none: nothing happens)."""
        with self.transaction() as con:
            con.execute("DELETE FROM devices WHERE name = ?", [name])

    def device_specs(self) -> list[str]:
        """The stored device specs (JSON text), by name."""
        return [str(r[0]) for r in self.con.execute(
            "SELECT spec FROM devices ORDER BY name").fetchall()]

    def save_measurement(self, row: Mapping[str, Any]) -> None:
        """Insert one step-time measurement: a row of ``compute_measurements`` by column
        name (``measured_utc`` naive UTC)."""
        unknown = sorted(set(row) - set(COMPUTE_MEASUREMENTS.names))
        if unknown:
            raise StoreError(f"compute_measurements has no columns {unknown}")
        with self.transaction() as con:
            insert_frame(con, "compute_measurements", pd.DataFrame([dict(row)]))

    def measurements(self, app: str | None = None, device: str | None = None
                     ) -> pd.DataFrame:
        """Stored step-time measurements, optionally of one app and/or device, oldest
        first."""
        q = "SELECT * FROM compute_measurements WHERE 1=1"
        args: list[Any] = []
        if app is not None:
            q += " AND app = ?"
            args.append(app)
        if device is not None:
            q += " AND device = ?"
            args.append(device)
        return self.con.execute(q + " ORDER BY measured_utc", args).df()
