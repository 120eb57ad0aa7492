"""The cost-carbon frontier: its grid, its table and ``workbench frontier``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from helpers_policies import tiny_scenario, training_job

from workbench.caps import Caps
from workbench.cli import main
from workbench.model import Scenario
from workbench.store import Store
from workbench.sweep import FRONTIER_COLUMNS, frontier_points, frontier_table


def _scenario() -> Scenario:
    # b is cheap and dirty early, a clean and dear: carbon costs money here.
    prices = [[1.0, 0.4], [1.0, 0.4], [0.3, 1.0], [0.3, 1.0]] * 2
    jobs = [training_job("t1", "a", 1.5, deadline_slot=8),
            training_job("t2", "b", 1.0, arrival_slot=1, deadline_slot=8)]
    return tiny_scenario(jobs, prices=prices, n_slots=8)


def test_grid_is_the_policy_and_the_hindsight_plan_uncapped_and_at_each_cap() -> None:
    pts = frontier_points("lookahead", [Caps(carbon_pct_below_baseline=10.0),
                                        Caps(carbon_kg=5.0)])
    got = {(p.policy, p.carbon_cap.label) for p in pts}
    assert got == {("asap-home", "none"), ("lookahead", "none"), ("lookahead", "10%"),
                   ("lookahead", "5 kg"), ("offline", "none"), ("offline", "10%"),
                   ("offline", "5 kg")}
    with pytest.raises(ValueError, match="takes no carbon cap"):
        frontier_points("asap-home", [Caps(carbon_kg=5.0)])
    with pytest.raises(ValueError, match="at least one cap"):
        frontier_points("lookahead", [])


def test_table_has_one_row_per_cap_loosest_first() -> None:
    rows = []
    for pol, cap, kg, cost, carbon in [("lookahead", "none", None, 10.0, 9.0),
                                       ("lookahead", "5 kg", 5.0, 14.0, 5.0),
                                       ("lookahead", "8 kg", 8.0, 11.0, 8.0),
                                       ("offline", "none", None, 9.0, 8.5),
                                       ("offline", "8 kg", 8.0, 10.0, 7.9)]:
        rows.append({"policy": pol, "carbon_cap": cap, "carbon_cap_kg": kg, "status": "ok",
                     "cost": cost, "carbon_kg": carbon, "deadline_misses": 0,
                     "jobs_unfinished": 0, "carbon_cap_met": None if kg is None else True,
                     "bound_cost": cost - 1.0 if pol == "offline" else None,
                     "bound_carbon_kg": carbon - 0.1 if pol == "offline" else None})
    rows.append({**rows[1], "status": "error", "cost": 1e9})
    front = frontier_table(pd.DataFrame(rows), "lookahead", 4.5)
    assert list(front.columns) == list(FRONTIER_COLUMNS)
    assert front["carbon_cap"].tolist() == ["none", "8 kg", "5 kg"]
    assert front["cost"].tolist() == [10.0, 11.0, 14.0]  # the failed run is left out
    assert front["bound_cost"].tolist()[:2] == [8.0, 9.0]
    assert math.isnan(front["bound_cost"].iloc[2])  # no hindsight run at 5 kg
    assert (front["least_carbon_kg"] == 4.5).all()


@pytest.mark.slow
def test_cli_frontier(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(_scenario())
    out = tmp_path / "f.csv"
    code = main(["--db", str(db), "frontier", "--scenario", "tiny", "--caps", "10%,40%",
                 "--threads", "--out", str(out), "--no-progress", "--json"])
    assert code == 0, capsys.readouterr().err
    front = pd.DataFrame(json.loads(capsys.readouterr().out))
    assert front["carbon_cap"].tolist() == ["none", "10%", "40%"]
    assert pd.read_csv(out)["carbon_cap"].tolist() == ["none", "10%", "40%"]
    free = front.iloc[0]
    least = float(free["least_carbon_kg"])
    assert least > 0
    for _, row in front.iloc[1:].iterrows():
        # Never backfires; the bound keeps a cap it can keep, and sits at the least carbon
        # with every deadline met where it cannot.
        assert row["carbon_kg"] <= free["carbon_kg"] + 1e-9
        assert row["bound_carbon_kg"] <= max(row["carbon_cap_kg"], least) * (1 + 1e-6)
        assert row["bound_carbon_kg"] >= least * (1 - 1e-6)
    # A tighter cap never makes the bound cheaper.
    assert front["bound_cost"].is_monotonic_increasing
    with Store(db, read_only=True) as store:
        assert len(store.runs()) == 7  # asap-home + 2 policies x 3 caps
    for bad, says in (("20%,x", "--caps 'x'"), ("-5", "--caps '-5'"), ("", "at least one")):
        assert main(["--db", str(db), "frontier", "--scenario", "tiny", "--caps", bad,
                     "--threads", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and says in err and err.count("\n") == 1, err
    assert main(["--db", str(db), "frontier", "--scenario", "tiny", "--policy", "greedy",
                 "--out", str(out)]) == 2
    assert "takes no carbon cap" in capsys.readouterr().err


@pytest.mark.slow
def test_the_app_draws_the_stored_frontier_beside_the_hindsight_bound(tmp_path: Path) -> None:
    import holoviews as hv

    from workbench.app import plots
    from workbench.app.state import WorkbenchState
    from workbench.app.views.metrics import MetricsView

    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(_scenario())
    assert main(["--db", str(db), "frontier", "--scenario", "tiny", "--caps", "10%,40%",
                 "--threads", "--out", str(tmp_path / "f.csv"), "--no-progress"]) == 0
    state = WorkbenchState(db_path=str(db), scenario_name="tiny", save_runs=False)
    with Store(db, read_only=True) as store:
        runs = store.runs("tiny")
    capped = runs[(runs.policy == "lookahead") & runs.knobs.str.contains("carbon_cap_kg")]
    state.load_run(str(capped.iloc[-1]["run_id"]))
    view = MetricsView(state=state)
    assert "_frontier" in view.SECTIONS
    frame = view.frontier_frame()
    assert frame is not None
    mine = frame[frame.policy == "lookahead"]
    hind = frame[frame.policy == "offline"]
    assert len(mine) == 3 and mine["carbon_cap_kg"].isna().sum() == 1  # uncapped + 2 caps
    assert len(hind) == 3 and hind["bound_cost"].notna().all()
    assert (hind["bound_cost"] <= hind["cost"] + 1e-9).all()  # the bound under its replay
    plot = plots.frontier(frame, "lookahead", "CNY")
    curves = [el for el in plot.traverse(lambda e: e, [hv.Curve])]
    assert {c.label for c in curves} == {"lookahead", "hindsight bound"}
    assert "Cost-carbon frontier** of lookahead at 3 carbon caps" in (
        view._frontier().objects[0].object)
    # Another policy's run has no frontier of its own: the tab says how to get one.
    state.load_run(str(runs[runs.policy == "asap-home"].iloc[-1]["run_id"]))
    assert view.frontier_frame() is None
    assert "workbench frontier" in view._frontier().object


def test_cli_frontier_says_each_line_once_and_writes_counts_as_integers(
        tmp_path: Path) -> None:
    """The frontier's workers each printed the runs' warnings (every line twice on two
    workers, once more per cap) and its CSV wrote counts as ``0.0``: in its own process,
    on two worker processes, every stderr line is said once and the counts are whole."""
    import subprocess
    import sys

    from helpers_sim import tiny_scenario as two_sites
    from helpers_sim import training

    db, out = tmp_path / "wb.duckdb", tmp_path / "front.csv"
    with Store(db) as store:  # k is left unfinished: a warning of every run
        store.save_scenario(two_sites(
            [training("j", slots_of_work=3.0), training("k", arrival_slot=1, slots_of_work=2.0)],
            n_slots=4, price_a=[3, 3, 1, 1], price_b=[3, 3, 1, 1]))
    proc = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "--db", str(db), "frontier", "--scenario",
         "tiny", "--caps", "10%,20%", "--workers", "2", "--out", str(out)],
        capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == len(set(lines)), proc.stderr
    unfinished = [line for line in lines if "unfinished" in line]
    assert len(unfinished) == 1 and "runs, e.g." in unfinished[0], proc.stderr
    text = out.read_text().splitlines()
    head = text[0].split(",")
    for row in text[1:]:
        cells = dict(zip(head, row.split(","), strict=True))
        for col in ("deadline_misses", "jobs_unfinished"):
            assert cells[col].isdigit(), (col, row)


def test_frontier_labels_never_print_over_each_other_and_mark_a_missed_cap() -> None:
    """"uncapped" printed over "cap 980 kg" (a cap that does not bind gives the uncapped
    plan) and a missed cap was drawn like the others."""
    from workbench.app import plots

    pts = pd.DataFrame({"carbon_kg": [1000.0, 1000.0, 950.0, 940.0, 800.0],
                        "cost": [900.0, 900.0, 910.0, 911.0, 1000.0],
                        "carbon_cap_kg": [math.nan, 1200.0, 980.0, 960.0, 700.0]})
    out = plots.frontier_labels(pts)
    shown = out[out["label"] != ""]
    assert " uncapped = cap 1,200 kg" in list(shown["label"])  # one label for one plan
    assert list(out.loc[out["missed"], "cap"]) == ["cap 700 kg (missed)"]
    near = shown[shown["carbon_kg"].between(939, 951)]
    assert set(near["place"]) == {"top", "bottom"}  # close points: one above, one below


def test_the_frontier_draws_a_missed_cap_apart() -> None:
    import holoviews as hv

    from workbench.app import plots

    frame = pd.DataFrame({"policy": "lookahead", "carbon_cap_kg": [math.nan, 900.0, 500.0],
                          "cost": [900.0, 950.0, 1100.0], "carbon_kg": [1000.0, 899.0, 700.0],
                          "bound_cost": math.nan, "bound_carbon_kg": math.nan, "run_id": "r"})
    plot = plots.frontier(frame, "lookahead", "CNY")
    scatters = list(plot.traverse(lambda e: e, [hv.Scatter]))
    missed = [s for s in scatters if s.label == "cap missed"]
    assert len(missed) == 1 and len(missed[0].data) == 1
    labels = [t for el in plot.traverse(lambda e: e, [hv.Labels]) for t in el.data["label"]]
    assert sorted(labels) == [" cap 500 kg (missed)", " cap 900 kg", " uncapped"]
