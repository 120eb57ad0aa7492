"""Compute measurement: predict a training job's step time on a device from its graph.

* :mod:`~workbench.compute.graph`: the graph format, the shipped app graphs, ONNX import;
* :mod:`~workbench.compute.devices`: device specs with sources; operator-added devices;
* :mod:`~workbench.compute.predict`: roofline + learned kernel correction, graph
  aggregation, ring all-reduce sync, prediction interval;
* :mod:`~workbench.compute.train`: training and leave-one-out validation on DeepBench,
  Zeus and Pollux (``workbench compute train``);
* :mod:`~workbench.compute.measure`: time a training command and store the measurement;
* :mod:`~workbench.compute.transformer` and :mod:`~workbench.compute.opgraph`: transformer
  operator graphs from a Hugging Face ``config.json``;
* :mod:`~workbench.compute.kernels`, :mod:`~workbench.compute.kernel_train`: the
  kernel-level predictor trained on NeuSight's kernels (:mod:`~workbench.compute.neusight`);
* :mod:`~workbench.compute.step`, :mod:`~workbench.compute.step_train`: kernels to a step,
  single GPU, data/tensor/pipeline parallel, with its interval;
* :mod:`~workbench.compute.llm`: LLM job records and the critical-batch efficiency;
* :mod:`~workbench.compute.apps`, :mod:`~workbench.compute.app_train`: the Pollux apps
  through one entry point, by the graph or the kernel model as measured on held-out devices.
"""

from workbench.compute.apps import AppChoice, predict_app_step, read_app_predictors
from workbench.compute.devices import (
    BUILTIN_DEVICES,
    DeviceSpec,
    UnknownDeviceError,
    device,
    devices,
    normalise_device_name,
)
from workbench.compute.graph import Graph, GraphError, Op, graph_from_onnx, load_graph
from workbench.compute.llm import LlmJobSpec, load_predictor, predict_from_config
from workbench.compute.opgraph import Kernel, StepGraph, build_step_graph
from workbench.compute.predict import (
    Coefficients,
    StepPrediction,
    load_coefficients,
    predict_grid,
    predict_step,
    roofline_time_s,
)
from workbench.compute.step import DeviceMemoryError, TransformerStep, predict_transformer
from workbench.compute.transformer import (
    ModelConfigError,
    ModelSpec,
    load_model_config,
    model_spec,
)

__all__ = [
    "BUILTIN_DEVICES",
    "AppChoice",
    "Coefficients",
    "DeviceMemoryError",
    "DeviceSpec",
    "Graph",
    "GraphError",
    "Kernel",
    "LlmJobSpec",
    "ModelConfigError",
    "ModelSpec",
    "Op",
    "StepGraph",
    "StepPrediction",
    "TransformerStep",
    "UnknownDeviceError",
    "build_step_graph",
    "device",
    "devices",
    "graph_from_onnx",
    "load_coefficients",
    "load_graph",
    "load_model_config",
    "load_predictor",
    "model_spec",
    "normalise_device_name",
    "predict_app_step",
    "predict_from_config",
    "predict_grid",
    "predict_step",
    "predict_transformer",
    "read_app_predictors",
    "roofline_time_s",
]
