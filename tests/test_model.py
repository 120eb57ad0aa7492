"""Domain records validate themselves and say what to fix."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from workbench.model import Datacenter, GpuPool, Job, Link, ScenarioError

T0 = datetime(2025, 7, 1, tzinfo=UTC)


def _job(**kw) -> Job:
    base = dict(job_id="j", kind="training", app="cifar10", arrival=T0, home="a",
                requested_gpus=2, gpu_counts=(1, 2), batch_size=64, work_samples=1e6,
                deadline=T0 + timedelta(hours=5))
    base.update(kw)
    return Job(**base)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"requested_gpus": 4}, "requested_gpus 4 is not in gpu_counts"),
        ({"work_samples": 0.0}, "work_samples must be a positive number"),
        ({"deadline": T0}, "is not after arrival"),
        ({"kind": "batch"}, "kind must be one of"),
        ({"kind": "inference", "end": None}, "needs an end time"),
        ({"gpu_counts": (0, 2)}, "gpu_counts must be a non-empty list"),
    ],
)
def test_job_errors_say_what_to_fix(kw, message) -> None:
    with pytest.raises(ScenarioError, match=message):
        _job(**kw)


def test_naive_times_are_utc_and_menus_sorted() -> None:
    job = _job(arrival=datetime(2025, 7, 1), gpu_counts=(2, 1, 2))
    assert job.arrival.tzinfo is UTC and job.gpu_counts == (1, 2)


def test_site_records() -> None:
    with pytest.raises(ScenarioError, match="pue must be between"):
        Datacenter("a", "r", "Z", "UTC", pue=0.9)
    with pytest.raises(ScenarioError, match="max_power_w .* is below idle_power_w"):
        GpuPool("a", "A100", 8, idle_power_w=500, max_power_w=400)
    with pytest.raises(ScenarioError, match="bandwidth_gbps must be a positive"):
        Link("a", "b", 0.0, 10.0)
    assert Link("a", "b", 80.0, 10.0).transfer_s(10.0) == pytest.approx(1.0)


def test_scenario_cross_checks(seed3) -> None:
    bad_job = replace(seed3.jobs[0], home="atlantis")
    with pytest.raises(ScenarioError, match="home 'atlantis' is not a datacenter"):
        replace(seed3, jobs=(bad_job, *seed3.jobs[1:]))
    with pytest.raises(ScenarioError, match="duplicate job_id"):
        replace(seed3, jobs=(seed3.jobs[0], *seed3.jobs))
    with pytest.raises(ScenarioError, match="grid cube lacks regions"):
        replace(seed3, grid=seed3.grid.sel(region=["guangdong"]))
    assert seed3.slot_of(seed3.start + timedelta(minutes=31)) == 2
    assert seed3.latency_ms("guangzhou", "guiyang") == seed3.latency_ms("guiyang", "guangzhou")
