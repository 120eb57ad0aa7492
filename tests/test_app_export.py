"""The app's Export downloads neutralise formula prefixes (OWASP CSV injection) like the CLI:
a job or datacenter named ``=HYPERLINK(...)`` reaches a spreadsheet as text."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest
from helpers_sim import tiny_scenario, training

from workbench import Store
from workbench.app import create_app
from workbench.io.plan_csv import read_migrations_csv, read_plan_csv

NAME = '=HYPERLINK("http://x","y")'


@pytest.mark.slow
def test_app_downloads_neutralise_formula_names(tmp_path: Path) -> None:
    sc = tiny_scenario([training(NAME, slots_of_work=1.0, deadline_slot=8),
                        training("@SUM(1)", home="b", arrival_slot=1, slots_of_work=1.0,
                                 deadline_slot=8)], n_slots=8, price_b=[2.0])
    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(sc)
    app = create_app(str(db), scenario_name="tiny", policy="greedy",
                     baseline_policies=["asap-home"], save_runs=False)
    assert app.state.run() is not None
    export = app.views["Export"]
    text = export._plan_csv().getvalue()
    rows = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    assert set(rows["job_id"]) <= {"'" + NAME, "'@SUM(1)"} and len(rows)
    assert not any(cell.startswith(("=", "+", "-", "@")) for cell in rows.to_numpy().ravel()
                   if not cell[:1].isdigit())
    # The neutralised cells read back exactly.
    assert set(read_plan_csv(io.StringIO(text))["job_id"]) <= {NAME, "@SUM(1)"}
    mig = export._migrations_csv().getvalue()
    # (rows only when a job ran away from home)
    moved = pd.read_csv(io.StringIO(mig), dtype=str, keep_default_na=False)["job_id"]
    assert all(cell.startswith("'") for cell in moved)
    assert set(read_migrations_csv(io.StringIO(mig))["job_id"]) <= {NAME, "@SUM(1)"}


def test_the_comparison_csv_writes_counts_as_integers_and_names_its_currency(
        tmp_path: Path) -> None:
    """Issue 24 item 8: counts as ``153``, not ``153.0``; a currency column; rows in the
    registry's order; savings on equal work."""
    from workbench.app.derive import COMPARE_COLUMNS, COUNT_COLUMNS

    sc = tiny_scenario([training("j", slots_of_work=1.0, deadline_slot=8)], n_slots=8)
    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(sc)
    app = create_app(str(db), scenario_name="tiny", policy="greedy",
                     baseline_policies=["wait-for-cheap", "asap-home"], save_runs=False)
    assert app.state.run() is not None
    text = app.views["Export"]._compare_csv().getvalue()
    raw = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    assert list(raw.columns) == list(COMPARE_COLUMNS)
    assert list(raw["policy"]) == ["greedy", "asap-home", "wait-for-cheap"]
    assert set(raw["currency"]) == {"CNY"}
    for col in COUNT_COLUMNS:
        assert all(v.isdigit() for v in raw[col]), (col, list(raw[col]))
    assert raw.loc[1, "saving_pct"] == "0.0"  # asap-home against itself


def test_the_sites_csv_is_the_site_meter_and_sums_to_the_bill(tmp_path: Path) -> None:
    """The Export tab's sites CSV is the CLI's (``plan --sites-out``): one row per
    datacenter and slot, its grid charges summing to the bill's energy part."""
    from workbench.io.plan_csv import SITES_COLUMNS

    sc = tiny_scenario([training("j", slots_of_work=1.0, deadline_slot=8)], n_slots=8)
    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(sc)
    app = create_app(str(db), scenario_name="tiny", policy="greedy",
                     baseline_policies=["asap-home"], save_runs=False)
    res = app.state.run()
    assert res is not None
    export = app.views["Export"]
    assert not export.sites_download.disabled
    sites = pd.read_csv(io.StringIO(export._sites_csv().getvalue()))
    assert list(sites.columns) == list(SITES_COLUMNS)
    assert len(sites) == 2 * sc.n_slots
    assert sites["grid_charge"].sum() == pytest.approx(res.metrics["bill_energy"], rel=1e-6)
