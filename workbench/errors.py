"""Errors shared by the domain records (defined here so that no record module imports
another only for its error)."""

from __future__ import annotations


class ScenarioError(ValueError):
    """A scenario or one of its records is inconsistent; the message says what to fix."""
