"""``workbench profile``: sample GPU power and energy through NVML into the store."""

from __future__ import annotations

import argparse
import subprocess
import sys

from workbench.cli._args import number
from workbench.measure import NoGpuError, ProfileResult, profile_command, profile_for
from workbench.units import J_PER_KWH, MS_PER_S

NO_GPU_EXIT = 3
"""Exit status when no NVIDIA GPU or driver is available."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``profile`` command."""
    p = sub.add_parser(
        "profile",
        help="sample GPU power/energy/utilisation with NVML while a command runs",
        description="Sample every visible GPU's power, energy counter, utilisation, memory "
        "and SM clock with NVML, for --duration seconds or while COMMAND runs (after --), "
        "store samples and a summary, and print the summary. Without a GPU a command still runs "
        "(power not sampled, its exit status returned); --duration exits 3.",
    )
    p.add_argument("--name", required=True, help="name of this profiling session")
    p.add_argument("--interval-ms", type=number(1, 60000, unit="ms"), default=100.0,
                   help="sampling interval in milliseconds (default 100)")
    p.add_argument("--duration", type=number(0, 7 * 86400, low_open=True, unit="seconds"),
                   default=None, metavar="S",
                   help="sample for S seconds instead of running a command")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                   help="command to run and profile")
    p.set_defaults(func=_profile)


def _print_summary(res: ProfileResult, profile_id: str) -> None:
    s = res.summary
    print(f"profile {s['name']} ({profile_id}): {s['n_gpus']} GPU(s), "
          f"{s['duration_s']:.2f} s, mean power {s['mean_power_w']:.1f} W, "
          f"energy {s['energy_j']:.1f} J ({s['energy_j'] / J_PER_KWH:.6f} kWh), "
          f"{len(res.samples)} samples")


def _profile(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not args.name.strip():
        print("error: --name is empty; give the profiling session a name, e.g. --name "
              "resnet-a100", file=sys.stderr)
        return 2
    if (args.duration is None) == (not cmd):
        print("error: give either --duration S or -- COMMAND ...", file=sys.stderr)
        return 2
    if args.interval_ms <= 0 or (args.duration is not None and args.duration <= 0):
        print("error: --interval-ms and --duration must be positive", file=sys.stderr)
        return 2
    interval = args.interval_ms / MS_PER_S
    rc = 0
    try:
        if cmd:
            res, rc = profile_command(args.name, cmd, interval)
        else:
            res = profile_for(args.name, args.duration, interval)
    except NoGpuError as exc:
        if not cmd:
            print(f"no NVIDIA GPU/driver found: {exc}", file=sys.stderr)
            return NO_GPU_EXIT
        # The command is what the operator wants run; the power samples are the extra.
        print(f"no NVIDIA GPU/driver found ({exc}): running the command without sampling "
              "power; nothing is stored", file=sys.stderr)
        try:
            rc = subprocess.run(cmd, check=False).returncode
        except OSError as err:
            print(f"error: cannot run {cmd[0]!r}: {err}", file=sys.stderr)
            return 2
        print(f"power was not sampled (no GPU); the command exited with status {rc}",
              file=sys.stderr)
        return rc
    except OSError as exc:
        print(f"error: cannot run {cmd[0]!r}: {exc}", file=sys.stderr)
        return 2
    from workbench.store import Store

    with Store(args.db) as store:
        profile_id = store.save_gpu_profile(res.summary, res.samples)
    _print_summary(res, profile_id)
    if rc:
        print(f"command exited with status {rc}", file=sys.stderr)
    return rc
