"""The quality guard's learning runs: at which run size each model learns enough to be judged
(tune.quality.runs.<model>, else .default on top of the start's own size), as a Measure.

The guard's runs are short learning runs of the start and of the tuned configuration at the run
size `tune.quality.runs` sets for the model (the U-Net: size=demo at 64x96, which reaches val
Dice ~0.97 in about a minute on 2 cores; the CNN: size=mnist_demo, accuracy in seconds; a model
not listed, such as a user's own: the start's own run size, `tune.quality.runs.default` on top),
compared on validation quality (each run's `quality.metric`, negated where `quality.mode` is min).
Not loss-curve parity over the same batches: upsample=deconv is another net and bf16 other
numerics, so their loss curves differ from the start's by design even when they learn as well;
the question the guard (segperf.tune.search.quality_guard) answers is whether they do.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from segperf.tune.runner import LaunchMeasure


def _coarse(config: DictConfig, runs: Any, settings: Any) -> str:
    """A warning where one validation image moves an accuracy by more than the guard's tolerance: an
    outside 6-class CNN's guard compared 0.188 with 0.188 (3 of 16 images, chance) and passed."""
    given = [o.split("=", 1)[1] for o in runs or [] if o.startswith("val_images=")]
    val = int(given[-1]) if given and given[-1].isdigit() else config.get("val_images")
    tolerance = settings.quality.tolerance
    if not isinstance(val, int) or val <= 0 or 1 / val <= tolerance:
        return ""
    return (
        f"; one of its {val} validation images moves an accuracy by {1 / val:.3f}, more than the guard's tolerance "
        f"({tolerance}): give the tune a run size at which the model learns (train_images=... val_images=...)"
    )


def quality_measure(config: DictConfig, loader: Any, launcher: Any, settings: Any, choices: dict, notes: list) -> Any:
    """The quality guard's learning runs: the model's own run size (tune.quality.runs.<model>), else
    tune.quality.runs.default on top of the start's own run size (a user's model: the size the
    tune was given), else none."""
    if not settings.quality.enabled:
        notes.append("quality guard off (tune.quality.enabled=false): the tuned configuration's quality is not checked")
        return None
    model = str(choices.get("model"))
    runs = settings.quality.runs.get(model)
    own_size = runs is None
    if own_size:
        runs = settings.quality.runs.get("default")
    if runs is None:
        notes.append(f"no learning run for model={model} (tune.quality.runs.{model} or .default): quality not checked")
        return None
    if own_size:
        size = ", ".join(f"{k}={config.get(k)}" for k in ("train_images", "val_images", "batch_size"))
        extra = f" with {' '.join(runs)}" if runs else ""
        notes.append(
            f"quality guard: model={model} has no tune.quality.runs.{model}; its learning runs are the start's run "
            f"size ({size}){extra}, judged by the quality.metric each run records" + _coarse(config, runs, settings)
        )
    probe = OmegaConf.to_container(settings.probe, resolve=True)
    return LaunchMeasure(
        config,
        loader,
        launcher,
        kind="quality",
        probe=probe,
        quality_runs=list(runs),
        keep_batch_size=settings.batch_size,
        keep_run_size=own_size,
    )


def start_seed(config: DictConfig, quality: LaunchMeasure | None, start: tuple) -> int:
    """The seed the start's learning run trains with (the guard confirms a failing run on the next
    one): its composed seed, else the tune's `seed`, else 0."""
    seed = quality.seed(start) if quality is not None else None
    return int(config.get("seed") or 0) if seed is None else seed
