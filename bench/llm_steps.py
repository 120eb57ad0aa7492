"""LLM steps as they train: collectives held out, parallel steps, memory, LLM job profiles.

    PYTHONPATH=. python bench/llm_steps.py [--vidur ../shared/data/profiles/vidur/network]

Prints six parts (docs/profiles.md, "LLM steps on several GPUs"):

1. the NCCL collective terms fitted on Vidur's measurements with each server held out of
   the fit (median and 90th-percentile relative error of its rows, messages >= 64 KiB);
2. predicted 4-GPU training steps (data, tensor and pipeline parallel) of GPT-2 large,
   GPT-3 XL (1.3 B) and Llama-2-7B on H100 and A100 SXM servers, and Llama-2-7B over 8 H800
   with 8-way tensor parallelism: compute, exposed communication, bubble, MFU, memory
   (no measured multi-GPU steps are in ../shared/data, so these are predictions only);
3. memory per GPU of the steps the issue reported refused, by part;
4. the LLM jobs of examples/llm_jobs.toml: predicted step at 8 GPUs and the global batch;
5. the FP32-trained kernel model on Vidur's FP16 GEMMs of six Llama-family decoder layers on
   an NVIDIA A40, a device and a precision the kernel model never saw (QKV, output, gated
   up and down projections by tokens and tensor-parallel degree; timed one op at a time, so
   compared with the kernel prediction before the back-to-back launch terms);
6. every measured NeuSight step asked of ``predict`` on its own device, memory check
   included: how many are refused (issue 34: none may be).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "examples" / "models"
GPT3_XL = {"model_type": "gpt2", "n_embd": 2048, "n_head": 16, "n_layer": 24,
           "vocab_size": 50257, "n_positions": 2048}


def collectives(folder: Path) -> None:
    from workbench.compute.collectives import fit_link, predict_rows, read_vidur_network

    rows = read_vidur_network(folder)
    print("1. collectives, each server held out of the fit (NVLink rows)")
    print(f"{'op':<11}{'held_out_server':<24}{'rows':>6}{'alpha_us':>10}{'eta':>7}"
          f"{'median_%':>10}{'p90_%':>8}")
    for op in ("all_reduce", "send_recv"):
        sel = rows[(rows["op"] == op) & (rows["kind"] == "nvlink")]
        for server in sorted(sel["server"].unique()):
            test = sel[sel["server"] == server]
            f = fit_link(sel[sel["server"] != server])
            e = np.abs(predict_rows(test, f) / test["t_s"] - 1)
            print(f"{op:<11}{server:<24}{len(test):>6}{1e6 * f.latency_s:>10.1f}"
                  f"{f.efficiency:>7.2f}{100 * np.median(e):>10.1f}"
                  f"{100 * np.quantile(e, 0.9):>8.1f}")
    pcie = rows[(rows["op"] == "all_reduce") & (rows["kind"] == "pcie")]
    f = fit_link(pcie)
    print(f"all_reduce over PCIe (4 GPUs of the NVLink-pair servers, fitted on all): "
          f"alpha {1e6 * f.latency_s:.1f} us, eta {f.efficiency:.2f}, median "
          f"{100 * f.median_ape:.1f}% on {f.rows} rows")


def steps() -> None:
    from workbench.compute.devices import BUILTIN_DEVICES
    from workbench.compute.llm import load_predictor, predict_from_config
    from workbench.compute.step import DeviceMemoryError, StepOptions
    from workbench.compute.transformer import load_model_config, model_spec

    p = load_predictor()
    models = {"gpt2-large": load_model_config(MODELS / "gpt2-large.json"),
              "gpt3-xl": model_spec(GPT3_XL, "gpt3-xl"),
              "llama-2-7b": load_model_config(MODELS / "llama-2-7b.json")}
    print("\n2. predicted training steps, BF16 (batch per GPU for dp, per replica for tp/pp; "
          "pp: 8 micro-batches, 1F1B)")
    print(f"{'model':<12}{'device':<7}{'par':<4}{'gpus':>5}{'batch':>6}{'seq':>6}"
          f"{'step_s':>9}{'compute_s':>10}{'exposed_s':>10}{'bubble_s':>9}{'comm_%':>8}"
          f"{'MFU_%':>7}{'GB/GPU':>8}")
    cases = [(m, d, par, 4) for m in models for d in ("H100", "A100")
             for par in ("dp", "tp", "pp")] + [("llama-2-7b", "H800", "tp", 8)]
    for m, d, par, n in cases:
        spec = models[m]
        seq = 1024 if m == "gpt2-large" else 2048
        batch = 8 if par == "pp" else (1 if m == "llama-2-7b" else 4)
        opts = StepOptions(micro_batches=8 if par == "pp" else 0,
                           zero=2 if par == "dp" and m == "llama-2-7b" else 0)
        try:
            s = predict_from_config(spec, "train", seq, batch, BUILTIN_DEVICES[d], n, par,
                                    "bf16", p, options=opts)
        except DeviceMemoryError as exc:
            print(f"{m:<12}{d:<7}{par:<4}{n:>5}{batch:>6}{seq:>6}  refused: {exc}")
            continue
        tag = par + ("+z2" if opts.zero else "")
        print(f"{m:<12}{d:<7}{tag:<4}{n:>5}{batch:>6}{seq:>6}{s.step_time_s:>9.4f}"
              f"{s.compute_s:>10.4f}{s.exposed_comm_s:>10.4f}{s.bubble_s:>9.4f}"
              f"{100 * s.exposed_comm_s / s.step_time_s:>8.1f}{100 * s.mfu:>7.1f}"
              f"{s.memory_gb:>8.1f}")


def memory() -> None:
    from workbench.compute.devices import BUILTIN_DEVICES
    from workbench.compute.llm import load_predictor, predict_from_config
    from workbench.compute.transformer import load_model_config, model_spec

    p = load_predictor()
    nd = ROOT.parent / "shared" / "data" / "profiles" / "neusight" / "model_configs"
    print("\n3. memory per GPU, GB, one GPU of 80 GB (FP32 as NeuSight measured; BF16)")
    print(f"{'model':<14}{'prec':<6}{'batch_x_seq':>12}{'weights':>9}{'grads':>7}{'adam':>7}"
          f"{'copies':>8}{'acts':>7}{'total':>8}")
    for name, spec, seq, b in (("gpt3-xl 1.3B", model_spec(GPT3_XL, "x"), 2048, 1),
                               ("gpt3_xl (NS)", load_model_config(nd / "gpt3_xl.json")
                                if nd.is_dir() else None, 2048, 1),
                               ("gpt2-large", load_model_config(MODELS / "gpt2-large.json"),
                                1024, 8)):
        if spec is None:
            continue
        for prec in ("fp32", "bf16"):
            s = predict_from_config(spec, "train", seq, b, BUILTIN_DEVICES["H100"],
                                    precision=prec, predictor=p)
            m = s.memory_parts_gb
            print(f"{name:<14}{prec:<6}{f'{b}x{seq}':>12}{m['weights']:>9.1f}"
                  f"{m['gradients']:>7.1f}{m['optimizer']:>7.1f}{m['weight_copies']:>8.1f}"
                  f"{m['activations']:>7.1f}{s.memory_gb:>8.1f}")


def jobs() -> None:
    import tomllib

    from workbench.compute.llm import load_predictor
    from workbench.llm_jobs import spec_of
    from workbench.perf import throughput
    from workbench.profiles import predict_llm_profile_tp

    cfg = tomllib.loads((ROOT / "examples" / "llm_jobs.toml").read_text())
    p = load_predictor()
    print("\n4. examples/llm_jobs.toml: 8 GPUs at the global batch (BF16)")
    print(f"{'job':<22}{'gpu':<11}{'x':>3}{'batch':>6}{'seq/s':>8}{'tokens/s':>10}"
          f"{'step_s':>8}{'interval':>14}{'hours':>7}")
    for e in cfg["jobs"]["llm"]:
        spec = spec_of(e["job_id"], ROOT / "examples" / e["model_config"], e["seq_len"],
                       e["global_batch"], e.get("tokens"), e.get("steps"), e["precision"],
                       e["purpose"], e.get("pretrained_tokens"))
        for gpu in ("H800", "A100", "Ascend910B"):
            prof, unit = predict_llm_profile_tp(spec, gpu, p)
            m = e["global_batch"]
            x = float(throughput(prof.throughput, 8, m))
            lo, hi = prof.step_time_interval or (1.0, 1.0)
            print(f"{e['job_id']:<22}{gpu:<11}{unit:>3}{m:>6}{x:>8.1f}"
                  f"{x * e['seq_len']:>10,.0f}{m / x:>8.2f}"
                  f"{f'{lo * m / x:.2f}-{hi * m / x:.2f}':>14}"
                  f"{spec.work_samples / x / 3600:>7.1f}")


def a40_gemms(folder: Path) -> None:
    import pandas as pd

    from workbench.compute.devices import BUILTIN_DEVICES
    from workbench.compute.llm import load_predictor

    p, dev = load_predictor(), BUILTIN_DEVICES["A40"]
    rows = []
    for f in sorted(folder.glob("*_mlp.csv.gz")):
        for r in pd.read_csv(f).to_dict("records"):
            t, h, tp = int(r["num_tokens"]), int(r["n_embd"]), int(r["num_tensor_parallel_workers"])
            hd, ffn = h // int(r["n_head"]), int(r["n_expanded_embd"])
            up = (2 if r["use_gated_mlp"] else 1) * ffn // tp
            shapes = {"attn_pre_proj": (int(r["n_head"]) + 2 * int(r["n_kv_head"])) * hd // tp,
                      "attn_post_proj": h, "mlp_up_proj": up, "mlp_down_proj": h}
            ks = {"attn_pre_proj": h, "attn_post_proj": int(r["n_head"]) * hd // tp,
                  "mlp_up_proj": h, "mlp_down_proj": ffn // tp}
            for op, n in shapes.items():
                rows.append((f.name.split("_")[0], op, t, n, ks[op],
                             float(r[f"time_stats.{op}.median"]) * 1e-3))
    d = pd.DataFrame(rows, columns=["org", "op", "m", "n", "k", "t"])
    dims = np.zeros((len(d), 7), dtype=np.int64)
    dims[:, 0], dims[:, 1], dims[:, 2], dims[:, 3] = 1, d["m"], d["n"], d["k"]
    fl = 2.0 * d["m"] * d["n"] * d["k"]
    by = 2.0 * (d["m"] * d["k"] + d["k"] * d["n"] + d["m"] * d["n"])
    pred, roof = p.kernels.predict_s("linear", dims, fl.to_numpy(), by.to_numpy(),
                                     [""] * len(d), dev, "bf16")
    d["ratio"], d["roof"] = pred / d["t"], roof / d["t"]
    print("\n5. FP16 GEMMs on an A40 (held-out device, FP32-trained kernels; A40 FP16 peak "
          "149.7 TF)")
    print(f"{'tokens':<12}{'rows':>7}{'median_APE_%':>14}{'median_pred/true':>18}"
          f"{'roofline_APE_%':>16}")
    bins = [(1, 256), (257, 1024), (1025, 4096), (1, 10**9)]
    for lo, hi in bins:
        sel = d[(d["m"] >= lo) & (d["m"] <= hi)]
        label = "all" if (lo, hi) == (1, 10**9) else f"{lo}-{hi}"
        print(f"{label:<12}{len(sel):>7}{100 * np.median(np.abs(sel['ratio'] - 1)):>14.1f}"
              f"{np.median(sel['ratio']):>18.3f}"
              f"{100 * np.median(np.abs(sel['roof'] - 1)):>16.1f}")


def refused(neusight: Path) -> None:
    """6: the measured steps through ``predict`` (memory check included) on their device."""
    from workbench.compute.devices import BUILTIN_DEVICES
    from workbench.compute.llm import load_predictor, predict_from_config
    from workbench.compute.neusight import model_config, read_step_times
    from workbench.compute.step import DeviceMemoryError
    from workbench.compute.transformer import model_spec

    rows = read_step_times(neusight)
    pred = load_predictor()
    out = []
    for r in rows.itertuples():
        spec = model_spec(model_config(neusight, r.model), r.model)
        try:
            predict_from_config(spec, r.mode, int(r.seq_len), int(r.batch),
                                BUILTIN_DEVICES[r.device], predictor=pred)
        except DeviceMemoryError as exc:
            out.append(f"  {r.device} {r.model} {r.mode} {r.seq_len}x{r.batch}: {exc}")
    print(f"\n6. measured NeuSight steps refused on their own device: {len(out)} of {len(rows)}")
    print("\n".join(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vidur", type=Path,
                    default=ROOT.parent / "shared" / "data" / "profiles" / "vidur" / "network")
    args = ap.parse_args()
    if args.vidur.is_dir():
        collectives(args.vidur)
    else:
        print(f"{args.vidur} absent: collectives table skipped")
    steps()
    memory()
    jobs()
    a40 = args.vidur.parent / "compute" / "a40"
    if a40.is_dir():
        a40_gemms(a40)
    neusight = args.vidur.parent.parent / "neusight"
    if neusight.is_dir():
        refused(neusight)


if __name__ == "__main__":
    main()
