"""One inference benchmark: `infer(cfg, out_dir)`, what `python -m segperf.infer` calls.

The seed study's inference side, for every model segperf trains (the U-Net, the CNN, ResNet-18,
a user's own LightningModule): a trained fp32 checkpoint, its weights cast to the dtype of the
`precision` group (fp32 / bf16 / fp16), run over the validation split with the training axes
(workers, prefetch, pin, memory_format, compile) and a runtime (the `runtime` group: a class of
segperf.inference.runtimes, torch or onnxruntime, builds what the benchmark times). Measures
end-to-end and model-only images/s, and what the cast costs in quality: the module's own
validation metrics (segperf.inference.quality) on what was timed, beside the fp32 module's, and
agreement with the fp32 module's predictions. Sweeps with -m like training.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from segperf.axes import inference_axes
from segperf.config import plain_config
from segperf.data.filechecks import write_bad_files
from segperf.inference import benchmark, runtimes
from segperf.inference import quality as inference_quality
from segperf.inference import workload as inference_workload
from segperf.inference.checkpoint import (
    DTYPE_NAMES,
    PRECISION_OF,
    InferenceError,
    Source,
    probe_dtype,
    read_checkpoint,
    resolve_source,
    unet_model_config,
    weights_dtype,
)
from segperf.inference.summary import adjust, format_summary, note
from segperf.perf.results import record_failure, write_json_atomic
from segperf.training.compile_cache import use_private_copy

# What a training run's config decides about the data is adopted with run_dir unless given
# explicitly: the same folder, size, split and decoding, the same policy for bad samples (a run
# trained with on_bad_sample=skip on a dirty folder is benchmarked on it without stopping at what it
# left out), a user's data module's own arguments. These are infer's own whatever the run did: its
# DataLoader axes, caching, run size and seed.
INFER_DATA_KEYS = ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers", "cache", "augment")
INFER_DATA_KEYS += ("cold_cache",)
INFER_OWN_KEYS = (*INFER_DATA_KEYS, "train_images", "val_images", "batch_size", "seed")


def infer(cfg: DictConfig, out_dir: Path, keep: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """One inference benchmark; always leaves results.json in `out_dir`, also when it fails.

    `keep`: dotted keys set explicitly (the command line) that a run_dir's config must not replace.
    """
    torch._dynamo.reset()  # sweep jobs share the process: no compiled graphs from an earlier job
    out_dir = Path(out_dir)
    results: dict[str, Any] = {"kind": "inference", "status": "failed", "config": None, "axes": axes(cfg)}
    results.update(dataset={}, inference={}, quality={}, adjusted={}, notices=[])
    failure: BaseException | None = None
    try:
        source = resolve_source(cfg.ckpt, cfg.run_dir)
        start = time.perf_counter()
        checkpoint = read_checkpoint(source.checkpoint)
        adopt_run(cfg, source, checkpoint, keep)
        results["config"] = plain_config(cfg)
        runtime = runtimes.from_config(cfg.runtime)
        if cfg.model.get("compile"):  # torch.compile's cache: this process's own copy (compile_cache)
            use_private_copy()
        device = pick_device(cfg.device)
        workload = inference_workload.build(
            cfg.model,
            cfg.data,
            checkpoint["state_dict"],
            val_images=cfg.val_images,
            batch_size=cfg.batch_size,
            device=device,
            checkpoint=str(source.checkpoint),
        )
        del checkpoint
        results["dataset"] = {**workload.dataset_summary(), "val_images_used": workload.images}
        if note := fewer_images_than_the_run(source, workload.images, keep):
            results["notices"].append(note)
        example = workload.feed(next(iter(workload.loader)))
        # load_s: read, rebuild, cast and move, and the dtype probe (one image in the cast net)
        net, dtype = cast_net(cfg, runtime, workload.net, example, device, results)
        load_s = time.perf_counter() - start

        built = runtime.build(
            runtimes.Job(
                net=net,
                reference=workload.net,
                dtype=dtype,
                device=device,
                memory_format=cfg.model.memory_format,
                compile=cfg.model.compile,
                pin_memory=cfg.data.pin_memory,
                precision=cfg.trainer.precision,
                batch_size=cfg.batch_size,
                example=example,
                out_dir=out_dir,
                results=results,
            )
        )
        del example
        last_batch = (workload.images or 0) % cfg.batch_size
        m = benchmark.measure(built.runner, workload.feed, workload.loader, cfg.warmup_batches, cfg.passes, last_batch)
        results["inference"] = {
            **m.timing(),
            "warmup_batches": m.warmup_batches,
            "warmup_s": m.warmup_s,
            "load_s": load_s,
            "weights_dtype": DTYPE_NAMES[built.dtype],
            "device": str(device),
            "batch_size": cfg.batch_size,
            "checkpoint": str(source.checkpoint),
        }
        results["quality"] = quality_section(workload, m, built.is_fp32_reference, source, results)
        results["status"] = "completed"
    except BaseException as error:
        record_failure(results, error)
        failure = error
        raise
    finally:
        if results["config"] is None:
            results["config"] = OmegaConf.to_container(cfg, resolve=False)
        write_bad_files(out_dir, results["dataset"], failure)  # every bad file of the data, one a line
        write_json_atomic(out_dir / "results.json", results)
        print(format_summary(results), end="")
        print(f"Results: {out_dir / 'results.json'}")
    return results


def quality_section(
    workload: inference_workload.InferenceWorkload,
    m: benchmark.Measurement,
    is_fp32: bool,
    source: Source,
    results: dict[str, Any],
) -> dict[str, Any]:
    """results.json's `quality`: each metric the module's validation logs, of the timed engine's
    outputs; `metric`/`mode`, the one the run is judged by; `fp32_<name>`, the fp32 module's on the
    same images; `change_vs_fp32` of the metric (negative: the cast lost quality where higher is
    better); agreement with the fp32 predictions. The U-Net's `dice_change_vs_fp32` as before."""
    metrics, fp32, fp32_outputs, replayed = inference_quality.measure(
        workload.module, m.batches, m.outputs, workload.device, is_fp32
    )
    if not replayed:
        note(
            results,
            f"{type(workload.module).__qualname__}.validation_step does not call the module (self(input)) once per "
            "batch: quality is the fp32 module's, not the timed engine's",
        )
    if not metrics:
        note(results, f"{type(workload.module).__qualname__} logs no validation metric (val_...): quality not measured")
        return {}
    metric, mode = inference_workload.quality_choice(workload, source.train_quality, list(metrics))
    section: dict[str, Any] = {**metrics, "metric": metric, "mode": mode}
    section |= {f"fp32_{name}": value for name, value in fp32.items()}
    section["change_vs_fp32"] = metrics[metric] - fp32[metric] if replayed else None
    if "val_dice" in metrics:
        section["dice_change_vs_fp32"] = metrics["val_dice"] - fp32["val_dice"]
    segmentation = "val_dice" in metrics and not workload.users
    section |= inference_quality.comparison(m.outputs, fp32_outputs, segmentation) if replayed else {}
    return section


