"""``workbench import grid|jobs``: exit codes, messages, the store left unchanged on error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.cli import build_parser, main
from workbench.store import Store

PRICES = ("Datetime (UTC),Datetime (Local),Price (USD/MWh)\n"
          "2023-01-01 00:00:00+00:00,2023-01-01 01:00:00+01:00,-3.5\n"
          "2023-01-01 01:00:00+00:00,2023-01-01 02:00:00+01:00,12.0\n")


def test_import_grid_and_jobs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "wb.duckdb")
    prices = tmp_path / "p.csv"
    prices.write_text(PRICES)
    assert main(["--db", db, "import", "grid", "price-csv", str(prices), "--region", "DE",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rows"] == 2 and out["min"] == pytest.approx(-0.0035) and out["unit"] == "USD/kWh"
    work = tmp_path / "w.csv"
    work.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,2,256\n")
    assert main(["--db", db, "import", "jobs", "pollux-workload", str(work), "--into", "w",
                 "--homes", "x,y", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["jobs"] == 1
    with Store(db) as store:
        before = store.table("grid_series")
    bad = tmp_path / "bad.csv"
    bad.write_text(PRICES.replace("12.0", "twelve"))
    assert main(["--db", db, "import", "grid", "price-csv", str(bad), "--region", "DE"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "bad.csv, line 3" in err and "twelve" in err
    assert main(["--db", db, "import", "grid", "price-csv", str(prices), "--region", "DE",
                 "--year", "2023"]) == 2
    assert "does not take --year" in capsys.readouterr().err
    with Store(db) as store:
        assert store.table("grid_series").equals(before)


def test_profiles_subcommand_is_registered() -> None:
    args = build_parser().parse_args(["import", "profiles", "zeus", "somewhere"])
    assert args.kind == "zeus" and callable(args.func)


def test_imports_read_the_file_before_taking_the_store_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], store_lock,  # noqa: ANN001
) -> None:
    """With another process holding the store, a bad file is reported as the file's error
    (the parse ran first, without the lock); a good file then meets the lock message."""
    db = tmp_path / "wb.duckdb"
    with Store(db):
        pass
    bad_grid = tmp_path / "p.csv"
    bad_grid.write_text(PRICES.replace("12.0", "twelve"))
    bad_jobs = tmp_path / "g.csv"
    bad_jobs.write_text("arrival_time,length,cpus\n0,-5,1\n")
    good = tmp_path / "ok.csv"
    good.write_text(PRICES)
    store_lock.take(db)
    try:
        for argv, text in (
            (["import", "grid", "price-csv", str(bad_grid), "--region", "R"], "line 3"),
            (["import", "jobs", "gaia", str(bad_jobs), "--into", "g"], "-5 is negative"),
            (["import", "grid", "price-csv", str(good), "--region", "R"],
             "is locked by another process"),
        ):
            assert main(["--db", str(db), *argv]) == 2
            err = capsys.readouterr().err
            assert err.startswith("error: ") and err.count("\n") == 1 and text in err, err
    finally:
        store_lock.release()
