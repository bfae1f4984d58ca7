"""A calibration study's tables: calibration.md (printed too) and calibration.json."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from segperf.perf.decision import Noise
from segperf.perf.results import write_json_atomic, write_text_atomic
from segperf.tune.calibrate.study import claims, coverage, decisions, final_labels, table
from segperf.tune.probe import Config


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
