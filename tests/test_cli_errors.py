"""No traceback reaches a user: argument errors, damaged files and unexpected failures are one
line (``error: ...``), exit 2 (1 for an unexpected error, pointing to ``-v``)."""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.io.grid import read_grid
from workbench.store import Store


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("argv, text", [
    (["import", "grid", "avert", "a.csv", "--region", "R", "--year", "1"],
     "--year: 1 is not a whole number >= 1900"),
    (["import", "grid", "urdb-json", "u.json", "--region", "R", "--tier", "-1"],
     "--tier: -1 is not a whole number >= 0"),
    (["import", "jobs", "gaia", "g.csv", "--into", "g", "--slack", "nan"],
     "--slack: nan is not a number >= 0"),
    (["import", "jobs", "gaia", "g.csv", "--into", "g", "--limit", "-1"],
     "--limit: -1 is not a whole number >= 1"),
    (["profile", "--name", "x", "--duration", "inf"], "--duration: inf is not a number > 0"),
    (["profile", "--name", "x", "--duration", "nan"], "--duration: nan is not a number > 0"),
    (["profile", "--name", "x", "--interval-ms", "nan", "--duration", "1"],
     "--interval-ms: nan is not a number >= 1"),
    (["serve", "--port", "99999"], "--port: 99999 is not a whole number"),
    (["profile", "--name", " ", "--duration", "1"], "--name is empty"),
    (["plan", "--policy", "nope"], "argument --policy: invalid choice: 'nope'"),
    (["predict", "--app", "cifar10", "--gpu", "A100", "--local-batch", "32",
      "--inter-node-gbit-s", "nan"], "--inter-node-gbit-s: nan is not a number > 0"),
    (["predict", "--app", "cifar10", "--gpu", "A100", "--local-batch", "32", "--gpus", "16",
      "--nodes", "2", "--inter-node-gbit-s", "0"], "--inter-node-gbit-s: 0 is not a number > 0"),
    (["predict", "--app", "cifar10", "--gpu", "A100", "--local-batch", "1" + "0" * 20],
     "--local-batch takes whole numbers N[,N...] in 1..10000000"),
    (["compute", "measure", "--app", "cifar10", "--gpu", "A100", "--local-batch", "32",
      "--steps", "10", "--warmup-s", "nan", "--", "true"], "--warmup-s: nan is not a number"),
    (["compute", "measure", "--app", "cifar10", "--gpu", "A100", "--local-batch", "32",
      "--steps", "0", "--", "true"], "--steps: 0 is not a whole number >= 1"),
    (["forecast", "backtest", "--region", "R", "--kind", "price", "--start", "2023-07-01",
      "--end", "2023-07-03", "--timezone", "Mars/X"], "--timezone: unknown timezone 'Mars/X'"),
    (["forecast", "backtest", "--region", "R", "--kind", "price", "--start", "2023-07-01",
      "--end", "2023-07-03", "--horizon-h", "100000"],
     "--horizon-h: 100000 is not a whole number >= 1 and <= 168"),
    (["forecast", "arrivals", "gaia", "g.csv", "--train-weeks", "-1"],
     "--train-weeks: -1 is not a whole number >= 1"),
    (["forecast", "backtest", "--region", "R", "--kind", "price", "--start", "yesterday",
      "--end", "2023-07-03"], "--start: 'yesterday' is not an ISO time"),
    (["quote", "seed3", "--app", "cifar10", "--work", "1e6", "--home", "x", "--arrival",
      "yesterday"], "--arrival: 'yesterday' is not an ISO time"),
    (["quote", "seed3", "--app", "cifar10", "--work", "1e6", "--home", "x", "--arrival",
      "0001-01-01"], "--arrival: 0001-01-01 is outside the years 1900-2199"),
])
def test_bad_arguments_are_one_line(argv: list[str], text: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert text in _one_line(capsys)


def test_urdb_dates_out_of_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "u.json"
    path.write_text(json.dumps({"energyratestructure": [[{"rate": 0.1}]],
                                "energyweekdayschedule": [[0] * 24] * 12,
                                "energyweekendschedule": [[0] * 24] * 12}))
    for start, end in (("9999-01-01", "9999-02-01"), ("0001-01-01", "0001-01-02")):
        assert main(["--db", str(tmp_path / "wb.duckdb"), "import", "grid", "urdb-json",
                     str(path), "--region", "R", "--start", start, "--end", end,
                     "--timezone", "UTC"]) == 2
        assert "outside the years 1900-2200" in _one_line(capsys)


def test_urdb_span_beyond_pandas_range_is_one_line(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """1900..2199 is inside the accepted years but longer than pandas' Timedelta (292 y)."""
    path = tmp_path / "u.json"
    path.write_text(json.dumps({"energyratestructure": [[{"rate": 0.1}]],
                                "energyweekdayschedule": [[0] * 24] * 12,
                                "energyweekendschedule": [[0] * 24] * 12}))
    assert main(["--db", str(tmp_path / "wb.duckdb"), "import", "grid", "urdb-json", str(path),
                 "--region", "R", "--start", "1900-01-01", "--end", "2199-12-31",
                 "--timezone", "UTC"]) == 2
    assert "the span is longer than ten years" in _one_line(capsys)


@pytest.mark.parametrize("argv, flag", [
    (["import", "jobs", "gaia", "g.csv", "--into", "g", "--start", "yesterday"], "--start"),
    (["import", "grid", "urdb-json", "u.json", "--region", "R", "--start", "tomorrow",
      "--end", "2023-07-02", "--timezone", "UTC"], "--start/--end"),
])
def test_a_bad_time_flag_suggests_no_flag_the_command_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], flag: str,
) -> None:
    """``--start yesterday`` names the flag and asks for an ISO time: neither ``import jobs``
    nor ``urdb-json`` takes ``--time-format``."""
    (tmp_path / "g.csv").write_text("arrival_time,length,cpus\n0,100,1\n")
    (tmp_path / "u.json").write_text(json.dumps({
        "energyratestructure": [[{"rate": 0.1}]], "energyweekdayschedule": [[0] * 24] * 12,
        "energyweekendschedule": [[0] * 24] * 12}))
    argv = [str(tmp_path / a) if a in ("g.csv", "u.json") else a for a in argv]
    assert main(["--db", str(tmp_path / "wb.duckdb"), *argv]) == 2
    err = _one_line(capsys)
    assert f"column '{flag}'" in err and "pass an ISO time" in err
    assert "--time-format" not in err


