"""Device descriptions: peak throughput by precision, memory, power and interconnect.

Every figure has a source (``DeviceSpec.sources``); figures marked ``estimate`` are not in
a vendor datasheet and say how they were derived. Peaks are dense (no structured
sparsity), at boost clock. ``intra_node_gb_s`` is the per-GPU, per-direction bandwidth an
all-reduce ring gets inside one server (NVLink/HCCS where present, else PCIe);
``inter_node_gbit_s`` the network bandwidth per server of a typical deployment of that
device (an operator overrides it with ``--inter-node-gbit-s``).

``sms`` (streaming multiprocessors, compute units or AI cores), ``l2_mb`` and
``clock_mhz`` are the shape figures the kernel-level predictor reads (waves of tiles over the
SMs, working sets against the L2); ``bf16_tflops`` is 0 on devices without BF16.

Operators add devices to the store (:func:`save_device`, ``workbench devices add``), in
the project's own JSON (:func:`device_to_dict`) or in NeuSight's device-config format
(:func:`device_from_neusight`); stored devices override built-in ones of the same name.
Names match tolerantly (:func:`normalise_device_name`): ``"Tesla V100-PCIE-32GB"``,
``"NVIDIA H100 80GB HBM3"`` and ``"a100 80gb pcie"`` find their device.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from workbench.units import KILO


class UnknownDeviceError(KeyError):
    """A device name that matches no known device; ``str()`` lists the known ones."""

    def __str__(self) -> str:
        return str(self.args[0])


DEVICE_NAME_CHARS = 64
"""Longest device name (it heads a column of ``devices list`` and names pools)."""

DEVICE_FIGURE_MAX: dict[str, float] = {
    "fp32_tflops": 1e4, "tf32_tflops": 1e5, "fp16_tflops": 1e5, "bf16_tflops": 1e5,
    "mem_bw_gb_s": 1e5, "memory_gb": 1e4, "tdp_w": 5e3, "intra_node_gb_s": 1e5,
    "inter_node_gbit_s": 1e5, "gpus_per_node": 1024, "sms": 1e5, "l2_mb": 1e4,
    "clock_mhz": 1e4}
"""Upper bound of each figure of a device, ten times or more the largest accelerator of
the 2020s (B200: 80 FP32 / 2,250 dense FP16 TFLOP/s, 8 TB/s, 192 GB, 1 kW): above it the
figure is a unit mistake (GFLOP/s as TFLOP/s, MB as GB)."""


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
    sms : int
        Streaming multiprocessors (NVIDIA), compute units (AMD) or AI cores (Ascend).
    l2_mb : float
        Last-level (L2) cache, MB.
    clock_mhz : float
        Boost clock, MHz.
    bf16_tflops : float
        Peak BF16 throughput with FP32 accumulate, TFLOP/s (0: no BF16).
    form_factor : str
        ``"sxm"``, ``"pcie"`` or ``""``; tells name variants apart (A100 SXM4 and PCIe).
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
    sms: int = 0
    l2_mb: float = 0.0
    clock_mhz: float = 0.0
    bf16_tflops: float = 0.0
    form_factor: str = ""

    def __post_init__(self) -> None:
        if not (isinstance(self.name, str) and self.name.strip()
                and len(self.name) <= DEVICE_NAME_CHARS):
            raise ValueError(f"a device needs a name of 1 to {DEVICE_NAME_CHARS} characters, "
                             f"got {self.name!r:.80}")
        for f, high in DEVICE_FIGURE_MAX.items():
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise ValueError(f"device {self.name!r}: {f} must be a number, got {v!r}")
            if v > high:
                raise ValueError(f"device {self.name!r}: {f} = {v:g} is above {high:g}, "
                                 "beyond any accelerator built; check the unit")
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
        for f in ("sms", "l2_mb", "clock_mhz", "bf16_tflops"):
            v = getattr(self, f)
            if not (isinstance(v, int | float) and 0 <= v < float("inf")):
                raise ValueError(f"device {self.name!r}: {f} must be a number >= 0 (0: "
                                 f"unknown), got {v!r}")

    def peak_tflops(self, precision: str) -> float:
        """Peak throughput at ``precision`` (``fp32``, ``tf32``, ``fp16``, ``bf16``); TF32
        falls back to FP32 on devices without it; BF16 raises on devices without it."""
        if precision == "fp32":
            return self.fp32_tflops
        if precision == "tf32":
            return self.tf32_tflops or self.fp32_tflops
        if precision == "fp16":
            return self.fp16_tflops
        if precision == "bf16":
            if not self.bf16_tflops:
                raise ValueError(f"{self.name} has no BF16 arithmetic; use --precision fp32 "
                                 "(or a device from Ampere/CDNA2/Ascend on)")
            return self.bf16_tflops
        raise ValueError(f"unknown precision {precision!r}; use fp32, tf32, fp16 or bf16")

    @property
    def sm_count(self) -> int:
        """``sms``, or where unknown (0) an estimate from the FP32 peak at 128 FP32 lanes
        per SM and the clock (1.5 GHz where that is unknown too)."""
        if self.sms:
            return int(self.sms)
        clock_ghz = (self.clock_mhz or 1500.0) / KILO
        return max(1, int(round(self.fp32_tflops * KILO / (2 * 128 * clock_ghz))))

    @property
    def l2_bytes(self) -> float:
        """L2 cache, bytes (an estimate of 4 MB where unknown)."""
        return (self.l2_mb or 4.0) * 1e6


_NV = "NVIDIA datasheet"


def _d(name: str, vendor: str, fp32: float, tf32: float, fp16: float, bw: float, mem: float,
       tdp: float, intra: float, inter: float, per_node: int, src: str,
       shape: tuple[int, float, float, float, str], shape_src: str = "",
       **extra: str) -> DeviceSpec:
    """A built-in device; ``shape`` is ``(sms, l2_mb, clock_mhz, bf16_tflops, form)``."""
    sources = {f: src for f in ("fp32_tflops", "tf32_tflops", "fp16_tflops", "mem_bw_gb_s",
                                "memory_gb", "tdp_w")}
    sources |= {"intra_node_gb_s": "PCIe 3.0 x16: 15.75 GB/s per direction (PCI-SIG)",
                "inter_node_gbit_s": "typical deployment (assumption)",
                "gpus_per_node": "typical deployment (assumption)"}
    sms, l2, clock, bf16, form = shape
    sources |= {f: shape_src or f"{src}; architecture whitepaper (SM count, L2, boost clock)"
                for f in ("sms", "l2_mb", "clock_mhz")}
    sources["bf16_tflops"] = src if bf16 else "no BF16 arithmetic on this architecture"
    sources |= extra
    return DeviceSpec(name, vendor, fp32, tf32, fp16, bw, mem, tdp, intra, inter, per_node,
                      MappingProxyType(sources), sms=sms, l2_mb=l2, clock_mhz=clock,
                      bf16_tflops=bf16, form_factor=form)


_PCIE3 = 15.75
_PCIE4 = 31.5

BUILTIN_DEVICES: Mapping[str, DeviceSpec] = MappingProxyType({d.name: d for d in (
    _d("T4", "nvidia", 8.1, 0, 65.0, 320, 16, 70, _PCIE3, 50, 4,
       f"{_NV} Tesla T4 (2019): 8.1 TF FP32, 65 TF FP16 tensor, 320 GB/s, 16 GB, 70 W",
       (40, 4.0, 1590, 0, "pcie"), "NVIDIA Turing whitepaper (TU104 in T4): 40 SMs, 4 MB L2, "
       "1590 MHz boost",
       inter_node_gbit_s="AWS g4dn.12xlarge (Pollux testbed): 50 Gbit/s",
       gpus_per_node="AWS g4dn.12xlarge: 4 T4"),
    _d("P4", "nvidia", 5.5, 0, 0.09, 192, 8, 75, _PCIE3, 25, 8,
       f"{_NV} Tesla P4 (2016): 5.5 TF FP32 (2560 CUDA cores), 192 GB/s GDDR5, 8 GB, 75 W; "
       "FP16 at 1/64 rate (GP104)",
       (20, 2.0, 1063, 0, "pcie"), "NVIDIA Pascal GP104: 2560 cores = 20 SMs of 128, 2 MB L2, "
       "1063 MHz boost (P4 datasheet)"),
    _d("P100", "nvidia", 9.3, 0, 18.7, 732, 16, 250, _PCIE3, 25, 8,
       f"{_NV} Tesla P100 PCIe 16 GB: 9.3 TF FP32, 18.7 TF FP16, 732 GB/s, 250 W",
       (56, 4.0, 1303, 0, "pcie"), "NVIDIA Pascal (GP100) whitepaper: 56 SMs, 4 MB L2; P100 "
       "PCIe 1303 MHz boost"),
    _d("V100", "nvidia", 14.0, 0, 112.0, 900, 32, 250, _PCIE3, 100, 8,
       f"{_NV} Tesla V100 PCIe 32 GB: 14 TF FP32, 112 TF tensor, 900 GB/s, 250 W",
       (80, 6.0, 1380, 0, "pcie"), "NVIDIA Volta (GV100) whitepaper: 80 SMs, 6 MB L2; V100 "
       "PCIe 1380 MHz boost"),
    _d("A40", "nvidia", 37.4, 74.8, 149.7, 696, 48, 300, _PCIE4, 100, 8,
       f"{_NV} A40 (2021): 37.4 TF FP32, 74.8 TF TF32, 149.7 TF FP16, 696 GB/s, 48 GB, 300 W",
       (84, 6.0, 1740, 149.7, "pcie"), "NVIDIA Ampere GA102 whitepaper: A40 84 SMs, 6 MB L2, "
       "1740 MHz boost",
       intra_node_gb_s="PCIe 4.0 x16: 31.5 GB/s per direction"),
    _d("RTX6000", "nvidia", 16.3, 0, 130.5, 672, 24, 260, _PCIE3, 25, 8,
       f"{_NV} Quadro RTX 6000: 16.3 TF FP32, 130.5 TF tensor, 672 GB/s, 24 GB; "
       "260 W board limit (Zeus trace maximum)",
       (72, 6.0, 1770, 0, "pcie"), "NVIDIA Turing whitepaper (TU102): 72 SMs, 6 MB L2, "
       "1770 MHz boost"),
    _d("RTX2080Ti", "nvidia", 13.4, 0, 53.8, 616, 11, 250, _PCIE3, 25, 8,
       "NVIDIA Turing architecture whitepaper (RTX 2080 Ti reference): 13.4 TF FP32, "
       "53.8 TF FP16 tensor with FP32 accumulate (GeForce rate), 616 GB/s, 11 GB, 250 W",
       (68, 5.5, 1545, 0, "pcie")),
    _d("1080Ti", "nvidia", 11.3, 0, 0.177, 484, 11, 250, _PCIE3, 25, 8,
       "NVIDIA GeForce GTX 1080 Ti specifications: 11.3 TF FP32 (3584 cores x 1582 MHz x 2), "
       "FP16 at 1/64 rate, 484 GB/s, 11 GB, 250 W",
       (28, 2.75, 1582, 0, "pcie"), "NVIDIA Pascal GP102: 28 SMs of 128 cores, 2.75 MB L2"),
    _d("A100", "nvidia", 19.5, 156.0, 312.0, 2039, 80, 400, 300.0, 1600, 8,
       f"{_NV} A100 80GB SXM4: 19.5 TF FP32, 156 TF TF32, 312 TF FP16, 2039 GB/s, 400 W",
       (108, 40.0, 1410, 312.0, "sxm"), "NVIDIA Ampere (GA100) whitepaper: A100 108 SMs, "
       "40 MB L2, 1410 MHz boost",
       intra_node_gb_s="NVLink 3: 600 GB/s total = 300 GB/s per direction",
       inter_node_gbit_s="DGX A100: 8 x 200 Gbit/s HDR InfiniBand"),
    *(_d(f"A100-PCIe-{mem}GB", "nvidia", 19.5, 156.0, 312.0, bw, mem, tdp, _PCIE4, 100, 8,
         f"{_NV} A100 PCIe {mem}GB: 19.5 TF FP32, 156 TF TF32, 312 TF FP16/BF16, {bw} GB/s, "
         f"{tdp} W", (108, 40.0, 1410, 312.0, "pcie"),
         "NVIDIA Ampere (GA100) whitepaper: 108 SMs, 40 MB L2, 1410 MHz boost",
         intra_node_gb_s="PCIe 4.0 x16: 31.5 GB/s per direction")
      for mem, bw, tdp in ((40, 1555, 250), (80, 1935, 300))),
    _d("H100", "nvidia", 67.0, 494.7, 989.4, 3350, 80, 700, 450.0, 3200, 8,
       f"{_NV} H100 SXM5: 67 TF FP32, 494.7 TF TF32, 989.4 TF FP16 (dense), 3.35 TB/s, 700 W",
       (132, 50.0, 1980, 989.4, "sxm"), "NVIDIA Hopper (GH100) whitepaper: H100 SXM5 132 SMs, "
       "50 MB L2, 1980 MHz boost",
       intra_node_gb_s="NVLink 4: 900 GB/s total = 450 GB/s per direction",
       inter_node_gbit_s="DGX H100: 8 x 400 Gbit/s NDR InfiniBand"),
    _d("H800", "nvidia", 67.0, 494.7, 989.4, 3350, 80, 700, 200.0, 3200, 8,
       "NVIDIA H800 SXM5 (export variant of H100 SXM5): compute and memory as H100 SXM5, "
       "700 W",
       (132, 50.0, 1980, 989.4, "sxm"), "as H100 SXM5 (Hopper whitepaper): 132 SMs, 50 MB L2",
       intra_node_gb_s="NVLink cut to 400 GB/s total = 200 GB/s per direction",
       inter_node_gbit_s="8 x 400 Gbit/s NDR per server (typical H800 cluster)"),
    _d("L40S", "nvidia", 91.6, 183.0, 362.05, 864, 48, 350, _PCIE4, 400, 8,
       f"{_NV} L40S: 91.6 TF FP32, 183 TF TF32, 362 TF FP16 (dense), 864 GB/s, 48 GB, 350 W",
       (142, 96.0, 2520, 362.05, "pcie"), "NVIDIA Ada (AD102) whitepaper: L40S 142 SMs, 96 MB "
       "L2, 2520 MHz boost",
       intra_node_gb_s="PCIe 4.0 x16 (no NVLink): 31.5 GB/s per direction"),
    _d("Ascend910B", "huawei", 15.6, 0, 320.0, 1600, 64, 400, 196.0, 1600, 8,
       "Huawei Ascend 910B: 320 TF FP16 and 64 GB HBM2e at 1.6 TB/s, 400 W (vendor briefs "
       "and press)",
       (24, 192.0, 1650, 320.0, "sxm"),
       "estimate: 24 Da Vinci AI cores (910B2 as reported in press), 192 MB on-chip cache and "
       "1.65 GHz as reported in press; Huawei publishes no architecture whitepaper",
       fp32_tflops="estimate: Huawei publishes no FP32 peak; 0.8x the A100's 19.5 TF, the "
                   "realised-speed ratio of public LLM-training comparisons (as gpus.py)",
       bf16_tflops="estimate: BF16 at the published FP16 rate (320 TF; press reports)",
       intra_node_gb_s="HCCS 392 GB/s total = 196 GB/s per direction",
       inter_node_gbit_s="8 x 200 Gbit/s RoCE per server (Atlas 800T A2)"),
    _d("MI25", "amd", 12.3, 0, 24.6, 484, 16, 300, _PCIE3, 25, 8,
       "AMD Radeon Instinct MI25 datasheet: 12.3 TF FP32, 24.6 TF FP16, 484 GB/s HBM2, "
       "16 GB, 300 W",
       (64, 4.0, 1500, 0, "pcie"), "AMD Vega 10: 64 compute units, 4 MB L2, 1500 MHz"),
    # DeepBench devices (kernel measurements only).
    _d("M40", "nvidia", 7.0, 0, 0.1, 288, 24, 250, _PCIE3, 25, 8,
       "NVIDIA Tesla M40 24 GB datasheet: 7 TF FP32, 288 GB/s, 250 W (no fast FP16)",
       (24, 3.0, 1114, 0, "pcie"), "NVIDIA Maxwell GM200: 24 SMs, 3 MB L2, 1114 MHz boost"),
    _d("TitanX", "nvidia", 6.6, 0, 0.1, 336.5, 12, 250, _PCIE3, 25, 8,
       "NVIDIA GeForce GTX TITAN X (Maxwell) specifications: 6.6 TF FP32, 336.5 GB/s, 250 W",
       (24, 3.0, 1075, 0, "pcie"), "NVIDIA Maxwell GM200: 24 SMs, 3 MB L2, 1075 MHz boost"),
    _d("TitanXPascal", "nvidia", 11.0, 0, 0.17, 480, 12, 250, _PCIE3, 25, 8,
       "NVIDIA TITAN X (Pascal) specifications: 11 TF FP32, 480 GB/s, 12 GB, 250 W",
       (28, 3.0, 1531, 0, "pcie"), "NVIDIA Pascal GP102: 28 SMs, 3 MB L2, 1531 MHz boost"),
    _d("TitanXp", "nvidia", 12.1, 0, 0.19, 547.7, 12, 250, _PCIE3, 25, 8,
       "NVIDIA TITAN Xp specifications: 12.1 TF FP32, 547.7 GB/s, 12 GB, 250 W",
       (30, 3.0, 1582, 0, "pcie"), "NVIDIA Pascal GP102: 30 SMs, 3 MB L2, 1582 MHz boost"),
    _d("VegaFE", "amd", 13.1, 0, 26.2, 483, 16, 300, _PCIE3, 25, 8,
       "AMD Radeon Vega Frontier Edition specifications: 13.1 TF FP32, 26.2 TF FP16, "
       "483 GB/s, 16 GB, 300 W",
       (64, 4.0, 1600, 0, "pcie"), "AMD Vega 10: 64 compute units, 4 MB L2, 1600 MHz"),
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

_VARIANT = re.compile(r"(?P<form>pcie|sxm\d?|nvl)|(?P<mem>\d+)gb|hbm\d?e?")


def _variant(name: str) -> tuple[str, float | None, str]:
    """``(base key, memory_gb, form)`` of a name, read word by word: ``"Tesla
    V100-PCIE-32GB"`` -> ``("v100", 32, "pcie")``; HBM generations are dropped,
    ``sxm4``/``sxm5`` read as ``sxm``."""
    mem: float | None = None
    form = ""
    rest = []
    for word in re.split(r"[\s_\-]+", name.lower()):
        m = _VARIANT.fullmatch(word)
        if m is None:
            rest.append(word)
        elif m.group("mem"):
            mem = float(m.group("mem"))
        elif m.group("form"):
            form = "sxm" if m.group("form").startswith("sxm") else m.group("form")
    return _key(" ".join(rest)), mem, form


def normalise_device_name(name: str, known: Mapping[str, Any] | None = None) -> str:
    """Canonical device name for the usual spellings (``a100``, ``RTX 2080 Ti``,
    ``"NVIDIA Tesla V100"``, NeuSight's ``"Tesla V100-PCIE-32GB"``).

    Exact keys (spelling-insensitive) and aliases win; otherwise the name's base model must
    match a known one and its memory size and form factor, where it names them, must match
    that device's (``"A100 80GB PCIe"`` is ``A100-PCIe-80GB``, ``"A100"`` the SXM4 part).
    Raises :class:`UnknownDeviceError` listing the known ones, or the candidates when the
    name is ambiguous.
    """
    table = BUILTIN_DEVICES if known is None else known
    k = _key(name)
    by_key = {_key(n): n for n in table}
    if k in by_key:
        return by_key[k]
    alias = _ALIASES.get(k)
    if alias is not None and alias in table:
        return alias
    base, mem, form = _variant(name)
    cands = [n for n in table if _variant(n)[0] == base]
    if mem is not None:
        cands = [n for n in cands if _spec_value(table[n], "memory_gb") == mem]
    if form:
        cands = [n for n in cands if _spec_value(table[n], "form_factor") in (form, "")]
    if len(cands) > 1:
        plain = [n for n in cands if _key(n) == base]  # the family's default variant
        cands = plain or cands
    if len(cands) == 1:
        return cands[0]
    if len(cands) > 1:
        raise UnknownDeviceError(f"device {name!r} is ambiguous: {', '.join(sorted(cands))}; "
                                 "name the memory size or form factor (e.g. '80GB PCIe')")
    raise UnknownDeviceError(f"unknown device {name!r}; known: {', '.join(sorted(table))} "
                             "(add one with `workbench devices add FILE.json`)")


def _spec_value(spec: Any, attr: str) -> Any:
    """``spec.attr`` for a :class:`DeviceSpec`, None for anything else (a name table)."""
    return getattr(spec, attr, None)


def device_to_dict(d: DeviceSpec) -> dict[str, Any]:
    """Plain-JSON form of a device."""
    out = {f.name: getattr(d, f.name) for f in fields(d)}
    out["sources"] = dict(d.sources)
    return out


def device_from_dict(d: Mapping[str, Any]) -> DeviceSpec:
    """A device from :func:`device_to_dict` output (``sources`` and the shape figures
    ``sms``, ``l2_mb``, ``clock_mhz``, ``bf16_tflops``, ``form_factor`` optional). Figures
    must be JSON numbers (``true`` or ``"312"`` is refused, naming the field), whole where
    they count (``sms``, ``gpus_per_node``)."""
    name = d.get("name")
    if not isinstance(name, str):
        raise ValueError(f"a device's name must be text, got {name!r:.80}")

    def num(key: str, default: float | None = None, whole: bool = False) -> Any:
        if key not in d and default is None:
            raise ValueError(f"device {name!r} lacks field {key!r}")
        v = d.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError(f"device {name!r}: {key} must be a number, got {v!r:.80}")
        if whole:
            if not (math.isfinite(v) and float(v).is_integer()):
                raise ValueError(f"device {name!r}: {key} must be a whole number, got {v!r}")
            return int(v)
        return float(v)

    return DeviceSpec(
        name=name, vendor=str(d.get("vendor", "nvidia")),
        fp32_tflops=num("fp32_tflops"), tf32_tflops=num("tf32_tflops", 0.0),
        fp16_tflops=num("fp16_tflops"), mem_bw_gb_s=num("mem_bw_gb_s"),
        memory_gb=num("memory_gb"), tdp_w=num("tdp_w"),
        intra_node_gb_s=num("intra_node_gb_s"), inter_node_gbit_s=num("inter_node_gbit_s"),
        gpus_per_node=num("gpus_per_node", 8, whole=True),
        sources=MappingProxyType(dict(d.get("sources", {}))),
        sms=num("sms", 0, whole=True), l2_mb=num("l2_mb", 0.0),
        clock_mhz=num("clock_mhz", 0.0), bf16_tflops=num("bf16_tflops", 0.0),
        form_factor=str(d.get("form_factor", "")),
    )


NEUSIGHT_KEYS = ("Device", "Dev_Mem", "Mem_Bw", "Num_Sm", "Core_Per_SM", "Freq", "L2Cache")
"""Keys of NeuSight's device-config format (plus ``SingleFLOPs`` in GFLOP/s, or AMD's
``SingleFLOPsMM`` matrix and ``SingleFLOPsVEC`` vector pair)."""

_NEUSIGHT_SRC = "NeuSight device config"


def _display_name(device_string: str) -> str:
    """``"NVIDIA A100-PCIE-40GB"`` -> ``"A100-PCIE-40GB"``, ``"AMD Instinct MI100"`` ->
    ``"MI100"``: the device string without vendor and product-line words."""
    words = [w for w in re.split(r"\s+", device_string.strip())
             if w.lower() not in ("nvidia", "tesla", "amd", "instinct", "geforce", "quadro",
                                  "radeon", "huawei")]
    return "-".join(words) or device_string.strip()


def device_from_neusight(doc: Mapping[str, Any], known: Mapping[str, DeviceSpec] | None = None
                         ) -> tuple[DeviceSpec, list[str]]:
    """A device from NeuSight's device-config format, and the figures it had to assume.

    ``Dev_Mem`` GB, ``Mem_Bw`` GB/s, ``Num_Sm``, ``Freq`` MHz, ``SingleFLOPs`` GFLOP/s (AMD:
    ``SingleFLOPsVEC`` is the FP32 peak, ``SingleFLOPsMM`` noted in the sources),
    ``L2Cache`` MB. The format has no TDP, half-precision peaks or interconnect: where the
    ``Device`` string matches a known device (:func:`normalise_device_name`) those come
    from it and the device keeps its canonical name; otherwise they are assumptions, each
    named in the returned list and in ``sources``.
    """
    missing = [k for k in NEUSIGHT_KEYS if k not in doc]
    if "SingleFLOPs" not in doc and "SingleFLOPsVEC" not in doc:
        missing.append("SingleFLOPs")
    if missing:
        raise ValueError(f"NeuSight device config lacks {missing}; it needs "
                         f"{', '.join(NEUSIGHT_KEYS)} and SingleFLOPs (GFLOP/s)")
    def num(key: str) -> float:
        v = doc[key]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"NeuSight device config: {key} = {v!r:.80} is not a finite "
                             "number; give numbers for Dev_Mem, Mem_Bw, Num_Sm, Freq, "
                             "SingleFLOPs, L2Cache")
        return float(v)

    dev_str = str(doc["Device"])
    fp32 = num("SingleFLOPsVEC" if "SingleFLOPsVEC" in doc else "SingleFLOPs") / KILO
    mem, bw = num("Dev_Mem"), num("Mem_Bw")
    sms, clock, l2 = num("Num_Sm"), num("Freq"), num("L2Cache")
    if not sms.is_integer():
        raise ValueError(f"NeuSight device config: Num_Sm = {sms:g} is not a whole number")
    table = BUILTIN_DEVICES if known is None else known
    try:
        base: DeviceSpec | None = table[normalise_device_name(dev_str, table)]
    except UnknownDeviceError:
        base = None
    src = f"{_NEUSIGHT_SRC} ({dev_str!r})"
    sources = {f: src for f in ("fp32_tflops", "memory_gb", "mem_bw_gb_s", "sms", "l2_mb",
                                "clock_mhz")}
    if "SingleFLOPsMM" in doc:
        sources["fp32_tflops"] += (f"; vector peak; matrix-core FP32 "
                                   f"{num('SingleFLOPsMM') / KILO:g} TF")
    assumed: list[str] = []
    vendor = "amd" if "amd" in dev_str.lower() else (
        "huawei" if "ascend" in dev_str.lower() else "nvidia")
    if base is not None:
        inherit = {f: getattr(base, f) for f in ("tf32_tflops", "fp16_tflops", "bf16_tflops",
                                                 "tdp_w", "intra_node_gb_s",
                                                 "inter_node_gbit_s", "gpus_per_node",
                                                 "form_factor")}
        sources |= {f: f"{base.name} built-in: {base.sources.get(f, '')}".rstrip(": ")
                    for f in inherit if f != "form_factor"}
        name, vendor = base.name, base.vendor
    else:
        pcie4 = _PCIE4
        inherit = {"tf32_tflops": 0.0, "fp16_tflops": 2 * fp32, "bf16_tflops": 0.0,
                   "tdp_w": 300.0, "intra_node_gb_s": pcie4, "inter_node_gbit_s": 100.0,
                   "gpus_per_node": 8, "form_factor": ""}
        why = "not in NeuSight's format"
        notes = {"fp16_tflops": f"assumption: FP16 at twice FP32 ({2 * fp32:g} TF; {why})",
                 "tf32_tflops": f"assumption: no TF32 ({why})",
                 "bf16_tflops": f"assumption: no BF16 ({why})",
                 "tdp_w": f"assumption: 300 W board power ({why}); sets the power model",
                 "intra_node_gb_s": f"assumption: PCIe 4.0 x16, 31.5 GB/s ({why})",
                 "inter_node_gbit_s": f"assumption: 100 Gbit/s per server ({why})",
                 "gpus_per_node": f"assumption: 8 per server ({why})"}
        sources |= notes
        assumed = [f"{k}: {v.removeprefix('assumption: ')}" for k, v in notes.items()]
        name = _display_name(dev_str)
    spec = DeviceSpec(name=name, vendor=vendor, fp32_tflops=fp32, mem_bw_gb_s=bw,
                      memory_gb=mem, sources=MappingProxyType(sources), sms=int(sms), l2_mb=l2,
                      clock_mhz=clock, **inherit)
    return spec, assumed


def device_from_document(doc: Any, known: Mapping[str, DeviceSpec] | None = None
                         ) -> tuple[DeviceSpec, list[str]]:
    """A device from a parsed JSON document in either format: NeuSight's (a ``Device``
    key, :func:`device_from_neusight`) or the project's (:func:`device_from_dict`)."""
    if not isinstance(doc, Mapping):
        raise ValueError("a device file holds one JSON object (the project's fields, or "
                         "NeuSight's Device, Dev_Mem, Mem_Bw, ...)")
    if "Device" in doc:
        return device_from_neusight(doc, known)
    return device_from_dict(doc), []


