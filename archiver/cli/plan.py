"""``partarchive plan``: the namespace's plan (the IDs planned, who leads, what the leader's check found);
with ``--first A --last B --size S``, a fixed plan for a job whose range is known.

A fixed plan is written as the leader writes its runs (`layers.active.planning`): the command takes the
lease for the time of its calls (so it is refused, in one line, while a worker runtime leads the
namespace, or elk_coordinator's leader has taken its lock), creates what is not planned yet in calls of at
most 100,000 partitions (`layers.active.planning.PLAN_CALL_PARTITIONS`), each atomic, and gives the
lease back. Run twice, it creates nothing the second time; a range that would leave a hole, starts before
the plan, or overlaps partitions planned in other sizes is refused before anything is written (exit 2).
"""

from __future__ import annotations

import argparse
from typing import Any

from archiver.cli.args import CliError
from archiver.cli.status import describe_check, describe_leader, describe_plan
from archiver.cli.target import open_namespace
from archiver.config import Config
from archiver.output import print_json
from layers.active.planning import LeaderView, PlanningLayer, lock_holder


def command(args: argparse.Namespace, config: Config) -> int:
    asked = {"--first": args.first, "--last": args.last, "--size": args.size}
    if any(value is not None for value in asked.values()):
        missing = [flag for flag, value in asked.items() if value is None]
        if missing:
            raise CliError(f"a fixed plan takes --first, --last and --size together ({', '.join(missing)} missing)")
        return _fixed(args, config)
    ns = open_namespace(config)
    view = PlanningLayer(ns.active).view()
    if args.json:
        print_json(view.to_dict())
    else:
        print(format_plan(view, ns.keys.namespace))
    return 0


def _fixed(args: argparse.Namespace, config: Config) -> int:
    ns = open_namespace(config, existing=False)
    if ns.keys.elk is not None and ns.keys.elk_namespace is None:
        raise CliError(
            "a plan in a namespace bound to elk_coordinator needs Go's namespace, NewMgr's first argument "
            "(--elk-namespace or PARTARCHIVE_ELK_NAMESPACE), to stand aside while Go's leader has taken its lock"
        )
    planning = PlanningLayer(ns.active)
    first, last, size = args.first, args.last, args.size
    if planning.planned_already(first, last, size) is None:  # checked before anything is written
        _report(args, 0, [], first, last)
        return 0
    holder, lease_s = lock_holder(), config.leader_lease_s
    lead = planning.lead(holder, 0, lease_s)
    if not lead.leads:
        who = f"elk_coordinator's leader {lead.holder}" if lead.go else f"{lead.holder} (token {lead.token})"
        raise CliError(f"{who} leads namespace {ns.keys.namespace}: a fixed plan is written by its leader only")
    try:
        made = planning.plan_range(holder, lead.token, first, last, size, lease_s=lease_s)
    finally:
        planning.resign(holder, lead.token)
    _report(args, sum(len(run.pids) for run in made), made, first, last)
    return 0


def _report(args: argparse.Namespace, created: int, made: list[Any], first: int, last: int) -> None:
    if args.json:
        print_json({"created": created, "runs": [{"first_pid": r.pids.start, "last_pid": r.pids.stop - 1,
                                                  "min_id": r.min_id, "max_id": r.max_id} for r in made]})  # fmt: skip
    elif not created:
        print(f"ids {first}..{last} are planned already: nothing created")
    else:
        runs = ", ".join(f"pids {r.pids.start}..{r.pids.stop - 1} for ids {r.min_id}..{r.max_id}" for r in made)
        print(f"created {created:,} partitions: {runs}")


def format_plan(view: LeaderView, namespace: str) -> str:
    d = view.to_dict()
    rows = [("namespace", namespace), ("leader", describe_leader(d)), ("plan", describe_plan(d))]
    if view.plan.next_id is not None:
        rows.append(("runs", f"{view.plan.runs:,}"))
        rows.append(("check", describe_check(d)))
    width = max(len(label) for label, _ in rows)
    lines = [f"{label:<{width}}  {value}" for label, value in rows]
    for f in view.findings:
        ids = "ids not listed" if f.get("min_id") is None else f"ids {f.get('min_id')}..{f.get('max_id')}"
        lines.append(f"{'':<{width}}  {f.get('kind')}, {ids}, at partition {f.get('partition_id')}: {f.get('detail')}")
    return "\n".join(lines)