@pytest.mark.slow
def test_a_closed_pipe_is_not_an_error(tmp_path: Path) -> None:
    """``workbench scenario list | head -0``: no traceback, no 'unexpected' line, exit 141
    as for SIGPIPE."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    with Store(tmp_path / "wb.duckdb"):
        pass
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", "--db", str(tmp_path / "wb.duckdb"),
         "scenario", "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the command prints
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "unexpected" not in err and "Exception" not in err


def test_damaged_store_and_wrong_kind_of_path(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "wb.duckdb"
    with Store(db):
        pass
    cut = tmp_path / "cut.duckdb"
    shutil.copy(db, cut)
    with cut.open("r+b") as fh:
        fh.truncate(5000)
    assert main(["--db", str(cut), "scenario", "list"]) == 2
    assert "restore it from a backup" in _one_line(capsys)
    # --db naming a folder, a file in a missing folder, or a file of another kind (an
    # SQLite file would make DuckDB try to download its sqlite extension).
    assert main(["--db", str(tmp_path), "scenario", "list"]) == 2
    assert "is a folder; pass --db with a file name" in _one_line(capsys)
    assert main(["--db", str(tmp_path / "no" / "wb.duckdb"), "scenario", "list"]) == 2
    assert "the folder" in _one_line(capsys) and not (tmp_path / "no").exists()
    import sqlite3

    lite = sqlite3.connect(tmp_path / "lite.db")
    lite.execute("CREATE TABLE t (x)")
    lite.commit()
    lite.close()
    before = (tmp_path / "lite.db").read_bytes()
    assert main(["--db", str(tmp_path / "lite.db"), "scenario", "list"]) == 2
    assert "is not a DuckDB store (another kind of file)" in _one_line(capsys)
    assert (tmp_path / "lite.db").read_bytes() == before
    afile = tmp_path / "a.csv"
    afile.write_text("x\n1\n")
    assert main(["--db", str(db), "import", "profiles", "pollux", str(afile)]) == 2
    assert "is not a folder" in _one_line(capsys)
    assert main(["--db", str(db), "import", "grid", "price-csv", str(tmp_path), "--region",
                 "R"]) == 2
    assert "this is a folder, not a file" in _one_line(capsys)


def test_unexpected_errors_are_one_line_and_point_to_verbose(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    import workbench.cli.scenario as cli_scenario

    def boom(args: argparse.Namespace) -> int:
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(cli_scenario, "_list", boom)
    with Store(tmp_path / "wb.duckdb"):
        pass
    rc = main(["scenario", "list", "--db", str(tmp_path / "wb.duckdb")])
    assert rc == 1
    err = _one_line(capsys)
    assert "unexpected ZeroDivisionError: float division by zero; rerun with -v" in err


def test_jobs_missing_value_does_not_suggest_a_flag_jobs_lack(tmp_path: Path) -> None:
    from workbench.io.errors import InputError
    from workbench.io.jobs import read_gaia

    path = tmp_path / "g.csv"
    path.write_text("arrival_time,length,cpus\n0,,1\n")
    with pytest.raises(InputError, match="fill the value in or delete the row") as info:
        read_gaia(path)
    assert "--drop-missing" not in str(info.value)


def test_local_time_file_with_blank_gap_rows_and_crlf(tmp_path: Path) -> None:
    """A day-ahead export in Brussels time lists the missing 02:00 of the spring change with
    a blank price; --drop-missing removes it before the times are checked; CRLF is fine."""
    rows = ["Datetime,Price (EUR/MWh)", "2023-03-26 00:00,50", "2023-03-26 01:00,40",
            "2023-03-26 02:00,", "2023-03-26 03:00,30"]
    path = tmp_path / "be.csv"
    path.write_bytes(("\r\n".join(rows) + "\r\n").encode())
    frame = read_grid("price-csv", path, "BE", timezone="Europe/Brussels", drop_missing=True)
    assert [str(t) for t in frame["time_utc"]] == [
        "2023-03-25 23:00:00", "2023-03-26 00:00:00", "2023-03-26 01:00:00"]
    assert frame["price_per_kwh"].tolist() == pytest.approx([0.05, 0.04, 0.03])
    from workbench.io.errors import InputError

    with pytest.raises(InputError, match="line 4.*pass --drop-missing"):
        read_grid("price-csv", path, "BE", timezone="Europe/Brussels")
    path.write_bytes(("\r\n".join(rows).replace("02:00,", "02:00,35") + "\r\n").encode())
    with pytest.raises(InputError, match=r"line 4.*spring daylight-saving gap\); a local-time "
                       r"export lists no value for that hour: delete the row"):
        read_grid("price-csv", path, "BE", timezone="Europe/Brussels")


@pytest.mark.slow
def test_sweep_with_a_bad_scheduler_is_one_line(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--db", str(tmp_path / "wb.duckdb"), "sweep", "--scheduler", "not an address",
                 "--policy", "asap-home", "--out", str(tmp_path / "s.csv")]) == 2
    assert "cannot reach the Dask scheduler not an address" in _one_line(capsys)
    assert not (tmp_path / "s.csv").exists()


def test_import_runs_from_the_store_itself_is_one_line(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "wb.duckdb"
    with Store(db):
        pass
    assert main(["--db", str(db), "import", "runs", str(db)]) == 2
    assert "is the store itself (--db)" in _one_line(capsys)


def test_fit_defaults_and_compute_train_refuse_to_write_over_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    db = tmp_path / "wb.duckdb"
    with Store(db):
        pass
    before = db.read_bytes()
    for argv in (["fit", "defaults", "--profiles", str(tmp_path), "--out", str(db)],
                 ["compute", "train", "--data", str(tmp_path), "--out", str(db)]):
        assert main(["--db", str(db), *argv]) == 2
        assert f"--out {db} is the store" in _one_line(capsys)
    assert db.read_bytes() == before


@pytest.mark.parametrize("argv", [["runs", "list"], ["runs", "show", "latest"],
                                  ["runs", "compare", "a", "b"], ["data", "list", "--json"],
                                  ["scenario", "list"], ["runs", "delete", "latest"]])
def test_read_only_commands_refuse_a_missing_store(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A mistyped --db is not silently a new empty store: one line naming the path and how
    to make one, exit 2, no file created. Commands that write a store still create it."""
    typo = tmp_path / "wokbench.duckdb"
    assert main([*argv, "--db", str(typo)]) == 2
    err = _one_line(capsys)
    assert err.startswith(f"error: store {typo} does not exist; check --db")
    assert "workbench scenario generate seed3" in err
    assert not typo.exists()


