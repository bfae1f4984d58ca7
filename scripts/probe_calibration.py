"""How far a tuner's probe can be trusted: for the configurations a tune visited, its probes
against long runs of the same configurations, interleaved.

    python scripts/probe_calibration.py multirun/<date>/tune-<time> --rounds 2 --long-steps 64 \\
        --out outputs/probe-calibration

For each configuration a finished tune measured (the start, each preset, every candidate and best
of its steps, the tuned one; its tune.json), each round runs one probe exactly as the tuner runs
it (segperf.tune.runner.LaunchMeasure's job: SteadyProbe, the same size and settings, no time
limit, no screening) and one long run of `--long-steps` (64) steps after the warm-up
(`train.images_per_s`, PerfMonitor's rate), one configuration after another, A-probe A-long
B-probe B-long ..., so that both see the machine in the same minutes. It writes, as Markdown
(printed and `calibration.md`) and JSON (`calibration.json`):

- per configuration: the probes' and the long runs' images/s (geometric means), their ratio, and
  whether that is within ±15% (the issue's bar: for at least 80% of the configurations);
- per decision of the tune with an interval: the ratio the long runs give for its two sides and
  whether the tune's printed interval contains it (the coverage; the bar: at least 90%);
- the tune's claims (each final configuration against the start, the tuned one against the fastest
  other) against their long runs, with `--claim-rounds` (3) long runs of each final configuration
  (the study's own rounds count; the missing ones are run after them, interleaved), and whether the
  tuned configuration reaches 0.90x of the fastest other (geometric means).

It also records this machine's later-run noise (segperf.tune.later_noise): how much one run's
images/s scattered between the study's runs of a configuration, the larger of its probes' and its
long runs' pooled noise. The next tune on this machine counts it in the intervals it prints.

The long runs are ordinary training runs (`python -m segperf.train`), run one at a time in this
process's folder `--out`; nothing of the tune is changed. A study of a 10-minute tune's ~20
configurations at 2 rounds takes about an hour on 2 cores: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from scipy import stats

from segperf.perf.decision import Noise, pooled_noise
from segperf.perf.results import write_json_atomic, write_text_atomic
from segperf.tune import later_noise
from segperf.tune.probe import Config
from segperf.tune.runner import LaunchMeasure, merged, probe_from_results
from segperf.tune.side_by_side import final_table, full_rates, tuned_against_presets

WITHIN = 0.15  # a probe within ±15% of the long run's images/s counts as calibrated


def visited(record: dict[str, Any]) -> dict[str, Config]:
    """The configurations a tune measured for speed, by label (what they change on the start), in
    the order first met: the final side by side's, then every step's two sides."""
    result = record["result"]
    start = tuple(result.get("start") or ())
    found: dict[str, Config] = {}

    def add(config: Sequence[str]) -> None:
        config = tuple(config)
        changed = " ".join(o for o in config if o not in set(start)) or "start"
        found.setdefault(changed, config)

    for config in (result.get("final_configs") or {}).values():
        add(config)
    for step in result.get("steps") or []:
        if step.get("stage") == "quality":
            continue
        if step.get("candidate_probes") or step.get("against_probes"):
            add(step["against"])
            add(step["candidate"])
    return {label: config for label, config in found.items() if config not in never_ran(record)}


def never_ran(record: dict[str, Any]) -> set[Config]:
    """The configurations every probe of which the tune cut at its time limit or saw fail (fp16
    emulated on a CPU: minutes a step): the tune has no rate of theirs to calibrate, and a study
    run of one, without the tune's time limit, could take an hour."""
    ran: dict[Config, bool] = {}
    for config, probes in speed_sides(record):
        for probe in probes:  # an empty record of a probe says nothing against it
            finished = not probe or (probe.get("images_per_s") is not None and not probe.get("cut"))
            ran[config] = ran.get(config, False) or finished
    return {config for config, finished in ran.items() if not finished}


