"""AllReduceWait: per training step, when this rank's last gradient bucket was ready for the
all-reduce (DDP), which splits its backward into its own compute and its wait for the others.

Why by hand: neither Lightning nor torch times this. DDP runs the all-reduce of each gradient
bucket through a communication hook; this callback registers one that records the host time it
is called (the bucket's gradients are all computed on this rank) and then runs torch's own
`allreduce_hook`, so the gradients are reduced exactly as without it. A rank slow in backward
has its last bucket ready late and waits little; the others wait inside the all-reduce for it
(segperf.perf.ranks names it).

Left alone, said in `state`: a strategy that is not DDP (FSDP, DeepSpeed, single device), a DDP
model with a communication hook of its own (DDP takes one hook only), a registration DDP
refuses (it must come before the first backward). Steps without an all-reduce (gradient
accumulation's no_sync steps) have no bucket time; their backward stays whole.
"""

from __future__ import annotations

import time

import lightning as L


class AllReduceWait(L.Callback):
    def __init__(self) -> None:
        self.last_bucket: list[float | None] = []  # per training step
        self.state = "not started"
        self._last: float | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.state = self._register(trainer)

    def _register(self, trainer) -> str:
        from torch.nn.parallel import DistributedDataParallel

        model = getattr(trainer.strategy, "model", None)
        if not isinstance(model, DistributedDataParallel):
            return "not measured: the strategy does not wrap the model in DistributedDataParallel"
        if getattr(trainer.strategy, "_ddp_comm_hook", None) is not None:
            return "not measured: the model has a DDP communication hook of its own"
        try:
            model.register_comm_hook(None, self._hook)
        except RuntimeError as error:  # a hook already there, or a backward already run
            return f"not measured: DDP refused the timing hook ({str(error).splitlines()[0]})"
        return "measured"

    def _hook(self, process_group, bucket):  # no annotations: DDP checks them against dist.GradBucket
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        self._last = time.perf_counter()  # the latest bucket's: the last one when backward ends
        return allreduce_hook(process_group, bucket)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        self._last = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self.last_bucket.append(self._last)

    def fold(self, head: int, upto: int) -> list[float | None]:
        """Take the held steps [head, upto) out (segperf.perf.folding), returning them."""
        taken = self.last_bucket[head:upto]
        del self.last_bucket[head:upto]
        return taken
