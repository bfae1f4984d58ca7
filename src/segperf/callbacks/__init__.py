"""Every Lightning callback segperf has, one a file.

The measurement, `PerfMonitor` (perf_monitor), usable in any Trainer. Its parts are its own,
used through it and not exported here: the phase clock (phases, jitter, the train_step split, the
sample rate; phase_clock, with the profiler tap in profiler_tap), the resource monitor (CPU, RSS,
GPU; resource_monitor), the MFU monitor (FLOPs per sample and MFU; mfu_monitor), the all-reduce
wait (allreduce_wait), a long run's folding (long_run) and the per-rank gather (rank_gather).
On request: `OperatorProfile` (profile=ops; ops_profile) and
`HardwareCounters` (profile=counters; hardware_counters). A run's safety: `InterruptCheckpoint`
(interrupt_checkpoint) and `TerminateOutsideTraining` (terminate_outside_training). On a CPU,
`ShareCores` (share_cores) leaves busy DataLoader workers their cores; `ValidationMetrics`
(validation_metrics) keeps every validation's logged metrics, for any module. The tuner
adds two to its probes: `ScreenOut` (screen_out) and `HardTimeLimit` (hard_time_limit). The
measurement maths they call has no Lightning in it and lives in segperf.perf.
"""

from segperf.callbacks.hardware_counters import HardwareCounters
from segperf.callbacks.interrupt_checkpoint import InterruptCheckpoint
from segperf.callbacks.ops_profile import OperatorProfile
from segperf.callbacks.perf_monitor import PerfMonitor
from segperf.callbacks.share_cores import ShareCores
from segperf.callbacks.terminate_outside_training import Terminated, TerminateOutsideTraining
from segperf.callbacks.validation_metrics import ValidationMetrics

__all__ = [
    "HardwareCounters",
    "InterruptCheckpoint",
    "OperatorProfile",
    "PerfMonitor",
    "ShareCores",
    "TerminateOutsideTraining",
    "Terminated",
    "ValidationMetrics",
]