def test_commands_that_write_create_the_store(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "new.duckdb"
    trace = tmp_path / "w.csv"
    trace.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,2,256\n")
    assert main(["import", "jobs", "pollux-workload", str(trace), "--into", "w",
                 "--db", str(db)]) == 0
    assert db.is_file()
    capsys.readouterr()
    assert main(["data", "list", "--db", str(db)]) == 0


# -- issue 25, item 4: no output flag may name a file a store owns -------------------------

OUTPUT_FLAGS = [
    (["plan", "--scenario", "tiny", "--policy", "asap-home", "--no-progress"], "--out"),
    (["plan", "--scenario", "tiny", "--policy", "asap-home", "--no-progress"],
     "--migrations-out"),
    (["plan", "--scenario", "tiny", "--policy", "asap-home", "--no-progress"], "--jobs-out"),
    (["plan", "--scenario", "tiny", "--policy", "asap-home", "--no-progress"], "--sites-out"),
    (["runs", "export", "latest"], "--out"),
    (["runs", "export", "latest", "--out", "{dir}/ok.csv"], "--migrations-out"),
    (["runs", "export", "latest", "--out", "{dir}/ok.csv"], "--sites-out"),
    (["sweep", "--scenario", "tiny", "--policy", "asap-home", "--threads"], "--out"),
    (["fit", "defaults", "--profiles", "{dir}"], "--out"),
    (["compute", "train", "--data", "{dir}"], "--out"),
    (["compute", "train", "--data", "{dir}"], "--kernels-out"),
    (["compute", "train", "--data", "{dir}"], "--terms-out"),
    (["compute", "train", "--data", "{dir}"], "--collectives-out"),
    (["frontier", "--scenario", "tiny", "--policy", "threshold", "--threads"], "--out"),
    (["fit", "power-limits", "--profiles", "{dir}"], "--out"),
    (["flexibility", "--scenario", "tiny", "--policy", "asap-home", "--hours", "1",
      "--notice-h", "0", "--no-progress"], "--out"),
]
"""Every output flag of every command, with the arguments it needs besides
(:func:`test_every_output_flag_is_in_the_table` keeps it complete)."""


def _output_flags() -> set[tuple[str, str]]:
    """``(command, flag)`` of every option of the parser that names a file to write."""
    import argparse

    from workbench.cli import build_parser

    found: set[tuple[str, str]] = set()

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, (*path, name))
            for flag in action.option_strings:
                if flag == "--out" or flag.endswith("-out"):
                    found.add((" ".join(path), flag))

    walk(build_parser(), ())
    return found


