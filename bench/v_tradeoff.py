"""The V trade-off of the threshold rule (round 1's lyapunov) on ``seed3``, run as a Dask sweep.

Usage: ``python bench/v_tradeoff.py [--V 1,3,10,30,100,300] [--workers 2]``.

Theory (drift-plus-penalty): time-average cost within ``O(1/V)`` of the offline optimum,
queue backlogs ``O(V)``. For each V: time-average cost per slot and the mean backlog of the
deadline queues (``queue_mean:Y``, fractions of work behind the required pace, summed over
jobs), with the hindsight bound's cost as a line. Honest default forecast, full
accounting. Writes ``docs/results/v_tradeoff.{csv,md,png}``.
"""

from __future__ import annotations

import argparse
import logging
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from common import RESULTS, write_table  # noqa: E402

from workbench.policies.offline import OfflinePolicy  # noqa: E402
from workbench.scenarios import build_seed3  # noqa: E402
from workbench.sweep import run_sweep, sweep_points  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--V", default="1,3,10,30,100,300")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--scheduler", default=None, help="tcp://HOST:PORT of a Dask scheduler")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    sc = build_seed3(0)
    Vs = [float(v) for v in args.V.split(",")]
    t0 = time.perf_counter()
    table = run_sweep(sc, sweep_points(["asap-home", "threshold"], V=Vs, seeds=[0]),
                      n_workers=args.workers, scheduler_address=args.scheduler)
    sweep_s = time.perf_counter() - t0
    off = OfflinePolicy(scenario=sc)
    off.reset(sc.view())
    bound = float(off.bound["cost"])
    base = table[table.policy == "asap-home"].iloc[0]
    lyap = table[table.policy == "threshold"].sort_values("V")
    out = pd.DataFrame({
        "V": lyap["V"].to_numpy(),
        "cost": lyap["cost"].to_numpy(),
        "cost_per_slot": lyap["cost"].to_numpy() / sc.n_slots,
        "cost_vs_bound": lyap["cost"].to_numpy() / bound,
        "cost_vs_asap": lyap["cost"].to_numpy() / base["cost"],
        "backlog_Y_mean": lyap.get("queue_mean:Y", pd.Series(float("nan"), lyap.index)),
        "backlog_Y_max": lyap.get("queue_mean:Y", pd.Series(float("nan"), lyap.index)) * 0
        + lyap.get("queue_max:Y", pd.Series(float("nan"), lyap.index)),
        "jobs_waiting_mean": lyap["jobs_waiting_mean"].to_numpy(),
        "mean_jct_h": lyap["mean_jct_h"].to_numpy(),
        "carbon_kg": lyap["carbon_kg"].to_numpy(),
        "deadline_misses": lyap["deadline_misses"].to_numpy(),
        "status": lyap["status"].to_numpy(),
    })
    print(out.to_string(index=False))
    kind = str(off.bound["kind"])
    notes = ["command: `python bench/v_tradeoff.py` (Dask LocalCluster, "
             f"{args.workers} worker processes; sweep wall time {sweep_s:.0f} s)",
             f"hindsight bound ({kind}, no restarts or transfers): cost {bound:.2f} "
             f"({bound / sc.n_slots:.4f} per slot); asap-home cost "
             f"{base['cost']:.2f}",
             "cost_vs_bound: lyapunov cost / the hindsight bound",
             "backlog_Y: the deadline (epsilon-persistent) queues, summed over jobs, in "
             "fractions of a job's work behind its required pace"]
    write_table(out, "v_tradeoff", "V trade-off of the Lyapunov scheduler on seed3", notes)
    fig, ax1 = plt.subplots(figsize=(7, 4))
    ax1.plot(out.V, out.cost_per_slot, "o-", color="tab:blue", label="lyapunov cost / slot")
    ax1.axhline(bound / sc.n_slots, color="tab:blue", ls="--",
                label=f"hindsight bound ({kind})")
    # asap-home (about 1.7x the bound) is left out so the cost axis shows the gap to it.
    ax1.set_xscale("log")
    ax1.set_xlabel("V")
    ax1.set_ylabel(f"time-average cost ({sc.currency} per slot)")
    ax2 = ax1.twinx()
    ax2.plot(out.V, out.backlog_Y_mean, "s-", color="tab:red", label="mean backlog Y")
    ax2.set_ylabel("mean deadline-queue backlog", color="tab:red")
    h1, l1 = ax1.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax1.legend(h1 + h2, l1 + l2, loc="upper center", fontsize=8)
    ax1.set_title("seed3: time-average cost and deadline backlog against V")
    fig.tight_layout()
    fig.savefig(RESULTS / "v_tradeoff.png", dpi=120)


if __name__ == "__main__":
    main()
