"""deploy/kubernetes against the code: every name the manifests share with partarchive (the queue's
stream key on one server and on a cluster, its consumer group, ports, environment variables, the
CLI's arguments, probe paths, the Secret's keys KEDA and the pods read) is held to what the code
spells, for the base and for each component (Redis Cluster, Sentinel).

The manifests are read as kustomize combines them: each component's patches merged into the base
(maps merged, lists replaced, ``null`` deletes: what kustomize does to a ConfigMap and to the
KEDA resources, which carry no merge keys). Where ``kubectl`` is installed, the same checks run on
``kubectl kustomize``'s own output too, and that output must hold what the merge here gives.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import fakeredis
import pytest
import redis
import yaml

from archiver import ArchiverDaemon, Config
from archiver.cli.args import build_parser
from archiver.config import parse_addresses
from archiver.daemon.loop import drain
from archiver.daemon.probes import LIVENESS_PATH, READINESS_PATH
from archiver.version import installed_version
from archiver.web import create_app
from layers import ActiveLayer, KeySchema
from layers.keys import ARCHIVER_GROUP
from tests.helpers import complete_partitions

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "deploy" / "kubernetes"
VARIANTS = {"server": None, "cluster": "cluster", "sentinel": "sentinel"}
TRIGGERS = {"server": "redis-streams", "cluster": "redis-cluster-streams", "sentinel": "redis-sentinel-streams"}
Doc = dict[str, Any]


def _read(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _resources(folder: Path, field: str) -> list[Doc]:
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    entries = kustomization[field]
    return [doc for e in entries for doc in _read(folder / (e if isinstance(e, str) else e["path"]))]


def _merged(into: Any, patch: Any) -> Any:
    if not isinstance(into, dict) or not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(into)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merged(into.get(key), value)
    return out


def composed(variant: str) -> list[Doc]:
    docs = _resources(BASE, "resources")
    component = VARIANTS[variant]
    if component:
        for patch in _resources(BASE / "components" / component, "patches"):
            index = next(i for i, d in enumerate(docs) if _id(d) == _id(patch))
            docs[index] = _merged(docs[index], patch)
    return docs


def _id(doc: Doc) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def _one(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [_id(d) for d in found])
    return found[0]


def _container(deployment: Doc) -> Doc:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1  # one process a pod
    return dict(containers[0])


def _secret_refs(container: Doc) -> dict[str, tuple[str, str]]:
    return {
        e["name"]: (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
        for e in container.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    }


def _config(docs: list[Doc], deployment: Doc) -> Config:
    """The configuration the pods of ``deployment`` run with (the ConfigMap they read, passwords empty)."""
    container = _container(deployment)
    (source,) = container["envFrom"]
    data = _one(docs, "ConfigMap", source["configMapRef"]["name"])["data"]
    names = set(data) | {e["name"] for e in container.get("env", [])}
    settings = {f"PARTARCHIVE_{f.upper()}" for f in Config.__dataclass_fields__}
    assert names <= settings | {"REDIS_URL"}, names - settings
    assert "PARTARCHIVE_REDIS_URL" not in names  # the code reads REDIS_URL
    return Config.from_env(dict(data))


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _pods(docs: list[Doc], selector: dict[str, str]) -> list[Doc]:
    found = [
        d for d in docs if d["kind"] == "Deployment" and _selects(selector, d["spec"]["template"]["metadata"]["labels"])
    ]
    assert found, selector
    return found


def check(docs: list[Doc], variant: str) -> None:
    archiver = _one(docs, "Deployment", "partarchive-archiver")
    serve = _one(docs, "Deployment", "partarchive-serve")
    config = _config(docs, archiver)
    assert _config(docs, serve) == config
    _check_processes(archiver, serve, config)
    _check_probes(archiver, serve)
    _check_scaling(docs, archiver, config, variant)
    _check_secrets(docs, archiver, serve, variant)
    _check_services(docs)


def _check_processes(archiver: Doc, serve: Doc, config: Config) -> None:
    run = build_parser().parse_args(_container(archiver)["args"])
    assert run.command == "run" and run.processes == "1" and run.metrics_host == "0.0.0.0"
    assert {p["name"]: p["containerPort"] for p in _container(archiver)["ports"]} == {"metrics": run.metrics_port}
    served = build_parser().parse_args(_container(serve)["args"])
    assert served.command == "serve" and served.host == "0.0.0.0"
    assert {p["name"]: p["containerPort"] for p in _container(serve)["ports"]} == {"http": served.port}
    assert "replicas" not in archiver["spec"]  # KEDA's to set
    for deployment in (archiver, serve):
        assert _container(deployment)["image"].split(":")[0] == "partarchive"
    # SIGTERM's drain ends (and its hard deadline fires) before the kubelet's SIGKILL
    assert archiver["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= config.drain_timeout_s + 5


def _check_probes(archiver: Doc, serve: Doc) -> None:
    def probes(deployment: Doc) -> dict[str, tuple[str, str]]:
        c = _container(deployment)
        return {
            kind: (c[kind]["httpGet"]["path"], c[kind]["httpGet"]["port"])
            for kind in ("livenessProbe", "readinessProbe")
        }

    assert probes(archiver) == {
        "livenessProbe": (LIVENESS_PATH, "metrics"),
        "readinessProbe": (READINESS_PATH, "metrics"),
    }
    routes = {getattr(r, "path", None) for r in create_app(fakeredis.FakeRedis(), Config()).routes}
    for path, port in probes(serve).values():
        assert path in routes and port == "http"


def _check_scaling(docs: list[Doc], archiver: Doc, config: Config, variant: str) -> None:
    scaled = _one(docs, "ScaledObject")
    assert scaled["spec"]["scaleTargetRef"]["name"] == archiver["metadata"]["name"]
    assert scaled["spec"]["minReplicaCount"] >= 1  # maintenance runs in a live archiver
    (trigger,) = scaled["spec"]["triggers"]
    meta = trigger["metadata"]
    assert trigger["type"] == TRIGGERS[variant]
    assert meta["stream"] == KeySchema(config.namespace, cluster=config.cluster).queue
    assert meta["stream"] == ("{elk}_archive:queue" if variant == "cluster" else "elk_archive:queue")
    assert meta["consumerGroup"] == ARCHIVER_GROUP
    assert "pendingEntriesCount" not in meta and "streamLength" not in meta
    # all replicas asked for before the backlog is critical (each archiver holds up to read_count unread-by-KEDA)
    lag, most = int(meta["lagCount"]), scaled["spec"]["maxReplicaCount"]
    assert most * (lag + config.read_count) <= config.skip_compression_backlog
    assert int(meta["activationLagCount"]) <= lag
    if variant == "sentinel":
        assert parse_addresses(meta["addresses"]) == config.sentinels
        assert meta["sentinelMaster"] == config.sentinel_master and meta["databaseIndex"] == "0"
        return
    url = urlsplit(config.redis_url or "")
    if variant == "cluster":
        assert config.cluster and f"{url.hostname}:{url.port}" in meta["addresses"].split(",")
    else:
        assert not config.cluster and meta["address"] == f"{url.hostname}:{url.port}"
        assert meta["databaseIndex"] == (url.path.strip("/") or "0")


def _check_secrets(docs: list[Doc], archiver: Doc, serve: Doc, variant: str) -> None:
    scaled = _one(docs, "ScaledObject")
    (trigger,) = scaled["spec"]["triggers"]
    auth = _one(docs, "TriggerAuthentication", trigger["authenticationRef"]["name"])
    keda = {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
    pods = _secret_refs(_container(archiver))
    assert _secret_refs(_container(serve)) == pods
    expected = {"password": pods["PARTARCHIVE_REDIS_PASSWORD"]}
    if variant == "sentinel":
        expected["sentinelPassword"] = pods["PARTARCHIVE_SENTINEL_PASSWORD"]
    assert keda == expected
    for name, key in pods.values():
        assert key in _one(docs, "Secret", name).get("stringData", {})
    for d in docs:  # no password in the clear anywhere else
        if d["kind"] == "ConfigMap":
            assert not any("password" in k.lower() for k in d["data"])
            assert all("@" not in v for v in d["data"].values())


def _check_services(docs: list[Doc]) -> None:
    services = [d for d in docs if d["kind"] == "Service"]
    for service in services:
        for deployment in _pods(docs, service["spec"]["selector"]):
            names = {p["name"] for p in _container(deployment)["ports"]}
            assert {p["targetPort"] for p in service["spec"]["ports"]} <= names
    monitor = _one(docs, "ServiceMonitor")
    watched = [s for s in services if _selects(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
    assert {s["metadata"]["name"] for s in watched} == {"partarchive-archiver-metrics", "partarchive-serve"}
    ports = {p["name"] for s in watched for p in s["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == ports
    assert all(e["path"] == "/metrics" and e["honorLabels"] is True for e in monitor["spec"]["endpoints"])
    for budget in (d for d in docs if d["kind"] == "PodDisruptionBudget"):
        assert len(_pods(docs, budget["spec"]["selector"]["matchLabels"])) == 1


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_manifests_name_what_the_code_names(variant: str) -> None:
    check(composed(variant), variant)


def test_the_image_tag_is_the_package_version() -> None:
    (image,) = yaml.safe_load((BASE / "kustomization.yaml").read_text())["images"]
    assert image == {"name": "partarchive", "newTag": installed_version()}


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed (its kustomize builds the base)")
@pytest.mark.parametrize("variant", VARIANTS)
def test_kubectl_kustomize_builds_what_the_merge_gives(variant: str, tmp_path: Path) -> None:
    overlay = {"resources": [os.path.relpath(BASE, tmp_path)]}
    if VARIANTS[variant]:
        overlay["components"] = [os.path.relpath(BASE / "components" / str(VARIANTS[variant]), tmp_path)]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    built = subprocess.run(["kubectl", "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    docs = [d for d in yaml.safe_load_all(built.stdout) if d]
    check(docs, variant)
    mine = {_id(d): d for d in composed(variant)}
    assert {_id(d) for d in docs} == set(mine)
    for doc in docs:
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "partarchive"
        if doc["kind"] in ("ConfigMap", "ScaledObject", "TriggerAuthentication"):
            assert {k: v for k, v in doc.items() if k != "metadata"} == {
                k: v for k, v in mine[_id(doc)].items() if k != "metadata"
            }
        if doc["kind"] == "Deployment":
            assert _container(doc)["image"] == f"partarchive:{installed_version()}"


def test_keda_reads_the_queues_lag_as_the_archivers_leave_it(real_redis: redis.Redis, namespace: str) -> None:
    """What the lag trigger reads (XINFO GROUPS ``lag`` of the group), on the real engine: entries
    no archiver has read; a number all along although archivers delete what they acknowledge."""
    keys = KeySchema(namespace)
    daemon = ArchiverDaemon(real_redis, Config(namespace=namespace, block_ms=10), consumer="k")
    daemon.queue.ensure_group()

    def group() -> dict[str, Any]:
        (found,) = [g for g in real_redis.xinfo_groups(keys.queue) if g["name"] == ARCHIVER_GROUP.encode()]
        return dict(found)

    complete_partitions(real_redis, namespace, 50)
    assert group()["lag"] == 50
    assert len(daemon.queue.read_new("k", 20, 0)) == 20  # delivered, not yet archived: pending, not lag
    assert group()["lag"] == 30 and group()["pending"] == 20 and real_redis.xlen(keys.queue) == 50
    daemon.start()  # archives what its consumer name holds
    drain(daemon)
    assert group()["lag"] == 0 and group()["pending"] == 0 and real_redis.xlen(keys.queue) == 0
    layer = ActiveLayer(real_redis, namespace)
    layer.create_partitions(50_001, 57_000, 1000)
    while part := layer.claim("w"):
        layer.complete(part.partition_id, "w")
    assert group()["lag"] == 7
