"""Lightning's per-hook bookkeeping on the module, stored without nn.Module's attribute checks.

Lightning records which hook is running in `pl_module._current_fx_name` (so that `self.log`
knows where it is called from): it sets the name before every hook call and restores it after,
~44 assignments a training step (the loop's hooks, the optimizer closure's, the callbacks' once
per hook). Each goes through `nn.Module.__setattr__`, which checks the value against the
module's parameters, buffers and submodules, isinstance checks through Parameter's metaclass
included: 1.45 µs an assignment against 0.13 µs for a plain one on a 2-core Xeon, ~0.06 ms a step,
a tenth of Lightning's whole fixed cost per step there (docs/BENCHMARKS.md, "Framework
efficiency"). The names below only ever hold a string, None or a tuple of a detached tensor and
an int, never a parameter, buffer or module, so a plain assignment stores exactly what
nn.Module's would; anything else still takes nn.Module's path. No Lightning or torch setting
does this; hence by hand.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor
from torch.nn import Module

# Lightning's hook name (set around every hook call) and segperf's unlogged step loss
# (segperf.model.step_logging, set every step)
PLAIN_ATTRIBUTES = frozenset({"_current_fx_name", "_unlogged_loss"})


class PlainHookState:
    """Mixin for a LightningModule, listed before it: the per-step bookkeeping attributes in
    PLAIN_ATTRIBUTES are assigned as plain attributes."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in PLAIN_ATTRIBUTES and not isinstance(value, (Tensor, Module)):
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)