_IN_USE: ContextVar[Mapping[str, DeviceSpec] | None] = ContextVar("device_table",
                                                                  default=None)


@contextmanager
def devices_of(store: Any) -> Iterator[dict[str, DeviceSpec]]:
    """Inside the block, :func:`device` without a store looks names up in ``store``'s
    devices as well as the shipped ones (a scenario build predicting profiles on a pool of
    a device the operator added; the predictions' many lookups need no store passed
    down)."""
    table = devices(store)
    token = _IN_USE.set(table)
    try:
        yield table
    finally:
        _IN_USE.reset(token)


def devices(store: Any | None = None) -> dict[str, DeviceSpec]:
    """Built-in devices plus those stored in ``store`` (a :class:`workbench.store.Store`),
    stored ones overriding built-in ones of the same name (``devices add`` refuses a name
    that stands for a shipped one). A store without a devices table adds none."""
    out = dict(BUILTIN_DEVICES)
    if store is not None:
        version = getattr(store, "schema_version", lambda: 3)()
        if version is not None and version >= 3:
            out |= {d.name: d for d in load_devices(store)}
    return out


def device(name: str, store: Any | None = None) -> DeviceSpec:
    """Spec of one device by any usual spelling (see :func:`normalise_device_name`): the
    shipped ones, those of ``store``, or within :func:`devices_of` those of its store."""
    table = devices(store) if store is not None else (_IN_USE.get() or BUILTIN_DEVICES)
    return table[normalise_device_name(name, table)]


def device_key(name: str) -> str:
    """The spelling-insensitive key two names of one device share (``"A-100"``, ``"a100"``,
    ``"NVIDIA A100"``)."""
    return _key(name)


def shipped_device(name: str) -> str | None:
    """The shipped device ``name`` would stand for in a lookup (its spelling-insensitive key
    or an alias), None when it names none: a stored device of that name would shadow it."""
    k = _key(name)
    hit = next((n for n in BUILTIN_DEVICES if _key(n) == k), None)
    return hit or _ALIASES.get(k)


def save_device(store: Any, spec: DeviceSpec) -> None:
    """Insert or replace ``spec`` in the store's ``devices`` table."""
    store.save_device(spec.name, json.dumps(device_to_dict(spec)))


def load_devices(store: Any) -> list[DeviceSpec]:
    """Devices an operator added to ``store``."""
    return [device_from_dict(json.loads(spec)) for spec in store.device_specs()]
