"""``workbench plan`` in-process on a tiny scenario stored in a temporary DuckDB file."""

from __future__ import annotations

import json

import pytest
from helpers_sim import inference, tiny_scenario, training

from workbench.cli import main
from workbench.io.plan_csv import MIGRATION_COLUMNS, PLAN_COLUMNS, read_plan_csv
from workbench.store import Store

KEYS = {"policy", "cost", "currency", "energy_kwh", "carbon_kg", "deadline_misses",
        "jobs_finished", "jobs_total", "migrations", "mean_jct_h"}


@pytest.fixture
def db(tmp_path):
    price_a = [1.0, 1.0, 0.2, 0.2, 1.0, 1.0, 1.0, 1.0]
    jobs = [training("j", slots_of_work=1.0, deadline_slot=8),
            training("k", home="b", arrival_slot=1, slots_of_work=2.0, deadline_slot=8),
            inference("svc", last=8)]
    path = tmp_path / "wb.duckdb"
    with Store(path) as store:
        store.save_scenario(tiny_scenario(jobs, n_slots=8, price_a=price_a))
    return path


def test_plan_json_writes_csvs_and_stores_both_runs(db, tmp_path, capsys) -> None:
    out, mig = tmp_path / "plan.csv", tmp_path / "mig.csv"
    # A what-if with perfect foresight (so wait-for-cheap sees the cheap slots coming).
    rc = main(["--db", str(db), "plan", "--scenario", "tiny", "--policy", "wait-for-cheap",
               "--forecast", "perfect", "--json", "--no-progress", "--out", str(out),
               "--migrations-out", str(mig)])
    assert rc == 0
    obj = json.loads(capsys.readouterr().out)
    assert KEYS <= set(obj) and KEYS <= set(obj["baseline"])
    assert obj["policy"] == "wait-for-cheap" and obj["baseline"]["policy"] == "asap-home"
    assert obj["forecast"] == "perfect"
    assert obj["jobs_total"] == 2 and obj["jobs_finished"] == 2
    assert obj["currency"] == "CNY"
    assert obj["cost"] < obj["baseline"]["cost"]
    assert out.read_text().splitlines()[0] == ",".join(PLAN_COLUMNS)
    assert mig.read_text().splitlines()[0] == ",".join(MIGRATION_COLUMNS)
    plan = read_plan_csv(out)
    assert set(plan["job_id"]) == {"j", "k", "svc"}
    with Store(db) as store:
        runs = store.runs("tiny")
        assert sorted(runs["policy"]) == ["asap-home", "wait-for-cheap"]
        assert store.run_metrics(obj["run_id"])["jobs_finished"] == 2
        assert len(store.run_plan(obj["run_id"])) == len(plan)


