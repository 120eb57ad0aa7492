"""LLM jobs in scenarios, job sets and quotes: model config in, jobs and predicted profiles out.

Three doors lead here:

* a scenario config's ``[[jobs.llm]]`` tables (:class:`workbench.config.LlmJobEntry`;
  :func:`jobs_from_entries`, called by :func:`workbench.build.build_scenario`);
* the ``llm-jobs`` job-trace format of ``workbench import jobs`` (:func:`read_llm_trace`,
  :func:`import_llm_jobs`:
  a CSV ``name,time,model_config,seq_len,global_batch,tokens|steps,precision,gpus`` with
  optional ``purpose``, ``deadline_h``, ``pretrained_tokens``, ``activation_checkpointing``
  (true/false), ``zero`` (0-3); ``time`` in seconds after
  the trace start, ``model_config`` relative to the CSV);
* ``workbench quote --model-config`` (:func:`with_llm_profile`).

Each job's application is ``llm:<owner>/<job id>``, the owner the scenario or job set it
belongs to (profiles are shared by the whole store: a job ``j1`` of another set, of another
model, must not replace this one's); its profile on every GPU type of the scenario
(or of ``--gpu-type``) is predicted (:func:`workbench.profiles.predict_llm_profile`) and
labelled so. Work is counted in sequences (``tokens / seq_len``), throughput in sequences
per second, and the job runs at its global batch (the profile offers no other). Unless
given, the sizes that travel are derived from the model: the checkpoint that moves on
migration is the FP32 weights and Adam's two FP32 moments (12 bytes per parameter, as
mixed precision keeps them, :data:`workbench.compute.transformer.STATE_BYTES`); the
dataset is the job's tokens at 2 bytes each (4 above a 65,536-token vocabulary: the token
ids as ``uint16``/``uint32``), plus the pre-trained weights at the job's precision for a
fine-tune. A quote of an LLM job reports each option's step time and model FLOPs
utilisation (:func:`llm_quote_columns`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.compute.llm import LlmJobSpec, Predictor, load_predictor
from workbench.compute.opgraph import build_step_graph
from workbench.compute.transformer import (
    DTYPE_BYTES,
    STATE_BYTES,
    ModelConfigError,
    check_seq_len,
    limit_key,
    load_model_config,
)
from workbench.model import Job, Scenario
from workbench.perf import JobProfile
from workbench.profiles import predict_llm_profile_tp

log = logging.getLogger(__name__)

LLM_PREFIX = "llm:"
LLM_GPU_TYPES: tuple[str, ...] = ("H800", "A100", "Ascend910B")
"""GPU types an imported LLM job's profiles are predicted on (plus ``--reference-gpu``)."""
DEFAULT_MENU: tuple[int, ...] = (1, 2, 4, 8, 16, 32)


def app_name(job_id: str, owner: str = "") -> str:
    """The application (profile) name of an LLM job of scenario or job set ``owner``
    (``llm:<owner>/<job id>``; ``llm:<job id>`` without one: a quote's job, never stored)."""
    return f"{LLM_PREFIX}{owner}/{job_id}" if owner else f"{LLM_PREFIX}{job_id}"


def checkpoint_gb(params: float, precision: str) -> float:
    """Default checkpoint size, GB: FP32 weights and Adam's moments in both precisions
    (``precision`` kept for the callers; module docstring)."""
    del precision
    return params * (STATE_BYTES["weights"] + STATE_BYTES["optimizer"]) / 1e9


def dataset_gb(spec: LlmJobSpec, vocab: int, params: float) -> float:
    """Default dataset size, GB: the job's tokens as token ids, and a fine-tune's
    pre-trained weights at the job's precision (module docstring)."""
    token_bytes = 2 if vocab <= 65536 else 4
    weights = params * DTYPE_BYTES[spec.precision] if spec.purpose == "finetune" else 0.0
    return (spec.tokens * token_bytes + weights) / 1e9


