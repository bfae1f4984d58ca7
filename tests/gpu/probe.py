"""The GPU check's probe: a Lightning callback that records what a run really did on its device.

The GPU check (tests/gpu/) adds it to every run through its size preset
(`callbacks.gpu_probe._target_: tests.gpu.probe.GpuProbe`, the repository root on PYTHONPATH); segperf's
own code path is unchanged, since the callbacks group instantiates whatever `_target_` it is
given and a callback's `record(results)` adds its section to results.json (`gpu_probe`).

What it looks at, none of it from the run's settings alone:
- `loader`: the train loader as built, wrapper by wrapper (ResumableLoader, DeviceBatches,
  DataLoader, ...), and the DataLoader's own pin_memory/num_workers;
- `batches`: the first `sampled_batches` training batches as the loader hands them over, before
  Lightning copies them to the device: whether their tensors are in pinned memory, and where
  they are (with cache=device they are already on the device: no host-to-device copy);
- `autocast`: whether autocast was on, and in which dtype, inside those training steps;
- `compile`: torch.compile's own counters over the run (graphs, graph breaks, Inductor kernels
  generated or cache hits), whether the net was still compiled at the end, Triton's version;
- `sync`: host synchronizations per steady training step, counted with
  `torch.cuda.set_sync_debug_mode("warn")` from the first step after warm-up to the end of
  training (off during validation and the checkpoint saved after it), and where they came from.
  CUDA only: without it the section says why it is empty.
- `grad_scaler`: fp16's loss scale at the end (a finite scale: loss scaling ran).

Per step it costs a counter, and for the sampled batches an `is_pinned()` per tensor; the sync
counting costs nothing until a synchronization happens.
"""

from __future__ import annotations

import re
import sys
import warnings
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader

SYNC_WARNING = re.compile(r"synchronizing CUDA operation")


def loader_chain(loader: Any, depth: int = 8) -> list[dict[str, Any]]:
    """The loader and the loaders it wraps (`.loader`, read from the instance so that wrappers'
    attribute delegation is not followed), outermost first."""
    chain = []
    while loader is not None and len(chain) < depth:
        entry: dict[str, Any] = {"class": type(loader).__name__, "is_dataloader": isinstance(loader, DataLoader)}
        if isinstance(loader, DataLoader):
            entry |= {"pin_memory": bool(loader.pin_memory), "num_workers": loader.num_workers}
        chain.append(entry)
        loader = vars(loader).get("loader") if hasattr(loader, "__dict__") else None
    return chain


def _tensors(batch: Any) -> list[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, list | tuple):
        return [t for item in batch for t in _tensors(item)]
    if isinstance(batch, dict):
        return [t for item in batch.values() for t in _tensors(item)]
    return []


def _compile_counters() -> dict[str, dict[str, int]]:
    counters: dict[str, dict[str, int]] = {}
    try:
        from torch._dynamo.utils import counters as dynamo

        counters = {name: dict(values) for name, values in dynamo.items()}
    except Exception:
        pass
    try:
        from torch._inductor import metrics

        counters["inductor_metrics"] = {"generated_kernel_count": int(metrics.generated_kernel_count)}
    except Exception:
        pass
    return counters


def _delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    delta = {}
    for name, values in after.items():
        changed = {k: v - before.get(name, {}).get(k, 0) for k, v in values.items()}
        changed = {k: v for k, v in changed.items() if v}
        if changed:
            delta[name] = changed
    return delta


class SyncCounter:
    """Counts torch's "called a synchronizing CUDA operation" warnings while on, per step.

    Other warnings pass through to the previous `warnings.showwarning` unchanged."""

    def __init__(self, max_steps: int = 5000) -> None:
        self.max_steps = max_steps
        self.per_step: list[int] = []
        self.where: Counter[str] = Counter()
        self.on = False
        self._saved: tuple[Any, list] | None = None

    def start(self) -> None:
        if self.on:
            return
        shown = warnings.showwarning
        self._saved = (shown, warnings.filters[:])
        warnings.filterwarnings("always", message=".*" + SYNC_WARNING.pattern)  # every one, not once per place

        def show(message, category, filename, lineno, file=None, line=None):
            if SYNC_WARNING.search(str(message)):
                if self.per_step:
                    self.per_step[-1] += 1
                self.where[f"{_short(filename)}:{lineno}"] += 1
                return
            shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode("warn")
        self.on = True

    def stop(self) -> None:
        if not self.on:
            return
        torch.cuda.set_sync_debug_mode("default")
        shown, filters = self._saved
        warnings.showwarning = shown
        warnings.filters[:] = filters
        getattr(warnings, "_filters_mutated", lambda: None)()  # drop the "already shown" registries
        self.on = False

    def new_step(self) -> None:
        if len(self.per_step) < self.max_steps:
            self.per_step.append(0)

    def summary(self) -> dict[str, Any]:
        steps = len(self.per_step)
        return {
            "steps": steps,
            "syncs": sum(self.per_step),
            "steps_with_sync": sum(1 for n in self.per_step if n),
            "per_step": self.per_step[:200],
            "where": dict(self.where.most_common(8)),
        }


def _short(filename: str) -> str:
    """A path from the package down (site-packages/lightning/... -> lightning/...)."""
    for marker in ("site-packages/", "dist-packages/", "/src/"):
        if marker in filename:
            return filename.rsplit(marker, 1)[1]
    return "/".join(Path(filename).parts[-2:])


