"""Text formatting shared by the run summary, the benchmarks and the report: numbers, sizes,
shares of the CPU, markdown tables. One module, so a number reads the same wherever it is
printed, and neither perf/ nor bench/ has to borrow from the report."""

from __future__ import annotations

_MIB = 1024 * 1024


def fmt_num(value: float | None, digits: int = 3) -> str:
    """2-3 significant digits with thousands separators; "n/a" for a missing value."""
    if value is None:
        return "n/a"
    if abs(value) >= 10 ** (digits - 1):
        return f"{value:,.0f}"
    return f"{value:#.{digits}g}".rstrip(".")  # keep "2.10", not "2.1": the digits are the precision


def fmt_pct(fraction: float | None) -> str:
    return "n/a" if fraction is None else f"{fraction * 100:.1f}%"


def md_table(headers: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    """A GitHub-flavoured table padded to column width, so it also reads well in a terminal."""
    cells = [[h.replace("|", "\\|") for h in row] for row in [headers, *rows]]
    widths = [max(3, *(len(row[i]) for row in cells)) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        padded = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        return "| " + " | ".join(padded) + " |"

    rule = ["-" * (w + 1) + ":" if i in right else "-" * (w + 2) for i, w in enumerate(widths)]
    return [line(cells[0]), "|" + "|".join(rule) + "|", *(line(r) for r in cells[1:])]


def format_percent_of_cores(cpu_percent: float | None, cores: int) -> str:
    """126, 12 -> '126% of 1,200% (1.3 of 12 cores busy)'."""
    if cpu_percent is None:
        return "n/a"
    return f"{cpu_percent:,.0f}% of {cores * 100:,}% ({cpu_percent / 100:.1f} of {cores} cores busy)"


def format_mib(num_bytes: float | None, unit: bool = True) -> str:
    """1_988_100_096 -> '1,896 MiB' ('1,896' with unit=False); None -> 'n/a'."""
    if num_bytes is None:
        return "n/a"
    return f"{num_bytes / _MIB:,.0f}" + (" MiB" if unit else "")


def format_usage(used_bytes: float | None, total_bytes: float | None) -> str:
    """'1,896 / 15,932 MiB (12%)', as in the seed's peak RSS and peak GPU memory lines; '1,896 MiB' when the
    total is unknown; 'n/a' without data."""
    if used_bytes is None or not total_bytes:
        return format_mib(used_bytes)
    return f"{format_mib(used_bytes, False)} / {format_mib(total_bytes)} ({100 * used_bytes / total_bytes:.0f}%)"
