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
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from workbench.perf import (
    EfficiencyParams,
    EnergyParams,
    JobProfile,
    ThroughputParams,
    throughput,
)

if TYPE_CHECKING:
    from workbench.fit import EnergyFit


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
    ``alpha_n, beta_n`` by the intra-node sync ratio, inter-node ``alpha_r, beta_r`` by the
    inter-node one; ``gamma`` is kept.
    """
    t, r = gpu_spec(target), gpu_spec(reference)
    return p.scaled(
        t.compute_speed / r.compute_speed,
        intra_sync_speed=t.intra_sync_speed / r.intra_sync_speed,
        inter_sync_speed=t.inter_sync_speed / r.inter_sync_speed,
    )


def derive_efficiency(e: EfficiencyParams, target: str,
                      reference: str = REFERENCE_GPU) -> EfficiencyParams:
    """Efficiency parameters on ``target``: the per-GPU batch cap grows with memory.

    ``max_local_batch' = min(max_batch, floor(max_local_batch * mem_t / mem_r))``; the
    gradient noise scale is a property of the model and data, not of the device.
    """
    ratio = gpu_spec(target).memory_gb / gpu_spec(reference).memory_gb
    cap = int(min(e.max_batch, max(1, np.floor(e.max_local_batch * ratio))))
    return EfficiencyParams(
        m0=e.m0, min_batch=e.min_batch, max_batch=e.max_batch,
        max_local_batch=max(cap, 1), phi_progress=e.phi_progress, phi_values=e.phi_values,
    )


def derive_energy(
    idle_fraction: float, full_fraction: float, x_full_sps: float, target: str
) -> EnergyParams:
    """Power model on ``target`` from a measured shape.

    With ``f_0 = a1 / P_ref`` and ``f_1 = (a1 + a2 X_ref,max) / P_ref`` measured on the
    reference GPU (board limit ``P_ref``) and ``X_full`` the job's one-GPU throughput at its
    largest local batch on ``target`` (TDP ``P_t``)::

        a1' = f_0 * P_t
        a2' = (f_1 - f_0) * P_t / X_full
        max_power_w = P_t
    """
    tdp = gpu_spec(target).tdp_w
    f0 = float(np.clip(idle_fraction, 0.0, 1.0))
    f1 = float(np.clip(full_fraction, f0, 1.0))
    return EnergyParams(a1_w=f0 * tdp, a2_w_per_sps=(f1 - f0) * tdp / x_full_sps,
                        max_power_w=tdp)


# Fallback power shape when no energy fit matches an application: about 30% of the board
# limit when allocated and 85% at full load, typical of the Zeus V100 vision workloads.
_DEFAULT_IDLE_FRACTION = 0.3
_DEFAULT_FULL_FRACTION = 0.85


def _energy(
    tp: ThroughputParams, ep: EfficiencyParams, energy_fit: EnergyFit | None, target: str
) -> tuple[EnergyParams, str]:
    x_full = float(throughput(tp, 1, ep.max_local_batch))
    if energy_fit is not None:
        p_ref = energy_fit.params.max_power_w or ENERGY_REFERENCE_TDP_W
        f0 = energy_fit.params.a1_w / p_ref
        f1 = energy_fit.full_load_power_w / p_ref
        src = (f"Zeus {energy_fit.gpu} {energy_fit.dataset}/{energy_fit.network} "
               f"(power MAPE {100 * energy_fit.mape:.1f}%): idle {f0:.2f}, full {f1:.2f} "
               f"of {p_ref:.0f} W")
    else:
        f0, f1 = _DEFAULT_IDLE_FRACTION, _DEFAULT_FULL_FRACTION
        src = f"default shape: idle {f0:.2f}, full {f1:.2f} of TDP"
    tdp = gpu_spec(target).tdp_w
    return derive_energy(f0, f1, x_full, target), f"{src} scaled to {tdp:.0f} W"


def derive_profile(
    app: str,
    params: ThroughputParams,
    efficiency: EfficiencyParams,
    energy_fit: EnergyFit | None,
    target: str,
    throughput_mape: float | None = None,
) -> JobProfile:
    """A :class:`JobProfile` of ``app`` on ``target`` from fits on the reference GPUs.

    ``params`` and ``efficiency`` were fitted on :data:`REFERENCE_GPU`; ``energy_fit`` is
    the Zeus power shape of the closest network (None: a default shape). ``derived`` is
    False only for the T4 itself; ``source`` records every factor used.
    """
    spec = gpu_spec(target)
    tp = derive_throughput(params, target)
    ep = derive_efficiency(efficiency, target)
    energy, e_src = _energy(tp, ep, energy_fit, target)
    ref = gpu_spec(REFERENCE_GPU)
    t_src = f"Pollux {app} on {REFERENCE_GPU}"
    if throughput_mape is not None:
        t_src += f" (step-time MAPE {100 * throughput_mape:.1f}%)"
    if target != REFERENCE_GPU:
        t_src += (f", compute x{spec.compute_speed / ref.compute_speed:g}, "
                  f"sync intra x{spec.intra_sync_speed / ref.intra_sync_speed:g} "
                  f"inter x{spec.inter_sync_speed / ref.inter_sync_speed:g}, "
                  f"memory x{spec.memory_gb / ref.memory_gb:g}")
    return JobProfile(app=app, gpu_type=target, throughput=tp, efficiency=ep, energy=energy,
                      derived=target != REFERENCE_GPU,
                      source=f"throughput: {t_src}; energy: {e_src}")


def with_energy_from(profile: JobProfile, energy_fit: EnergyFit | None) -> JobProfile:
    """``profile`` with its power model re-derived from ``energy_fit`` (see
    :func:`derive_energy`); the source string's energy part is replaced."""
    energy, e_src = _energy(profile.throughput, profile.efficiency, energy_fit,
                            profile.gpu_type)
    head = profile.source.split("; energy:")[0]
    return replace(profile, energy=energy, source=f"{head}; energy: {e_src}")
