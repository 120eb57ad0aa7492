"""A store file that cannot be used says why in one line: no permission is not damage,
read commands open read-only, a file cut short (anywhere) or corrupt is damaged, a damaged
side file of runs is refused with the store unchanged."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from helpers_sim import inference, tiny_scenario, training

from workbench.cli import main
from workbench.store import Store, StoreError, StoreLockedError
from workbench.store.errors import open_error
from workbench.store.files import HEADER_BYTES

READ_COMMANDS = (("data", "list"), ("runs", "list"), ("runs", "show", "latest"),
                 ("runs", "compare", "latest"), ("scenario", "list"))
"""Commands that only read the store."""

WRITE_COMMANDS = (("runs", "rename", "latest", "x"), ("scenario", "generate", "seed3"))
"""Commands that write it."""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding the tiny scenario, a greedy run and its asap-home baseline."""
    path = tmp_path_factory.mktemp("stored") / "wb.duckdb"
    jobs = [training("j", slots_of_work=1.0, deadline_slot=8),
            training("k", home="b", arrival_slot=1, slots_of_work=2.0, deadline_slot=8),
            inference("svc", last=8)]
    with Store(path) as store:
        store.save_scenario(tiny_scenario(jobs, n_slots=8))
    assert main(["plan", "--scenario", "tiny", "--policy", "greedy", "--no-progress",
                 "--db", str(path)]) == 0
    return path


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "unexpected" not in err and "Traceback" not in err
    return lines[0]


# -- permissions ---------------------------------------------------------------------------

