"""The command line as a user runs it: real processes, exit codes, one-line errors."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import orjson
import pytest
import redis

from layers import ActiveLayer
from tests.helpers import cli_env, run_cli


def test_get_found_not_found_and_json(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    ActiveLayer(real_redis, namespace).create_partitions(1, 1000, 1000)
    found = run_cli(engine_url, namespace, "get", "1")
    assert found.returncode == 0 and "pending" in found.stdout and "source: active" in found.stdout
    as_json = run_cli(engine_url, namespace, "get", "1", "--json")
    assert orjson.loads(as_json.stdout)["source"] == "active"
    missing = run_cli(engine_url, namespace, "get", "99")
    assert missing.returncode == 1 and "not found" in missing.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["get", "abc"],
        ["get", "-5"],
        ["get", str(2**53)],
        ["get", "1", "--namespace", "bad ns"],
        ["nope"],
        ["demo", "--partitions", "-1"],
        ["run", "--claim-idle-ms", "0"],
        ["run", "--log-level", "loud"],
        ["serve", "--log-level", "loud"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(engine_url: str, namespace: str, args: list[str]) -> None:
    result = run_cli(engine_url, namespace, *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("partarchive"), result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--redis-url", "redis://admin:hunter2@127.0.0.1:6379/0", "status"],  # a flag before the command
        ["status", "--bogus", "rediss://:hunter2@example.invalid:6380/0"],
        ["get", "redis://u:hunter2@h/0"],
    ],
)
def test_a_password_typed_in_the_wrong_place_is_not_echoed(engine_url: str, namespace: str, args: list[str]) -> None:
    result = run_cli(engine_url, namespace, *args)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "hunter2" not in result.stderr + result.stdout and "***@" in result.stderr


def test_unreachable_redis_is_one_line(namespace: str) -> None:
    result = run_cli("redis://127.0.0.1:1/0", namespace, "status")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "cannot reach Redis" in result.stderr


def test_status_json_and_table(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    layer = ActiveLayer(real_redis, namespace)
    layer.create_partitions(1, 5000, 1000)
    layer.claim("w")
    layer.complete(1, "w")
    report = orjson.loads(run_cli(engine_url, namespace, "status", "--json").stdout)
    assert report["active"]["size"] == 4 and report["active"]["by_status"]["pending"] == 4
    assert report["queue"]["backlog"] == 1
    table = run_cli(engine_url, namespace, "status")
    assert table.returncode == 0 and "queue backlog" in table.stdout


def test_status_of_a_namespace_that_is_not_there(engine_url: str, namespace: str) -> None:
    result = run_cli(engine_url, namespace, "status")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == f"partarchive: no such namespace {namespace!r} on this server\n"


def test_status_watch_prints_again_until_interrupted(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    ActiveLayer(real_redis, namespace).create_partitions(1, 3000, 1000)
    proc = subprocess.Popen(
        [sys.executable, "-m", "archiver", "status", "--watch", "0.2"],
        env=cli_env(engine_url, namespace),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as from a terminal: a shell running this suite in the background leaves SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None
    seen, deadline = [], time.monotonic() + 60
    while sum("active partitions" in line for line in seen) < 3 and time.monotonic() < deadline:
        seen.append(proc.stdout.readline())
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert "".join(seen).count("active partitions") == 3  # printed again every 0.2 s
    bad = run_cli(engine_url, namespace, "status", "--watch", "0")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--watch" in bad.stderr


def test_demo_against_a_server(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    result = run_cli(engine_url, namespace, "demo", "--partitions", "400", "--workers", "4", "--json")
    assert result.returncode == 0, result.stderr
    report = orjson.loads(result.stdout)
    assert report["ok"] and report["active_size"] == 0 and report["found_in_archive"] == 400
    assert real_redis.hlen(f"{namespace}_completed") == 400  # left there for inspection


def test_demo_on_the_embedded_engine(namespace: str) -> None:
    result = run_cli("", namespace, "demo", "--partitions", "300", "--workers", "3")
    assert result.returncode == 0, result.stderr
    assert "embedded valkey-server" in result.stdout and "result                 OK" in result.stdout


def test_version_human_times_and_a_busy_metrics_port(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    import socket

    version = run_cli(engine_url, namespace, "--version")
    assert version.returncode == 0 and version.stdout.startswith("partarchive 0.")
    layer = ActiveLayer(real_redis, namespace)
    layer.create_partitions(1, 1000, 1000)
    layer.claim("w")
    shown = run_cli(engine_url, namespace, "get", "1")
    assert " UTC)" in shown.stdout and "claimed_at" in shown.stdout
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        refused = run_cli(engine_url, namespace, "run", "--metrics-port", str(port))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert f"cannot serve metrics on 127.0.0.1:{port}" in refused.stderr and "Traceback" not in refused.stderr

