"""The leader in real ``partarchive worker --planner`` processes: three racing for the lead (one creates at a
time, a change of leader is one log line), kill -9 of the leader (another leads within a lease, the ranges
contiguous), a leader SIGSTOPped past its lease and resumed (its write refused, nothing created twice),
and every ID of a source that grows while they drain it processed once."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from layers import ActiveLayer, KeySchema
from layers.active.planning import PlanningLayer
from tests.helpers import cli_env, wait_for

pytestmark = pytest.mark.chaos  # real processes, SIGSTOP and kill -9

ROOT = Path(__file__).resolve().parent.parent
LEASE_S = 1.5


def start_worker(url: str, namespace: str, source: str, *args: str, **extra: str) -> subprocess.Popen[bytes]:
    env = cli_env(url, namespace, PARTARCHIVE_WORKER_HEARTBEAT_S="0.3", LEADER_SOURCE_KEY=source, **extra)
    return subprocess.Popen(
        [sys.executable, "-m", "archiver", "worker", "tests.runtime_jobs:process", "--planner",
         "tests.leader_jobs:Source", "--leader-lease", str(LEASE_S), "--allocation-interval", "0.1", "--window",
         "2", "--lease", "2", "--drain-timeout", "2", *args],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def stop_all(procs: list[subprocess.Popen[bytes]]) -> list[dict[str, Any]]:
    """SIGTERM each (a stopped one is let go on first), then their log lines (JSON), in time order."""
    for proc in procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
    lines = []
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert b"Traceback" not in err, err.decode()[-3000:]
        lines += [orjson.loads(line) for line in err.splitlines() if line.startswith(b"{")]
    return sorted(lines, key=lambda line: line["timestamp"])


def processed(client: redis.Redis, keys: KeySchema) -> list[tuple[int, int]]:
    """The IDs of each partition completed (from the archive queue: each completion is one entry)."""
    return [(rec["min_id"], rec["max_id"]) for _, f in client.xrange(keys.queue) for rec in [orjson.loads(f[b"p"])]]


def covered(spans: list[tuple[int, int]]) -> int:
    return sum(hi - lo + 1 for lo, hi in spans)


def assert_once(spans: list[tuple[int, int]], last: int) -> None:
    """``spans`` cover IDs 1 .. ``last``, each once."""
    spans = sorted(spans)
    assert spans[0][0] == 1 and spans[-1][1] == last, (spans[:2], spans[-2:])
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(spans)), "a hole or an overlap"


def leader_of(plans: PlanningLayer) -> str | None:
    view = plans.view()
    return None if view.lead is None else view.lead.holder


def raise_source(client: redis.Redis, key: str, by: int, times: int, every_s: float = 0.05) -> None:
    for _ in range(times):
        client.incrby(key, by)
        time.sleep(every_s)


def test_three_runtimes_race_one_leads_and_a_killed_leader_is_followed_within_a_lease(
    real_redis: redis.Redis, engine_url: str, namespace: str
) -> None:
    source = f"{namespace}_source"
    sdk = ActiveLayer(real_redis, namespace)
    plans = PlanningLayer(sdk)
    procs = [start_worker(engine_url, namespace, source, RUNTIME_JOB_SLEEP_S="0.002") for _ in range(3)]
    try:
        raise_source(real_redis, source, 97, 20)
        wait_for(lambda: leader_of(plans) is not None and len(sdk.presence()) == 3, 30, "a leader among three")
        first = leader_of(plans)
        victim = next(w for w in sdk.presence() if w.worker_id == first)
        os.kill(victim.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        wait_for(lambda: leader_of(plans) not in (None, first), 10, "another leader")
        took = time.monotonic() - killed_at
        raise_source(real_redis, source, 89, 20)
        top = int(real_redis.get(source) or 0)
        wait_for(lambda: covered(processed(real_redis, sdk.keys)) >= top, 60, "every ID processed")
    finally:
        lines = stop_all(procs)
    assert took < LEASE_S + 1.0  # another leads within a lease (and the turn that notices)
    assert_once(processed(real_redis, sdk.keys), top)  # each ID processed once
    runs = plans.runs()
    assert runs[0].min_id == 1 and all(b.min_id == a.max_id + 1 for a, b in itertools.pairwise(runs))
    planned = [line for line in lines if line["event"] == "leader: partitions planned"]
    by_token: dict[int, set[str]] = {}
    for line in planned:
        by_token.setdefault(line["token"], set()).add(line["worker"])
    assert len(by_token) >= 2 and all(len(workers) == 1 for workers in by_token.values())  # one creates at a time
    tokens = [line["token"] for line in planned]
    assert tokens == sorted(tokens)  # a token's creations all come before the next one's
    leads = sorted(line["token"] for line in lines if line["event"] == "leader: this process leads")
    assert leads == list(range(1, len(leads) + 1)) and set(by_token) <= set(leads)  # a change of leader: one line
    assert first in {line["worker"] for line in lines if line["event"] == "leader: this process leads"}


def test_a_leader_stopped_past_its_lease_writes_nothing_when_resumed(
    real_redis: redis.Redis, engine_url: str, namespace: str
) -> None:
    source, stall = f"{namespace}_source", f"{namespace}_stall"
    sdk = ActiveLayer(real_redis, namespace)
    plans = PlanningLayer(sdk)
    real_redis.set(source, 200)
    procs = [start_worker(engine_url, namespace, source, LEADER_STALL_KEY=stall)]
    try:
        wait_for(lambda: leader_of(plans) is not None, 30, "the first process leads")
        victim_id = leader_of(plans)
        procs.append(start_worker(engine_url, namespace, source, LEADER_STALL_KEY=stall))
        wait_for(lambda: len(sdk.presence()) == 2, 30, "both processes beat")
        real_redis.set(stall, "armed")
        wait_for(lambda: (real_redis.get(stall) or b"").isdigit(), 30, "the leader in its planner's call")
        victim_pid = int(real_redis.get(stall) or 0)
        os.kill(victim_pid, signal.SIGSTOP)  # between its lease and its write, past its lease
        real_redis.delete(stall)
        planned_before = plans.state().next_id
        raise_source(real_redis, source, 5000, 1)
        wait_for(lambda: leader_of(plans) not in (None, victim_id), 15, "the other process leads")
        wait_for(lambda: (plans.state().next_id or 0) > (planned_before or 0), 15, "the new leader plans")
        os.kill(victim_pid, signal.SIGCONT)  # its turn goes on: a write with the token of its ended lease
        top = int(real_redis.get(source) or 0)
        wait_for(lambda: covered(processed(real_redis, sdk.keys)) >= top, 60, "every ID processed")
    finally:
        lines = stop_all(procs)
    refused = [line for line in lines if line["event"].startswith("leader: no longer leads")]
    assert refused and refused[0]["event"] == "leader: no longer leads: a write was refused"
    assert "no longer leads" in refused[0]["detail"] and "nothing was written" in refused[0]["detail"]
    assert_once(processed(real_redis, sdk.keys), top)  # nothing created twice, nothing left out
    assert plans.state().next_id == top + 1
    victim_planned = [line for line in lines if line["event"] == "leader: partitions planned" and
                      line["worker"] == victim_id]  # fmt: skip
    new_tokens = {line["token"] for line in lines if line["event"] == "leader: partitions planned"} - {
        line["token"] for line in victim_planned}  # fmt: skip
    assert new_tokens and min(new_tokens) > max((line["token"] for line in victim_planned), default=0)
