"""Which scripts get the shared prelude (``_record.lua``): those that name anything it defines."""

from __future__ import annotations

from importlib import resources

import pytest
import redis

from layers import KeySchema
from layers.replies import as_text
from layers.scripts import Scripts, script_source, uses_prelude

PRELUDE = "local ZERO = '0'\nlocal function wrong_type(kinds)\n  return kinds\nend\n"
LUA = resources.files("layers") / "lua"


@pytest.mark.parametrize(
    ("body", "uses"),
    [
        ("local bad = wrong_type({'hash'})", True),
        ("return pcall(wrong_type, x)", True),  # passed as a value, not called
        ("return ZERO", True),
        ("local wrong_type = 1", True),  # a local of that name: the prelude is only wasted
        ("-- wrong_type(...) is not needed here\nreturn 1", False),
        ("return {'err', 'wrong_type', 'ZERO'}", False),
        ('return "wrong_type(" .. KEYS[1]', False),
        ("return 'it\\'s' .. wrong_types", False),  # an escaped quote ends no string
        ("return ZEROS", False),
    ],
)
def test_uses_prelude(body: str, uses: bool) -> None:
    assert uses_prelude(PRELUDE, body) is uses


def test_scripts_that_use_a_prelude_get_it_the_others_run_without() -> None:
    record, decimal = ((LUA / name).read_text(encoding="utf-8") for name in ("_record.lua", "_decimal.lua"))
    given: dict[str, set[str]] = {}
    for path in sorted(LUA.iterdir(), key=lambda p: p.name):
        name = path.name.removesuffix(".lua")
        if not path.name.endswith(".lua") or name.startswith("_"):
            continue
        source = script_source(name)
        given[name] = {label for label, text in (("record", record), ("decimal", decimal)) if text in source}
        assert source.endswith(path.read_text(encoding="utf-8"))
    assert given["commit"] == {"record", "decimal"} and given["stats_merge_range"] == {"decimal"}
    assert given["complete"] == given["claim"] == given["update"] == {"record"}
    assert given["lookup"] == given["shelf_put"] == given["hdel_if_equal"] == given["register_workers"] == set()


def test_hdel_if_equal_deletes_only_the_unchanged_fields_in_chunks(real_redis: redis.Redis, namespace: str) -> None:
    """Over a chunk's 500 fields: each field is deleted only if it holds the value given; a missing
    field, a changed one and a field named twice are handled like the others."""
    key = KeySchema(namespace).staging(1)
    real_redis.hset(key, mapping={f"f{i}": f"v{i}" for i in range(1200)})
    real_redis.hset(key, mapping={f"f{i}": "changed" for i in range(0, 1200, 7)})
    args: list[object] = []
    for i in [*range(1200), 5, 1500]:
        args += [f"f{i}", f"v{i}"]
    deleted = Scripts.of(real_redis)("hdel_if_equal", [key], args)
    kept = {as_text(f) for f in real_redis.hkeys(key)}
    assert kept == {f"f{i}" for i in range(0, 1200, 7)}
    assert deleted == 1200 - len(kept)
    real_redis.delete(key)
    real_redis.rpush(key, "x")
    assert Scripts.of(real_redis)("hdel_if_equal", [key], ["a", "1"]) == 0  # not a hash: nothing
