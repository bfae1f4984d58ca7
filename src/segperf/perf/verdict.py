"""The plain-language verdict: which bottleneck dominated the run, the evidence, and what to try.

The phase table answers "where did the time go" in numbers; the verdict turns it into one
decision, named by the overrides segperf exposes (workers=auto, prefetch=on, pin=on,
memory_format=channels_last, compile=on, precision=bf16, upsample=deconv, batch_size=8, ...), so
the next run is one command away: only overrides that the run does not already use and that
compose for its workload (segperf.perf.advice), listed in `overrides` as well as in the text.
All thresholds live in THRESHOLDS so they can be read, argued about and tuned in one place.
Pure: numbers in, a JSON-ready dict out.
"""

from __future__ import annotations

from typing import Any

from segperf.perf.advice import DATALOADER_LEVERS, LEVERS, untried

THRESHOLDS: dict[str, float] = {
    # warm-up phase share of the whole run's wall time above which warm-up (torch.compile,
    # cuDNN autotuning, allocator and cache warm-up) dominates and nothing else is worth tuning yet.
    "warmup_fraction": 0.5,
    # data_wait share of steady-state training time (data_wait + batch_to_device + train_step +
    # logging) above which the run is data-bound: a fifth of the time the model had no batch.
    "data_bound_fraction": 0.2,
    # share of starved steps (jitter.STARVED_FRACTION) that shows frequent stalls; together with a
    # data_wait share of at least `starved_data_fraction` it also makes the run data-bound.
    "starved_fraction": 0.25,
    "starved_data_fraction": 0.1,
    # mean GPU utilization (0-1) below which a GPU run with a large data_wait is data-bound. Above
    # it the host's wait overlapped queued GPU work (CUDA runs asynchronously), so the GPU was not
    # actually starved.
    "gpu_busy_low": 0.6,
    # batch_to_device share of steady-state training time above which host-to-device copies are
    # the bottleneck (copy-bound); judged on accelerators only, a CPU "copy" is a no-op.
    "h2d_fraction": 0.1,
    # validation + logging + checkpoint share of the training loop (steady state + validation +
    # checkpoint) above which bookkeeping, not training, is what the run spends its time on.
    "overhead_fraction": 0.2,
    # optimizer-step share of train_step (its split) above which a compute-bound verdict names the
    # optimizer: a step whose update costs a third of it has more to gain there than in the model.
    "optimizer_fraction": 0.3,
    # cores the DataLoader workers kept busy while a CPU run trained, at or above which they count
    # as taking cores from torch's threads (cpu-contended) when threads + workers exceed the
    # cores. Measured on 2 cores (docs/BENCHMARKS.md): a PIL loader's 2 workers used 0.94 cores
    # and one torch thread fewer ran 1.39x faster; the U-Net's used 0.29 and the MNIST CNN's 0.05,
    # where one thread fewer ran 0.67-0.69x as fast.
    "contended_workers_cores": 0.5,
    # share of steady-state training time a data-parallel rank spent waiting for the other ranks
    # where they meet (phases.train_step.waits_s, each phase's rank_wait_s) above which waiting is its bottleneck
    # (rank-wait-bound); the run's verdict is then the rank it waits for (segperf.perf.meetings)
    "rank_wait_fraction": 0.2,
}

STEADY_PHASES = ("data_wait", "batch_to_device", "train_step", "logging", "framework")
OVERHEAD_PHASES = ("validation", "logging", "checkpoint", "framework")

_OVERHEAD_ADVICE = {
    "validation": "validate less often (a larger val_every_images) or on fewer images (val_images)",
    "logging": "log less often (a larger trainer.log_every_n_steps)",
    "checkpoint": "checkpoint less often (last.ckpt is written at every validation: a larger val_every_images)",
    "framework": "take fewer, larger steps (a larger batch_size): Lightning's hooks and bookkeeping cost as much "
    "per step",
}
# the same advice in the knobs of a workload segperf did not configure (PerfMonitor in a user's script)
_DATALOADER_OVERHEAD_ADVICE = {
    "validation": "validate less often (Trainer(val_check_interval=...)) or on fewer batches "
    "(Trainer(limit_val_batches=...))",
    "logging": "log less often (Trainer(log_every_n_steps=...))",
    "checkpoint": "checkpoint less often (ModelCheckpoint(every_n_train_steps=...))",
    "framework": "take fewer, larger steps (a larger DataLoader(batch_size=...)): Lightning's hooks and bookkeeping "
    "cost the same per step",
}
# a run too short to time a step after its warm-up: how to lengthen it, in each kind of knob
_LONGER_RUN = {
    "segperf": "train on more images (train_images) or lower warmup_steps",
    "dataloader": "train for more steps (Trainer(max_steps=...)) or lower PerfMonitor(warmup_steps=...)",
}
# which knobs the advice is given in: segperf's config groups, or a plain DataLoader and Trainer
ADVICE = {"segperf": (LEVERS, _OVERHEAD_ADVICE), "dataloader": (DATALOADER_LEVERS, _DATALOADER_OVERHEAD_ADVICE)}


