"""What this machine runs natively: the precision options it would emulate, and the presets
derived from that.

A reduced precision on a CPU without its instructions (bf16 autocast without avx512_bf16 or
amx_bf16) is emulated by torch and runs several times slower than fp32: the tune at 128x192 on an
AVX2-only CPU spent half its budget on two bf16 presets. Two witnesses, either is enough:

- what the run itself says (segperf.training.trainer.precision_notice: the CPU's flags), and
- a timing of a few seconds on this machine: a small convolution block's forward and backward under the
  option's autocast against fp32, emulated when it is `SLOWDOWN` times slower or more. It catches
  what the flags cannot: torch told to use fewer instructions (ATEN_CPU_CAPABILITY=avx2
  ONEDNN_MAX_CPU_ISA=AVX2) on a CPU whose flags list more.

Only CPU runs are checked: a GPU's reduced precision is what it is built for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from segperf.axes import group_options
from segperf.command_line import override_key
from segperf.config import CONFIG_DIR
from segperf.tune.probe import Config, config_of

SLOWDOWN = 2.0  # an autocast this many times slower than fp32 is emulated (measured: emulated 26x, native 1.1x)
FULL_PRECISION = "32-true"  # trainer.precision of the option a preset falls back to
AUTOCAST_DTYPES = {"bf16-mixed": "bfloat16", "16-mixed": "float16"}


@dataclass(frozen=True)
class Native:
    """What this machine runs natively: whether the net computes on the CPU (its DataLoader
    workers then share the cores with torch's threads: segperf.tune.space.share_cores), and each
    precision option it emulates (`precision=bf16` -> why; emulated_precisions)."""

    on_cpu: bool
    emulated: dict[str, str] = field(default_factory=dict)


def what_runs_here(accelerator: str, choices: Mapping[str, object]) -> Native:
    """The check of this machine a tune makes before it measures anything (`choices`: the groups
    the workload composes; one without a precision group has no precision to emulate)."""
    emulated = emulated_precisions(accelerator) if "precision" in choices else {}
    return Native(computes_on_cpu(accelerator), emulated)


def precision_options(config_dir: Path = CONFIG_DIR) -> dict[str, str]:
    """Each option of the precision group with the trainer.precision it sets (`bf16` -> `bf16-mixed`)."""
    found = {}
    for name in group_options("precision", config_dir):
        body = yaml.safe_load((config_dir / "precision" / f"{name}.yaml").read_text()) or {}
        found[name] = str((body.get("trainer") or {}).get("precision"))
    return found


def autocast_slowdown(precision: str, repeats: int = 2) -> float | None:
    """How many times slower a small conv block's forward + backward runs under `precision`'s
    autocast than in fp32 on this CPU (the best of `repeats` after one warm-up call each); None
    for a precision without autocast."""
    import torch

    dtype_name = AUTOCAST_DTYPES.get(precision)
    if dtype_name is None:
        return None
    generator = torch.Generator().manual_seed(0)
    block = torch.nn.Sequential(
        torch.nn.Conv2d(32, 32, 3, padding=1),
        torch.nn.BatchNorm2d(32),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 32, 3, padding=1),
    )
    images = torch.randn(2, 32, 64, 64, generator=generator)

    def step_s(dtype) -> float:
        best = float("inf")
        for _ in range(repeats + 1):  # the first call pays oneDNN's kernel choice: the min drops it
            started = time.perf_counter()
            with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                out = block(images)
            out.float().sum().backward()
            best = min(best, time.perf_counter() - started)
        return best

    fp32 = step_s(None)
    return step_s(getattr(torch, dtype_name)) / fp32 if fp32 > 0 else None


def computes_on_cpu(accelerator: str) -> bool:
    """Whether a run with this `trainer.accelerator` computes on the CPU (torch says, for "auto"):
    its DataLoader workers then share the cores with torch's threads (segperf.tune.space.share_cores)."""
    from segperf.training.trainer import runs_on_cpu

    return runs_on_cpu(accelerator)


def emulated_precisions(
    accelerator: str,
    *,
    options: Mapping[str, str] | None = None,
    notice: Callable[[str, str], str | None] | None = None,
    slowdown: Callable[[str], float | None] = autocast_slowdown,
) -> dict[str, str]:
    """`precision=<option>` -> why it runs emulated here, for each precision option this machine
    emulates (empty off the CPU). `notice` and `slowdown` are the two witnesses (module docstring)."""
    from segperf.training.trainer import precision_notice, runs_on_cpu

    if not runs_on_cpu(accelerator):
        return {}
    notice = notice or (lambda precision, acc: precision_notice(precision, acc))
    found = {}
    for name, precision in (precision_options() if options is None else options).items():
        if precision not in AUTOCAST_DTYPES:
            continue
        if said := notice(precision, accelerator):
            found[f"precision={name}"] = said.split(":", 1)[0] + ": emulated by torch (the run's own notice)"
            continue
        times = slowdown(precision)
        if times is not None and times >= SLOWDOWN:
            found[f"precision={name}"] = (
                f"precision {precision}: {times:.1f}x slower than fp32 in a short timing on this machine "
                "(emulated: torch uses no native instructions for it here)"
            )
    return found


def native_presets(
    presets: Mapping[str, Config], emulated: Mapping[str, str], options: Mapping[str, str] | None = None
) -> tuple[dict[str, Config], list[str]]:
    """The presets as this machine can run them: a preset that sets an emulated precision takes the
    full-precision option instead and is named so (`+opt=all` -> `+opt=all precision=fp32`); one
    that is the same configuration as a preset kept before it, whichever was renamed, is left out
    (it would be measured twice); with a note for each change."""
    options = precision_options() if options is None else options
    full = next((f"precision={name}" for name, precision in options.items() if precision == FULL_PRECISION), None)
    kept: dict[str, Config] = {}
    notes: list[str] = []
    for name, preset in presets.items():
        precision = next((o for o in preset if override_key(o) == "precision"), None)
        renamed = precision in emulated and full is not None
        label, config = name, preset
        if renamed:
            label, config = f"{name} {full}", config_of([o for o in preset if o != precision] + [full])
        twin = next((n for n, p in kept.items() if p == config), None)
        if twin is not None:  # e.g. +opt=all precision=fp32 compile=off after the fp32 form of the 2nd
            why = f"the same configuration as {twin} here"
            if renamed:
                why = f"{emulated[precision]}; with {full} it is another preset"
            notes.append(f"preset {name}: {why}, left out")
        elif renamed:
            notes.append(f"preset {name}: {emulated[precision]}; measured as {label}")
            kept[label] = config
        else:
            kept.setdefault(label, config)
    return kept, notes
