"""How scripts are put together: each gets exactly the helper files its ``-- include:`` line
names (those it uses, no more), and an error Redis raises names the line of the script's own file."""

from __future__ import annotations

import asyncio
import gc
import re
import weakref
from importlib import resources
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.exceptions import ResponseError

from archiver.engine import async_twin
from layers import KeySchema
from layers.plumbing.replies import as_text
from layers.plumbing.scripts import LUA_ROOMS, AsyncScripts, Scripts, assembled, includes, lua_files, script_source

FILES = lua_files()
HELPERS = sorted(name for name in FILES if name.startswith("_"))
SCRIPTS = sorted(name.removesuffix(".lua") for name in FILES if name[0] != "_")


def _text(file: str) -> str:
    return (resources.files("layers") / FILES[file] / "lua" / file).read_text(encoding="utf-8")


def test_every_lua_file_of_every_room_is_found_once() -> None:
    on_disk = sorted(p.name for room in LUA_ROOMS for p in (resources.files("layers") / room / "lua").iterdir())
    assert sorted(FILES) == on_disk and len(set(on_disk)) == len(on_disk)
    assert FILES["commit.lua"] == "archive" and FILES["claim.lua"] == "active" and FILES["_checks.lua"] == "plumbing"


_NOT_CODE = re.compile(r"--[^\n]*|'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"")


def _code(text: str) -> str:
    return _NOT_CODE.sub(" ", text)


def _uses(helper: str, text: str) -> bool:
    """Whether ``text`` names something the helper file defines and does not define it itself."""
    code = _code(text)
    own = {n.strip() for group in re.findall(r"local (?:function )?(\w+(?:, *\w+)*)", code) for n in group.split(",")}
    defined = re.findall(r"^local (?:function )?(\w+)", _text(helper), re.MULTILINE)
    return any(re.search(rf"\b{name}\b", code) for name in defined if name not in own)


@pytest.mark.parametrize("name", SCRIPTS + HELPERS)
def test_a_script_includes_exactly_the_helpers_it_uses(name: str) -> None:
    file = name if name.endswith(".lua") else f"{name}.lua"
    text = _text(file)
    assert set(includes(text)) == {h for h in HELPERS if h != file and _uses(h, text)}


def test_a_script_is_sent_with_its_helpers_first_each_once() -> None:
    assert [f for f, _ in assembled("commit").parts] == ["_checks.lua", "_decimal.lua", "commit.lua"]
    assert [f for f, _ in assembled("claim").parts] == [
        "_checks.lua", "_layout.lua", "_time.lua", "_gostats.lua", "_claim.lua", "claim.lua"
    ]  # fmt: skip
    assert [f for f, _ in assembled("dead_letter").parts] == ["dead_letter.lua"]
    for name in SCRIPTS:
        source = script_source(name)
        assert source.endswith(_text(f"{name}.lua").rstrip("\n") + "\n")
        assert "_record.lua" not in dict(assembled(name).parts) or name in {
            "beat",
            "fail",
            "finish_failed",
            "release",
            "release_held",
            "retry_failed",
            "upgrade",
        }


def test_every_line_sent_maps_back_to_its_file() -> None:
    sent = assembled("lookup")
    own = _text("lookup.lua").splitlines()
    lines = sent.text.splitlines()
    helper_lines = len(_text("_shelf.lua").splitlines())
    assert sent.where(1) == "layers/archive/lua/_shelf.lua:1"
    assert sent.where(helper_lines + 1) == "layers/archive/lua/lookup.lua:1" and lines[helper_lines] == own[0]
    assert sent.where(len(lines)) == f"layers/archive/lua/lookup.lua:{len(own)}"
    error = ResponseError(f"ERR user_script:{helper_lines + 3}: oops script: abc, on @user_script:{helper_lines + 3}.")
    where = "layers/archive/lua/lookup.lua:3"
    assert str(sent.located(error)) == f"ERR {where}: oops script: abc, on @{where}."


@pytest.mark.parametrize("flavour", ["blocking", "asyncio"])
def test_an_error_in_a_script_names_its_own_file_and_line(
    real_redis: redis.Redis, namespace: str, flavour: str
) -> None:
    """A slot count that is not a number fails at shelf_put.lua's loop over the slots, which Redis
    reports at a line of the helper-prefixed text it was sent; on both flavours (one `ScriptCore`)."""
    own = _text("shelf_put.lua").splitlines()
    line = next(i for i, text in enumerate(own, 1) if text == "else") + 1  # no shelf yet: its slots made here
    keys, args = [KeySchema(namespace).shelf(0)], ["not a number"]
    with pytest.raises(ResponseError, match=rf"layers/archive/lua/shelf_put\.lua:{line}\b") as caught:
        if flavour == "blocking":
            Scripts.of(real_redis)("shelf_put", keys, args)
        else:
            asyncio.run(_run_async(async_twin(real_redis), "shelf_put", keys, args))
    assert "user_script" not in str(caught.value)


def test_a_runner_goes_with_its_client() -> None:
    """`of` keeps one runner a client, and no client alive for its runner's sake."""
    clients = [redis.Redis(), redis.asyncio.Redis()]
    runners = [Scripts.of(clients[0]), AsyncScripts.of(clients[1])]
    assert Scripts.of(clients[0]) is runners[0] and AsyncScripts.of(clients[1]) is runners[1]
    gone = [weakref.ref(client) for client in clients]
    del clients, runners
    gc.collect()
    assert [ref() for ref in gone] == [None, None]


async def _run_async(client: Any, name: str, keys: list[str], args: list[Any]) -> Any:
    try:
        return await AsyncScripts.of(client)(name, keys, args)
    finally:
        await client.aclose()


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
