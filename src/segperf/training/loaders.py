"""A user's DataLoaders, rebuilt with the run's DataLoader axes and batch size.

segperf's own data modules build their loaders from `data.num_workers`, `data.prefetch_factor`,
`data.pin_memory` and `batch_size`. A user's data module builds its own, so segperf rebuilds each
one its `train_dataloader()` / `val_dataloader()` returns: the same dataset, sampler (or shuffle),
collate_fn, drop_last and worker hooks, with segperf's worker count, prefetch, pinning,
persistence and batch size. What it changed, and what it could not apply and why, is recorded
(results.json `loaders`, and `adjusted` in the form the report reads as "not applied"): a setting
is never dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch.utils.data import BatchSampler, DataLoader, IterableDataset

from segperf.data.prefetch import ThreadPrefetchLoader


@dataclass(frozen=True)
class LoaderSettings:
    """What the run asks of every loader: the DataLoader axes and the batch size."""

    num_workers: int
    prefetch_factor: int | None
    pin_memory: bool
    persistent_workers: bool
    batch_size: int


# config key of each setting, as `adjusted` names them (segperf.axes.training_axis_keys)
SETTING_KEYS = {
    "num_workers": "data.num_workers",
    "prefetch_factor": "data.prefetch_factor",
    "pin_memory": "data.pin_memory",
    "batch_size": "batch_size",
}


@dataclass
class Rebuilt:
    """One loader after rebuilding: the loader to train with, what changed ({setting: {from, to}})
    and what could not apply ({config key: {requested, used, reason}})."""

    loader: Any
    changed: dict[str, dict[str, Any]]
    not_applied: dict[str, dict[str, Any]]
    # what the rebuilt loader took from the user's as it was: {"sampler": "WeightedRandomSampler", ...}
    kept: dict[str, str] | None = None

    def record(self) -> dict[str, Any]:
        return {"changed": self.changed, "not_applied": self.not_applied} | ({"kept": self.kept} if self.kept else {})


def _own_batch_size(loader: DataLoader) -> int | None:
    if loader.batch_size is not None:
        return loader.batch_size
    return getattr(loader.batch_sampler, "batch_size", None)


def rebuild(loader: Any, settings: LoaderSettings, name: str, own_workers: int | None = None) -> Rebuilt:
    """`loader` with `settings` applied where they can be (see the module docstring).

    `own_workers`: where segperf passed its num_workers to the data module's constructor, the
    workers the module's own default would have given (the loader arrives with segperf's already):
    what the record's "from" says, and what an IterableDataset's loader keeps."""
    if not isinstance(loader, DataLoader):
        reason = (
            f"the data module's {name}_dataloader() returned {type(loader).__name__}, not a torch DataLoader: "
            "segperf cannot rebuild it, so it trains with the loader as it is"
        )
        wanted = {"num_workers": settings.num_workers, "prefetch_factor": settings.prefetch_factor}
        wanted |= {"pin_memory": settings.pin_memory, "batch_size": settings.batch_size}
        return Rebuilt(
            loader, {}, {SETTING_KEYS[k]: {"requested": v, "used": None, "reason": reason} for k, v in wanted.items()}
        )
    not_applied: dict[str, dict[str, Any]] = {}
    workers = settings.num_workers
    theirs = loader.num_workers if own_workers is None else own_workers
    iterable = isinstance(loader.dataset, IterableDataset)
    if iterable and workers != theirs:
        # every worker iterates its own copy of an IterableDataset: without sharding by
        # torch.utils.data.get_worker_info() inside the dataset, N workers yield every sample N times
        not_applied[SETTING_KEYS["num_workers"]] = {
            "requested": workers,
            "used": theirs,
            "reason": f"{type(loader.dataset).__name__} is an IterableDataset: each worker would yield the whole "
            "dataset (duplicates) unless the dataset shards itself by worker, so the loader keeps its workers",
        }
        workers = theirs
    options: dict[str, Any] = {
        "num_workers": workers,
        "pin_memory": settings.pin_memory,
        "collate_fn": loader.collate_fn,
        "worker_init_fn": loader.worker_init_fn,
        "generator": loader.generator,
        "timeout": loader.timeout,
        "multiprocessing_context": loader.multiprocessing_context if workers else None,
        "prefetch_factor": settings.prefetch_factor if workers else None,
        "persistent_workers": settings.persistent_workers and workers > 0,
    }
    batch_size = settings.batch_size
    if iterable:
        options |= {"batch_size": batch_size, "drop_last": loader.drop_last}
    elif loader.batch_size is None and not isinstance(loader.batch_sampler, BatchSampler):
        # the user's own batch sampler decides the batches: kept, and with it its batch size
        options["batch_sampler"] = loader.batch_sampler
        batch_size = _own_batch_size(loader)
        if batch_size != settings.batch_size:
            not_applied["batch_size"] = {
                "requested": settings.batch_size,
                "used": batch_size,
                "reason": f"the loader batches with its own {type(loader.batch_sampler).__name__}",
            }
    else:
        options |= {"sampler": loader.sampler, "batch_size": batch_size, "drop_last": loader.drop_last}
    before = _settings_of(loader) | {"num_workers": theirs}
    if not theirs:
        before["prefetch_factor"] = None  # as for any loader without workers
    new: Any = DataLoader(loader.dataset, **options)
    # what the new loader does, DataLoader's defaults resolved (prefetch_factor=None is 2 with workers)
    after = _settings_of(new) | {"batch_size": batch_size}
    if workers == 0 and settings.prefetch_factor:
        # DataLoader refuses a prefetch factor without workers: a background thread keeps batches ready,
        # as segperf's own loaders do (segperf.data.prefetch)
        new = ThreadPrefetchLoader(new, settings.prefetch_factor)
        after["prefetch_factor"] = settings.prefetch_factor
    changed = {key: {"from": before[key], "to": after[key]} for key in before if before[key] != after[key]}
    return Rebuilt(new, changed, not_applied, kept_parts(loader.dataset, options))


def kept_parts(dataset: Any, options: dict[str, Any]) -> dict[str, str]:
    """The user's parts the rebuilt loader keeps, by name, read from the options it was built with
    (so the record shows them: an outside user checked by hand that their WeightedRandomSampler and
    collate function survived): the dataset, its sampler or batch sampler (an IterableDataset has
    none), the collate function and the worker hook."""

    def name(part: Any) -> str:
        return getattr(part, "__qualname__", None) or type(part).__qualname__

    parts = ("batch_sampler", "sampler", "collate_fn", "worker_init_fn")
    return {"dataset": name(dataset)} | {key: name(options[key]) for key in parts if options.get(key) is not None}


def _settings_of(loader: DataLoader) -> dict[str, Any]:
    """The settings rebuilding may change, as the loader applies them."""
    return {
        "num_workers": loader.num_workers,
        "prefetch_factor": loader.prefetch_factor if loader.num_workers else None,
        "pin_memory": loader.pin_memory,
        "persistent_workers": loader.persistent_workers,
        "batch_size": _own_batch_size(loader),
    }
