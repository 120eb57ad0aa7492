"""The store's jobs: job sets (imported traces) and scenarios' jobs, one row per job
(:data:`workbench.schema.JOB`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pandas as pd

from workbench.model import Job, as_utc
from workbench.store.base import StoreBase, insert_frame, naive_utc, records


def job_row(set_name: str, job: Job) -> dict[str, Any]:
    """A job as a row of the ``jobs`` table (the fields of :data:`workbench.schema.JOB`)."""
    return {
        "scenario": set_name, "job_id": job.job_id, "kind": job.kind, "app": job.app,
        "arrival_utc": naive_utc(job.arrival), "home": job.home,
        "requested_gpus": job.requested_gpus, "gpu_counts": json.dumps(list(job.gpu_counts)),
        "batch_size": job.batch_size, "work_samples": job.work_samples,
        "deadline_utc": naive_utc(job.deadline), "checkpoint_gb": job.checkpoint_gb,
        "gpu_types": json.dumps(list(job.gpu_types)), "end_utc": naive_utc(job.end),
        "max_latency_ms": job.max_latency_ms, "load_fraction": job.load_fraction,
        "dataset_gb": job.dataset_gb,
    }


def job_from_row(r: dict[str, Any]) -> Job:
    """The :class:`~workbench.model.Job` of a ``jobs`` row (:func:`job_row` inverted)."""
    return Job(
        job_id=r["job_id"], kind=r["kind"], app=r["app"], arrival=as_utc(r["arrival_utc"]),
        home=r["home"], requested_gpus=int(r["requested_gpus"]),
        gpu_counts=tuple(json.loads(r["gpu_counts"])), batch_size=int(r["batch_size"]),
        work_samples=float(r["work_samples"]),
        deadline=None if r["deadline_utc"] is None else as_utc(r["deadline_utc"]),
        checkpoint_gb=float(r["checkpoint_gb"]), gpu_types=tuple(json.loads(r["gpu_types"])),
        end=None if r["end_utc"] is None else as_utc(r["end_utc"]),
        max_latency_ms=r["max_latency_ms"], load_fraction=float(r["load_fraction"]),
        dataset_gb=float(r.get("dataset_gb") or 0.0),
    )


class JobTables(StoreBase):
    """Jobs under a job-set or scenario name."""

    def write_jobs(self, set_name: str, jobs: Iterable[Job], replace: bool = False) -> int:
        """Insert or update jobs under a job-set (or scenario) name, in one transaction;
        ``replace`` first empties the set. Returns the number of jobs written."""
        rows = pd.DataFrame([job_row(set_name, j) for j in jobs])
        with self.transaction() as con:
            if replace:
                con.execute("DELETE FROM jobs WHERE scenario = ?", [set_name])
            insert_frame(con, "jobs", rows, or_replace=True)
        return len(rows)

    def job_ids(self, set_name: str) -> set[str]:
        """The job ids stored under a job-set or scenario name."""
        return {str(r[0]) for r in self.con.execute(
            "SELECT job_id FROM jobs WHERE scenario = ?", [set_name]).fetchall()}

    def load_jobs(self, set_name: str) -> list[Job]:
        """The jobs stored under a job-set or scenario name, by arrival."""
        return [job_from_row(r) for r in records(
            self.con, "SELECT * EXCLUDE (scenario) FROM jobs WHERE scenario = ? "
            "ORDER BY arrival_utc, job_id", set_name)]

    def job_sets(self) -> pd.DataFrame:
        """Stored job sets (and scenarios' jobs): name, jobs, training, inference, span."""
        return self.con.execute(
            """SELECT scenario AS name, count(*) AS jobs,
                      count(*) FILTER (WHERE kind = 'training') AS training,
                      count(*) FILTER (WHERE kind = 'inference') AS inference,
                      min(arrival_utc) AS first_arrival_utc, max(arrival_utc) AS
                      last_arrival_utc,
                      scenario IN (SELECT name FROM scenarios) AS is_scenario
               FROM jobs GROUP BY scenario ORDER BY scenario""").df()

    def job_set_sizes(self) -> dict[str, int]:
        """Job sets (names in ``jobs`` that are not scenarios) and their numbers of jobs."""
        rows = self.con.execute(
            "SELECT scenario, count(*) FROM jobs WHERE scenario NOT IN "
            "(SELECT name FROM scenarios) GROUP BY scenario ORDER BY scenario").fetchall()
        return {str(r[0]): int(r[1]) for r in rows}
