"""Job progress: total / done / failed, completion rates over minutes and hours, and the ETA, in
`status`, ``/stats`` and ``/metrics``."""

from __future__ import annotations

import math

import orjson
import redis
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from archiver.config import Config
from archiver.web import create_app
from layers import ActiveLayer, KeySchema
from stats.progress import MINUTES_KEPT, ProgressLog, job_progress
from tests.helpers import run_cli

NOW = 1_750_000_000.0


def test_rates_and_the_eta_from_samples() -> None:
    counts = {"pending": 500, "claimed": 50, "running": 50, "failed": 7}
    samples = [(NOW - 7200, 0), (NOW - 3600, 3600), (NOW - 300, 6600), (NOW - 60, 6840)]
    job = job_progress(counts, archived=6800, queued=90, held=10, samples=samples, now=NOW)
    assert (job.total, job.done, job.failed, job.pending) == (7507, 6900, 7, 600)
    assert job.percent_done == round(100 * 6900 / 7507, 2)
    assert job.rates["1m"] == 1.0  # (6900 - 6840) / 60
    assert job.rates["5m"] == 1.0  # (6900 - 6600) / 300
    assert job.rates["1h"] == round(3300 / 3600, 3)
    assert job.rate_covers_s["1h"] == 3600.0
    assert job.rates["6h"] == job.rates["24h"] == round(6900 / 7200, 3)  # over the 2 h the samples cover,
    assert job.rate_covers_s["6h"] == job.rate_covers_s["24h"] == 7200.0  # and marked as such
    assert job.eta_s == 600.0 and job.eta.startswith("10 min at 1.0/s")


def test_the_eta_says_when_it_cannot_tell() -> None:
    none_yet = job_progress({"pending": 100}, 0, 0, 0, [], NOW)
    assert none_yet.eta == "no completions yet" and none_yet.eta_s is None and none_yet.percent_done == 0.0
    empty = job_progress({}, 0, 0, 0, [], NOW)
    assert empty.total == 0 and empty.percent_done is None and empty.eta == "no completions yet"
    finished = job_progress({"failed": 3}, 97, 0, 0, [(NOW - 600, 50)], NOW)
    assert finished.eta == "nothing pending" and finished.eta_s == 0.0 and finished.failed == 3
    stalled = job_progress({"pending": 5}, 97, 0, 0, [(NOW - 600, 97)], NOW)
    assert stalled.eta_s is None and stalled.eta.startswith("unknown")
    fresh = job_progress({"pending": 5}, 10, 0, 0, [(NOW - 20, 0)], NOW)
    assert set(fresh.rates.values()) == {0.5} and set(fresh.rate_covers_s.values()) == {20.0}  # the 20 s known
    assert fresh.eta.startswith("10 s at 0.5/s")
    started = job_progress({"pending": 5}, 10, 0, 0, [(NOW - 5, 0)], NOW)
    assert set(started.rates.values()) == {None}  # less than a sampling interval: nothing measured yet


