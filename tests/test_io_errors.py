"""What an error message quotes of the user's data is bounded, and says where it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.cli import main
from workbench.io.errors import (
    LIST_ITEMS,
    MESSAGE_CHARS,
    QUOTE_CHARS,
    InputError,
    bounded,
    listed,
    quoted,
)
from workbench.io.grid import GRID_FORMATS
from workbench.io.jobs import JOB_FORMATS


def test_quoted_listed_and_bounded_keep_short_text_and_count_the_rest() -> None:
    assert quoted("abc") == "'abc'" and quoted(12) == "12"
    long = quoted("x" * 2_000_000)
    assert long.startswith("'xxx") and long.endswith("… (2,000,000 characters)")
    assert len(long) < QUOTE_CHARS + 40
    assert listed(["a", "b"]) == "['a', 'b']"
    many = listed([f"c{i}" for i in range(200_000)])
    assert many.startswith("['c0', 'c1',") and many.endswith("…] and 199,992 more")
    assert many.count("'c") == LIST_ITEMS
    text = "start " + "y" * 10_000 + " the fix"
    cut = bounded(text)
    assert cut.startswith("start ") and cut.endswith(" the fix") and "characters cut" in cut
    assert len(cut) < MESSAGE_CHARS + 60
    assert bounded("short") == "short"


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=5000), st.text(max_size=5000), st.integers(0, 10**6))
def test_every_input_error_is_bounded(problem: str, fix: str, line: int) -> None:
    exc = InputError("f.csv", problem, fix, line=line, column=problem)
    assert len(str(exc)) <= MESSAGE_CHARS + 60


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CSV of 200,000 columns: its header names none that any format expects."""
    path = tmp_path_factory.mktemp("wide") / "wide.csv"
    cols = [f"c{i}" for i in range(200_000)]
    path.write_text(",".join(cols) + "\n" + ",".join("1" for _ in cols) + "\n")
    return path


GRID_ARGS = {"avert": ["--year", "2023"], "urdb-json": [],
             "csv": ["--time-column", "t", "--value-column", "v", "--kind", "price",
                     "--unit", "USD/kWh"]}


@pytest.mark.parametrize("kind, fmt", [("grid", f) for f in sorted(GRID_FORMATS)]
                         + [("jobs", f) for f in sorted(JOB_FORMATS)])
def test_a_200000_column_file_gives_a_short_line(
        wide: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str,
        fmt: str) -> None:
    """A 200,000-column file yielded a 2,089,017-character error line."""
    where = ["--region", "Z", *GRID_ARGS.get(fmt, [])] if kind == "grid" else ["--into", "z"]
    rc = main(["--db", str(tmp_path / "wb.duckdb"), "import", kind, fmt, str(wide), *where])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1, err[:300]
    assert len(err) <= MESSAGE_CHARS + 80, len(err)


def test_a_huge_cell_is_quoted_short(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.csv"
    path.write_text("Datetime (UTC),Datetime (Local),Price (USD/MWh)\n"
                    f"2023-01-01T00:00:00Z,2023-01-01T00:00:00,{'9' * 100_000}x\n")
    assert main(["--db", str(tmp_path / "wb.duckdb"), "import", "grid", "price-csv", str(path),
                 "--region", "Z"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 400 and "(100,001 characters)" in err, err


@pytest.mark.parametrize("readings, message", [
    ([("2023-01-01T00:00:00Z", 100), ("2023-01-01T00:00:00Z", 120)],
     r"column 'history\[1\]\.datetime': duplicate timestamp 2023-01-01 00:00:00 UTC \(also "
     r"at history\[0\]\); delete one of the two readings"),
    ([("2023-01-01T01:00:00Z", 100), ("2023-01-01T00:00:00Z", 120)],
     r"column 'history\[1\]\.datetime': time goes backwards: .* \(history\[0\]\)"),
    ([("2023-01-01T00:00:00Z", 100), ("2023-01-01T01:00:00", 120)],
     r"column 'history\[1\]\.datetime': time '2023-01-01T01:00:00' lacks a UTC offset unlike "
     r"history\[0\]"),
    ([("2023-01-01T00:00:00Z", 100), ("soon", 120)],
     r"column 'history\[1\]\.datetime': cannot read time 'soon'"),
    ([("2023-01-01T00:00:00Z", "lots")], r"column 'history\[0\]\.carbonIntensity': 'lots' is "
     r"not a number"),
])
def test_a_json_file_names_the_reading_never_line_none(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], readings: list, message: str) -> None:
    """A duplicate time in a JSON file said "also on line None"."""
    import re

    path = tmp_path / "ci.json"
    path.write_text(json.dumps({"zone": "DE", "history": [
        {"datetime": t, "carbonIntensity": v} for t, v in readings]}))
    assert main(["--db", str(tmp_path / "wb.duckdb"), "import", "grid", "electricitymaps-json",
                 str(path), "--region", "Z"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "None" not in err and re.search(message, err), err