def test_every_output_flag_is_in_the_table() -> None:
    listed = set()
    for argv, flag in OUTPUT_FLAGS:
        words = [a for a in argv if not a.startswith("-")]
        for n in (2, 1):
            command = " ".join(words[:n])
            if (command, flag) in _output_flags():
                listed.add((command, flag))
                break
    assert listed == _output_flags()

STORE_OWNED = ["store", "wal", "temp folder", "in temp folder", "side file", "side file wal",
               "other store", "symlink to store", "hard link to store"]


def _owned_path(kind: str, db: Path) -> Path:
    """A path the store ``db`` (or another DuckDB file beside it) owns, made real where a
    real file is what makes it owned."""
    side = db.with_name(f"{db.stem}.runs-20250101T000000000000Z.duckdb")
    if kind in ("side file", "side file wal") and not side.exists():
        with Store(side):
            pass
    if kind == "other store" and not (db.parent / "other.duckdb").exists():
        with Store(db.parent / "other.duckdb"):
            pass
    if kind in ("temp folder", "in temp folder"):
        Path(f"{db}.tmp").mkdir(exist_ok=True)
    link, hard = db.parent / "link.duckdb", db.parent / "hard.duckdb"
    if kind == "symlink to store" and not link.exists():
        link.symlink_to(db)
    if kind == "hard link to store" and not hard.exists():
        hard.hardlink_to(db)
    return {"store": db, "wal": Path(f"{db}.wal"), "temp folder": Path(f"{db}.tmp"),
            "in temp folder": Path(f"{db}.tmp") / "plan.csv", "side file": side,
            "side file wal": Path(f"{side}.wal"), "other store": db.parent / "other.duckdb",
            "symlink to store": link, "hard link to store": hard}[kind]


