"""Device descriptions: peak throughput by precision, memory, power and interconnect.

Every figure has a source (``DeviceSpec.sources``); figures marked ``estimate`` are not in
a vendor datasheet and say how they were derived. Peaks are dense (no structured
sparsity), at boost clock. ``intra_node_gb_s`` is the per-GPU, per-direction bandwidth an
all-reduce ring gets inside one server (NVLink/HCCS where present, else PCIe);
``inter_node_gbit_s`` the network bandwidth per server of a typical deployment of that
device (an operator overrides it with ``--inter-node-gbit-s``).

Operators add devices to the store (:func:`save_device`, ``workbench devices add``); stored
devices override built-in ones of the same name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any


class UnknownDeviceError(KeyError):
    """A device name that matches no known device; ``str()`` lists the known ones."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class DeviceSpec:
    """Datasheet figures of one accelerator type.

    Attributes
    ----------
    name : str
        Canonical name (``"RTX2080Ti"``).
    vendor : str
        ``nvidia``, ``amd``, ``huawei``.
    fp32_tflops : float
        Peak FP32 (non-tensor) throughput, TFLOP/s.
    tf32_tflops : float
        Peak TF32 tensor throughput, TFLOP/s (0: no TF32).
    fp16_tflops : float
        Peak FP16/BF16 throughput with FP32 accumulate (tensor cores where present), TFLOP/s.
    mem_bw_gb_s : float
        Peak memory bandwidth, GB/s.
    memory_gb : float
        Device memory, GB.
    tdp_w : float
        Board power limit, W.
    intra_node_gb_s : float
        All-reduce bandwidth per GPU and direction inside a server, GB/s.
    inter_node_gbit_s : float
        Network bandwidth per server, Gbit/s.
    gpus_per_node : int
        Accelerators per server in the typical deployment.
    sources : Mapping[str, str]
        Source of each figure (field name -> document).
    """

    name: str
    vendor: str
    fp32_tflops: float
    tf32_tflops: float
    fp16_tflops: float
    mem_bw_gb_s: float
    memory_gb: float
    tdp_w: float
    intra_node_gb_s: float
    inter_node_gbit_s: float
    gpus_per_node: int
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in ("fp32_tflops", "fp16_tflops", "mem_bw_gb_s", "memory_gb", "tdp_w",
                  "intra_node_gb_s", "inter_node_gbit_s"):
            v = getattr(self, f)
            if not (isinstance(v, int | float) and v > 0 and v < float("inf")):
                raise ValueError(f"device {self.name!r}: {f} must be a positive number, "
                                 f"got {v!r}")
        if self.tf32_tflops < 0:
            raise ValueError(f"device {self.name!r}: tf32_tflops must be >= 0 (0 = none)")
        if self.gpus_per_node < 1:
            raise ValueError(f"device {self.name!r}: gpus_per_node must be >= 1")

    def peak_tflops(self, precision: str) -> float:
        """Peak throughput at ``precision`` (``fp32``, ``tf32``, ``fp16``); TF32 falls back
        to FP32 on devices without it."""
        if precision == "fp32":
            return self.fp32_tflops
        if precision == "tf32":
            return self.tf32_tflops or self.fp32_tflops
        if precision == "fp16":
            return self.fp16_tflops
        raise ValueError(f"unknown precision {precision!r}; use fp32, tf32 or fp16")


_NV = "NVIDIA datasheet"


def _d(name: str, vendor: str, fp32: float, tf32: float, fp16: float, bw: float, mem: float,
       tdp: float, intra: float, inter: float, per_node: int, src: str,
       **extra: str) -> DeviceSpec:
    sources = {f: src for f in ("fp32_tflops", "tf32_tflops", "fp16_tflops", "mem_bw_gb_s",
                                "memory_gb", "tdp_w")}
    sources |= {"intra_node_gb_s": "PCIe 3.0 x16: 15.75 GB/s per direction (PCI-SIG)",
                "inter_node_gbit_s": "typical deployment (assumption)",
                "gpus_per_node": "typical deployment (assumption)"}
    sources |= extra
    return DeviceSpec(name, vendor, fp32, tf32, fp16, bw, mem, tdp, intra, inter, per_node,
                      MappingProxyType(sources))


_PCIE3 = 15.75
_PCIE4 = 31.5

