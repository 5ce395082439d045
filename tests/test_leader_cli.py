"""``partarchive plan`` and ``partarchive worker --planner`` as a user runs them: a fixed plan created once
(run twice), the plan and its leader shown, and their bad inputs: one line, exit 2, nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import redis

from archiver.cli.main import main
from layers import ActiveLayer
from layers.active.planning import PlanningLayer
from tests.helpers import cli_env, run_cli

ROOT = Path(__file__).resolve().parent.parent


def test_a_fixed_plan_is_created_once_and_shown(engine_url: str, real_redis: redis.Redis, namespace: str) -> None:
    first = run_cli(engine_url, namespace, "plan", "--first", "1", "--last", "2500", "--size", "1000")
    assert first.returncode == 0 and first.stdout.strip() == "created 3 partitions: pids 1..3 for ids 1..2500"
    again = run_cli(engine_url, namespace, "plan", "--first", "1", "--last", "2500", "--size", "1000", "--json")
    assert again.returncode == 0 and again.stdout.replace(" ", "").replace("\n", "") == '{"created":0,"runs":[]}'
    assert ActiveLayer(real_redis, namespace).counts()["pending"] == 3
    shown = run_cli(engine_url, namespace, "plan")
    assert shown.returncode == 0 and "ids 1..2500 in 3 partitions, next start 2501" in shown.stdout
    assert "leader     nobody" in shown.stdout  # the command gave its lease back
    status = run_cli(engine_url, namespace, "status")
    assert "ids 1..2500 in 3 partitions" in status.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["plan", "--first", "10", "--last", "5", "--size", "1"], "inverted range: first 10 > last 5"),
        (["plan", "--first", "1", "--last", "5", "--size", "0"], "the partition size must be at least 1"),
        (["plan", "--first", "1", "--size", "10"], "--last missing"),
        (["plan", "--first", "1", "--last", "3000", "--size", "500"], "overlap partitions planned differently"),
        (["plan", "--first", "3001", "--last", "5000", "--size", "1000"], "ids 2001..3000 would be left unplanned"),
        (["worker", "tests.runtime_jobs:process", "--planner", "tests.leader_jobs:Nope"], "has no 'Nope'"),
        (["worker", "tests.runtime_jobs:process", "--planner", "tests.runtime_jobs:process"], "is not a planner"),
        (["worker", "tests.runtime_jobs:process", "--max-pending", "3"], "--max-pending go with --planner"),
        (["worker", "tests.runtime_jobs:process", "--planner", "tests.leader_jobs:Source", "--partition-multiple",
          "0"], "--partition-multiple must be in 1..1000000"),
        (["worker", "tests.runtime_jobs:process", "--planner", "tests.leader_jobs:Source", "--elk-prefix", "x:"],
         "needs Go's namespace"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    real_redis: redis.Redis, engine_url: str, namespace: str, args: list[str], says: str,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    plans = PlanningLayer(ActiveLayer(real_redis, namespace))
    token = plans.lead("setup", 0, 30).token
    plans.plan_range("setup", token, 1, 2000, 1000, lease_s=30)
    plans.resign("setup", token)
    before = contents(real_redis, namespace)
    if args[0] == "plan":
        monkeypatch.setenv("REDIS_URL", engine_url)
        monkeypatch.setenv("PARTARCHIVE_NAMESPACE", namespace)
        assert main(args) == 2
        err = capsys.readouterr().err
    else:  # a process of its own: `worker` sets up the logging of the process it runs in
        done = subprocess.run([sys.executable, "-m", "archiver", *args], env=cli_env(engine_url, namespace),
                              cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 2
        err = done.stderr
    assert err.count("\n") == 1 and says in err and "Traceback" not in err, err
    assert contents(real_redis, namespace) == before


def contents(client: redis.Redis, namespace: str) -> dict[bytes, object]:
    """Every key of the namespace and what it holds (by its type; not DUMP, whose hash order can change)."""
    read = {b"hash": client.hgetall, b"zset": lambda k: client.zrange(k, 0, -1, withscores=True),
            b"list": lambda k: client.lrange(k, 0, -1), b"string": client.get}  # fmt: skip
    return {key: read[client.type(key)](key) for key in client.scan_iter(match=f"{namespace}_*")}
