"""Which scripts get the shared prelude (``_record.lua``): those that name anything it defines."""

from __future__ import annotations

from importlib import resources

import pytest

from layers.scripts import script_source, uses_prelude

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


def test_scripts_that_use_the_prelude_get_it_the_others_run_without() -> None:
    prelude = (LUA / "_record.lua").read_text(encoding="utf-8")
    bare, with_prelude = [], []
    for path in sorted(LUA.iterdir(), key=lambda p: p.name):
        name = path.name.removesuffix(".lua")
        if not path.name.endswith(".lua") or name.startswith("_"):
            continue
        source = script_source(name)
        (with_prelude if source.startswith(prelude) else bare).append(name)
        assert source.endswith(path.read_text(encoding="utf-8"))
    assert {"complete", "claim", "update", "commit"} <= set(with_prelude)
    assert {"lookup", "shelf_put", "hdel_if_equal", "register_workers"} <= set(bare)
