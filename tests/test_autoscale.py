"""``run --processes auto``: the decisions, and a burst of 200,000 completions drained by real
processes that scale out and back to one, nothing lost and each partition counted once."""

from __future__ import annotations

import json
import threading
import time

import httpx
import redis
from prometheus_client.parser import text_string_to_metric_families

from archiver.daemon.autoscale import Autoscaler, ScalePolicy
from archiver.daemon.children import child_command
from archiver.engine.local_cluster import LocalCluster
from codec import ArchivedPartition
from layers import ArchiveLayer, KeySchema
from layers.control.pressure import Backlog
from layers.keys import ARCHIVER_GROUP
from stats import StatsChecker, StatsReader
from tests.helpers import free_port, http_get, run_cli, start_archiver, stop_process, wait_for


class _Queue:
    """A backlog the test sets, as `observe_backlog` would read it."""

    def __init__(self) -> None:
        self.now = Backlog(0, 0.0)

    def __call__(self) -> Backlog:
        return self.now


def _scaler(queue: _Queue, most: int = 3) -> Autoscaler:
    return Autoscaler(ScalePolicy(most, interval_s=5, up_age_s=10, down_idle_s=60), queue)


def test_a_growing_or_old_backlog_adds_one_process_at_a_time() -> None:
    queue = _Queue()
    scaler = _scaler(queue)
    for t, length in enumerate((100, 200, 300)):
        queue.now = Backlog(length, 1.0)
        assert scaler.decide(1, t * 5.0) is None
    queue.now = Backlog(400, 1.0)
    up = scaler.decide(1, 15.0)
    assert up is not None and (up.direction, up.processes, up.cause) == ("up", 2, "backlog_growing")
    assert "100 -> 200 -> 300 -> 400" in up.reason
    queue.now = Backlog(500, 30.0)
    assert scaler.decide(2, 20.0) is None  # settling: the new process counts in the next decision
    old = scaler.decide(2, 25.0)
    assert old is not None and (old.processes, old.cause) == (3, "oldest_entry") and "30 s old" in old.reason
    assert scaler.decide(3, 35.0) is None and scaler.decide(3, 100.0) is None  # never above the maximum


def test_an_idle_queue_stops_one_process_at_a_time_never_the_last() -> None:
    queue = _Queue()
    scaler = _scaler(queue)
    queue.now = Backlog(0, 0.0)
    assert scaler.decide(3, 0.0) is None
    assert scaler.decide(3, 59.0) is None
    down = scaler.decide(3, 60.0)
    assert down is not None and (down.direction, down.processes, down.cause) == ("down", 2, "queue_idle")
    assert scaler.decide(2, 65.0) is None  # the next only after another idle period
    queue.now = Backlog(10, 0.5)
    assert scaler.decide(2, 100.0) is None  # not idle any more
    queue.now = Backlog(0, 0.0)
    assert scaler.decide(2, 105.0) is None
    assert scaler.decide(2, 165.0) is not None
    assert scaler.decide(1, 500.0) is None  # never below one


def test_the_children_get_the_arguments_less_the_supervisors() -> None:
    argv = ["run", "--processes", "auto", "--max-processes=3", "--metrics-port", "9400", "--metrics-host", "0.0.0.0",
            "--read-count", "100"]  # fmt: skip
    assert child_command(argv)[-3:] == ["run", "--read-count", "100"]


#: The burst's entries written server-side, 5,000 a call: as many XADDs as a pipeline sends, with a
#: fraction of its client-side CPU (a few seconds for 200,000 entries).
_XADD_EACH = "for i = 1, #ARGV, 2 do redis.call('XADD', KEYS[1], ARGV[i], 'p', ARGV[i + 1]) end"


def _burst(client: redis.Redis, keys: KeySchema, n: int) -> None:
    """``n`` completions that have waited a minute: queue entries as `complete()` writes them
    (``XADD queue <id> p <record>``), their ids (the time they were queued) a minute old, so that
    the oldest entry's age calls for more processes at the first check however fast one process
    drains them (200,000 in about 1.5 s on Redis 7 here)."""
    client.xgroup_create(keys.queue, ARCHIVER_GROUP, id="0", mkstream=True)
    add = client.register_script(_XADD_EACH)
    now = int(time.time())
    queued_ms = (now - 60) * 1000
    for start in range(1, n + 1, 5000):
        args: list[str | bytes] = []
        for pid in range(start, min(n, start + 4999) + 1):
            args += [
                f"{queued_ms}-{pid}",
                ArchivedPartition(pid, pid * 1000 - 999, pid * 1000, f"worker{pid % 7}", now, 60).to_json(),
            ]
        add(keys=[keys.queue], args=args)


