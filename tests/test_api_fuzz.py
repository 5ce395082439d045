"""Schemathesis fuzzes the running API from its own OpenAPI schema: no 5xx, no schema violation.

Run through schemathesis's own command line (``schemathesis run``), against a real
``partarchive serve`` process holding archived and active partitions.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import redis

from archiver import ArchiverDaemon, Config
from archiver.daemon.loop import drain
from layers import ActiveLayer
from tests.helpers import complete_partitions, free_port, start_server


def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    engine_url: str, real_redis: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    complete_partitions(real_redis, namespace, 50)
    drain(ArchiverDaemon(real_redis, Config(namespace=namespace, block_ms=10), consumer="t"))
    active = ActiveLayer(real_redis, namespace)
    active.create_partitions(50_001, 60_000, 1000)
    active.claim("w")
    port = free_port()
    server = start_server(engine_url, namespace, port)
    # A search's filters are checked together (completed_after before completed_before, a cursor made
    # with the same filters, a date that exists): such a request, valid by the schema field by field,
    # is answered 422 as documented.
    (tmp_path / "schemathesis.toml").write_text(
        '[[operations]]\ninclude-path-regex = "^/partitions$"\ninclude-method = "GET"\n'
        '[operations.checks.positive_data_acceptance]\n'
        'expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"]\n'
    )
    exe = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or "schemathesis"
    try:
        run = subprocess.run(
            [
                exe,
                "run",
                f"http://127.0.0.1:{port}/openapi.json",
                "--checks",
                "all",
                "--max-examples",
                "80",
                "--seed",
                "1",
                "--generation-database",
                "none",
                "--no-color",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
        )
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=15)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    generated = re.search(r"(\d+) generated", run.stdout)
    assert generated and int(generated.group(1)) >= 100, run.stdout[-2000:]
    assert "8 passed" in run.stdout or "Tested: 8" in run.stdout, run.stdout[-2000:]
    assert b"Traceback" not in err
