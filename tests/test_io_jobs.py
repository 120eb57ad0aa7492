"""Job-trace importers: real files, the mapping to jobs, job sets in the store."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from workbench import perf
from workbench.io.errors import InputError
from workbench.io.jobs import (
    POLLUX_WORK_SAMPLES,
    import_jobs,
    job_sets,
    jobs_from_trace,
    load_job_set,
    read_alibaba_pods,
    read_gaia,
    read_philly,
    read_pollux_workload,
)
from workbench.store import Store

PROFILES = perf.load_default_profiles()
POLLUX = "name,time,application,num_replicas,batch_size\n"


def _snapshot(store: Store) -> pd.DataFrame:
    return store.table("jobs").sort_values(["scenario", "job_id"]).reset_index(drop=True)


def _write(tmp_path: Path, text: str, name: str = "w.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.shared_data
def test_real_pollux_workloads(shared_data: Path) -> None:
    for folder, rows in (("workloads", 160), ("workloads-0.5", 80), ("workloads-1.5", 240)):
        trace = read_pollux_workload(shared_data / "jobs/pollux" / folder / "workload-6.csv")
        assert len(trace.frame) == rows
    raw = pd.read_csv(shared_data / "jobs/pollux/workloads/workload-6.csv")
    path = shared_data / "jobs/pollux/workloads/workload-6.csv"
    jobs = jobs_from_trace(read_pollux_workload(path), PROFILES)
    assert [j.job_id for j in jobs] == list(raw["name"])
    assert [j.requested_gpus for j in jobs] == list(raw["num_replicas"])
    assert all(j.work_samples == POLLUX_WORK_SAMPLES[j.app] for j in jobs)
    assert all(j.deadline is not None and j.deadline > j.arrival for j in jobs)


@pytest.mark.shared_data
def test_pollux_work_targets_match_the_validation_files(shared_data: Path) -> None:
    root = shared_data / "profiles/pollux"
    for app, work in POLLUX_WORK_SAMPLES.items():
        files = sorted(root.glob(f"{app}/validation-*.csv"),
                       key=lambda p: int(p.stem.split("-")[1]))
        m0 = int(files[0].stem.split("-")[1])
        assert work == pd.read_csv(files[0])["progress"].max() * m0


@pytest.mark.slow
@pytest.mark.shared_data
def test_real_philly(shared_data: Path) -> None:
    trace = read_philly(shared_data / "jobs/pollux/philly.csv")
    raw = pd.read_csv(shared_data / "jobs/pollux/philly.csv")
    assert len(trace.frame) == len(raw) == 82247
    assert trace.frame["gpus"].max() == 128 and trace.frame["gpus"].min() == 1
    assert trace.frame["duration_s"].sum() == raw["duration"].sum()
    with Store(":memory:") as store:
        info = import_jobs(store, "philly", shared_data / "jobs/pollux/philly.csv", "philly",
                           limit=300, app="cifar10")
        assert info.jobs == 300
        assert info.first_arrival == datetime(2017, 9, 4, 10, 30, 41, tzinfo=UTC)


@pytest.mark.shared_data
def test_real_alibaba_pods(shared_data: Path) -> None:
    trace = read_alibaba_pods(shared_data / "jobs/alibaba-v2023/openb_pod_list_default.csv")
    raw = pd.read_csv(shared_data / "jobs/alibaba-v2023/openb_pod_list_default.csv")
    gpu = raw[raw["num_gpu"] > 0]
    ran = gpu[gpu["scheduled_time"].notna() & (gpu["deletion_time"] > gpu["scheduled_time"])]
    assert len(trace.frame) == len(ran) == 6203
    assert trace.skipped == {"cpu-only": 1088, "never scheduled": 861, "no run time": 0}
    assert set(trace.frame["gpus"]) == {1, 2, 4, 8}


@pytest.mark.shared_data
def test_real_gaia(shared_data: Path) -> None:
    trace = read_gaia(shared_data / "jobs/gaia/pai_1k.csv")
    assert len(trace.frame) == 1000
    assert trace.frame["arrival_s"].max() == 604756.0
    jobs = jobs_from_trace(trace, PROFILES, app="bert", slack=0)
    prof = next(p for p in PROFILES if p.app == "bert" and p.gpu_type == "A100")
    j = jobs[0]
    rate = float(perf.ecu(prof, j.requested_gpus, j.batch_size, 0.0))
    assert j.work_samples == pytest.approx(rate * 6302.0)
    assert all(j.deadline is None for j in jobs)


def test_mapping_rules(tmp_path: Path) -> None:
    path = _write(tmp_path, POLLUX + "a,0,cifar10,4,999999\nb,60,ncf,1,256\nc,120,bert,2,12\n")
    start = datetime(2024, 1, 1, tzinfo=UTC)
    jobs = jobs_from_trace(read_pollux_workload(path), PROFILES, start=start,
                           homes=["x", "y"], slack=3.0)
    assert [j.home for j in jobs] == ["x", "y", "x"]
    assert jobs[1].arrival == datetime(2024, 1, 1, 0, 1, tzinfo=UTC)
    prof = next(p for p in PROFILES if p.app == "cifar10" and p.gpu_type == "A100")
    assert jobs[0].batch_size == perf.batch_bounds(prof, 4)[1]  # clipped to the feasible range
    assert jobs[0].gpu_counts == (1, 2, 4, 8)
    duration = POLLUX_WORK_SAMPLES["cifar10"] / float(perf.ecu(prof, 4, jobs[0].batch_size))
    assert (jobs[0].deadline - jobs[0].arrival).total_seconds() == pytest.approx(3 * duration)


@pytest.mark.parametrize(("text", "pattern"), [
    (POLLUX + "a,0,cifar10,0,128\n", r"line 2, column 'num_replicas'.*whole number in 1..4096"),
    (POLLUX + "a,0,gpt9,1,128\n", r"line 2, column 'application'.*unknown application 'gpt9'"),
    (POLLUX + "a,0,cifar10,1,128\na,5,cifar10,1,128\n", r"line 3.*appears twice"),
    (POLLUX + "a,-5,cifar10,1,128\n", r"line 2, column 'time'.*negative"),
    (POLLUX + "a,,cifar10,1,128\n", r"line 2, column 'time'.*missing"),
    ("name;time;application\n", r"';'-delimited"),
    ("", r"empty"),
    ("name,when\na,1\n", r"no column 'time'"),
    (POLLUX + "a,0,cifar10,99999999999999999999,128\n", r"line 2.*whole number in 1..4096"),
    (POLLUX + "a,99999999999999999999,cifar10,1,128\n", r"line 2.*more than a century"),
])
def test_bad_workload(tmp_path: Path, text: str, pattern: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(InputError, match=pattern):
        read_pollux_workload(path)


@pytest.mark.parametrize("text", [
    "arrival_time,length,cpus\n0,99999999999999999999,1\n",
    "arrival_time,length,cpus\n1e300,5,1\n",
    "arrival_time,length,cpus\n0,5,1.5\n",
])
def test_bad_gaia_values(tmp_path: Path, text: str) -> None:
    with pytest.raises(InputError, match="line 2"):
        jobs_from_trace(read_gaia(_write(tmp_path, text)), PROFILES)


def test_job_set_import_is_idempotent_atomic_and_separate(tmp_path: Path) -> None:
    good = _write(tmp_path, POLLUX + "a,0,cifar10,2,256\nb,30,ncf,1,256\n")
    bad = _write(tmp_path, POLLUX + "c,0,cifar10,2,256\nd,x,ncf,1,256\n", "bad.csv")
    with Store(":memory:") as store:
        info = import_jobs(store, "pollux-workload", good, "w", homes=["h1"])
        assert info.jobs == 2 and info.apps == {"cifar10": 1, "ncf": 1}
        before = _snapshot(store)
        import_jobs(store, "pollux-workload", good, "w", homes=["h1"])
        pd.testing.assert_frame_equal(_snapshot(store), before)
        with pytest.raises(InputError, match="bad.csv, line 3, column 'time'"):
            import_jobs(store, "pollux-workload", bad, "w")
        pd.testing.assert_frame_equal(_snapshot(store), before)
        assert job_sets(store) == {"w": 2}
        loaded = load_job_set(store, "w")
        assert [j.job_id for j in loaded] == ["a", "b"] and loaded[0].home == "h1"
        store.con.execute("INSERT INTO scenarios (name, start_utc, slot_s, n_slots, currency, "
                          "description) VALUES ('sc', '2024-01-01', 900, 4, 'USD', '')")
        with pytest.raises(InputError, match="'sc' is a scenario"):
            import_jobs(store, "pollux-workload", good, "sc")
        with pytest.raises(InputError, match="--reference-gpu"):
            import_jobs(store, "pollux-workload", good, "w2", reference_gpu="TPU9")
        with pytest.raises(InputError, match="unknown job format"):
            import_jobs(store, "slurm", good, "w2")
        pd.testing.assert_frame_equal(_snapshot(store), before)
