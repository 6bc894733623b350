"""The pure scheduling policy: ordering, DRF, gangs, backfill, starvation, limits, preemption."""

from __future__ import annotations

import random

from aifab.jobs.policy import (
    JobRequest,
    Node,
    QueuePolicy,
    RunningJob,
    deserved_shares,
    schedule,
)
from aifab.jobs.resources import Resources

NOW = 10_000.0


def cpu(n: float) -> Resources:
    return Resources(n, 0.0, 0)


def gpu(n: int) -> Resources:
    return Resources(1.0, 1024.0, n)


def job(
    jid: str,
    replica: Resources,
    *,
    queue: str = "q",
    priority: int = 0,
    at: float = NOW - 1,
    replicas: int = 1,
    min_available: int | None = None,
) -> JobRequest:
    return JobRequest(jid, queue, priority, at, replica, replicas, min_available)


def run(
    jid: str,
    placement: list[tuple[str, Resources]],
    *,
    queue: str = "q",
    priority: int = 0,
    at: float = NOW - 100,
    preemptible: bool = True,
) -> RunningJob:
    return RunningJob(jid, queue, priority, at, tuple(placement), preemptible)


def nodes_with(running: list[RunningJob], capacity: dict[str, Resources]) -> list[Node]:
    """Nodes whose ``used`` is what ``running`` holds on them (as the scheduler computes it)."""
    used = dict.fromkeys(capacity, Resources())
    for rj in running:
        for name, r in rj.placement:
            used[name] = used[name] + r
    return [Node(n, cap, used[n]) for n, cap in capacity.items()]


QUEUES = {"q": QueuePolicy("q")}


def started(decision) -> list[str]:  # type: ignore[no-untyped-def]
    return [s.job_id for s in decision.starts]


# --- ordering --------------------------------------------------------------------------------


def test_higher_priority_starts_first_then_older() -> None:
    pending = [
        job("low", cpu(1), priority=0, at=1),
        job("high-new", cpu(1), priority=5, at=3),
        job("high-old", cpu(1), priority=5, at=2),
    ]
    d = schedule([Node("n", cpu(2))], QUEUES, pending, [], now=NOW)
    assert started(d) == ["high-old", "high-new"]
    assert "low" in d.waiting and "waiting for resources" in d.waiting["low"]
    assert "free in total: cpu 0," in d.waiting["low"]


def test_every_pending_job_starts_or_has_a_reason() -> None:
    pending = [job(f"j{i}", cpu(1), at=i) for i in range(5)]
    d = schedule([Node("n", cpu(3))], QUEUES, pending, [], now=NOW)
    assert len(d.starts) == 3
    assert set(d.waiting) == {"j3", "j4"}
    assert set(started(d)) | set(d.waiting) == {j.id for j in pending}


def test_unknown_queue_waits_with_reason() -> None:
    d = schedule([Node("n", cpu(4))], QUEUES, [job("x", cpu(1), queue="nope")], [], now=NOW)
    assert d.starts == []
    assert d.waiting["x"] == "queue 'nope' does not exist"


# --- DRF across queues -----------------------------------------------------------------------


def test_drf_one_cycle_splits_by_weight() -> None:
    queues = {"a": QueuePolicy("a", weight=2.0), "b": QueuePolicy("b", weight=1.0)}
    pending = [job(f"{q}{i}", cpu(1), queue=q, at=i) for q in "ab" for i in range(20)]
    d = schedule([Node("n", cpu(12))], queues, pending, [], now=NOW)
    counts = {q: sum(s.job_id.startswith(q) for s in d.starts) for q in "ab"}
    assert counts == {"a": 8, "b": 4}
    assert d.preempted == {}


def test_drf_weight_two_queue_gets_twice_the_share_over_cycles() -> None:
    """Jobs finish at random; the weight-2 queue holds ~2x the CPU averaged over many cycles."""
    rng = random.Random(7)
    queues = {"heavy": QueuePolicy("heavy", weight=2.0), "light": QueuePolicy("light")}
    capacity = {"n1": cpu(8), "n2": cpu(8)}
    running: list[RunningJob] = []
    seq = 0
    held = {"heavy": 0.0, "light": 0.0}
    for cycle in range(60):
        # Both queues always have a backlog of 1-CPU jobs.
        pending = [
            job(f"{q}-{cycle}-{i}", cpu(1), queue=q, at=cycle + i / 100)
            for q in queues
            for i in range(16)
        ]
        d = schedule(nodes_with(running, capacity), queues, pending, running, now=NOW + cycle)
        assert d.preempted == {}  # both queues are at or under their share: nothing to reclaim
        by_id = {j.id: j for j in pending}
        for st in d.starts:
            seq += 1
            running.append(
                run(st.job_id, [(st.nodes[0], cpu(1))], queue=by_id[st.job_id].queue, at=seq)
            )
        for rj in running:
            held[rj.queue] += 1
        running = [rj for rj in running if rng.random() > 0.3]  # ~30% finish each cycle
    ratio = held["heavy"] / held["light"]
    assert 1.8 <= ratio <= 2.2, ratio


