"""Scripts read ``--json`` (issue 24 item 9) and operators read warnings (item 6): every
command's ``--json`` prints one JSON document alone on stdout (messages go to stderr), and a
run's warnings reach the terminal once each, short. Real processes: the CLI's own logging
set-up is what goes to the terminal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_sim import inference, tiny_scenario, training

from workbench.store import Store

pytestmark = pytest.mark.slow


def _cli(db: Path, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workbench.cli", "--db", str(db), *argv],
                          capture_output=True, text=True, timeout=600, cwd=cwd)


def _json(proc: subprocess.CompletedProcess[str]) -> object:
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout.strip()
    assert out[:1] in "{[", f"stdout does not start with JSON: {out[:200]!r}"
    return json.loads(out)  # the whole of stdout: one document, nothing before or after


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("json") / "wb.duckdb"
    jobs = [training("j", slots_of_work=1.0, deadline_slot=8),
            training("k", home="b", arrival_slot=1, slots_of_work=2.0, deadline_slot=8),
            inference("svc", last=8)]
    with Store(path) as store:
        store.save_scenario(tiny_scenario(jobs, n_slots=8,
                                          price_a=[1.0, 1.0, 0.2, 0.2, 1.0, 1.0, 1.0, 1.0]))
        store.save_scenario(tiny_scenario(jobs, n_slots=8, name="other"))
        # Jobs without a deadline wait at a large V (lyapunov's completion rule keeps
        # deadlines): a run with unfinished jobs.
        store.save_scenario(tiny_scenario([training("j", slots_of_work=1.0),
                                           training("k", home="b", slots_of_work=2.0)],
                                          n_slots=8, name="tiny-free"))
    return path


def test_every_json_command_prints_json_alone(db: Path, tmp_path: Path) -> None:
    grid = tmp_path / "price.csv"
    grid.write_text("time,value\n2025-07-01T00:00:00Z,50\n2025-07-01T01:00:00Z,60\n")
    trace = tmp_path / "w.csv"
    trace.write_text("name,time,application,num_replicas,batch_size\nj0,0,cifar10,2,256\n")
    plan = _json(_cli(db, "plan", "--scenario", "tiny", "--policy", "greedy", "--json",
                      "--no-progress"))
    assert isinstance(plan, dict) and "like_for_like" in plan
    off = _json(_cli(db, "plan", "--scenario", "tiny", "--policy", "offline", "--json",
                     "--no-progress"))
    assert isinstance(off, dict) and "bound" in off
    listed = _json(_cli(db, "runs", "list", "--json"))
    assert isinstance(listed, dict) and isinstance(listed["runs"], list)  # the README's shape
    ids = [r["run_id"] for r in listed["runs"]]
    checks: list[tuple[str, ...]] = [
        ("scenario", "list", "--json"), ("scenario", "show", "tiny", "--json"),
        ("cubes", "tiny", "--json"), ("runs", "show", "latest", "--json"),
        ("runs", "compare", ids[0], ids[1], "--json"),
        ("runs", "export", "latest", "--out", str(tmp_path / "p.csv"), "--json"),
        ("data", "list", "--json"),
        ("quote", "tiny", "--app", "toy", "--work", "1e6", "--home", "a", "--json"),
        ("devices", "list", "--json"),
        ("predict", "--app", "cifar10", "--gpu", "A100", "--gpus", "1", "--local-batch",
         "32", "--json"),
        ("import", "grid", "csv", str(grid), "--region", "ZZ", "--time-column", "time",
         "--value-column", "value", "--kind", "price", "--unit", "USD/MWh", "--json"),
        ("import", "jobs", "pollux-workload", str(trace), "--into", "w", "--json"),
        ("sweep", "--scenario", "tiny", "--policy", "lyapunov", "--V", "1,3", "--threads",
         "--workers", "1", "--out", str(tmp_path / "sweep.csv"), "--no-progress", "--json"),
        ("runs", "delete", ids[-1], "--json"),
        ("scenario", "delete", "other", "--json"),
    ]
    for argv in checks:
        proc = _cli(db, *argv)
        if argv[0] == "quote" and proc.returncode == 1:  # no option meets the deadline
            proc = subprocess.CompletedProcess(proc.args, 0, proc.stdout, proc.stderr)
        try:
            _json(proc)
        except (AssertionError, json.JSONDecodeError) as exc:
            raise AssertionError(f"workbench {' '.join(argv)}: {exc}") from None


def test_a_runs_warnings_reach_the_terminal_once_and_short(db: Path) -> None:
    """``plan`` prints each warning of the run and of asap-home once, in one line of at most
    WARNING_CHARS (plus its prefix); the library's log records of the same warnings are left
    out of the terminal; with -v they are in the log as well."""
    from workbench.cli.plan import WARNING_CHARS

    argv = ("plan", "--scenario", "tiny-free", "--policy", "lyapunov", "--V", "1000",
            "--carbon-cap", "20%", "--no-progress")
    proc = _cli(db, *argv)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    warned = [ln for ln in lines if ln.startswith("warning (")]
    assert warned, proc.stderr
    assert not any(ln.startswith("WARNING workbench.sim") for ln in lines), proc.stderr
    assert len(set(warned)) == len(warned)
    for ln in warned:
        assert len(ln) <= WARNING_CHARS + len("warning (lyapunov): "), ln
    assert any("unfinished" in ln for ln in warned)
    verbose = _cli(db, *argv, "-v")
    assert "WARNING workbench.sim" in verbose.stderr


def test_a_knob_the_policy_does_not_take_is_one_line_naming_its_knobs(db: Path) -> None:
    proc = _cli(db, "plan", "--scenario", "tiny", "--V", "3", "--no-progress")  # lookahead
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert err.count("\n") == 0 and err.startswith("error: ")
    assert "takes no knob 'V'; its knobs:" in err and "window_h" in err
    assert "__init__" not in err and "Traceback" not in err


def test_a_long_warning_keeps_the_job_ids_and_says_where_the_rest_is() -> None:
    from workbench.cli.plan import WARNING_CHARS, short_warning

    items = "; ".join(f"job-{i}: horizon ended with {i}% left (deadline 2023-07-18 12:47 UTC "
                      "is after the horizon)" for i in range(5))
    msg = f"7 training job(s) unfinished at the horizon end: {items} (+2 more)"
    assert len(msg) > 400
    short = short_warning(msg, "`workbench runs show abc`")
    assert len(short) <= WARNING_CHARS and short.startswith("7 training job(s) unfinished")
    assert "job-0, job-1" in short and "more (reasons: `workbench runs show abc`)" in short
    assert short_warning("short", "x") == "short"
    plain = short_warning("word " * 100, "`workbench runs show abc`")
    assert len(plain) <= WARNING_CHARS and plain.endswith("(`workbench runs show abc`)")


@pytest.mark.shared_data
def test_the_battery_keeps_stdout_for_its_table(shared_data: Path, tmp_path: Path,
                                                capfd: pytest.CaptureFixture[str]) -> None:
    """``bench/battery.py --json`` printed the import commands' messages on stdout before its
    JSON: building its scenarios writes nothing there now (the messages go to stderr)."""
    bench = Path(__file__).resolve().parents[1] / "bench"
    sys.path.insert(0, str(bench))
    try:
        import battery
    finally:
        sys.path.remove(str(bench))
    built = battery.build(shared_data.resolve(), tmp_path, ["us3-jul-burst"], tmp_path)
    out, err = capfd.readouterr()
    assert "us3-jul-burst" in built and out == ""
    assert "imported" in err  # the messages are still there, on stderr
