"""One inference benchmark: `infer(cfg, out_dir)`, what `python -m segperf.infer` calls.

The seed study's inference side: a trained fp32 checkpoint, its weights cast to the dtype of the
`precision` group (fp32 / bf16 / fp16), run over the validation split with the training axes
(workers, prefetch, pin, memory_format, compile) and a runtime (torch or onnxruntime). Measures
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

from segperf.config import plain_config
from segperf.inference import benchmark, onnx_export
from segperf.inference.checkpoint import (
    DTYPE_NAMES,
    PRECISION_OF,
    InferenceError,
    load_net,
    probe_dtype,
    resolve_source,
    weights_dtype,
)
from segperf.perf.results import record_failure, write_json_atomic
from segperf.training.trainer import precision_notice

# what a training run's config decides about the data, adopted with run_dir unless given explicitly
RUN_DATA_KEYS = ("root", "height", "width", "holdout_frac", "synthetic", "decode")


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
        device = pick_device(cfg.device)
        start = time.perf_counter()
        reference = load_net(path)  # fp32, CPU; load_s: read, rebuild, dtype probe, cast and move
        reference.check_input_size(cfg.data.height, cfg.data.width)
        dtype = usable_dtype(cfg, reference.config, device, results)
        net = copy.deepcopy(reference).to(device, dtype)
        load_s = time.perf_counter() - start

        datamodule = instantiate(cfg.data, val_images=cfg.val_images or 1, batch_size=cfg.batch_size)
        datamodule.setup("validate")
        if cfg.val_images is None:  # null: the whole validation split
            datamodule.val_images = len(datamodule.split.val)
        results["dataset"] = {**datamodule.summary(), "val_images_used": datamodule.val_images}
        loader = datamodule.val_dataloader()

        if cfg.runtime.name == "onnxruntime":
            runner, dtype = onnx_runner(cfg, net, reference, dtype, device, out_dir, loader, results)
        elif cfg.runtime.name == "torch":
            if cfg.model.memory_format == "channels_last":
                net = net.to(memory_format=torch.channels_last)
            if cfg.model.compile:
                net.compile()  # lazily, at the first warm-up batch
            runner = benchmark.TorchRunner(net, device, dtype, cfg.model.memory_format, cfg.data.pin_memory)
        else:
            raise InferenceError(f"runtime={cfg.runtime.name!r}: use runtime=torch or runtime=onnxruntime")

        m = benchmark.measure(runner, loader, cfg.warmup_batches, cfg.passes)
        plain = cfg.runtime.name == "torch" and dtype == torch.float32
        if plain and cfg.model.memory_format == "nchw" and not cfg.model.compile:
            fp32_preds = m.preds  # this run is the fp32 reference
        else:
            fp32_runner = benchmark.TorchRunner(reference.to(device), device, torch.float32, "nchw", False)
            fp32_preds = benchmark.predict(fp32_runner, m.batches)
        results["inference"] = {
            **m.timing(),
            "warmup_batches": m.warmup_batches,
            "warmup_s": m.warmup_s,
            "load_s": load_s,
            "weights_dtype": DTYPE_NAMES[dtype],
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
    """The settings an inference sweep varies, as requested (what actually ran: `adjusted`)."""
    return {
        "workers": cfg.data.num_workers,
        "prefetch": cfg.data.prefetch_factor,
        "pin": cfg.data.pin_memory,
        "memory_format": cfg.model.memory_format,
        "compile": cfg.model.compile,
        "precision": cfg.trainer.precision,
        "runtime": cfg.runtime.name,
        "batch_size": cfg.batch_size,
    }


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


def adjust(results: dict[str, Any], key: str, requested: Any, used: Any, notice: str, why: str = "") -> None:
    """Record a setting that could not be honoured: never silently."""
    results["adjusted"][key] = {"requested": requested, "used": used, **({"why": why} if why else {})}
    results["notices"].append(notice)
    print(f"segperf: note: {notice}")


def usable_dtype(cfg: DictConfig, net_config: dict, device: torch.device, results: dict) -> torch.dtype:
    """The requested weight dtype if a tiny forward in it works on `device`, else fp32 (recorded)."""
    dtype = weights_dtype(cfg.trainer.precision)
    why = probe_dtype(net_config, dtype, device, cfg.model.memory_format == "channels_last")
    if why is not None:
        notice = f"{DTYPE_NAMES[dtype]} weights do not run on {device} in this torch build: cast to fp32 instead"
        adjust(results, "precision", cfg.trainer.precision, PRECISION_OF[torch.float32], notice, why)
        return torch.float32
    if cfg.runtime.name == "torch" and (notice := precision_notice(cfg.trainer.precision, device.type)):
        results["notices"].append(notice)
        print(f"segperf: note: {notice}")
    return dtype


def onnx_runner(cfg, net, reference, dtype, device, out_dir: Path, loader, results: dict):
    """Export the cast net to out_dir/model.onnx, open it in ONNX Runtime, check it against torch."""
    ort = onnx_export.require_onnxruntime()
    for key, ignored in (("compile", cfg.model.compile), ("memory_format", cfg.model.memory_format != "nchw")):
        if ignored:
            used = False if key == "compile" else "nchw"
            adjust(results, key, cfg.model[key], used, f"model.{key} does not apply to onnxruntime (NCHW, own graph)")
    image = next(iter(loader))[0]
    example = torch.rand(max(2, cfg.batch_size), 3, cfg.data.height, cfg.data.width, device=device).to(dtype)
    provider_list = onnx_export.providers(ort, device, cfg.runtime.get("providers"))
    path = out_dir / "model.onnx"
    try:
        runner = onnx_export.OrtRunner(ort, onnx_export.export(net, example, path), dtype, provider_list)
        runner.forward(runner.prepare(image[:1]))
    except (InferenceError, TypeError, RuntimeError) as error:
        if dtype == torch.float32:
            raise
        notice = f"onnxruntime ({', '.join(provider_list)}) cannot run {DTYPE_NAMES[dtype]} weights: exported fp32"
        adjust(results, "precision", cfg.trainer.precision, PRECISION_OF[torch.float32], notice, str(error).strip())
        dtype, net = torch.float32, copy.deepcopy(reference).to(device)
        runner = onnx_export.OrtRunner(ort, onnx_export.export(net, example.float(), path), dtype, provider_list)
    torch_runner = benchmark.TorchRunner(net, device, dtype, "nchw", False)
    check = onnx_export.compare(runner, torch_runner, image, cfg.runtime.min_agreement)
    results["onnx"] = {"path": str(path), "providers": runner.providers, **check}
    return runner, dtype


def format_summary(results: dict[str, Any]) -> str:
    """A few lines for the terminal; results.json has everything."""
    a, inf, q = results["axes"], results["inference"], results["quality"]
    lines = ["=" * 72, f"Inference: {results['status']}"]
    if "error" in results:
        lines.append(f"  error        {results['error']}")
    if inf:
        lines += [
            f"  checkpoint   {inf['checkpoint']} on {inf['device']}, load {inf['load_s']:.2f} s",
            f"  weights      {inf['weights_dtype']} (precision={a['precision']}), runtime {a['runtime']}, "
            f"memory_format {a['memory_format']}, compile {a['compile']}, workers {a['workers']}, pin {a['pin']}",
            f"  end-to-end   {inf['end_to_end_images_per_s']:8.2f} images/s  ({inf['images']} images in "
            f"{inf['wall_s']:.2f} s, loading included; {inf['warmup_batches']} warm-up batches excluded)",
            f"  model-only   {inf['model_images_per_s']:8.2f} images/s  ({inf['model_passes']} pass(es), "
            f"{inf['model_wall_s']:.2f} s, inputs already on the device)",
        ]
    if q:
        lines += [
            f"  vs masks     pixel accuracy {q['val_pixel_accuracy']:.4f}, Dice {q['val_dice']:.4f}",
            f"  vs fp32      pixel agreement {q['agreement_vs_fp32']:.4%}, Dice {q['dice_vs_fp32']:.4f}",
        ]
    if onnx := results.get("onnx"):
        lines.append(f"  onnx         max |logit diff| {onnx['max_abs_diff']:.3g}, agreement {onnx['agreement']:.4%}")
    lines += [f"  note: {n}" for n in results["notices"]]
    return "\n".join([*lines, "=" * 72]) + "\n"