def test_deserved_shares_water_fill_caps_by_demand() -> None:
    queues = {"a": QueuePolicy("a", 1.0), "b": QueuePolicy("b", 1.0), "c": QueuePolicy("c", 2.0)}
    demand = {"a": cpu(1), "b": cpu(100), "c": cpu(100)}
    got = deserved_shares(cpu(10), queues, demand)
    # a wants only 1; the other 9 split 1:2 between b and c.
    assert got["a"].cpu == 1.0
    assert abs(got["b"].cpu - 3.0) < 1e-6
    assert abs(got["c"].cpu - 6.0) < 1e-6


# --- gangs -----------------------------------------------------------------------------------


def test_gang_is_all_or_nothing() -> None:
    nodes = [Node("a", cpu(2), cpu(1)), Node("b", cpu(2), cpu(1))]  # 1 free core each
    d = schedule(nodes, QUEUES, [job("g", cpu(1), replicas=3)], [], now=NOW)
    assert d.starts == []
    assert "3 replica(s)" in d.waiting["g"]


def test_gang_spreads_over_nodes_when_it_fits() -> None:
    nodes = [Node("a", cpu(2), cpu(1)), Node("b", cpu(2), cpu(1)), Node("c", cpu(2), cpu(1))]
    d = schedule(nodes, QUEUES, [job("g", cpu(1), replicas=3)], [], now=NOW)
    assert len(d.starts) == 1
    assert sorted(d.starts[0].nodes) == ["a", "b", "c"]


def test_elastic_job_starts_its_minimum_when_the_full_size_does_not_fit() -> None:
    nodes = [Node("a", cpu(2))]
    d = schedule(nodes, QUEUES, [job("e", cpu(1), replicas=4, min_available=2)], [], now=NOW)
    assert [len(s.nodes) for s in d.starts] == [2]


def test_elastic_job_starts_in_full_when_it_fits() -> None:
    nodes = [Node("a", cpu(8))]
    d = schedule(nodes, QUEUES, [job("e", cpu(1), replicas=4, min_available=2)], [], now=NOW)
    assert [len(s.nodes) for s in d.starts] == [4]


def test_elastic_job_below_its_minimum_waits() -> None:
    nodes = [Node("a", cpu(1))]
    d = schedule(nodes, QUEUES, [job("e", cpu(1), replicas=4, min_available=2)], [], now=NOW)
    assert d.starts == [] and "2 replica(s)" in d.waiting["e"]


def test_elastic_job_never_grows_past_its_queue_capability() -> None:
    queues = {"q": QueuePolicy("q", capability=Resources(4, float("inf"), 1 << 30))}
    d = schedule(
        [Node("a", cpu(16))], queues, [job("e", cpu(2), replicas=4, min_available=2)], [], now=NOW
    )
    assert [len(s.nodes) for s in d.starts] == [2]


# --- backfill and starvation -----------------------------------------------------------------


def test_small_job_backfills_around_a_blocked_big_one() -> None:
    running = [run("r", [("n", cpu(3))], preemptible=False)]
    nodes = nodes_with(running, {"n": cpu(4)})
    pending = [job("big", cpu(4), priority=5, at=NOW - 10), job("small", cpu(1), at=NOW - 5)]
    d = schedule(nodes, QUEUES, pending, running, now=NOW)
    assert started(d) == ["small"]
    assert "waiting for resources" in d.waiting["big"]


def test_starving_job_reserves_room_and_holds_back_small_jobs() -> None:
    running = [run("r", [("n", cpu(3))], preemptible=False)]
    nodes = nodes_with(running, {"n": cpu(4)})
    pending = [job("big", cpu(4), priority=5, at=NOW - 700), job("small", cpu(1), at=NOW - 5)]
    d = schedule(nodes, QUEUES, pending, running, now=NOW, starvation_s=600)
    assert d.starts == []
    assert "reserved for a starving job" in d.waiting["small"]
    # Not yet starving: the small job backfills.
    d = schedule(nodes, QUEUES, pending, running, now=NOW - 200, starvation_s=600)
    assert started(d) == ["small"]


