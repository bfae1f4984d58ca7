"""summary.txt: the seed study's tables (Resources, Top-line statistics, Per-phase statistics,
Notes) from results.json, plus jitter, throughput and the verdict."""

from __future__ import annotations

from typing import Any

from segperf.perf.counters import format_counters
from segperf.perf.formatting import format_mib, format_percent_of_cores, format_usage
from segperf.perf.machine import format_header
from segperf.perf.machine_load import format_load
from segperf.perf.meetings import WAIT_COLUMNS
from segperf.perf.memory_summary import memory_rows, memory_verdict_line
from segperf.quality import metric_names, of_results

WIDTH = 92
RULE, LINE = "=" * WIDTH, "-" * WIDTH


def _num(value: Any, spec: str, suffix: str = "") -> str:
    return "n/a" if value is None else format(value, spec) + suffix


def _section(title: str, rows: list[str]) -> list[str]:
    return [RULE, title, LINE, *rows]


def _kv(key: str, value: str) -> str:
    return f"{key:<23} {value}"  # a space after a key longer than the column, too


NOT_TRAINED = "none: the run stopped before its first training step, so there is no performance to judge"


def format_not_trained(results: dict[str, Any]) -> str:
    """summary.txt of a run that failed before training (its data check, a bad file, ...): what
    stopped it, and no tables or verdict about a training loop that never ran."""
    rows = [_kv("Status", results.get("status", "?")), _kv("Verdict", NOT_TRAINED)]
    error = str(results.get("error", "")).splitlines()
    rows += [_kv("Error" if i == 0 else "", line) for i, line in enumerate(error)]
    lines = _section("Run stopped before training", rows)
    return "\n".join([*lines, RULE]) + "\n"


def format_run_summary(results: dict[str, Any]) -> str:
    machine = results.get("machine") or {}
    res = results.get("resources") or {}
    train = results.get("train") or {}
    quality = results.get("quality") or {}
    dataset = results.get("dataset") or {}
    cores = machine.get("cpu_available") or machine.get("cpu_threads") or 1
    gpu_util = (
        "n/a"
        if res.get("gpu_util_p50") is None
        else f"{res['gpu_util_p50']:.0f}%/{res['gpu_util_p90']:.0f}%/{res['gpu_util_max']:.0f}%"
    )
    status = results.get("status", "?") + (f" ({results['error']})" if results.get("error") else "")
    lines = []
    if machine:  # a record from before the machine was read (or a hand-made one) has none
        header = format_header(machine).splitlines() + [f"{'Load':<10}{format_load(results.get('machine_load'))}"]
        lines = _section("Resources", header)
    data_rows = _data_rows(dataset)
    top = [
        _kv("Status", status),
        *data_rows,
        _kv("Device / precision", f"{results.get('device', 'n/a')} / {results.get('precision', 'n/a')}"),
        _kv("Torch threads", f"{results['torch_threads']} intra-op" if results.get("torch_threads") else "n/a"),
        _kv("Wall clock time", _num((results.get("accounted") or {}).get("run_wall_s"), ",.1f", " s")),
        # the seed's key; what is sampled is said, beside "Trained on N samples"
        _kv(
            "Samples",
            f"{res.get('samples', 0):,} @ {res.get('interval_s', 0) * 1000:.0f} ms (utilization and memory readings)",
        ),
        _kv("Mean CPU util", format_percent_of_cores(res.get("cpu_mean_percent"), cores)),
        *_workers_rows(res, cores),
        _kv("Peak RSS usage", format_usage(res.get("rss_peak_bytes"), _scale(machine.get("ram_mib"), 2**20))),
        _kv("Peak GPU memory", _gpu_memory(res.get("gpu_mem_peak_bytes"), machine)),
        _kv("GPU util. p50/p90/max", gpu_util),
        _kv("Peak torch allocated", format_mib(res.get("peak_allocated_bytes"))),
        _kv("Peak torch reserved", format_mib(res.get("peak_reserved_bytes"))),
        _kv("Trained on", f"{train.get('images', 0):,} {_unit(results)} in {train.get('steps', 0):,} steps"),
        *_progress_rows(results),
        *_quality_rows(quality),
    ]
    lines += _section("Top-line statistics", top)
    lines += [RULE, "Per-phase statistics", _phase_table(results)]
    lines += _section("Jitter (per batch, after warm-up)", _jitter_rows(results.get("jitter") or {}))
    lines += _section("Throughput (after warm-up)", _throughput_rows(results))
    if results.get("distributed"):
        lines += _section(
            "Data-parallel ranks (after warm-up, per step)", _rank_rows(results["distributed"], _unit(results))
        )
    if results.get("memory"):
        lines += _section("Memory (creep judged per training step; peaks against capacity)", memory_rows(results))
    ops = results.get("ops")
    if ops:
        title = f"Torch operations over {ops['steps']} steps (from step {ops['first_step']}; incl. profiler overhead)"
        lines += _section(title, [ops["table"].rstrip(), f"trace: {ops['trace_dir']}"])
    if "counters" in results:
        lines += _section("Hardware counters (perf stat)", format_counters(results["counters"]))
    verdict = results.get("verdict") or {}
    lines += _section("Verdict", [verdict.get("text", "n/a"), *memory_verdict_line(results)])
    notes = [
        "CPU util. is summed over the process tree (DataLoader workers included); 100% is 1 busy core.",
        "GPU memory is NVML's, over all processes on the device; GPU util. from NVML samples.",
        f"Warm-up: the first {train.get('warmup_steps', 0)} training steps (compilation, caches), kept out of "
        "throughput.",
        *_distributed_notes(results.get("distributed"), _unit(results)),
        *_cost_note(results.get("measurement_cost")),
        *_folded_note(results.get("folded")),
        *_not_measured_note(results.get("not_measured")),
        *results.get("notices", []),
        *res.get("notes", []),
    ]
    lines += _section("Notes", notes) + [RULE]
    return "\n".join(lines) + "\n"


