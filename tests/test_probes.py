"""The archiver's liveness and readiness on its metrics port (`archiver.daemon.probes`): what the
Kubernetes probes of deploy/kubernetes reach."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import httpx
import redis

from archiver import ArchiverDaemon, Config
from archiver.daemon.probes import LIVENESS_PATH, READINESS_PATH, LoopProbe, serve_metrics
from layers import KeySchema
from tests.helpers import cli_env, complete_partitions, free_port, http_get, start_archiver, wait_for


def _answers(url: str) -> bool:
    try:
        return http_get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_running_archiver_answers_its_probes_beside_metrics(
    engine_url: str, real_redis: redis.Redis, namespace: str
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_archiver(engine_url, namespace, "--metrics-port", str(port))
    try:
        wait_for(lambda: _answers(base + READINESS_PATH), what="the archiver to be ready")
        complete_partitions(real_redis, namespace, 5)
        wait_for(lambda: real_redis.xlen(KeySchema(namespace).queue) == 0, what="archiving")
        live = httpx.get(base + LIVENESS_PATH, timeout=5)
        assert live.status_code == 200 and live.json()["status"] == "ok"
        assert live.json()["idle_s"] < 30
        assert httpx.get(base + READINESS_PATH, timeout=5).json() == {"status": "ready"}
        assert f'partarchive_queue_length{{namespace="{namespace}"}} 0.0' in httpx.get(base + "/metrics").text
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0 and b"Traceback" not in err


def test_readiness_follows_start_and_drain_and_liveness_a_stalled_loop(real_redis: redis.Redis, namespace: str) -> None:
    daemon = ArchiverDaemon(real_redis, Config(namespace=namespace, block_ms=50), consumer="probe")
    port = free_port()
    server = serve_metrics(port, "127.0.0.1", daemon.probe)
    base = f"http://127.0.0.1:{port}"
    try:
        not_yet = httpx.get(base + READINESS_PATH, timeout=5)
        assert not_yet.status_code == 503 and not_yet.json()["error"].startswith("not started")
        loop = threading.Thread(target=daemon.run, kwargs={"install_signals": False})
        loop.start()
        wait_for(lambda: _answers(base + READINESS_PATH), what="the daemon to start")
        daemon.stop()
        loop.join(15)
        drained = httpx.get(base + READINESS_PATH, timeout=5)
        assert drained.status_code == 503 and drained.json() == {"error": "draining", "detail": None}
    finally:
        server.shutdown()
        server.server_close()

    probe = LoopProbe(threading.Event(), stalled_after_s=0.2)
    assert probe.liveness()[0] == 200
    time.sleep(0.3)
    status, body = probe.liveness()
    assert status == 503 and body["error"] == "archiver loop stalled" and body["detail"]["idle_s"] >= 0.3
    probe.turned()
    assert probe.liveness()[0] == 200


def test_the_probes_answer_while_redis_is_down(namespace: str) -> None:
    """Issue 47: a pod started while Redis is down is alive (its loop tries Redis) and not ready;
    a bad --metrics-port is refused in one line, without waiting for Redis."""
    down = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_archiver(down, namespace, "--metrics-port", str(port))
    try:
        wait_for(lambda: _status(base + LIVENESS_PATH) == 200, what="liveness while Redis is down")
        ready = httpx.get(base + READINESS_PATH, timeout=5)
        assert ready.status_code == 503 and "waiting for Redis" in ready.json()["error"]
        assert httpx.get(base + "/metrics", timeout=5).status_code == 200
        for bad in (["--metrics-port", "70000"], ["--metrics-port", str(port)]):  # out of range; taken
            started = time.monotonic()
            refused = subprocess.run(
                [sys.executable, "-m", "archiver", "run", *bad], env=cli_env(down, namespace),
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
            assert "Traceback" not in refused.stderr and time.monotonic() - started < 20
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)


def _status(url: str) -> int:
    try:
        return http_get(url, timeout=2).status_code
    except httpx.HTTPError:
        return 0