BUILTIN_DEVICES: Mapping[str, DeviceSpec] = MappingProxyType({d.name: d for d in (
    _d("T4", "nvidia", 8.1, 0, 65.0, 320, 16, 70, _PCIE3, 50, 4,
       f"{_NV} Tesla T4 (2019): 8.1 TF FP32, 65 TF FP16 tensor, 320 GB/s, 16 GB, 70 W",
       inter_node_gbit_s="AWS g4dn.12xlarge (Pollux testbed): 50 Gbit/s",
       gpus_per_node="AWS g4dn.12xlarge: 4 T4"),
    _d("P100", "nvidia", 9.3, 0, 18.7, 732, 16, 250, _PCIE3, 25, 8,
       f"{_NV} Tesla P100 PCIe 16 GB: 9.3 TF FP32, 18.7 TF FP16, 732 GB/s, 250 W"),
    _d("V100", "nvidia", 14.0, 0, 112.0, 900, 32, 250, _PCIE3, 100, 8,
       f"{_NV} Tesla V100 PCIe 32 GB: 14 TF FP32, 112 TF tensor, 900 GB/s, 250 W"),
    _d("A40", "nvidia", 37.4, 74.8, 149.7, 696, 48, 300, _PCIE4, 100, 8,
       f"{_NV} A40 (2021): 37.4 TF FP32, 74.8 TF TF32, 149.7 TF FP16, 696 GB/s, 48 GB, 300 W",
       intra_node_gb_s="PCIe 4.0 x16: 31.5 GB/s per direction"),
    _d("RTX6000", "nvidia", 16.3, 0, 130.5, 672, 24, 260, _PCIE3, 25, 8,
       f"{_NV} Quadro RTX 6000: 16.3 TF FP32, 130.5 TF tensor, 672 GB/s, 24 GB; "
       "260 W board limit (Zeus trace maximum)"),
    _d("RTX2080Ti", "nvidia", 13.4, 0, 53.8, 616, 11, 250, _PCIE3, 25, 8,
       "NVIDIA Turing architecture whitepaper (RTX 2080 Ti reference): 13.4 TF FP32, "
       "53.8 TF FP16 tensor with FP32 accumulate (GeForce rate), 616 GB/s, 11 GB, 250 W"),
    _d("1080Ti", "nvidia", 11.3, 0, 0.177, 484, 11, 250, _PCIE3, 25, 8,
       "NVIDIA GeForce GTX 1080 Ti specifications: 11.3 TF FP32 (3584 cores x 1582 MHz x 2), "
       "FP16 at 1/64 rate, 484 GB/s, 11 GB, 250 W"),
    _d("A100", "nvidia", 19.5, 156.0, 312.0, 2039, 80, 400, 300.0, 1600, 8,
       f"{_NV} A100 80GB SXM4: 19.5 TF FP32, 156 TF TF32, 312 TF FP16, 2039 GB/s, 400 W",
       intra_node_gb_s="NVLink 3: 600 GB/s total = 300 GB/s per direction",
       inter_node_gbit_s="DGX A100: 8 x 200 Gbit/s HDR InfiniBand"),
    _d("H100", "nvidia", 67.0, 494.7, 989.4, 3350, 80, 700, 450.0, 3200, 8,
       f"{_NV} H100 SXM5: 67 TF FP32, 494.7 TF TF32, 989.4 TF FP16 (dense), 3.35 TB/s, 700 W",
       intra_node_gb_s="NVLink 4: 900 GB/s total = 450 GB/s per direction",
       inter_node_gbit_s="DGX H100: 8 x 400 Gbit/s NDR InfiniBand"),
    _d("H800", "nvidia", 67.0, 494.7, 989.4, 3350, 80, 700, 200.0, 3200, 8,
       "NVIDIA H800 SXM5 (export variant of H100 SXM5): compute and memory as H100 SXM5, "
       "700 W",
       intra_node_gb_s="NVLink cut to 400 GB/s total = 200 GB/s per direction",
       inter_node_gbit_s="8 x 400 Gbit/s NDR per server (typical H800 cluster)"),
    _d("L40S", "nvidia", 91.6, 183.0, 362.05, 864, 48, 350, _PCIE4, 400, 8,
       f"{_NV} L40S: 91.6 TF FP32, 183 TF TF32, 362 TF FP16 (dense), 864 GB/s, 48 GB, 350 W",
       intra_node_gb_s="PCIe 4.0 x16 (no NVLink): 31.5 GB/s per direction"),
    _d("Ascend910B", "huawei", 15.6, 0, 320.0, 1600, 64, 400, 196.0, 1600, 8,
       "Huawei Ascend 910B: 320 TF FP16 and 64 GB HBM2e at 1.6 TB/s, 400 W (vendor briefs "
       "and press)",
       fp32_tflops="estimate: Huawei publishes no FP32 peak; 0.8x the A100's 19.5 TF, the "
                   "realised-speed ratio of public LLM-training comparisons (as gpus.py)",
       intra_node_gb_s="HCCS 392 GB/s total = 196 GB/s per direction",
       inter_node_gbit_s="8 x 200 Gbit/s RoCE per server (Atlas 800T A2)"),
    _d("MI25", "amd", 12.3, 0, 24.6, 484, 16, 300, _PCIE3, 25, 8,
       "AMD Radeon Instinct MI25 datasheet: 12.3 TF FP32, 24.6 TF FP16, 484 GB/s HBM2, "
       "16 GB, 300 W"),
    # DeepBench devices (kernel measurements only).
    _d("M40", "nvidia", 7.0, 0, 0.1, 288, 24, 250, _PCIE3, 25, 8,
       "NVIDIA Tesla M40 24 GB datasheet: 7 TF FP32, 288 GB/s, 250 W (no fast FP16)"),
    _d("TitanX", "nvidia", 6.6, 0, 0.1, 336.5, 12, 250, _PCIE3, 25, 8,
       "NVIDIA GeForce GTX TITAN X (Maxwell) specifications: 6.6 TF FP32, 336.5 GB/s, 250 W"),
    _d("TitanXPascal", "nvidia", 11.0, 0, 0.17, 480, 12, 250, _PCIE3, 25, 8,
       "NVIDIA TITAN X (Pascal) specifications: 11 TF FP32, 480 GB/s, 12 GB, 250 W"),
    _d("TitanXp", "nvidia", 12.1, 0, 0.19, 547.7, 12, 250, _PCIE3, 25, 8,
       "NVIDIA TITAN Xp specifications: 12.1 TF FP32, 547.7 GB/s, 12 GB, 250 W"),
    _d("VegaFE", "amd", 13.1, 0, 26.2, 483, 16, 300, _PCIE3, 25, 8,
       "AMD Radeon Vega Frontier Edition specifications: 13.1 TF FP32, 26.2 TF FP16, "
       "483 GB/s, 16 GB, 300 W"),
)})
"""Built-in devices, keyed by canonical name."""


