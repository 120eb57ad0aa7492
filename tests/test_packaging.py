"""The project's own pyproject.toml: nothing in it that setuptools warns about on install."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.licenses import canonicalize_license_expression
from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_the_license_is_an_spdx_expression_setuptools_takes_without_warnings() -> None:
    """Issue 24 item 8: ``license = {text = ...}`` made every ``pip install`` print ~30 lines
    of setuptools deprecation warnings; an SPDX string (PEP 639) is what it wants, and the
    build backend must be new enough to read it."""
    doc = tomllib.loads(PYPROJECT.read_text())
    license_ = doc["project"]["license"]
    assert isinstance(license_, str)
    assert canonicalize_license_expression(license_) == license_
    assert not any(c.startswith("License ::") for c in doc["project"].get("classifiers", []))
    backend = {Requirement(r).name: Requirement(r) for r in doc["build-system"]["requires"]}
    assert backend["setuptools"].specifier.contains(Version("77.0"))
    assert not backend["setuptools"].specifier.contains(Version("76.9"))
