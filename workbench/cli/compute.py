"""``workbench predict``, ``workbench devices`` and ``workbench compute train|measure``.

``predict`` prints the predicted step time of an app (or an ONNX model) on a device for
every combination of GPU count and local batch; ``devices`` lists and adds device specs;
``compute train`` refits the predictor on the public measurements and ``compute measure``
times a training command on the GPUs at hand (see :mod:`workbench.compute`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from workbench.cli._args import fail, number
from workbench.compute.devices import (
    DeviceSpec,
    UnknownDeviceError,
    device_from_document,
    devices,
    normalise_device_name,
    save_device,
)
from workbench.compute.graph import GraphError, app_graph_names, load_graph

MAX_GPUS = 4096
"""The most GPUs (and servers) a job may span: the job importers' bound."""
MAX_LOCAL_BATCH = 10**7
"""The largest local batch: the bound of imported Pollux ``local_bsz``."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``predict``, ``devices`` and ``compute`` commands."""
    p = sub.add_parser(
        "predict", help="predict a job's step time on a device from its computation graph",
        description="Predicted step time (s) of one step, with its 5-95%% prediction "
        "interval. --app/--graph: a training step for every combination of --gpus and "
        "--local-batch (N GPUs on --nodes servers, B samples per GPU) with Pollux's "
        "compute/sync split. --model-config: a transformer from its Hugging Face config.json "
        "(--mode, --seq-len, --batch per GPU or replica) on one node, forward, backward, "
        "optimizer and sync apart (kernel-level predictor).")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--app", help=f"shipped graph: {', '.join(app_graph_names())}")
    src.add_argument("--graph", type=Path, help="a user's model: FILE.onnx (or a graph .json)")
    src.add_argument("--model-config", type=Path,
                     help="a Hugging Face config.json (GPT-2/3, OPT, BERT, Llama, Switch)")
    p.add_argument("--gpu", required=True, help="device, e.g. A100, 'RTX 2080 Ti', "
                   "'Tesla V100-PCIE-32GB' (`workbench devices list`)")
    p.add_argument("--gpus", default="1", help="GPU counts N[,N...] (default 1; "
                   "--model-config: one count; across --nodes data parallel only)")
    p.add_argument("--local-batch", default=None, help="--app/--graph: samples per GPU "
                   "B[,B...]")
    p.add_argument("--nodes", type=str, default="1", help="servers the GPUs span (default 1)")
    p.add_argument("--mode", choices=("train", "inference"), default="train",
                   help="--model-config: a training step (forward, backward, Adam) or an "
                   "inference pass (default train)")
    p.add_argument("--seq-len", type=number(1, 10**7, integer=True, unit="tokens"),
                   default=None, help="--model-config: tokens per sequence")
    p.add_argument("--batch", type=number(1, MAX_LOCAL_BATCH, integer=True,
                                          unit="sequences"),
                   default=None, help="--model-config: sequences per GPU (dp) or per "
                   "model replica (tp, pp)")
    p.add_argument("--parallel", choices=("dp", "tp", "pp"), default="dp",
                   help="--model-config with --gpus > 1: data, tensor or pipeline "
                   "parallel (default dp)")
    p.add_argument("--micro-batches", type=number(1, MAX_LOCAL_BATCH, integer=True),
                   default=None, help="--model-config --parallel pp: micro-batches per step "
                   "(1F1B; default min(batch, 4 x stages))")
    p.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=0,
                   help="--model-config --parallel dp: ZeRO/FSDP stage sharding optimizer "
                   "states (1), gradients (2) and weights (3) over the GPUs (default 0)")
    p.add_argument("--activation-checkpointing", action="store_true",
                   help="--model-config: keep each block's input only and recompute the "
                   "block in the backward pass")
    p.add_argument("--sequence-parallel", action="store_true",
                   help="--model-config --parallel tp: Megatron's sequence parallelism")
    p.add_argument("--precision", choices=("fp32", "bf16", "tf32", "fp16"), default="fp32",
                   help="arithmetic of the job (default fp32; the training data is FP32, "
                   "bf16 is extrapolated with the tensor-core peak and a wider interval)")
    p.add_argument("--inter-node-gbit-s", type=number(0, 1e6, low_open=True, unit="Gbit/s"),
                   default=None,
                   help="network per server, Gbit/s (default: the device's typical)")
    p.add_argument("--no-calibration", action="store_true",
                   help="ignore stored measurements of the app on this device")
    p.add_argument("--json", action="store_true", help="print a JSON list of rows")
    p.set_defaults(func=_predict)

    d = sub.add_parser("devices", help="list or add accelerator specs for the predictor")
    dsub = d.add_subparsers(dest="devices_command", metavar="WHAT", required=True)
    lst = dsub.add_parser("list", help="known devices and their figures")
    lst.add_argument("--json", action="store_true", help="print JSON with every source")
    lst.set_defaults(func=_devices_list)
    add = dsub.add_parser("add", help="add a device to the store from JSON (--replace: "
                          "replace a stored one)")
    add.add_argument("spec", type=Path, help="JSON file: the fields of `devices list --json` "
                     "(sources optional) or NeuSight's device config (Device, Dev_Mem, "
                     "Mem_Bw, Num_Sm, Core_Per_SM, Freq, SingleFLOPs, L2Cache)")
    add.add_argument("--replace", action="store_true",
                     help="replace a device stored under the same name")
    add.set_defaults(func=_devices_add)

    c = sub.add_parser("compute", help="train the step-time predictor; time a training run")
    csub = c.add_subparsers(dest="compute_command", metavar="WHAT", required=True)
    t = csub.add_parser("train", help="refit the predictor on DeepBench, Zeus and Pollux")
    t.add_argument("--data", required=True, type=Path,
                   help="profiles folder holding deepbench/, zeus/, pollux/ "
                   "(../shared/data/profiles)")
    t.add_argument("--out", type=Path, default=None,
                   help="the apps' predictor (default: the shipped workbench/data/compute/"
                   "coefficients.json)")
    t.add_argument("--kernels-out", type=Path, default=None,
                   help="the kernel-level model (default: the shipped .../kernels.npz)")
    t.add_argument("--terms-out", type=Path, default=None,
                   help="the step terms and intervals (default: the shipped "
                   ".../step_terms.json)")
    t.add_argument("--collectives-out", type=Path, default=None,
                   help="the NCCL collective terms fitted on DATA/vidur/network when present "
                   "(default: the shipped .../collectives.json)")
    t.set_defaults(func=_train)
    f = csub.add_parser("fit", help="replace a predicted profile by a fit to stored "
                        "measurements (3 or more)")
    f.add_argument("--app", required=True, help="application")
    f.add_argument("--gpu", required=True, help="device the measurements were taken on")
    f.set_defaults(func=_fit)
    m = csub.add_parser("measure", help="time a training command and store its step time")
    m.add_argument("--app", required=True, help="application the command trains")
    m.add_argument("--gpu", required=True, help="device it runs on")
    m.add_argument("--gpus", type=number(1, MAX_GPUS, integer=True), default=1,
                   help="GPUs it uses (default 1)")
    m.add_argument("--nodes", type=number(1, MAX_GPUS, integer=True), default=1,
                   help="servers (default 1)")
    m.add_argument("--local-batch", type=number(1, MAX_LOCAL_BATCH, integer=True),
                   required=True, help="samples per GPU")
    m.add_argument("--steps", type=number(1, 1e9, integer=True), required=True,
                   help="optimizer steps the command runs")
    m.add_argument("--warmup-s", type=number(0, 86400, unit="seconds"), default=0.0,
                   help="start-up seconds to subtract from the wall time (default 0)")
    m.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    m.set_defaults(func=_measure)


