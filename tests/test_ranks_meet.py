"""Where data-parallel ranks meet inside a step (DDP's buffer broadcast, SyncBatchNorm, sync_dist
logging, barriers): each rank's wait there is measured as waiting, taken out of the phase it sits
in, the straggler is named for its own cause, and the run is judged by the rank the others wait
for. Fast: the collectives of a 1-rank gloo group, fake CUDA events, the maths on made-up steps.
Real 2-process runs are in tests/test_monitor_ddp_meetings.py."""

from __future__ import annotations

import socket
import threading
import time
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from segperf.callbacks.collective_wait import CollectiveWait
from segperf.perf.collectives import CollectiveTimer
from segperf.perf.meetings import StepWaits, add_waits
from segperf.perf.ranks import combine, step_parts
from segperf.perf.summary import format_run_summary
from segperf.perf.verdict import verdict


@pytest.fixture(scope="module")
def one_rank_group():
    """torch.distributed initialized on one gloo rank: every collective returns at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def trainer(device: str = "cpu") -> SimpleNamespace:
    return SimpleNamespace(world_size=2, strategy=SimpleNamespace(root_device=torch.device(device)))


# -- the timer ----------------------------------------------------------------------------------
def test_the_timer_times_blocking_collectives_once_each_and_restores_the_module():
    calls, waits = [], []

    def all_reduce(tensor, op=None, group=None, async_op=False):
        calls.append("all_reduce")
        time.sleep(0.01)

    def all_gather_object(objects, obj, group=None):
        fake.all_reduce(None)  # a collective inside another counts once, as the outer one

    fake = SimpleNamespace(all_reduce=all_reduce, all_gather_object=all_gather_object)
    timer = CollectiveTimer(lambda name, host_s, device: waits.append((name, host_s)), module=fake)
    assert set(timer.install()) == {"all_reduce", "all_gather_object"}
    fake.all_reduce(None)
    fake.all_reduce(None, None, None, True)  # async_op=True returns at once: its wait is elsewhere
    fake.all_gather_object([], 1)
    other = threading.Thread(target=fake.all_reduce, args=(None,))  # not the training loop's thread
    other.start()
    other.join()
    assert [name for name, _ in waits] == ["all_reduce", "all_gather_object"] and len(calls) == 4
    assert all(host_s >= 0.009 for _, host_s in waits)
    timer.uninstall()
    assert fake.all_reduce is all_reduce and fake.all_gather_object is all_gather_object


def test_the_timer_leaves_a_wrapper_put_on_top_of_it_in_place():
    def barrier(group=None, async_op=False):
        pass

    fake = SimpleNamespace(barrier=barrier)
    timer = CollectiveTimer(lambda *a: None, module=fake)
    timer.install()
    theirs = fake.barrier  # someone wraps ours while we are installed
    fake.barrier = lambda *a, **k: theirs(*a, **k)
    on_top = fake.barrier
    timer.uninstall()
    assert fake.barrier is on_top  # theirs still works, ours passes through untimed


# -- the part: each wait in its phase ---------------------------------------------------------------
class SyncNorm(torch.autograd.Function):
    """What torch's SyncBatchNorm does to meet the other ranks (torch/nn/modules/_functions.py:
    dist.all_gather of the statistics in forward, torch.distributed.all_reduce in backward),
    which DDP allows on GPU modules only: this is it on the CPU, without the normalization."""

    @staticmethod
    def forward(ctx, x):
        gathered = [torch.empty(2)]
        dist.all_gather(gathered, torch.zeros(2), None, async_op=False)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        torch.distributed.all_reduce(torch.zeros(2), torch.distributed.ReduceOp.SUM, None, async_op=False)
        return grad


def one_step(part: CollectiveWait, forward, backward=None, optimizer=None) -> None:
    part.on_train_batch_start(None, None, None, 0)
    forward()
    part.on_before_backward(None, None, None)
    if backward:
        backward()
    part.on_after_backward(None, None)
    if optimizer:
        optimizer()
    part.on_train_batch_end(None, None, None, None, 0)


def test_each_collective_is_filed_under_the_phase_it_sits_in(one_rank_group):
    part = CollectiveWait()
    part.on_train_start(trainer(), None)
    assert part.state == "measured" and getattr(dist.broadcast, "__segperf_timed__", False)
    x = torch.ones(3, requires_grad=True)
    out = []
    one_step(
        part,
        forward=lambda: (
            dist._broadcast_coalesced(dist.group.WORLD, [torch.zeros(2)], 1024, 0),
            out.append(SyncNorm.apply(x)),
        ),
        backward=lambda: out[-1].sum().backward(),
        optimizer=lambda: torch.distributed.barrier(),
    )
    torch.distributed.all_reduce(torch.zeros(1))  # between two steps (a callback's hook)
    part.on_validation_start(None, None)
    torch.distributed.all_reduce(torch.zeros(1))  # torchmetrics' sync, at validation
    part.on_validation_end(None, None)
    one_step(part, forward=lambda: torch.distributed.all_reduce(torch.zeros(1)))
    part.on_train_end(None, None)
    assert not getattr(dist.broadcast, "__segperf_timed__", False)  # the module's own again
    first, second = part.per_step()
    assert set(first.waits) == {"forward", "backward", "optimizer"}
    assert set(second.waits) == {"between", "forward"} and set(part.outside.waits) == {"validation"}
    assert part.calls["_broadcast_coalesced"] == 1 and part.calls["all_gather"] == 1 and part.calls["all_reduce"] == 4


class FakeEvent:
    """A CUDA event as CollectiveWait reads it: pending until the test says the device got there."""

    done = False

    def __init__(self, at_ms: float) -> None:
        self.at_ms = at_ms

    def record(self) -> None:
        pass

    def query(self) -> bool:
        return FakeEvent.done

    def synchronize(self) -> None:
        FakeEvent.done = True

    def elapsed_time(self, end: FakeEvent) -> float:
        return end.at_ms - self.at_ms


def test_on_a_gpu_the_wait_is_the_devices_read_without_stalling_the_step(one_rank_group):
    # NCCL returns to the host once the collective is queued: the host's time says nothing
    FakeEvent.done = False
    part = CollectiveWait(events=lambda: (FakeEvent(0.0), FakeEvent(237.0)))
    part.on_train_start(trainer("cuda"), None)
    assert part.state == "measured on the device (CUDA events)"
    one_step(part, forward=lambda: torch.distributed.all_reduce(torch.zeros(1)))
    assert part.steps[0].waits == {} and "forward" in part.steps[0].host  # not yet done on the device
    one_step(part, forward=lambda: None)
    part.on_train_end(None, None)
    first, _ = part.per_step()  # at the end: once, waiting for the device
    assert first.waits["forward"] == pytest.approx(0.237) and first.host["forward"] < 0.1


def test_a_single_process_is_left_alone():
    part = CollectiveWait()
    part.on_train_start(SimpleNamespace(world_size=1), None)
    assert part.state.startswith("not measured") and not getattr(dist.all_reduce, "__segperf_timed__", False)


# -- the ranks: waits out of the phases, the straggler, the run's verdict -------------------------------
def rank_parts(data_s: float, forward_s: float, forward_wait_s: float, steps: int = 30) -> dict:
    """A rank's parts over `steps` steps: data wait, a forward holding `forward_wait_s` of waiting
    (DDP's buffer broadcast), 8 ms of backward compute, 3 ms in the all-reduce, 1 ms optimizer."""
    t, waits, times, backward, buckets, meetings = 0.0, [], [], [], [], []
    for i in range(steps):
        jitter = 0.0003 * (i % 3)
        t += data_s + jitter
        start = t
        t += forward_s + forward_wait_s
        before = t
        t += 0.008
        bucket = t
        t += 0.003
        after = t
        t += 0.001
        waits.append(data_s + jitter)
        times.append((start, t))
        backward.append((before, after))
        buckets.append(bucket)
        met = StepWaits()
        met.add("forward", forward_wait_s, forward_wait_s)
        meetings.append(met)
    return step_parts(waits, times, backward, buckets, 2, None, meetings)


def row_of(rank: int, parts: dict, kind: str, text: str) -> dict:
    return {
        "rank": rank,
        "images": 120,
        "steps": parts["steps"],
        "images_per_s": 15.0,
        **parts,
        "forward_compute_mean_s": parts["forward_mean_s"] - parts["forward_host_wait_mean_s"],
        "ready_mean_s": 0.0,
        "verdict": {"kind": kind, "text": text, "overrides": []},
    }


def test_a_batchnorm_nets_rank_slow_in_its_data_is_named_for_its_data_and_sets_the_runs_verdict():
    # rank 0 waits ~237 ms inside its forward (the buffer broadcast) for rank 1's late batch
    zero = rank_parts(data_s=0.019, forward_s=0.018, forward_wait_s=0.237)
    one = rank_parts(data_s=0.263, forward_s=0.018, forward_wait_s=0.002)
    assert zero["forward_mean_s"] == pytest.approx(0.255) and zero["forward_wait_mean_s"] == pytest.approx(0.237)
    rows = [
        row_of(0, zero, "rank-wait-bound", "rank-wait-bound: 80% of training time waiting for the other ranks"),
        row_of(
            1, one, "data-bound", "data-bound: 89% of training time waiting for data; try DataLoader(num_workers=2)."
        ),
    ]
    combined = combine(rows)
    found = combined["straggler"]
    assert (found["rank"], found["cause"]) == (1, "data") and found["last_share"] == 1.0
    assert found["lag_median_s"] == pytest.approx(0.235, abs=0.002)
    assert "rank 1 waits for its data: last to reach where the ranks meet in 100% of 28 steps" in found["text"]
    assert "fwd wait 237.0" in found["text"]
    run = combined["verdict"]
    assert run["kind"] == "data-bound" and run["rank"] == 1 and "on rank 1: data-bound" in run["text"]
    assert "num_workers" in run["text"]


def test_two_identical_batchnorm_ranks_name_nobody():
    zero = rank_parts(data_s=0.002, forward_s=0.02, forward_wait_s=0.001)
    one = rank_parts(data_s=0.002, forward_s=0.02, forward_wait_s=0.001)
    one["waits"] = [w + (0.0004 if i % 2 else -0.0004) for i, w in enumerate(one["waits"])]  # first, then last
    combined = combine([row_of(0, zero, "compute-bound", "compute-bound"), row_of(1, one, "compute-bound", "x")])
    assert combined["straggler"]["rank"] is None and "no rank stands out" in combined["straggler"]["text"]
    assert combined["verdict"]["text"] == "compute-bound"  # rank 0's own: nobody sets the pace


def test_a_collective_in_the_backward_is_not_backward_compute():
    met = StepWaits()
    met.add("backward", 0.05, 0.05)  # SyncBatchNorm's all-reduce, waiting for a slower rank
    parts = step_parts([0.0] * 3, [(0.0, 0.2)] * 3, [(0.05, 0.19)] * 3, [0.18] * 3, 0, None, [met] * 3)
    assert parts["backward_compute_mean_s"] == pytest.approx(0.08)  # 0.13 to the last bucket, 0.05 of it waiting
    assert parts["backward_wait_mean_s"] == pytest.approx(0.05)
    assert parts["host_wait_s"]["backward"] == pytest.approx(3 * (0.05 + 0.01))  # and the all-reduce's


# -- the verdict never reads a wait as compute ---------------------------------------------------------
def phases(train_step_s: float, data_s: float, waits: dict | None = None) -> dict:
    split = {
        "forward": {"wall_s": train_step_s * 0.9, "of_train_step": 0.9},
        "backward": {"wall_s": train_step_s * 0.08, "of_train_step": 0.08},
        "optimizer_step": {"wall_s": train_step_s * 0.02, "of_train_step": 0.02},
    }
    table = {
        "data_wait": {"wall_s": data_s, "fraction": 0.0},
        "train_step": {"wall_s": train_step_s, "fraction": 0.0, "split": split},
    }
    results = {"phases": table}
    if waits:
        add_waits(results, {"host_wait_s": waits})
    return table


def judge(table: dict) -> dict:
    return verdict(table, starved_fraction=0.0, gpu_util_mean=None, device_type="cpu", advice="dataloader")


def test_a_rank_that_mostly_waits_for_another_is_not_compute_bound():
    assert judge(phases(27.5, 1.9))["kind"] == "compute-bound"  # without its waits measured, as before
    waited = judge(phases(27.5, 1.9, {"forward": 23.7, "backward": 1.2, "optimizer_step": 0.0}))
    assert waited["kind"] == "rank-wait-bound" and "waiting for the other ranks" in waited["text"]


def test_compute_shares_leave_the_waits_out():
    text = judge(phases(10.0, 0.1, {"forward": 1.0, "backward": 0.0, "optimizer_step": 0.0}))["text"]
    assert text.startswith("compute-bound") and "10% more waiting for the other ranks" in text
    assert "forward 89%" in text  # 8 of the 9 s computing: 9 of forward less 1 waiting


# -- the summary -----------------------------------------------------------------------------------------
def test_the_rank_rows_show_a_wait_column_for_each_meeting():
    zero = rank_parts(data_s=0.019, forward_s=0.018, forward_wait_s=0.237)
    one = rank_parts(data_s=0.263, forward_s=0.018, forward_wait_s=0.002)
    rows = [row_of(0, zero, "rank-wait-bound", "w"), row_of(1, one, "data-bound", "d")]
    dist_section = {"strategy": "DDPStrategy", "backend": "gloo", "world_size": 2, "num_nodes": 1}
    dist_section |= {"devices_per_node": 2, "hosts": ["vm"], **combine(rows), "ranks": rows}
    text = format_run_summary({"status": "completed", "train": {}, "distributed": dist_section})
    header = next(line for line in text.splitlines() if line.strip().startswith("rank "))
    assert "fwd wait (ms)" in header and "in AR (ms)" in header and "bwd wait" not in header
    row0 = next(line for line in text.splitlines() if line.split()[:2] == ["0", "?"])
    assert "237.0" in row0 and "18.0" in row0  # its forward: 18 ms computing, 237 ms waiting
