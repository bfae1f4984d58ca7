"""What an inference run tells its user: the notes and adjusted settings it records as they happen
(results.json `notices` and `adjusted`, each also printed), and the summary printed at its end."""

from __future__ import annotations

from typing import Any


def note(results: dict[str, Any], notice: str) -> None:
    """A notice in results.json, printed now."""
    results["notices"].append(notice)
    print(f"segperf: note: {notice}")


def adjust(results: dict[str, Any], setting: str, requested: Any, used: Any, notice: str, reason: str) -> None:
    """Record a setting that could not be honoured, never silently: `adjusted.<setting>` =
    {requested, used, reason}, the same keys training records (segperf.training.adapt)."""
    results["adjusted"][setting] = {"requested": requested, "used": used, "reason": reason}
    note(results, notice)


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
        metric, fp32, change = q["metric"], q.get(f"fp32_{q['metric']}"), q.get("change_vs_fp32")
        versus = f"; fp32 {fp32:.4f}, change {change:+.4f}" if change is not None else ""
        others = ", ".join(f"{k} {v:.4f}" for k, v in q.items() if k.startswith("val_") and k != metric)
        lines.append(f"  quality      {metric} {q[metric]:.4f} ({q['mode']}; the module's own validation{versus})")
        if others:
            lines.append(f"               {others}")
        if "agreement_vs_fp32" in q:
            dice = f", Dice {q['dice_vs_fp32']:.4f}" if "dice_vs_fp32" in q else ""
            lines.append(f"  vs fp32      predictions agree {q['agreement_vs_fp32']:.4%}{dice}")
    if onnx := results.get("onnx"):
        lines.append(f"  onnx         max |logit diff| {onnx['max_abs_diff']:.3g}, agreement {onnx['agreement']:.4%}")
    lines += [f"  note: {n}" for n in results["notices"]]
    return "\n".join([*lines, "=" * 72]) + "\n"