def speed_sides(record: dict[str, Any]) -> Iterator[tuple[Config, list[dict[str, Any]]]]:
    """Each side of each speed comparison the tune recorded: its configuration and the probes it
    was decided on (every probe of that run so far, in order)."""
    for step in record["result"].get("steps") or []:
        if step.get("stage") == "quality":
            continue
        for side in ("candidate", "against"):
            yield tuple(step[side]), step.get(f"{side}_probes") or []


def decisions(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The tune's decisions that printed an interval: the two sides' configurations, the ratio and
    interval it printed (where a later run falls), the interval of the tune's own minutes it decided
    on (the printed one in a record from before the two differed), its verdict."""
    return [
        {
            "stage": step["stage"],
            "axis": step["axis"],
            "candidate": tuple(step["candidate"]),
            "against": tuple(step["against"]),
            "ratio": step.get("ratio"),
            "low": step["low"],
            "high": step["high"],
            "own": [step.get("tune_low") or step["low"], step.get("tune_high") or step["high"]],
            "verdict": step.get("verdict"),
        }
        for step in record["result"].get("steps") or []
        if step.get("stage") != "quality" and step.get("low") is not None and step.get("high") is not None
    ]


def geomean(values: Sequence[float | None]) -> float | None:
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def table(configs: dict[str, Config], probes: dict[str, list], longs: dict[str, list]) -> list[dict[str, Any]]:
    """One row per configuration: the probes' and the long runs' geometric mean images/s and their ratio."""
    rows = []
    for label in configs:
        probe, long = geomean(probes.get(label, [])), geomean(longs.get(label, []))
        ratio = probe / long if probe and long else None
        rows.append(
            {
                "configuration": label,
                "probe_images_per_s": probe,
                "long_images_per_s": long,
                "probe_over_long": ratio,
                "within": None if ratio is None else abs(ratio - 1) <= WITHIN,
                "probes": probes.get(label, []),
                "long_runs": longs.get(label, []),
            }
        )
    return rows


def coverage(
    found: list[dict[str, Any]],
    configs: dict[str, Config],
    longs: dict[str, list],
    level: float = 0.95,
    noise: Noise | None = None,
) -> list[dict[str, Any]]:
    """Each decision with the ratio the long runs give for its two sides, whether its printed
    interval holds it (`covered`), and whether the printed ratio agrees with it within both sides'
    noise (`consistent`: the long runs' ratio is itself an estimate, see `consistent`)."""
    by_config = {config: label for label, config in configs.items()}
    noise = noise or long_noise(longs)
    rows = []
    for decision in found:
        a, b = by_config.get(decision["candidate"]), by_config.get(decision["against"])
        long_a, long_b = geomean(longs.get(a, [])), geomean(longs.get(b, []))
        truth = long_a / long_b if long_a and long_b else None
        covered = None if truth is None else decision["low"] <= truth <= decision["high"]
        runs = (len(_rated(longs.get(a, []))), len(_rated(longs.get(b, []))))
        own = decision.get("own") or (decision["low"], decision["high"])
        agrees = consistent(decision["ratio"], *own, truth, runs, noise, level)
        rows.append(
            {**decision, "candidate": a, "against": b, "long_ratio": truth, "covered": covered, "consistent": agrees}
        )
    return rows


def long_noise(longs: dict[str, list]) -> Noise | None:
    """The long runs' run-to-run noise: the variance of log images/s about each configuration's
    mean, pooled over every configuration with two or more (segperf.perf.decision.pooled_noise)."""
    return pooled_noise([_rated(runs) for runs in longs.values()])


def consistent(
    ratio: float | None,
    low: float | None,
    high: float | None,
    truth: float | None,
    runs: tuple[int, int],
    noise: Noise | None,
    level: float,
) -> bool | None:
    """Whether a printed ratio and the long runs' ratio differ by less than both estimates' noise
    allows: |log printed - log long| <= z x sqrt(se_printed^2 + se_long^2), where se_printed is the
    half-width in logs over z (the normal quantile at `level`; the tune's t quantile is larger, so
    this overstates se_printed a little) of the tune's own interval, `low`-`high` (of its minutes,
    not the printed one, which adds a later run's scatter), and se_long is the long runs' pooled
    noise over `runs` runs a side. Why beside `covered`: with two long runs a side the long
    runs' ratio scatters by about as much as a tune's interval is wide, so an interval that is
    right about the ratio misses the long runs' estimate of it about a third of the time."""
    if None in (ratio, low, high, truth) or noise is None or min(runs) < 1:
        return None
    z = stats.norm.ppf(0.5 + level / 2)
    se_printed = math.log(high / low) / (2 * z)
    se_long = math.sqrt(noise.variance * (1 / runs[0] + 1 / runs[1]))
    return bool(abs(math.log(ratio / truth)) <= z * math.hypot(se_printed, se_long))


def tune_noise(record: dict[str, Any]) -> Noise | None:
    """The run-to-run noise of the tune's own speed probes (its full runs, pooled over every
    configuration it measured twice or more): the noise its printed intervals were made with."""
    result = record["result"]
    final = [
        (tuple((result.get("final_configs") or {}).get(name) or ()), probes)
        for name, probes in (result.get("final") or {}).items()
    ]
    longest: dict[Config, list[dict[str, Any]]] = {}  # a run's probes accumulate: its longest list has them all
    for config, probes in [*speed_sides(record), *final]:
        if len(probes) > len(longest.get(config, [])):
            longest[config] = probes
    return pooled_noise([full_rates(probes) for probes in longest.values()])


def _rated(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v]


def final_labels(configs: dict[str, Config], record: dict[str, Any]) -> dict[str, str]:
    """The final side by side's names (start, each preset, tuned) -> their labels in `configs`."""
    by_config = {config: label for label, config in configs.items()}
    final = record["result"].get("final_configs") or {}
    return {name: by_config[tuple(config)] for name, config in final.items() if tuple(config) in by_config}


def claims(
    record: dict[str, Any], names: dict[str, str], longs: dict[str, list], noise: Noise | None = None
) -> dict[str, Any]:
    """The tune's printed claims (segperf.tune.report: each final configuration against the start,
    the tuned one against the fastest other) beside the ratios of the long runs' geometric means,
    and the tuned configuration against the fastest other by the long runs alone (the bar: 0.90x)."""
    level = float(record.get("settings", {}).get("level") or 0.95)
    noise = noise or long_noise(longs)
    rate = {name: geomean(longs.get(label, [])) for name, label in names.items()}
    count = {name: len(_rated(longs.get(label, []))) for name, label in names.items()}
    rows = []
    for row in final_table(record["result"], level):
        if row["name"] == "start" or row["vs_start"] is None:
            continue
        low, high = row["vs_start_interval"]
        truth = rate[row["name"]] / rate["start"] if rate.get(row["name"]) and rate.get("start") else None
        covered = None if truth is None or low is None else low <= truth <= high
        sides = (count[row["name"]], count["start"])
        rows.append(
            {
                "claim": f"{row['name']} vs start",
                "ratio": row["vs_start"],
                "low": low,
                "high": high,
                "long_ratio": truth,
                "covered": covered,
                "consistent": consistent(row["vs_start"], *row["vs_start_own_interval"], truth, sides, noise, level),
            }
        )
    printed = tuned_against_presets(record["result"], level)
    others = {n: r for n, r in rate.items() if n not in ("tuned", "start") and r}
    fastest = max(others, key=others.__getitem__) if others else None
    against = fastest and rate.get("tuned") and rate["tuned"] / others[fastest]
    if printed is not None:
        truth = (
            rate.get("tuned") / rate[printed["against"]] if rate.get("tuned") and rate.get(printed["against"]) else None
        )
        covered = None if truth is None or printed["low"] is None else printed["low"] <= truth <= printed["high"]
        sides = (count.get("tuned", 0), count.get(printed["against"], 0))
        rows.append(
            {
                "claim": f"tuned vs {printed['against']}",
                "ratio": printed["ratio"],
                "low": printed["low"],
                "high": printed["high"],
                "long_ratio": truth,
                "covered": covered,
                "consistent": consistent(printed["ratio"], *printed["own"], truth, sides, noise, level),
            }
        )
    return {
        "rows": rows,
        "long_images_per_s": rate,
        "long_runs": count,
        "fastest_other": fastest,
        "tuned_vs_fastest": against or None,
        "reaches_0_90": None if not against else against >= 0.90,
    }


def claims_markdown(found: dict[str, Any]) -> str:
    lines = ["| claim | printed | long runs | contains it | agrees within both noises |", "|---|---|---:|:-:|:-:|"]
    for row in found["rows"]:
        spread = f" [{row['low']:.2f}-{row['high']:.2f}]" if row["low"] is not None else ""
        truth = "n/a" if row["long_ratio"] is None else f"{row['long_ratio']:.2f}x"
        held, agrees = _mark(row["covered"]), _mark(row.get("consistent"))
        lines.append(f"| {row['claim']} | {row['ratio']:.2f}x{spread} | {truth} | {held} | {agrees} |")
    rates = ", ".join(
        f"{name} {rate:.3g} (x{found['long_runs'][name]})" for name, rate in found["long_images_per_s"].items() if rate
    )
    lines += ["", f"Long runs, geometric mean images/s (runs): {rates}."]
    if found["tuned_vs_fastest"] is not None:
        verdict = "reaches" if found["reaches_0_90"] else "**misses**"
        lines.append(
            f"Tuned against the fastest other ({found['fastest_other']}): {found['tuned_vs_fastest']:.2f}x, "
            f"{verdict} 0.90x."
        )
    return "\n".join(lines) + "\n"


def share(flags: Sequence[bool | None]) -> str:
    known = [f for f in flags if f is not None]
    return f"{sum(known)}/{len(known)} ({sum(known) / len(known):.0%})" if known else "n/a"


def markdown(
    rows: list[dict[str, Any]], covered: list[dict[str, Any]], about: str, noises: dict[str, Noise | None] | None = None
) -> str:
    def num(value: float | None, spec: str = ".3g") -> str:
        return "n/a" if value is None else format(value, spec)

    lines = [about, "", "| configuration | probe images/s | 64+-step images/s | probe / long | within ±15% |"]
    lines.append("|---|---:|---:|---:|:-:|")
    for row in rows:
        within = {True: "yes", False: "**no**", None: "n/a"}[row["within"]]
        lines.append(
            f"| `{row['configuration']}` | {num(row['probe_images_per_s'])} | {num(row['long_images_per_s'])} "
            f"| {num(row['probe_over_long'], '.2f')} | {within} |"
        )
    lines += ["", f"Probes within ±15% of the long runs: {share([r['within'] for r in rows])}.", ""]
    lines += ["| decision | printed | long runs | contains it | agrees within both noises |", "|---|---|---:|:-:|:-:|"]
    for row in covered:
        printed = f"{num(row['ratio'], '.2f')}x [{row['low']:.2f}-{row['high']:.2f}]"
        marks = f"{_mark(row['covered'])} | {_mark(row.get('consistent'))}"
        lines.append(
            f"| {row['stage']} {row['axis']}: `{row['candidate']}` vs `{row['against']}` "
            f"| {printed} | {num(row['long_ratio'], '.2f')}x | {marks} |"
        )
    lines += ["", f"Printed intervals containing the long runs' ratio: {share([r['covered'] for r in covered])}."]
    lines += [
        f"Printed ratios agreeing with the long runs' within both estimates' noise: "
        f"{share([r.get('consistent') for r in covered])}."
    ]
    if noises:
        said = "; ".join(f"{what} {n.relative:.1%} ({n.df} df)" for what, n in noises.items() if n is not None)
        lines += [f"Run-to-run noise of one run's images/s: {said}."]
    return "\n".join(lines) + "\n"


def _mark(flag: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "n/a"}[flag]


class ComposingLoader:
    """What LaunchMeasure asks of Hydra's config loader: a job of conf/tune.yaml, composed."""

    def load_sweep_config(self, master: Any, overrides: list[str]) -> Any:
        return compose_tune(*overrides)


def compose_tune(*overrides: str) -> Any:
    from hydra import compose, initialize_config_dir

    from segperf.command_line import set_up_command
    from segperf.config import CONFIG_DIR

    set_up_command()  # segperf's resolvers and schemas, as the command's entry registers them
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="tune", overrides=list(overrides), return_hydra_config=True)


def jobs(record: dict[str, Any], out: Path, long_steps: int) -> tuple[Callable, Callable]:
    """(probe overrides, long-run overrides) of a configuration, as the tune's own settings make them."""
    start = list(record["result"].get("start") or ())
    master = compose_tune(*start, f"hydra.sweep.dir={out}")
    probe = dict(record.get("settings", {}).get("probe") or master.tune.probe)
    measure = LaunchMeasure(master, ComposingLoader(), None, kind="speed", probe=probe)

    def long(config: Config) -> list[str]:
        overrides = [o for o in measure.job_overrides(config, None) if not o.startswith("+callbacks.tune_probe=")]
        batch = int(compose_tune(*config).batch_size)
        # the steps ShareCores may add to the warm-up on a CPU with workers, as the runner counts them
        sharing = OmegaConf.select(master, "callbacks.share_cores.measure_steps", default=0) or 0
        images = (int(master.warmup_steps) + sharing + long_steps) * batch
        return merged(overrides, [f"train_images={images}", f"val_every_images={images}"])

    return (lambda config: measure.job_overrides(config, None)), long


def train(overrides: list[str], run_dir: Path, timeout: float) -> dict[str, Any]:
    """One `python -m segperf.train` run into `run_dir`; its results.json ({} when it wrote none)."""
    env = {**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1"}
    command = [sys.executable, "-m", "segperf.train", *overrides, f"hydra.run.dir={run_dir}"]
    subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    path = run_dir / "results.json"
    return json.loads(path.read_text()) if path.exists() else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tune_dir", type=Path, help="a finished tune's folder (its tune.json)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of probe + long run (2)")
    parser.add_argument("--long-steps", type=int, default=64, help="timed steps of a long run (64)")
    parser.add_argument(
        "--claim-rounds", type=int, default=3, help="long runs of each final configuration for the claims (3)"
    )
    parser.add_argument("--only", type=int, default=0, help="study only the first N configurations (0: all)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one run may take (1800)")
    parser.add_argument("--out", type=Path, default=Path("outputs/probe-calibration"))
    parser.add_argument(
        "--tables-only", action="store_true", help="run nothing: the tables again from --out's calibration.json"
    )
    args = parser.parse_args(argv)
    record = json.loads((args.tune_dir / "tune.json").read_text())
    configs = visited(record)
    if args.only:
        configs = dict(list(configs.items())[: args.only])
    args.out.mkdir(parents=True, exist_ok=True)
    if args.tables_only:
        done = json.loads((args.out / "calibration.json").read_text())["configurations"]
        probes = {row["configuration"]: row["probes"] for row in done}
        longs = {row["configuration"]: row["long_runs"] for row in done}
        print(write(args, record, configs, probes, longs, study_noises(record, probes, longs)))
        return 0
    probes, longs = measure(args, record, configs)
    noises = study_noises(record, probes, longs)
    print(write(args, record, configs, probes, longs, noises))
    if noise := machine_noise(noises):
        path = later_noise.remember(noise.relative, noise.df, args.out.resolve())
        print(f"This machine's later-run noise: {noise.relative:.1%} ({noise.df} df), recorded in {path}")
    return 0


def study_noises(record: dict[str, Any], probes: dict, longs: dict) -> dict[str, Noise | None]:
    """The run-to-run noise of the tune's own probes, of the study's probes and of its long runs."""
    return {
        "the tune's probes": tune_noise(record),
        "the study's probes": pooled_noise([_rated(v) for v in probes.values()]),
        "the long runs": long_noise(longs),
    }


def machine_noise(noises: dict[str, Noise | None]) -> Noise | None:
    """How much one run scattered between the study's runs of a configuration: the larger of the
    probes' and the long runs' pooled noise (a later run may be either; the safe side is the wider)."""
    found = [n for n in (noises["the study's probes"], noises["the long runs"]) if n is not None]
    return max(found, key=lambda n: n.relative) if found else None


def measure(args: argparse.Namespace, record: dict[str, Any], configs: dict[str, Config]) -> tuple[dict, dict]:
    """The study's runs: `--rounds` rounds of a probe and a long run of each configuration, then the
    final configurations' long runs up to `--claim-rounds`; each configuration's images/s, in order."""
    probe_job, long_job = jobs(record, args.out.resolve(), args.long_steps)
    probes: dict[str, list] = {label: [] for label in configs}
    longs: dict[str, list] = {label: [] for label in configs}
    number = 0
    for round_ in range(args.rounds):
        for index, (label, config) in enumerate(configs.items()):
            for kind, make in (("probe", probe_job), ("long", long_job)):
                run_dir = args.out.resolve() / f"{number}_{kind}_{index}_r{round_}"
                number += 1
                results = train(make(config), run_dir, args.timeout)
                if kind == "probe":  # the tuner's own reading of its probe: the steady state's images/s
                    rate = probe_from_results(config, run_dir).images_per_s if results else None
                    probes[label].append(rate)
                else:
                    rate = (results.get("train") or {}).get("images_per_s")
                    longs[label].append(rate)
                print(f"round {round_ + 1}, {label}: {kind} {'failed' if rate is None else f'{rate:.3g} images/s'}")
    for round_ in range(args.rounds, args.claim_rounds):  # the claims' configurations, interleaved
        for name, label in final_labels(configs, record).items():
            run_dir = args.out.resolve() / f"{number}_long_{name.replace(' ', '_').replace('=', '-')}_r{round_}"
            number += 1
            results = train(long_job(configs[label]), run_dir, args.timeout)
            rate = (results.get("train") or {}).get("images_per_s")
            longs[label].append(rate)
            print(f"round {round_ + 1}, {name}: long {'failed' if rate is None else f'{rate:.3g} images/s'}")
    return probes, longs


def write(
    args: argparse.Namespace,
    record: dict[str, Any],
    configs: dict[str, Config],
    probes: dict,
    longs: dict,
    noises: dict[str, Noise | None],
) -> str:
    """calibration.md and calibration.json in `--out` (each written atomically); the Markdown."""
    rows = table(configs, probes, longs)
    level = float(record.get("settings", {}).get("level") or 0.95)
    covered = coverage(decisions(record), configs, longs, level, noises["the long runs"])
    found = claims(record, final_labels(configs, record), longs, noises["the long runs"])
    machine = record.get("machine") or {}
    about = (
        f"{machine.get('cpu_model', '?')}, {machine.get('cores', '?')} cores (avx512_bf16: "
        f"{machine.get('avx512_bf16')}, amx_bf16: {machine.get('amx_bf16')}), torch {machine.get('torch', '?')}; "
        f"tune `{record.get('command', '?')}`; {args.rounds} rounds, long runs of {args.long_steps} steps."
    )
    text = markdown(rows, covered, about, noises) + "\n" + claims_markdown(found)
    write_text_atomic(args.out / "calibration.md", text)
    noise = {what: None if n is None else {"relative": n.relative, "df": n.df} for what, n in noises.items()}
    data = {"about": about, "configurations": rows, "decisions": covered, "claims": found, "noise": noise}
    write_json_atomic(args.out / "calibration.json", json.loads(json.dumps(data, default=list)))
    return text


if __name__ == "__main__":
    raise SystemExit(main())
