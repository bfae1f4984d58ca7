"""One inference benchmark: `infer(cfg, out_dir)`, what `python -m segperf.infer` calls.

The seed study's inference side: a trained fp32 checkpoint, its weights cast to the dtype of the
`precision` group (fp32 / bf16 / fp16), run over the validation split with the training axes
(workers, prefetch, pin, memory_format, compile) and a runtime (the `runtime` group: a class of
segperf.inference.runtimes, torch or onnxruntime, builds what the benchmark times). Measures
end-to-end and model-only images/s, and what the cast costs in quality: accuracy against the
masks and agreement with the fp32 model's own predictions. Sweeps with -m like training.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from segperf.axes import inference_axes
from segperf.config import plain_config
from segperf.inference import benchmark, runtimes
from segperf.inference.checkpoint import (
    DTYPE_NAMES,
    PRECISION_OF,
    load_net,
    probe_dtype,
    resolve_source,
    weights_dtype,
)
from segperf.inference.summary import adjust, format_summary, note
from segperf.perf.results import record_failure, write_json_atomic

# what a training run's config decides about the data, adopted with run_dir unless given explicitly:
# the same folder, size, split and decoding, and the same policy for bad samples (a run trained
# with on_bad_sample=skip on a dirty folder is benchmarked on it without stopping at what it left out)
RUN_DATA_KEYS = ("root", "height", "width", "holdout_frac", "synthetic", "decode", "on_bad_sample")


def infer(cfg: DictConfig, out_dir: Path, keep: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """One inference benchmark; always leaves results.json in `out_dir`, also when it fails.

    `keep`: dotted keys set explicitly (the command line) that a run_dir's config must not replace.
    """
    torch._dynamo.reset()  # sweep jobs share the process: no compiled graphs from an earlier job
    out_dir = Path(out_dir)
    results: dict[str, Any] = {"kind": "inference", "status": "failed", "config": None, "axes": axes(cfg)}
    results.update(dataset={}, inference={}, quality={}, adjusted={}, notices=[])
    try:
        path, train_config = resolve_source(cfg.ckpt, cfg.run_dir)
        if train_config:
            adopt_run_data(cfg, train_config.get("data", {}), keep)
        results["config"] = plain_config(cfg)
        runtime = runtimes.from_config(cfg.runtime)
        device = pick_device(cfg.device)
        start = time.perf_counter()
        reference = load_net(path)  # fp32, CPU; load_s: read, rebuild, dtype probe, cast and move
        reference.check_input_size(cfg.data.height, cfg.data.width)
        dtype = usable_dtype(cfg, runtime, reference.config, device, results)
        net = copy.deepcopy(reference).to(device, dtype)
        load_s = time.perf_counter() - start

        datamodule = instantiate(cfg.data, val_images=cfg.val_images or 1, batch_size=cfg.batch_size)
        datamodule.setup("validate")
        if cfg.val_images is None:  # null: the whole validation split
            datamodule.val_images = len(datamodule.split.val)
        results["dataset"] = {**datamodule.summary(), "val_images_used": datamodule.val_images}
        loader = datamodule.val_dataloader()

        built = runtime.build(
            runtimes.Job(
                net=net,
                reference=reference,
                dtype=dtype,
                device=device,
                memory_format=cfg.model.memory_format,
                compile=cfg.model.compile,
                pin_memory=cfg.data.pin_memory,
                precision=cfg.trainer.precision,
                batch_size=cfg.batch_size,
                loader=loader,
                out_dir=out_dir,
                results=results,
            )
        )
        m = benchmark.measure(built.runner, loader, cfg.warmup_batches, cfg.passes)
        if built.is_fp32_reference:
            fp32_preds = m.preds  # this run is the fp32 reference
        else:
            fp32_runner = benchmark.TorchRunner(reference.to(device), device, torch.float32, "nchw", False)
            fp32_preds = benchmark.predict(fp32_runner, m.batches)
        results["inference"] = {
            **m.timing(),
            "warmup_batches": m.warmup_batches,
            "warmup_s": m.warmup_s,
            "load_s": load_s,
            "weights_dtype": DTYPE_NAMES[built.dtype],
            "device": str(device),
            "batch_size": cfg.batch_size,
            "checkpoint": str(path),
        }
        results["quality"] = benchmark.quality(m, fp32_preds, reference.config["num_classes"])
        results["status"] = "completed"
    except BaseException as error:
        record_failure(results, error)
        raise
    finally:
        if results["config"] is None:
            results["config"] = OmegaConf.to_container(cfg, resolve=False)
        write_json_atomic(out_dir / "results.json", results)
        print(format_summary(results), end="")
        print(f"Results: {out_dir / 'results.json'}")
    return results


def axes(cfg: DictConfig) -> dict[str, Any]:
    """The settings an inference sweep varies, as requested (what actually ran: `adjusted`): the
    inference axes of segperf.axes, and the batch size."""
    return {axis.group: OmegaConf.select(cfg, axis.key) for axis in inference_axes()} | {"batch_size": cfg.batch_size}


def adopt_run_data(cfg: DictConfig, run_data: dict[str, Any], keep: set[str] | frozenset[str]) -> None:
    """Infer on the data the net was trained for (image size, data root, split) unless told otherwise."""
    with open_dict(cfg):
        for key in RUN_DATA_KEYS:
            explicit = any(k == f"data.{key}" or k.startswith(f"data.{key}.") for k in keep)
            if key in run_data and not explicit:
                # merged into a typed node (data.synthetic), set for plain values
                OmegaConf.update(cfg, f"data.{key}", run_data[key], merge=isinstance(run_data[key], dict))


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def usable_dtype(
    cfg: DictConfig, runtime: runtimes.Runtime, net_config: dict, device: torch.device, results: dict
) -> torch.dtype:
    """The requested weight dtype if a tiny forward in it works on `device`, else fp32 (recorded)."""
    dtype = weights_dtype(cfg.trainer.precision)
    reason = probe_dtype(net_config, dtype, device, cfg.model.memory_format == "channels_last")
    if reason is not None:
        notice = f"{DTYPE_NAMES[dtype]} weights do not run on {device} in this torch build: cast to fp32 instead"
        adjust(results, "precision", cfg.trainer.precision, PRECISION_OF[torch.float32], notice, reason)
        return torch.float32
    if notice := runtime.dtype_notice(cfg.trainer.precision, device):
        note(results, notice)
    return dtype
