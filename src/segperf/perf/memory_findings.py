"""What results.json's `memory` says a person should know: the creep sentence (the warning's and
the summary's) and the findings, one line each (creep, a rise that stopped, pressure, overhang).
No torch here: segperf.callbacks.memory_watch writes the record, this reads it."""

from __future__ import annotations

from typing import Any

from segperf.perf.memory_trend import MIB, duration, size

# a peak at this share of the capacity is pressure; an allocator holding this share of its
# reserved memory unallocated at the peak (and at least OVERHANG_BYTES) is overhang
PRESSURE_SHARE = 0.9
OVERHANG_SHARE = 0.25
OVERHANG_BYTES = 1024 * MIB
HOST_WHAT = "host memory (private bytes of the process and of its DataLoader workers)"
ADVICE = (
    "something keeps memory from step to step: tensors kept in a list, a loss or an output kept "
    "without .detach() or .item(), a cache that grows"
)


def creep_text(creep: dict[str, Any]) -> str:
    """One sentence: what grows, how fast, since when, and when it runs out."""
    parts = []
    if creep.get("host_bytes_per_step"):
        parts.append(f"{HOST_WHAT} grows {size(creep['host_bytes_per_step'])} a step")
    if creep.get("device_bytes_per_step"):
        parts.append(f"torch's allocated device memory grows {size(creep['device_bytes_per_step'])} a step")
    text = " and ".join(parts) + f" since step {creep['since_step']:,}"
    if creep.get("out_of_memory_at_step") is not None:
        text += (
            f"; at this rate the {creep['runs_out_of']} memory left to it ({size(creep['room_bytes'])}, "
            f"{creep['room_from']}) runs out at step ~{creep['out_of_memory_at_step']:,}"
        )
        if creep.get("out_of_memory_in_s") is not None:
            text += f", in about {duration(creep['out_of_memory_in_s'])}"
    return f"{text}. {ADVICE[0].upper()}{ADVICE[1:]}."


def findings(memory: dict[str, Any]) -> list[dict[str, str]]:
    """What the memory record says a person should know, one line each."""
    found = []
    creep, pressure = memory.get("creep") or {}, memory.get("pressure") or {}
    if creep.get("state") == "confirmed":
        found.append({"kind": "creep", "text": creep_text(creep)})
    for name, trend in (memory.get("trend") or {}).items():
        if trend and trend.get("state") == "stopped":
            found.append(
                {
                    "kind": "stopped",
                    "text": f"{name} memory rose {size(trend['bytes_per_step'])} a step from step "
                    f"{trend['since_step']:,}, then stopped (a fill, or a leak that ended)",
                }
            )
    host, device = pressure.get("host") or {}, pressure.get("device") or {}
    if (host.get("fraction") or 0) >= PRESSURE_SHARE:
        found.append(
            {
                "kind": "pressure",
                "text": f"host memory peaked at {host['fraction']:.0%} of its capacity "
                f"({size(host['peak_bytes'])} of {size(host['capacity_bytes'])}, {host['capacity_from']})",
            }
        )
    if (device.get("fraction") or 0) >= PRESSURE_SHARE or device.get("alloc_retries"):
        retries = (
            f"; the allocator retried {device['alloc_retries']:,} allocations" if device.get("alloc_retries") else ""
        )
        found.append(
            {
                "kind": "pressure",
                "text": f"device memory peaked at {device['fraction']:.0%} of its capacity "
                f"({size(device['capacity_bytes'])}){retries}",
            }
        )
    overhang = device.get("reserved_overhang_bytes") or 0
    if overhang >= OVERHANG_BYTES and (device.get("overhang_fraction") or 0) >= OVERHANG_SHARE:
        found.append(
            {
                "kind": "overhang",
                "text": f"the allocator reserved {size(overhang)} ({device['overhang_fraction']:.0%}) more than it "
                "allocated at its peak (fragmentation): try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
            }
        )
    return found
