"""Measurement: the NVML profiler behind a small device interface."""

from workbench.measure.nvml import (
    GpuDevice,
    GpuSample,
    NoGpuError,
    NvmlBackend,
    ProfileResult,
    profile_command,
    profile_for,
    sample_loop,
    summarise,
)

__all__ = [
    "GpuDevice",
    "GpuSample",
    "NoGpuError",
    "NvmlBackend",
    "ProfileResult",
    "profile_command",
    "profile_for",
    "sample_loop",
    "summarise",
]
