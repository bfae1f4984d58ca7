"""The decision rule's rates, simulated: how often segperf calls equal configurations
distinguishable, how often it finds a real difference, and how often its 95% interval covers the
true ratio.

    python scripts/decision_rule_rates.py --seed 0 --trials 4000 --out outputs/decision-rule-rates.json

Every simulated sweep is decided by segperf's own rule, as the report decides a real one: the
run-to-run noise pooled over all the sweep's configurations (`segperf.perf.decision.pooled_noise`),
then each configuration compared with the baseline (`segperf.perf.decision.compare_throughput`).
Nothing here re-implements it, so the rates are the rates of the code users run.

The pooled rule's rates depend on the sweep a pair sits in (more configurations, more degrees of
freedom in the pool), so every row says how many configurations its sweeps have:

- pairs (the rows of the table measured under the earlier Welch rule): a baseline at 2.0 images/s
  and one configuration compared with it, alone (a sweep of two: also what `segperf.compare` decides
  for two sets of runs) or with the sweep's other configurations drawn like the baseline;
- the fidelity issue's sweep: 3% log-normal noise, one configuration (a different one each sweep,
  the baseline included) twice as noisy, a share of runs 10-25% slow, one configuration 1.3x faster;
  every other configuration compared with the first, as the report does.

Each rate comes with its Monte-Carlo uncertainty: ± 1.96 standard errors over the simulated sweeps
(comparisons of one sweep share its pool and its baseline, so a sweep, not a comparison, is the
independent unit); when no trial (or every trial) made a call, ± is the rule of three, 3 / trials.
Prints Markdown tables and writes everything to --out as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from segperf.perf.decision import LEVEL, compare_throughput, pooled_noise

BASE_RATE = 2.0  # images/s of a simulated baseline (the rates are ratios: any value gives the same)
Z95 = 1.96


@dataclass(frozen=True)
class Rate:
    """A share of `comparisons` (over `trials` simulated sweeps), with its 95% Monte-Carlo ± in the same unit."""

    value: float
    plus_minus: float
    comparisons: int
    trials: int


@dataclass(frozen=True)
class PairScenario:
    """A configuration `shift` times as fast as the baseline; log-normal noise of `noise` (the
    compared one), `baseline_noise` (the baseline and the sweep's other configurations); `skewed`:
    instead of log-normal noise, occasional slow runs, rate x (1 - 0.03 Exp(1))."""

    label: str
    shift: float
    noise: float
    baseline_noise: float
    skewed: bool = False


PAIRS = [
    PairScenario("equal, 4% noise on all: called distinguishable", 1.0, 0.04, 0.04),
    PairScenario("equal, 8% noise on the compared one, 2% on the baseline and the rest: called distinguishable",
                 1.0, 0.08, 0.02),
    PairScenario("equal, skewed noise (occasional slow runs: 2.0 × (1 − 0.03·Exp(1))): called distinguishable",
                 1.0, 0.0, 0.0, skewed=True),
    PairScenario("1.5× faster, 3% noise: found", 1.5, 0.03, 0.03),
    PairScenario("1.5× faster, 5% noise: found", 1.5, 0.05, 0.05),
    PairScenario("1.5× faster, 8% noise: found", 1.5, 0.08, 0.08),
    PairScenario("1.1× faster, 5% noise: found", 1.1, 0.05, 0.05),
]  # fmt: skip

SWEEP_NOISE, SWEEP_SHIFT, SWEEP_OUTLIER_SLOWDOWN = 0.03, 1.3, (0.10, 0.25)


@dataclass
class Tally:
    """Per simulated sweep: how many comparisons of equal configurations it made and called
    distinguishable, of truly different ones and found (distinguishable, the right way), and
    of all, whose interval covered the true ratio."""

    equal: list[int]
    false_calls: list[int]
    different: list[int]
    found: list[int]
    compared: list[int]
    covered: list[int]

    @classmethod
    def empty(cls) -> Tally:
        return cls([], [], [], [], [], [])

    def add_sweep(self, groups: list[list[float]], truths: list[float], compared: range) -> None:
        """Decide configurations `compared` of `groups` against the first, with the noise pooled over
        all of them, as the report does; `truths[j]` is configuration j's true ratio to the first."""
        noise = pooled_noise(groups)
        counts = dict.fromkeys(("equal", "false_calls", "different", "found", "compared", "covered"), 0)
        for j in compared:
            test = compare_throughput(groups[j], groups[0], noise)
            truth = truths[j]
            counts["compared"] += 1
            counts["covered"] += test.low <= truth <= test.high
            if truth == 1.0:
                counts["equal"] += 1
                counts["false_calls"] += bool(test.distinguishable)
            else:
                counts["different"] += 1
                counts["found"] += bool(test.distinguishable and (test.ratio > 1) == (truth > 1))
        for name, count in counts.items():
            getattr(self, name).append(count)


def share(hits: list[int], totals: list[int]) -> Rate | None:
    """sum(hits) / sum(totals) with ± 1.96 standard errors over trials (a ratio estimator: each
    trial a cluster of comparisons); None when there were no such comparisons."""
    trials, total = len(totals), sum(totals)
    if total == 0:
        return None
    value = sum(hits) / total
    per_trial = np.array(totals, dtype=float)
    residual = np.array(hits, dtype=float) - value * per_trial
    se = math.sqrt(trials / max(trials - 1, 1) * float(np.sum(residual**2))) / total
    plus_minus = Z95 * se if se > 0 else 3.0 / trials  # no call, or every call, in any trial: rule of three
    return Rate(value, plus_minus, total, trials)


Draw = Callable[[np.random.Generator], tuple[list[list[float]], list[float], range]]  # images/s, truths, compared


def simulate(draw: Draw, rng: np.random.Generator, trials: int) -> Tally:
    tally = Tally.empty()
    for _ in range(trials):
        tally.add_sweep(*draw(rng))
    return tally


def pair_draw(scenario: PairScenario, configurations: int, runs: int):
    """A sweep whose configuration 1 is `scenario`'s compared one, 0 the baseline, the rest like it."""
    shifts = np.ones(configurations)
    shifts[1] = scenario.shift
    noise = np.full(configurations, scenario.baseline_noise)
    noise[1] = scenario.noise

    def draw(rng: np.random.Generator):
        if scenario.skewed:
            rates = BASE_RATE * shifts[:, None] * (1 - 0.03 * rng.exponential(1.0, (configurations, runs)))
        else:
            rates = BASE_RATE * shifts[:, None] * np.exp(rng.normal(0.0, 1.0, (configurations, runs)) * noise[:, None])
        return rates.tolist(), shifts.tolist(), range(1, 2)  # only the pair is counted; the rest feed the pool

    return draw


def issue_sweep_draw(configurations: int, runs: int, outliers: float):
    """The fidelity issue's sweep (as tests/test_stats.py simulates it): 3% log-normal noise, one
    configuration twice as noisy, a share `outliers` of runs 10-25% slow, one (not the baseline) 1.3x faster."""

    def draw(rng: np.random.Generator):
        noise = np.full(configurations, SWEEP_NOISE)
        noise[rng.integers(configurations)] *= 2
        shifts = np.ones(configurations)
        shifts[rng.integers(1, configurations)] = SWEEP_SHIFT
        logs = np.log(BASE_RATE * shifts)[:, None] + rng.normal(0.0, 1.0, (configurations, runs)) * noise[:, None]
        slow = rng.random((configurations, runs)) < outliers
        logs -= slow * rng.uniform(*SWEEP_OUTLIER_SLOWDOWN, (configurations, runs))
        return np.exp(logs).tolist(), shifts.tolist(), range(1, configurations)

    return draw


def cell_rng(seed: int, *key: int) -> np.random.Generator:
    """One generator per table cell, keyed by what the cell is, so a cell's rates do not change when
    other cells are added or left out."""
    return np.random.default_rng([seed, *key])


def pair_rows(args) -> list[dict]:
    rows = []
    for configurations in args.pair_configurations:
        for index, scenario in enumerate(PAIRS):
            for runs in args.runs:
                rng = cell_rng(args.seed, 1, index, configurations, runs)
                tally = simulate(pair_draw(scenario, configurations, runs), rng, args.trials)
                equal = scenario.shift == 1.0
                measured = share(tally.false_calls, tally.equal) if equal else share(tally.found, tally.different)
                rows.append({
                    "table": "pairs", "scenario": scenario.label, "configurations": configurations, "runs": runs,
                    "true_ratio": scenario.shift,
                    "measured": "called distinguishable" if equal else "found",
                    "rate": asdict(measured), "coverage": asdict(share(tally.covered, tally.compared)),
                })  # fmt: skip
    return rows


def sweep_rows(args) -> list[dict]:
    rows = []
    for configurations in args.sweep_configurations:
        for outliers in sorted({args.outliers, 0.0}, reverse=True):  # with slow runs, and without
            for runs in args.runs:
                rng = cell_rng(args.seed, 2, configurations, round(outliers * 1000), runs)
                tally = simulate(issue_sweep_draw(configurations, runs, outliers), rng, args.trials)
                rows.append({
                    "table": "sweeps", "configurations": configurations, "runs": runs, "outliers": outliers,
                    "false_calls": asdict(share(tally.false_calls, tally.equal)),
                    "coverage": asdict(share(tally.covered, tally.compared)),
                    "found": asdict(share(tally.found, tally.different)),
                })  # fmt: skip
    return rows


def percent(rate: dict) -> str:
    """A rate as the docs print it: 4.6% ±0.7 (points); 100% when every trial found it."""
    if rate["value"] in (0.0, 1.0):
        return f"{rate['value']:.0%} ±{100 * rate['plus_minus']:.2f}"
    digits = 2 if rate["plus_minus"] < 0.001 else 1
    return f"{rate['value']:.{digits}%} ±{100 * rate['plus_minus']:.{digits}f}"


def markdown(result: dict) -> str:
    runs = result["runs"]
    lines = []
    pairs = [row for row in result["rows"] if row["table"] == "pairs"]
    for configurations in result["pair_configurations"]:
        where = (
            f"in a sweep of {configurations} configurations (the {configurations - 2} others drawn like the baseline)"
        )
        if configurations == 2:
            where = "alone (a sweep of two configurations)"
        lines += [
            f"Pairs {where}; {result['trials']} sweeps a cell. Each cell: the rate, and how often the 95% interval"
            " covered the true ratio.",
            "",
            "| pairs of configurations (2.0 images/s) | " + " | ".join(f"{r} runs each" for r in runs) + " |",
            "|---|" + "---:|" * len(runs),
        ]
        for scenario in PAIRS:
            cells = {row["runs"]: row for row in pairs if row["configurations"] == configurations
                     and row["scenario"] == scenario.label}  # fmt: skip
            lines.append(f"| {scenario.label} | " + " | ".join(
                f"{percent(cells[r]['rate'])} (covers {cells[r]['coverage']['value']:.1%})" for r in runs
            ) + " |")  # fmt: skip
        lines.append("")
    lines += [
        f"The fidelity issue's sweeps: {SWEEP_NOISE:.0%} log-normal noise, one configuration twice as noisy, one "
        f"{SWEEP_SHIFT}× faster, every configuration compared with the first; {result['trials']} sweeps a cell.",
        "",
        "| configurations | slow runs | runs a side | equal called distinguishable (≤ 5%) "
        f"| 95% intervals cover the true ratio (≥ 93%) | {SWEEP_SHIFT}× found (≥ 90%) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in (row for row in result["rows"] if row["table"] == "sweeps"):
        lines.append(
            f"| {row['configurations']} | {row['outliers']:.0%} | {row['runs']} | {percent(row['false_calls'])} "
            f"| {percent(row['coverage'])} | {percent(row['found'])} |"
        )
    return "\n".join(lines)


def positive_list(kind: type, least: int):
    def parse(text: str):
        values = [kind(v) for v in text.split(",") if v.strip()]
        if not values or any(v < least for v in values):
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of values >= {least}, got {text!r}")
        return values

    return parse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trials", type=int, default=4000, help="simulated sweeps per table cell")
    parser.add_argument("--out", type=Path, help="write every rate to this JSON file")
    parser.add_argument("--runs", type=positive_list(int, 2), default=[2, 3, 5], help="runs a side, e.g. 2,3,5")
    parser.add_argument(
        "--pair-configurations",
        type=positive_list(int, 2),
        default=[2, 4],
        help="sizes of the sweeps the pairs sit in (2: the pair alone)",
    )
    parser.add_argument(
        "--sweep-configurations",
        type=positive_list(int, 3),
        default=[4, 8],
        help="sizes of the issue's sweeps (at least 3: one equal and one faster configuration)",
    )
    parser.add_argument("--outliers", type=float, default=0.05, help="share of the issue's sweeps' runs 10-25%% slow")
    args = parser.parse_args(argv)
    if args.trials < 2:
        parser.error(f"--trials {args.trials}: at least 2 simulated sweeps are needed for an uncertainty")
    if not 0.0 <= args.outliers < 1.0:
        parser.error(f"--outliers {args.outliers}: a share of runs from 0 to below 1 (0.05 is one run in twenty)")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    result = {
        "rule": "segperf.perf.decision.compare_throughput with segperf.perf.decision.pooled_noise over the sweep",
        "level": LEVEL, "seed": args.seed, "trials": args.trials, "runs": args.runs,
        "pair_configurations": args.pair_configurations, "sweep_configurations": args.sweep_configurations,
        "rows": pair_rows(args) + sweep_rows(args),
    }  # fmt: skip
    print(markdown(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