def test_progress_in_status_stats_and_metrics(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    layer = ActiveLayer(real_redis, namespace)
    layer.create_partitions(1, 50_000, 1000)
    report = orjson.loads(run_cli(engine_url, namespace, "status", "--json").stdout)["progress"]
    assert (report["total"], report["done"], report["pending"]) == (50, 0, 50)
    assert report["eta"] == "no completions yet" and report["eta_s"] is None
    log = ProgressLog(real_redis, KeySchema(namespace))
    now = real_redis.time()[0]  # type: ignore[index]
    assert log.sample(now=now - 600) == 0
    for _ in range(12):
        part = layer.claim("w")
        assert part is not None
        layer.complete(part.partition_id, "w")
    layer.fail(layer.claim("w").partition_id, "w", "boom")  # type: ignore[union-attr]
    layer.claim("w")
    report = orjson.loads(run_cli(engine_url, namespace, "status", "--json").stdout)["progress"]
    assert (report["total"], report["done"], report["failed"], report["pending"]) == (50, 12, 1, 37)
    assert report["queued"] == 12 and report["archived"] == 0  # done the moment the worker completed it
    assert 0.018 < report["rates"]["5m"] <= 0.021  # 12 in about 600 s
    assert 37 / 0.021 <= report["eta_s"] <= 37 / 0.018
    assert report["rate_covers_s"]["5m"] == 300 and 590 <= report["rate_covers_s"]["24h"] <= 620
    table = run_cli(engine_url, namespace, "status").stdout
    assert "12 of 50 done (24.0%), 1 failed, 37 pending" in table and "\nETA " in table
    assert "24h 0.0/s (over the last 6" in table or "24h 0.0/s (over the last 5" in table  # marked as partial

    with TestClient(create_app(real_redis, Config(namespace=namespace))) as http:
        stats = http.get("/stats").json()
        text = http.get("/metrics").text
    assert stats["progress"]["done"] == 12 and stats["progress"]["total"] == 50
    families = {f.name: f for f in text_string_to_metric_families(text)}
    parts = {s.labels["state"]: s.value for s in families["partarchive_job_partitions"].samples
             if s.labels["namespace"] == namespace}  # fmt: skip
    assert parts == {"total": 50, "done": 12, "failed": 1, "pending": 37}
    rates = {s.labels["window"]: s.value for s in families["partarchive_job_completion_rate"].samples
             if s.labels["namespace"] == namespace}  # fmt: skip
    assert 0.018 < rates["5m"] <= 0.021 and 0.018 < rates["24h"] <= 0.021  # 24 h: over the 600 s sampled so far
    assert not math.isnan(rates["1h"])
    [eta] = [s.value for s in families["partarchive_job_eta_seconds"].samples if s.labels["namespace"] == namespace]
    assert 37 / 0.021 <= eta <= 37 / 0.018


def test_samples_are_kept_for_a_day(real_redis: redis.Redis, namespace: str) -> None:
    keys = KeySchema(namespace)
    log = ProgressLog(real_redis, keys)
    real_redis.hset(keys.progress, mapping={str(m): f"{m * 60},0" for m in range(1000, 1000 + 1600)})
    log.sample(now=(1000 + 1600) * 60)
    kept = sorted(int(m) for m in real_redis.hkeys(keys.progress))
    assert kept[0] == 1000 + 1600 - 25 * 60 and kept[-1] == 1000 + 1600


def test_right_after_a_job_the_rates_show_its_first_completions(real_redis: redis.Redis, namespace: str) -> None:
    """The archiver's sampler began with the job: 3,000 completions, all within the first minute
    sampled. Rates are given over the 50 s the samples cover (and say so)."""
    keys = KeySchema(namespace)
    log = ProgressLog(real_redis, keys)
    minute = int(NOW // 60) * 60
    log.sample(now=minute + 5)  # nothing done yet
    real_redis.hset(keys.archive_meta, "total", 3000)  # the job's completions, archived
    log.sample(now=minute + 55)
    job = log.read({}, now=minute + 55)
    assert job.done == 3000
    assert set(job.rates.values()) == {60.0} and set(job.rate_covers_s.values()) == {50.0}  # 3,000 in 50 s


def test_the_sampler_drops_old_minutes_of_the_statistics(real_redis: redis.Redis, namespace: str) -> None:
    """The statistics' minutes (the dashboard's chart of the last hour) are kept for three hours."""
    keys = KeySchema(namespace)
    now_minute = int(NOW // 60)
    real_redis.hset(keys.stats_minutes, mapping={str(m): 1 for m in range(now_minute - 300, now_minute + 1)})
    ProgressLog(real_redis, keys).sample(now=NOW)
    kept = sorted(int(m) for m in real_redis.hkeys(keys.stats_minutes))
    assert kept == list(range(now_minute - MINUTES_KEPT, now_minute + 1))