def _data_rows(dataset: dict[str, Any]) -> list[str]:
    if not dataset:
        return []
    if "datamodule" in dataset:  # a user's data module: the sizes of the datasets its loaders read
        sizes = [
            f"{dataset[key]:,} {key.removesuffix('_dataset_size')}"
            for key in dataset
            if key.endswith("_dataset_size") and isinstance(dataset[key], int)
        ]
        return [_kv("Data", f"{dataset['datamodule']}" + (f" ({', '.join(sizes)} samples)" if sizes else ""))]
    return [_kv("Data", f"{dataset.get('root', 'n/a')}"), _kv("", _dataset_counts(dataset))]


def _dataset_counts(dataset: dict[str, Any]) -> str:
    text = (
        f"{dataset.get('images', 0):,} datapoints ({dataset.get('train_images', 0):,} train, "
        f"{dataset.get('val_images', 0):,} val)"
    )
    files = len({s["path"] for s in dataset.get("skipped") or []})
    left_out = f"; {files:,} file{'s' if files != 1 else ''} left out (dataset.skipped)" if files else ""
    if "classes" in dataset:  # MNIST, an image folder: classes, not cars
        return text + f", {dataset['classes']} classes" + left_out
    cars = f"{dataset.get('train_cars', 0):,} train, {dataset.get('val_cars', 0):,} val"
    return text + f", {dataset.get('cars', 0):,} cars ({cars})" + left_out


def _unit(results: dict[str, Any]) -> str:
    """'images' where the run trained on one of segperf's own image data sets (its `dataset` record
    counts train and val images); 'samples' for anyone else's data: a user's data module, whose
    record names it (`datamodule`), or a user's script with PerfMonitor (no record), a language
    model's token sequences as much as a user's images."""
    dataset = results.get("dataset") or {}
    return "images" if "train_images" in dataset and "datamodule" not in dataset else "samples"


NO_QUALITY = "none: the module logged no validation metric"


