"""Argument types and the parser class of the ``workbench`` command.

Every numeric flag is parsed by :func:`number`: NaN and infinities are refused, and so are
values outside the flag's range, with a message saying what to pass. :class:`Parser` prints
any argument error as one line (``error: ...``) and exits with status 2.
"""

from __future__ import annotations

import argparse
import difflib
import math
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from workbench.runner import ForecastSettings


def fail(message: object) -> int:
    """Print ``message`` as the one error line of a command (``error: ...``, its line
    breaks joined and its length :func:`~workbench.io.errors.bounded`) and return the exit
    status of bad input, 2."""
    from workbench.io.errors import bounded

    print(f"error: {bounded(' '.join(str(message).splitlines()))}", file=sys.stderr)
    return 2


_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`` (did you mean `X`?)`` for the known word closest to a mistyped ``word``
    (:func:`difflib.get_close_matches`), or ``""`` when none is close."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line: ``error: <prog>: <what>; <fix>``.

    A mistyped option or choice gets the closest known one (``--polcy``: did you mean
    ``--policy``?), an unknown option named by the (sub)command that was given it.
    """

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        if args is not None and not any(isinstance(a, argparse._SubParsersAction)
                                        for a in self._actions):
            # A (sub)command's own words: an unknown option is named before a missing
            # required argument would be (the typo is usually why it is "missing").
            for word in args:
                if word == "--":
                    break
                flag = word.split("=", 1)[0]
                if flag.startswith("--") and not any(
                        known.startswith(flag) for known in self._option_string_actions):
                    self.error(f"unrecognized arguments: {word}"
                               + did_you_mean(flag, self._option_string_actions))
        ns, extras = super().parse_known_args(args, namespace)
        unknown = [a for a in extras if a.startswith("-") and len(a) > 1]
        if unknown and self._is_top():
            leaf = self._leaf(sys.argv[1:] if args is None else list(args))
            flags = [f for a in leaf._actions for f in a.option_strings]
            flag = unknown[0].split("=", 1)[0]
            leaf.error(f"unrecognized arguments: {' '.join(extras)}"
                       + did_you_mean(flag, flags))
        return ns, extras

    def _is_top(self) -> bool:
        return " " not in self.prog

    def _leaf(self, argv: Sequence[str]) -> argparse.ArgumentParser:
        """The (sub)command parser the words of ``argv`` select."""
        parser: argparse.ArgumentParser = self
        for word in argv:
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if subs and word in subs[0].choices:
                parser = subs[0].choices[word]
        return parser

    def error(self, message: str) -> NoReturn:
        choice = _CHOICE.search(message)
        if choice:
            message += did_you_mean(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)))
        fail(f"{self.prog}: {message}; see `{self.prog} --help`")
        raise SystemExit(2)


def number(
    low: float | None = None, high: float | None = None, *, integer: bool = False,
    low_open: bool = False, unit: str = "",
) -> Callable[[str], float]:
    """An argparse ``type``: a finite number (a whole one with ``integer``) in a range.

    ``low_open`` excludes ``low`` itself (``--V`` must be > 0). The error names the range,
    e.g. ``-100 is not a number >= 0 (seconds)``.
    """
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {low:g}")
    if high is not None:
        parts.append(f"<= {high:g}")
    what = ("a whole number" if integer else "a number") + (" " + " and ".join(parts)
                                                            if parts else "")
    if unit:
        what += f" ({unit})"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        ok = math.isfinite(value) and (not integer or value == int(value))
        if ok and low is not None:
            ok = value > low if low_open else value >= low
        if ok and high is not None:
            ok = value <= high
        if not ok:
            raise argparse.ArgumentTypeError(f"{text} is not {what}")
        return int(value) if integer else value

    parse.__name__ = "number"
    return parse


def iso_time(text: str) -> str:
    """An argparse ``type``: an ISO date or time in the years 1900..2199 (kept as text)."""
    from workbench.model import as_utc

    try:
        year = as_utc(text).year
    except (ValueError, OverflowError, TypeError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO time; give e.g. 2023-07-01 or 2023-07-01T06:00Z"
        ) from None
    if not 1900 <= year <= 2199:
        raise argparse.ArgumentTypeError(f"{text} is outside the years 1900-2199")
    return text


def zone_name(text: str) -> str:
    """An argparse ``type``: an IANA timezone name that exists (``Europe/Berlin``, ``UTC``)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise argparse.ArgumentTypeError(
            f"unknown timezone {text!r}; use an IANA name such as Europe/Berlin or UTC"
        ) from None
    return text