class _MetricsWatch:
    """Reads the supervisor's /metrics every 0.2 s: the process counts seen, in order."""

    def __init__(self, port: int, namespace: str) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.namespace = namespace
        self.counts: list[int] = []
        self.last = ""
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch)

    def _watch(self) -> None:
        while not self.stop.wait(0.2):
            try:
                self.last = http_get(self.url, timeout=5).text
            except httpx.HTTPError:
                continue
            count = self.value("partarchive_archiver_processes")
            if count is not None and (not self.counts or self.counts[-1] != count):
                self.counts.append(int(count))

    def value(self, name: str, **labels: str) -> float | None:
        for family in text_string_to_metric_families(self.last):
            for sample in family.samples:
                if sample.name == name and sample.labels.get("namespace") == self.namespace and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    return sample.value
        return None

    def __enter__(self) -> _MetricsWatch:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


def _scale_out_and_back(url: str, client: redis.Redis, namespace: str, *cluster: str, n: int = 200_000) -> None:
    keys = KeySchema.of(namespace, client=client)
    _burst(client, keys, n)
    port = free_port()
    supervisor = start_archiver(
        url, namespace, "--processes", "auto", "--max-processes", "3", "--metrics-port", str(port), *cluster,
        PARTARCHIVE_SCALE_INTERVAL_S="0.5", PARTARCHIVE_SCALE_UP_AGE_S="2", PARTARCHIVE_SCALE_DOWN_IDLE_S="3",
    )  # fmt: skip
    archive = ArchiveLayer(client, keys)
    try:
        with _MetricsWatch(port, namespace) as watch:
            wait_for(lambda: archive.archived_total() == n, 400, "the burst archived")
            wait_for(lambda: watch.counts[-1:] == [1] and max(watch.counts) > 1, 120, "back to one process")
            scraped = watch
    finally:
        err = stop_process(supervisor)
    assert supervisor.returncode == 0 and "Traceback" not in err, err[-2000:]
    decisions = [line for line in map(_json, err.splitlines()) if line.get("event") == "scaling"]
    ups = [d for d in decisions if d["direction"] == "up"]
    downs = [d for d in decisions if d["direction"] == "down"]
    assert len(ups) >= 1 and len(downs) == len(ups), decisions
    assert [d["processes"] for d in decisions] == [*range(2, 2 + len(ups)), *range(len(ups), 0, -1)]
    assert all(d["reason"] and d["cause"] for d in decisions)
    assert max(scraped.counts) <= 3 and min(scraped.counts) >= 1  # the first scrape may come after the first scale-up
    assert scraped.value("partarchive_scale_decisions_total", direction="down", cause="queue_idle") == len(downs)
    assert scraped.value("partarchive_archiver_processes_max") == 3
    flushes = scraped.value("partarchive_stats_flushes_total")
    assert flushes is not None and flushes >= n / 500  # the children's counters, added up on one port
    assert scraped.value("partarchive_queue_length") == 0  # the namespace's state, read from Redis
    assert client.xlen(keys.queue) == 0 and client.bitcount(keys.index) == n
    assert StatsReader(client, keys).stats()["completed"]["total_completed"] == n  # counted once
    assert StatsChecker(client, keys).check().ok


def _json(line: str) -> dict[str, object]:
    try:
        got = json.loads(line)
    except ValueError:
        return {}
    return got if isinstance(got, dict) else {}


def test_a_burst_scales_out_drains_and_scales_back(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    _scale_out_and_back(engine_url, real_redis, namespace)


def test_a_burst_scales_out_on_a_cluster(
    local_cluster: LocalCluster, cluster_redis: redis.Redis, namespace: str
) -> None:
    _scale_out_and_back(local_cluster.url, cluster_redis, namespace, "--cluster")


def test_processes_is_a_number_or_auto(engine_url: str, namespace: str) -> None:
    for args, why in (
        (["--processes", "many"], "number or auto"),
        (["--processes", "auto", "--max-processes", "0"], "1..64"),
        (["--processes", "2", "--max-processes", "3"], "goes with --processes auto"),
    ):
        done = run_cli(engine_url, namespace, "run", *args)
        assert done.returncode == 2 and why in done.stderr and done.stderr.count("\n") == 1, done.stderr