def spec_of(job_id: str, config: Path, seq_len: int, global_batch: int,
            tokens: float | None, steps: int | None, precision: str, purpose: str,
            pretrained_tokens: float | None, activation_checkpointing: bool = False,
            zero: int = 0, owner: str = "") -> LlmJobSpec:
    """An :class:`LlmJobSpec` from the operator's fields (exactly one of tokens, steps);
    ``owner`` the scenario or job set the job belongs to (:func:`app_name`)."""
    if (tokens is None) == (steps is None):
        raise ValueError(f"LLM job {job_id!r}: give exactly one of tokens and steps")
    total = float(tokens) if tokens is not None else float(steps or 0) * global_batch * seq_len
    return LlmJobSpec(app_name(job_id, owner), Path(config), int(seq_len), int(global_batch),
                      total, precision, purpose, float(pretrained_tokens or 0.0),
                      activation_checkpointing, int(zero))


def profiles_for_job(spec: LlmJobSpec, gpu_types: Iterable[str],
                     predictor: Predictor | None = None) -> tuple[list[JobProfile], int]:
    """The job's predicted profile on each GPU type where it fits (a type it does not fit
    on is logged and left out), and the largest tensor-parallel degree they need."""
    by_type = profiles_by_type(spec, gpu_types, predictor)
    return [p for p, _ in by_type.values()], max((t for _, t in by_type.values()), default=1)


def profiles_by_type(spec: LlmJobSpec, gpu_types: Iterable[str],
                     predictor: Predictor | None = None) -> dict[str, tuple[JobProfile, int]]:
    """Per GPU type the job fits on: its profile and the tensor-parallel degree a replica
    needs there (GPU counts must be multiples of it)."""
    from workbench.fit import ProfileDataError

    pred = predictor or load_predictor()
    out: dict[str, tuple[JobProfile, int]] = {}
    for g in dict.fromkeys(gpu_types):
        try:
            prof, t = predict_llm_profile_tp(spec, g, pred)
        except ProfileDataError as exc:
            log.warning("%s", exc)
            continue
        out[prof.gpu_type] = (prof, t)
    return out


def _menu(requested: int, counts: Sequence[int] | None, tp: int) -> tuple[int, ...]:
    """The GPU-count menu: multiples of the tensor-parallel degree ``tp`` only."""
    menu = {c for c in set(counts or DEFAULT_MENU) | {requested} if c % tp == 0}
    if not menu:
        raise ValueError(f"no GPU count in {sorted(set(counts or DEFAULT_MENU))} is a "
                         f"multiple of the {tp}-way tensor parallelism the model needs")
    return tuple(sorted(menu))


