"""``workbench runs ...`` and ``workbench data list`` in-process over a tiny stored scenario."""

from __future__ import annotations

import json

import pytest
from helpers_sim import inference, tiny_scenario, training

from workbench.cli import main
from workbench.io.plan_csv import PLAN_COLUMNS, read_plan_csv
from workbench.store import Store


@pytest.fixture
def db(tmp_path, capsys):
    jobs = [training("j", slots_of_work=1.0, deadline_slot=8),
            training("k", home="b", arrival_slot=1, slots_of_work=2.0, deadline_slot=8),
            inference("svc", last=8)]
    path = tmp_path / "wb.duckdb"
    with Store(path) as store:
        store.save_scenario(tiny_scenario(jobs, n_slots=8,
                                          price_a=[1.0, 1.0, 0.2, 0.2, 1.0, 1.0, 1.0, 1.0]))
    # --db after the command, as the README says every command takes it.
    assert main(["plan", "--scenario", "tiny", "--policy", "greedy", "--no-progress",
                 "--db", str(path)]) == 0
    capsys.readouterr()
    return path


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_list_show_compare_rename_delete(db, capsys, tmp_path) -> None:
    runs = _json(capsys, ["runs", "list", "--json", "--db", str(db)])["runs"]
    assert [r["policy"] for r in runs] == ["greedy", "asap-home"]  # newest first
    greedy = runs[0]
    assert isinstance(greedy["deadline_misses"], int) and greedy["currency"] == "CNY"
    assert "greedy" in greedy["knobs"] and greedy["settings"]["slot_s"] > 0
    shown = _json(capsys, ["runs", "show", greedy["run_id"][:5], "--json", "--db", str(db)])
    assert shown["metrics"]["cost"] == pytest.approx(greedy["cost"])
    assert main(["--db", str(db), "runs", "rename", "latest", "my run"]) == 0
    capsys.readouterr()
    cmp_ = _json(capsys, ["runs", "compare", "my run", runs[1]["run_id"], "--json",
                          "--db", str(db)])
    assert set(cmp_["rows"]["bill (CNY)"]) == {"my run", f"asap-home {runs[1]['run_id'][:6]}"}
    out = tmp_path / "p.csv"
    assert main(["runs", "export", "my run", "--out", str(out), "--db", str(db)]) == 0
    plan = read_plan_csv(out)
    assert tuple(plan.columns[:len(PLAN_COLUMNS)]) == PLAN_COLUMNS and len(plan) > 0
    capsys.readouterr()
    assert _json(capsys, ["runs", "delete", "my run", "--json", "--db", str(db)])["deleted"] \
        == [greedy["run_id"]]
    with Store(db) as store:
        assert list(store.runs()["policy"]) == ["asap-home"]
        assert store.run_plan(greedy["run_id"]).empty


def test_unknown_run_is_a_one_line_error(db, capsys) -> None:
    assert main(["runs", "show", "nope", "--db", str(db)]) == 2
    assert capsys.readouterr().err.startswith("error: no run 'nope'")


def test_data_list_names_series_job_sets_and_profiles(db, capsys) -> None:
    data = _json(capsys, ["data", "list", "--json", "--db", str(db)])
    kinds = {(s["region"], s["kind"]) for s in data["series"]}
    assert ("ra", "price") in kinds and ("ra", "carbon") in kinds
    assert all(s["rows"] == 8 for s in data["series"])
    assert data["job_sets"][0]["name"] == "tiny" and data["job_sets"][0]["jobs"] == 3
    # An absolute job set keeps its UTC times; the offsets are for relative traces.
    assert data["job_sets"][0]["first_arrival_utc"].startswith("20")
    assert data["job_sets"][0]["first_arrival_h_after_trace_start"] is None
    assert data["profiles"] and data["scenarios"] == ["tiny"]


def test_progress_bars_only_on_a_terminal(monkeypatch) -> None:
    import argparse
    import io

    from workbench.cli import progress_wanted

    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert not progress_wanted(argparse.Namespace(no_progress=False))