def _key(name: str) -> str:
    """Spelling-insensitive key: lower case, no spaces, dashes, underscores, vendor words."""
    k = re.sub(r"[\s_\-]+", "", name.lower())
    for word in ("nvidia", "geforce", "gtx", "tesla", "quadro", "radeon", "instinct", "huawei",
                 "amd"):
        k = k.replace(word, "")
    return k


_ALIASES = {"910b": "Ascend910B", "ascend": "Ascend910B", "titanxmaxwell": "TitanX",
            "a10080gb": "A100", "h100sxm": "H100", "rtx6000quadro": "RTX6000"}


def normalise_device_name(name: str, known: Mapping[str, Any] | None = None) -> str:
    """Canonical device name for the usual spellings (``a100``, ``RTX 2080 Ti``,
    ``"NVIDIA Tesla V100"``); raises :class:`UnknownDeviceError` listing the known ones."""
    table = BUILTIN_DEVICES if known is None else known
    k = _key(name)
    by_key = {_key(n): n for n in table}
    if k in by_key:
        return by_key[k]
    alias = _ALIASES.get(k)
    if alias is not None and alias in table:
        return alias
    raise UnknownDeviceError(f"unknown device {name!r}; known: {', '.join(sorted(table))}")


def device_to_dict(d: DeviceSpec) -> dict[str, Any]:
    """Plain-JSON form of a device."""
    out = {f.name: getattr(d, f.name) for f in fields(d)}
    out["sources"] = dict(d.sources)
    return out


def device_from_dict(d: Mapping[str, Any]) -> DeviceSpec:
    """A device from :func:`device_to_dict` output (``sources`` optional)."""
    try:
        return DeviceSpec(
            name=str(d["name"]), vendor=str(d.get("vendor", "nvidia")),
            fp32_tflops=float(d["fp32_tflops"]), tf32_tflops=float(d.get("tf32_tflops", 0.0)),
            fp16_tflops=float(d["fp16_tflops"]), mem_bw_gb_s=float(d["mem_bw_gb_s"]),
            memory_gb=float(d["memory_gb"]), tdp_w=float(d["tdp_w"]),
            intra_node_gb_s=float(d["intra_node_gb_s"]),
            inter_node_gbit_s=float(d["inter_node_gbit_s"]),
            gpus_per_node=int(d.get("gpus_per_node", 8)),
            sources=MappingProxyType(dict(d.get("sources", {}))),
        )
    except KeyError as exc:
        raise ValueError(f"device {d.get('name', '?')!r} lacks field {exc}") from None


def devices(store: Any | None = None) -> dict[str, DeviceSpec]:
    """Built-in devices plus those stored in ``store`` (a :class:`workbench.store.Store`),
    stored ones overriding built-in ones of the same name."""
    out = dict(BUILTIN_DEVICES)
    if store is not None:
        out |= {d.name: d for d in load_devices(store)}
    return out


def device(name: str, store: Any | None = None) -> DeviceSpec:
    """Spec of one device by any usual spelling (see :func:`normalise_device_name`)."""
    table = devices(store)
    return table[normalise_device_name(name, table)]


def save_device(store: Any, spec: DeviceSpec) -> None:
    """Insert or replace ``spec`` in the store's ``devices`` table."""
    store.save_device(spec.name, json.dumps(device_to_dict(spec)))


def load_devices(store: Any) -> list[DeviceSpec]:
    """Devices an operator added to ``store``."""
    return [device_from_dict(json.loads(spec)) for spec in store.device_specs()]