class GpuProbe(L.Callback):
    def __init__(self, sync_debug: bool = True, sampled_batches: int = 20) -> None:
        self.sync_debug = sync_debug
        self.sampled_batches = sampled_batches
        self.section: dict[str, Any] = {"loader": [], "batches": [], "autocast": []}
        self.sync = SyncCounter()
        self.warmup_steps = 2
        self._started = 0
        self._restore: list[tuple[Any, str]] = []
        self._before: dict[str, dict[str, int]] = {}
        self._device_type = "cpu"
        self._failed: set[str] = set()

    # -- wrapping two of the run's objects for the sampled batches ---------------------------
    def _wrap(self, owner: Any, name: str, wrapper) -> None:
        original = getattr(owner, name)
        setattr(owner, name, wrapper(original))  # an instance attribute: Lightning calls it by name
        self._restore.append((owner, name))

    def _unwrap(self) -> None:
        for owner, name in self._restore:
            vars(owner).pop(name, None)
        self._restore.clear()

    def _note(self, where: str, error: Exception) -> None:
        """The probe never stops a run: what went wrong goes into its section instead."""
        self.section.setdefault("errors", []).append(f"{where}: {type(error).__name__}: {error}"[:300])

    def _sampling(self, trainer) -> bool:
        return trainer.training and len(self.section["batches"]) < self.sampled_batches

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit":
            self._before = _compile_counters()

    def on_train_start(self, trainer, pl_module) -> None:
        try:
            self._start(trainer)
        except Exception as error:
            self._note("on_train_start", error)

    def _start(self, trainer) -> None:
        self._device_type = trainer.strategy.root_device.type
        monitor = next((c for c in trainer.callbacks if type(c).__name__ == "PerfMonitor"), None)
        self.warmup_steps = getattr(getattr(monitor, "clock", None), "warmup_steps", self.warmup_steps)
        self.section["loader"] = loader_chain(trainer.train_dataloader)
        self.section["device"] = str(trainer.strategy.root_device)
        self.section["precision_plugin"] = type(trainer.precision_plugin).__name__
        probe = self

        def batch_to_device(original):
            def wrapped(batch, *args, **kwargs):
                if probe._sampling(trainer):
                    try:
                        tensors = _tensors(batch)
                        probe.section["batches"].append(
                            {
                                "devices": sorted({str(t.device) for t in tensors}),
                                "pinned": [t.is_pinned() for t in tensors],
                            }
                        )
                    except Exception as error:
                        probe._note("batch_to_device", error)
                return original(batch, *args, **kwargs)

            return wrapped

        def train_step_context(original):
            @contextmanager
            def wrapped():
                with original():
                    if len(probe.section["autocast"]) < probe.sampled_batches:
                        try:
                            kind = probe._device_type
                            enabled = torch.is_autocast_enabled(kind)
                            dtype = str(torch.get_autocast_dtype(kind)).replace("torch.", "") if enabled else None
                            probe.section["autocast"].append({"enabled": enabled, "dtype": dtype})
                        except Exception as error:
                            probe._note("train_step_context", error)
                    yield

            return wrapped

        self._wrap(trainer.strategy, "batch_to_device", batch_to_device)
        self._wrap(trainer.precision_plugin, "train_step_context", train_step_context)

    # -- host synchronizations in the steady training steps ---------------------------------
    def _can_count_syncs(self) -> str | None:
        if not self.sync_debug:
            return "sync_debug=false"
        if self._device_type != "cuda" or not torch.cuda.is_available():
            return "no CUDA device: torch.cuda.set_sync_debug_mode needs one"
        return None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        self._started += 1
        if self._started > self.warmup_steps and self._can_count_syncs() is None and "sync" not in self._failed:
            try:
                self.sync.new_step()  # the data fetch for the next batch counts to this step
                self.sync.start()  # (again after a validation pause)
            except Exception as error:
                self._failed.add("sync")
                self._note("sync counting", error)

    def on_validation_start(self, trainer, pl_module) -> None:
        self.sync.stop()  # validation and the checkpoint after it are not the training hot path

    def on_train_end(self, trainer, pl_module) -> None:
        try:
            self.sync.stop()
            self._finish(trainer, pl_module)
        except Exception as error:
            self._note("on_train_end", error)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        try:
            self.sync.stop()  # a run that failed mid-training
        except Exception as error:
            self._note("teardown", error)
        self._unwrap()

    def _finish(self, trainer, pl_module) -> None:
        self._unwrap()
        net = getattr(pl_module, "net", None)
        self.section["compile"] = {
            "counters": _delta(self._before, _compile_counters()),
            "compiled_at_end": getattr(net, "_compiled_call_impl", None) is not None,
            "fallback": getattr(pl_module, "compile_fallback", None),
            "triton": getattr(sys.modules.get("triton"), "__version__", None),
        }
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        if scaler is not None:
            try:
                self.section["grad_scaler"] = {"scale": float(scaler.get_scale())}
            except Exception as error:
                self.section["grad_scaler"] = {"error": f"{type(error).__name__}: {error}"}

    def record(self, results: dict[str, Any]) -> None:
        """results.json's `gpu_probe` section (segperf's RunRecord calls this at the end)."""
        why_not = "failed: see errors" if "sync" in self._failed else self._can_count_syncs()
        self.section["sync"] = {"counted": why_not is None, "why_not": why_not, **self.sync.summary()}
        self.section["warmup_steps"] = self.warmup_steps
        results["gpu_probe"] = self.section
