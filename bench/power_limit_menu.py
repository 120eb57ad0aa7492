"""The GPU power-limit menu in the default planner: what it saves and what it costs in CPU.

Usage::

    python bench/power_limit_menu.py [--scenario seed3] [--policy lookahead]

Runs the policy on the scenario twice in one process, without a menu and with the default
menu (:data:`workbench.power_limits.DEFAULT_MENU`, pruned per job and slot to full power and
the most efficient limit, :mod:`workbench.policies.limits`), then the no-menu run once more
(the first run pays the imports and the memos' warm-up; the ratio is against the mean of the
two). Prints cost, energy, deadline misses, the process CPU seconds of each run and the
ratios (menu / no menu). asap-home's cost is printed for the saving.
"""

from __future__ import annotations

import argparse
import time

from workbench.power_limits import DEFAULT_MENU
from workbench.runner import RunSpec, simulate_spec
from workbench.scenarios import build_seed3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="seed3", help="seed3 (built in memory)")
    ap.add_argument("--policy", default="lookahead")
    args = ap.parse_args()
    if args.scenario != "seed3":
        raise SystemExit("--scenario: only seed3 is built in memory here")
    sc = build_seed3()
    base, _ = simulate_spec(RunSpec(sc.name, "asap-home", baseline=False), sc)
    ref = float(base.metrics["cost"])
    rows = []
    for label, menu in (("no menu", ()), ("menu", DEFAULT_MENU), ("no menu", ())):
        t0 = time.process_time()
        res, _ = simulate_spec(RunSpec(sc.name, args.policy, baseline=False,
                                       power_limits=menu), sc)
        cpu = time.process_time() - t0
        m = res.metrics
        rows.append((label, float(m["cost"]), float(m["energy_kwh"]),
                     int(m["deadline_misses"]), cpu))
        print(f"{label:8s} cost {m['cost']:.2f} {sc.currency} ({100 * (1 - m['cost'] / ref):.1f} % "
              f"below asap-home's {ref:.2f}), energy {m['energy_kwh']:.1f} kWh, misses "
              f"{m['deadline_misses']}, CPU {cpu:.2f} s", flush=True)
    plain = (rows[0][4] + rows[2][4]) / 2
    print(f"menu / no menu: CPU {rows[1][4] / plain:.2f}x, energy "
          f"{rows[1][2] / rows[0][2]:.3f}x, cost {rows[1][1] - rows[0][1]:+.2f} {sc.currency}")


if __name__ == "__main__":
    main()