def adopt_run(cfg: DictConfig, source: Source, checkpoint: dict[str, Any], keep: set[str] | frozenset[str]) -> None:
    """The model and data the checkpoint was trained for: the run's config (any model), or for a
    bare checkpoint the U-Net its net_config describes on infer's data (data=carvana)."""
    with open_dict(cfg):
        axes_of_infer = {"memory_format": cfg.model.memory_format, "compile": cfg.model.compile}
        if source.train_config is None:
            cfg.model = {**unet_model_config(source.checkpoint, checkpoint), **axes_of_infer}
            return
        cfg.model = {**source.train_config["model"], **axes_of_infer}
        run_data = source.train_config.get("data", {})
        if run_data.get("_target_") == cfg.data.get("_target_"):
            adopt_run_data(cfg, run_data, keep)
        else:
            cfg.data = adopted_data(cfg, run_data, keep)


def fewer_images_than_the_run(source: Source, used: int | None, keep: set[str] | frozenset[str]) -> str | None:
    """A word where the quality is read from fewer validation images than the training run read
    (infer's default is 16, a minute of the U-Net on 2 cores: an outside regression model's val_mae
    over 16 images read 3.40 against the run's 4.05 over 256), unless val_images was given."""
    ran = (source.train_config or {}).get("val_images")
    if "val_images" in keep or not isinstance(ran, int) or used is None or used >= ran:
        return None
    return (
        f"quality from {used} validation images (infer's val_images); the training run validated on {ran}: "
        f"val_images={ran} batch_size=... reads its figure"
    )


