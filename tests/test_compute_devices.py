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


@pytest.mark.parametrize(("spelling", "canonical"), [
    ("Tesla V100-PCIE-32GB", "V100"), ("Tesla P100-PCIE-16GB", "P100"), ("Tesla P4", "P4"),
    ("Tesla T4", "T4"), ("NVIDIA A100-PCIE-40GB", "A100-PCIe-40GB"),
    ("NVIDIA A100 80GB PCIe", "A100-PCIe-80GB"), ("NVIDIA H100 80GB HBM3", "H100"),
    ("a100 sxm4 80gb", "A100"), ("H100 SXM5", "H100"),
])
def test_neusight_device_strings_match_tolerantly(spelling: str, canonical: str) -> None:
    assert normalise_device_name(spelling) == canonical


def test_ambiguous_and_wrong_variants_name_the_fix() -> None:
    with pytest.raises(UnknownDeviceError, match="ambiguous: A100-PCIe-40GB, A100-PCIe-80GB"):
        normalise_device_name("A100 PCIe")
    with pytest.raises(UnknownDeviceError, match="devices add"):
        normalise_device_name("V100 16GB")  # the built-in V100 is the 32 GB part


NEUSIGHT_L4 = {"Device": "NVIDIA L4", "Dev_Mem": 24, "Mem_Bw": 300, "Num_Sm": 60,
               "Core_Per_SM": 128, "Freq": 2040, "SingleFLOPs": 31334, "L2Cache": 48}


def test_neusight_device_config_of_a_new_device_lists_its_assumptions() -> None:
    from workbench.compute.devices import device_from_document

    spec, assumed = device_from_document(NEUSIGHT_L4)
    assert spec.name == "L4" and spec.fp32_tflops == pytest.approx(31.334)
    assert (spec.sms, spec.l2_mb, spec.mem_bw_gb_s, spec.memory_gb) == (60, 48.0, 300.0, 24.0)
    assert {a.split(":")[0] for a in assumed} >= {"tdp_w", "fp16_tflops", "intra_node_gb_s"}
    assert spec.sources["tdp_w"].startswith("assumption")
    assert "NeuSight" in spec.sources["sms"]


def test_neusight_config_of_a_known_device_keeps_its_other_figures() -> None:
    from workbench.compute.devices import device_from_neusight

    v100 = {"Device": "Tesla V100-PCIE-32GB", "Dev_Mem": 32, "Mem_Bw": 900, "Num_Sm": 80,
            "Core_Per_SM": 64, "Freq": 1370, "SingleFLOPs": 14029, "L2Cache": 6}
    spec, assumed = device_from_neusight(v100)
    assert spec.name == "V100" and not assumed
    assert spec.tdp_w == 250.0 and spec.fp16_tflops == 112.0  # from the built-in
    assert spec.fp32_tflops == pytest.approx(14.029)  # from the file
    amd = {"Device": "AMD Instinct MI100", "Dev_Mem": 32, "Mem_Bw": 1230, "Num_Sm": 120,
           "Core_Per_SM": 4, "Freq": 1502, "SingleFLOPsMM": 46100, "SingleFLOPsVEC": 23100,
           "L2Cache": 8}
    spec, _ = device_from_neusight(amd)
    assert spec.vendor == "amd" and spec.fp32_tflops == pytest.approx(23.1)
    assert "matrix-core FP32 46.1 TF" in spec.sources["fp32_tflops"]


@pytest.mark.parametrize(("doc", "match"), [
    ({**NEUSIGHT_L4, "Mem_Bw": "fast"}, "Mem_Bw = 'fast' is not a finite number"),
    ({k: v for k, v in NEUSIGHT_L4.items() if k != "L2Cache"}, r"lacks \['L2Cache'\]"),
    ({k: v for k, v in NEUSIGHT_L4.items() if k != "SingleFLOPs"}, "SingleFLOPs"),
    ([1, 2], "one JSON object"),
])
def test_bad_neusight_configs_say_what_to_fix(doc: object, match: str) -> None:
    from workbench.compute.devices import device_from_document

    with pytest.raises(ValueError, match=match):
        device_from_document(doc)


def test_bf16_exists_only_where_the_hardware_has_it() -> None:
    assert BUILTIN_DEVICES["H800"].peak_tflops("bf16") == 989.4
    assert BUILTIN_DEVICES["Ascend910B"].sources["bf16_tflops"].startswith("estimate")
    with pytest.raises(ValueError, match="no BF16"):
        BUILTIN_DEVICES["V100"].peak_tflops("bf16")


def test_every_builtin_has_its_shape_figures() -> None:
    for d in BUILTIN_DEVICES.values():
        assert d.sms > 0 and d.l2_mb > 0 and d.clock_mhz > 0, d.name
        assert d.sm_count == d.sms
