"""Prefetching for the main-process loader (workers=0).

With worker processes, DataLoader's `prefetch_factor` already keeps batches in flight. With
`num_workers=0` DataLoader refuses a prefetch factor and loads each batch only when asked, so
the accelerator waits for every decode. The seed study's first optimization ("pre-fetch data",
before it added workers) loads the next batches while the current one trains; this wrapper does
that with one background thread (JPEG decode and resize release the GIL, so it overlaps).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader

_DONE = object()


class ThreadPrefetchLoader:
    def __init__(self, loader: DataLoader, depth: int) -> None:
        if depth < 1:
            raise ValueError(f"data.prefetch_factor={depth}: use an integer >= 1, or null for no prefetching")
        self.loader = loader
        self.depth = depth

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:  # batch_size, dataset, sampler, pin_memory, ...
        if name == "loader":  # not set yet (copy, unpickle): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self) -> Iterator[Any]:
        batches: queue.Queue = queue.Queue(maxsize=self.depth)
        stop = threading.Event()

        def produce() -> None:
            try:
                for batch in self.loader:
                    while not stop.is_set():
                        try:
                            batches.put(batch, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if stop.is_set():
                        return
                batches.put(_DONE)
            except BaseException as error:  # re-raised in the consumer, with its traceback
                batches.put(error)

        thread = threading.Thread(target=produce, name="segperf-prefetch", daemon=True)
        thread.start()
        try:
            while (item := batches.get()) is not _DONE:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            # the consumer stopped early (max steps, Ctrl-C): let the producer exit
            stop.set()
            while thread.is_alive():
                try:
                    batches.get_nowait()
                except queue.Empty:
                    thread.join(timeout=0.1)
