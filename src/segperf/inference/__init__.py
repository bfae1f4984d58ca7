"""Inference benchmark pieces behind `python -m segperf.infer`: safe checkpoint loading and weight
dtypes (checkpoint), the timed loops and prediction quality (benchmark), the runtimes the `runtime`
group instantiates (runtimes: torch, and ONNX Runtime through onnx_export), what a run records and
prints (summary)."""

from segperf.inference.checkpoint import InferenceError, load_net, resolve_source, weights_dtype

__all__ = ["InferenceError", "load_net", "resolve_source", "weights_dtype"]
