"""Placeholder: this command group is being written (see the open issues)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:  # noqa: ARG001
    return None