def _quality_rows(quality: dict[str, Any]) -> list[str]:
    """Each validation metric the module logged, under its own name, first -> last where it
    validated more than once; the one the run is judged by (segperf.quality) first, and marked."""
    names = metric_names(quality)
    if not names:
        return [_kv("Quality", NO_QUALITY)]
    judged = of_results(quality)
    names.sort(key=lambda name: judged is None or name != judged.key)
    history = quality.get("val_history") or []
    rows = []
    for name in names:
        first = quality.get(f"first_{name}")
        text = _num(quality.get(name), ".4f")
        if len(history) > 1 and isinstance(first, int | float):
            text = f"{first:.4f} -> {text}"
        mark = f" ({judged.mode}: the run's quality)" if judged is not None and name == judged.key else ""
        rows.append(_kv(f"{name}{mark}", text))
    if len(history) > 1:
        first_step, last_step = history[0].get("step", 0), history[-1].get("step", 0)
        rows.append(_kv("Validations", f"{len(history)} (step {first_step:,} -> {last_step:,})"))
    return rows


def _gpu_memory(peak: int | None, machine: dict[str, Any]) -> str:
    gpus = machine.get("gpus") or []
    used = format_usage(peak, _scale(gpus[0].get("memory_mib"), 2**20) if gpus else None)
    return used if peak is None else f"{used}, incl. other processes"


def _phase_table(results: dict[str, Any]) -> str:
    header = f"{'phase':<16}{'calls':>7}{'wall (s)':>11}{'wall (%)':>10}{'cpu':>8}{'peak rss':>13}"
    header += f"{'gpu util':>10}{'peak gpu':>13}"
    rows = [header, LINE]
    if results.get("measurement") == "off":
        return "\n".join([*rows, "(not measured: perf.measure=false)"])
    phases = results.get("phases") or {}
    for name, row in sorted(phases.items(), key=lambda item: -item[1]["wall_s"]):
        rows.append(
            f"{name:<16}{row['calls']:>7,}{row['wall_s']:>11.2f}{row['fraction']:>10.1%}"
            f"{_num(row.get('cpu_mean_percent'), '.0f', '%'):>8}{format_mib(row.get('rss_peak_bytes')):>13}"
            f"{_num(row.get('gpu_util_mean_percent'), '.0f', '%'):>10}{format_mib(row.get('gpu_mem_peak_bytes')):>13}"
        )
        rows += _split_rows(row)
    accounted = results.get("accounted") or {}
    rows += [LINE, f"{'accounted':<23}{accounted.get('wall_s', 0):>11.2f}{accounted.get('fraction', 0):>10.1%}"]
    return "\n".join(rows)


def _split_rows(row: dict[str, Any]) -> list[str]:
    """train_step's parts, indented under it: host seconds, share of the run and of the step."""
    lines = []
    for part, split in (row.get("split") or {}).items():
        share = split.get("of_train_step")
        lines.append(
            f"{'  ' + part:<16}{split.get('calls', 0):>7,}{split['wall_s']:>11.2f}"
            f"{split.get('fraction', 0.0):>10.1%}   {_num(share, '.0%')} of train_step"
        )
    device = row.get("device_split_s") or {}
    if device:
        lines.append("  on the device: " + ", ".join(f"{part} {seconds:,.2f} s" for part, seconds in device.items()))
    return lines


def _jitter_rows(jitter: dict[str, Any]) -> list[str]:
    rows = []
    for name in ("data_wait", "train_step", "device_step"):
        d = jitter.get(name)
        if not d or not d.get("count"):
            continue
        rows.append(
            _kv(
                f"{name} (ms)",
                f"p50 {d['p50'] * 1e3:,.1f}  p90 {d['p90'] * 1e3:,.1f}  p99 {d['p99'] * 1e3:,.1f}  "
                f"max {d['max'] * 1e3:,.1f}  cv {d['cv']:.2f}  ({d['count']:,} batches)",
            )
        )
    starved = jitter.get("starved") or {}
    if starved.get("steps"):
        rows.append(_kv("Starved steps", f"{starved['count']:,} of {starved['steps']:,} ({starved['fraction']:.0%})"))
    return rows or ["n/a (no training steps after warm-up)"]