def add_forecast_args(p: argparse.ArgumentParser) -> None:
    """``--forecast``, ``--forecast-error`` and ``--forecast-model``, as ``plan`` and
    ``sweep`` take them."""
    # Imported here: every command loads this module, not all of them need the cubes.
    from workbench.forecast import DEFAULT_MODEL, FORECAST_MODES, MODELS

    p.add_argument("--forecast", default=None, choices=FORECAST_MODES,
                   help="what policies are told about future price and carbon (default: "
                   "honest: a published tariff as published; market prices the 'model' "
                   "forecast where 28 days of history precede the scenario, else seasonal "
                   "naive; 'perfect' is a what-if)")
    p.add_argument("--forecast-error", type=number(0, 10), default=None,
                   help="relative error of --forecast noisy (default 0.1)")
    p.add_argument("--forecast-model", default=DEFAULT_MODEL, choices=MODELS,
                   help="the forecaster of --forecast model (default "
                   f"{DEFAULT_MODEL}: candidates combined by their past errors; 'lear' the "
                   "LASSO autoregression of epftoolbox, 'auto-lear' auto with LEAR a member)")


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    """``--scheduler``, ``--workers`` and ``--threads``: where a grid of runs goes, as
    ``sweep`` and ``frontier`` take them."""
    p.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                   help="address of a running Dask scheduler (default: a local cluster)")
    p.add_argument("--workers", type=number(1, 1024, integer=True), default=2,
                   help="workers of the local cluster (default 2)")
    p.add_argument("--threads", action="store_true",
                   help="run in this process, one run at a time (debugging)")


def forecast_settings(args: argparse.Namespace) -> ForecastSettings:
    """``--forecast``, ``--forecast-error`` and ``--forecast-model`` as the runner's record."""
    from workbench.runner import ForecastSettings

    return ForecastSettings(mode=args.forecast, error=args.forecast_error,
                            model=args.forecast_model)


def forecast_error(args: argparse.Namespace) -> float:
    """The ``--forecast-error`` in effect: as given, else the default error for
    ``--forecast noisy`` and 0 otherwise (``workbench.runner.ForecastSettings``)."""
    from workbench.runner import ForecastSettings

    return ForecastSettings(args.forecast, args.forecast_error).error_in_effect


def parse_power_limits(text: str | None) -> tuple[float, ...]:
    """``--power-limits``: None/``none`` (no menu), ``default`` or fractions ``0.85,0.7``.
    Raises ValueError naming the flag and the fix."""
    from workbench.power_limits import DEFAULT_MENU, check_menu

    raw = "none" if text is None else text.strip().lower()
    if raw == "":
        raise ValueError(f"--power-limits {text!r} is empty: give fractions of the GPU's "
                         "maximum board power, e.g. 0.85,0.7,0.55, 'default' or 'none'")
    if raw == "none":
        return ()
    if raw == "default":
        return DEFAULT_MENU
    try:
        values = [float(v) for v in raw.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--power-limits {text!r}: give fractions of the GPU's maximum board "
                         "power, e.g. 0.85,0.7,0.55, or 'default'") from None
    try:
        return check_menu(values)
    except ValueError as exc:
        raise ValueError(f"--power-limits {text!r}: {exc}") from None
