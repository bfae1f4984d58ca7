"""What a comparison can conclude, and the rules that conclude it from the probes of both sides.

Every verdict the tune records is a `Verdict`; its value is the wording tune.json and the report
show. `judge` is the one place the rules live: screened out, cut at the time limit, failed, not
applied, faster or slower beyond noise, or not distinguishable (a tie going to the configuration
that does not compile).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from segperf.perf.decision import Comparison, later_interval
from segperf.tune.probe import Config, median_rate

if TYPE_CHECKING:
    from segperf.tune.search.records import Step


class Verdict(StrEnum):
    KEPT = "kept"
    SLOWER = "rejected: slower"
    SAME = "not distinguishable"
    NOT_APPLIED = "not applied"
    FAILED = "failed"
    SKIPPED = "skipped: budget"
    WORSE = "rejected: quality"
    # its run failed for the tuner's run shape, not for the configuration (segperf.tune.probe_shape)
    UNMEASURED = "not measured: the tuner's problem"


KEPT, SLOWER, SAME = Verdict.KEPT, Verdict.SLOWER, Verdict.SAME
NOT_APPLIED, FAILED, SKIPPED, WORSE = Verdict.NOT_APPLIED, Verdict.FAILED, Verdict.SKIPPED, Verdict.WORSE
UNMEASURED = Verdict.UNMEASURED

EVEN_LATER = "a run made later may find the two even"
UNCOMPILED_TIE = (
    "not distinguishable from the best, which compiles: taken without torch.compile, whose warm-up "
    "costs minutes on a cold cache and whose failure costs a run"
)


def judge(
    step: Step,
    versus: Comparison,
    *,
    runs: int,
    max_runs: int,
    screen_factor: float | None,
    later: float = 0.0,
    within: float = 0.0,
) -> bool:
    """Set `step`'s ratio, verdict and note from `versus` (its two sides compared) and its last
    probe; True when it is decided (no more probes of the candidate). The verdict is of the tune's
    own minutes (`versus`'s interval, kept as tune_low and tune_high: the search takes the faster
    configuration as it measures now); the interval the step prints (low, high) is where a later run
    of each side will put the ratio, counting `later`, this machine's later-run noise, and `within`,
    the tune's own (segperf.perf.decision.later_interval)."""
    step.ratio, step.tune_low, step.tune_high = versus.ratio, versus.low, versus.high
    step.low, step.high = later_interval(versus, later, within)
    last = step.candidate_probes[-1]
    if last.screened:
        best = median_rate(step.against_probes)
        step.ratio = (last.images_per_s / best) if last.images_per_s and best else step.ratio
        # decided by screening, not by an interval around this ratio
        step.low = step.high = step.tune_low = step.tune_high = None
        step.verdict = SLOWER
        step.note = (
            f"screened out after its first timed steps: {last.images_per_s or 0:.3g} images/s, under "
            f"1/{screen_factor:g} of the best's {best or 0:.3g}"
        )
        return True
    if last.cut and runs == 1 and runs < max_runs:
        # its first run: a cut may be a one-time cost (torch.compile's cold cache takes minutes on
        # 2 cores, a warm one seconds), so it runs once more before it is judged
        step.verdict, step.note = SAME, f"cut at the time limit after {last.wall_s:.0f} s on its first run"
        return False
    if last.cut:
        step.verdict = SLOWER
        step.note = f"cut at the time limit after {last.wall_s:.0f} s: judged slower, not measured again"
        return True
    if last.tuners_own:  # not a verdict on the configuration: it stays unmeasured
        step.verdict, step.note = UNMEASURED, last.failed
        return True
    if last.failed is not None or last.images_per_s is None:
        step.verdict, step.note = FAILED, last.failed or "no images/s recorded"
        return True
    # a preset's are taken out of it when adopted; a probe of the preset reused for the preset
    # without them (it ran so) is not a verdict on the candidate
    if last.not_applied and step.stage != "presets" and last.config == step.candidate:
        step.verdict, step.note = NOT_APPLIED, "; ".join(last.not_applied)
        return True
    if versus.distinguishable:
        step.verdict = KEPT if (versus.ratio or 0) > 1 else SLOWER
        if step.low is not None and step.low <= 1 <= step.high:
            step.note = step.note or within_later_noise(step)
        return True
    step.verdict = SAME
    decided = runs >= max_runs
    if decided and step.stage != "presets" and stops_compiling(step.candidate, step.against):
        step.verdict, step.note = KEPT, UNCOMPILED_TIE
    return decided


def within_later_noise(step: Step) -> str:
    """The note of a verdict beyond the tune's noise whose later-run interval holds 1."""
    faster = "faster" if step.verdict == KEPT else "slower"
    return f"{faster} beyond the noise of this tune's minutes ({step.tune_low:.2f}-{step.tune_high:.2f}); {EVEN_LATER}"


def stops_compiling(candidate: Config, against: Config) -> bool:
    """`candidate` is `against` without torch.compile, every other setting the same (a tie then goes
    to the one that does not compile)."""
    differ = set(candidate) ^ set(against)
    return "compile=on" in against and "compile=on" not in candidate and differ <= {"compile=on", "compile=off"}


def ratio_text(versus: Comparison, later: float = 0.0, within: float = 0.0) -> str:
    """`0.93x [0.85-1.02]`: a comparison as a note says it (the interval a later run falls in)."""
    if versus.ratio is None:
        return "not comparable with it"
    low, high = later_interval(versus, later, within)
    spread = f" [{low:.2f}-{high:.2f}]" if low is not None else ""
    return f"{versus.ratio:.2f}x{spread}"
