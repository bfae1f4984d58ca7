"""Ranks that meet between the steps: a collective inside the training loader's fetch (a user's
dataset or sampler that all-reduces "does every rank still have data?") or elsewhere between two
steps (a barrier in a callback's on_train_batch_start, Lightning's per-step SIGTERM broadcast). A
rank waiting there for a late one is waiting, not loading its data and not Lightning's overhead:
its own verdict is neither data-bound nor overhead-bound for it, and the straggler's cause is
measured against the others' own data time. Measured in 2-process runs (rank 1 0.25 s a batch late
in its data): rank 0 waiting inside its fetch was called data-bound (90%) and the straggler's data
excess read 1.0 ms; waiting at a callback's barrier, 'overhead-bound: framework 90%'."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from segperf.callbacks.collective_wait import CollectiveWait
from segperf.callbacks.profiler_tap import PhaseTap
from segperf.perf.meetings import StepWaits, add_waits
from segperf.perf.phases import FETCH_ACTION, STEP_ACTION
from segperf.perf.ranks import combine, step_parts
from segperf.perf.verdict import verdict


@pytest.fixture(scope="module")
def one_rank_group():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


class Profiler:
    """The user's profiler behind the tap: Lightning's do-nothing one, as PassThroughProfiler."""

    def start(self, action_name: str) -> None:
        pass

    def stop(self, action_name: str) -> None:
        pass


def test_the_tap_says_which_phase_is_open_now():
    tap = PhaseTap(Profiler())
    assert tap.open_phase() is None  # the loop's own time: the framework's
    tap.start(FETCH_ACTION)
    assert tap.open_phase() == "data_wait"
    tap.stop(FETCH_ACTION)
    tap.start(STEP_ACTION)
    assert tap.open_phase() == "train_step"


def test_a_collective_is_filed_where_it_sits_in_the_phase_table(one_rank_group):
    tap = PhaseTap(Profiler())
    part = CollectiveWait()
    part.on_train_start(
        SimpleNamespace(world_size=2, strategy=SimpleNamespace(root_device=torch.device("cpu")), profiler=tap), None
    )
    torch.distributed.barrier()  # Lightning's SIGTERM broadcast, a callback at the step's edge: no action open
    tap.start(FETCH_ACTION)
    torch.distributed.all_reduce(torch.ones(1))  # a user's dataset: every rank still has data?
    tap.stop(FETCH_ACTION)
    part.on_train_batch_start(None, None, None, 0)
    torch.distributed.barrier()  # a callback's on_train_batch_start after PerfMonitor's: not in the step yet
    tap.start(STEP_ACTION)
    torch.distributed.all_reduce(torch.ones(1))  # sync_dist logging in training_step
    part.on_before_backward(None, None, None)
    part.on_after_backward(None, None)
    tap.stop(STEP_ACTION)
    part.on_train_batch_end(None, None, None, None, 0)
    part.on_train_end(None, None)
    (step,) = part.per_step()
    assert set(step.waits) == {"between", "fetch", "forward"}  # the rows' meetings: a column each
    assert set(step.table) == {"framework", "data_wait", "forward"}  # what the verdict takes them out of
    assert step.table["framework"] == pytest.approx(step.host["between"] + step.host["forward"] - step.table["forward"])


def parts_of(data_s: float, fetch_wait_s: float, steps: int = 12) -> dict:
    """A rank's parts: its data wait holds `fetch_wait_s` of waiting inside the fetch for another
    rank; 20 ms forward, 10 ms backward to its last bucket, 2 ms in the all-reduce, 1 ms optimizer."""
    t, waits, times, backward, buckets, meetings = 0.0, [], [], [], [], []
    for _ in range(steps):
        waits.append(data_s + fetch_wait_s)
        t += data_s + fetch_wait_s
        start = t
        before = start + 0.02
        bucket, after = before + 0.01, before + 0.012
        t = after + 0.001
        times.append((start, t))
        backward.append((before, after))
        buckets.append(bucket)
        met = StepWaits()
        met.add("fetch", fetch_wait_s, fetch_wait_s, "data_wait")
        meetings.append(met)
    return step_parts(waits, times, backward, buckets, 2, None, meetings)


def test_a_wait_inside_the_fetch_is_not_the_ranks_own_data_time():
    zero = parts_of(data_s=0.001, fetch_wait_s=0.25)  # waits inside its fetch for rank 1's late batch
    one = parts_of(data_s=0.251, fetch_wait_s=0.0)
    assert zero["data_wait_mean_s"] == pytest.approx(0.251) and zero["data_own_mean_s"] == pytest.approx(0.001)
    assert zero["host_wait_s"]["data_wait"] == pytest.approx(10 * 0.25)  # the steady steps' waits, for the verdict
    rows = []
    for rank, parts in enumerate((zero, one)):
        forward = parts["forward_mean_s"] - parts["forward_host_wait_mean_s"]
        rows.append({"rank": rank, "images": 48, "steps": 12, "images_per_s": 4.0, **parts})
        rows[-1] |= {"forward_compute_mean_s": forward, "verdict": {"kind": "data-bound", "text": "d"}}
    found = combine(rows)["straggler"]
    assert (found["rank"], found["cause"]) == (1, "data")
    assert found["excess_s"]["data"] == pytest.approx(0.25)  # against rank 0's own data time, not its wait
    assert "fetch wait 250.0" in found["text"]


def table(data_s: float, framework_s: float, train_step_s: float, waits: dict) -> dict:
    phases = {
        "data_wait": {"wall_s": data_s},
        "train_step": {"wall_s": train_step_s},
        "framework": {"wall_s": framework_s},
    }
    add_waits({"phases": phases}, {"host_wait_s": waits})
    return phases


def judge(phases: dict) -> dict:
    return verdict(phases, starved_fraction=1.0, gpu_util_mean=None, device_type="cpu", advice="dataloader")


def test_a_rank_waiting_inside_its_fetch_is_not_data_bound():
    assert judge(table(4.58, 0.03, 0.48, {}))["kind"] == "data-bound"  # as read before the waits were filed
    waited = judge(table(4.58, 0.03, 0.48, {"data_wait": 4.56}))
    assert waited["kind"] == "rank-wait-bound" and "waiting for the other ranks" in waited["text"]


def test_a_rank_waiting_at_a_callbacks_barrier_is_not_overhead_bound():
    assert judge(table(0.0, 4.58, 0.48, {}))["kind"] == "overhead-bound"  # 'framework 90%': fewer, larger steps
    waited = judge(table(0.0, 4.58, 0.48, {"framework": 4.56}))
    assert waited["kind"] == "rank-wait-bound" and "framework" not in waited["text"]


def test_a_rank_with_its_own_data_wait_beside_a_short_wait_is_still_data_bound():
    phases = table(3.0, 0.03, 1.0, {"data_wait": 0.2})
    assert phases["data_wait"]["rank_wait_s"] == 0.2 and phases["data_wait"]["wall_s"] == 3.0  # the table unchanged
    assert judge(phases)["kind"] == "data-bound"
