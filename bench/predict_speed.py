"""How long one transformer ``predict`` takes, against the apps' predictor in the same process.

    PYTHONPATH=. python bench/predict_speed.py [--repeat 5]

Times, per configuration (GPT-2 large, OPT-1.3B and Llama-2-7B training and inference on an
A100; Switch-XL inference): the first call with the shipped kernel model and step terms
read from disk (what one ``workbench predict --model-config`` does after its imports) and
the median of ``--repeat`` further calls with them loaded; the baseline is
``workbench.compute.predict.predict_step`` for the imagenet graph (the ``predict --app``
path of the graph model) timed the same way; cifar10 through the apps' kernel path
(``workbench.compute.apps.predict_app_step``) beside them. Target: one call under 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "examples" / "models"
SWITCH = {"model_type": "switch_transformers", "d_model": 1024, "d_kv": 128, "num_heads": 32,
          "d_ff": 16384, "num_layers": 24, "num_decoder_layers": 24, "num_experts": 4,
          "expert_capacity": 64, "encoder_sparse_step": 2, "vocab_size": 32128}


def _time(fn: object, repeat: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    first = time.perf_counter() - t0
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        runs.append(time.perf_counter() - t0)
    return first, statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from workbench.compute import BUILTIN_DEVICES, load_coefficients, load_graph, predict_step
    from workbench.compute.llm import load_predictor, predict_from_config
    from workbench.compute.transformer import load_model_config, model_spec

    a100 = BUILTIN_DEVICES["A100"]

    def app() -> None:
        predict_step(load_graph("imagenet"), a100, 8, 64, load_coefficients())

    base_first, base = _time(app, args.repeat)
    print(f"baseline predict --app imagenet, 8 x A100: first {1e3 * base_first:.0f} ms, "
          f"then {1e3 * base:.1f} ms")
    print(f"{'configuration':<40}{'first_ms':>10}{'warm_ms':>10}{'warm/baseline':>15}")
    cases = [("gpt2-large train b4 s1024", MODELS / "gpt2-large.json", "train", 1024, 4),
             ("gpt2-large inference b8 s1024", MODELS / "gpt2-large.json", "inference", 1024, 8),
             ("opt-1.3b train b1 s2048", MODELS / "opt-1.3b.json", "train", 2048, 1),
             ("llama-2-7b inference b1 s2048", MODELS / "llama-2-7b.json", "inference", 2048, 1),
             ("switch-xl inference b2 s512", None, "inference", 512, 2)]
    worst = 0.0

    def kernel_app() -> None:  # an app through the kernel path (cifar10's), model read included
        from workbench.compute.apps import predict_app_step

        predict_app_step(load_graph("cifar10"), a100, 8, 128, load_coefficients(),
                         predictor="kernel")

    first, warm = _time(kernel_app, args.repeat)
    worst = max(worst, first, warm)
    print(f"{'cifar10 app, kernel path, 8 x A100 b128':<40}{1e3 * first:>10.0f}"
          f"{1e3 * warm:>10.0f}{warm / base:>15.1f}")
    for name, cfg, mode, seq, batch in cases:
        def cold(cfg: Path | None = cfg, mode: str = mode, seq: int = seq,
                 batch: int = batch) -> None:
            spec = load_model_config(cfg) if cfg else model_spec(SWITCH, "switch-xl")
            predict_from_config(spec, mode, seq, batch, a100, predictor=load_predictor())

        first, warm = _time(cold, args.repeat)
        worst = max(worst, first, warm)
        print(f"{name:<40}{1e3 * first:>10.0f}{1e3 * warm:>10.0f}{warm / base:>15.1f}")
    print(f"slowest call {1e3 * worst:.0f} ms (target < 1000 ms); each call reads the model "
          "and terms from disk")


if __name__ == "__main__":
    main()
