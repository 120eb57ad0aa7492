"""The scenario TOML schema: every bad value is one line naming the key and the fix (exit 2)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.cli import main
from workbench.config import ConfigError, validate_config

GOOD = {
    "scenario": {"start": "2023-01-01T00:00:00Z", "days": 1},
    "datacenters": [{"name": "a", "region": "R", "pue": 1.2}],
    "jobs": {"set": "w"},
}

SCENARIO = '[scenario]\nstart = "2023-01-01T00:00:00Z"\n{scenario}\n' \
    '[[datacenters]]\nname = "a"\nregion = "R"\n{dc}\n[jobs]\nset = "w"\n{jobs}\n'

CASES = [
    ("empty", "", r"empty\.toml is empty; a config needs \[scenario\]"),
    ("no start", '[scenario]\ndays = 1\n[[datacenters]]\nname="a"\nregion="R"\npue=1.2\n',
     r"\[scenario\] lacks 'start'; give an ISO time"),
    ("days text", SCENARIO.format(scenario='days = "three"', dc="pue = 1.2", jobs=""),
     r"\[scenario\] days: 'three' is not a number; give the horizon in days"),
    ("slot text", SCENARIO.format(scenario='days = 1\nslot_minutes = "x"', dc="pue = 1.2",
                                  jobs=""), r"\[scenario\] slot_minutes: 'x' is not a number"),
    ("pue text", SCENARIO.format(scenario="days = 1", dc='pue = "abc"', jobs=""),
     r"\[\[datacenters\]\] entry 0 pue: 'abc' is not a number; give the PUE"),
    ("slot nan", SCENARIO.format(scenario="days = 1\nslot_minutes = nan", dc="pue = 1.2",
                                 jobs=""), r"slot_minutes: nan is not a finite number"),
    ("slot inf", SCENARIO.format(scenario="days = 1\nslot_minutes = inf", dc="pue = 1.2",
                                 jobs=""), r"slot_minutes: inf is not a finite number"),
    ("offset nan", SCENARIO.format(scenario="days = 1", dc="pue = 1.2",
                                   jobs="offset_hours = nan"),
     r"\[jobs\] offset_hours: nan is not a finite number"),
    ("deadline inf", SCENARIO.format(scenario="days = 1", dc="pue = 1.2",
                                     jobs="min_deadline_h = inf"),
     r"\[jobs\] min_deadline_h: inf is not a finite number"),
    ("work_scale nan", SCENARIO.format(scenario="days = 1", dc="pue = 1.2",
                                       jobs="work_scale = nan"),
     r"\[jobs\] work_scale: nan is not a finite number"),
    ("limit -1", SCENARIO.format(scenario="days = 1", dc="pue = 1.2", jobs="limit = -1"),
     r"\[jobs\] limit: -1 must be greater than or equal to 1"),
    ("Mars", SCENARIO.format(scenario="days = 1", dc='pue = 1.2\ntimezone = "Mars/Olympus"',
                             jobs=""), r"timezone: 'Mars/Olympus' is invalid: unknown timezone"),
    ("two horizons", SCENARIO.format(scenario="days = 1\nhours = 3", dc="pue = 1.2", jobs=""),
     r"needs exactly one of end, days, hours \(has \['days', 'hours'\]\)"),
    ("bad start", SCENARIO.replace("2023-01-01T00:00:00Z", "yesterday").format(
        scenario="days = 1", dc="pue = 1.2", jobs=""), r"start: 'yesterday' is invalid"),
    ("pue below 1", SCENARIO.format(scenario="days = 1", dc="pue = 0.5", jobs=""),
     r"pue: 0.5 must be greater than or equal to 1"),
    # A repeated name was reported as "homes ... are not datacenters"; a repeated link
    # silently kept the last one.
    ("two sites one name", SCENARIO.format(
        scenario="days = 1", dc='pue = 1.2\n[[datacenters]]\nname = "a"\nregion = "S"\n'
        "pue = 1.3", jobs=""),
     r"\[\[datacenters\]\] entry 1 name: 'a' repeats entry 0; give every datacenter its own"),
    ("two links one pair", SCENARIO.format(
        scenario="days = 1", dc='pue = 1.2\n[[datacenters]]\nname = "b"\nregion = "S"\n'
        'pue = 1.3\n[[links]]\nsrc = "a"\ndst = "b"\nlatency_ms = 5.0\n'
        '[[links]]\nsrc = "b"\ndst = "a"\nlatency_ms = 9.0', jobs=""),
     r"\[\[links\]\] entry 1 src/dst: a and b repeats entry 0; give each pair"),
]


@pytest.mark.parametrize("name,text,message", CASES, ids=[c[0] for c in CASES])
def test_bad_configs_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, message: str,
) -> None:
    path = tmp_path / ("empty.toml" if name == "empty" else "c.toml")
    path.write_text(text)
    db = str(tmp_path / "wb.duckdb")
    assert main(["--db", db, "scenario", "build", "x", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert re.search(message, err), err


def test_binary_config_and_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = tmp_path / "b.toml"
    binary.write_bytes(bytes(range(256)))
    db = str(tmp_path / "wb.duckdb")
    assert main(["--db", db, "scenario", "build", "x", "--config", str(binary)]) == 2
    assert "not UTF-8 text" in capsys.readouterr().err
    assert main(["--db", db, "scenario", "build", "x", "--config", str(tmp_path)]) == 2
    assert "is a folder; pass the .toml file" in capsys.readouterr().err


def test_good_config_validates() -> None:
    cfg = validate_config(GOOD)
    assert cfg.scenario.slot_minutes == 60 and cfg.datacenters[0].timezone == "UTC"


@settings(max_examples=50, deadline=None)
@given(st.one_of(st.floats(), st.text(max_size=5), st.integers(), st.none(), st.booleans()))
def test_any_pue_either_validates_or_names_the_key(value: object) -> None:
    cfg = {**GOOD, "datacenters": [{"name": "a", "region": "R", "pue": value}]}
    try:
        out = validate_config(cfg)
    except ConfigError as exc:
        assert str(exc).startswith("[[datacenters]] entry 0") and "\n" not in str(exc)
    else:
        assert 1.0 <= out.datacenters[0].pue <= 3.0


# -- issue 25, item 6: the slot count is bounded by the machine's memory ---------------------


def test_a_horizon_of_more_slots_than_memory_holds_is_refused_with_the_numbers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """1-second slots over 3,660 days (316 M slots) passed validation and ended in
    `unexpected MemoryError`."""
    from workbench.config import PLAN_BYTES_PER_SLOT, machine_memory_bytes

    huge = {**GOOD, "scenario": {"start": "2023-01-01T00:00:00Z", "days": 3660,
                                 "slot_minutes": 1 / 60}}
    with pytest.raises(ConfigError) as err:
        validate_config(huge)
    text = str(err.value)
    assert text.startswith("[scenario] 316,224,000 slots of 1 s over 3,660 days need about "
                           f"{316_224_000 * PLAN_BYTES_PER_SLOT / 2**30:,.0f} GiB"), text
    assert f"this machine's {machine_memory_bytes() / 2**30:,.1f} GiB" in text
    assert "use longer slots (slot_minutes = " in text
    # The bound follows the memory given: 64 MiB hold 8,192 slots of 4 KiB at half.
    week = {**GOOD, "scenario": {"start": "2023-01-01T00:00:00Z", "days": 7,
                                 "slot_minutes": 1}}
    with pytest.raises(ConfigError, match=r"10,080 slots of 60 s over 7 days .* of this "
                       r"machine's 0\.1 GiB allows \(8,192 slots\); use longer slots "
                       r"\(slot_minutes = 5 gives 2,016 slots\)"):
        validate_config(week, memory_bytes=64 * 2**20)
    assert validate_config(week, memory_bytes=128 * 2**20).scenario.slot_minutes == 1
    # From the command line: one line, exit 2.
    path = tmp_path / "huge.toml"
    path.write_text(SCENARIO.format(scenario="days = 3660\nslot_minutes = 0.0166666666666667",
                                    dc="pue = 1.2", jobs=""))
    assert main(["--db", str(tmp_path / "wb.duckdb"), "scenario", "build", "x", "--config",
                 str(path)]) == 2
    out = capsys.readouterr().err
    assert out.count("\n") == 1 and "316,224,000 slots" in out


class _FakeCluster:
    """Stands for ``distributed.LocalCluster``: records the workers asked, starts none."""

    started: list[int] = []

    def __init__(self, n_workers: int, **kw: object) -> None:
        _FakeCluster.started.append(n_workers)

    def close(self) -> None:
        return None


class _FakeClient:
    def __init__(self, *a: object, **kw: object) -> None:
        return None

    def close(self) -> None:
        return None

    def submit(self, *a: object, **kw: object) -> object:
        raise _Started


class _Started(Exception):
    """The cluster was made; the test has what it needs."""


def _sweep_cluster() -> None:
    from workbench import sweep

    sweep._connect(None, 1024, 1, True)


def _groups_cluster() -> None:
    from workbench.policies.grouped import GroupedLookahead
    from workbench.scenarios import build_seed3

    GroupedLookahead(workers=1024).reset(build_seed3().view())


@pytest.mark.parametrize("start", [_sweep_cluster, _groups_cluster], ids=["sweep", "groups"])
def test_every_local_cluster_has_at_most_a_worker_per_core(
        start: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 35 item 3: 1,024 workers asked of a two-core machine start two (and say so
    once); the sweep and frontier (``workbench.sweep``) and the grouped look-ahead's
    cluster are every place a count becomes processes."""
    import distributed

    from workbench import config

    monkeypatch.setattr(distributed, "LocalCluster", _FakeCluster)
    monkeypatch.setattr(distributed, "Client", _FakeClient)
    monkeypatch.setattr(config, "machine_cores", lambda: 2)
    _FakeCluster.started = []
    with caplog.at_level("WARNING"):
        try:
            start()
        except _Started:
            pass
    assert _FakeCluster.started == [2]
    said = [r.getMessage() for r in caplog.records if "workers asked" in r.getMessage()]
    assert len(said) == 1 and "1024 workers asked" in said[0] and "2 cores" in said[0]


def test_the_machine_has_a_core_or_more() -> None:
    from workbench.config import bounded_workers, machine_cores

    assert 1 <= machine_cores() <= (os.cpu_count() or 1)
    assert bounded_workers(1, "x") == 1
