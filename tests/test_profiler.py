"""The NVML sampling loop with a fake device, and the no-GPU path of `workbench profile`."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

import workbench.measure.nvml as nvml
from workbench.cli import main
from workbench.measure import (
    GpuSample,
    NoGpuError,
    profile_command,
    profile_for,
    sample_loop,
    summarise,
)


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, dt: float) -> None:
        self.t += dt


class FakeDevice:
    """Two GPUs drawing 100 W and 200 W with an energy counter that follows the clock."""

    def __init__(self, clock: FakeClock, counter: bool = True) -> None:
        self.clock, self.counter, self.closed = clock, counter, False

    def device_count(self) -> int:
        return 2

    def read(self, index: int) -> GpuSample:
        p = 100.0 * (index + 1)
        e = 5000.0 + p * self.clock.t if self.counter else float("nan")
        return GpuSample(power_w=p, energy_j=e, util_pct=50.0, mem_used_mb=1024.0,
                         sm_clock_mhz=1410.0)

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("counter", [True, False])
def test_profile_for_fake_device(counter: bool) -> None:
    clock = FakeClock()
    dev = FakeDevice(clock, counter)
    res = profile_for("idle", duration_s=2.0, interval_s=0.1, device=dev, clock=clock,
                      sleep=clock.sleep)
    assert dev.closed
    assert list(res.samples.columns) == list(nvml.SAMPLE_COLUMNS)
    assert res.samples.groupby("gpu_index").size().tolist() == [21, 21]
    s = res.summary
    assert s["duration_s"] == pytest.approx(2.0)
    assert s["energy_j"] == pytest.approx(300.0 * 2.0)  # counter or trapezoid, same answer
    assert s["mean_power_w"] == pytest.approx(300.0)
    assert s["n_gpus"] == 2 and s["name"] == "idle"


def test_sample_loop_takes_two_rounds_even_when_stopped_at_once() -> None:
    clock = FakeClock()
    frame = sample_loop(FakeDevice(clock), 0.5, lambda: True, clock, clock.sleep)
    assert frame["t_s"].unique().tolist() == [0.0, 0.5]
    with pytest.raises(ValueError):
        sample_loop(FakeDevice(clock), 0.0, lambda: True)


def test_profile_command_runs_the_command() -> None:
    clock = FakeClock()
    res, rc = profile_command("py", [sys.executable, "-c", "import sys; sys.exit(4)"],
                              interval_s=0.01, device=FakeDevice(clock))
    assert rc == 4 and res.summary["command"].endswith("sys.exit(4)")
    assert res.summary["n_gpus"] == 2


def test_summarise_empty() -> None:
    s = summarise("x", pd.DataFrame(columns=list(nvml.SAMPLE_COLUMNS)), pd.Timestamp.now(), "")
    assert s["energy_j"] == 0 and s["n_gpus"] == 0


def _no_gpu() -> None:
    raise NoGpuError("NVML Shared Library Not Found")


def test_cli_no_gpu_exits_3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(nvml, "NvmlBackend", _no_gpu)
    rc = main(["--db", str(tmp_path / "w.duckdb"), "profile", "--name", "x", "--duration", "1"])
    out = capsys.readouterr()
    assert rc == 3
    lines = (out.out + out.err).strip().splitlines()
    assert lines == ["no NVIDIA GPU/driver found: NVML Shared Library Not Found"]
    assert "Traceback" not in out.err


def test_cli_no_gpu_still_runs_the_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(nvml, "NvmlBackend", _no_gpu)
    marker = tmp_path / "ran"
    rc = main(["--db", str(tmp_path / "w.duckdb"), "profile", "--name", "x", "--",
               sys.executable, "-c", f"open({str(marker)!r}, 'w'); raise SystemExit(4)"])
    assert rc == 4 and marker.exists()
    assert "power was not sampled" in capsys.readouterr().err


def test_real_backend_without_driver_raises_no_gpu_error() -> None:
    try:
        backend = nvml.NvmlBackend()
    except NoGpuError:
        return
    backend.close()
    pytest.skip("an NVIDIA GPU is present here")


def test_cli_profile_writes_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    clock = FakeClock()
    monkeypatch.setattr(nvml, "NvmlBackend", lambda: FakeDevice(clock))
    monkeypatch.setattr(nvml.time, "sleep", clock.sleep)
    monkeypatch.setattr(nvml.time, "monotonic", clock)
    db = tmp_path / "w.duckdb"
    rc = main(["--db", str(db), "profile", "--name", "fake", "--interval-ms", "100",
               "--duration", "1"])
    assert rc == 0
    assert "mean power 300.0 W" in capsys.readouterr().out
    from workbench.store import Store

    with Store(db) as store:
        runs = store.table("gpu_profile_runs")
        samples = store.table("gpu_profile_samples")
    assert runs["name"].tolist() == ["fake"] and len(samples) in (22, 24)


@pytest.mark.parametrize("argv", [["--name", "x"], ["--name", "x", "--duration", "1", "--",
                                                    "true"]])
def test_cli_profile_needs_exactly_one_mode(argv: list[str], tmp_path: Path) -> None:
    assert main(["--db", str(tmp_path / "w.duckdb"), "profile", *argv]) == 2
