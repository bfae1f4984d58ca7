"""`python -m segperf.train` for the GPU check's rehearsal on a CPU, with a stand-in NVML.

With SEGPERF_FAKE_NVML=1 the run's resource sampler samples a "GPU 0" through tests/fake_nvml.py's
FakeNvml, fed with a driver sample every 20 ms of wall time (utilization cycling 40-80%), also
where torch sees no GPU: the rehearsal then goes through the NVML columns of results.json and the
check's reading of them. It does so by replacing `ResourceSampler` in segperf.callbacks.resource_monitor's
namespace for this process only; nothing in src/ knows about it. Without the variable this is
exactly `python -m segperf.train` (the GPU check itself runs that).

`python scripts/gpu_train.py --prepare SITE MODE OVERRIDES...` is the check's step before the sweep,
in one interpreter: it imports every package a run needs and says where each came from (the
wheels installed into SITE, or the machine), stops if one is missing, if hydra, omegaconf or
antlr4 do not come from the wheels, or (MODE gpu) if torch sees no CUDA device; then it composes
the training config with OVERRIDES and writes its built-in data set (when `data.root` is unset
and it is not there yet), so that the first run does not count the rendering in its set-up.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def install_fake_nvml() -> None:
    sys.path.insert(0, str(REPO))  # tests/ is a package beside src/
    from tests.fake_nvml import FakeNvml

    import segperf.callbacks.resource_monitor as measure
    from segperf.perf.sampler import ResourceSampler

    class DriverSamples(FakeNvml):
        """A driver that takes a utilization sample every `period_us`, as NVML's does."""

        period_us = 20_000

        def nvmlDeviceGetSamples(self, handle, sampling_type: int, last_seen: int):
            now = int(time.time() * 1e6)
            t = self.buffer[-1].timeStamp if self.buffer else now - self.period_us
            while t + self.period_us <= now:
                t += self.period_us
                self.push(t, 40 + (t // self.period_us) % 41)
            del self.buffer[:-64]  # the driver's ring buffer is short too
            return super().nvmlDeviceGetSamples(handle, sampling_type, last_seen)

    class FakeGpuSampler(ResourceSampler):
        def __init__(self, interval_s: float = 0.05, gpu_index=None, nvml=None, children_refresh_s: float = 0.5):
            gpu_index = 0 if gpu_index is None else gpu_index
            super().__init__(interval_s, gpu_index, nvml or DriverSamples(), children_refresh_s)

    if getattr(measure, "ResourceSampler", None) is not ResourceSampler:
        raise SystemExit("gpu_train: segperf.callbacks.resource_monitor no longer samples with ResourceSampler")
    measure.ResourceSampler = FakeGpuSampler
    print("gpu_train: SEGPERF_FAKE_NVML=1: GPU utilization and memory come from a fake NVML", flush=True)


NEEDED = ("hydra", "omegaconf", "antlr4", "yaml", "packaging", "torch", "lightning", "torchmetrics", "numpy", "PIL")
NEEDED += ("psutil", "pynvml", "matplotlib", "tensorboard", "segperf", "gpu_probe")
FROM_WHEELS = ("hydra", "omegaconf", "antlr4")  # not on the GPU machine's image


def check_imports(site: str, mode: str) -> None:
    missing = []
    for name in NEEDED:
        try:
            module = importlib.import_module(name)
        except Exception as error:
            missing.append(f"{name} ({type(error).__name__}: {error})")
            continue
        where = "wheel" if module.__file__.startswith(site) else "machine"
        print(f"  {name:13} {getattr(module, '__version__', ''):14} {where:8} {module.__file__}")
    missing += [f"{n} not from the wheels" for n in FROM_WHEELS if not sys.modules[n].__file__.startswith(site)]
    import torch

    cuda = torch.cuda.is_available()
    print(f"  CUDA: {cuda}" + (f", {torch.cuda.get_device_name()}" if cuda else ""), flush=True)
    if mode == "gpu" and not cuda:
        missing.append("a CUDA device (torch sees none: rehearse on a CPU with --rehearse)")
    if missing:
        raise SystemExit("gpu_train: missing: " + "; ".join(missing))


def prepare_data(overrides: list[str]) -> None:
    from hydra import compose, initialize_config_dir

    from segperf.config import CONFIG_DIR
    from segperf.data.synthetic import ensure_synthetic

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
    if cfg.data.get("root") is None:
        options = dict(cfg.data.synthetic)
        root = ensure_synthetic(options.pop("cache_dir"), **options)
        print(f"gpu_train: built-in data in {root}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--prepare"]:
        check_imports(*sys.argv[2:4])
        prepare_data(sys.argv[4:])
        raise SystemExit(0)
    if os.environ.get("SEGPERF_FAKE_NVML") == "1":
        install_fake_nvml()
    from segperf.train import cli

    cli()
