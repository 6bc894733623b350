"""A tiny run of ``bench/cluster_sim.py`` so the benchmark's simulator stays correct."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from aifab.jobs.resources import Resources

BENCH = Path(__file__).resolve().parents[3] / "bench" / "cluster_sim.py"


@pytest.fixture(scope="module")
def sim() -> ModuleType:
    spec = importlib.util.spec_from_file_location("aifab_bench_cluster_sim", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def gpu_job(sim: ModuleType, jid: str, gpus: int, submit: float, duration: float, **kw):  # type: ignore[no-untyped-def]
    per = min(gpus, 8)
    replica = Resources(8.0 * per, 1024.0 * per, per)
    return sim.SimJob(
        jid,
        kw.pop("queue", "research"),
        kw.pop("priority", 0),
        submit,
        replica,
        gpus // per,
        duration,
        **kw,
    )


def test_trace_has_the_requested_shape(sim: ModuleType) -> None:
    trace = sim.make_trace(300, 20, load=1.0, seed=3)
    assert len(trace) == 300
    assert all(a.submit < b.submit for a, b in zip(trace, trace[1:], strict=False))
    assert {j.queue for j in trace} == {"prod", "research", "dev", "batch"}
    assert all(j.replica.gpu * j.replicas in (1, 2, 4, 8, 16, 32, 64) for j in trace)
    assert all(j.replica.gpu <= 8 for j in trace)
    window = sim.measure_window(trace)
    assert sim.offered_load(trace, 20, window) == pytest.approx(1.0, abs=0.01)
    assert sim.offered_load(sim.make_trace(300, 20, load=0.5, seed=3), 20, window) < 0.75
    assert sim.make_trace(300, 20, seed=3) == trace  # seeded


@pytest.mark.parametrize("policy", ["fifo", "aifab"])
def test_every_job_runs_to_completion(sim: ModuleType, policy: str) -> None:
    trace = sim.make_trace(120, 6, load=1.2, seed=1)
    result = sim.Simulator(trace, 6, policy, check=True, warmup_s=0).run()
    assert len(result.waits) == 120 and min(result.waits) >= 0
    assert 0 < result.utilisation <= 1
    assert result.cycles > 0
    assert set(result.gpu_hours) == {"prod", "research", "dev", "batch"}
    if policy == "fifo":
        assert result.preemptions == 0 and result.wasted_gpu_hours == 0


def test_preemption_loses_progress_since_the_last_checkpoint(sim: ModuleType) -> None:
    trace = [
        gpu_job(sim, "low", 8, 0.0, 10_000.0, priority=0),
        gpu_job(sim, "high", 8, 2_500.0, 1_000.0, priority=5),
    ]
    s = sim.Simulator(trace, 1, "aifab", checkpoint_s=1_000.0, warmup_s=0, check=True)
    result = s.run()
    assert result.preemptions == 1
    # "low" ran 2,500 s, kept 2,000 s (two checkpoints): 500 s x 8 GPUs lost.
    assert result.wasted_gpu_hours == pytest.approx(500 * 8 / 3600)
    assert s.progress["low"] == 2_000.0
    # It waited while "high" ran 1,000 s, then finished its 8,000 s left.
    assert s.waited["low"] == pytest.approx(1_000.0)
    assert s.now == pytest.approx(2_500 + 1_000 + 8_000)
    assert s.waited["high"] == 0


def test_non_preemptible_job_is_waited_for(sim: ModuleType) -> None:
    trace = [
        gpu_job(sim, "low", 8, 0.0, 3_000.0, priority=0, preemptible=False),
        gpu_job(sim, "high", 8, 1_000.0, 1_000.0, priority=5),
    ]
    s = sim.Simulator(trace, 1, "aifab", warmup_s=0)
    result = s.run()
    assert result.preemptions == 0
    assert s.waited["high"] == pytest.approx(2_000.0)


def test_fifo_head_of_line_blocking_vs_backfill(sim: ModuleType) -> None:
    trace = [
        gpu_job(sim, "running", 8, 0.0, 1_000.0),
        gpu_job(sim, "gang", 16, 1.0, 1_000.0),  # needs both nodes: waits for "running"
        gpu_job(sim, "small", 1, 2.0, 100.0),
    ]
    fifo = sim.Simulator(trace, 2, "fifo", warmup_s=0)
    fifo.run()
    assert fifo.waited["small"] == pytest.approx(1_000.0 + 1_000.0 - 2.0)
    aifab = sim.Simulator(trace, 2, "aifab", warmup_s=0)
    aifab.run()
    assert aifab.waited["small"] == 0  # backfilled on the free node


def test_gpu_hours_are_accounted_per_queue(sim: ModuleType) -> None:
    trace = [
        gpu_job(sim, "a", 4, 0.0, 3_600.0, queue="prod"),
        gpu_job(sim, "b", 2, 0.0, 1_800.0, queue="dev"),
        gpu_job(sim, "end", 1, 7_200.0, 60.0, queue="batch"),
    ]
    result = sim.Simulator(trace, 1, "aifab", warmup_s=0).run()
    assert result.gpu_hours == pytest.approx(
        {"prod": 4.0, "dev": 1.0, "research": 0.0, "batch": 0.0}
    )
    assert result.utilisation == pytest.approx(5.0 / (8 * 2))


def test_fairness_helpers(sim: ModuleType) -> None:
    assert sim.jain([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert sim.jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    got = sim.fair_shares({"a": 2.0, "b": 1.0, "c": 1.0}, {"a": 10.0, "b": 1.0, "c": 100.0}, 12.0)
    # b wants only 1; a and c split the other 11 by 2:1.
    assert got == pytest.approx({"a": 22 / 3, "b": 1.0, "c": 11 / 3})
