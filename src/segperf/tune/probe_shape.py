"""A run that failed for the shape the tuner gave it, told apart from a configuration that fails.

The tuner runs a user's module in shapes of its own: a probe's run size (it may pass the end of the
user's training split), one small validation at its end, no checkpoint callback, a time limit. A
module or callback that reads what a real run has by then (ReduceLROnPlateau or EarlyStopping on
`val/loss` at an epoch's end, ModelCheckpoint(monitor=...)) stops such a run with a Lightning
error that says nothing about the configuration measured: "ReduceLROnPlateau conditioned on metric
val/loss which is not available". segperf.callbacks.epoch_end_validation prevents the known case;
any run that still fails so is run once more in the shape of the user's own run (their
`val_every_images`, the checkpoint callback kept; SteadyProbe leaves validation pauses out of its
rate), and when that fails too it is the tuner's own problem (`Probe.tuners_own`), reported as such
and never counted against the configuration. An out-of-memory, an unsupported setting or any
other failure stays the configuration's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from segperf.command_line import override_key
from segperf.tune.probe import Probe

# Lightning's words for a metric read before a validation logged it
SYMPTOMS = (
    # ReduceLROnPlateau (lr_scheduler_configs' `monitor`) and EarlyStopping(strict=True)
    re.compile(r"conditioned on metric \S+ which is not available"),
    # ModelCheckpoint(monitor=...) after a validation ran without it
    re.compile(r"could not find the monitored key"),
)
# what a probe changes of the user's own run that the retry gives back: its validation interval and
# the checkpoint callback (segperf.tune.runner; conf/tune.yaml tune.probe.overrides)
PROBE_ONLY = ("val_every_images", "callbacks.last_checkpoint")


def failed_for_its_shape(probe: Probe) -> bool:
    """Whether `probe` failed with a symptom of the tuner's run shape rather than of its configuration."""
    return probe.failed is not None and not probe.cut and any(s.search(probe.failed) for s in SYMPTOMS)


def users_shape(overrides: Sequence[str], val_every_images: int) -> list[str]:
    """A probe's command line in the shape of the user's own run: their validation interval and the
    run's checkpoint callback, the probe's size, time limit and steady-state timing kept."""
    kept = [o for o in overrides if override_key(o) not in PROBE_ONLY]
    return [*kept, f"val_every_images={val_every_images}"]


def settled(first: Probe, again: Probe) -> Probe:
    """The probe that stands for a run retried in the user's shape: the retry's, charged with both
    runs' wall time; the tuner's own problem when the retry failed for its shape too."""
    again = replace(again, wall_s=first.wall_s + again.wall_s)
    if not failed_for_its_shape(again):
        return again
    return replace(
        again,
        tuners_own=True,
        failed=f"the tuner's run shape, not this configuration: {again.failed} (also in the run's own validation "
        "interval; please report it)",
    )