def _throughput_rows(results: dict[str, Any]) -> list[str]:
    train = results.get("train") or {}
    tp = results.get("throughput") or {}
    per_rank = (
        [_kv("  of which rank 0", _num(train["rank0_images_per_s"], ",.2f"))] if "rank0_images_per_s" in train else []
    )
    unit = _unit(results)
    return [
        _kv(f"Train {unit}/s", _num(train.get("images_per_s"), ",.2f")),
        *per_rank,
        _kv(f"Val {unit}/s", _num(train.get("val_images_per_s"), ",.2f")),
        _kv(f"Train GFLOP per {unit[:-1]}", _gflop(tp.get("train_flops_per_image"))),
        _kv("Achieved TFLOP/s", _num(_scale(tp.get("achieved_train_flops_per_s"), 1e-12), ",.3f")),
        *_peak_rows(tp),
    ]


def _peak_rows(tp: dict[str, Any]) -> list[str]:
    """MFU against the peak measured here (any device) and against the spec sheet's dense peak."""
    measured, spec_mfu, measured_mfu = tp.get("measured_peak") or {}, tp.get("mfu"), tp.get("measured_mfu")
    spec_peak = _scale(tp.get("peak_flops_per_s"), 1e-12)
    if measured:
        state = f"not cached: {measured['not_cached']}" if measured.get("not_cached") else None
        state = state or ("cached" if measured.get("cached") else "measured now, cached")
        rows = [
            _kv("Measured peak TFLOP/s", f"{_num(_scale(measured.get('flops_per_s'), 1e-12), ',.3f')} ({state})"),
            _kv("  measured by", str(measured.get("method"))),
            _kv("MFU (measured peak)", _mfu_cell(measured_mfu, tp.get("measured_mfu_reason"))),
        ]
    else:
        rows = [_kv("MFU (measured peak)", "n/a (not measured: perf.peak_probe=false, or no train rate)")]
    spec = "n/a (no spec sheet for this device)" if spec_peak is None else f"{spec_peak:,.1f} (dense)"
    return [*rows, _kv("Spec peak TFLOP/s", spec), _kv("MFU (spec peak)", _mfu_cell(spec_mfu, tp.get("mfu_reason")))]


def _mfu_cell(value: float | None, reason: str | None) -> str:
    """'42.0%', or 'n/a (why)' when the run beat the peak (segperf.perf.flops.mfu_or_reason)."""
    return f"n/a ({reason})" if reason else _pct(value)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _gflop(flops: float | None) -> str:
    """87.5 for the U-Net, 0.0250 for the CPU study's CNN: small nets keep their digits."""
    return _num(_scale(flops, 1e-9), ",.1f" if flops is None or flops >= 1e9 else ".4f")


