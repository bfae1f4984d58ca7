"""What CollectiveWait's timing of torch.distributed's collectives costs per call: prints, asserts nothing.

    python scripts/collective_timer_cost.py [--calls 20000] [--repeats 5]

Two measurements, each the best of `--repeats` rounds, raw and timed interleaved:
- the wrapper alone, around a function that does nothing (what the timing adds to any call: the
  checks, two clock reads, the bookkeeping of the wait into its step);
- `all_reduce` of one float on a 1-process gloo group, raw and timed (a real collective's call,
  where the wrapper's share is what a user would see).
A step of a BatchNorm net under DDP issues one or two such calls (DDP's buffer broadcast, Lightning's
per-step SIGTERM broadcast), so the cost per step is about twice the per-call figure.
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from types import SimpleNamespace

import torch
import torch.distributed as dist

from segperf.callbacks.collective_wait import CollectiveWait
from segperf.perf.collectives import CollectiveTimer


def per_call_ns(fn, calls: int, *args) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter_ns() - start) / calls


def waits_collector() -> CollectiveWait:
    """A CollectiveWait filing every wait under a step's forward, as during a fit."""
    waits = CollectiveWait()
    waits._phase = "forward"
    return waits


def best_of(raw, timed, calls: int, repeats: int, *args) -> tuple[float, float]:
    raws, timeds = [], []
    for _ in range(repeats):
        raws.append(per_call_ns(raw, calls, *args))
        timeds.append(per_call_ns(timed, calls, *args))
    return min(raws), min(timeds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    def all_reduce(tensor, op=None, group=None, async_op=False):
        return None

    fake = SimpleNamespace(all_reduce=all_reduce)
    timer = CollectiveTimer(waits_collector()._waited, module=fake)
    timer.install()
    raw_ns, timed_ns = best_of(all_reduce, fake.all_reduce, args.calls, args.repeats, None)
    print(f"wrapper alone: {raw_ns:,.0f} ns raw, {timed_ns:,.0f} ns timed: +{timed_ns - raw_ns:,.0f} ns a call")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        tensor = torch.ones(1)
        raw = dist.all_reduce
        timer = CollectiveTimer(waits_collector()._waited)
        timer.install()
        timed = dist.all_reduce
        raw_ns, timed_ns = best_of(raw, timed, args.calls // 4, args.repeats, tensor)
        timer.uninstall()
        extra = timed_ns - raw_ns
        print(
            f"gloo all_reduce of 1 float, 1 process: {raw_ns / 1e3:,.1f} us raw, {timed_ns / 1e3:,.1f} us timed: "
            f"+{extra:,.0f} ns a call ({extra / raw_ns:+.1%})"
        )
    finally:
        dist.destroy_process_group()
    print(f"torch {torch.__version__}; {os.cpu_count()} CPUs; best of {args.repeats} rounds")


if __name__ == "__main__":
    main()
