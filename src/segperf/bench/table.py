"""What `python -m segperf.bench data` prints: one line per timed row, the table, and the lines
under it (the memory-copy bound, how far decode=reduced moves the pixels)."""

from __future__ import annotations

from typing import Any

from segperf.perf.formatting import md_table

REFERENCE = "naive"


def label(row: dict[str, Any]) -> str:
    """A row's settings in a few words: the line printed as it is measured."""
    if row["loader"] in (REFERENCE, "copy bound"):
        return row["loader"]
    if row["loader"] == "device cache":
        return f"decode={row['decode']} cache=device ({row['device']})"
    pin = "on" if row["pin"] else "off"
    return f"decode={row['decode']} cache={row['cache']} workers={row['workers']} pin={pin}"


def table(rows: list[dict[str, Any]]) -> str:
    headers = ["loader", "decode", "cache", "workers", "pin", "page cache", "images/s", "vs naive", "note"]
    cells = [
        [
            r["loader"],
            r["decode"] or "-",
            f"device ({r['device']})" if r["loader"] == "device cache" else r["cache"],
            str(r["workers"]),
            "on" if r["pin"] else "off",
            r["page_cache"],
            f"{r['images_per_s']:,.1f}",
            f"{r['ratio_vs_naive']:.2f}x",
            r["note"],
        ]
        for r in rows
    ]
    return "\n".join(md_table(headers, cells, right={3, 6, 7}))


def closing_lines(
    rows: list[dict[str, Any]], quality: dict[str, float] | None, height: int, width: int, masks: bool = True
) -> list[str]:
    """The lines under the table: the copy bound (when a cache was filled) and the decode difference
    (`masks`: the data has masks, decoded alike in both modes; an image folder has labels)."""
    lines = []
    bound = rows[-1]
    if bound["loader"] == "copy bound":
        lines.append(
            f"\nBound: gathering cached batches copies memory at {bound['bytes_per_s'] / 1e9:.2f} GB/s = "
            f"{bound['images_per_s']:,.0f} images/s at {height}x{width}."
        )
    if quality:
        lines.append(
            f"decode=reduced vs full at {height}x{width}: mean absolute pixel difference "
            f"{quality['mean_abs_diff']:.2f} of 255 (max {quality['max_abs_diff']:.0f}) over "
            f"{quality['images']} images" + ("; masks are decoded the same way in both modes." if masks else ".")
        )
    return lines