@pytest.fixture(scope="module")
def planned_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from helpers_sim import tiny_scenario, training

    db = tmp_path_factory.mktemp("owned") / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(tiny_scenario([training("j", slots_of_work=1.0)], n_slots=4))
    assert main(["--db", str(db), "plan", "--scenario", "tiny", "--policy", "asap-home",
                 "--no-progress", "--no-baseline"]) == 0
    return db


@pytest.mark.parametrize("kind", STORE_OWNED)
@pytest.mark.parametrize("argv, flag", OUTPUT_FLAGS,
                         ids=[f"{a[0]} {a[1]} {f}" for a, f in OUTPUT_FLAGS])
def test_no_output_may_be_a_file_the_store_owns(
        planned_store: Path, capsys: pytest.CaptureFixture[str], argv: list[str], flag: str,
        kind: str) -> None:
    """`plan --out STORE.wal` said "plan written" and the file was gone (DuckDB replays and
    removes its log when the store closes); an export over a side file lost its runs."""
    from helpers_store import store_digest

    db = planned_store
    owned = _owned_path(kind, db)
    capsys.readouterr()
    before = store_digest(db)
    kept = owned.read_bytes() if owned.is_file() else None
    rc = main(["--db", str(db), *[a.replace("{dir}", str(db.parent)) for a in argv],
               flag, str(owned)])
    err = _one_line(capsys)
    assert rc == 2 and f"{flag} {owned} is " in err and "pass another file" in err, err
    assert store_digest(db) == before
    assert (owned.read_bytes() if owned.is_file() else None) == kept
    assert not list(db.parent.glob(".*.partial"))


# -- issue 25, item 6: a full disk under an output is one line, and leaves no partial file --