def test_relative_arrivals_print_as_offsets() -> None:
    import pandas as pd

    from workbench.cli.imports import arrival_span

    t0 = pd.Timestamp("1970-01-01 02:00", tz="UTC")
    text = arrival_span(t0, t0 + pd.Timedelta(hours=10), None)
    assert text.startswith("+2.0 h .. +12.0 h") and "1970" not in text
    real = pd.Timestamp("2025-07-13 16:00", tz="UTC")
    assert arrival_span(real, real, None) == "2025-07-13 16:00 .. 2025-07-13 16:00 UTC"


@pytest.mark.slow
def test_show_and_compare_report_the_attribution_as_plan_printed_it(db, capsys) -> None:
    """The stored run is attributed against the asap-home run stored with it, to the value
    ``plan`` printed right after the run; a run stored before schema 6 says so."""
    from workbench.runs import ATTRIBUTION_BEFORE_V6

    with Store(db) as store:
        greedy = store.runs()
        greedy_id = str(greedy[greedy["policy"] == "greedy"]["run_id"].iloc[0])
        base_id = str(greedy[greedy["policy"] == "asap-home"]["run_id"].iloc[0])
        assert store.run_info(greedy_id)["baseline_run_id"] == base_id
    again = _json(capsys, ["plan", "--scenario", "tiny", "--policy", "greedy", "--no-progress",
                           "--json", "--db", str(db)])
    shown = _json(capsys, ["runs", "show", again["run_id"], "--json", "--db", str(db)])
    for part in ("cost", "carbon_kg"):
        assert shown["attribution"][part] == pytest.approx(again["attribution"][part], abs=1e-9)
    assert shown["attribution_missing"] is None
    cmp_ = _json(capsys, ["runs", "compare", again["run_id"], greedy_id, "--json",
                          "--db", str(db)])
    total = cmp_["rows"]["saving against asap-home (CNY)"]
    assert list(total.values())[0] == pytest.approx(sum(again["attribution"]["cost"].values()))
    assert main(["runs", "show", again["run_id"], "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert "saving against asap-home" in text and "efficiency" in text
    # As a schema-5 file left it: no movement kWh in its plan rows.
    with Store(db) as store:
        store.con.execute("UPDATE plan_rows SET movement_kwh = NULL WHERE run_id = ?",
                          [greedy_id])
    shown = _json(capsys, ["runs", "show", greedy_id, "--json", "--db", str(db)])
    assert shown["attribution"] is None and shown["attribution_missing"] == ATTRIBUTION_BEFORE_V6
    cmp_ = _json(capsys, ["runs", "compare", greedy_id, again["run_id"], "--json",
                          "--db", str(db)])
    first = next(iter(cmp_["knobs"]))
    assert cmp_["rows"]["saving against asap-home (CNY)"][first] is None
    assert cmp_["notes"][first] == ATTRIBUTION_BEFORE_V6


def test_data_list_prints_a_relative_trace_as_offsets(capsys, tmp_path) -> None:
    """A job set imported from a relative trace without --start: its arrivals as hours after
    the trace's start (text and JSON), as the import printed them."""
    db = tmp_path / "w.duckdb"
    trace = tmp_path / "w.csv"
    trace.write_text("name,time,application,num_replicas,batch_size\n"
                     "cifar10-0,110,cifar10,2,128\ncifar10-1,26640,cifar10,1,128\n")
    assert main(["import", "jobs", "pollux-workload", str(trace), "--into", "wl1",
                 "--db", str(db)]) == 0
    imported = capsys.readouterr().out
    assert "+0.0 h .. +7.4 h after the trace's start" in imported
    assert main(["data", "list", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.strip().startswith("wl1"))
    assert "+0.0 h .. +7.4 h after the trace's start" in line and "1970" not in text
    wl1 = _json(capsys, ["data", "list", "--json", "--db", str(db)])["job_sets"][0]
    assert wl1["first_arrival_h_after_trace_start"] == pytest.approx(110 / 3600, abs=1e-4)
    assert wl1["last_arrival_h_after_trace_start"] == pytest.approx(7.4)
    assert wl1["first_arrival_utc"] is None and wl1["last_arrival_utc"] is None


@pytest.mark.slow
def test_counts_are_integers_and_flags_booleans_in_json(db, capsys) -> None:
    """The store keeps numbers as DOUBLE; show, compare and list give counts back as
    integers and ``carbon_cap_met`` as a boolean, as ``plan --json`` printed them."""
    planned = _json(capsys, ["plan", "--scenario", "tiny", "--policy", "lyapunov",
                             "--carbon-cap", "1000", "--no-progress", "--json",
                             "--db", str(db)])
    shown = _json(capsys, ["runs", "show", planned["run_id"], "--json", "--db", str(db)])
    m = shown["metrics"]
    for key in ("data_moves", "round_trips", "fallbacks", "power_cap_violations",
                "deadline_misses", "jobs_unfinished", "migrations", "jobs_total"):
        assert type(m[key]) is int, key
    assert m["deadline_misses"] == planned["deadline_misses"]
    assert m["carbon_cap_met"] is True and planned["carbon_cap_met"] is True
    assert isinstance(m["cost"], float)
    rows = _json(capsys, ["runs", "compare", planned["run_id"], "latest", "--json",
                          "--db", str(db)])["rows"]
    assert all(type(v) is int for v in rows["deadline misses"].values())
    listed = _json(capsys, ["runs", "list", "--json", "--db", str(db)])["runs"]
    assert all(type(r["migrations"]) is int for r in listed)


@pytest.mark.slow
def test_compare_fits_100_columns_with_clean_keys_and_notes(db, capsys) -> None:
    """Knobs above the table (wrapped), run columns continued below when they do not fit;
    JSON keys without padding; no sentence in a number's cell: null and a note."""
    for v in ("3", "30"):
        assert main(["plan", "--scenario", "tiny", "--policy", "lyapunov", "--V", v,
                     "--carbon-cap", "20%", "--power-cap-kw", "100", "--no-progress",
                     "--db", str(db)]) == 0
    capsys.readouterr()
    runs = [r["run_id"] for r in _json(capsys, ["runs", "list", "--json",
                                                "--db", str(db)])["runs"]]
    assert len(runs) >= 5
    assert main(["runs", "compare", *runs, "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert max(len(line) for line in text.splitlines()) <= 100, text
    assert "V=30" in text and "this is the asap-home run" in text.split("\n(1) ")[-1]
    assert "n/a (1)" in text
    cmp_ = _json(capsys, ["runs", "compare", *runs, "--json", "--db", str(db)])
    assert all(k == k.strip() for k in cmp_["rows"])
    assert "from spatial (CNY)" in cmp_["rows"] and "from spatial (kg)" in cmp_["rows"]
    assert "knobs" not in cmp_["rows"] and "V=30" in next(iter(cmp_["knobs"].values()))
    base = next(c for c in cmp_["knobs"] if c.startswith("asap-home"))
    assert cmp_["rows"]["saving against asap-home (CNY)"][base] is None
    assert "savings are measured against" in cmp_["notes"][base]
    for row in cmp_["rows"].values():
        assert not any(isinstance(v, str) for v in row.values())


@pytest.mark.parametrize("name, why", [
    ("latest", "is reserved ('latest' means the newest run)"),
    ("LATEST", "is reserved"),
    ("ab12", "could be taken for a run id"),
    ("2024", "could be taken for a run id"),
    ("other", "is already named 'other'"),
])
def test_a_run_name_that_would_shadow_a_reference_is_refused(db, capsys, name, why) -> None:
    """`runs rename RUN latest` shadowed the `latest` keyword; a hex name shadows ids."""
    runs = _json(capsys, ["runs", "list", "--json", "--db", str(db)])["runs"]
    first, second = runs[1]["run_id"], runs[0]["run_id"]
    assert main(["--db", str(db), "runs", "rename", first, "other"]) == 0
    capsys.readouterr()
    assert main(["--db", str(db), "runs", "rename", second, name]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err, err
    with Store(db) as store:
        assert store.run_info(second)["name"] is None
        assert store.resolve_run("latest") == second and store.resolve_run("other") == first
    # A name with a letter beyond a-f, or a space, is fine; the same name again too.
    for ok in ("ab12 run", "2024-q3", "other" if name != "other" else "mine"):
        assert main(["--db", str(db), "runs", "rename", first, ok]) == 0
