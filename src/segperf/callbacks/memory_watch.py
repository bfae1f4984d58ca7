"""MemoryWatch: memory creep caught while the run still lives, its forecast, and pressure.

A run that leaks dies by the OOM killer before any end-of-fit summary is written, so this part
speaks during the run: every `every_n_steps` training steps it reads the host memory of the
process tree (segperf.perf.host_memory: the main process's private bytes and what each DataLoader
worker added since it started; one pread per process, a few microseconds; the creep trend takes
off glibc's free-but-resident heap bytes every HELD_EVERY_N_STEPS) and, on a GPU, torch's
allocated and reserved bytes (host-side counters: no synchronization).
segperf.perf.memory_trend judges the trend after warm-up and after the first validation; once
creep is confirmed it logs ONE warning through the "segperf" logger, with the step (and the wall
time) at which the process reaches the memory left to it, and again only when that forecast
halves. Every `log_every_n_steps` it logs `perf/rss_bytes` (and the device's memory) to the
trainer's loggers. At the end `record(results)` writes results.json's `memory`.

Why not Lightning's DeviceStatsMonitor: it logs torch's device memory stats per step but judges
nothing, sees no host memory of DataLoader workers, and forecasts nothing.

Example::

    trainer = L.Trainer(callbacks=[PerfMonitor(), MemoryWatch()])

A monitor never breaks the run: a failure in any hook is one warning, the part stops watching,
and its record says `not_measured`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import lightning as L
import torch

from segperf.perf.host_memory import HeapHoles, TreeMemory, children, host_room
from segperf.perf.memory_findings import creep_text, findings
from segperf.perf.memory_trend import MIB, Trend, forecast
from segperf.perf.verdict import memory_verdict

log = logging.getLogger("segperf")

# the least rise over a judged stretch that can be creep: the interpreter's and the allocators'
# own drift stays under it (host), device allocations are exact (device)
HOST_MIN_RISE = 32 * MIB
DEVICE_MIN_RISE = 16 * MIB
# the host series judged for creep (segperf.perf.host_memory: each page once, a worker's copy of its parent not)
HOST_MEASURE = "private bytes of the main process + what each DataLoader worker added since it started"
HELD_MEASURE = HOST_MEASURE + ", minus the main process's free-but-resident malloc heap bytes (mallinfo2)"
NO_MALLINFO = HOST_MEASURE + " (no mallinfo2 here: malloc's free heap bytes not subtracted)"
# mallinfo2 costs 60-170 us inside a step (host_memory.HeapHoles): the creep trend reads it and adds
# a point every 8 steps. Not every 16 (a judgement's pace): a fit wants 12 points, 192 steps, and a
# 300-step run settled after its first validation at step 51 would not be confirmed before it ends.
HELD_EVERY_N_STEPS = 8
# near the limit the process's own growth (heap holes included) is what runs out first
NEAR_LIMIT_SHARE = 0.05


class MemoryWatch(L.Callback):
    """Args:
    every_n_steps: read memory every this many training steps (1: each; a read costs ~5 us a process).
    warmup_steps: steps before the trend is judged (allocator growth, workers starting).
    judge_every_n_steps: how often the trend is judged (~0.6 ms a judgement; in a long run, no more
        often than a block of its folded record closes).
    """

    def __init__(self, every_n_steps: int = 1, warmup_steps: int = 10, judge_every_n_steps: int = 16) -> None:
        if every_n_steps < 1 or judge_every_n_steps < 1 or warmup_steps < 0:
            raise ValueError(
                f"MemoryWatch(every_n_steps={every_n_steps}, judge_every_n_steps={judge_every_n_steps}, "
                f"warmup_steps={warmup_steps}): steps must be >= 1 (warm-up >= 0)"
            )
        self.every_n_steps, self.warmup_steps, self.judge_every = every_n_steps, warmup_steps, judge_every_n_steps
        self._reset()

    def _reset(self) -> None:
        self.host = Trend("host", HOST_MIN_RISE)  # held bytes: the tree's own, malloc's holes off
        self.holes: HeapHoles | None = None
        self._next_held, self.held_every = 0, 1
        self.peak_own = 0
        self._own_since: tuple[int, int] | None = None  # (step, own bytes) first read after settling
        self._own_now: tuple[int, int] | None = None
        self.device_trend: Trend | None = None
        self.tree: TreeMemory | None = None
        self.device: torch.device | None = None
        self.steps = 0
        self.rank, self.world_size = 0, 1
        self.peak_resident = self.peak_tree_private = 0
        self.warnings: list[dict[str, Any]] = []  # each warning logged: step, time, forecast
        self.failed: str | None = None
        self.cost_s = 0.0
        self._times: list[tuple[int, float]] = []  # (step, perf_counter) at the settle point and now
        self._validated = False
        self._next_judge = 0
        self._epoch_starts: list[int] = []  # the first step of each training epoch
        self._epoch_end = float("inf")  # the last step of this one
        self._restarting_workers = False  # the training loader's workers start anew each epoch
        self._nvml: Any = None

    # -- never break the run ----------------------------------------------------------------------
    def _guarded(self, what: str, fn, *args) -> None:
        if self.failed is not None:
            return
        entered = time.perf_counter()
        try:
            fn(*args)
        except Exception as error:  # noqa: BLE001 - the user's run must not see it
            self.failed = f"{what}: {type(error).__name__}: {error}"
            log.warning("segperf: MemoryWatch stopped watching memory (%s); training goes on", self.failed)
        self.cost_s += time.perf_counter() - entered

    # -- Lightning's hooks ------------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit":
            self._guarded("set-up", self._setup, trainer)

    def _setup(self, trainer) -> None:
        self._reset()
        # children already here are not this rank's workers: under DDP on one machine, the other ranks
        self.tree = TreeMemory(exclude=set(children(TreeMemory().root)))
        self.holes = HeapHoles()
        # in steps, a multiple of every_n_steps; each step's reading where nothing is subtracted
        self.held_every = -(-HELD_EVERY_N_STEPS // self.every_n_steps) * self.every_n_steps
        if not self.holes.available:
            self.held_every = self.every_n_steps
        self.device = trainer.strategy.root_device
        self.rank, self.world_size = trainer.global_rank, trainer.world_size
        self.host.settle(self.warmup_steps)
        if self.device.type == "cuda":
            self.device_trend = Trend("device", DEVICE_MIN_RISE)
            self.device_trend.settle(self.warmup_steps)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self.steps += 1
        if self.steps % self.every_n_steps == 0:
            self._guarded("a step's reading", self._step, trainer)

    def _step(self, trainer) -> None:
        step, now = self.steps, time.perf_counter()
        resident, private, own = self.tree.read()
        self.peak_resident = max(self.peak_resident, resident)
        self.peak_tree_private = max(self.peak_tree_private, private)
        self.peak_own = max(self.peak_own, own)
        self._own_now = (step, own)
        if step > self.host.settle_step and (self._own_since is None or self._own_since[0] <= self.host.settle_step):
            self._own_since = (step, own)
        if step >= self._next_held:  # not `private`: forked workers would count the parent's pages again
            self._next_held = step + self.held_every
            self.host.add(step, own - self.holes.read())
        allocated = reserved = None
        if self.device_trend is not None:
            allocated, reserved = torch.cuda.memory_allocated(self.device), torch.cuda.memory_reserved(self.device)
            self.device_trend.add(step, allocated)
        if step <= self.host.settle_step or not self._times:
            self._times = [(step, now)]
        every = trainer.log_every_n_steps
        if every and step % every < self.every_n_steps and trainer.is_global_zero:
            self._log_live(trainer, resident, private, allocated, reserved)
        if step >= self._next_judge:
            self._next_judge = step + max(self.judge_every, self.host.block_steps * self.held_every)
            self._times[1:] = [(step, now)]
            states = [trend.judge() for trend in self._trends()]
            if "confirmed" in states:
                self._maybe_warn(step)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._guarded("an epoch's start", self._epoch_start, trainer)

    def _epoch_start(self, trainer) -> None:
        loader = trainer.train_dataloader
        workers = getattr(loader, "num_workers", 0) or 0
        self._restarting_workers = workers > 0 and not getattr(loader, "persistent_workers", False)
        self._epoch_starts.append(self.steps + 1)
        self._epoch_end = self.steps + float(trainer.num_training_batches)

    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking and not self._validated:
            self._validated = True
            # the first validation (its workers, its batches) is a fill: judge what comes after it
            for trend in self._trends():
                if trend.state != "confirmed":
                    trend.settle(self.steps + 1)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if self.tree is not None:
            self.tree.close()

    # -- during the run ---------------------------------------------------------------------------
    def _trends(self) -> list[Trend]:
        return [t for t in (self.host, self.device_trend) if t is not None]

    def _seconds_per_step(self) -> float | None:
        if len(self._times) < 2 or self._times[1][0] <= self._times[0][0]:
            return None
        (s0, t0), (s1, t1) = self._times
        return (t1 - t0) / (s1 - s0)

    def creep(self) -> dict[str, Any]:
        """The creep now: per series its rate and since when, and the earliest out-of-memory step."""
        found: dict[str, Any] = {
            "state": "none",
            "host_bytes_per_step": None,
            "device_bytes_per_step": None,
            "since_step": None,
            "out_of_memory_at_step": None,
            "out_of_memory_in_s": None,
            "runs_out_of": None,
            "room_bytes": None,
            "room_from": None,
        }
        rising = [t.name for t in self._trends() if t.state == "rising"]
        confirmed = [t for t in self._trends() if t.state == "confirmed"]
        if rising and not confirmed:
            found["state"] = "rising"
        found["rising"] = rising
        for trend in confirmed:
            found["state"] = "confirmed"
            rate = trend.judged.slope
            found[f"{trend.name}_bytes_per_step"] = round(rate, 1)
            since = trend.judged.since_step
            found["since_step"] = since if found["since_step"] is None else min(found["since_step"], since)
            room, room_from, capacity = self._room(trend.name)
            if trend.name == "host" and room is not None and room < NEAR_LIMIT_SHARE * capacity:
                rate = max(rate, self.own_growth() or 0.0)  # the heap's bursts come before its holes fill
            at, seconds = forecast(self.steps, rate, room, self._seconds_per_step())
            if at is not None and (found["out_of_memory_at_step"] is None or at < found["out_of_memory_at_step"]):
                found.update(out_of_memory_at_step=at, out_of_memory_in_s=seconds, runs_out_of=trend.name)
                found.update(room_bytes=room, room_from=room_from)
        return found

    def own_growth(self) -> float | None:
        """What the tree's own bytes (malloc's holes in) grew a step since the trend settled."""
        if self._own_since is None or self._own_now is None or self._own_now[0] <= self._own_since[0]:
            return None
        return (self._own_now[1] - self._own_since[1]) / (self._own_now[0] - self._own_since[0])

    def _room(self, name: str) -> tuple[int | None, str, int]:
        if name == "host":
            room = host_room()
            return int(room["available_bytes"]), str(room["limited_by"]), int(room["capacity_bytes"])
        total = torch.cuda.get_device_properties(self.device).total_memory
        used = max(torch.cuda.memory_reserved(self.device), self._nvml_used() or 0)
        return max(0, int(total) - int(used)), "device memory", int(total)

    def _maybe_warn(self, step: int) -> None:
        """Once when creep is confirmed; again only when the out-of-memory step it forecasts comes
        nearer by at least half of what was left when it was last said (the leak sped up)."""
        creep = self.creep()
        at = creep["out_of_memory_at_step"]
        if not self._outlives_epoch(at):
            return
        if self.warnings:
            before = self.warnings[-1]
            if at is None or before["out_of_memory_at_step"] is None:
                return
            if at > before["out_of_memory_at_step"] - (before["out_of_memory_at_step"] - before["step"]) / 2:
                return
        self.warnings.append(
            {"step": step, "time": time.time(), "out_of_memory_at_step": at, "text": creep_text(creep)}
        )
        rank = f" on rank {self.rank}" if self.world_size > 1 else ""
        log.warning("segperf: memory creep%s: %s", rank, self.warnings[-1]["text"])

    def _outlives_epoch(self, at: int | None) -> bool:
        """Workers that restart every epoch free at its end what they gained in it (a cache they
        fill): a host rise inside one epoch is said once a block after an epoch's start lies above
        every block of the rise before it, or when memory runs out before this epoch ends."""
        host = self.host
        if not self._restarting_workers or host.state != "confirmed" or (at is not None and at <= self._epoch_end):
            return True
        if self.device_trend is not None and self.device_trend.state == "confirmed":
            return True  # the device's memory is not the workers'
        since = host.judged.since_step
        for start in (s for s in self._epoch_starts if s > since):
            before = [v for step, v in host.points if since <= step < start]
            after = [v for step, v in host.points if step >= start]
            if before and after and min(after) > max(before):
                return True
        return False

    def _log_live(self, trainer, resident: int, private: int, allocated: int | None, reserved: int | None) -> None:
        metrics = {"perf/rss_bytes": float(resident), "perf/rss_private_bytes": float(private)}
        if allocated is not None:
            metrics["perf/device_allocated_bytes"] = float(allocated)
            metrics["perf/device_reserved_bytes"] = float(reserved)
            used = self._nvml_used()
            if used is not None:
                metrics["perf/device_used_bytes"] = float(used)
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)

    def _nvml_used(self, nvml: Any = None) -> int | None:
        """NVML's used memory of this rank's GPU (all processes on it); None without NVML."""
        if self._nvml is None:
            from segperf.perf.nvml import GpuUnavailable, NvmlGpu
            from segperf.perf.sampler import sampled_gpu

            try:
                self._nvml = NvmlGpu(sampled_gpu(), nvml)
            except GpuUnavailable:
                self._nvml = False
        return self._nvml.read_mem() if self._nvml else None

    # -- the record -------------------------------------------------------------------------------
    def record(self, results: dict[str, Any]) -> None:
        """results.json's `memory` (kept keys another part wrote there), and the memory verdict
        beside the time verdict."""
        memory = results.setdefault("memory", {})
        if self.tree is None:  # never set up: no training ran
            memory.setdefault("not_measured", self.failed or "no training step")
            return
        if self.failed is not None:
            memory["not_measured"] = self.failed
            results.setdefault("not_measured", {})["memory"] = self.failed
        for trend in self._trends():
            trend.judge()
        creep = self.creep()
        memory["trend"] = {
            "host": {
                "measure": HELD_MEASURE if self.holes.available else NO_MALLINFO,
                "read_every_n_steps": self.held_every,
                "process_growth_bytes_per_step": None if self.own_growth() is None else round(self.own_growth(), 1),
                "mallinfo2_us": round(1e6 * self.holes.cost_s / self.holes.calls, 1) if self.holes.calls else None,
                **self.host.section(),
                "block_steps": self.host.block_steps * self.held_every,  # readings a block, in steps
            },
            "device": None
            if self.device_trend is None
            else {"measure": "torch allocated bytes", **self.device_trend.section()},
        }
        memory["creep"] = creep
        memory["pressure"] = self._pressure(results)
        memory["warnings"] = self.warnings
        memory["findings"] = findings(memory)
        memory["steps"], memory["read_every_n_steps"] = self.steps, self.every_n_steps
        memory["cost_s"] = round(self.cost_s, 6)
        found = memory_verdict(memory)
        memory["verdict"] = found
        if found is not None and isinstance(results.get("verdict"), dict):
            results["verdict"]["memory"] = found

    def _pressure(self, results: dict[str, Any]) -> dict[str, Any]:
        resources = results.get("resources") or {}
        room = host_room()
        # the sampler's peak (read every 50 ms, also outside training steps) where its tree is this
        # rank's alone; under DDP on one machine rank 0's tree holds the other ranks too
        sampled = resources.get("rss_peak_bytes") if self.world_size == 1 else None
        peak = max(self.peak_resident, sampled or 0) or None
        capacity = int(room["capacity_bytes"])
        pressure: dict[str, Any] = {
            "host": {
                "peak_bytes": peak,
                "peak_private_bytes": self.peak_own or None,
                "tree_private_peak_bytes": self.peak_tree_private or None,  # workers' copy-on-write pages included
                "capacity_bytes": capacity,
                "capacity_from": "cgroup memory limit" if room["limited_by"] == "cgroup memory limit" else "RAM",
                "fraction": peak / capacity if peak and capacity else None,
            },
            "device": None,
        }
        if self.device_trend is not None:
            pressure["device"] = device_pressure(self.device, resources.get("gpu_mem_peak_bytes"))
        return pressure


def device_pressure(device: torch.device, nvml_peak: int | None) -> dict[str, Any]:
    """Peak allocated and reserved against the device's capacity, the allocator's overhang and its
    retries (torch.cuda.memory_stats: a cudaMalloc retried after freeing its cache is memory tight)."""
    stats = torch.cuda.memory_stats(device)
    allocated, reserved = torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)
    capacity = torch.cuda.get_device_properties(device).total_memory
    peak = max(reserved, nvml_peak or 0)
    return {
        "peak_allocated_bytes": int(allocated),
        "peak_reserved_bytes": int(reserved),
        "reserved_overhang_bytes": int(reserved - allocated),
        "overhang_fraction": (reserved - allocated) / reserved if reserved else None,
        "nvml_peak_bytes": nvml_peak,
        "capacity_bytes": int(capacity),
        "fraction": peak / capacity if capacity else None,
        "alloc_retries": int(stats.get("num_alloc_retries", 0)),
        "out_of_memory_errors": int(stats.get("num_ooms", 0)),
    }
