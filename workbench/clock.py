"""The slot clock: UTC times and the slot a time falls in.

Every module that turns a time into a slot goes through :func:`slot_index` (re-exported by
:mod:`workbench.model`, where the scenario's clock lives).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np


def as_utc(value: datetime | str | np.datetime64) -> datetime:
    """Return ``value`` as a timezone-aware UTC datetime; naive values are taken as UTC."""
    if isinstance(value, np.datetime64):
        value = datetime.fromisoformat(str(value.astype("datetime64[s]")))
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


SLOT_TOLERANCE = 1e-9
"""Fraction of a slot within which a time counts as lying on the slot boundary it is next to
(so that a time computed in floating point lands on the boundary it means)."""


def slot_index(start: datetime, slot_s: float, when: datetime, *, after: bool = False) -> int:
    """The slot of ``when`` on the clock that starts at ``start`` with slots of ``slot_s``.

    ``floor((when - start) / slot_s + tol)``: the slot containing ``when``; with ``after``,
    ``ceil((when - start) / slot_s - tol)``: the first slot starting at or after it (where a
    job arriving at ``when`` can first run). ``tol`` is :data:`SLOT_TOLERANCE`. Not clipped
    to the horizon: may be < 0 or >= the number of slots.
    """
    offset = (as_utc(when) - start).total_seconds() / slot_s
    if after:
        return math.ceil(offset - SLOT_TOLERANCE)
    return math.floor(offset + SLOT_TOLERANCE)