def _scale(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _progress_rows(results: dict[str, Any]) -> list[str]:
    """Where the run stands in its planned steps: shown when it was resumed or did not finish."""
    progress = results.get("progress") or {}
    resumed = results.get("resumed") or {}
    if not progress or (results.get("status") == "completed" and not resumed):
        return []
    text = f"step {progress['steps_done']:,} of {progress['steps_total']:,}"
    text += f" ({progress['images_done']:,} of {progress['images_total']:,} {_unit(results)})"
    if resumed:
        text += f"; resumed at step {resumed['from_step']:,}"
    rows = [_kv("Progress", text)]
    if results.get("resume_command"):
        rows.append(_kv("Resume with", results["resume_command"]))
    return rows


def _rank_rows(dist: dict[str, Any], unit: str) -> list[str]:
    """One row per rank (where it ran, what it trained on, its times per step: its own time in
    each part, then its wait for the others in each meeting the run had), then the straggler with
    its cause and evidence (segperf.perf.ranks), or the slowest rank of an older record."""
    ranks = dist["ranks"]
    # a column per meeting some rank waited in (the gradient all-reduce's always)
    meetings = [k for k in WAIT_COLUMNS if k == "allreduce_wait_mean_s" or any(r.get(k) for r in ranks)]
    rows = [
        f"{dist['world_size']} ranks on {dist['num_nodes']} node(s) x {dist['devices_per_node']} device(s), "
        f"{dist['strategy']} over {dist['backend']}; hosts: {', '.join(dist['hosts'])}",
        f"{'rank':>4} {'host':<16}{'device':<9}{unit:>8}{'steps':>7}{unit + '/s':>10}"
        f"{'wait (ms)':>11}{'step (ms)':>11}{'fwd (ms)':>10}{'bwd (ms)':>10}"
        + "".join(f"{WAIT_COLUMNS[k] + ' (ms)':>16}" for k in meetings)
        + f"{'ready (ms)':>12}",
    ]
    for r in ranks:
        forward = r.get("forward_compute_mean_s", r.get("forward_mean_s"))  # an older record: the whole forward
        rows.append(
            f"{r['rank']:>4} {str(r.get('host', '?'))[:15]:<16}{str(r.get('device', '?'))[:8]:<9}"
            f"{r.get('images') or 0:>8,}{r.get('steps') or 0:>7,}"
            f"{_num(r.get('images_per_s'), ',.1f'):>10}{_ms(r.get('data_own_mean_s', r.get('data_wait_mean_s'))):>11}"
            f"{_ms(r.get('train_step_mean_s')):>11}{_ms(forward):>10}"
            f"{_ms(r.get('backward_compute_mean_s')):>10}"
            + "".join(f"{_ms(r.get(k)):>16}" for k in meetings)
            + f"{_ms(r.get('ready_mean_s')):>12}"
        )
    rows.append(f"{'all':>4} {'':<16}{'':<9}{dist['images']:>8,}{'':>7}{_num(dist['images_per_s'], ',.1f'):>10}")
    if dist.get("straggler"):
        rows.append(f"Straggler: {dist['straggler']['text']}")
    elif dist.get("slowest_rank") is not None:
        rows.append(
            f"Slowest rank: {dist['slowest_rank']} (reaches the gradient all-reduce "
            f"{dist['slowest_lag_s'] * 1e3:,.1f} ms per step after the median of the others)"
        )
    return rows


def _ms(seconds: float | None) -> str:
    return _num(None if seconds is None else seconds * 1e3, ",.1f")


def _distributed_notes(dist: dict[str, Any] | None, unit: str) -> list[str]:
    if not dist:
        return []
    return [
        f"Data-parallel run: {unit} and train {unit}/s add up all ranks; phases, resources, jitter, TFLOP/s and "
        "MFU are rank 0's (per device; its process tree holds the ranks Lightning started on its node). "
        "wait, fwd and bwd = this rank's own data wait, forward and backward (to its last gradient bucket), its waits "
        "for the other ranks left out; in AR = its wait inside the gradient all-reduce, fetch/fwd/bwd/opt/betw. wait = "
        "its wait in the collectives where the ranks meet in that phase (DDP's buffer broadcast, SyncBatchNorm, "
        "sync_dist logging, barriers; fetch = inside the data fetch, betw. = elsewhere between steps); ready = wait + "
        "fwd + bwd: when it joins the all-reduce.",
    ]


def _folded_note(folded: dict | None) -> list[str]:
    if not folded:
        return []
    return [
        f"Long run: {folded['steps']:,} steps after the first {folded['held_from_start']:,} were folded into totals as "
        "it went (memory and results.json stay bounded): phases, the split and the means are exact, the jitter "
        "quantiles read from a histogram of 0.5% bins; jitter.per_batch holds the first steps and the last ones."
    ]


def _not_measured_note(parts: dict | None) -> list[str]:
    return [f"Not measured: {part} ({error})." for part, error in (parts or {}).items()]


def _cost_note(cost: dict | None) -> list[str]:
    if not cost or cost.get("fraction") is None:
        return []
    return [
        f"Measuring took {cost['fraction']:.2%} of a core over the run (its hooks {cost['hooks_s']:.3f} s, "
        f"the profiler tap {cost['tap_s']:.3f} s, the sampler {cost['sampler_cpu_s']:.3f} s)."
    ]


def _workers_rows(resources: dict[str, Any], cores: int) -> list[str]:
    """The DataLoader workers' part of the CPU while training ran, where they were sampled."""
    workers = resources.get("workers_cpu_training_percent")
    if workers is None or workers < 1.0:  # no workers, or idle ones: nothing to tell
        return []
    return [_kv("Workers CPU (training)", format_percent_of_cores(workers, cores))]
