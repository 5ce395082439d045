"""``find`` (`stats.search`, ``partarchive find``, ``GET /partitions?worker=...``) on the real engine
and a local cluster: every page, followed by its cursor, gives what a plain filter of every record
gives, in partition order, whatever layer holds them; ranges the statistics rule out are not read;
expired detail is answered by the statistics and said so; bad input is one line (exit 2) or 422."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from archiver.config import Config
from archiver.namespace import Namespace
from archiver.web import create_app
from bench.populate import write_compressed, write_stats
from bench.workload import BASE_TIME, standard_workload
from codec import ArchivedPartition, ValidationError
from layers import ActiveLayer, KeySchema, TierPolicy
from layers.archive.commit import Uncommitted
from layers.archive.scan import MAX_COMMANDS, ReadPacer
from stats.rollup import committer
from stats.search import Filters, Search
from tests.helpers import commands_sent, run_cli

HOUR = 3600


def records(count: int, first: int = 1) -> list[ArchivedPartition]:
    """Five workers; a completion every 7 s; durations 10..99 s."""
    return [
        ArchivedPartition(p, p * 100 + 1, p * 100 + 100, f"worker{p * 7 % 5}", BASE_TIME + 7 * p, 10 + p * 13 % 90)
        for p in range(first, first + count)
    ]


def namespace_of(client: redis.Redis, namespace: str, **settings: Any) -> Namespace:
    config = Config(namespace=namespace, cluster=isinstance(client, redis.RedisCluster), **settings)
    return Namespace(client, config)


def archive(ns: Namespace, parts: list[ArchivedPartition]) -> None:
    for start in range(0, len(parts), 500):
        chunk = parts[start : start + 500]
        ns.archive.write_detail(chunk)
        committer(ns.archive).commit(Uncommitted.of([("-", p) for p in chunk]))


def everything(search: Search, filters: Filters, limit: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in search.pages(filters, limit=limit):
        assert len(page) <= limit
        items += page.items()
    return items


def expected(parts: list[ArchivedPartition], f: Filters) -> list[int]:
    return [
        p.partition_id
        for p in parts
        if f.keeps(p.worker_id, p.completed_at, p.duration)
        and (f.ids is None or f.ids[0] <= p.partition_id <= f.ids[1])
    ]


FILTERS = [
    Filters(statuses=("completed",)),
    Filters(worker="worker3"),
    Filters(completed_after=BASE_TIME + 7 * 400, completed_before=BASE_TIME + 7 * 400 + HOUR),
    Filters(min_duration=50, max_duration=60, worker="worker1"),
    Filters(ids=(777, 1999), max_duration=30),
    Filters(worker="nobody"),
]


@pytest.mark.parametrize(
    "filters", FILTERS, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.to_dict().items() if v and k != "status")
)
def test_every_page_followed_gives_what_a_plain_filter_gives(
    server_redis: redis.Redis, namespace: str, filters: Filters
) -> None:
    """A compressed tier holding sealed batches, a staged (open) batch and records stored unsealed in
    the simple hash (a critical backlog's), searched 137 at a time."""
    ns = namespace_of(server_redis, namespace, compressed_from=0, summary_above=10**9, seal_idle_s=3600)
    parts = records(2450)
    archive(ns, parts[:2400])
    ns.archive.write_unsealed(__import__("codec.page", fromlist=["Columns"]).Columns.of(parts[2400:2420]))
    committer(ns.archive).commit(Uncommitted.of([("-", p) for p in parts[2400:2420]]))
    archive(ns, parts[2420:])  # batch 24 is not whole: staged
    assert ns.archive.open_batch_count() == 1 and ns.archive.simple_size() == 20
    items = everything(Search(server_redis, ns.archive, ns.cold_reads), filters, 137)
    assert [i["partition_id"] for i in items] == expected(parts, filters)
    by_pid = {p.partition_id: p for p in parts}
    assert all(
        ArchivedPartition(*(i[k] for k in ArchivedPartition._fields)) == by_pid[i["partition_id"]] for i in items
    )
    sources = {i["partition_id"]: i["source"] for i in items}
    assert {sources.get(pid) for pid in (5, 2405, 2440) if pid in sources} <= {"archive:batch", "archive:simple",
                                                                                 "archive:staging"}  # fmt: skip
    if 2405 in sources:
        assert (sources[2405], sources.get(2440, "archive:staging")) == ("archive:simple", "archive:staging")


def test_ranges_the_statistics_rule_out_are_not_read_and_every_call_is_bounded(
    real_redis: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = KeySchema(namespace)
    policy = TierPolicy(summary_above=10**12)
    write_compressed(real_redis, keys, standard_workload(40_000), policy)
    write_stats(real_redis, keys, standard_workload(40_000), policy)
    ns = namespace_of(real_redis, namespace, summary_above=10**12)
    search = Search(real_redis, ns.archive, ns.cold_reads)
    sizes: list[int] = []
    original = ReadPacer.send

    def counted(self: ReadPacer, *queue: Any) -> list[Any]:
        sizes.append(len(queue))
        return original(self, *queue)

    monkeypatch.setattr(ReadPacer, "send", counted)
    sent = commands_sent(monkeypatch)
    every = everything(search, Filters(statuses=("completed",)), 100_000)
    assert len(every) == 40_000 and max(sizes) <= MAX_COMMANDS
    whole = sent.count("STRLEN")  # one per shelf read: all 7 (6,400 partitions each)
    sent.clear()
    hour = Filters(completed_after=BASE_TIME + 3 * 20_000, completed_before=BASE_TIME + 3 * 20_000 + HOUR)
    found = everything(search, hour, 100_000)
    assert [i["partition_id"] for i in found] == expected(list(standard_workload(40_000)), hour)
    assert whole == 7 and sent.count("STRLEN") == 1  # the ranges outside the hour were not read
    sent.clear()
    assert everything(search, Filters(worker="nobody"), 100) == [] and "STRLEN" not in sent


def test_active_partitions_by_status_worker_and_ids(server_redis: redis.Redis, namespace: str) -> None:
    ns = namespace_of(server_redis, namespace)
    sdk = ActiveLayer(server_redis, ns.keys)
    sdk.create_partitions(1, 40 * 1000, 1000)
    for n in range(12):
        part = sdk.claim(f"w{n % 2}")
        assert part is not None
        if n % 3 == 1:
            sdk.start(part.partition_id, f"w{n % 2}")
        if n % 3 == 2:
            sdk.fail(part.partition_id, f"w{n % 2}", "boom")
    search = Search(server_redis, ns.archive, ns.cold_reads)

    def pids(**text: Any) -> list[tuple[int, str]]:
        return [(i["partition_id"], i["status"]) for i in everything(search, Filters.parse(**text), 5)]

    assert pids(status="failed") == [(p, "failed") for p in (3, 6, 9, 12)]
    assert pids(status="running", worker="w1") == [(2, "running"), (8, "running")]
    assert pids(status="pending", ids="38-40") == [(38, "pending"), (39, "pending"), (40, "pending")]
    assert len(pids()) == 40 and pids()[:3] == [(1, "claimed"), (2, "running"), (3, "failed")]
    assert pids(completed_after="2024-01-01") == []  # a completion filter matches completed partitions only


def test_expired_detail_is_answered_from_the_statistics_and_said(server_redis: redis.Redis, namespace: str) -> None:
    """The summary tier without a cold store: batches past their retention (swept or not yet) give no
    rows; their ranges are given with the statistics' counts, and why."""
    from layers import migrate_step

    ns = namespace_of(server_redis, namespace, compressed_from=0, summary_above=0, retention_s=HOUR, seal_idle_s=0)
    old = [p._replace(completed_at=int(time.time()) - 10 * HOUR + p.partition_id) for p in records(1500)]
    fresh = [p._replace(completed_at=int(time.time())) for p in records(500, first=2001)]
    archive(ns, old + fresh)
    ns.archive.sealing.seal_idle(now=time.time() + 10)
    migrate_step(ns.archive)  # the expiry index, then a sweep of some (the rest is past its retention too)
    search = Search(server_redis, ns.archive, ns.cold_reads)
    page = search.page(Filters(worker="worker2"), limit=1000)
    assert [i["partition_id"] for i in page.items()] == [p.partition_id for p in fresh if p.worker_id == "worker2"]
    ranges = {entry["range"]: entry for entry in page.statistics}
    assert sorted(ranges) == [0, 1]
    assert ranges[0]["count"] == 999 and ranges[1]["count"] == 501
    assert ranges[1]["matching"] == sum(1 for p in old if p.partition_id >= 1000 and p.worker_id == "worker2")
    assert "expired" in ranges[0]["why"] and "statistics" in page.searched


def test_a_cursor_belongs_to_its_filters(server_redis: redis.Redis, namespace: str) -> None:
    ns = namespace_of(server_redis, namespace, compressed_from=0)
    archive(ns, records(300))
    search = Search(server_redis, ns.archive, ns.cold_reads)
    page = search.page(Filters(worker="worker1"), limit=10)
    assert page.next_cursor is not None
    following = search.page(Filters(worker="worker1"), cursor=page.next_cursor, limit=10)
    first, last = next(following.items())["partition_id"], list(page.items())[-1]["partition_id"]
    assert first > last
    with pytest.raises(ValidationError, match="other filters"):
        search.page(Filters(worker="worker2"), cursor=page.next_cursor)
    for bad in ("12", "x.000000000000", "99999999999.0123456789ab", ""):
        with pytest.raises(ValidationError):
            search.page(Filters(), cursor=bad or "?")
    backwards = {"completed_after": "2024-01-02", "completed_before": "2024-01-01"}
    for text in ({"completed_after": "yesterday"}, {"ids": "9-3"}, {"min_duration": "-1"}, {"status": "done"},
                 backwards, {"worker": "a\x00b"}):  # fmt: skip
        with pytest.raises(ValidationError):
            Filters.parse(**text)


def test_completions_the_search_cannot_see_yet_are_counted(real_redis: redis.Redis, namespace: str) -> None:
    from layers.control.switch import ArchivalSwitch

    ns = namespace_of(real_redis, namespace)
    sdk = ActiveLayer(real_redis, namespace)
    sdk.create_partitions(1, 10 * 1000, 1000)
    for _ in range(3):
        part = sdk.claim("w")
        assert part is not None
        sdk.complete(part.partition_id, "w")  # queued, not archived
    ArchivalSwitch(real_redis, KeySchema(namespace)).pause("test")
    part = sdk.claim("w")
    assert part is not None
    sdk.complete(part.partition_id, "w")  # held in the active hash
    page = Search(real_redis, ns.archive, ns.cold_reads).page(Filters(statuses=("completed",)))
    assert page.not_searched == {"queue": 3, "held": 1} and len(page) == 0


def test_the_command_line(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    ns = namespace_of(real_redis, namespace, compressed_from=0)
    parts = records(400)
    archive(ns, parts)
    table = run_cli(engine_url, namespace, "find", "--worker", "worker4", "--limit", "3")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["partition", "min_id", "max_id"] and len(lines) == 1 + 3 + 3
    assert lines[4] == "3 partitions" and lines[-1].startswith("more: --cursor ")
    cursor = lines[-1].split()[-1]
    done = run_cli(
        engine_url, namespace, "find", "--worker", "worker4", "--json", "--limit", "1000", "--cursor", cursor
    )
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert rows[-1]["search"]["next_cursor"] is None and rows[-1]["search"]["count"] == len(rows) - 1
    wanted = [p.partition_id for p in parts if p.worker_id == "worker4"]
    assert [int(line.split()[0]) for line in lines[1:4]] + [r["partition_id"] for r in rows[:-1]] == wanted
    for bad in (["--completed-after", "soon"], ["--ids", "5-2"], ["--cursor", "1.abc"], ["--limit", "0"],
                ["--status", "archived"]):  # fmt: skip
        refused = run_cli(engine_url, namespace, "find", *bad)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and not refused.stdout, bad


def test_over_http_with_a_cursor_in_the_openapi_docs(server_redis: redis.Redis, namespace: str) -> None:
    ns = namespace_of(server_redis, namespace, compressed_from=0)
    parts = records(400)
    archive(ns, parts)
    with TestClient(create_app(server_redis, ns.config)) as http:
        spec = http.get("/openapi.json").json()
        params = {p["name"] for p in spec["paths"]["/partitions"]["get"]["parameters"]}
        assert {
            "worker",
            "completed_after",
            "completed_before",
            "min_duration",
            "max_duration",
            "ids",
            "cursor",
        } <= params
        got: list[int] = []
        query: dict[str, Any] = {"worker": "worker2", "completed_after": str(BASE_TIME), "limit": 25}
        while True:
            body = http.get("/partitions", params=query).json()
            got += [i["partition_id"] for i in body["items"]]
            assert body["searched"] == ["archive:simple", "archive:staging", "archive:batch", "statistics"]
            if body["next_cursor"] is None:
                break
            query["cursor"] = body["next_cursor"]
        assert got == [p.partition_id for p in parts if p.worker_id == "worker2"]
        for bad in (
            {"worker": "worker2", "cursor": "1.0123456789ab"},
            {"ids": "9-3"},
            {"completed_after": "2024-13-45"},
        ):
            response = http.get("/partitions", params=bad)
            assert response.status_code == 422 and response.json()["error"] == "invalid request", response.text
        legacy = http.get("/partitions", params={"status": "pending"}).json()
        assert legacy == {"items": [], "next_after": None}


def test_cold_rows_are_found_and_a_missing_file_is_said(
    server_redis: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    from layers import migrate_step

    ns = namespace_of(server_redis, namespace, compressed_from=0, summary_above=0, retention_s=HOUR, seal_idle_s=0,
                      cold_store=str(tmp_path), cold_gather_s=0)  # fmt: skip
    ns.archive.check_cold()
    old = [p._replace(completed_at=int(time.time()) - 10 * HOUR + p.partition_id) for p in records(1500)]
    archive(ns, old)
    ns.archive.sealing.seal_idle(now=time.time() + 10)
    while migrate_step(ns.archive):
        pass
    search = Search(server_redis, ns.archive, ns.cold_reads)
    f = Filters(worker="worker0", min_duration=40)
    page = search.page(f, limit=10_000)
    assert [i["partition_id"] for i in page.items()] == expected(old, f)
    assert {i["source"] for i in page.items()} == {"cold"} and "cold" in page.searched and not page.statistics
    for file in (tmp_path / namespace).iterdir():
        file.unlink()
    fresh = namespace_of(server_redis, namespace)  # a reader that has not opened the files before
    page = Search(server_redis, fresh.archive, fresh.cold_reads).page(f, limit=10_000)
    assert len(page) == 0 and {e["range"] for e in page.statistics} == {0, 1}
    assert all("is missing" in e["why"] for e in page.statistics)