def _fail(msg: str) -> int:
    return fail(msg)


def _int_list(text: str, flag: str, high: int) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag} takes whole numbers N[,N...], got {text!r}") from None
    if not vals or any(v < 1 or v > high for v in vals):
        raise ValueError(f"{flag} takes whole numbers N[,N...] in 1..{high}, got {text!r}")
    return vals


def _store_devices(db: str) -> dict[str, DeviceSpec]:
    from workbench.store import Store

    if not Path(db).exists():
        return devices()
    with Store(db, read_only=True) as store:
        if store.schema_version() is None or store.schema_version() < 3:  # type: ignore[operator]
            return devices()
        return devices(store)


def _predict(args: argparse.Namespace) -> int:
    from workbench.compute.apps import KernelPath, chosen_predictor, predict_app_step
    from workbench.compute.predict import StepPrediction, load_coefficients

    if args.model_config is not None:
        return _predict_model(args)
    if args.local_batch is None:
        return _fail("--app/--graph need --local-batch B[,B...] (samples per GPU)")
    try:
        gpus = _int_list(args.gpus, "--gpus", MAX_GPUS)
        batches = _int_list(args.local_batch, "--local-batch", MAX_LOCAL_BATCH)
        nodes = _int_list(args.nodes, "--nodes", MAX_GPUS)
        if len(nodes) != 1:
            raise ValueError("--nodes takes one number")
        k = nodes[0]
        bad = [n for n in gpus if n < k]
        if bad:
            raise ValueError(f"--gpus {bad} is fewer than --nodes {k}: each server needs a GPU")
        table = _store_devices(args.db)
        dev = table[normalise_device_name(args.gpu, table)]
        if args.graph is not None:
            graph = load_graph(args.graph)
        else:
            graph = load_graph(args.app)
        coef = load_coefficients()
        # the app's predictor (workbench/data/compute/app_predictors.json); the kernel path
        # is FP32 only, so other precisions take the graph model
        which = chosen_predictor(graph) if args.precision == "fp32" else "graph"
        kp = KernelPath.shipped() if which == "kernel" else None
    except (ValueError, UnknownDeviceError, GraphError, FileNotFoundError) as exc:
        return _fail(str(exc))

    def step(n: int, b: int, k: int = 1, cal: float = 1.0) -> StepPrediction:
        return predict_app_step(graph, dev, n, b, coef, nodes=k, predictor=which,
                                kernel_path=kp, inter_node_gbit_s=args.inter_node_gbit_s,
                                calibration=cal, precision=args.precision)

    cal, n_meas = 1.0, 0
    if args.app and not args.no_calibration and Path(args.db).exists():
        from workbench.compute.measure import calibration_from_store
        from workbench.store import Store

        with Store(args.db, read_only=True) as store:
            if (store.schema_version() or 0) >= 3:
                cal, n_meas = calibration_from_store(
                    store, args.app, dev.name, lambda b: step(1, b).compute_s)
    rows = [step(n, b, k, cal) for n in gpus for b in batches]
    if args.json:
        print(json.dumps([r.row() for r in rows]))
        return 0
    label = f"calibrated by {n_meas} stored measurement(s), x{cal:.3f}" if n_meas else \
        "predicted (no measurement on this device)"
    print(f"{graph.name} on {dev.name}, {k} node(s), {args.precision}, {which} model: {label}")
    print(f"{'gpus':>5}{'local_batch':>12}{'step_time_s':>13}{'5-95% interval_s':>22}"
          f"{'compute_s':>11}{'sync_s':>9}")
    for r in rows:
        iv = f"{r.step_time_lo_s:.4f}-{r.step_time_hi_s:.4f}"
        print(f"{r.gpus:>5}{r.local_batch:>12}{r.step_time_s:>13.4f}{iv:>22}"
              f"{r.compute_s:>11.4f}{r.sync_s:>9.4f}")
    return 0


