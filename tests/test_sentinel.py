"""Redis Sentinel settings: checked before anything connects, passwords kept out of every message,
and sentinels that cannot be reached said in one line.
"""

from __future__ import annotations

import subprocess

import pytest

from archiver.cli.main import main
from archiver.config import Config, parse_addresses
from codec.errors import ValidationError
from tests.helpers import free_port

DATA_PASSWORD = "data-pw-6f1c2e"
SENTINEL_PASSWORD = "sentinel-pw-93ab07"
PASSWORDS = {"PARTARCHIVE_REDIS_PASSWORD": DATA_PASSWORD, "PARTARCHIVE_SENTINEL_PASSWORD": SENTINEL_PASSWORD}
SECRETS = (DATA_PASSWORD, SENTINEL_PASSWORD, "url-pw-never-used")


def _no_secret(*outputs: str) -> None:
    for out in outputs:
        for secret in SECRETS:
            assert secret not in out, f"a password in the output: {out[:500]}"


def _one_line(done: subprocess.CompletedProcess[str] | pytest.CaptureResult[str]) -> str:
    """The one line of an error: of a process that exited 2, or printed by `main` (its 2 checked by the caller)."""
    if isinstance(done, subprocess.CompletedProcess):
        assert done.returncode == 2, done
        out, err = done.stdout, done.stderr
    else:
        out, err = done.out, done.err
    assert err.count("\n") == 1 and err.startswith("partarchive: ") and "Traceback" not in err, err
    _no_secret(out, err)
    return err


def test_the_settings_are_checked_and_keep_their_passwords_to_themselves() -> None:
    assert parse_addresses("a:1, 10.0.0.5:26379,[::1]:26380") == [("a", 1), ("10.0.0.5", 26379), ("::1", 26380)]
    for bad in ("a", "a:0", "a:70000", "a:1,", ":1", "redis://a:1"):
        with pytest.raises(ValidationError, match="host:port"):
            Config(sentinel=bad, sentinel_master="m")
    with pytest.raises(ValidationError, match="exclude each other"):
        Config(sentinel="a:1", sentinel_master="m", cluster=True)
    with pytest.raises(ValidationError, match="--sentinel-master"):
        Config(sentinel="a:1")
    with pytest.raises(ValidationError, match="needs --sentinel"):
        Config(sentinel_master="m")
    env = {"PARTARCHIVE_SENTINEL": "a:1,b:2", "PARTARCHIVE_SENTINEL_MASTER": "m", **PASSWORDS}
    config = Config.from_env(env, sentinel_master="flag-wins")
    assert config.sentinels == [("a", 1), ("b", 2)] and config.sentinel_master == "flag-wins"
    assert config.redis_password == DATA_PASSWORD and config.sentinel_password == SENTINEL_PASSWORD
    _no_secret(repr(config), str(config))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["status", "--sentinel", "127.0.0.1"], "host:port"),
        (["status", "--sentinel", "127.0.0.1:1,nohost:99999", "--sentinel-master", "m"], "host:port"),
        (["status", "--sentinel", "127.0.0.1:1", "--sentinel-master", "m", "--cluster"], "exclude each other"),
        (["run", "--sentinel", "127.0.0.1:1"], "--sentinel-master"),
        (["get", "1", "--sentinel-master", "m"], "needs --sentinel"),
        (["status", "--sentinel", "redis://:url-pw-never-used@h:1", "--sentinel-master", "m"], "host:port"),
    ],
)
def test_bad_sentinel_settings_are_one_line(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in PASSWORDS.items():
        monkeypatch.setenv(name, value)
    assert main(args) == 2
    assert says in _one_line(capsys.readouterr())


def test_unreachable_sentinels_are_one_line(
    namespace: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in PASSWORDS.items():
        monkeypatch.setenv(name, value)
    closed = ",".join(f"127.0.0.1:{free_port()}" for _ in range(2))
    for command in (["status"], ["archivers"], ["retention"], ["dead-letters", "list"], ["archival", "status"]):
        assert main([*command, "--namespace", namespace, "--sentinel", closed, "--sentinel-master", "m"]) == 2
        assert f"cannot reach Sentinel at {closed.replace(',', ', ')}" in _one_line(capsys.readouterr())