def _seconds(phases: dict[str, dict], name: str) -> float:
    return float((phases.get(name) or {}).get("wall_s") or 0.0)


def _own(phases: dict[str, dict], name: str) -> float:
    """A phase's seconds less what a data-parallel rank spent in it waiting for the other ranks
    (`rank_wait_s`: a collective inside the data fetch or between the steps, segperf.perf.meetings)."""
    return _seconds(phases, name) - float((phases.get(name) or {}).get("rank_wait_s") or 0.0)


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _gpu_fraction(gpu_util_mean: float | None) -> float | None:
    """Mean GPU utilization as 0-1; a value above 1 is taken as a percentage (NVML reports 0-100)."""
    if gpu_util_mean is None:
        return None
    return gpu_util_mean / 100.0 if gpu_util_mean > 1.0 else float(gpu_util_mean)


def verdict(
    phases: dict[str, dict],
    *,
    starved_fraction: float | None,
    gpu_util_mean: float | None,
    device_type: str,
    settings: dict[str, Any] | None = None,
    advice: str = "segperf",
    cores: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`{"kind", "text", "overrides"}`: the run's dominant bottleneck with evidence and next steps.

    `phases` maps phase name -> {"calls", "wall_s", "fraction"} (fraction of the run's wall time);
    `starved_fraction` is jitter's share of starved steps; `gpu_util_mean` the mean GPU utilization
    (0-1, or 0-100 percent), None without a GPU sampler; `settings` the run's resolved config: the
    suggested `overrides` are keys of its workload and never what it already uses (None: a
    baseline run of unknown workload, segperf.perf.advice.BASELINE). kind is one of "warm-up-bound",
    "data-bound", "copy-bound", "overhead-bound", "rank-wait-bound", "compute-bound" or "unknown"
    (with the reason). A data-parallel rank's time blocked waiting for the other ranks inside its
    steps (`phases["train_step"]["waits_s"]`: seconds per part of the split) and between them
    (`phases[p]["rank_wait_s"]`: in the data fetch, the framework's time, ...) is never read as
    compute, data or overhead: it is a candidate of its own, and the other shares leave it out.
    Warm-up is judged first (if it dominates, steady-state shares describe too little of the run);
    then among data, copy and overhead the one with the largest share of the loop wins; compute
    (train_step) is what remains when none passes its threshold, and names its split (forward,
    backward, optimizer step, from `phases["train_step"]["split"]` when measured), pointing at the
    optimizer when its step takes more than THRESHOLDS["optimizer_fraction"] of train_step.
    `advice` names the knobs the suggestions are given in (ADVICE: "segperf" overrides, or
    "dataloader" for a workload segperf did not configure, whose `settings` then hold
    `dataloader`, `trainer` and `hints`).
    `cores` ({"cores", "torch_threads", "workers_cores"}: the cores the run may use, torch's
    intra-op threads, the cores its DataLoader workers kept busy while it trained) lets a CPU
    run be judged "cpu-contended" (see `contention`): a compute-bound step that shared its cores
    with busy workers; for any other kind the contention is added as a note.
    """
    t = THRESHOLDS
    levers, overhead_advice = ADVICE[advice]
    on_gpu = device_type != "cpu"
    device = "GPU" if device_type == "cuda" else device_type.upper()
    if not phases or sum(_seconds(phases, p) for p in phases) <= 0:
        text = "unknown: no phase time was measured, so there is no bottleneck to name."
        return {"kind": "unknown", "text": text, "overrides": []}

    warmup = float((phases.get("warmup") or {}).get("fraction") or 0.0)
    if warmup > t["warmup_fraction"]:
        overrides = untried(levers["warm-up"], settings)
        text = f"warm-up-bound: compilation/warm-up took {_pct(warmup)} of the run; a longer run amortises it"
        return {
            "kind": "warm-up-bound",
            "text": text + _try(overrides, "nothing else to compare"),
            "overrides": overrides,
        }

    steady = sum(_seconds(phases, p) for p in STEADY_PHASES)
    if steady <= 0:
        text = (
            "unknown: no steady-state training step was timed (the run may be shorter than its warm-up); "
            f"{_LONGER_RUN[advice]}."
        )
        return {"kind": "unknown", "text": text, "overrides": []}
    loop = steady + _seconds(phases, "validation") + _seconds(phases, "checkpoint")
    data_share = _own(phases, "data_wait") / steady
    copy_share = _own(phases, "batch_to_device") / steady
    overhead_share = sum(_own(phases, p) for p in OVERHEAD_PHASES) / loop
    waits = (phases.get("train_step") or {}).get("waits_s") or {}
    between = sum(_seconds(phases, p) - _own(phases, p) for p in STEADY_PHASES)  # waits outside the step
    wait_share = (sum(waits.values()) + between) / steady
    gpu = _gpu_fraction(gpu_util_mean)
    starved = starved_fraction or 0.0

    candidates: dict[str, float] = {}
    data_heavy = data_share > t["data_bound_fraction"] or (
        starved > t["starved_fraction"] and data_share > t["starved_data_fraction"]
    )
    if data_heavy and (not on_gpu or gpu is None or gpu < t["gpu_busy_low"]):
        candidates["data-bound"] = data_share * steady / loop
    if on_gpu and copy_share > t["h2d_fraction"]:
        candidates["copy-bound"] = copy_share * steady / loop
    if overhead_share > t["overhead_fraction"]:
        candidates["overhead-bound"] = overhead_share
    if wait_share > t["rank_wait_fraction"]:
        candidates["rank-wait-bound"] = wait_share * steady / loop
    kind = max(candidates, key=candidates.__getitem__) if candidates else "compute-bound"

    gpu_note = f" while the GPU was {_pct(gpu)} busy" if on_gpu and gpu is not None else ""
    if kind == "data-bound":
        starved_note = f" ({_pct(starved)} of steps starved)" if starved_fraction is not None else ""
        overrides = untried(levers["data-gpu" if device_type == "cuda" else "data"], settings)
        text = f"data-bound: {_pct(data_share)} of training time waiting for data{starved_note}{gpu_note}"
        text += _try(overrides, "every loader option segperf has is on already: the loader itself is the limit")
    elif kind == "copy-bound":
        overrides = untried(levers["copy"], settings)
        text = f"copy-bound: {_pct(copy_share)} of training time copying batches to the {device}{gpu_note}"
        why = " (pinned memory lets the copy overlap compute)" if "pin=on" in overrides else ""
        text += _try(overrides, "pinned memory and prefetching are on already", why=why)
    elif kind == "overhead-bound":
        worst = max(OVERHEAD_PHASES, key=lambda p: _own(phases, p))
        parts = ", ".join(f"{p} {_pct(_own(phases, p) / loop)}" for p in OVERHEAD_PHASES if _own(phases, p))
        overrides = untried(levers[worst], settings)
        text = (
            f"overhead-bound: {_pct(overhead_share)} of the training loop in validation, logging, checkpoints "
            "and the framework "
            f"({parts}); {overhead_advice[worst]}"
        )
        text += _try(overrides, "", lead=": ")
    elif kind == "rank-wait-bound":
        overrides = []
        text = (
            f"rank-wait-bound: {_pct(wait_share)} of training time waiting for the other ranks where they meet "
            "(collectives inside and between the steps, the gradient all-reduce); the rank they wait for sets the "
            "pace: its own verdict is the run's"
        )
    else:
        step_share = (_seconds(phases, "train_step") - sum(waits.values())) / steady
        waited = f", {_pct(wait_share)} more waiting for the other ranks" if wait_share >= 0.005 else ""
        in_step = f"{_pct(step_share)} of steady-state time in train_step{waited}{gpu_note}{_split_note(phases)}"
        if not on_gpu:
            overrides = untried(levers["compute-cpu"], settings)
            text = (
                f"compute-bound on the CPU: {in_step}; a GPU, fewer FLOPs per sample or larger batches are the levers"
            )
        elif gpu is not None and gpu < t["gpu_busy_low"]:
            overrides = untried(levers["compute-host"], settings)
            text = f"compute-bound on the host: {in_step}, so kernel launches, not the GPU, set the pace"
        else:
            overrides = untried(levers["compute-gpu"], settings)
            text = f"compute-bound on the {device}: {in_step}"
        text += _try(overrides, "the faster settings segperf has are on already")
    contended = contention(cores, advice) if not on_gpu else None
    if contended is not None:
        note, override = contended
        if kind == "compute-bound":  # the step was slow because it shared its cores
            kind, text, overrides = "cpu-contended", f"cpu-contended: {note}; try {override}.", [override]
        else:
            text, overrides = f"{text} Also: {note}; try {override}.", [*overrides, override]
    return {"kind": kind, "text": text, "overrides": overrides}


def contention(cores: dict[str, Any] | None, advice: str = "segperf") -> tuple[str, str] | None:
    """(what happened, the override to try) when a CPU run's DataLoader workers kept at least
    THRESHOLDS["contended_workers_cores"] cores busy while it trained and they and torch's threads
    wanted more cores than the run has, so the step computed on fewer cores than it had threads
    (PyTorch gives each worker one thread for this reason; the main process keeps all of its
    own). The suggestion leaves the workers their cores: torch threads = the cores less the
    workers' share, rounded, at least 1. None when not, or when that is no fewer threads."""
    if not cores:
        return None
    total, threads, workers = cores.get("cores"), cores.get("torch_threads"), cores.get("workers_cores")
    fewer = threads_beside_workers(total, threads, workers)
    if fewer is None:
        return None
    note = (
        f"the DataLoader workers kept {workers:.2f} cores busy while it trained, beside torch's {threads} "
        f"threads on {total} cores, so the step computed on fewer cores than it has threads"
    )
    override = f"num_threads={fewer}" if advice == "segperf" else f"torch.set_num_threads({fewer})"
    return note, override


def _split_note(phases: dict[str, dict]) -> str:
    """' (forward 30%, backward 55%, optimizer step 15% of it)', and the optimizer named when it is
    a large part of every step; '' when the step was not split. Waits for the other ranks are not
    the parts' time."""
    step = phases.get("train_step") or {}
    split, waits = step.get("split") or {}, step.get("waits_s") or {}
    shares = {part: (split.get(part) or {}).get("of_train_step") for part in ("forward", "backward", "optimizer_step")}
    if any(share is None for share in shares.values()):
        return ""
    if any(waits.values()):  # the parts' own time: what each spent waiting for the other ranks left out
        own = {part: max(0.0, float(split[part].get("wall_s") or 0.0) - waits.get(part, 0.0)) for part in shares}
        total = sum(own.values())
        shares = {part: seconds / total if total > 0 else 0.0 for part, seconds in own.items()}
    parts = ", ".join(f"{part.replace('_', ' ')} {_pct(share)}" for part, share in shares.items())
    note = f" ({parts} of it)"
    if shares["optimizer_step"] > THRESHOLDS["optimizer_fraction"]:
        note += (
            "; the optimizer step is a large part of each step: a fused or foreach optimizer "
            "(e.g. torch.optim.AdamW(fused=True)) or fewer trainable parameters cut it"
        )
    return note


def _try(overrides: list[str], otherwise: str, *, why: str = "", lead: str = "; ") -> str:
    """The end of a verdict's sentence: what to try, or why there is nothing left to suggest."""
    if overrides:
        return f"{lead}try {', '.join(overrides)}{why}."
    return f"; {otherwise}." if otherwise else "."


def threads_beside_workers(cores: int | None, threads: int | None, workers_cores: float | None) -> int | None:
    """The torch threads that leave busy DataLoader workers their cores: the cores less the
    workers' share, rounded, at least 1; None when the workers kept fewer than
    THRESHOLDS["contended_workers_cores"] busy, when they and the threads fit in the cores, or
    when that is no fewer threads than `threads`."""
    if not cores or not threads or workers_cores is None or workers_cores < THRESHOLDS["contended_workers_cores"]:
        return None
    if threads + workers_cores <= cores:
        return None
    fewer = max(1, int(cores - workers_cores + 0.5))
    return fewer if fewer < threads else None


# what a memory finding (results.json's memory.findings) makes of the run, most urgent first
MEMORY_KINDS = {"creep": "memory-creep", "pressure": "memory-pressure", "imbalance": "memory-imbalance"}


def memory_verdict(memory: dict[str, Any] | None) -> dict[str, Any] | None:
    """`{"kind", "text"}` beside the time verdict when memory is a problem (creep that will end
    the run, a peak near capacity, one rank holding much more than the others); None otherwise."""
    found = (memory or {}).get("findings") or []
    for kind, name in MEMORY_KINDS.items():
        first = next((f for f in found if f.get("kind") == kind), None)
        if first is not None:
            return {"kind": name, "text": f"{name}: {first['text']}"}
    return None