def test_job_capped_by_its_queue_reserves_nothing() -> None:
    """A job blocked by its own queue's capability cannot be helped by holding others back."""
    queues = {
        "capped": QueuePolicy("capped", capability=Resources(4, float("inf"), 1 << 30)),
        "other": QueuePolicy("other"),
    }
    running = [
        run("r", [("n", cpu(3))], queue="capped", preemptible=False),
        run("o", [("n", cpu(4))], queue="other", preemptible=False),  # so "capped" goes first
    ]
    nodes = nodes_with(running, {"n": cpu(10)})
    pending = [
        job("old", cpu(2), queue="capped", at=NOW - 5000),
        job("new", cpu(2), queue="other", at=NOW - 1),
    ]
    d = schedule(nodes, queues, pending, running, now=NOW, starvation_s=600)
    assert started(d) == ["new"]
    assert "capability reached" in d.waiting["old"]


# --- capability ------------------------------------------------------------------------------


def test_capability_limit_names_the_numbers() -> None:
    queues = {"q": QueuePolicy("q", capability=Resources(float("inf"), float("inf"), 2))}
    running = [run("r", [("n", gpu(2))])]
    nodes = nodes_with(running, {"n": Resources(16, 65536, 8)})
    d = schedule(nodes, queues, [job("j", gpu(1))], running, now=NOW)
    assert d.starts == [] and d.preempted == {}
    assert d.waiting["j"] == ("queue 'q' capability reached: in use + job > capability (gpu 3 > 2)")


# --- preemption and reclaim ------------------------------------------------------------------


def test_preempts_lowest_priority_newest_first_minimal_set() -> None:
    running = [
        run("p1-old", [("n", cpu(1))], priority=1, at=1),
        run("p0-old", [("n", cpu(1))], priority=0, at=2),
        run("p0-new", [("n", cpu(1))], priority=0, at=3),
        run("p2", [("n", cpu(1))], priority=2, at=4),
    ]
    nodes = nodes_with(running, {"n": cpu(4)})
    d = schedule(nodes, QUEUES, [job("urgent", cpu(2), priority=9)], running, now=NOW)
    assert set(d.preempted) == {"p0-new", "p0-old"}
    assert d.starts[0].job_id == "urgent"
    assert set(d.starts[0].preempt) == {"p0-new", "p0-old"}
    assert "preempted by job urgent (priority 9)" in d.preempted["p0-new"]

    d = schedule(nodes, QUEUES, [job("urgent", cpu(1), priority=9)], running, now=NOW)
    assert list(d.preempted) == ["p0-new"]


def test_victim_set_is_minimal_across_nodes() -> None:
    """A low-priority victim on a node that cannot host the job is not preempted for nothing."""
    running = [
        run("small-a", [("a", cpu(1))], priority=0, at=5),  # first in victim order, useless
        run("big-b", [("b", cpu(4))], priority=1, at=1),
    ]
    nodes = nodes_with(running, {"a": cpu(2), "b": cpu(4)})
    d = schedule(nodes, QUEUES, [job("j", cpu(4), priority=9)], running, now=NOW)
    assert list(d.preempted) == ["big-b"]
    assert d.starts[0].nodes == ("b",)


def test_equal_priority_never_preempts() -> None:
    running = [run("r", [("n", cpu(4))], priority=3)]
    nodes = nodes_with(running, {"n": cpu(4)})
    d = schedule(nodes, QUEUES, [job("j", cpu(1), priority=3)], running, now=NOW)
    assert d.starts == [] and d.preempted == {}


def test_non_preemptible_jobs_are_never_victims() -> None:
    running = [
        run("keep", [("n", cpu(2))], priority=0, preemptible=False),
        run("go", [("n", cpu(2))], priority=1),
    ]
    nodes = nodes_with(running, {"n": cpu(4)})
    d = schedule(nodes, QUEUES, [job("j", cpu(2), priority=9)], running, now=NOW)
    assert list(d.preempted) == ["go"]
    d = schedule(nodes, QUEUES, [job("j", cpu(4), priority=9)], running, now=NOW)
    assert d.preempted == {} and d.starts == []


def test_preemption_can_be_switched_off() -> None:
    running = [run("r", [("n", cpu(4))], priority=0)]
    nodes = nodes_with(running, {"n": cpu(4)})
    d = schedule(nodes, QUEUES, [job("j", cpu(1), priority=9)], running, now=NOW, preemption=False)
    assert d.starts == [] and d.preempted == {}


