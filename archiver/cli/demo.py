"""``partarchive demo``: the whole system on one engine (leader, simulated workers, archiver,
router) and its report."""

from __future__ import annotations

import argparse
import random
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

import redis

from archiver.cli.args import EXIT_ERROR, CliError
from archiver.cli.progress import progress_bar
from archiver.config import Config
from archiver.daemon.loop import ArchiverDaemon, run_until
from archiver.engine import open_engine, redact_url
from archiver.namespace import Namespace
from archiver.output import print_json
from archiver.router import QueryRouter, Source
from layers import ActiveLayer
from stats import StatsReader

ARCHIVE_SOURCES = (Source.SIMPLE, Source.STAGING, Source.BATCH)


@dataclass(frozen=True, slots=True)
class DemoReport:
    partitions: int
    completed: int
    failures_retried: int
    active_size: int
    archived: int
    found: int
    found_in_archive: int
    queue_length: int
    stats_completed: int
    elapsed_s: float
    engine: str

    @property
    def ok(self) -> bool:
        return (
            self.active_size == 0 and self.found_in_archive == self.partitions and self.stats_completed == self.archived
        )

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self) | {"ok": self.ok}


def _worker(
    active: ActiveLayer,
    name: str,
    fail_rate: float,
    stats: dict[str, int],
    lock: threading.Lock,
    finished: threading.Event,
) -> None:
    rng = random.Random(name)
    failed_once: set[int] = set()
    while not finished.is_set():
        part = active.claim(name)
        if part is None:
            if active.retry_failed() == 0:
                counts = active.counts()
                if (
                    counts["pending"] == 0
                    and counts["failed"] == 0
                    and counts["claimed"] == 0
                    and counts["running"] == 0
                ):
                    return
                time.sleep(0.01)
            continue
        active.start(part.partition_id, name)
        if part.partition_id not in failed_once and rng.random() < fail_rate:
            failed_once.add(part.partition_id)
            active.fail(part.partition_id, name, "simulated failure")
            with lock:
                stats["failed"] += 1
            continue
        active.complete(part.partition_id, name)
        with lock:
            stats["completed"] += 1


def run_demo(
    client: redis.Redis,
    config: Config,
    *,
    partitions: int,
    workers: int,
    engine: str,
    fail_rate: float = 0.01,
    progress: bool = True,
) -> DemoReport:
    started = time.monotonic()
    ns = Namespace(client, config)
    active = ns.active
    pids = active.create_partitions(1, partitions * 1000, 1000) if partitions else range(0)
    stats = {"completed": 0, "failed": 0}
    lock = threading.Lock()
    finished = threading.Event()
    threads = [
        threading.Thread(target=_worker, args=(active, f"worker{i + 1}", fail_rate, stats, lock, finished), daemon=True)
        for i in range(workers)
    ]
    daemon = ArchiverDaemon(client, replace(config, stats_flush_interval_s=0.5), consumer="demo-archiver")
    archive = ns.archive
    queue_keys = daemon.keys

    def drained() -> bool:
        return not any(t.is_alive() for t in threads) and client.xlen(queue_keys.queue) == 0

    archiver_thread = threading.Thread(target=run_until, args=(daemon, drained), daemon=True)
    for t in threads:
        t.start()
    archiver_thread.start()
    with progress_bar(total=len(pids), desc="archived", unit="part", disable=not progress) as bar:
        while archiver_thread.is_alive():
            archiver_thread.join(0.2)
            bar.update(min(daemon.archived, len(pids)) - bar.n)
        bar.update(min(daemon.archived, len(pids)) - bar.n)
    finished.set()
    router = QueryRouter(client, ns.keys, archive=ns.archive, summary_lookup=ns.stats_reader.range_summary)
    found = in_archive = 0
    for pid in pids:
        answer = router.get(pid)
        found += answer.found
        in_archive += answer.source in ARCHIVE_SOURCES and not answer.degraded
    return DemoReport(
        partitions=len(pids),
        completed=stats["completed"],
        failures_retried=stats["failed"],
        active_size=active.size(),
        archived=archive.archived_total(),
        found=found,
        found_in_archive=in_archive,
        queue_length=int(client.xlen(queue_keys.queue)),  # type: ignore[arg-type]
        stats_completed=StatsReader(client, config.keys).stats()["completed"]["total_completed"],
        elapsed_s=round(time.monotonic() - started, 2),
        engine=engine,
    )


def command(args: argparse.Namespace, config: Config) -> int:
    from archiver.logs import configure_logging

    configure_logging("warning")  # the report is the output; warnings go to stderr

    if not 0 <= args.partitions <= 1_000_000:
        raise CliError("--partitions must be in 0..1000000")
    if not 1 <= args.workers <= 256:
        raise CliError("--workers must be in 1..256")
    if config.sentinel:
        from archiver.engine.sentinel import sentinel_engine

        opened = sentinel_engine(config)
    else:
        opened = open_engine(config.redis_url, cluster=config.cluster)
    with opened as engine:
        where = redact_url(engine.url)
        if engine.embedded:
            where = "a local cluster of 3 valkey-servers" if config.cluster else "embedded valkey-server"
        if not args.json:
            print(f"engine: {where}; {args.partitions} partitions, {args.workers} workers")
        report = run_demo(
            engine.client,
            config,
            partitions=args.partitions,
            workers=args.workers,
            engine=where,
            progress=not (args.no_progress or args.json),
        )
    if args.json:
        print_json(report.to_dict())
    else:
        rows = [
            ("partitions created", report.partitions),
            ("completed", report.completed),
            ("failures retried", report.failures_retried),
            ("active hash size", report.active_size),
            ("archived (index)", report.archived),
            ("found by the router", f"{report.found} ({report.found_in_archive} from the archive)"),
            ("archive queue length", report.queue_length),
            ("statistics: completed", report.stats_completed),
            ("elapsed", f"{report.elapsed_s} s"),
        ]
        print("\npartarchive demo report")
        for label, value in rows:
            print(f"  {label:22} {value}")
        print("  result                 " + ("OK" if report.ok else "MISMATCH"))
    return 0 if report.ok else EXIT_ERROR
