"""A calibration study's runs: a probe exactly as the tuner runs it and a long run of each
configuration, interleaved, each an ordinary `python -m segperf.train` run in the study's folder."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from segperf.tune.calibrate.study import final_labels
from segperf.tune.probe import Config
from segperf.tune.probe_results import probe_from_results
from segperf.tune.runner import LaunchMeasure, merged


class ComposingLoader:
    """What LaunchMeasure asks of Hydra's config loader: a job of conf/tune.yaml, composed."""

    def load_sweep_config(self, master: Any, overrides: list[str]) -> Any:
        return compose_tune(*overrides)


def compose_tune(*overrides: str) -> Any:
    from hydra import compose, initialize_config_dir

    from segperf.command_line import set_up_command
    from segperf.config import CONFIG_DIR

    set_up_command()  # segperf's resolvers and schemas, as the command's entry registers them
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="tune", overrides=list(overrides), return_hydra_config=True)


def jobs(record: dict[str, Any], out: Path, long_steps: int) -> tuple[Callable, Callable]:
    """(probe overrides, long-run overrides) of a configuration, as the tune's own settings make them."""
    start = list(record["result"].get("start") or ())
    master = compose_tune(*start, f"hydra.sweep.dir={out}")
    probe = dict(record.get("settings", {}).get("probe") or master.tune.probe)
    measure = LaunchMeasure(master, ComposingLoader(), None, kind="speed", probe=probe)

    def long(config: Config) -> list[str]:
        overrides = [o for o in measure.job_overrides(config, None) if not o.startswith("+callbacks.tune_probe=")]
        batch = int(compose_tune(*config).batch_size)
        # the steps ShareCores may add to the warm-up on a CPU with workers, as the runner counts them
        sharing = OmegaConf.select(master, "callbacks.share_cores.measure_steps", default=0) or 0
        images = (int(master.warmup_steps) + sharing + long_steps) * batch
        return merged(overrides, [f"train_images={images}", f"val_every_images={images}"])

    return (lambda config: measure.job_overrides(config, None)), long


def train(overrides: list[str], run_dir: Path, timeout: float) -> dict[str, Any]:
    """One `python -m segperf.train` run into `run_dir`; its results.json ({} when it wrote none)."""
    env = {**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1"}
    command = [sys.executable, "-m", "segperf.train", *overrides, f"hydra.run.dir={run_dir}"]
    subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    path = run_dir / "results.json"
    return json.loads(path.read_text()) if path.exists() else {}


def measure(args: argparse.Namespace, record: dict[str, Any], configs: dict[str, Config]) -> tuple[dict, dict]:
    """The study's runs: `--rounds` rounds of a probe and a long run of each configuration, then the
    final configurations' long runs up to `--claim-rounds`; each configuration's images/s, in order."""
    probe_job, long_job = jobs(record, args.out.resolve(), args.long_steps)
    probes: dict[str, list] = {label: [] for label in configs}
    longs: dict[str, list] = {label: [] for label in configs}
    number = 0
    for round_ in range(args.rounds):
        for index, (label, config) in enumerate(configs.items()):
            for kind, make in (("probe", probe_job), ("long", long_job)):
                run_dir = args.out.resolve() / f"{number}_{kind}_{index}_r{round_}"
                number += 1
                results = train(make(config), run_dir, args.timeout)
                if kind == "probe":  # the tuner's own reading of its probe: the steady state's images/s
                    rate = probe_from_results(config, run_dir).images_per_s if results else None
                    probes[label].append(rate)
                else:
                    rate = (results.get("train") or {}).get("images_per_s")
                    longs[label].append(rate)
                print(f"round {round_ + 1}, {label}: {kind} {'failed' if rate is None else f'{rate:.3g} images/s'}")
    for round_ in range(args.rounds, args.claim_rounds):  # the claims' configurations, interleaved
        for name, label in final_labels(configs, record).items():
            run_dir = args.out.resolve() / f"{number}_long_{name.replace(' ', '_').replace('=', '-')}_r{round_}"
            number += 1
            results = train(long_job(configs[label]), run_dir, args.timeout)
            rate = (results.get("train") or {}).get("images_per_s")
            longs[label].append(rate)
            print(f"round {round_ + 1}, {name}: long {'failed' if rate is None else f'{rate:.3g} images/s'}")
    return probes, longs
