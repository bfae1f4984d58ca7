"""report.json: the report's numbers for programs (the notebook, the tuner), beside report.md.

`report_data(sweep)` is the same decision the tables show (segperf.report.decide), as data. Its
key names are a public interface, which the notebook and the tuner read, so none is renamed: per
configuration `label`, `overrides`, `runs`, `images_per_s` {median, min, max}, `speedup`,
`distinguishable` (true / false / null when it cannot be decided), `applied`, `same_as` and
`quality`; and the sweep's `baseline`. Everything else here is extra detail a reader may use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from segperf.perf.decision import LEVEL, MIN_RUNS
from segperf.perf.results import write_json_atomic
from segperf.quality import metric_names
from segperf.report import flags as warn
from segperf.report.decide import RULE, THROUGHPUT, baseline_of, decide, sweep_noise
from segperf.report.memory import config_memory
from segperf.report.mfu import mfu_summary
from segperf.report.sweep import Configuration, Sweep

INFERENCE_THROUGHPUT = "inference.end_to_end_images_per_s"
# an inference run's agreement with the fp32 module, reported beside the validation metrics
FP32_COMPARISONS = ("agreement_vs_fp32", "dice_vs_fp32")


def _stat(config: Configuration, path: str) -> dict[str, float | None]:
    stat, spread = config.stat(path), config.spread(path)
    return {"median": stat.median, "min": stat.min, "max": stat.max, "mean": spread.mean, "std": spread.std}


def _noise(noise) -> dict[str, Any] | None:
    """The pooled run-to-run noise the decisions used: relative (0.03 = 3%), its dfs and configurations."""
    if noise is None:
        return None
    return {"relative": noise.relative, "df": noise.df, "configurations": noise.configurations}


def _quality(config: Configuration, baseline: Configuration | None, metric: str, mode: str) -> dict[str, Any]:
    main = config.stat(metric)
    quality: dict[str, Any] = {"metric": metric.split(".", 1)[1], "mode": mode, "median": main.median, "min": main.min}
    quality |= {
        "max": main.max,
        "runs": main.n,
        "worse_than_baseline": warn.quality_fell(config, baseline, metric, mode),
    }
    logged = dict.fromkeys(name for r in config.ok_runs for name in metric_names(r.get("quality") or {}))
    for key in [*logged, *FP32_COMPARISONS]:  # each under its own name (the U-Net's val_dice, val_pixel_accuracy)
        if config.stat(f"quality.{key}").n:
            quality[key] = {k: v for k, v in _stat(config, f"quality.{key}").items() if k in ("median", "min", "max")}
    return quality


def _runs(config: Configuration, loads: dict[int, dict], path: str) -> list[dict[str, Any]]:
    return [
        {
            "job": r.job,
            "name": r.name,
            "status": r.status,
            "images_per_s": r.get(path),
            "process_job": r.get("process_job"),
            "machine_load": r.get("machine_load"),
            "busy": loads[r.job]["busy"] if r.job in loads else None,
            "others_load": loads[r.job]["others"] if r.job in loads else None,
        }
        for r in config.runs
    ]


def configuration_data(
    config: Configuration,
    baseline: Configuration | None,
    path: str,
    metric: str,
    loads: dict[int, dict],
    mode: str = "max",
) -> dict[str, Any]:
    """One configuration's entry (see the module docstring); `baseline` None: no speed-ups; `mode`:
    whether the quality `metric` is higher-is-better (max) or lower-is-better (min)."""
    decision = decide(config, baseline, path)
    test = decision.test
    outlier = warn.first_job_outlier(config, path)
    return {
        "label": config.label,
        "overrides": dict(config.runs[0].overrides) if config.runs else {},
        "runs": len(config.ok_runs),
        "failed_runs": len(config.failed_runs),
        "images_per_s": _stat(config, path),
        "speedup": decision.speedup,
        "speedup_interval": None if test is None or test.low is None else [test.low, test.high],
        "interval_ratio": None if test is None else test.ratio,  # of geometric means: the interval's centre
        "mean_speedup": None if decision.mean_speedup is None else list(decision.mean_speedup),
        "distinguishable": decision.distinguishable,
        "unconfirmed": decision.unconfirmed,
        "applied": config.applied,
        "not_applied": config.not_applied,
        "same_as": config.same_as,
        "quality": _quality(config, baseline, metric, mode),
        "measured_mfu": mfu_summary(config),
        "memory": config_memory(config, baseline),  # peaks, their ratio to the baseline's, creep
        "first_job_outlier": None if outlier is None else outlier[0].job,
        "run_details": _runs(config, loads, path),
    }


def report_data(sweep: Sweep, allow_mixed_machines: bool = False) -> dict[str, Any]:
    """The whole sweep as report.json holds it. Speed-ups are null (and nothing distinguishable)
    across machines that differ, unless `allow_mixed_machines`."""
    comparable = allow_mixed_machines or not sweep.machine_differences()
    loads = warn.busy_runs(sweep)
    train, infer = sweep.configurations("train"), sweep.configurations("inference")
    data: dict[str, Any] = {"sweep": str(sweep.path.resolve())}
    train_base = baseline_of(train) if comparable else None
    metric, _ = warn.quality_metric(train)
    mode = warn.quality_mode(train)
    data |= {
        "baseline": train_base.label if train_base else None,
        "comparable_machines": comparable,
        "decision": {
            "method": "pooled_shrunk_t_on_log_throughput",
            "level": LEVEL,
            "min_runs": MIN_RUNS,
            "rule": RULE,
            "noise": _noise(sweep_noise(train) if train_base else None),
        },
        "configurations": [configuration_data(c, train_base, THROUGHPUT, metric, loads, mode) for c in train],
    }
    warnings = warn.collect(sweep, train, train_base)
    if infer:
        infer_base = infer[0] if comparable else None  # inference ratios are against the first configuration
        data["inference"] = {
            "baseline": infer_base.label if infer_base else None,
            "configurations": [
                configuration_data(c, infer_base, INFERENCE_THROUGHPUT, "quality.agreement_vs_fp32", loads)
                for c in infer
            ],
        }
        warnings += warn.collect(sweep, infer, None)
    data["warnings"] = [{"kind": f.kind, "configuration": f.label, "job": f.job, "text": f.text} for f in warnings]
    data["failed_jobs"] = [{"job": r.job, "name": r.name, "status": r.status, "error": r.error} for r in sweep.failed]
    return data


def write_report_json(sweep: Sweep, out_dir: str | Path, allow_mixed_machines: bool = False) -> Path:
    """report.json into `out_dir`, written atomically (a reader never sees half a file)."""
    return write_json_atomic(Path(out_dir) / "report.json", report_data(sweep, allow_mixed_machines))
