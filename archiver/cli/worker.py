"""``partarchive worker MODULE:FUNCTION``: the worker runtime as a process, or ``--processes N`` of them
under the supervisor ``run --processes`` uses.

The function is imported from the current directory (as ``python -m`` would find it), then checked:
a module that does not import, a name that is not there or not callable, a window below 1, a time
that is not positive, is one line and exit 2, before anything is connected or written. A coroutine
function runs on asyncio (`AsyncWorker`, one task per slot), any other on threads (`Worker`).

``--planner MODULE:OBJECT`` makes each process a candidate leader (`archiver.runtime.leader`): OBJECT is
a class, made with no arguments in each process, or an object (an instance) with ``partition_size()``
and ``next_max_id(start_id, size)``; it is loaded and checked as the function is.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

from archiver.cli.args import CliError, check_port
from archiver.cli.run import _port_error, _when_ready, child_starter, serve_group_metrics
from archiver.cli.target import open_namespace
from archiver.config import Config
from codec import ValidationError


def command(args: argparse.Namespace, config: Config) -> int:
    from archiver.logs import configure_logging

    configure_logging(args.log_level)
    if not 1 <= args.processes <= 64:
        raise CliError("--processes must be in 1..64")
    try:
        settings = config.worker_settings(
            window=args.window, heartbeat_s=args.heartbeat, lease_s=args.lease, drain_timeout_s=args.drain_timeout,
            max_attempts=args.max_attempts, backoff_s=args.retry_backoff,
        )  # fmt: skip
    except ValidationError as exc:
        raise CliError(_flag_named(str(exc))) from None
    process = load_function(args.function)
    planner, leader = _leader(args, config)
    if args.metrics_port is not None:
        check_port(args.metrics_port)
    if args.processes > 1:
        return _supervise(args, config)
    return _run(args, config, settings, process, planner, leader)


def _leader(args: argparse.Namespace, config: Config) -> tuple[Any, Any]:
    """The planner and the leader's settings (None, None without ``--planner``)."""
    given = {flag: getattr(args, name) for name, flag in _LEADER_FLAGS.items() if getattr(args, name) is not None}
    if args.planner is None:
        if given:
            raise CliError(f"{', '.join(given)} go with --planner MODULE:OBJECT")
        return None, None
    try:
        leader = config.leader_settings(lease_s=args.leader_lease, interval_s=args.allocation_interval,
                                        multiple=args.partition_multiple, max_pending=args.max_pending)  # fmt: skip
    except ValidationError as exc:
        raise CliError(_flag_named(str(exc), _LEADER_SETTINGS)) from None
    if config.elk_prefix is not None and config.elk_namespace is None:
        raise CliError(
            "a leader in a namespace bound to elk_coordinator needs Go's namespace, NewMgr's first argument "
            "(--elk-namespace or PARTARCHIVE_ELK_NAMESPACE): it stands aside while Go's leader has taken its lock"
        )
    return load_planner(args.planner), leader


def load_planner(spec: str) -> Any:
    """``MODULE:OBJECT`` imported: a class is made with no arguments; the object must be a planner."""
    from archiver.runtime.leader import check_planner

    target = _imported(spec, "planner", "MODULE:OBJECT (e.g. myjobs:Planner)")
    if isinstance(target, type):
        try:
            target = target()
        except Exception as exc:
            raise CliError(f"{spec}() failed: {type(exc).__name__}: {exc}") from None
    try:
        return check_planner(target)
    except ValidationError as exc:
        raise CliError(f"{spec} is not a planner: {exc}") from None


def load_function(spec: str) -> Callable[..., Any]:
    """``MODULE:FUNCTION`` imported (the current directory first on the path, as for ``python -m``)."""
    target = _imported(spec, "function", "MODULE:FUNCTION (e.g. myjobs:process)")
    if not callable(target):
        raise CliError(f"{spec} is not callable ({type(target).__name__})")
    return target  # type: ignore[no-any-return]