def _predict_model(args: argparse.Namespace) -> int:
    """``predict --model-config``: one transformer configuration (one JSON object)."""
    from workbench.compute.llm import predict_from_config
    from workbench.compute.step import DeviceMemoryError, StepOptions
    from workbench.compute.transformer import ModelConfigError

    missing = [f for f, v in (("--seq-len", args.seq_len), ("--batch", args.batch)) if v is None]
    if missing:
        return _fail(f"--model-config needs {' and '.join(missing)} (tokens per sequence, "
                     "sequences per GPU)")
    if args.precision not in ("fp32", "bf16"):
        return _fail(f"--model-config takes --precision fp32 or bf16, not {args.precision}")
    try:
        gpus = _int_list(args.gpus, "--gpus", MAX_GPUS)
        nodes = _int_list(args.nodes, "--nodes", MAX_GPUS)
        if len(gpus) != 1 or len(nodes) != 1:
            raise ValueError("--model-config takes one --gpus count and one --nodes count")
        if nodes[0] > gpus[0]:
            raise ValueError(f"--gpus {gpus[0]} is fewer than --nodes {nodes[0]}: each "
                             "server needs a GPU")
        table = _store_devices(args.db)
        dev = table[normalise_device_name(args.gpu, table)]
        opts = StepOptions(zero=args.zero, activation_checkpointing=args.activation_checkpointing,
                           sequence_parallel=args.sequence_parallel,
                           micro_batches=args.micro_batches or 0,
                           inter_node_gbit_s=args.inter_node_gbit_s)
        step = predict_from_config(args.model_config, args.mode, args.seq_len, args.batch,
                                   dev, gpus[0], args.parallel, args.precision,
                                   nodes=nodes[0], options=opts)
    except (ModelConfigError, DeviceMemoryError, UnknownDeviceError, ValueError,
            FileNotFoundError) as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(step.row()))
        return 0
    where = f", {step.nodes} nodes" if step.nodes > 1 else ""
    print(f"{step.model} {step.mode} on {step.gpus}x{step.device}{where} ({step.parallel}), "
          f"{step.precision}, batch {step.batch} x {step.seq_len} tokens: predicted")
    print(f"  step {step.step_time_s:.4f} s (5-95% {step.step_time_lo_s:.4f}-"
          f"{step.step_time_hi_s:.4f} s), {step.row()['tokens_per_s']:.0f} tokens/s, MFU "
          f"{100 * step.mfu:.1f}%")
    print(f"  compute {step.compute_s:.4f} s + exposed communication "
          f"{step.exposed_comm_s:.4f} s (of {step.sync_s:.4f} s) + pipeline bubble "
          f"{step.bubble_s:.4f} s")
    print(f"  forward {step.forward_s:.4f} s, backward {step.backward_s:.4f} s"
          + (f" + recompute {step.recompute_s:.4f} s" if step.recompute_s else "")
          + f", optimizer {step.optimizer_s:.4f} s; roofline {step.roofline_s:.4f} s")
    parts = ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in step.memory_parts_gb.items()
                      if v > 0)
    print(f"  memory {step.memory_gb:.1f} GB per GPU ({parts} GB); "
          f"{step.params / 1e9:.2f} B parameters")
    return 0