def _reclaim_case(reclaimable: bool):  # type: ignore[no-untyped-def]
    queues = {"a": QueuePolicy("a"), "b": QueuePolicy("b", reclaimable=reclaimable)}
    running = [run(f"b{i}", [("n", cpu(1))], queue="b", at=i) for i in range(8)]
    nodes = nodes_with(running, {"n": cpu(8)})
    return schedule(nodes, queues, [job("a-job", cpu(2), queue="a")], running, now=NOW)


def test_reclaims_from_an_over_share_reclaimable_queue() -> None:
    d = _reclaim_case(reclaimable=True)
    # b is above its deserved 6 of 8 cores; a is under its share: the two newest b jobs go.
    assert set(d.preempted) == {"b7", "b6"}
    assert d.starts[0].job_id == "a-job"


def test_never_reclaims_from_a_non_reclaimable_queue() -> None:
    d = _reclaim_case(reclaimable=False)
    assert d.preempted == {} and d.starts == []
    assert "waiting for resources" in d.waiting["a-job"]


def test_no_reclaim_from_a_queue_within_its_share() -> None:
    queues = {"a": QueuePolicy("a"), "b": QueuePolicy("b")}
    running = [run(f"b{i}", [("n", cpu(1))], queue="b", at=i) for i in range(4)]
    running += [run(f"a{i}", [("n", cpu(1))], queue="a", at=i) for i in range(4)]
    nodes = nodes_with(running, {"n": cpu(8)})
    d = schedule(nodes, queues, [job("a-more", cpu(1), queue="a")], running, now=NOW)
    assert d.preempted == {} and d.starts == []


# --- fifo ------------------------------------------------------------------------------------


def test_fifo_blocks_everything_behind_the_head_job() -> None:
    pending = [
        job("first", cpu(1), at=1),
        job("big", cpu(8), at=2, priority=9),
        job("small", cpu(1), at=3, priority=9),
    ]
    d = schedule([Node("n", cpu(4))], QUEUES, pending, [], now=NOW, policy="fifo")
    assert started(d) == ["first"]
    assert "waiting for resources" in d.waiting["big"]
    assert d.waiting["small"] == "waiting behind earlier job big (fifo)"


def test_fifo_never_preempts() -> None:
    running = [run("r", [("n", cpu(4))], priority=0)]
    nodes = nodes_with(running, {"n": cpu(4)})
    d = schedule(nodes, QUEUES, [job("j", cpu(1), priority=9)], running, now=NOW, policy="fifo")
    assert d.starts == [] and d.preempted == {}


def test_fifo_elastic_job_starts_in_full_when_it_fits() -> None:
    d = schedule(
        [Node("a", cpu(8))],
        QUEUES,
        [job("e", cpu(1), replicas=4, min_available=2)],
        [],
        now=NOW,
        policy="fifo",
    )
    assert [len(s.nodes) for s in d.starts] == [4]


# --- placement -------------------------------------------------------------------------------


def test_one_gpu_job_goes_to_the_fullest_node_that_fits() -> None:
    node_cap = Resources(32, 262144, 8)
    nodes = [
        Node("empty", node_cap),
        Node("two-free", node_cap, Resources(6, 6144, 6)),
        Node("full", node_cap, Resources(8, 8192, 8)),
        Node("four-free", node_cap, Resources(4, 4096, 4)),
    ]
    d = schedule(nodes, QUEUES, [job("one", gpu(1))], [], now=NOW)
    assert d.starts[0].nodes == ("two-free",)


def test_eight_gpu_replicas_take_whole_nodes() -> None:
    node_cap = Resources(32, 262144, 8)
    nodes = [Node(f"n{i}", node_cap) for i in range(4)]
    nodes.append(Node("partial", node_cap, Resources(1, 1024, 1)))
    d = schedule(nodes, QUEUES, [job("g", gpu(8), replicas=3)], [], now=NOW)
    assert len(set(d.starts[0].nodes)) == 3 and "partial" not in d.starts[0].nodes


def test_cpu_jobs_prefer_nodes_without_free_gpus() -> None:
    nodes = [Node("gpu-node", Resources(8, 8192, 8)), Node("cpu-node", Resources(8, 8192, 0))]
    d = schedule(nodes, QUEUES, [job("c", Resources(1, 512, 0))], [], now=NOW)
    assert d.starts[0].nodes == ("cpu-node",)
