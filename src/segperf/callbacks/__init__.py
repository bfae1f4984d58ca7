"""Every Lightning callback segperf has, one a file.

The measuring set, `PerfMonitor` (perf_monitor), usable in any Trainer: `PhaseClock` (phases,
jitter, the train_step split, the sample rate; phase_clock, with the profiler tap in
profiler_tap), `ResourceMonitor` (CPU, RSS, GPU; resource_monitor) and `MfuMonitor` (FLOPs per
sample and MFU; mfu_monitor). On request: `OperatorProfile` (profile=ops; ops_profile) and
`HardwareCounters` (profile=counters; hardware_counters). A run's safety: `InterruptCheckpoint`
(interrupt_checkpoint) and `TerminateOutsideTraining` (terminate_outside_training). On a CPU,
`ShareCores` (share_cores) leaves busy DataLoader workers their cores; `ValidationMetrics`
(validation_metrics) keeps every validation's logged metrics, for any module. The tuner
adds two to its probes: `ScreenOut` (screen_out) and `HardTimeLimit` (hard_time_limit). The
measurement maths they call has no Lightning in it and lives in segperf.perf.
"""

from segperf.callbacks.hardware_counters import HardwareCounters
from segperf.callbacks.interrupt_checkpoint import InterruptCheckpoint
from segperf.callbacks.mfu_monitor import MfuMonitor
from segperf.callbacks.ops_profile import OperatorProfile
from segperf.callbacks.perf_monitor import PerfMonitor
from segperf.callbacks.phase_clock import PhaseClock
from segperf.callbacks.resource_monitor import ResourceMonitor
from segperf.callbacks.share_cores import ShareCores
from segperf.callbacks.terminate_outside_training import Terminated, TerminateOutsideTraining
from segperf.callbacks.validation_metrics import ValidationMetrics

__all__ = [
    "HardwareCounters",
    "InterruptCheckpoint",
    "MfuMonitor",
    "OperatorProfile",
    "PerfMonitor",
    "PhaseClock",
    "ResourceMonitor",
    "ShareCores",
    "TerminateOutsideTraining",
    "Terminated",
    "ValidationMetrics",
]
