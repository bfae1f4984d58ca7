"""PerfMonitor in a long run: the closed part of the timeline folded into totals every
CHUNK_STEPS steps past the first HEAD_STEPS, so that its memory and results.json stay the same
size however long the run (segperf.perf.folding says what is kept and how exactly).

A fold happens at the start of a training step's batch (PerfMonitor's on_train_batch_start),
outside validation, after warm-up. It cuts the timeline at the start of that batch's fetch: every
folded step ended before it, and an interval still open there (a checkpoint save, a logger's
write) is cut in two, each side counted with its own window.
"""

from __future__ import annotations

from collections.abc import Callable

from segperf.callbacks.allreduce_wait import AllReduceWait
from segperf.callbacks.collective_wait import CollectiveWait
from segperf.callbacks.phase_clock import PhaseClock
from segperf.callbacks.resource_monitor import ResourceMonitor
from segperf.perf.folding import CHUNK_STEPS, HEAD_STEPS, Folded
from segperf.perf.phases import FETCH_ACTION, STEP_ACTION, Interval, account_phases, phase_of_action, split_steps
from segperf.perf.ranks import PARTS, step_parts, step_values


class RunFolder:
    def __init__(self, clock: PhaseClock, head_steps: int = HEAD_STEPS, chunk_steps: int = CHUNK_STEPS) -> None:
        self.clock = clock
        self.folded = Folded()
        self.head_steps, self.chunk_steps = head_steps, chunk_steps

    @property
    def head(self) -> int:
        """Steps held from the start: the warm-up, the start-up queue, the steady state's start."""
        return max(self.head_steps, 2 * self.clock.warmup_steps)

    def step_parts(self, allreduce: AllReduceWait | None, collectives: CollectiveWait | None = None) -> dict:
        """The run's per-step parts after warm-up: the held steps' and the folded totals
        (segperf.perf.ranks.step_parts), the all-reduce's last buckets and the waits where the
        ranks meet where they were timed."""
        clock = self.clock
        waits = [end - start for start, end in clock.intervals().get(FETCH_ACTION, [])]
        last_bucket = allreduce.last_bucket if allreduce is not None else None
        meetings = collectives.per_step() if collectives is not None else None
        return step_parts(
            waits, clock.step_times, clock.backward, last_bucket, clock.warmup_steps, self.folded.parts, meetings
        )

    def due(self) -> bool:
        clock = self.clock
        held = len(clock.step_times)
        return held >= self.head + self.chunk_steps and clock.tap is not None and "warmup_end" in clock.marks

    def fold(
        self,
        run_start: float,
        phase_intervals: Callable[[dict[str, list[Interval]], tuple[float, float]], dict[str, list[Interval]]],
        resources: ResourceMonitor | None,
        allreduce: AllReduceWait | None,
        collectives: CollectiveWait | None = None,
    ) -> bool:
        """Fold the held steps past the head; False (nothing folded) where the profiled fetches and
        steps are not one each per step (a loop this does not know: everything is kept)."""
        clock, folded = self.clock, self.folded
        tap = clock.tap
        head, upto = self.head, len(clock.step_times)
        fetches, steps = tap.intervals.get(FETCH_ACTION, []), tap.intervals.get(STEP_ACTION, [])
        if len(fetches) != upto + 1 or len(steps) != upto:
            return False
        until = fetches[upto][0]
        start = folded.until if folded.until is not None else run_start
        table = account_phases(phase_intervals(clock.intervals(), (start, until)), (start, until))
        if resources is not None:
            resources.fold(table.windows)
        taken = tap.fold(until, {FETCH_ACTION: (head, upto), STEP_ACTION: (head, upto)})
        calls: dict[str, int] = {}
        for action, spans in taken.items():
            phase = phase_of_action(action)
            if phase is not None and spans:
                calls[phase] = calls.get(phase, 0) + len(spans)
        folded.add_phases(table.phases, calls)
        held = clock.fold(head, upto)
        buckets = allreduce.fold(head, upto) if allreduce is not None else None
        meetings = collectives.fold(head, upto) if collectives is not None else None
        waits = [end - begin for begin, end in taken[FETCH_ACTION]]
        folded.wait.add(waits)
        folded.step.add([end - begin for begin, end in taken[STEP_ACTION]])
        folded.add_split(split_steps(taken[STEP_ACTION], held["backward"], 0))
        values = step_values(waits, held["step_times"], held["backward"], buckets, 0, meetings)
        for part in PARTS:
            folded.add_part(part, values[part])
        if held["events"]:
            split = clock.device_split(0, held["events"]) or {}
            for part, seconds in split.items():
                folded.device_split_s[part] = folded.device_split_s.get(part, 0.0) + seconds
            folded.device_step.add(clock.device_step_times(held["events"]))
        folded.steps += upto - head
        folded.until = until
        return True
