"""Compute measurement: predict a training job's step time on a device from its graph.

* :mod:`~workbench.compute.graph`: the graph format, the shipped app graphs, ONNX import;
* :mod:`~workbench.compute.devices`: device specs with sources; operator-added devices;
* :mod:`~workbench.compute.predict`: roofline + learned kernel correction, graph
  aggregation, ring all-reduce sync, prediction interval;
* :mod:`~workbench.compute.train`: training and leave-one-out validation on DeepBench,
  Zeus and Pollux (``workbench compute train``);
* :mod:`~workbench.compute.measure`: time a training command and store the measurement.
"""

from workbench.compute.devices import (
    BUILTIN_DEVICES,
    DeviceSpec,
    UnknownDeviceError,
    device,
    devices,
    normalise_device_name,
)
from workbench.compute.graph import Graph, GraphError, Op, graph_from_onnx, load_graph
from workbench.compute.predict import (
    Coefficients,
    StepPrediction,
    load_coefficients,
    predict_grid,
    predict_step,
    roofline_time_s,
)

__all__ = [
    "BUILTIN_DEVICES",
    "Coefficients",
    "DeviceSpec",
    "Graph",
    "GraphError",
    "Op",
    "StepPrediction",
    "UnknownDeviceError",
    "device",
    "devices",
    "graph_from_onnx",
    "load_coefficients",
    "load_graph",
    "normalise_device_name",
    "predict_grid",
    "predict_step",
    "roofline_time_s",
]
