"""``workbench fit throughput|energy|power-limits|defaults``: fit job models to measured
profiles."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from workbench.cli._args import fail
from workbench.fit import (
    POLLUX_APPS,
    ProfileDataError,
    fit_pollux_app,
    fit_zeus_gpu,
)
from workbench.profiles import write_default_profiles


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``fit`` command group."""
    p = sub.add_parser("fit", help="fit throughput/energy models to measured GPU profiles")
    fsub = p.add_subparsers(dest="fit_command", metavar="WHAT", required=True)

    t = fsub.add_parser("throughput", help="fit a Pollux application's step-time model")
    t.add_argument("--app", required=True,
                   help=f"application folder name ({', '.join(POLLUX_APPS)})")
    t.add_argument("--profiles", required=True, type=Path,
                   help="Pollux profiles folder (the one holding <app>/placements.csv), "
                   "or its parent")
    t.add_argument("--json", action="store_true", help="print JSON: params, mape, rows")
    t.set_defaults(func=_throughput)

    e = fsub.add_parser("energy", help="fit per-network power models from a Zeus power trace")
    e.add_argument("--gpu", required=True, help="GPU of summary_power_<gpu>.csv (e.g. v100)")
    e.add_argument("--profiles", required=True, type=Path,
                   help="Zeus profiles folder (holding summary_power_<gpu>.csv), or its parent")
    e.add_argument("--json", action="store_true", help="print JSON: params, mape, rows")
    e.set_defaults(func=_energy)

    pl = fsub.add_parser("power-limits", help="fit the GPU power-limit model to the Zeus "
                         "power traces, validated leave-one-limit-out")
    pl.add_argument("--profiles", required=True, type=Path,
                    help="Zeus profiles folder (holding summary_power_<gpu>.csv)")
    pl.add_argument("--out", type=Path, default=None,
                    help="write the fits there (default: print only; the shipped file is "
                    "workbench/data/compute/power_limits.json)")
    pl.add_argument("--json", action="store_true", help="print JSON: the fits per GPU")
    pl.set_defaults(func=_power_limits)

    d = fsub.add_parser("defaults", help="regenerate data/profiles.json (fitted + derived)")
    d.add_argument("--profiles", required=True, type=Path,
                   help="folder holding pollux/ and zeus/ (../shared/data/profiles)")
    d.add_argument("--out", type=Path, default=Path("data/profiles.json"),
                   help="output file (default: data/profiles.json)")
    d.set_defaults(func=_defaults)


def _app_dir(profiles: Path, app: str) -> Path:
    for cand in (profiles / app, profiles / "pollux" / app):
        if (cand / "placements.csv").is_file():
            return cand
    raise ProfileDataError(f"no {app}/placements.csv under {profiles} or {profiles / 'pollux'}")


def _fail(exc: Exception) -> int:
    return fail(exc)


def _throughput(args: argparse.Namespace) -> int:
    try:
        fit = fit_pollux_app(_app_dir(args.profiles, args.app))
    except (ProfileDataError, OSError) as exc:
        return _fail(exc)
    params: dict[str, Any] = {"throughput": asdict(fit.params),
                              "efficiency": asdict(fit.efficiency)}
    if args.json:
        doc = {"app": fit.app, "gpu_type": "T4", "params": params, "mape": fit.mape,
               "rows": fit.rows.to_dict(orient="records")}
        print(json.dumps(doc, default=float))
        return 0
    print(f"{fit.app} on T4 (Pollux testbed), {len(fit.rows)} timing rows")
    for k, v in params["throughput"].items():
        print(f"  {k:8s} = {v:.6g}")
    eff = fit.efficiency
    print(f"  m0 = {eff.m0}, batch {eff.min_batch}..{eff.max_batch}, "
          f"max local batch {eff.max_local_batch}")
    print("  phi: " + ", ".join(f"{p:.2f}:{v:.3g}" for p, v in
                                zip(eff.phi_progress, eff.phi_values, strict=True)))
    print(f"  step-time median APE: {100 * fit.mape:.1f}%")
    return 0


def _energy(args: argparse.Namespace) -> int:
    try:
        fits = fit_zeus_gpu(args.profiles, args.gpu)
    except (ProfileDataError, OSError) as exc:
        return _fail(exc)
    if args.json:
        doc = {
            "gpu": args.gpu.lower(),
            "params": {f"{f.dataset}/{f.network}": asdict(f.params) for f in fits},
            "mape": {f"{f.dataset}/{f.network}": f.mape for f in fits},
            "rows": [r for f in fits for r in f.rows.to_dict(orient="records")],
        }
        print(json.dumps(doc, default=float))
        return 0
    print(f"power model P = a1 + a2 * X per GPU on {args.gpu} (rows at the max power limit)")
    print(f"  {'dataset/network':36s} {'a1_w':>8s} {'a2_w_per_sps':>13s} {'rows':>5s} {'MAPE':>6s}")
    for f in fits:
        print(f"  {f.dataset + '/' + f.network:36s} {f.params.a1_w:8.1f} "
              f"{f.params.a2_w_per_sps:13.5g} {len(f.rows):5d} {100 * f.mape:5.1f}%")
    return 0


def _defaults(args: argparse.Namespace) -> int:
    from workbench.cli._outputs import check_outputs

    bad_output = check_outputs([("--out", args.out)], args.db)
    if bad_output:
        return _fail(ValueError(bad_output))
    try:
        report = write_default_profiles(args.profiles, args.out)
    except (ProfileDataError, OSError) as exc:
        return _fail(exc)
    print(f"wrote {args.out}")
    for app, err in report["throughput_mape"].items():
        print(f"  throughput {app:12s} median APE {100 * err:5.1f}%")
    for net, err in report["energy_mape"].items():
        print(f"  energy     {net:36s} median APE {100 * err:5.1f}%")
    return 0


def _power_limits(args: argparse.Namespace) -> int:
    from workbench.power_limits import fit_zeus, models_to_json, write_power_limits

    try:
        if args.out is not None:
            from workbench.cli._outputs import check_outputs

            bad_output = check_outputs([("--out", args.out)], args.db)
            if bad_output:
                return _fail(ValueError(bad_output))
            write_power_limits(args.profiles, args.out)
        models = fit_zeus(args.profiles)
    except (ValueError, OSError) as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps(models_to_json(models), default=float))
        return 0
    print("power-limit model r_P = softmin(1, c u) / ..., r_t = (1 + a exp(-b u)) / ... "
          "(workbench.power_limits); leave-one-limit-out median error:")
    print(f"  {'GPU':10s} {'rows':>5s} {'time':>7s} {'power':>7s}  5-95% pred/meas time, power")
    for name, m in models.items():
        print(f"  {name:10s} {m.rows:5d} {100 * m.lolo_time_error:6.1f}% "
              f"{100 * m.lolo_power_error:6.1f}%  {m.time_interval[0]:.2f}-"
              f"{m.time_interval[1]:.2f}, {m.power_interval[0]:.2f}-{m.power_interval[1]:.2f}")
    if args.out is not None:
        print(f"wrote {args.out}")
    return 0