@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A scratch folder another user can enter (pytest's own are private to this user)."""
    path = Path(tempfile.mkdtemp(prefix="wb-perm-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for p in (path, *path.iterdir()):
            p.chmod(0o700 if p.is_dir() else 0o600)
        shutil.rmtree(path)


_RUN_COMMANDS = """
import contextlib, io, json, sys
from workbench.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(argv)
    out.append([rc, err.getvalue()])
print(json.dumps(out))
"""


def _cli_as_other_user(commands: list[list[str]]) -> list[tuple[int, str]]:
    """Exit status and stderr of each CLI command, run in one child process of a user
    without rights beyond the file modes: this user when it is not root (root ignores
    them), else ``nobody`` (through util-linux's ``setpriv``)."""
    drop: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: file modes cannot be tested")
        drop = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    env = {**os.environ, "HOME": tempfile.gettempdir(), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([*drop, sys.executable, "-c", _RUN_COMMANDS, json.dumps(commands)],
                          capture_output=True, text=True, timeout=600, env=env, check=True)
    return [(int(rc), str(err)) for rc, err in json.loads(proc.stdout.splitlines()[-1])]


def _assert_permission(result: tuple[int, str], word: str) -> None:
    rc, err = result
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: cannot {word} store"), err
    assert "not damaged" in lines[0]
    assert "backup" not in lines[0] and "damaged (" not in lines[0]


@pytest.mark.slow
def test_a_store_in_a_read_only_folder_is_read_read_only_and_refused_for_writes(
        stored: Path, shared_dir: Path) -> None:
    db = shared_dir / "wb.duckdb"
    shutil.copy(stored, db)
    db.chmod(0o644)  # readable by all, writable only by its owner
    shared_dir.chmod(0o555)
    before = _digest(db)
    with_db = [["--db", str(db), *cmd] for cmd in (*READ_COMMANDS, *WRITE_COMMANDS)]
    results = _cli_as_other_user(with_db)
    for cmd, (rc, err) in zip(READ_COMMANDS, results, strict=False):
        assert rc == 0, (cmd, err)
    for result in results[len(READ_COMMANDS):]:
        _assert_permission(result, "write")
    db.chmod(0o666)  # the file writable, its folder not: DuckDB's log cannot be made
    (result,) = _cli_as_other_user([["--db", str(db), "runs", "rename", "latest", "x"]])
    _assert_permission(result, "write")
    assert "folder" in result[1] and ".wal" in result[1]
    assert _digest(db) == before and not (shared_dir / "wb.duckdb.wal").exists()


@pytest.mark.slow
def test_a_store_without_read_permission_is_a_permission_error(stored: Path,
                                                               shared_dir: Path) -> None:
    db = shared_dir / "wb.duckdb"
    shutil.copy(stored, db)
    commands = [["--db", str(db), "data", "list"], ["--db", str(db), "runs", "rename",
                                                    "latest", "x"]]
    for mode in (0o600, 0o000):
        db.chmod(mode)
        for result in _cli_as_other_user(commands):
            _assert_permission(result, "read")


def _hold_read_only(path: str, ready: object, done: object) -> None:
    with Store(path, read_only=True):
        ready.set()  # type: ignore[attr-defined]
        done.wait(60)  # type: ignore[attr-defined]


@pytest.mark.slow
def test_read_commands_open_the_store_read_only(stored: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """While another process reads the store (a shared lock), the read commands run (a
    writable open would be refused as locked) and a writing command is refused."""
    import multiprocessing as mp

    db = tmp_path / "wb.duckdb"
    shutil.copy(stored, db)
    ctx = mp.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold_read_only, args=(str(db), ready, done))
    proc.start()
    try:
        assert ready.wait(60)
        for cmd in READ_COMMANDS:
            assert main(["--db", str(db), *cmd]) == 0, capsys.readouterr().err
        capsys.readouterr()
        assert main(["--db", str(db), "runs", "rename", "latest", "x"]) == 2
        assert "locked by another process" in _one_line(capsys)
    finally:
        done.set()
        proc.join(60)


# -- damage --------------------------------------------------------------------------------

def _offsets(size: int) -> list[int]:
    """Cuts inside the headers, inside blocks and on block boundaries."""
    block = 262_144
    whole = [3 * HEADER_BYTES + k * block for k in range(1, (size - 3 * HEADER_BYTES)
                                                         // block)]
    inside = [int(size * f) for f in (0.1, 0.3, 0.5, 0.7, 0.9, 0.99)] + [size - 1]
    return sorted({100, 5000, 3 * HEADER_BYTES + 10, *whole[:: max(len(whole) // 6, 1)],
                   *inside})


@pytest.mark.slow
def test_a_store_cut_short_anywhere_is_damaged(stored: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    size = stored.stat().st_size
    offsets = _offsets(size)
    assert len(offsets) >= 12
    cut = tmp_path / "cut.duckdb"
    for n in offsets:
        with stored.open("rb") as src:
            cut.write_bytes(src.read(n))
        for cmd in (("data", "list"), ("runs", "show", "latest"),
                    ("runs", "rename", "latest", "x")):
            assert main(["--db", str(cut), *cmd]) == 2, (n, cmd)
            line = _one_line(capsys)
            assert "is damaged" in line and "restore it from a backup" in line, (n, line)
        assert cut.stat().st_size == n  # nothing written to it


@pytest.mark.slow
def test_a_corrupt_block_is_damage_never_unexpected(stored: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Blocks across the file overwritten in turn: each command either works (the block
    held nothing it read) or says the store is damaged; never a traceback or an unexpected
    error."""
    size = stored.stat().st_size
    bad = tmp_path / "bad.duckdb"
    damaged = 0
    starts = range(3 * HEADER_BYTES, size, 262_144)
    for start in starts[:: max(len(starts) // 8, 1)]:
        shutil.copy(stored, bad)
        with bad.open("r+b") as fh:
            fh.seek(start + 4096)
            fh.write(b"\xff" * 4096)
        for cmd in (("data", "list"), ("runs", "show", "latest")):
            rc = main(["--db", str(bad), *cmd])
            if rc:
                assert rc == 2
                assert "is damaged" in _one_line(capsys)
                damaged += 1
            capsys.readouterr()
    assert damaged > 0


def test_a_damaged_block_is_not_called_a_lock() -> None:
    exc = duckdb.IOException("Corrupt database file: computed checksum 1 does not match "
                             "stored checksum 2 in block at location 12288")
    err = open_error(exc, "x.duckdb", read_only=True)
    assert not isinstance(err, StoreLockedError) and "is damaged" in str(err)
    lock = duckdb.IOException('Could not set lock on file "x.duckdb": Conflicting lock is '
                              "held in python (PID 1)")
    assert isinstance(open_error(lock, "x.duckdb", read_only=False), StoreLockedError)


# -- side files ----------------------------------------------------------------------------

@pytest.mark.slow
def test_a_side_file_cut_short_is_refused_and_the_store_kept(
        stored: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.save_scenario(tiny_scenario([training("j", slots_of_work=1.0)], n_slots=4))
    before = _digest(db)
    size = stored.stat().st_size
    side = tmp_path / "wb.runs-cut.duckdb"
    for n in (int(size * 0.3), 3 * HEADER_BYTES + 262_144, size - 1):
        with stored.open("rb") as src:
            side.write_bytes(src.read(n))
        assert main(["--db", str(db), "import", "runs", str(side)]) == 2
        line = _one_line(capsys)
        assert f"side file {side} is damaged" in line and "nothing was copied" in line
        with pytest.raises(StoreError, match="side file .* is damaged"), Store(db) as store:
            store.copy_runs_from(side)
    assert _digest(db) == before
    with Store(db, read_only=True) as store:
        assert store.runs().empty
    assert main(["--db", str(db), "import", "runs", str(stored)]) == 0  # the whole file
    with Store(db, read_only=True) as store:
        assert len(store.runs()) == 2


def test_an_empty_file_is_not_called_damaged(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.duckdb"
    empty.touch()
    for cmd in (("data", "list"), ("scenario", "generate", "seed3")):
        assert main(["--db", str(empty), *cmd]) == 2
        line = _one_line(capsys)
        assert "is an empty file (0 bytes)" in line and "backup" not in line
    assert empty.stat().st_size == 0


def test_a_block_started_beside_its_log_is_left_to_duckdb(stored: Path, tmp_path: Path) -> None:
    """A process killed while it checkpointed leaves the file ending inside a block with
    its write-ahead log beside it (seen in the kill tests: 7,143,424 bytes): DuckDB
    recovers from the log, so the check does not call it damaged; without the log the same
    file is."""
    from workbench.store.errors import StoreError
    from workbench.store.files import check_store_file

    killed = tmp_path / "killed.duckdb"
    killed.write_bytes(stored.read_bytes() + b"\0" * 53_248)
    with pytest.raises(StoreError, match="cut short inside a block"):
        check_store_file(killed)
    (tmp_path / "killed.duckdb.wal").write_bytes(b"\1" * 100)
    check_store_file(killed)
