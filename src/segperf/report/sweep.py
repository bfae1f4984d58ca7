"""Read a finished sweep (or one run) back from its `results.json` files.

`load_sweep` finds the jobs below a sweep folder, in job order, and a `Sweep` groups them into
`Configuration`s: the repeats of one setting (every axis and override but `seed`/`repeat`), each
labelled by what varies across the sweep, and marked `same_as` an earlier one that ran with the
same effective settings (segperf.report.settings). A configuration summarizes a results path over its
completed repeats with segperf.report.stats. Nothing here runs a job; a job that crashed before
writing its results is kept as a failed run, so that a report can name it instead of silently
showing fewer repeats.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from segperf.report.comparability import describe_machine, differences
from segperf.report.settings import bare_key, hashable, mark_same_settings, not_applied, setting_name
from segperf.report.stats import Spread, Stat, spread, summarize

REPEAT_KEYS = {"seed", "repeat"}  # what varies between repeats of one configuration
_JOB_DIR = re.compile(r"^(\d+)(?:_(.*))?$")  # hydra.sweep.subdir: <job-num>_<override_dirname>


class SweepError(Exception):
    """A sweep that cannot be read at all (missing folder, no runs): a one-line message for users."""


def get_path(results: dict, dotted: str) -> Any:
    """`results["a"]["b"]` for "a.b", or None where any level is missing (failed runs lack keys)."""
    node: Any = results
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


_CUT = re.compile(r"~[0-9a-f]{8}$")  # a job folder name cut to length (segperf.config.job_dirname)


def full_override_dirname(path: Path) -> str | None:
    """The whole override list of a job whose folder name was cut, from the job's .hydra/hydra.yaml
    (Hydra writes its `hydra.job.override_dirname` there); None where it cannot be read."""
    try:
        hydra = yaml.safe_load((path / ".hydra" / "hydra.yaml").read_text()) or {}
        value = hydra.get("hydra", {}).get("job", {}).get("override_dirname")
    except (OSError, ValueError, AttributeError, yaml.YAMLError):
        return None
    return value if isinstance(value, str) else None


def parse_overrides(text: str) -> list[tuple[str, str]]:
    """Hydra's override_dirname ("a=1,b.c=x") as pairs; commas inside brackets or escaped stay."""
    items, buf, depth, escaped = [], "", 0, False
    for ch in text:
        if escaped:
            buf, escaped = buf + ch, False
        elif ch == "\\":
            escaped = True
        elif ch == "," and depth == 0:
            items.append(buf)
            buf = ""
        else:
            depth += (ch in "[{(") - (ch in "]})")
            buf += ch
    items.append(buf)
    return [tuple(item.split("=", 1)) for item in items if "=" in item]


@dataclass
class Run:
    """One job of a sweep: its results (empty when it crashed before writing them)."""

    path: Path
    job: int
    name: str
    status: str
    error: str | None
    results: dict
    config_key: tuple
    label: str = "run"
    overrides: tuple = ()  # (key, value) pairs from the dir name, seed/repeat removed
    machine_extra: tuple = ()  # fingerprint fields the sweep's machines differ in, shown in `machine`

    @property
    def ok(self) -> bool:
        return self.status == "completed"

    @property
    def kind(self) -> str:
        return self.results.get("kind") or "train"

    @property
    def machine(self) -> str | None:
        return describe_machine(self.results.get("machine"), self.machine_extra)

    def get(self, dotted: str) -> Any:
        return get_path(self.results, dotted)


def read_run(path: Path, job: int) -> Run:
    """A Run from a run dir; a missing or corrupt results.json makes a failed run saying why."""
    results, error = {}, None
    try:
        results = json.loads((path / "results.json").read_text())
        if not isinstance(results, dict):
            results, error = {}, "results.json is not a JSON object"
    except FileNotFoundError:
        error = "no results.json"
    except (OSError, ValueError) as exc:
        error = f"corrupt results.json: {exc}"
    status = results.get("status") or ("failed" if error or results.get("error") else "completed")
    if status != "completed":
        error = error or results.get("error") or status
    match = _JOB_DIR.match(path.name)
    named = full_override_dirname(path) if _CUT.search(path.name) else None
    named = named if named is not None else (match and match[2]) or ""
    overrides = tuple((k, v) for k, v in parse_overrides(named) if bare_key(k) not in REPEAT_KEYS)
    axes = results.get("axes") if isinstance(results.get("axes"), dict) else {}
    key = tuple((k, hashable(v)) for k, v in axes.items()) + overrides
    job = int(match[1]) if match else job
    return Run(path, job, path.name, status, error, results, key, overrides=overrides)


@dataclass
class Configuration:
    """The repeats of one setting; statistics use only the completed ones."""

    label: str
    key: tuple
    runs: list[Run] = field(default_factory=list)
    same_as: str | None = None  # label of an earlier configuration with the same effective settings
    # every configuration of its sweep (itself included): the run-to-run noise is pooled over them
    peers: list[Configuration] = field(default_factory=list, repr=False, compare=False)

    @property
    def ok_runs(self) -> list[Run]:
        return [r for r in self.runs if r.ok]

    @property
    def failed_runs(self) -> list[Run]:
        return [r for r in self.runs if not r.ok]

    def values(self, path: str) -> list[Any]:
        return [r.get(path) for r in self.ok_runs]

    def stat(self, path: str) -> Stat:
        """Median/min/max of a dotted results path ("train.images_per_s") over completed repeats."""
        return summarize(self.values(path))

    def spread(self, path: str) -> Spread:
        """Mean ± σ and min–max of a dotted results path over completed repeats."""
        return spread(self.values(path))

    @property
    def not_applied(self) -> dict[str, dict]:
        """Requested settings some run could not honour, by the report's name for them ("pin"):
        {requested, used, reason} from results.json `adjusted` (the first run's, where repeats agree)."""
        changes: dict[str, dict] = {}
        for run in self.runs:
            for key, change in not_applied(run.results).items():
                changes.setdefault(setting_name(key, run.results), change)
        return changes

    @property
    def applied(self) -> bool:
        """False when a requested setting was adjusted away in any of its runs."""
        return not self.not_applied

    @property
    def page_cache(self) -> str:
        """ "cold" when its runs read the data with the OS page cache dropped first (cold_cache),
        "warm" otherwise (also for runs from before segperf recorded it), "cold/warm" if mixed."""
        states = dict.fromkeys(r.get("dataset.page_cache") or "warm" for r in self.ok_runs)
        return "/".join(states) or "n/a"

    @property
    def measured(self) -> bool:
        """False when every completed repeat ran with the measurement off (no phases/jitter)."""
        return not self.ok_runs or any(r.results.get("measurement") != "off" for r in self.ok_runs)


