"""PerfMonitor's parts, and the one rule that passes Lightning's hooks on to them.

Lightning calls every hook of a callback it holds; PerfMonitor is the callback the Trainer holds,
and its parts (phase clock, resources, MFU, all-reduce wait, validation metrics, live scalars) are
callbacks of their own that it calls. One rule does that here: a hook reaches the parts whose
class does something in it (`overrides`, the rule training/callback_dispatch also keeps the
Trainer's own dispatch by), in their order; a part whose hook raises is taken out of the run with
one warning (its record would be partial) and the run goes on. The per-batch hooks are timed, as
what measuring costs the training thread (results.json `measurement_cost.hooks_s`).

Why not hand the parts to the Trainer as callbacks of their own: a user adds one callback, and the
parts share one record, one failure rule and one folder; Lightning also wraps each callback's
every hook in a profiler action, which PerfMonitor's own clock would then time as its cost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import lightning as L

log = logging.getLogger("segperf")

# the hooks Lightning calls once or more a batch: what the parts do there is timed as measuring's cost
TIMED_HOOKS = frozenset(
    {
        "on_train_batch_start",
        "on_before_backward",
        "on_after_backward",
        "on_train_batch_end",
        "on_validation_batch_start",
        "on_validation_batch_end",
    }
)


def overrides(callback: L.Callback, hook: str) -> bool:
    """Whether `callback` does anything in `hook` (Lightning's base Callback does nothing in any)."""
    return getattr(type(callback), hook, None) is not getattr(L.Callback, hook)


class Parts:
    """The measuring parts in their order, what failed among them, and the time spent in them.

    `not_measured` maps a part (or a piece of the record) to the error that stopped it: said once
    as a warning, kept in results.json, never raised to the run.
    """

    def __init__(self, parts: list[L.Callback]) -> None:
        self.active = list(parts)
        self.not_measured: dict[str, str] = {}
        self.hooks_s = 0.0  # wall time of the training thread inside the parts' per-batch hooks
        self._bind()

    def _bind(self) -> None:
        # per hook, the parts that act in it, bound once: Lightning calls the per-batch hooks a few
        # times a step, and most parts have nothing to do in most of them
        self._bound: dict[str, tuple[tuple[L.Callback, Callable], ...]] = {}

    def bound(self, hook: str) -> tuple[tuple[L.Callback, Callable], ...]:
        if hook not in self._bound:
            self._bound[hook] = tuple((p, getattr(p, hook)) for p in self.active if overrides(p, hook))
        return self._bound[hook]

    def get(self, part: L.Callback | None) -> Any:
        """`part` while it still measures, else None."""
        return part if part is not None and part in self.active else None

    def call(self, hook: str, *args: Any) -> None:
        """Lightning's hook `hook` to each part that acts in it; a part that fails is dropped."""
        bound = self.bound(hook)
        if not bound:
            return
        entered = time.perf_counter()
        for part, method in bound:
            try:
                method(*args)
            except Exception as error:  # noqa: BLE001 - the user's run must not see it
                self.drop(part, error)
        if hook in TIMED_HOOKS:
            self.hooks_s += time.perf_counter() - entered

    def guarded(self, part: L.Callback, fn: Callable, *args: Any) -> None:
        """`fn(*args)` of `part` outside Lightning's hooks; the part is dropped when it raises."""
        try:
            fn(*args)
        except Exception as error:  # noqa: BLE001 - the user's run must not see it
            self.drop(part, error)

    def drop(self, part: L.Callback, error: BaseException) -> None:
        """A part whose hook failed is taken out of the run."""
        self.failed(type(part).__name__, error)
        self.active = [p for p in self.active if p is not part]
        self._bind()

    def failed(self, what: str, error: BaseException) -> None:
        """One warning per part, the part marked not measured; the run goes on."""
        if what not in self.not_measured:
            self.not_measured[what] = f"{type(error).__name__}: {error}".strip().rstrip(":")
            log.warning(
                "segperf: PerfMonitor could not measure %s (%s); that part of the record is marked not "
                "measured and training goes on",
                what,
                self.not_measured[what],
            )

    def safely(self, what: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)`, or None and `what` marked not measured when it raises."""
        try:
            return fn(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - whatever it is, the user's run must not see it
            self.failed(what, error)
            return None