def _imported(spec: str, what: str, form: str) -> Any:
    """``MODULE:NAME`` imported (the current directory first on the path, as for ``python -m``)."""
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise CliError(f"the {what} is {form}, not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CliError(f"cannot import module {module_name!r}: {exc}") from None
    except Exception as exc:  # the module's own code failed as it was imported
        raise CliError(f"module {module_name!r} failed as it was imported: {type(exc).__name__}: {exc}") from None
    target: Any = module
    for part in name.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise CliError(f"module {module_name!r} has no {name!r}")
    return target


def _run(
    args: argparse.Namespace, config: Config, settings: Any, process: Callable[..., Any], planner: Any, leader: Any
) -> int:
    from archiver.runtime import AsyncWorker, Worker, default_worker_id

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # a child of a supervisor serving the group's metrics
        from archiver.runtime.metrics import start_series

        start_series(config.namespace)
    ns = _when_ready(lambda: open_namespace(config, existing=False))
    ns.remember_binding()
    worker_id = default_worker_id(args.worker_id)
    if inspect.iscoroutinefunction(process):
        from archiver.engine import async_twin

        client = async_twin(ns.redis)
        worker: Any = AsyncWorker(client, ns.keys, process, worker_id=worker_id, settings=settings, planner=planner,
                                  leader=leader)  # fmt: skip
    else:
        worker = Worker(ns.redis, ns.keys, process, worker_id=worker_id, settings=settings, planner=planner,
                        leader=leader)  # fmt: skip
    if args.metrics_port is not None:
        _serve_metrics(args, ns, worker)
    if isinstance(worker, AsyncWorker):
        asyncio.run(_run_async(worker, client, args.until_empty))
    else:
        worker.run(until_empty=args.until_empty)
    return 0


async def _run_async(worker: Any, client: Any, until_empty: bool) -> None:
    try:
        await worker.run(until_empty=until_empty)
    finally:
        await client.aclose()


def _serve_metrics(args: argparse.Namespace, ns: Any, worker: Any) -> None:
    """``/metrics`` (the runtime's counters and the namespace's state), ``/healthz`` and ``/readyz``."""
    import threading

    from archiver.daemon.probes import LoopProbe, serve_metrics
    from archiver.metrics import register_state_collector

    probe = LoopProbe(worker._stop, what="worker beat")
    probe.started = True
    register_state_collector(ns.archive)
    try:
        serve_metrics(args.metrics_port, args.metrics_host, probe)
    except OSError as exc:
        raise CliError(_port_error(args, exc)) from None
    threading.Thread(target=_turning, args=(probe, worker), name="probe", daemon=True).start()


def _turning(probe: Any, worker: Any) -> None:
    """The probe's loop turns while the worker's beats succeed (``/healthz``)."""
    import time

    beats = -1
    while not worker._stop.is_set():
        core = worker.core
        if core is not None and core.beats != beats:
            beats = core.beats
            probe.turned()
        time.sleep(1.0)


def _supervise(args: argparse.Namespace, config: Config) -> int:
    """``--processes N`` children under the supervisor; with ``--metrics-port`` it serves the group's
    metrics (the children then start as new interpreters, as for ``run``)."""
    from archiver.daemon.supervisor import Supervisor

    metrics = None
    if args.metrics_port is not None:
        ns = _when_ready(lambda: open_namespace(config, existing=False))
        metrics = serve_group_metrics(args, [ns.archive], "worker")
    drain_s = config.drain_timeout_s if args.drain_timeout is None else args.drain_timeout
    supervisor = Supervisor(child_starter(args, metrics), drain_s, args.processes, metrics=metrics, role="worker",
                            until_done=args.until_empty)  # fmt: skip
    try:
        return supervisor.run()
    finally:
        if metrics is not None:
            metrics.close()


_FLAGS = {
    "window": "--window",
    "heartbeat_s": "--heartbeat",
    "lease_s": "--lease",
    "drain_timeout_s": "--drain-timeout",
    "max_attempts": "--max-attempts",
    "backoff_s": "--retry-backoff",
}


#: The leader's flags, by their attribute of the parsed arguments, and by their name in `LeaderSettings`.
_LEADER_FLAGS = {
    "leader_lease": "--leader-lease",
    "allocation_interval": "--allocation-interval",
    "partition_multiple": "--partition-multiple",
    "max_pending": "--max-pending",
}
_LEADER_SETTINGS = {
    "lease_s": "--leader-lease",
    "interval_s": "--allocation-interval",
    "multiple": "--partition-multiple",
    "max_pending": "--max-pending",
}


def _flag_named(message: str, flags: dict[str, str] = _FLAGS) -> str:
    """A settings error named by its flag (``window must be ...`` -> ``--window must be ...``)."""
    name = message.split(" ", 1)[0]
    return f"{flags[name]}{message[len(name):]}" if name in flags else message
