"""The store's performance profiles: one :class:`workbench.perf.JobProfile` per
application and GPU type (its parameters as JSON)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

import pandas as pd

from workbench.store.base import Connection, StoreBase, insert_frame


def upsert_profiles(con: Connection, profiles: Iterable[Any]) -> int:
    """Insert or replace profiles inside the caller's transaction; returns how many."""
    rows = [
        {"app": p.app, "gpu_type": p.gpu_type,
         "params": json.dumps({"throughput": asdict(p.throughput), "sync_names": "pollux",
                               "efficiency": asdict(p.efficiency),
                               "energy": asdict(p.energy),
                               "step_time_interval": getattr(p, "step_time_interval", None)}),
         "source": p.source, "derived": bool(p.derived)}
        for p in profiles
    ]
    insert_frame(con, "profiles", pd.DataFrame(rows), or_replace=True)
    return len(rows)


class ProfileTables(StoreBase):
    """Performance profiles: write (replace) and read."""

    def save_profiles(self, profiles: Iterable[Any]) -> int:
        """Insert or replace performance profiles (:class:`workbench.perf.JobProfile`)."""
        with self.transaction() as con:
            return upsert_profiles(con, profiles)

    def load_profiles(self) -> list[Any]:
        """Every stored profile as :class:`workbench.perf.JobProfile`."""
        from workbench.perf import EfficiencyParams, EnergyParams, JobProfile, throughput_from_dict

        out = []
        for app, gpu, params, source, derived in self.con.execute(
            "SELECT app, gpu_type, params, source, derived FROM profiles ORDER BY app, gpu_type"
        ).fetchall():
            d = json.loads(params)
            eff = dict(d["efficiency"])
            eff["phi_progress"] = tuple(eff["phi_progress"])
            eff["phi_values"] = tuple(eff["phi_values"])
            out.append(JobProfile(
                app=app, gpu_type=gpu,
                # A profile stored before the sync terms took Pollux's names lacks the mark.
                throughput=throughput_from_dict(d["throughput"],
                                                pollux_names=d.get("sync_names") == "pollux"),
                efficiency=EfficiencyParams(**eff), energy=EnergyParams(**d["energy"]),
                derived=bool(derived), source=source or "",
                step_time_interval=(None if d.get("step_time_interval") is None
                                    else tuple(d["step_time_interval"])),
            ))
        return out

    def profile_summary(self) -> pd.DataFrame:
        """Stored performance profiles: app, GPU type, derived flag and source."""
        return self.con.execute(
            "SELECT app, gpu_type, derived, source FROM profiles ORDER BY app, gpu_type").df()
