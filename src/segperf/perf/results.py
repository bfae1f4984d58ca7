"""results.json and summary.txt: the run's record, written atomically.

The key names of results.json are a public interface (DESIGN.md): the report reads them.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write to a temp file in the same folder, then rename over the target: a reader (or a
    crash) never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | Path, data: Any) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def format_summary(results: dict[str, Any]) -> str:
    """A short human-readable record of the run (the full per-phase tables come with the
    measurement callbacks)."""
    d, t, q = results["dataset"], results.get("train") or {}, results.get("quality") or {}

    def num(value: Any, spec: str) -> str:
        return "n/a" if value is None else format(value, spec)

    lines = [
        f"status            {results['status']}" + (f" ({results['error']})" if results.get("error") else ""),
        f"data              {d.get('root', 'n/a')}",
        f"                  {d.get('images', 0):,} datapoints ({d.get('train_images', 0):,} train, "
        f"{d.get('val_images', 0):,} val), {d.get('cars', 0):,} cars ({d.get('train_cars', 0):,} train, "
        f"{d.get('val_cars', 0):,} val)",
        f"device            {results.get('device', 'n/a')}, precision {results.get('precision', 'n/a')}",
        f"trained on        {t.get('images', 0):,} images in {t.get('steps', 0):,} steps",
        f"wall clock        {num(t.get('wall_s'), '.1f')} s (warm-up {num(t.get('warmup_s'), '.1f')} s, "
        f"validation {num(t.get('validation_s'), '.1f')} s)",
        f"throughput        {num(t.get('images_per_s'), '.2f')} images/s after warm-up",
        f"val pixel acc.    {num(q.get('val_pixel_accuracy'), '.4f')}",
        f"val Dice          {num(q.get('val_dice'), '.4f')}",
    ]
    return "\n".join(lines) + "\n"
