"""Which runs of a sweep can be compared: timings from different machines (another host, GPU, NVIDIA driver, CUDA
or library version) are not comparable, so the report names what differs and computes no speed-up across them
unless told to (`python -m segperf.report --allow-mixed-machines`).

Reads the `machine` section that segperf.perf.machine writes into every results.json. A field a run did not record
(older results, measurement off) is unknown, not different.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

# shown in describe_machine's line whenever recorded; other fields only where machines differ in them
IN_LINE = ("host", "CPU", "GPU", "torch", "NVIDIA driver", "CUDA")


def _gpu_text(machine: dict) -> str:
    gpus = Counter(
        f"{g.get('name', 'GPU')}" + (f" {g['memory_mib'] / 1024:.0f} GiB" if g.get("memory_mib") else "")
        for g in machine.get("gpus") or []
    )
    return ", ".join(f"{n}x {name}" if n > 1 else name for name, n in gpus.items()) or "no GPU"


def fingerprint(machine: dict | None) -> dict[str, str]:
    """What makes timings comparable, by display name: host, CPU, GPU, NVIDIA driver, CUDA, cuDNN, python and the
    library versions. Fields the run did not record are left out."""
    if not isinstance(machine, dict) or not machine:
        return {}
    fields: dict[str, Any] = {
        "host": machine.get("hostname"),
        "CPU": machine.get("cpu_model"),
        "GPU": _gpu_text(machine) if "gpus" in machine else None,
        "NVIDIA driver": machine.get("nvidia_driver"),
        "CUDA": machine.get("cuda"),
        "cuDNN": machine.get("cudnn"),
        "torch": machine.get("torch"),
    }
    versions = machine.get("versions") if isinstance(machine.get("versions"), dict) else {}
    fields |= {name: version for name, version in versions.items() if name not in fields or fields[name] is None}
    return {name: str(value) for name, value in fields.items() if value is not None}


def differences(machines: list[dict | None]) -> dict[str, list[str]]:
    """Fields with more than one recorded value across `machines`, each with its values in first-seen order."""
    seen: dict[str, dict[str, None]] = {}
    for machine in machines:
        for name, value in fingerprint(machine).items():
            seen.setdefault(name, {})[value] = None
    return {name: list(values) for name, values in seen.items() if len(values) > 1}


def describe_machine(machine: dict | None, extra: tuple[str, ...] = ()) -> str | None:
    """One line naming host, CPU, GPUs, torch (and the NVIDIA driver and CUDA where recorded), plus the `extra`
    fingerprint fields, e.g. those in which the sweep's machines differ."""
    if not isinstance(machine, dict) or not machine:
        return None
    cores, threads = machine.get("cpu_cores"), machine.get("cpu_threads")
    cpu = f"{machine.get('cpu_model') or 'unknown CPU'} ({cores or '?'} cores"
    cpu += f", {threads} threads)" if threads and threads != cores else ")"
    line = (
        f"{machine.get('hostname') or 'unknown host'}: {cpu}, {_gpu_text(machine)}, torch {machine.get('torch') or '?'}"
    )
    fields = fingerprint(machine)
    shown = [name for name in ("NVIDIA driver", "CUDA") if name in fields]
    shown += [name for name in extra if name not in IN_LINE and name in fields]
    return line + "".join(f", {name} {fields[name]}" for name in shown)


def mixed_machines_warning(diffs: dict[str, list[str]], allowed: bool) -> list[str]:
    """The report's opening warning when runs come from machines that differ; [] when they do not."""
    if not diffs:
        return []
    what = "; ".join(f"{name} ({', '.join(values)})" for name, values in diffs.items())
    consequence = (
        "speed-ups below are computed across machines anyway (`--allow-mixed-machines`): read them with care."
        if allowed
        else "speed-ups are not computed (n/a); `--allow-mixed-machines` computes them anyway."
    )
    return [
        f"> **⚠ Not comparable: these runs come from machines that differ in {what}.** Timings from different "
        f"machines do not compare; {consequence}",
        "",
    ]