@pytest.fixture(params=["tmpfs", "dev-full"])
def full_folder(request: pytest.FixtureRequest, tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on a full disk: a 64 KiB tmpfs filled to the last byte (where this process
    may mount one, i.e. as root), or, everywhere, a folder whose exports' temporary files
    are opened on /dev/full (every write or flush fails with ENOSPC, as on a full disk)."""
    import os
    import subprocess
    import tempfile

    folder = tmp_path / "full"
    folder.mkdir()
    if request.param == "tmpfs":
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs",
                                  str(folder)], capture_output=True, check=False)
        if mounted.returncode:
            pytest.skip("cannot mount a tmpfs here (needs root); the dev-full case runs")
        try:
            with (folder / "filler").open("wb") as fh:
                while True:
                    fh.write(b"\0" * 4096)
                    fh.flush()
        except OSError:
            pass
        try:
            yield folder
        finally:
            subprocess.run(["umount", str(folder)], check=False)
        return
    real = tempfile.mkstemp

    def on_dev_full(*args: object, **kwargs: object) -> tuple[int, str]:
        fd, name = real(*args, **kwargs)  # type: ignore[call-overload]
        if Path(name).parent != folder:
            return fd, name
        os.close(fd)
        return os.open("/dev/full", os.O_WRONLY), name

    monkeypatch.setattr(tempfile, "mkstemp", on_dev_full)
    yield folder


FULL_DISK_OUTPUTS = [(argv, flag) for argv, flag in OUTPUT_FLAGS
                     if argv[0] in ("plan", "runs", "sweep", "flexibility")]
"""The output flags whose files the CSV writer writes (fit and compute train need data)."""


@pytest.mark.slow
@pytest.mark.parametrize("argv, flag", FULL_DISK_OUTPUTS,
                         ids=[f"{a[0]} {a[1]} {f}" for a, f in FULL_DISK_OUTPUTS])
def test_a_full_disk_under_an_output_is_one_line_and_leaves_no_partial_file(
        planned_store: Path, tmp_path: Path, full_folder: Path,
        capsys: pytest.CaptureFixture[str], argv: list[str], flag: str) -> None:
    """A full disk under --out gave two lines, the second "unexpected OSError", exit 1, and
    left the `.partial` file on the full disk."""
    from helpers_store import store_digest

    db = tmp_path / "wb.duckdb"
    shutil.copy(planned_store, db)
    before = store_digest(db)
    target = full_folder / "out.csv"
    capsys.readouterr()
    assert main(["--db", str(db), *[a.replace("{dir}", str(tmp_path)) for a in argv], flag,
                 str(target)]) == 2
    err = _one_line(capsys)
    assert f"cannot write {target}: the disk is full" in err and "another disk" in err, err
    assert not target.exists() and not list(full_folder.glob(".*.partial"))
    if argv[0] == "plan":
        assert store_digest(db) == before  # a plan whose outputs fail stores nothing


# -- issue 37, item 4: an output in a folder that does not exist is refused, not created --


@pytest.mark.parametrize("argv, flag", OUTPUT_FLAGS,
                         ids=[f"{a[0]} {a[1]} {f}" for a, f in OUTPUT_FLAGS])
def test_an_output_in_a_missing_folder_is_refused_before_anything_runs(
        planned_store: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
        flag: str) -> None:
    """`plan --out /nonexistent/dir/plan.csv` created /nonexistent/dir at the root of the
    filesystem: every output flag now refuses a folder that does not exist, in one line,
    before any run, and creates nothing."""
    from helpers_store import store_digest

    db = planned_store
    missing = db.parent / "no-such-folder"
    target = missing / "deeper" / "out.csv"
    capsys.readouterr()
    before = store_digest(db)
    rc = main(["--db", str(db), *[a.replace("{dir}", str(db.parent)) for a in argv],
               flag, str(target)])
    err = _one_line(capsys)
    assert rc == 2, err
    assert f"{flag} {target}: the folder {target.parent} does not exist" in err, err
    assert "create it first" in err
    assert not missing.exists()
    assert store_digest(db) == before


# -- issue 37, item 4: a mistyped option or choice gets the closest known one --------------


def _leaves() -> list[tuple[tuple[str, ...], str]]:
    """``(command words, a long option)`` of every (sub)command: its longest option, the
    one most worth a suggestion."""
    import argparse

    from workbench.cli import build_parser

    out: list[tuple[tuple[str, ...], str]] = []

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs:
            for name, child in dict(subs[0].choices).items():
                walk(child, (*path, name))
            return
        flags = [f for a in parser._actions for f in a.option_strings
                 if f.startswith("--") and len(f) > 6 and f not in ("--help", "--verbose")]
        if flags:
            out.append((path, max(flags, key=len)))

    walk(build_parser(), ())
    return out


@pytest.mark.parametrize("words, flag", _leaves(), ids=[" ".join(w) for w, _ in _leaves()])
def test_a_mistyped_option_gets_did_you_mean(words: tuple[str, ...], flag: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """`plan --polcy x` said only "unrecognized arguments": every command now names the
    option meant."""
    typo = flag[:4] + flag[5:]  # one letter dropped: --polcy for --policy
    assert main([*words, typo, "1"]) == 2
    err = _one_line(capsys)
    assert f"did you mean `{flag}`?" in err and f"workbench {' '.join(words)}" in err, err


def test_plan_polcy_and_a_mistyped_choice(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--polcy", "lookahead"]) == 2
    assert "did you mean `--policy`?" in _one_line(capsys)
    assert main(["plan", "--policy", "lookahed"]) == 2
    assert "did you mean `lookahead`?" in _one_line(capsys)
    assert main(["pln"]) == 2
    assert "did you mean `plan`?" in _one_line(capsys)
