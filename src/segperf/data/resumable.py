"""A train loader that resumes mid-run: interrupted runs continue where they stopped.

A segperf run is one epoch (the sampler draws `train_images`), so a run interrupted half-way
is interrupted mid-epoch. Lightning restores the model, optimizer and loop counters from a
checkpoint, but a plain DataLoader would start the epoch again from its first sample and the
run would train on more images than asked. Lightning's hook for this is the `_Stateful`
protocol: a train loader with `state_dict()`/`load_state_dict()` has its state saved in every
checkpoint and restored before iteration. This wrapper saves how many batches the trainer
finished, and on restore makes the sampler skip exactly those samples. The sampler's order is
seeded, so the resumed run sees the same remaining samples, in the same order, as an
uninterrupted run would. Torchdata's StatefulDataLoader does this too, but would add a
dependency and replace DataLoader in every other path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any

from torch.utils.data import Sampler


class SkippingSampler(Sampler[int]):
    """`sampler` without its first `skip` indices (the order itself is unchanged)."""

    def __init__(self, sampler: Sampler[int], skip: int = 0) -> None:
        self.sampler = sampler
        self.skip = skip

    def __iter__(self) -> Iterator[int]:
        return islice(iter(self.sampler), self.skip, None)

    def __len__(self) -> int:
        return max(0, len(self.sampler) - self.skip)  # type: ignore[arg-type]


class ResumableLoader:
    """Wraps the train loader; `len()` stays the whole run's batch count so Lightning's restored
    batch counter ends the epoch at the right batch.

    `batches_done` returns the batches the trainer has completed (read from the trainer at save
    time, not counted here: Lightning fetches one batch ahead, so the loader's own count would
    be one too many)."""

    def __init__(
        self, loader: Iterable, sampler: SkippingSampler, batch_size: int, batches_done: Callable[[], int]
    ) -> None:
        self.loader = loader
        self.sampler = sampler
        self.batch_size = batch_size
        self.batches_done = batches_done
        self.total_batches = -(-len(sampler.sampler) // batch_size)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return self.total_batches

    def __iter__(self) -> Iterator[Any]:
        yield from self.loader
        self.sampler.skip = 0  # a later pass (if any) starts from the beginning

    def state_dict(self) -> dict[str, int]:
        done = self.batches_done()
        return {"batches_done": done, "samples_done": min(done * self.batch_size, len(self.sampler.sampler))}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.sampler.skip = int(state.get("samples_done", 0))

    def __getattr__(self, name: str) -> Any:
        # Lightning and the measurement read DataLoader attributes (num_workers, batch_size, ...)
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)
