"""summary.txt's Memory section and the memory line of its verdict, from results.json's `memory`
(segperf.callbacks.memory_watch) and, under DDP, the ranks' rows (segperf.perf.ranks)."""

from __future__ import annotations

from typing import Any

from segperf.perf.memory_trend import duration, rank_memory, size


def _kv(key: str, value: str) -> str:
    return f"{key:<23} {value}"


def creep_cell(trend: dict[str, Any] | None, creep: dict[str, Any], name: str) -> str:
    """One series' creep: none, rising (early), confirmed with its forecast, or stopped."""
    if not trend:
        return "n/a"
    state = trend.get("state")
    if state in ("not judged", None):
        return f"not judged (fewer than a dozen readings after step {trend.get('judged_after_step', 0):,})"
    if state == "flat":
        return f"none (flat after step {trend.get('judged_after_step', 0):,}: warm-up and the first validation)"
    rate = f"+{size(trend.get('bytes_per_step'))} a step since step {trend.get('since_step') or 0:,}"
    if state == "rising":
        return f"rising (not yet confirmed): {rate}"
    if state == "stopped":
        return f"rose {rate}, then stopped (a fill, or a leak that ended)"
    text = f"confirmed: {rate}"
    if creep.get("runs_out_of") == name and creep.get("out_of_memory_at_step") is not None:
        text += f"; out of memory at step ~{creep['out_of_memory_at_step']:,}"
        if creep.get("out_of_memory_in_s") is not None:
            text += f" (in about {duration(creep['out_of_memory_in_s'])})"
        text += f", {size(creep.get('room_bytes'))} left ({creep.get('room_from')})"
    return text


def _share(peak: int | None, capacity: int | None, where: str) -> str:
    if peak is None:
        return "n/a"
    if not capacity:
        return size(peak)
    return f"{size(peak)} of {size(capacity)} ({peak / capacity:.0%}, {where})"


def memory_rows(results: dict[str, Any]) -> list[str]:
    memory = results.get("memory") or {}
    if memory.get("not_measured") and not memory.get("trend"):
        return [_kv("Memory", f"not measured ({memory['not_measured']})")]
    trend, creep, pressure = memory.get("trend") or {}, memory.get("creep") or {}, memory.get("pressure") or {}
    host, device = pressure.get("host") or {}, pressure.get("device")
    rows = [
        _kv("Host creep", creep_cell(trend.get("host"), creep, "host")),
        _kv("Host peak", _share(host.get("peak_bytes"), host.get("capacity_bytes"), host.get("capacity_from", ""))),
    ]
    if trend.get("device") or device:
        rows.append(_kv("Device creep", creep_cell(trend.get("device"), creep, "device")))
    if device:
        rows.append(
            _kv("Device peak", _share(device.get("peak_reserved_bytes"), device.get("capacity_bytes"), "reserved"))
        )
        rows.append(
            _kv(
                "Allocated / reserved",
                f"{size(device.get('peak_allocated_bytes'))} / {size(device.get('peak_reserved_bytes'))} at peak "
                f"(overhang {size(device.get('reserved_overhang_bytes'))}); "
                f"allocation retries {device.get('alloc_retries', 0):,}",
            )
        )
    ranks = (results.get("distributed") or {}).get("ranks") or []
    if any(row.get("memory") for row in ranks):
        across = memory.get("ranks") or rank_memory(ranks)
        peaks = across.get("host_peak_bytes") or {}
        rows.append(_kv("Per-rank host peak", ", ".join(f"rank {r} {size(v)}" for r, v in peaks.items()) or "n/a"))
        rows.append(_kv("Across ranks", across.get("text") or "no rank stands out"))
    for finding in memory.get("findings") or []:
        if finding.get("kind") not in ("creep", "stopped"):  # those are the creep rows
            rows.append(_kv("Finding", finding["text"]))
    if memory.get("warnings"):
        first = memory["warnings"][0]
        rows.append(_kv("Warned", f"at step {first['step']:,} (during the run), {len(memory['warnings'])} time(s)"))
    return rows


def memory_verdict_line(results: dict[str, Any]) -> list[str]:
    """The memory verdict beside the time verdict, when memory is a problem."""
    found = (results.get("verdict") or {}).get("memory") or (results.get("memory") or {}).get("verdict")
    lines = [f"Memory: {found['text']}"] if found else []
    ranks = (results.get("distributed") or {}).get("ranks") or []
    if any(row.get("memory") for row in ranks):
        across = (results.get("memory") or {}).get("ranks") or rank_memory(ranks)
        if across.get("text"):
            lines.append(f"Memory across ranks: {across['text']}")
    return lines