def _devices_list(args: argparse.Namespace) -> int:
    table = _store_devices(args.db)
    if args.json:
        from workbench.compute.devices import device_to_dict

        print(json.dumps([device_to_dict(d) for d in table.values()]))
        return 0
    print(f"{'device':<16}{'FP32_TF':>8}{'TF32_TF':>8}{'FP16_TF':>8}{'BF16_TF':>8}"
          f"{'mem_GB/s':>9}{'mem_GB':>7}{'TDP_W':>6}{'SMs':>5}{'L2_MB':>6}{'intra_GB/s':>11}"
          f"{'net_Gbit/s':>11}")
    for d in sorted(table.values(), key=lambda x: x.name):
        print(f"{d.name:<16}{d.fp32_tflops:>8g}{d.tf32_tflops:>8g}{d.fp16_tflops:>8g}"
              f"{d.bf16_tflops:>8g}{d.mem_bw_gb_s:>9g}{d.memory_gb:>7g}{d.tdp_w:>6g}"
              f"{d.sms:>5}{d.l2_mb:>6g}{d.intra_node_gb_s:>11g}{d.inter_node_gbit_s:>11g}")
    print("sources: `workbench devices list --json`")
    return 0


def _devices_add(args: argparse.Namespace) -> int:
    from workbench.compute.devices import device_key, load_devices, shipped_device
    from workbench.store import Store

    try:
        doc = json.loads(Path(args.spec).read_text())
        spec, assumed = device_from_document(doc, _store_devices(args.db))
    except (OSError, json.JSONDecodeError, ValueError, TypeError, OverflowError) as exc:
        return _fail(f"cannot read device spec {args.spec}: {exc}")
    shipped = shipped_device(spec.name)
    if shipped is not None:
        # A stored device overrides a shipped one in every lookup (predictions on it change).
        return _fail(f"{args.spec}: device name {spec.name!r} stands for the shipped device "
                     f"{shipped}; give yours a name of its own (e.g. '{spec.name}-custom')")
    with Store(args.db) as store:
        stored = {device_key(d.name): d.name for d in load_devices(store)}
        old = stored.get(device_key(spec.name))
        if old is not None and not args.replace:
            return _fail(f"{args.spec}: device {spec.name!r} is already stored in {args.db} "
                         f"(as {old!r}); pass --replace to replace its figures, or give it "
                         "another name")
        if old is not None and old != spec.name:
            store.delete_device(old)
        save_device(store, spec)
    print(f"{'replaced' if old is not None else 'saved'} device {spec.name} in {args.db}")
    for note in assumed:
        print(f"  assumed {note}; give the project's JSON (`devices list --json`) to set it")
    return 0


