"""Time blocked in torch.distributed's collectives: where data-parallel ranks meet and wait.

Why the collectives, not the layers: DDP ranks meet wherever a collective runs, and which ones a
step issues depends on the user's net and code, not on anything segperf knows: DDP broadcasts a
module's buffers (BatchNorm's running statistics) from rank 0 at the start of every forward
(`broadcast_buffers=True`, the default: `DistributedDataParallel._sync_buffers` ->
`_distributed_broadcast_coalesced` -> `dist._broadcast_coalesced`), SyncBatchNorm all-gathers its
statistics in the forward and all-reduces them in the backward (`dist.all_gather`,
`dist.all_gather_single`, `torch.distributed.all_reduce` in torch/nn/modules/_functions.py),
Lightning's `self.log(..., sync_dist=True)` reduces inside the step (`_sync_ddp`:
`torch.distributed.barrier` then `torch.distributed.all_reduce`), torchmetrics gathers at
`compute`, a checkpoint barriers. Every one of those call sites looks the function up on the
`torch.distributed` module when it runs (`dist.X` / `torch.distributed.X`), so replacing the
module's attributes for the length of a fit times them all, whatever the layers. A rank that
arrives first at a blocking collective sits in it until the last one arrives: the time it is
blocked there is its wait for the others (plus the transfer itself, the same on every rank).

Aligning the ranks' step timelines instead (each rank's arrival at each meeting from clocks on
different hosts) needs the clocks' offsets, and still needs to know where the meetings are;
timing the calls needs neither.

What is timed: blocking calls (`async_op` false) from the thread that installed the timer (the
training loop's). An `async_op=True` call returns at once and is waited on elsewhere; DDP's
gradient all-reduce is one (its comm hook calls `dist.all_reduce(..., async_op=True)`), timed by
segperf.callbacks.allreduce_wait instead. A collective called inside another (all_gather_object
calls all_gather) counts once, as the outer call.

GPU (NCCL): a blocking collective returns to the host once it is queued; the current stream waits
for it, the host does not, so host time is not the wait. There the timer records a CUDA event on
the current stream before and after the call: the time between them on the device is how long
the stream stood at the collective (the others' lateness plus the transfer). The events are read
without synchronizing (`query`) as they complete, and once with a synchronize at the end of the
fit, where the host waits anyway.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

# the collectives torch.distributed offers, as looked up on the module by the code that calls them
COLLECTIVES = (
    "_broadcast_coalesced",  # DDP's buffer broadcast before each forward, and at wrapping
    "broadcast",
    "broadcast_object_list",
    "all_reduce",
    "all_reduce_coalesced",
    "reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_gather_coalesced",
    "all_gather_object",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
)

# (name, host seconds blocked, device wait as (start event, end event) or None)
OnWait = Callable[[str, float, Any], None]


def _async_index(fn: Callable) -> int | None:
    """Where `async_op` sits among `fn`'s positional parameters (None: it has none, or no
    signature: a builtin such as _broadcast_coalesced, which always blocks)."""
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None
    return names.index("async_op") if "async_op" in names else None


def _is_async(index: int | None, args: tuple, kwargs: dict) -> bool:
    if "async_op" in kwargs:
        return bool(kwargs["async_op"])
    return index is not None and len(args) > index and bool(args[index])


def cuda_events() -> tuple[Any, Any]:
    """A pair of timing events on the current CUDA stream: the start one recorded now."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    return start, end


class CollectiveTimer:
    """Replaces torch.distributed's collectives with timed ones between `install` and `uninstall`.

    `on_wait(name, host_s, device)` is called after each blocking collective of the installing
    thread; `device` is the (start, end) event pair when `events` is given (CUDA: `cuda_events`),
    the end recorded right after the call, to be read once both have completed (`device_seconds`).
    `module` is torch.distributed; tests pass a fake.
    """

    def __init__(self, on_wait: OnWait, events: Callable[[], tuple[Any, Any]] | None = None, module: Any = None):
        self.on_wait = on_wait
        self.events = events
        self.module = module if module is not None else torch.distributed
        self._originals: dict[str, Callable] = {}
        self._wrappers: dict[str, Callable] = {}
        self._local = threading.local()
        self._thread: int | None = None
        self.active = False

    def install(self) -> list[str]:
        """Wrap every collective the module has; returns the names wrapped."""
        self._thread = threading.get_ident()
        for name in COLLECTIVES:
            original = getattr(self.module, name, None)
            if original is None or name in self._originals:
                continue
            wrapper = self._wrap(name, original)
            self._originals[name], self._wrappers[name] = original, wrapper
            setattr(self.module, name, wrapper)
        self.active = True
        return list(self._originals)

    def uninstall(self) -> None:
        """The module's own functions back. One that something else wrapped on top of ours since
        stays (its wrapper holds ours): ours then passes calls through untimed."""
        self.active = False
        for name, original in self._originals.items():
            if getattr(self.module, name, None) is self._wrappers[name]:
                setattr(self.module, name, original)
        self._originals.clear()
        self._wrappers.clear()

    def _wrap(self, name: str, original: Callable) -> Callable:
        index = _async_index(original)

        @functools.wraps(original)
        def timed(*args, **kwargs):
            local = self._local
            if (
                not self.active
                or getattr(local, "inside", False)
                or threading.get_ident() != self._thread
                or _is_async(index, args, kwargs)
            ):
                return original(*args, **kwargs)
            local.inside = True
            try:
                device = self.events() if self.events is not None else None
                start = time.perf_counter()
                result = original(*args, **kwargs)
                host_s = time.perf_counter() - start
                if device is not None:
                    device[1].record()  # after the collective on the current stream: no synchronization
            finally:
                local.inside = False
            self.on_wait(name, host_s, device)
            return result

        timed.__segperf_timed__ = True  # type: ignore[attr-defined]
        return timed


def device_seconds(pair: tuple[Any, Any], block: bool = False) -> float | None:
    """Seconds between a completed event pair on the device; None while the end one is pending
    (`block`: wait for it, as at the end of the fit)."""
    start, end = pair
    if block:
        end.synchronize()
    elif not end.query():
        return None
    return start.elapsed_time(end) / 1000.0