@dataclass
class Sweep:
    """All jobs of a sweep in job order, failed ones included (the report must name them)."""

    path: Path
    runs: list[Run]

    @property
    def failed(self) -> list[Run]:
        return [r for r in self.runs if not r.ok]

    def machines(self) -> list[str]:
        """Distinct machine descriptions in job order (runs that recorded none are left out)."""
        return list(dict.fromkeys(m for r in self.runs if (m := r.machine)))

    def machine_differences(self) -> dict[str, list[str]]:
        """What differs between the machines of the completed runs (host, GPU, driver, library versions); {} when
        every run recorded the same (segperf.report.comparability)."""
        return differences([r.results.get("machine") for r in self.runs if r.ok])

    def configurations(self, kind: str | None = None) -> list[Configuration]:
        """Repeats grouped by config_key, in first-job order. `kind` ("train"/"inference") filters.

        A run without axes (it crashed early) joins the one configuration whose dir-name
        overrides match, so a failed repeat shows up next to its siblings."""
        runs = [r for r in self.runs if kind is None or r.kind == kind]
        groups: dict[tuple, list[Run]] = {}
        for run in runs:
            if run.results.get("axes"):
                groups.setdefault(run.config_key, []).append(run)
        for run in runs:
            if not run.results.get("axes"):
                same = [k for k, rs in groups.items() if rs[0].overrides == run.overrides]
                groups.setdefault(same[0] if len(same) == 1 else run.config_key, []).append(run)
        configs = []
        for key, group in sorted(groups.items(), key=lambda kv: min(r.job for r in kv[1])):
            group.sort(key=lambda r: r.job)
            first = next((r for r in group if r.results.get("axes")), group[0])
            configs.append(Configuration(first.label, key, group))
        _disambiguate(configs)
        mark_same_settings(configs)
        for config in configs:
            config.peers = configs
        return configs


def _disambiguate(configs: list[Configuration]) -> None:
    """Configurations that share a label (e.g. workers=auto resolving differently) get their axes."""
    for label, n in Counter(c.label for c in configs).items():
        if n < 2:
            continue
        same = [c for c in configs if c.label == label]
        varying = {k for k, _ in same[0].key if len({dict(c.key).get(k) for c in same}) > 1}
        for c in same:
            extra = ", ".join(f"{k}={v}" for k, v in c.key if k in varying)
            c.label = f"{label} ({extra})" if extra else label


def _label_runs(runs: list[Run]) -> None:
    """Label = the overrides that vary across the sweep (constant ones say nothing), else the
    varying axes, else "run"."""
    values: dict[str, set] = {}
    for run in runs:
        for k, v in run.overrides:
            values.setdefault(k, set()).add(v)
    varying = {k for k, vs in values.items() if len(vs) > 1 or any(k not in dict(r.overrides) for r in runs)}
    axes = [r.results.get("axes") or {} for r in runs if r.results.get("axes")]
    varying_axes = [k for k in (axes[0] if axes else {}) if len({hashable(a.get(k)) for a in axes}) > 1]
    for run in runs:
        label = ", ".join(f"{k}={v}" for k, v in run.overrides if k in varying)
        if not label and run.results.get("axes"):
            label = ", ".join(f"{k}={run.results['axes'].get(k)}" for k in varying_axes)
        run.label = label or "run"


def load_sweep(sweep_dir: str | Path) -> Sweep:
    """Every `*/results.json` directly below `sweep_dir` (job dirs without one count as failed),
    or the single run when `sweep_dir` itself holds a results.json."""
    root = Path(sweep_dir)
    if not root.is_dir():
        raise SweepError(f"{root} is not a directory")
    if (root / "results.json").exists():
        runs = [read_run(root, 0)]
    else:
        dirs = [
            d
            for d in root.iterdir()
            if d.is_dir() and ((d / "results.json").exists() or _JOB_DIR.match(d.name) or (d / ".hydra").is_dir())
        ]
        numbered = [int(m[1]) for d in dirs if (m := _JOB_DIR.match(d.name))]
        dirs.sort(key=lambda d: (int(m[1]) if (m := _JOB_DIR.match(d.name)) else 1 << 62, d.name))
        runs = [read_run(d, max(numbered, default=-1) + 1 + i) for i, d in enumerate(dirs)]
    if not runs:
        raise SweepError(f"no runs in {root}: expected <job>/results.json below it or a results.json in it")
    runs.sort(key=lambda r: r.job)
    _label_runs(runs)
    sweep = Sweep(root, runs)
    extra = tuple(differences([r.results.get("machine") for r in runs]))
    for run in runs:  # machines that differ only in, say, numpy get lines that say so
        run.machine_extra = extra
    return sweep
