"""What segperf costs over a hand-written PyTorch loop: one of its own workloads trained both ways.

    python scripts/framework_efficiency.py --workload unet --repeats 3 --steps 120 --out outputs/framework-efficiency
    python scripts/framework_efficiency.py --workload cnn --steps 300 batch_size=32 val_every_images=100000
    python scripts/framework_efficiency.py --workload cnn --lightning --repeats 8 --steps 300 batch_size=64

The run's config is composed with Hydra's compose API as `python -m segperf.train <overrides>`
composes it (`--workload` picks model and data: unet = carvana, cnn = mnist, resnet18 =
imagefolder; the rest are Hydra overrides, passed through). `--steps N` sets train_images to N
batches. Each repeat trains, alternating which goes first so that a machine getting busier
weighs on both alike:

(a) segperf: `segperf.training.run.train(cfg, run_dir)`, what `python -m segperf.train` runs
    (Lightning, PerfMonitor with its profiler and sampler, TensorBoard, checkpoints): its
    results.json's training images/s after warm-up, and the share of the run its phases account for;
(b) raw: the same net, optimizer (and lr schedule), loss, precision, memory format and training
    DataLoader, all built by segperf's own builders from the same config (after the same
    adjustments to this machine), trained by the loop a Lightning user would otherwise write:
    `for batch in loader: to device; zero_grad; loss = training_step; backward; step`, timed with
    time.perf_counter over the steps after the same warm-up (synchronized on a GPU).

(c) with `--lightning`, also: a bare Lightning Trainer on the same module and DataModule, with
    no logger, callbacks, checkpoints or profiler (a clock callback of its own times the steps
    after the same warm-up, as PerfMonitor's clock does): what Lightning's loop costs by itself,
    so that segperf / raw splits into Lightning / raw and segperf / Lightning.

What (b) leaves out is what Lightning and the measurement add, which is the point: no hooks,
callbacks, logger, profiler, sampler, validation or checkpoints. The loss is the module's own
`training_step` (forward and cross-entropy); the `self.log` inside it returns at once without a
trainer, so (b) pays a call, not the logging. The device-side input conversion (uint8 to float,
the memory layout) is the module's `on_after_batch_transfer`, essential work either way.

Fairness on a shared, noisy machine:

- `--warmup-rounds` (default 1) rounds of both sides run first and are not counted: the process's
  first run pays one-off costs (allocator and oneDNN caches, the data's first read) that a
  counted first run would charge to whichever side happened to go first.
- Each run records `others_cores`, the cores other processes kept busy during it (segperf's
  `machine_load`, for the raw side too). A run during which they kept more than `--busy-cores`
  busy is run again, up to `--retries` times: on 2 cores, one busy neighbour stalls every
  two-thread op of either side (20x slower steps were seen), which no pairing cancels.
- Besides the ratio of medians, the repeats' paired ratios (segperf / raw of the same repeat,
  run back to back) with their geometric mean and its 95% interval: the spread of the pairs is
  the run-to-run noise the ratio carries.

Prints each run's images/s, the medians and segperf / raw (target >= 0.98), the pairs, and the
accounted share of each segperf run (target >= 0.99 for a run of a few hundred steps); writes all
of it to OUT/framework_efficiency.json.
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import time
import warnings
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
import torch
from hydra import compose, initialize_config_dir
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning.pytorch.utilities.model_helpers import is_overridden
from omegaconf import DictConfig, OmegaConf, open_dict

from segperf.callbacks.batch_size import batch_size
from segperf.command_line import set_up_command
from segperf.config import CONFIG_DIR, plain_config
from segperf.perf.decision import t_critical
from segperf.perf.machine_load import cpu_clock, others_since
from segperf.perf.results import write_json_atomic
from segperf.training.adapt import adapt_to_machine
from segperf.training.run import reset_global_state, train
from segperf.training.workload import build_workload

WORKLOADS = {"unet": ["model=unet", "data=carvana"], "cnn": ["model=cnn", "data=mnist"]}
WORKLOADS["resnet18"] = ["model=resnet18", "data=imagefolder"]
TARGET_RATIO, TARGET_ACCOUNTED = 0.98, 0.99
# a run during which other processes kept more cores than this busy is run again (see the docstring)
BUSY_CORES, RETRIES = 0.1, 2
AUTOCAST = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}
FULL_PRECISION = ("32-true", "32")
# the settings both sides train with, recorded beside the figures (the rest is in each run's results.json)
RECORDED_KEYS = ["train_images", "batch_size", "warmup_steps", "seed", "num_threads", "model", "data", "trainer"]
# a training_step's self.log without a trainer: Lightning warns and returns; (b) has no trainer on purpose
warnings.filterwarnings("ignore", message=r".*You are trying to `self.log\(\)`.*")


def compose_config(workload: str, overrides: list[str], steps: int | None) -> DictConfig:
    """conf/train.yaml with the workload's model and data and `overrides`, as `python -m
    segperf.train` composes it; with `steps`, train_images is that many batches."""
    set_up_command()  # segperf's resolvers and schemas, as the command's entry registers them
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[*WORKLOADS[workload], *overrides])
    if steps is not None:
        cfg.train_images = steps * cfg.batch_size  # data.train_images follows (an interpolation)
    if math.ceil(cfg.train_images / cfg.batch_size) <= cfg.warmup_steps:
        raise SystemExit(
            f"error: {cfg.train_images} training images are {math.ceil(cfg.train_images / cfg.batch_size)} "
            f"steps, not more than warmup_steps={cfg.warmup_steps}: give --steps above it"
        )
    return cfg


def segperf_run(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """(a): the run `python -m segperf.train` makes, read back from its results.json."""
    results = train(copy.deepcopy(cfg), run_dir)
    if results["status"] != "completed":
        raise RuntimeError(f"the segperf run in {run_dir} ended {results['status']}: see its results.json")
    section = results["train"]
    return {
        "side": "segperf",
        "run_dir": str(run_dir),
        "steps": section["steps"],
        "images": section["images"],
        "warmup_steps": section["warmup_steps"],
        "images_per_s": section["images_per_s"],
        # perf.measure=false times no phases: nothing to account
        "accounted_fraction": (results.get("accounted") or {}).get("fraction"),
        "others_cores": (results.get("machine_load") or {}).get("others_cores"),
    }


def prepared(cfg: DictConfig, run_dir: Path) -> tuple[DictConfig, Any, Any]:
    """What (b) and (c) start from, as train() does: the resolved config adapted to this machine,
    its threads and seed, the workload built; and the clock of the run's machine load."""
    reset_global_state()  # the global settings train() starts from
    clock = cpu_clock()  # the run's machine load, measured as segperf's record measures it
    cfg = OmegaConf.create(resolved(cfg, run_dir))
    adapt_to_machine(cfg)  # what train() changes for this machine (pin_memory without CUDA)
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    return cfg, build_workload(cfg), clock


def raw_run(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """(b): the same workload through a plain PyTorch loop (see the module docstring)."""
    cfg, workload, clock = prepared(cfg, run_dir)
    module, datamodule = workload.module, workload.datamodule
    device = device_of(cfg.trainer)
    module.to(device).train()
    datamodule.prepare_data()
    datamodule.setup("fit")
    steps = workload.trainer_options.get("max_steps") or math.ceil(cfg.train_images / cfg.batch_size)
    optimizer, schedules = optimizer_of(module, steps)
    timed = time_steps(module, datamodule, optimizer, schedules, device, cfg, steps)
    return {"side": "raw", "run_dir": str(run_dir), **timed, "others_cores": others_since(clock)["others_cores"]}


class StepClock(L.Callback):
    """(c)'s timing: images of the steps after `warmup` over the time from the end of the warm-up
    step to the end of training, as PerfMonitor's clock counts them."""

    def __init__(self, warmup: int) -> None:
        self.warmup, self.steps, self.images, self.warm_images = warmup, 0, 0, 0
        self.warm_end: float | None = None
        self.end: float | None = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self.steps, self.images = self.steps + 1, self.images + batch_size(batch)
        if self.steps == self.warmup:
            synchronize(pl_module.device)
            self.warm_images, self.warm_end = self.images, time.perf_counter()

    def on_train_end(self, trainer, pl_module) -> None:
        synchronize(pl_module.device)
        self.end = time.perf_counter()


def lightning_run(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """(c): the same module and DataModule under a bare Lightning Trainer (see the module docstring)."""
    cfg, workload, clock = prepared(cfg, run_dir)
    steps = StepClock(cfg.warmup_steps)
    trainer = L.Trainer(
        accelerator=cfg.trainer.accelerator,
        devices=1,
        precision=cfg.trainer.precision,
        max_epochs=1,
        logger=False,
        callbacks=[steps],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        use_distributed_sampler=False,
        default_root_dir=run_dir,
        **workload.trainer_options,
    )
    trainer.fit(workload.module, datamodule=workload.datamodule)
    timed = steps.end - steps.warm_end if steps.warm_end is not None and steps.end is not None else 0.0
    rate = (steps.images - steps.warm_images) / timed if steps.steps > steps.warmup and timed > 0 else None
    return {
        "side": "lightning",
        "run_dir": str(run_dir),
        "steps": steps.steps,
        "images": steps.images,
        "warmup_steps": steps.warmup,
        "images_per_s": rate,
        "others_cores": others_since(clock)["others_cores"],
    }


def resolved(cfg: DictConfig, output_dir: Path) -> dict[str, Any]:
    """The config as plain data, as train() resolves it (its output folder is Hydra's otherwise)."""
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        cfg.paths.output_dir = str(output_dir)  # (b) writes nothing there
    return plain_config(cfg)


def time_steps(module, datamodule, optimizer, schedules, device, cfg, steps: int) -> dict[str, Any]:
    """The hand-written loop over `steps` batches; images/s over the steps after warm-up."""
    before = transfer_hook("on_before_batch_transfer", module, datamodule)
    after = transfer_hook("on_after_batch_transfer", module, datamodule)
    autocast = autocast_for(cfg.trainer.precision, device)
    scaler = torch.amp.GradScaler(device.type) if cfg.trainer.precision == "16-mixed" else None
    warmup, done, images, warm_images, warm_end = cfg.warmup_steps, 0, 0, 0, time.perf_counter()
    for index, batch in enumerate(limited(datamodule.train_dataloader(), steps)):
        batch = after(move_data_to_device(before(batch, 0), device), 0)  # the copy Lightning makes
        optimizer.zero_grad()
        with autocast:
            loss = loss_of(module.training_step(batch, index))
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        for schedule in schedules:
            schedule.step()
        done, images = done + 1, images + batch_size(batch)
        if done == warmup:
            synchronize(device)  # warm-up ends when its work is done, as PerfMonitor's clock has it
            warm_images, warm_end = images, time.perf_counter()
    synchronize(device)  # the last step's work done before the clock is read
    seconds = time.perf_counter() - warm_end
    rate = (images - warm_images) / seconds if done > warmup and seconds > 0 else None
    return {"steps": done, "images": images, "warmup_steps": warmup, "images_per_s": rate}


def device_of(trainer_cfg: Any) -> torch.device:
    """The one device the run's Trainer would train on (accelerator auto: CUDA if present)."""
    if trainer_cfg.devices not in (1, "1") or trainer_cfg.num_nodes != 1:
        raise SystemExit("error: the raw loop trains on one device: use trainer.devices=1 (the default)")
    accelerator = trainer_cfg.accelerator
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", 0)
    if accelerator in ("cpu", "auto"):
        return torch.device("cpu")
    raise SystemExit(f"error: trainer.accelerator={accelerator}: the raw loop runs on cpu or cuda")


def optimizer_of(module: L.LightningModule, steps: int) -> tuple[torch.optim.Optimizer, list[Any]]:
    """The module's own configure_optimizers: one optimizer and the schedules stepped every step.
    A schedule sized to the run (one-cycle) reads the trainer's step count; the loop lends it that
    number alone, for this call only (a self.log with a trainer set would look for its loop)."""
    module.trainer = SimpleNamespace(estimated_stepping_batches=steps, max_steps=steps)
    try:
        conf = module.configure_optimizers()
    finally:
        module.trainer = None
    if isinstance(conf, torch.optim.Optimizer):
        return conf, []
    if not isinstance(conf, dict) or not isinstance(conf.get("optimizer"), torch.optim.Optimizer):
        raise SystemExit(f"error: the raw loop takes one optimizer, or Lightning's dict of one; got {conf!r}")
    schedule = conf.get("lr_scheduler")
    if schedule is None:
        return conf["optimizer"], []
    if not isinstance(schedule, dict):
        schedule = {"scheduler": schedule}
    # an epoch schedule steps once after the run's only epoch, outside any timing: (b) leaves it out
    per_step = schedule.get("interval", "epoch") == "step"
    return conf["optimizer"], [schedule["scheduler"]] if per_step else []


def transfer_hook(name: str, module: L.LightningModule, datamodule: L.LightningDataModule):
    """The batch-transfer hook Lightning calls: the data module's where it overrides it, else the module's."""
    return getattr(datamodule if is_overridden(name, datamodule) else module, name)


def autocast_for(precision: Any, device: torch.device):
    """The autocast Lightning's precision plugin wraps around training_step."""
    if str(precision) in FULL_PRECISION:
        return nullcontext()
    if precision in AUTOCAST:
        return torch.autocast(device.type, dtype=AUTOCAST[precision])
    raise SystemExit(f"error: trainer.precision={precision}: the raw loop reproduces 32-true, bf16-mixed, 16-mixed")


def loss_of(output: Any) -> torch.Tensor:
    return output["loss"] if isinstance(output, dict) else output


def limited(loader: Iterable, steps: int) -> Iterator[Any]:
    """`steps` batches, over as many passes of the loader as that takes (as max_steps draws them)."""
    drawn = 0
    while drawn < steps:
        for batch in loader:
            yield batch
            drawn += 1
            if drawn == steps:
                return
        if drawn == 0:
            raise SystemExit("error: the training loader yields no batch")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def compare(
    cfg: DictConfig,
    repeats: int,
    out: Path,
    report=print,
    warmup_rounds: int = 1,
    busy_cores: float = BUSY_CORES,
    retries: int = RETRIES,
    sides: tuple[str, ...] = ("segperf", "raw"),
) -> dict[str, Any]:
    """`warmup_rounds` uncounted rounds, then `repeats` rounds of (a) and (b) (and (c) with "lightning"
    in `sides`), alternating which goes first; the summary, also in OUT/framework_efficiency.json."""
    for round_ in range(warmup_rounds):  # the process's one-off costs, paid by neither side's figures
        for side in sides:
            run = SIDES[side](cfg, out / f"warmup-{side}-{round_}")
            report(f"warm-up round {round_} {side:>7}: {run['images_per_s'] or 0:,.2f} images/s (not counted)")
    runs: list[dict[str, Any]] = []
    for repeat in range(repeats):
        for side in sides if repeat % 2 == 0 else sides[::-1]:
            run = quiet_run(side, cfg, out / f"{side}-{repeat}", busy_cores, retries, report)
            runs.append({"repeat": repeat, **run})
            accounted = f", accounted {run['accounted_fraction']:.1%}" if run.get("accounted_fraction") else ""
            rate = f"{run['images_per_s']:,.2f} images/s over {run['steps']} steps"
            report(f"repeat {repeat} {side:>7}: {rate}{accounted}{load_note(run)}")
    summary = summarize(runs)
    summary["warmup_rounds"], summary["busy_cores"] = warmup_rounds, busy_cores
    summary["config"] = {key: value for key, value in resolved(cfg, out).items() if key in RECORDED_KEYS}
    write_json_atomic(out / "framework_efficiency.json", summary)
    median = summary["median_images_per_s"]
    report("median images/s: " + ", ".join(f"{side} {rate:,.2f}" for side, rate in median.items()))
    report(f"segperf / raw = {summary['ratio']:.4f} (target >= {TARGET_RATIO})")
    report_pairs("pairs", summary["pairs"], report)
    if "lightning" in median:
        report(f"lightning / raw = {summary['lightning_ratio']:.4f} (Lightning's own loop, nothing of segperf's)")
        report_pairs("lightning pairs", summary["lightning_pairs"], report)
    if summary["accounted_fraction"] is None:
        report("run accounted by segperf's phases: not measured (perf.measure=false)")
    else:
        least = summary["accounted_fraction"]["min"]
        report(f"run accounted by segperf's phases: at least {least:.1%} (target >= {TARGET_ACCOUNTED:.0%})")
    return summary


def report_pairs(label: str, pairs: dict[str, Any], report) -> None:
    interval = "" if pairs["low"] is None else f" [{pairs['low']:.3f}-{pairs['high']:.3f}] (95%)"
    ratios = ", ".join(f"{r:.3f}" for r in pairs["ratios"])
    report(f"{label}: {ratios}; geometric mean {pairs['geomean']:.3f}{interval}")


def quiet_run(side: str, cfg: DictConfig, run_dir: Path, busy_cores: float, retries: int, report) -> dict[str, Any]:
    """One run of `side`, run again (into run_dir-again-N) while other processes kept more than
    `busy_cores` busy during it; the last attempt counts whatever the load, with its reading."""
    busy: list[float] = []
    folder = run_dir
    while True:
        run = SIDES[side](cfg, folder)
        others = run.get("others_cores")
        if others is None or others <= busy_cores or len(busy) >= retries:
            return {**run, "busy_attempts": busy}
        busy.append(others)
        report(f"  {side}: other processes kept {others:.2f} cores busy during the run: running it again")
        folder = run_dir.with_name(f"{run_dir.name}-again-{len(busy)}")


def load_note(run: dict[str, Any]) -> str:
    others = run.get("others_cores")
    return "" if others is None else f", others {others:.2f} cores"


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    present = [side for side in SIDES if any(r["side"] == side for r in runs)]
    rates = {side: [r["images_per_s"] for r in runs if r["side"] == side] for side in present}
    if any(rate is None for side in rates.values() for rate in side):
        raise SystemExit("error: a run has no images/s after warm-up: give more --steps than warmup_steps")
    median = {side: statistics.median(values) for side, values in rates.items()}
    accounted = [r["accounted_fraction"] for r in runs if r.get("accounted_fraction") is not None]
    summary = {
        "runs": runs,
        "median_images_per_s": median,
        "ratio": median["segperf"] / median["raw"],
        "target_ratio": TARGET_RATIO,
        "pairs": paired_ratios(runs),
        "accounted_fraction": {"min": min(accounted), "median": statistics.median(accounted)} if accounted else None,
        "target_accounted_fraction": TARGET_ACCOUNTED,
    }
    if "lightning" in median:
        summary["lightning_ratio"] = median["lightning"] / median["raw"]
        summary["lightning_pairs"] = paired_ratios(runs, side="lightning")
    return summary


def paired_ratios(runs: list[dict[str, Any]], level: float = 0.95, side: str = "segperf") -> dict[str, Any]:
    """`side` / raw of each repeat (its runs ran back to back), their geometric mean and its
    `level` interval (Student's t over the log ratios; none with a single pair)."""
    by_repeat: dict[int, dict[str, float]] = {}
    for run in runs:
        by_repeat.setdefault(run.get("repeat", 0), {})[run["side"]] = run["images_per_s"]
    ratios = [sides[side] / sides["raw"] for _, sides in sorted(by_repeat.items()) if side in sides and "raw" in sides]
    if not ratios:
        return {"ratios": [], "geomean": None, "low": None, "high": None, "level": level}
    logs = [math.log(r) for r in ratios]
    centre = statistics.fmean(logs)
    low = high = None
    if len(logs) > 1:
        half = t_critical(level, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
        low, high = math.exp(centre - half), math.exp(centre + half)
    return {"ratios": ratios, "geomean": math.exp(centre), "low": low, "high": high, "level": level}


SIDES = {"segperf": segperf_run, "raw": raw_run, "lightning": lightning_run}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="unet")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None, help="training steps per run (default: the config's)")
    parser.add_argument("--out", type=Path, default=Path("outputs/framework-efficiency"))
    parser.add_argument("--warmup-rounds", type=int, default=1, help="uncounted rounds of both sides first (default 1)")
    parser.add_argument(
        "--busy-cores",
        type=float,
        default=BUSY_CORES,
        help=f"run again a run during which other processes kept more cores busy (default {BUSY_CORES})",
    )
    parser.add_argument("--retries", type=int, default=RETRIES, help=f"times a busy run is rerun (default {RETRIES})")
    parser.add_argument(
        "--lightning", action="store_true", help="also a bare Lightning Trainer on the module: Lightning's own cost"
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as python -m segperf.train takes them")
    args = parser.parse_intermixed_args()  # overrides before, between or after the options
    cfg = compose_config(args.workload, args.overrides, args.steps)
    rounds = {"warmup_rounds": args.warmup_rounds, "busy_cores": args.busy_cores, "retries": args.retries}
    sides = ("segperf", "raw", "lightning") if args.lightning else ("segperf", "raw")
    compare(cfg, args.repeats, args.out, sides=sides, **rounds)


if __name__ == "__main__":
    main()