def llm_job(spec: LlmJobSpec, job_id: str, arrival: datetime, home: str, requested: int,
            counts: Sequence[int] | None = None, gpu_types: Sequence[str] = (),
            deadline: datetime | None = None, ckpt_gb: float | None = None,
            data_gb: float | None = None, tp: int = 1) -> Job:
    """The :class:`~workbench.model.Job` of an LLM job spec (``tp``: the tensor-parallel
    degree its profiles need; the request is rounded up to a multiple of it; checkpoint and
    dataset sizes derived from the model unless given)."""
    model = load_model_config(spec.model_config)
    params = build_step_graph(model, "inference", 1, 1).params["total"]
    requested = -(-int(requested) // tp) * tp
    return Job(job_id=job_id, kind="training", app=spec.name, arrival=arrival, home=home,
               requested_gpus=requested, gpu_counts=_menu(requested, counts, tp),
               gpu_types=tuple(gpu_types), batch_size=spec.global_batch,
               work_samples=spec.work_samples, deadline=deadline,
               checkpoint_gb=ckpt_gb if ckpt_gb is not None else checkpoint_gb(
                   params, spec.precision),
               dataset_gb=data_gb if data_gb is not None else dataset_gb(spec, model.vocab,
                                                                         params))


def jobs_from_entries(entries: Sequence[Any], base_dir: str | Path, start: datetime,
                      gpu_types: Iterable[str], predictor: Predictor | None = None,
                      owner: str = "") -> tuple[list[Job], list[JobProfile]]:
    """Jobs and predicted profiles of a config's ``[[jobs.llm]]`` entries (each entry a
    :class:`workbench.config.LlmJobEntry`); ``gpu_types`` are the scenario's pool types,
    ``owner`` its name (:func:`app_name`)."""
    pred = predictor or load_predictor()
    types = list(dict.fromkeys(gpu_types))
    jobs, profiles = [], []
    for e in entries:
        cfg = Path(e.model_config_file)
        if not cfg.is_absolute():
            cfg = Path(base_dir) / cfg
        spec = spec_of(e.job_id, cfg, e.seq_len, e.global_batch, e.tokens, e.steps,
                       e.precision, e.purpose, e.pretrained_tokens,
                       e.activation_checkpointing, e.zero, owner)
        arrival = start + timedelta(hours=e.arrival_hours)
        deadline = arrival + timedelta(hours=e.deadline_hours) if e.deadline_hours else None
        profs, tp = profiles_for_job(spec, e.gpu_types or types, pred)
        if not profs:
            raise ValueError(f"[[jobs.llm]] {e.job_id!r}: {cfg.name} fits on none of the GPU "
                             f"types {types}; use a smaller model or larger devices")
        jobs.append(llm_job(spec, e.job_id, arrival, e.home, e.gpus, e.gpu_counts,
                            tuple(e.gpu_types or ()), deadline, e.checkpoint_gb,
                            e.dataset_gb, tp))
        profiles += profs
    return jobs, profiles


def with_llm_profile(scenario: Scenario, spec: LlmJobSpec,
                     gpu_types: Sequence[str] = ()) -> tuple[Scenario, dict[str, int]]:
    """``scenario`` with the job's predicted profiles on its pools' GPU types (or
    ``gpu_types``) added (the quote's ``--model-config``), and the tensor-parallel degree
    each type needs."""
    types = list(gpu_types) or sorted({p.gpu_type for p in scenario.pools})
    by_type = profiles_by_type(spec, types)
    if not by_type:
        raise ValueError(f"{spec.model_config.name} fits on none of {types}")
    keep = [p for p in scenario.profiles if p.app != spec.name]
    return (replace(scenario, profiles=tuple(keep + [p for p, _ in by_type.values()])),
            {g: t for g, (_, t) in by_type.items()})


# --------------------------------------------------------------------------- trace

LLM_TRACE_COLUMNS = ("name", "time", "model_config", "seq_len", "global_batch", "precision",
                     "gpus")
_FLAGS = ("", "true", "false", "1", "0")


_TRACE_FIELDS: dict[str, str] = {
    "name": "job_id", "model_config": "model_config", "seq_len": "seq_len",
    "global_batch": "global_batch", "tokens": "tokens", "steps": "steps",
    "precision": "precision", "gpus": "gpus", "purpose": "purpose",
    "pretrained_tokens": "pretrained_tokens", "deadline_h": "deadline_hours"}
"""CSV column -> :class:`workbench.config.LlmJobEntry` field: a row is checked by the
``[[jobs.llm]]`` model, so both doors take the same values (``time``, in seconds, is
checked against the entry's ``arrival_hours`` bound)."""

_WHOLE = ("seq_len", "global_batch", "gpus", "steps")


def read_llm_trace(path: str | Path) -> pd.DataFrame:
    """The rows of an ``llm-jobs`` CSV (module docstring), checked by the ``[[jobs.llm]]``
    model's bounds (:class:`workbench.config.LlmJobEntry`), names unique; raises
    :class:`workbench.io.errors.InputError` naming the line and column to fix."""
    from workbench.io.errors import InputError, quoted

    p = Path(path)
    try:
        df = pd.read_csv(p, dtype=str, keep_default_na=False)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise InputError(p, f"not a readable CSV ({exc})", "pass an llm-jobs CSV") from None
    missing = [c for c in LLM_TRACE_COLUMNS if c not in df.columns]
    if "tokens" not in df.columns and "steps" not in df.columns:
        missing.append("tokens or steps")
    if missing:
        raise InputError(p, f"lacks columns {missing}",
                         f"give {', '.join(LLM_TRACE_COLUMNS)} and tokens or steps")
    df["name"] = df["name"].str.strip()
    seen: dict[str, int] = {}
    for i, row in df.iterrows():
        line = int(str(i)) + 2
        name = str(row["name"])
        if name in seen:
            raise InputError(p, f"job name {quoted(name)} appears twice (also line "
                             f"{seen[name]})", "give every job its own name", line=line,
                             column="name")
        seen[name] = line
        _check_row(p, line, {str(k): str(v) for k, v in row.items()})
        if str(row.get("zero", "") or "0").strip() not in ("0", "1", "2", "3"):
            raise InputError(p, f"zero {row['zero']!r} is not a ZeRO stage", "give 0, 1, 2 or 3",
                             line=line, column="zero")
        if str(row.get("activation_checkpointing", "")).strip().lower() not in _FLAGS:
            raise InputError(p, f"activation_checkpointing {row['activation_checkpointing']!r}",
                             "give true or false", line=line, column="activation_checkpointing")
        cfg = Path(row["model_config"])
        cfg = cfg if cfg.is_absolute() else p.parent / cfg
        try:
            model = load_model_config(cfg)
        except ModelConfigError as exc:
            raise InputError(p, str(exc), "fix the model config or its path", line=line,
                             column="model_config") from None
        if model.max_positions and float(row["seq_len"]) > model.max_positions:
            raise InputError(p, f"seq_len {row['seq_len']} exceeds {model.name}'s "
                             f"{limit_key(model)} {model.max_positions}",
                             f"give seq_len <= {model.max_positions}", line=line,
                             column="seq_len")
        df.loc[i, "model_config"] = str(cfg)
    return df


def _check_row(path: Path, line: int, row: Mapping[str, str]) -> None:
    """One CSV row through :class:`workbench.config.LlmJobEntry` (numbers parsed, whole
    numbers kept whole); the first error as an ``InputError`` at its column."""
    from pydantic import ValidationError

    from workbench.config import LlmJobEntry
    from workbench.io.errors import InputError, quoted

    max_h = float(LlmJobEntry.model_fields["arrival_hours"].metadata[-1].le)
    text = row["time"].strip()
    try:
        t = float(text)
    except ValueError:
        raise InputError(path, f"{quoted(text)} is not a number", "give time in seconds "
                         "after the trace start", line=line, column="time") from None
    if not (math.isfinite(t) and 0 <= t <= max_h * 3600):
        raise InputError(path, f"{quoted(text)} is outside 0 .. {max_h * 3600:g} s",
                         "give time in seconds after the trace start (at most ten years)",
                         line=line, column="time")
    given = [c for c in ("tokens", "steps") if row.get(c, "").strip()]
    if len(given) != 1:
        raise InputError(path, f"gives {' and '.join(given) or 'neither tokens nor steps'}",
                         "give exactly one of tokens and steps", line=line,
                         column=given[-1] if given else "tokens")
    doc: dict[str, Any] = {"home": "unassigned"}
    for col, field in _TRACE_FIELDS.items():
        raw = row.get(col, "").strip()
        if raw == "":
            continue
        value: Any = raw
        if col not in ("name", "model_config", "precision", "purpose"):
            try:
                value = float(raw)
            except ValueError:
                value = raw  # the model names it: not a number
            if col in _WHOLE and isinstance(value, float) and value.is_integer():
                value = int(value)
        doc[field] = value
    try:
        LlmJobEntry.model_validate(doc)
    except ValidationError as exc:
        e = exc.errors(include_url=False)[0]
        bad = str(e["loc"][0]) if e["loc"] else ""
        at = next((c for c, f in _TRACE_FIELDS.items() if f == bad), None)
        info = LlmJobEntry.model_fields.get(bad)
        want = info.description if info is not None and info.description else "see the docs"
        shown = quoted(row.get(at, "")) if at else "the row"
        msg = str(e["msg"]).removeprefix("Value error, ")
        if e["type"] in ("int_type", "int_from_float"):
            msg = "is not a whole number"
        elif e["type"] in ("float_type", "float_parsing", "int_parsing"):
            msg = "is not a number"
        elif msg.startswith("Input should be "):
            msg = "should be " + msg.removeprefix("Input should be ")
        raise InputError(path, f"{shown} {msg}", f"give {at or bad}: {want}",
                         line=line, column=at) from None


def jobs_from_llm_trace(frame: pd.DataFrame, origin: datetime, homes: Sequence[str],
                        gpu_types: Iterable[str], predictor: Predictor | None = None,
                        owner: str = "") -> tuple[list[Job], list[JobProfile]]:
    """Jobs (homes in turn) and their predicted profiles on ``gpu_types``; ``owner`` the
    job set they go into (:func:`app_name`)."""
    pred = predictor or load_predictor()
    types = list(dict.fromkeys(gpu_types))
    jobs, profiles = [], []
    for i, row in enumerate(frame.to_dict("records")):
        try:
            job, profs = _trace_job(row, origin, homes[i % len(homes)], types, pred, owner)
        except ValueError as exc:
            raise ValueError(f"line {i + 2}, job {row['name']!r}: {exc}") from None
        jobs.append(job)
        profiles += profs
    return jobs, profiles


def _trace_job(row: Mapping[str, Any], origin: datetime, home: str, types: list[str],
               pred: Predictor, owner: str) -> tuple[Job, list[JobProfile]]:
    """One checked llm-jobs row's job and its profiles (:func:`jobs_from_llm_trace`)."""
    steps = _opt(row, "steps")
    spec = spec_of(row["name"], Path(row["model_config"]), int(float(row["seq_len"])),
                   int(float(row["global_batch"])), _opt(row, "tokens"),
                   None if steps is None else int(steps), row["precision"] or "bf16",
                   row.get("purpose") or "pretrain", _opt(row, "pretrained_tokens"),
                   str(row.get("activation_checkpointing", "")).lower() in ("1", "true"),
                   int(_opt(row, "zero") or 0), owner)
    arrival = origin + timedelta(seconds=float(row["time"]))
    dl = _opt(row, "deadline_h")
    profs, tp = profiles_for_job(spec, types, pred)
    if not profs:
        raise ValueError(f"{Path(row['model_config']).name} fits on none of the GPU types "
                         f"{types}; use a smaller model or larger devices")
    return llm_job(spec, row["name"], arrival, home, int(float(row["gpus"])),
                   deadline=arrival + timedelta(hours=dl) if dl else None, tp=tp), profs


def _opt(row: Mapping[str, Any], key: str) -> float | None:
    v = row.get(key, "")
    return None if v in ("", None) else float(v)


@dataclass(frozen=True)
class LlmQuote:
    """What ``quote --model-config`` needs: the scenario with the job's profiles, its
    application, work (sequences), the derived data sizes (GB), the spec and per GPU type
    the count the job's GPU counts must be multiples of."""

    scenario: Scenario
    app: str
    work_samples: float
    checkpoint_gb: float
    dataset_gb: float
    spec: LlmJobSpec
    tp: Mapping[str, int]


def llm_quote_inputs(scenario: Scenario, config: str | Path, seq_len: int | None,
                     global_batch: int | None, tokens: float | None, precision: str,
                     purpose: str, gpu_types: Sequence[str] = (),
                     activation_checkpointing: bool = False, zero: int = 0) -> LlmQuote:
    """``quote --model-config``: the scenario with the job's predicted profiles, its
    application name, work and derived sizes. Raises ``ValueError`` naming what is
    missing or wrong (a sequence longer than the config allows included)."""
    missing = [f for f, v in (("--seq-len", seq_len), ("--global-batch", global_batch),
                              ("--tokens", tokens)) if v is None]
    if missing:
        raise ValueError(f"--model-config needs {', '.join(missing)}")
    assert seq_len is not None and global_batch is not None and tokens is not None
    model = load_model_config(config)  # a bad config is one error line
    check_seq_len(model, seq_len)
    spec = spec_of(Path(config).stem, Path(config), seq_len, global_batch, tokens, None,
                   precision, purpose, None, activation_checkpointing, zero)
    params = build_step_graph(model, "inference", 1, 1).params["total"]
    sc, tp = with_llm_profile(scenario, spec, gpu_types)
    return LlmQuote(sc, spec.name, spec.work_samples, checkpoint_gb(params, precision),
                    dataset_gb(spec, model.vocab, params), spec, tp)


def llm_quote_columns(options: pd.DataFrame, q: LlmQuote) -> pd.DataFrame:
    """``options`` of a quote with ``step_time_s`` (one optimizer step at the option's
    batch) and ``mfu`` (model FLOPs utilisation, :class:`workbench.compute.step.
    TransformerStep`) of each option; options whose GPU count is not a multiple of what
    the GPU type needs (the tensor-parallel degree; a node under ZeRO) are left out."""
    options = options[[int(n) % q.tp.get(g, 1) == 0 for n, g in zip(
        options["n_gpus"], options["gpu_type"], strict=True)]].reset_index(drop=True)
    from workbench.compute.devices import device
    from workbench.compute.step import model_flops
    from workbench.perf import throughput

    model = load_model_config(q.spec.model_config)
    per_seq = model_flops(model, build_step_graph(model, "train", q.spec.seq_len, 1), 1)
    profs = {(p.app, p.gpu_type): p for p in q.scenario.profiles}
    per_node = {p.gpu_type: p.gpus_per_node for p in q.scenario.pools}
    step, mfu = [], []
    for r in options.to_dict("records"):
        prof = profs.get((q.app, r["gpu_type"]))
        if prof is None:
            step.append(float("nan"))
            mfu.append(float("nan"))
            continue
        n, b = int(r["n_gpus"]), int(r["batch_size"])
        x = float(throughput(prof.throughput, n, b, per_node.get(r["gpu_type"], 8)))
        peak = device(r["gpu_type"]).peak_tflops(q.spec.precision) * 1e12 * n
        step.append(b / x)
        mfu.append(per_seq * x / peak)
    return options.assign(step_time_s=step, mfu=mfu)


def import_llm_jobs(store: Any, frame: pd.DataFrame, path: str | Path, into: str, *,
                    start: str | None = None, homes: Sequence[str] = ("unassigned",),
                    reference_gpu: str = "A100", replace: bool = False) -> Any:
    """``workbench import jobs llm-jobs``: the jobs of :func:`read_llm_trace` into job set
    ``into`` and their predicted profiles (on :data:`LLM_GPU_TYPES` and ``reference_gpu``)
    into the store's profiles; returns a :class:`workbench.io.jobs.JobImport`."""
    from workbench.io.errors import InputError
    from workbench.io.jobs import EPOCH, JobImport, refuse_changed_jobs

    if store.has_scenario(into):
        raise InputError(path, f"{into!r} is a scenario in the store; a job set needs a name "
                         "of its own", f"pass --into with another name (e.g. {into}-jobs)")
    origin = EPOCH
    if start is not None:
        ts = pd.Timestamp(start)
        origin = (ts.tz_convert("UTC") if ts.tzinfo else ts.tz_localize("UTC")).to_pydatetime()
    try:
        jobs, profiles = jobs_from_llm_trace(frame, origin, list(homes) or ["unassigned"],
                                             (*LLM_GPU_TYPES, reference_gpu), owner=into)
    except ValueError as exc:
        raise InputError(path, str(exc), "check the job's model config and fields") from None
    refuse_changed_jobs(store, into, jobs, path, replace)
    store.save_profiles(profiles)
    store.write_jobs(into, jobs, replace=replace)
    arrivals = [j.arrival for j in jobs]
    return JobImport(path=str(path), fmt="llm-jobs", job_set=into, jobs=len(jobs), skipped={},
                     first_arrival=min(arrivals), last_arrival=max(arrivals),
                     gpus_min=min(j.requested_gpus for j in jobs),
                     gpus_max=max(j.requested_gpus for j in jobs),
                     apps={j.app: 1 for j in jobs})