def test_plan_human_summary_against_asap(db, capsys) -> None:
    rc = main(["--db", str(db), "plan", "--scenario", "tiny", "--policy", "cheapest-at-arrival",
               "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "against asap-home" in text
    assert "saving against asap-home" in text
    assert "jobs finished" in text and "2/2" in text


def test_percent_carbon_cap_uses_the_baseline_carbon(db, capsys) -> None:
    rc = main(["--db", str(db), "plan", "--scenario", "tiny", "--policy", "lyapunov",
               "--V", "10", "--carbon-cap", "20%", "--json", "--no-progress"])
    assert rc == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["carbon_cap_kg"] == pytest.approx(0.8 * obj["baseline"]["carbon_kg"])
    assert obj["policy"] == "lyapunov"


def test_bad_knobs_and_caps_exit_with_a_message(db, capsys) -> None:
    rc = main(["--db", str(db), "plan", "--scenario", "tiny", "--policy", "asap-home",
               "--V", "10", "--no-baseline", "--no-progress"])
    assert rc == 2
    assert "policy 'asap-home' takes no knob 'V'; its knobs: none" in capsys.readouterr().err
    rc = main(["--db", str(db), "plan", "--scenario", "tiny", "--carbon-cap", "lots"])
    assert rc == 2
    assert "--carbon-cap 'lots'" in capsys.readouterr().err
    rc = main(["--db", str(db), "plan", "--scenario", "nowhere", "--no-progress"])
    assert rc == 2
    assert "no scenario 'nowhere'" in capsys.readouterr().err


@pytest.mark.parametrize("flag,value", [("--noise", "-1"), ("--forecast-error", "-0.5"),
                                        ("--noise", "nan"), ("--restart-s", "-100"),
                                        ("--migration-threshold", "nan"), ("--V", "0"),
                                        ("--V", "1e308"), ("--V", "100001"),
                                        ("--power-cap-kw", "inf"), ("--seed", "1.5")])
def test_plan_bad_numbers_are_one_line_errors(db, capsys, flag, value) -> None:
    rc = main(["--db", str(db), "plan", "--scenario", "tiny", "--policy", "asap-home",
               "--forecast", "noisy", "--no-progress", flag, value])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: workbench plan: argument {flag}: {value} is not a ")
    assert err.count("\n") == 1 and "see `workbench plan --help`" in err


@pytest.mark.parametrize("text", ["1e308", "100000", "100000.5", "0.001", "-5"])
def test_plan_V_follows_the_apps_rule(text: str) -> None:
    """``plan --V`` and the app's V field (:func:`check_knob`) accept the same values."""
    from workbench.app.state import check_knob
    from workbench.cli import build_parser

    app_ok = check_knob("V", text)[0] is not None
    try:
        build_parser().parse_args(["plan", "--policy", "lyapunov", "--V", text])
        cli_ok = True
    except SystemExit:
        cli_ok = False
    assert cli_ok == app_ok


@pytest.mark.parametrize("flag", ["--out", "--migrations-out"])
def test_plan_unwritable_output_stores_nothing(db, tmp_path, capsys, flag) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with Store(db) as store:
        runs_before = len(store.table("runs"))
    rc = main(["--db", str(db), "plan", "--scenario", "tiny", "--policy", "asap-home",
               "--no-progress", flag, str(blocker / "plan.csv")])
    assert rc == 2
    assert f"error: {flag}" in capsys.readouterr().err
    with Store(db) as store:
        assert len(store.table("runs")) == runs_before


@pytest.mark.slow
def test_plan_on_a_locked_store_saves_to_a_side_file(db, capsys, monkeypatch,
                                                      store_lock) -> None:
    """Another process takes the store's lock while the plan runs (after it loaded the
    scenario): the plan waits --lock-wait-s, then saves both runs to a side file."""
    import workbench.cli.plan as cli_plan

    load = cli_plan.load_or_build

    def load_then_lock(path: str, name: str):  # noqa: ANN202
        scenario = load(path, name)
        store_lock.take(path)
        return scenario

    monkeypatch.setattr(cli_plan, "load_or_build", load_then_lock)
    try:
        rc = main(["--db", str(db), "plan", "--scenario", "tiny", "--policy", "wait-for-cheap",
                   "--json", "--no-progress", "--lock-wait-s", "1"])
    finally:
        store_lock.release()
    assert rc == 0
    cap = capsys.readouterr()
    obj = json.loads(cap.out)
    assert obj["stored_in"] != str(db) and "stayed locked" in cap.err
    assert f"import runs {obj['stored_in']}" in cap.err
    with Store(obj["stored_in"]) as side:
        assert sorted(side.runs()["policy"]) == ["asap-home", "wait-for-cheap"]
    with Store(db) as store:
        assert store.runs("tiny").empty
def test_plan_json_reports_forecast_bound_attribution_and_jobs(db, tmp_path, capsys) -> None:
    from workbench.io.plan_csv import JOBS_COLUMNS

    jobs_out = tmp_path / "jobs.csv"
    rc = main(["--db", str(db), "plan", "--scenario", "tiny", "--policy", "offline",
               "--json", "--no-progress", "--jobs-out", str(jobs_out)])
    assert rc == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["forecast"] == "seasonal-naive"  # market-like prices: no perfect foresight
    bound = obj["bound"]
    assert bound["kind"] in ("lp-relaxation", "milp-optimal", "milp-dual-bound")
    assert bound["cost"] <= obj["cost"] + 1e-9  # a lower bound of what the replay is charged
    att = obj["attribution"]
    assert set(att) == {"cost", "carbon_kg"}
    # The default menu of GPU power limits brings the levers' parts.
    assert set(att["cost"]) == {"efficiency", "temporal", "spatial", "movement",
                                "power_limits", "supply", "demand"}
    assert sum(att["cost"].values()) == pytest.approx(obj["baseline"]["cost"] - obj["cost"])
    assert sum(att["carbon_kg"].values()) == pytest.approx(
        obj["baseline"]["carbon_kg"] - obj["carbon_kg"])
    assert obj["power_cap_violations"] == 0 and obj["carbon_cap_kg"] is None
    lines = jobs_out.read_text().splitlines()
    assert lines[0] == ",".join(JOBS_COLUMNS) and len(lines) == 1 + 3


def test_plan_reports_a_missed_carbon_cap(db, capsys) -> None:
    rc = main(["--db", str(db), "plan", "--scenario", "tiny", "--policy", "lyapunov",
               "--carbon-cap", "0.001", "--json", "--no-progress"])
    assert rc == 0
    captured = capsys.readouterr()
    obj = json.loads(captured.out)
    assert obj["carbon_cap_kg"] == 0.001 and obj["carbon_cap_met"] is False
    assert obj["carbon_kg"] > 0.001
    assert "carbon cap missed" in captured.err


@pytest.mark.parametrize("argv, what", [
    (["--restart-s", "-1"], "--restart-s"), (["--resize-s", "nan"], "--resize-s"),
    (["--power-cap-kw", "nan"], "--power-cap-kw"), (["--power-cap-kw", "-5"], "--power-cap-kw"),
    (["--policy", "lyapunov", "--solver", "pyomo:"], "--solver"),
    (["--policy", "lyapunov", "--solver", "cplex"], "--solver"),
    (["--policy", "lyapunov", "--solver", "pyomo:no_such_solver"], "--solver pyomo:no_such"),
])
def test_bad_accounting_knobs_are_one_line_errors(db, capsys, argv, what) -> None:
    rc = main(["--db", str(db), "plan", "--scenario", "tiny", "--no-progress", *argv])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and what in err[0]


def test_a_power_cap_a_policy_cannot_honour_is_refused(db, capsys) -> None:
    rc = main(["--db", str(db), "plan", "--scenario", "tiny", "--policy", "wait-for-cheap",
               "--power-cap-kw", "1", "--no-progress"])
    assert rc == 2
    assert "takes no power cap; policies that do: lyapunov" in capsys.readouterr().err


def test_a_plan_that_dies_after_its_baseline_stores_nothing(db, tmp_path, capsys,
                                                            monkeypatch) -> None:
    """The baseline finished, then the policy's run fails midway (as if killed): no run is
    stored (no dangling baseline), --out keeps the earlier plan, no partial file is left."""
    import workbench.runner as runner

    real = runner.simulate
    calls: list[str] = []

    def baseline_then_die(scenario, policy, *args, **kwargs):  # noqa: ANN001, ANN202
        calls.append(policy.name)
        if len(calls) == 1:
            return real(scenario, policy, *args, **kwargs)
        raise RuntimeError("disk vanished")

    monkeypatch.setattr(runner, "simulate", baseline_then_die)
    out = tmp_path / "plan.csv"
    out.write_text("an earlier plan\n")
    rc = main(["--db", str(db), "plan", "--scenario", "tiny", "--policy", "wait-for-cheap",
               "--no-progress", "--out", str(out)])
    assert rc == 1 and calls == ["asap-home", "wait-for-cheap"]
    assert "unexpected RuntimeError: disk vanished" in capsys.readouterr().err
    with Store(db) as store:
        assert store.table("runs").empty
    assert out.read_text() == "an earlier plan\n"
    assert not list(tmp_path.glob(".plan.csv.*"))


@pytest.mark.parametrize("argv, message", [
    (["--out", "{db}"], "--out {db} is the store (--db {db}); writing it would replace"),
    (["--jobs-out", "{db}"], "--jobs-out {db} is the store"),
    (["--out", "{dir}/p.csv", "--migrations-out", "{dir}/p.csv"],
     "--out and --migrations-out name the same file"),
])
def test_an_output_naming_the_store_or_another_output_is_refused(
    db, tmp_path, capsys, argv, message,
) -> None:
    """`plan --out workbench.duckdb` replaced the store file with the plan CSV: every
    stored run and series was gone."""
    before = db.read_bytes()
    fill = {"db": str(db), "dir": str(tmp_path)}
    rc = main(["--db", str(db), "plan", "--scenario", "tiny", "--policy", "asap-home",
               "--no-progress", *[a.format(**fill) for a in argv]])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message.format(**fill) in err
    assert db.read_bytes() == before
    rc = main(["--db", str(db), "runs", "export", "latest", "--out", str(db)])
    assert rc == 2 and "is the store" in capsys.readouterr().err
    assert db.read_bytes() == before


@pytest.mark.parametrize(("run", "base", "text"), [
    ({"jobs_unfinished": 0, "deadline_misses": 0}, {"jobs_unfinished": 0}, ""),
    ({"jobs_unfinished": 144, "deadline_misses": 0}, {"jobs_unfinished": 0},
     " — not like for like: 144 jobs unfinished (their remaining work is not in the bill)"),
    ({"jobs_unfinished": 3.0, "deadline_misses": 5.0},
     {"jobs_unfinished": 1.0, "deadline_misses": 2.0},
     " — not like for like: 3 jobs unfinished against 1 in asap-home (their remaining work "
     "is not in the bill); 5 deadline misses against 2 in asap-home"),
    ({"jobs_unfinished": 1, "deadline_misses": 1}, {"jobs_unfinished": 1,
                                                    "deadline_misses": 1}, ""),
    ({"jobs_unfinished": float("nan")}, {"jobs_unfinished": 0}, ""),
    ({"jobs_unfinished": 2}, None, ""),
])
def test_saving_caveat(run, base, text) -> None:
    from workbench.cli.summary import saving_caveat

    assert saving_caveat(run, base) == text


@pytest.mark.slow
def test_a_saving_with_unfinished_jobs_is_qualified(db, capsys) -> None:
    """A run that leaves jobs unfinished (cheaper because their work is not done) leads
    with its saving on equal work (the undone work charged) and says its bill's saving is
    not like for like, in plan and in runs show, from the one library definition."""
    from workbench.equal_work import like_for_like

    # Jobs without a deadline wait at a large V (lyapunov's completion rule keeps deadlines).
    with Store(db) as store:
        store.save_scenario(tiny_scenario([training("j", slots_of_work=1.0),
                                           training("k", home="b", slots_of_work=2.0)],
                                          n_slots=8, name="tiny-free"))
    argv = ["--db", str(db), "plan", "--scenario", "tiny-free", "--policy", "lyapunov",
            "--V", "1000", "--power-cap-kw", "100", "--no-progress"]
    assert main(argv) == 0
    text = " ".join(capsys.readouterr().out.split())  # wrapped lines joined
    lead = text.index("saving against asap-home on equal work:")
    bill = text.index("the bill alone:")
    assert lead < bill
    assert "not like for like: 2 jobs unfinished (their remaining work is not in the bill)" \
        in text[bill:]
    assert "charged at its least energy at home" in text[lead:bill]
    assert main(argv + ["--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    got = obj["like_for_like"]
    def metrics(d: dict) -> dict:
        return {**d, "bill_total": d["bill"]["total"]}

    expect = like_for_like(metrics(obj), metrics(obj["baseline"])).as_dict()
    assert got["saving_pct"] == pytest.approx(expect["saving_pct"])
    assert got["jobs_saving_pct"] == pytest.approx(expect["jobs_saving_pct"])
    assert got["saving_pct"] < got["bill_saving_pct"]  # the undone work is charged
    assert obj["unfinished_charge"] > 0 and obj["equal_work_cost"] > obj["cost"]
    assert main(["--db", str(db), "runs", "show", "latest"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"{got['saving_pct']:.1f}% of the bill and {got['jobs_saving_pct']:.1f}% of its " \
        "controllable part" in text
    assert "not like for like: 2 jobs unfinished" in text[text.index("the bill alone:"):]
    assert main(["--db", str(db), "runs", "show", "latest", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["like_for_like"]
    assert shown["saving_pct"] == pytest.approx(got["saving_pct"])
    assert main(["--db", str(db), "plan", "--scenario", "tiny", "--policy", "greedy",
                 "--no-progress"]) == 0
    assert "not like for like" not in capsys.readouterr().out
    assert main(["--db", str(db), "runs", "show", "latest"]) == 0
    assert "not like for like" not in capsys.readouterr().out


def test_the_hindsight_bound_is_the_yardstick_on_equal_work(db, capsys) -> None:
    """plan --policy offline: the bound is given on equal work, labelled a bound, with the
    replay's gap to it (the replay is the reference, labelled replayed)."""
    argv = ["--db", str(db), "plan", "--scenario", "tiny", "--policy", "offline", "--no-progress"]
    assert main(argv) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "hindsight plan (replayed)" in text
    assert "hindsight bound (" in text and "on equal work" in text
    assert main(argv + ["--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    bound = obj["bound"]
    assert bound["equal_work_cost"] <= obj["equal_work_cost"] + 1e-9
    gap = obj["like_for_like"]["above_bound_pct"]
    assert gap == pytest.approx(100 * (obj["equal_work_cost"] / bound["equal_work_cost"] - 1))
    assert gap >= 0 and f"this run is {gap:+.1f}% above it" in text


def test_the_saving_shows_what_it_costs_in_time_and_the_strongest_baseline(db, capsys) -> None:
    """Issue 37 item 1: beside every saving, the change in mean and p95 completion time;
    beside asap-home, the strongest comparison that plans without hindsight, in the table,
    the text and the JSON, from the same library comparison."""
    from workbench.equal_work import like_for_like
    from workbench.runner import STRONGEST_CANDIDATES

    argv = ["--db", str(db), "plan", "--scenario", "tiny", "--no-progress"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "what it costs in time against asap-home: mean JCT" in text
    assert "against the strongest comparison that plans without hindsight, " in text
    head = next(line for line in text.splitlines() if "asap-home" in line and "change" in line)
    assert head.count("change") == 2  # asap-home's column and the strongest's
    assert main([*argv, "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    lfl, strong = obj["like_for_like"], obj["strongest_baseline"]
    assert strong["policy"] in STRONGEST_CANDIDATES
    assert lfl["mean_jct_h"] == pytest.approx(obj["mean_jct_h"])
    assert lfl["baseline_mean_jct_h"] == pytest.approx(obj["baseline"]["mean_jct_h"])
    assert lfl["mean_jct_change_pct"] == pytest.approx(
        100 * (obj["mean_jct_h"] / obj["baseline"]["mean_jct_h"] - 1))
    mine = {**obj, "bill_total": obj["bill"]["total"]}
    theirs = {**strong, "bill_total": strong["bill"]["total"]}
    assert strong["like_for_like"]["saving"] == pytest.approx(
        like_for_like(mine, theirs).saving)
    # No strongest comparison when asked for none (nor without a baseline).
    assert main([*argv, "--json", "--no-strongest"]) == 0
    assert json.loads(capsys.readouterr().out)["strongest_baseline"] is None


def test_the_apps_saving_shows_what_it_costs_in_time() -> None:
    from workbench.app.markup import savings_html
    from workbench.equal_work import like_for_like

    run = {"cost": 8.0, "equal_work_cost": 8.0, "bill_total": 18.0, "mean_jct_h": 12.0,
           "p95_jct_h": 30.0}
    base = {"cost": 10.0, "equal_work_cost": 10.0, "bill_total": 20.0, "mean_jct_h": 6.0,
            "p95_jct_h": 20.0}
    html = savings_html(like_for_like(run, base), "lookahead", "CNY")
    assert 'id="saving-jct-mean">+100.0 %' in html and 'id="saving-jct-p95">+50.0 %' in html


def test_the_carbon_split_of_work_left_undone_is_a_number(db, capsys) -> None:
    """real4 and green3 with ``--ignore`` printed "work left undone +nan" in the carbon
    split: ``plan``'s summary dropped the run's undone carbon, so its part was NaN. Each
    unit's part is a number that closes its split (the parts add up to the saving on equal
    work), in the summary and in ``--json``."""
    import re

    with Store(db) as store:  # lookahead waits for the cheap slots and leaves work undone
        store.save_scenario(tiny_scenario(
            [training("j", slots_of_work=3.0), training("k", arrival_slot=1, slots_of_work=2.0)],
            n_slots=4, price_a=[3, 3, 1, 1], price_b=[3, 3, 1, 1], name="tiny-undone"))
    argv = ["--db", str(db), "plan", "--scenario", "tiny-undone", "--policy", "lookahead",
            "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "nan" not in (out.out + out.err).lower()
    kg_line = next(line for line in out.out.splitlines()
                   if "where the carbon saving comes from" in line)
    assert "work left undone" in kg_line
    assert main(argv + ["--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    cmp = obj["like_for_like"]
    assert cmp["unfinished_carbon_kg"] is not None and cmp["unfinished_carbon_kg"] > 0
    parts = [float(v) for v in re.findall(r"[+-][\d.]+", kg_line.split(":", 1)[1])]
    assert sum(parts) == pytest.approx(cmp["carbon_saving_kg"], abs=0.06 * len(parts))


@pytest.mark.parametrize("missing", ["unfinished_carbon_kg", "unfinished_charge"])
def test_attribution_lines_never_print_nan(missing: str) -> None:
    """A figure missing from one run (NaN) leaves its part out; it never prints as nan."""
    from workbench.cli.summary import attribution_lines
    from workbench.equal_work import like_for_like

    run = {"equal_work_cost": 10.0, "equal_work_carbon_kg": 5.0, "cost": 9.0,
           "unfinished_charge": 1.0, "unfinished_carbon_kg": 0.5}
    base = {"equal_work_cost": 12.0, "equal_work_carbon_kg": 6.0, "cost": 12.0,
            "unfinished_charge": 0.0, "unfinished_carbon_kg": 0.0}
    del run[missing]
    att = {"cost": {"efficiency": 1.0}, "carbon_kg": {"efficiency": 0.5}}
    lines = attribution_lines(att, None, "CNY", like_for_like(run, base))
    assert lines and not any("nan" in line.lower() for line in lines)
    assert sum("work left undone" in line for line in lines) == 1


def _cli(db, *argv: str):
    """``workbench`` as a user runs it: its own process, its own logging to stderr."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "workbench.cli", "--db", str(db), *argv],
                          capture_output=True, text=True, check=False, timeout=300)


@pytest.fixture
def heavy_db(tmp_path):
    """A tiny scenario whose asap-home run emits about 3.5 kg (so a cap of "2" can be a
    forgotten %)."""
    jobs = [training("j", slots_of_work=3.0, gpus=4, counts=(4,)),
            training("k", home="b", slots_of_work=3.0, gpus=4, counts=(4,))]
    path = tmp_path / "heavy.duckdb"
    with Store(path) as store:
        store.save_scenario(tiny_scenario(jobs, n_slots=6, carbon_a=[3000.0],
                                          carbon_b=[1500.0], name="heavy"))
    return path


def test_a_kg_cap_that_reads_like_a_forgotten_percent_is_told_before_the_run(heavy_db) -> None:
    """`--carbon-cap 20` (the % forgotten) ran as a 20 kg budget and ended "4174.6 % over";
    before the policy runs, one warning says what the kg are as a share of asap-home's
    carbon and what `20%` would mean; a plausible kg cap gets no such line."""
    base = json.loads(_cli(heavy_db, "plan", "--scenario", "heavy", "--policy", "asap-home",
                           "--no-baseline", "--json", "--no-progress").stdout)["carbon_kg"]
    assert 2 < base < 100
    proc = _cli(heavy_db, "plan", "--scenario", "heavy", "--carbon-cap", "1", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    said = [i for i, line in enumerate(lines) if "a cap of 1% means a 1% cut below asap-home"
            in line]
    assert len(said) == 1, proc.stderr
    assert lines[said[0]].startswith("warning: carbon cap 1.00 kg is ") or \
        lines[said[0]].startswith("warning: carbon cap 1 kg is "), lines[said[0]]
    assert f"{100 / base:.1f}% of asap-home's" in lines[said[0]]
    # Before the policy's own warnings (printed after its run).
    assert all(not line.startswith("warning (lookahead)") for line in lines[:said[0]])
    ok = _cli(heavy_db, "plan", "--scenario", "heavy", "--carbon-cap", f"{0.9 * base:.2f}",
              "--no-progress")
    assert ok.returncode == 0 and "% means a" not in ok.stderr


def test_each_warning_is_printed_once(heavy_db) -> None:
    """A budget below the least carbon was said three times (the log, a note, the run's
    warnings) and its miss twice more: every warning line now says its fact once."""
    proc = _cli(heavy_db, "plan", "--scenario", "heavy", "--carbon-cap", "0.5",
                "--no-progress")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert sum("cannot be met with every deadline met" in line for line in lines) == 1, lines
    assert sum("carbon cap missed" in line or "MISSED" in line for line in lines) == 1, lines
    assert not any(line.startswith("WARNING ") for line in lines), lines
    bodies = [line.split(": ", 1)[1] for line in lines]
    assert len(bodies) == len(set(bodies)), lines


def test_plan_reuses_a_stored_baseline_of_the_same_inputs(db, capsys) -> None:
    """Every `plan` stored another identical asap-home run (six rows of 1,451.14 in `runs
    list`): a baseline of the same scenario content and settings (its spec key) is reused,
    with the same figures as a fresh one; another setting or changed scenario content
    runs and stores a new one."""
    argv = ["--db", str(db), "plan", "--scenario", "tiny", "--policy", "lookahead", "--json",
            "--no-progress"]

    def plan(*extra: str) -> dict:
        assert main([*argv, *extra]) == 0
        obj = json.loads(capsys.readouterr().out)
        with Store(db) as store:
            obj["baseline_run_id"] = store.run_info(obj.pop("run_id"))["baseline_run_id"]
        return obj

    def baselines() -> int:
        with Store(db) as store:
            runs = store.runs("tiny")
        return int((runs["status"] == "baseline").sum())

    first, again = plan(), plan()
    assert baselines() == 1
    # The same figures (the attribution summed from the stored plan: to the last bits),
    # the same baseline run.
    att = again.pop("attribution"), first.pop("attribution")
    assert again == first
    for unit in ("cost", "carbon_kg"):
        assert att[0][unit] == pytest.approx(att[1][unit], rel=1e-12, abs=1e-12)
    other = plan("--seed", "1")
    assert baselines() == 2 and other["baseline_run_id"] != first["baseline_run_id"]
    with Store(db) as store:  # the same name, other prices: another scenario content
        old = store.load_scenario("tiny")
        store.save_scenario(tiny_scenario(
            list(old.jobs), n_slots=8, price_a=[2.0] * 8))
    plan()
    assert baselines() == 3


def test_follow_renewables_without_on_site_supply_is_refused_before_any_run(db, capsys
                                                                          ) -> None:
    """`follow-renewables` on a scenario without its own supply equalled asap-home after a
    whole run: it is refused first, in one line saying why, and nothing is stored."""
    import dataclasses

    import numpy as np

    from workbench.supply import Source, Supply

    with Store(db) as store:
        before = len(store.runs("tiny"))
    assert main(["--db", str(db), "plan", "--scenario", "tiny", "--policy",
                 "follow-renewables", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has none, so it would run exactly as asap-home" in err
    with Store(db) as store:
        assert len(store.runs("tiny")) == before
        sunny = store.load_scenario("tiny")
        store.save_scenario(dataclasses.replace(sunny, name="sunny", supply=Supply(
            sources=(Source("pv", "a", "solar", 4.0, np.array([0.0, 0.5, 1.0, 1.0] * 2)),))))
    assert main(["--db", str(db), "plan", "--scenario", "sunny", "--policy",
                 "follow-renewables", "--no-progress", "--no-baseline"]) == 0
