"""Lightning's per-batch hooks reach only the callbacks that do something in them.

Lightning calls every per-batch hook (six in a training step) on every callback of the Trainer,
whether the callback does anything there or not, and wraps each call in a profiler action named
after the callback's `state_key` (trainer/call.py, `_call_callback_hooks`). With segperf's seven
callbacks that dispatch of empty hooks was ~0.1 ms a step, half of segperf's cost over a bare
Trainer, measured on a CNN shrunk until a step is almost all overhead (docs/BENCHMARKS.md,
"Framework efficiency"). Lightning passes over a hook attribute that is not callable, so an
instance attribute of None in place of an inherited no-op keeps the callback out of that hook's
dispatch and changes nothing else: the callback's class, its other hooks, its state in
checkpoints. Lightning has no setting for this; a hook the callback's class defines is never
touched.
"""

from __future__ import annotations

from collections.abc import Iterable

import lightning as L

from segperf.callbacks.parts import overrides

# the hooks Lightning calls once a batch (training, validation, test, predict)
BATCH_HOOKS = (
    "on_train_batch_start",
    "on_train_batch_end",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_test_batch_start",
    "on_test_batch_end",
    "on_predict_batch_start",
    "on_predict_batch_end",
)


def skip_empty_batch_hooks(callbacks: Iterable[L.Callback]) -> dict[str, list[str]]:
    """Take each callback out of the per-batch hooks its class leaves as Lightning's no-op; returns
    the hooks skipped, by callback class."""
    skipped: dict[str, list[str]] = {}
    for callback in callbacks:
        for hook in BATCH_HOOKS:
            if hook not in vars(callback) and not overrides(callback, hook):
                setattr(callback, hook, None)  # Lightning calls a hook only when callable(getattr(cb, hook))
                skipped.setdefault(type(callback).__name__, []).append(hook)
    return skipped
