"""Device table: sources, name normalisation, devices added in the store."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from workbench.compute.devices import (
    BUILTIN_DEVICES,
    UnknownDeviceError,
    device,
    devices,
    load_devices,
    normalise_device_name,
    save_device,
)
from workbench.store import Store

REQUIRED = ("T4", "P100", "V100", "A40", "RTX6000", "RTX2080Ti", "1080Ti", "A100", "H100",
            "H800", "L40S", "Ascend910B", "MI25")
FIGURES = ("fp32_tflops", "tf32_tflops", "fp16_tflops", "mem_bw_gb_s", "memory_gb", "tdp_w",
           "intra_node_gb_s", "inter_node_gbit_s")


def test_required_devices_have_a_source_for_every_figure() -> None:
    for name in REQUIRED:
        d = BUILTIN_DEVICES[name]
        missing = [f for f in FIGURES if not d.sources.get(f)]
        assert not missing, (name, missing)
        assert d.fp16_tflops > 0 and d.peak_tflops("tf32") >= d.fp32_tflops


@pytest.mark.parametrize(("spelling", "canonical"), [
    ("A100", "A100"), ("a100", "A100"), ("RTX2080Ti", "RTX2080Ti"),
    ("RTX 2080 Ti", "RTX2080Ti"), ("rtx-2080-ti", "RTX2080Ti"), ("NVIDIA Tesla V100", "V100"),
    ("Quadro RTX 6000", "RTX6000"), ("GTX 1080 Ti", "1080Ti"), ("Ascend 910B", "Ascend910B"),
    ("910b", "Ascend910B"), ("h800", "H800"), ("AMD MI25", "MI25"),
])
def test_usual_spellings_normalise(spelling: str, canonical: str) -> None:
    assert normalise_device_name(spelling) == canonical


def test_unknown_device_lists_the_known_ones() -> None:
    with pytest.raises(UnknownDeviceError) as e:
        normalise_device_name("GTX 480")
    msg = str(e.value)
    assert msg.startswith("unknown device 'GTX 480'; known: ") and "A100" in msg
    assert "\n" not in msg


def test_devices_added_in_the_store_override_and_extend(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        assert load_devices(store) == []
        mine = replace(BUILTIN_DEVICES["T4"], name="B200", fp32_tflops=80.0,
                       sources={"fp32_tflops": "operator"})
        save_device(store, mine)
        save_device(store, replace(BUILTIN_DEVICES["A100"], tdp_w=500.0))
    with Store(tmp_path / "s.duckdb", read_only=True) as store:
        table = devices(store)
        assert table["B200"].fp32_tflops == 80.0
        assert device("b200", store).name == "B200"
        assert table["A100"].tdp_w == 500.0
    assert devices()["A100"].tdp_w == 400.0  # the built-in table is untouched


def test_bad_device_figure_says_which() -> None:
    with pytest.raises(ValueError, match="mem_bw_gb_s must be a positive number"):
        replace(BUILTIN_DEVICES["T4"], mem_bw_gb_s=0.0)
