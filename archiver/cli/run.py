"""``partarchive run``: the archiver daemon (one namespace, several, or several processes)."""

from __future__ import annotations

import argparse
import functools
import os
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

import redis

from archiver.cli.args import CliError, check_port
from archiver.cli.target import open_namespace
from archiver.config import Config
from archiver.engine import client_for
from archiver.namespace import Namespace

if TYPE_CHECKING:
    from archiver.daemon.children import Starter
    from archiver.daemon.group_metrics import GroupMetrics
    from archiver.daemon.probes import LoopProbe

T = TypeVar("T")


def command(args: argparse.Namespace, config: Config) -> int:
    from archiver.daemon.loop import ArchiverDaemon
    from archiver.logs import configure_logging

    configure_logging(args.log_level)
    processes, auto = _processes(args)
    if auto or processes > 1:
        return _supervise(args, config, processes, auto)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # a child of a supervisor serving the group's metrics
        from archiver.metrics import start_series

        for name in args.namespaces or [config.namespace]:
            start_series(name)
    if len(args.namespaces) > 1:
        from archiver.daemon.multi import MultiArchiver

        if args.metrics_port is not None:
            raise CliError("--metrics-port reports one namespace: serve it per namespace (partarchive serve)")
        client = _when_ready(functools.partial(client_for, config))
        configs = [_when_ready(functools.partial(_bound, client, config, name)).config for name in args.namespaces]
        MultiArchiver(client, configs, consumer=args.consumer).run()
        return 0
    probe = None
    if args.metrics_port is not None:  # served before Redis answers: a pod waiting for it stays alive
        from archiver.daemon.probes import LoopProbe, serve_metrics

        check_port(args.metrics_port)
        probe = LoopProbe(threading.Event())
        try:
            serve_metrics(args.metrics_port, args.metrics_host, probe)
        except OSError as exc:
            raise CliError(_port_error(args, exc)) from None
    ns = _when_ready(lambda: open_namespace(config, existing=False), probe)
    daemon = ArchiverDaemon(ns.redis, ns.config, consumer=args.consumer, probe=probe)
    if probe is not None:
        from archiver.metrics import register_state_collector

        register_state_collector(daemon.archive)
    daemon.run()
    return 0


def _bound(client: redis.Redis, config: Config, name: str) -> Namespace:
    return Namespace.bound(client, replace(config, namespace=name))


def _when_ready(step: Callable[[], T], probe: LoopProbe | None = None) -> T:
    """``step()`` once Redis answers (`until_ready`), each attempt a turn of ``probe``'s loop (its
    liveness); SIGTERM before then ends the process, as nothing is in hand yet."""
    from archiver.daemon.loop import until_ready

    def attempt() -> T:
        if probe is not None:
            probe.turned()
        return step()

    result = until_ready(attempt, threading.Event())
    if result is None:  # nothing sets the event: unreachable
        raise CliError("stopped before Redis answered")
    return result


def _processes(args: argparse.Namespace) -> tuple[int, bool]:
    """``--processes``: a number, or ``auto`` (then ``--max-processes``, by default the CPU cores)."""
    if args.processes == "auto":
        most = args.max_processes if args.max_processes is not None else os.cpu_count() or 1
        if not 1 <= most <= 64:
            raise CliError("--max-processes must be in 1..64")
        return most, True
    if args.max_processes is not None:
        raise CliError("--max-processes goes with --processes auto")
    try:
        processes = int(args.processes)
    except ValueError:
        raise CliError(f"--processes takes a number or auto, not {args.processes!r}") from None
    if not 1 <= processes <= 64:
        raise CliError("--processes must be in 1..64")
    return processes, False


def _supervise(args: argparse.Namespace, config: Config, processes: int, auto: bool) -> int:
    """Children under a supervisor: ``processes`` of them, or, with ``auto``, as the backlog says
    (at most ``processes``); with ``--metrics-port`` the supervisor serves the group's metrics."""
    from archiver.daemon.autoscale import Autoscaler, ScalePolicy
    from archiver.daemon.supervisor import Supervisor
    from layers.control.pressure import observe_backlog

    if args.consumer:
        raise CliError("--consumer names one process: with --processes each child names itself")
    names = args.namespaces or [config.namespace]
    client = _when_ready(functools.partial(client_for, config)) if auto or args.metrics_port is not None else None
    spaces = [] if client is None else [_when_ready(functools.partial(_bound, client, config, n)) for n in names]
    keys = [ns.keys for ns in spaces]
    scaler = None
    if auto:
        policy = ScalePolicy(processes, config.scale_interval_s, config.scale_up_age_s, config.scale_down_idle_s)
        scaler = Autoscaler(policy, lambda: observe_backlog(client, keys))  # type: ignore[arg-type]
    metrics = None
    if args.metrics_port is not None and client is not None:
        metrics = serve_group_metrics(args, [ns.archive for ns in spaces], "archiver")
    start = child_starter(args, metrics)
    try:
        return Supervisor(start, config.drain_timeout_s, processes, scaler=scaler, metrics=metrics).run()
    finally:
        if metrics is not None:
            metrics.close()


def serve_group_metrics(args: argparse.Namespace, archives: list[Any], role: str) -> GroupMetrics:
    """A supervisor's group metrics (`archiver.daemon.group_metrics`) served on ``--metrics-port``."""
    from archiver.daemon.group_metrics import GroupMetrics

    check_port(args.metrics_port)
    metrics = GroupMetrics(archives, role)
    try:
        metrics.serve(args.metrics_port, args.metrics_host)
    except OSError as exc:
        metrics.close()
        raise CliError(_port_error(args, exc)) from None
    return metrics


def child_starter(args: argparse.Namespace, metrics: GroupMetrics | None) -> Starter:
    """How a supervisor starts its children: forked from it, or as new interpreters where it cannot
    fork or serves the group's metrics (`archiver.daemon.children`)."""
    from archiver.daemon.children import can_fork, forker, spawner

    if metrics is None and can_fork():
        from archiver.cli.main import main

        return forker(args.argv, main)
    return spawner(args.argv, dict(os.environ) | (metrics.child_env if metrics is not None else {}))


def _port_error(args: argparse.Namespace, exc: OSError) -> str:
    return f"cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {exc.strerror or exc}"
