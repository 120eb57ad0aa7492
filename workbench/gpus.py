"""GPU and NPU types: datasheet figures and the factors that derive unmeasured profiles.

Only two measured references exist in the public data: the Pollux step times were taken on
NVIDIA T4 nodes (AWS ``g4dn.12xlarge``: 4 T4 per node over PCIe, 50 Gbit/s Ethernet between
nodes) and the Zeus power traces on a V100 (PCIe, 250 W limit) among others. Profiles of the
scenario's H800, A100 and Ascend 910B pools are *derived* from them:

* compute time ``alpha_c, beta_c`` divided by ``compute_speed`` (realised training throughput
  relative to a T4, not the peak-FLOPS ratio);
* intra-/inter-node all-reduce time divided by ``intra_sync_speed`` / ``inter_sync_speed``
  (NVLink/HCCS against PCIe, InfiniBand/RoCE against 50 Gbit/s Ethernet). These are set
  between 0.6x and 1x of the compute speed-up, higher where the fabric gain is larger,
  far below the raw bandwidth ratios (10-60x): Pollux's measured ``sync_time`` includes
  waiting for the slowest replica and a fixed per-step latency that bandwidth does not
  shrink;
* the per-GPU batch cap scaled by ``memory_gb`` relative to the T4's 16 GB;
* power: the Zeus V100 shape ``P = a1 + a2 X`` expressed as fractions of the V100's board
  limit and re-applied to the target's TDP (see :func:`derive_energy`).

Sources of the datasheet figures: NVIDIA T4, V100, A100 (80 GB SXM4) and H100/H800 SXM5
datasheets; Huawei Ascend 910B figures as published in vendor briefs and press (64 GB
HBM2e, about 400 W, HCCS). Realised-speed assumptions: V100 ≈ 4x T4 (NVIDIA's published
training throughputs for ResNet-50/BERT with mixed precision), A100 ≈ 2.5x V100 (A100
whitepaper, MLPerf Training v0.7), H800 ≈ 2x A100 (same SM array as H100 SXM; MLPerf
Training v3.0 BF16 results), Ascend 910B ≈ 0.8x A100 (public LLM-training comparisons).
These are planning numbers; replace them with a profile (``workbench profile``) when a
pool can be measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from workbench.perf import ThroughputParams


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet figures and derivation factors of one accelerator type.

    Attributes
    ----------
    name : str
        Type name as used in scenarios (``"H800"``).
    tdp_w : float
        Board power limit, W (caps ``EnergyParams.max_power_w``).
    memory_gb : float
        Device memory, GB (scales the per-GPU batch cap).
    compute_speed : float
        Realised training compute speed relative to one NVIDIA T4 (``T_comp / speed``).
    intra_sync_speed, inter_sync_speed : float
        All-reduce speed-up within a node and across nodes relative to the Pollux testbed.
    gpus_per_node : int
        Accelerators per server.
    note : str
        Where the figures come from.
    """

    name: str
    tdp_w: float
    memory_gb: float
    compute_speed: float
    intra_sync_speed: float
    inter_sync_speed: float
    gpus_per_node: int
    note: str

    def __post_init__(self) -> None:
        for f in ("tdp_w", "memory_gb", "compute_speed", "intra_sync_speed",
                  "inter_sync_speed"):
            if not getattr(self, f) > 0:
                raise ValueError(f"GpuSpec.{f} must be positive for {self.name}")


REFERENCE_GPU = "T4"
"""GPU the Pollux timings were measured on."""

ENERGY_REFERENCE_TDP_W = 250.0
"""Largest power limit in the Zeus V100 trace (a V100 PCIe), W."""

GPU_SPECS: Mapping[str, GpuSpec] = MappingProxyType({
    "T4": GpuSpec("T4", 70.0, 16.0, 1.0, 1.0, 1.0, 4,
                  "NVIDIA T4 datasheet: 70 W, 16 GB GDDR6; Pollux testbed (measured)"),
    "V100": GpuSpec("V100", 250.0, 32.0, 4.0, 4.0, 2.0, 8,
                    "V100 PCIe datasheet: 250 W, 32 GB; ~4x T4 realised training speed"),
    "A100": GpuSpec("A100", 400.0, 80.0, 10.0, 8.0, 8.0, 8,
                    "A100 SXM4 80GB datasheet: 400 W, NVLink 600 GB/s; 2.5x V100 = 10x T4; "
                    "8x200 Gbit/s HDR InfiniBand per node"),
    "H800": GpuSpec("H800", 700.0, 80.0, 20.0, 12.0, 16.0, 8,
                    "H800 SXM5 datasheet: 700 W, 80 GB HBM3, NVLink cut to 400 GB/s; "
                    "compute as H100 SXM, 2x A100 = 20x T4; 8x400 Gbit/s NDR per node"),
    "Ascend910B": GpuSpec("Ascend910B", 400.0, 64.0, 8.0, 6.0, 5.0, 8,
                          "Huawei Ascend 910B (published figures): ~400 W, 64 GB HBM2e, "
                          "HCCS 392 GB/s; 0.8x A100 = 8x T4; 8x200 Gbit/s RoCE per node"),
})
"""Known accelerator types, keyed by name."""


def gpu_spec(name: str) -> GpuSpec:
    """Spec of a GPU type; raises with the known names when ``name`` is unknown."""
    try:
        return GPU_SPECS[name]
    except KeyError:
        raise KeyError(f"unknown GPU type {name!r}; known: {sorted(GPU_SPECS)}") from None


def derive_throughput(p: ThroughputParams, target: str,
                      reference: str = REFERENCE_GPU) -> ThroughputParams:
    """Throughput parameters on ``target`` from parameters measured on ``reference``.

    ``alpha_c, beta_c`` are divided by ``s_c = speed_t / speed_r``; intra-node
    ``alpha_r, beta_r`` by the intra-node sync ratio, inter-node ``alpha_n, beta_n`` by the
    inter-node one; ``gamma`` is kept.
    """
    t, r = gpu_spec(target), gpu_spec(reference)
    return p.scaled(
        t.compute_speed / r.compute_speed,
        intra_sync_speed=t.intra_sync_speed / r.intra_sync_speed,
        inter_sync_speed=t.inter_sync_speed / r.inter_sync_speed,
    )