def adopted_data(cfg: DictConfig, run_data: dict[str, Any], keep: set[str] | frozenset[str]) -> DictConfig:
    """Another data module than infer's default (MNIST, an image folder, a user's): the run's data
    config, with infer's own settings (INFER_DATA_KEYS) and what the command line set."""
    data = OmegaConf.create(run_data)
    for key in INFER_DATA_KEYS:
        if key in cfg.data and (key in run_data or key in ("num_workers", "pin_memory")):
            data[key] = cfg.data[key]
    for key in sorted(k for k in keep if k.startswith("data.")):
        if key.split(".")[1] not in run_data:
            raise InferenceError(
                f"{key}: not a setting of the run's data module ({run_data.get('_target_')}); "
                f"its settings are {', '.join(k for k in run_data if not k.startswith('_'))}"
            )
        OmegaConf.update(data, key.removeprefix("data."), OmegaConf.select(cfg, key), merge=True)
    return data


def axes(cfg: DictConfig) -> dict[str, Any]:
    """The settings an inference sweep varies, as requested (what actually ran: `adjusted`): the
    inference axes of segperf.axes, and the batch size."""
    return {axis.group: OmegaConf.select(cfg, axis.key) for axis in inference_axes()} | {"batch_size": cfg.batch_size}


def adopt_run_data(cfg: DictConfig, run_data: dict[str, Any], keep: set[str] | frozenset[str]) -> None:
    """Infer on the data the net was trained for (image size, data root, split, a user's data
    module's own arguments) unless told otherwise; infer's own settings stay infer's."""
    with open_dict(cfg):
        for key, value in run_data.items():
            explicit = any(k == f"data.{key}" or k.startswith(f"data.{key}.") for k in keep)
            if key not in INFER_OWN_KEYS and not explicit:
                # merged into a typed node (data.synthetic), set for plain values
                OmegaConf.update(cfg, f"data.{key}", value, merge=isinstance(value, dict))


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def cast_net(
    cfg: DictConfig,
    runtime: runtimes.Runtime,
    reference: torch.nn.Module,
    example: torch.Tensor,
    device: torch.device,
    results: dict,
) -> tuple[torch.nn.Module, torch.dtype]:
    """A copy of the fp32 net in the requested weight dtype if it runs on `device` (one image of
    the data through it), else in fp32 (recorded)."""
    dtype = weights_dtype(cfg.trainer.precision)
    net = copy.deepcopy(reference).to(device, dtype)
    if dtype == torch.float32:
        return net, dtype
    probe = benchmark.TorchRunner(net, device, dtype, cfg.model.memory_format)
    reason = probe_dtype(net, probe.prepare(example[:1]))
    if reason is not None:
        notice = f"{DTYPE_NAMES[dtype]} weights do not run on {device} in this torch build: cast to fp32 instead"
        adjust(results, "precision", cfg.trainer.precision, PRECISION_OF[torch.float32], notice, reason)
        return copy.deepcopy(reference).to(device), torch.float32
    if notice := runtime.dtype_notice(cfg.trainer.precision, device):
        note(results, notice)
    return net, dtype
