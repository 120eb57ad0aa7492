"""Nothing stored is replaced unless asked: every command that stores a named record refuses
a name already stored (exit 2, one line, the store as it was) unless ``--replace``; names a
file must hold once are refused when repeated, naming the line; a record's key includes
what it belongs to (an LLM job's profiles, its job set)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.store import Store

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "examples" / "models"


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _llm_csv(path: Path, model: str, names: tuple[str, ...] = ("j1",)) -> Path:
    # 1024 tokens: within every shipped model's n_positions (gpt2-large stops at 1024).
    rows = "".join(f"{n},0,{MODELS / model},1024,32,5e8,bf16,4\n" for n in names)
    path.write_text("name,time,model_config,seq_len,global_batch,tokens,precision,gpus\n"
                    + rows)
    return path


def _pollux(path: Path, names: tuple[str, ...] = ("a",), replicas: int = 2) -> Path:
    path.write_text("name,time,application,num_replicas,batch_size\n"
                    + "".join(f"{n},0,cifar10,{replicas},256\n" for n in names))
    return path


def _device(path: Path, name: str, memory_gb: float = 80.0) -> Path:
    path.write_text(json.dumps({
        "name": name, "fp32_tflops": 60.0, "fp16_tflops": 1000.0, "mem_bw_gb_s": 4000.0,
        "memory_gb": memory_gb, "tdp_w": 700.0, "intra_node_gb_s": 450.0,
        "inter_node_gbit_s": 400.0}))
    return path


def _devices(db: Path) -> dict[str, str]:
    with Store(db, read_only=True) as store:
        t = store.table("devices")
    return dict(zip(t["name"], t["spec"], strict=True))


def _jobs(db: Path, name: str) -> list[tuple[str, str, float, float]]:
    with Store(db, read_only=True) as store:
        return sorted((j.job_id, j.app, j.checkpoint_gb, j.work_samples)
                      for j in store.load_jobs(name))


# Each writer: the command that stores a record, a second command storing another record
# under the same name, and what the store holds of it (unchanged by a refused second).
Writer = tuple[Callable[[Path], list[str]], Callable[[Path], list[str]],
               Callable[[Path], object]]

WRITERS: dict[str, Writer] = {
    "import jobs pollux-workload": (
        lambda d: ["import", "jobs", "pollux-workload", str(_pollux(d / "a.csv")), "--into",
                   "w"],
        lambda d: ["import", "jobs", "pollux-workload", str(_pollux(d / "b.csv", ("a", "b"), 4)),
                   "--into", "w"],
        lambda d: _jobs(d / "w.duckdb", "w")),
    "import jobs llm-jobs": (
        lambda d: ["import", "jobs", "llm-jobs", str(_llm_csv(d / "a.csv", "opt-1.3b.json")),
                   "--into", "w"],
        lambda d: ["import", "jobs", "llm-jobs", str(_llm_csv(d / "b.csv", "gpt2-large.json")),
                   "--into", "w"],
        lambda d: _jobs(d / "w.duckdb", "w")),
    "devices add": (
        lambda d: ["devices", "add", str(_device(d / "a.json", "B200"))],
        lambda d: ["devices", "add", str(_device(d / "b.json", "B200", memory_gb=40.0))],
        lambda d: _devices(d / "w.duckdb")),
    "devices add (another spelling)": (
        lambda d: ["devices", "add", str(_device(d / "a.json", "B200"))],
        lambda d: ["devices", "add", str(_device(d / "b.json", "b-200", memory_gb=40.0))],
        lambda d: _devices(d / "w.duckdb")),
    "scenario generate": (
        lambda d: ["scenario", "generate", "seed3", "--as", "s"],
        lambda d: ["scenario", "generate", "seed3", "--as", "s", "--seed", "1"],
        lambda d: _jobs(d / "w.duckdb", "s")),
}


@pytest.mark.slow
@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_stored_name_is_refused_unless_replace(writer: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A second record under a stored name is refused; the same record again changes
    nothing (an import is idempotent); ``--replace`` replaces."""
    first, second, held = WRITERS[writer]
    db = ["--db", str(tmp_path / "w.duckdb")]
    assert main([*first(tmp_path), *db]) == 0
    before = held(tmp_path)
    if writer.startswith("import"):
        assert main([*first(tmp_path), *db]) == 0
        assert held(tmp_path) == before
    capsys.readouterr()
    again = second(tmp_path)
    assert main([*again, *db]) == 2
    err = _one_line(capsys)
    assert "--replace" in err
    assert held(tmp_path) == before  # the refused command changed nothing
    assert main([*again, *db, "--replace"]) == 0
    assert held(tmp_path) != before


@pytest.mark.parametrize("argv", [
    lambda d: ["import", "jobs", "llm-jobs",
               str(_llm_csv(d / "x.csv", "opt-1.3b.json", ("j1", "j2", "j1"))), "--into", "x"],
    lambda d: ["import", "jobs", "pollux-workload", str(_pollux(d / "x.csv", ("a", "b", "a"))),
               "--into", "x"],
], ids=["llm-jobs", "pollux-workload"])
def test_a_name_repeated_in_a_file_is_refused_at_its_line(
        argv: Callable[[Path], list[str]], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "w.duckdb"
    assert main([*argv(tmp_path), "--db", str(db)]) == 2
    err = _one_line(capsys)
    assert "line 4" in err and ("'a'" in err or "'j1'" in err)
    assert "twice" in err
    assert not db.exists()  # nothing written


@pytest.mark.parametrize("name", ["A100", "a100", "NVIDIA A-100", "910b", "h100 sxm"])
def test_a_device_named_as_a_shipped_one_is_refused(name: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A stored device overrides the shipped one in every lookup (a cifar10 step on
    "A100" went from 0.024 s to 1.30 s)."""
    db = tmp_path / "w.duckdb"
    assert main(["--db", str(db), "devices", "add", str(_device(tmp_path / "d.json", name)),
                 "--replace"]) == 2
    assert "stands for the shipped device" in _one_line(capsys)


@pytest.mark.slow
def test_llm_profiles_belong_to_their_job_set(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Two job sets, each with a job ``j1`` of another model: each set's job keeps its own
    profiles (they were keyed ``llm:j1`` across sets: the second import replaced the
    first's)."""
    db = ["--db", str(tmp_path / "w.duckdb")]
    for into, model in (("s1", "opt-1.3b.json"), ("s2", "gpt2-large.json")):
        assert main(["import", "jobs", "llm-jobs",
                     str(_llm_csv(tmp_path / f"{into}.csv", model)), "--into", into, *db]) == 0
    with Store(tmp_path / "w.duckdb", read_only=True) as store:
        apps = {j.app for s in ("s1", "s2") for j in store.load_jobs(s)}
        profiles = {(p.app, p.gpu_type): p for p in store.load_profiles()}
    assert apps == {"llm:s1/j1", "llm:s2/j1"}
    a, b = profiles[("llm:s1/j1", "A100")], profiles[("llm:s2/j1", "A100")]
    assert a.throughput != b.throughput