def _train(args: argparse.Namespace) -> int:
    from workbench.cli._outputs import check_outputs
    from workbench.compute.collectives import (
        collectives_path,
        fit_collectives,
        write_collectives,
    )
    from workbench.compute.kernels import kernel_model_path
    from workbench.compute.neusight import NeuSightDataError
    from workbench.compute.predict import coefficients_path
    from workbench.compute.step import step_terms_path
    from workbench.compute.step_train import train_transformer_predictor
    from workbench.compute.train import TrainingDataError, train_and_write

    out = args.out or coefficients_path()
    k_out = args.kernels_out or kernel_model_path()
    t_out = args.terms_out or step_terms_path()
    c_out = args.collectives_out or collectives_path()
    bad_output = check_outputs([("--out", out), ("--kernels-out", k_out),
                                ("--terms-out", t_out), ("--collectives-out", c_out)],
                               args.db)
    if bad_output:
        return _fail(bad_output)
    try:
        coef = train_and_write(args.data, out)
        t = coef.trained_on
        print(f"wrote {out}: {t['kernel_rows']} kernels on {len(t['kernel_devices'])} "
              f"devices, {t['step_rows_1gpu']} 1-GPU and {t['step_rows_multi']} multi-GPU "
              "step times")
        tr = train_transformer_predictor(args.data, coef.sync, k_out, t_out)
    except (TrainingDataError, NeuSightDataError, OSError, ImportError) as exc:
        return _fail(str(exc))
    choice = tr.kernels.model.trained_on["choice"]
    print(f"wrote {k_out}: {tr.kernels.model.trained_on['rows']} NeuSight kernels; "
          + ", ".join(f"{k} {v}" for k, v in choice.items()))
    print(f"wrote {t_out}: host launch floor {1e6 * tr.terms.launch_s:.1f} us from "
          f"{len(tr.lodo)} measured steps; BF16 interval x{tr.terms.bf16_widening:.2f}")
    vidur = Path(args.data) / "vidur" / "network"
    if vidur.is_dir():
        try:
            col = fit_collectives(vidur)
        except (ValueError, OSError) as exc:
            return _fail(str(exc))
        write_collectives(col, c_out)
        print(f"wrote {c_out}: " + "; ".join(
            f"{op} {k} alpha {1e6 * f.latency_s:.1f} us, eta {f.efficiency:.2f} "
            f"(median error {100 * f.median_ape:.1f}% on {f.rows} rows)"
            for op, tab in (("all-reduce", col.all_reduce), ("send/recv", col.send_recv))
            for k, f in tab.items()))
    return 0


def _fit(args: argparse.Namespace) -> int:
    from workbench.perf import load_default_profiles
    from workbench.profiles import MIN_MEASUREMENTS_TO_FIT, profile_from_measurements
    from workbench.store import Store

    with Store(args.db) as store:
        try:
            gpu = normalise_device_name(args.gpu, devices(store))
        except UnknownDeviceError as exc:
            return _fail(str(exc))
        pool = store.load_profiles() + load_default_profiles()  # stored ones first
        base = next((p for p in pool if p.app == args.app and p.gpu_type == gpu), None)
        if base is None:
            known = sorted({p.app for p in pool if p.gpu_type == gpu})
            return _fail(f"no profile of {args.app!r} on {gpu} to refit; apps on {gpu}: "
                         f"{', '.join(known) or 'none'}")
        prof = profile_from_measurements(store, base)
        if prof is None:
            return _fail(f"fewer than {MIN_MEASUREMENTS_TO_FIT} stored measurements of "
                         f"{args.app} on {gpu}; add some with `workbench compute measure`")
        store.save_profiles([prof])
    print(f"saved fitted profile {args.app}/{gpu}: {prof.source}")
    return 0


def _measure(args: argparse.Namespace) -> int:
    from workbench.compute.measure import measure_command
    from workbench.store import Store

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        return _fail("give the training command after --")
    try:
        dev = normalise_device_name(args.gpu, _store_devices(args.db))
        if args.steps < 1 or args.local_batch < 1 or not 1 <= args.nodes <= args.gpus:
            raise ValueError("--steps and --local-batch must be >= 1 and 1 <= --nodes <= --gpus")
        with Store(args.db) as store:
            m, mid, rc = measure_command(store, args.app, dev, args.gpus, args.local_batch,
                                         args.steps, cmd, nodes=args.nodes,
                                         warmup_s=args.warmup_s)
    except (ValueError, UnknownDeviceError) as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot run {cmd[0]!r}: {exc}")
    if m is None:
        return _fail(f"the command exited with status {rc}; nothing stored")
    power = f", power profile {m.profile_id}" if m.profile_id else " (no GPU seen: time only)"
    print(f"measurement {mid}: {args.app} on {args.gpus}x{dev}, local batch "
          f"{args.local_batch}: {m.step_time_s:.4f} s per step over {args.steps} steps{power}")
    return 0
