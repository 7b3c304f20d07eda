"""The ``dynoq`` command line: click's CliRunner on every backend, and the real entry
points (``python -m dynoq``, the ``dynoq`` console script) as subprocesses."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from helpers import dead_letter, wait_for

import dynoq
from dynoq.cli import EXIT_FAILURE, EXIT_UNREACHABLE, EXIT_USAGE, cli
from dynoq.cli.base import EXIT_CODES, CliError

UNREACHABLE = "redis://127.0.0.1:1/0"


@pytest.fixture
def run(url: str, prefix: str, client: dynoq.Client) -> Any:
    """Run the CLI in-process against the test's backend and prefix."""
    runner = CliRunner()

    def invoke(*args: str, env: dict[str, str] | None = None, input: str | None = None) -> Result:
        return runner.invoke(cli, ["--url", url, "--prefix", prefix, *args], env=env, input=input)

    return invoke


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def failed(result: Result, code: int, *needles: str) -> str:
    assert result.exit_code == code, (result.output, result.exception)
    text = result.output + (result.stderr if result.stderr_bytes is not None else "")
    for needle in needles:
        assert needle in text, text
    assert "Traceback" not in text
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), result.exception
    return text


def test_stats_table_and_json(run: Any, client: dynoq.Client) -> None:
    q = client.queue("orders", shards=2)
    q.push("a")
    q.push("b")
    q.push("later", delay=3600)
    q.pop(visibility=60)
    client.queue("empty", shards=1)
    table = ok(run("stats"))
    assert "orders" in table and "empty" in table and "in flight" in table
    data = json.loads(ok(run("stats", "--json")))
    rows = {r["queue"]: r for r in data["queues"]}
    assert (
        rows["orders"]["ready"],
        rows["orders"]["delayed"],
        rows["orders"]["in_flight"],
        rows["orders"]["dead"],
    ) == (1, 1, 1, 0)
    assert len(rows["orders"]["shards"]) == 2 and rows["empty"]["ready"] == 0
    assert rows["orders"]["oldest_waiting_age"] >= 0
    assert rows["empty"]["oldest_waiting_age"] is None
    one = json.loads(ok(run("stats", "orders", "--json")))
    assert [r["queue"] for r in one["queues"]] == ["orders"]
    per_shard = ok(run("stats", "orders"))
    assert "all" in per_shard  # the total row under the per-shard rows


def test_queue_pause_and_resume(run: Any, client: dynoq.Client) -> None:
    q = client.queue("jobs", shards=2)
    q.push("a")
    assert "'jobs' paused" in ok(run("queue", "pause", "jobs"))
    assert json.loads(ok(run("queue", "pause", "jobs", "--json"))) == {
        "queue": "jobs",
        "paused": True,
        "changed": False,
    }
    assert q.paused() and q.pop() == []
    assert "jobs (paused)" in ok(run("stats"))
    assert json.loads(ok(run("stats", "jobs", "--json")))["queues"][0]["paused"] is True
    assert "'jobs' resumed" in ok(run("queue", "resume", "jobs"))
    assert "was not paused" in ok(run("queue", "resume", "jobs"))
    assert json.loads(ok(run("stats", "--json")))["queues"][0]["paused"] is False
    assert [m.payload for m in q.pop()] == ["a"]


def test_queue_weight_shows_and_sets_a_keys_weight(run: Any, client: dynoq.Client) -> None:
    q = client.queue("fair", shards=2, ordered="key")
    assert "'big': weight 1" in ok(run("queue", "weight", "fair", "big"))
    assert json.loads(ok(run("queue", "weight", "fair", "big", "3", "--json"))) == {
        "queue": "fair",
        "key": "big",
        "weight": 3,
        "before": 1,
    }
    assert q.weight("big") == 3
    assert "'big': weight 3" in ok(run("queue", "weight", "fair", "big"))
    failed(run("queue", "weight", "fair", "big", "101"), EXIT_USAGE, "weight must be")
    client.queue("plain", shards=1)
    failed(run("queue", "weight", "plain", "big", "2"), EXIT_USAGE, 'ordered="key"')
    assert q.weight("big") == 3


def test_cancel_and_get_with_progress(run: Any, client: dynoq.Client) -> None:
    from dynoq._core.steering import look

    q = client.queue("jobs", shards=2)
    q.push("a", id="waits", delay=60)
    q.push("b", id="runs")
    [m] = [x for x in q.pop(2) if x.id == "runs"]
    m.progress({"rows": 12})
    q.backend.drive(look(q.ops, [m]))
    shown = json.loads(ok(run("get", "jobs", "runs", "--json")))
    assert shown[0]["progress"] == {"rows": 12} and shown[0]["attempts"] == 1
    assert '{"rows":12}' in ok(run("get", "jobs", "runs"))  # the table's progress column
    assert "'waits' cancelled" in ok(run("cancel", "jobs", "waits"))
    assert json.loads(ok(run("cancel", "jobs", "runs", "--json")))["cancelled"] is True
    failed(run("cancel", "jobs", "waits"), EXIT_FAILURE, "neither waits nor runs")
    failed(run("get", "jobs", "waits"), EXIT_FAILURE, "no message 'waits'")
    assert q.nack(m) is False and q.stats().total("cancelled") == 2
    q.push("stale", expires=0.05)
    time.sleep(0.1)
    q.requeue_expired()
    [row] = json.loads(ok(run("stats", "jobs", "--json")))["queues"]
    assert (row["cancelled"], row["expired"], row["dead"]) == (2, 1, 1)


def test_unknown_queue_fails_and_is_not_created(run: Any, client: dynoq.Client) -> None:
    client.queue("known")
    for args in (
        ["stats", "nope"],
        ["peek", "nope"],
        ["dead", "nope"],
        ["replay", "nope"],
        ["purge-dead", "nope"],
        ["push", "nope", "1"],
        ["queue", "pause", "nope"],
        ["queue", "resume", "nope"],
        ["cancel", "nope", "x"],
        ["get", "nope", "x"],
    ):
        failed(run(*args), EXIT_FAILURE, "no queue 'nope'", "known")
    assert client.queue_names() == ["known"]
    assert not client.redis.exists(f"{client.prefix}:queue:nope")


def test_push_parses_json_and_peek_shows_delivery_order(run: Any, client: dynoq.Client) -> None:
    q = client.queue("work", shards=3)
    first = ok(run("push", "work", '{"order": 1}', "--priority", "5")).strip()
    second = ok(run("push", "work", "plain text", "--id", "txt")).strip()
    ok(run("push", "work", "42", "--delay", "3600"))
    assert second == "txt"
    assert q.get(first).payload == {"order": 1}  # type: ignore[union-attr]
    assert q.get("txt").payload == "plain text"  # type: ignore[union-attr]
    assert q.stats().delayed == 1
    peeked = json.loads(ok(run("peek", "work", "--json")))
    assert [m["id"] for m in peeked] == ["txt", first]  # priority 0 before 5; delayed unseen
    assert json.loads(ok(run("peek", "work", "-n", "1", "--json")))[0]["id"] == "txt"
    table = ok(run("peek", "work"))
    assert "txt" in table and "plain text" in table


def test_push_bad_values_exit_2(run: Any, client: dynoq.Client) -> None:
    client.queue("work")
    client.queue("seq", ordered=True)
    failed(run("push", "work", "x", "--priority", "100"), EXIT_USAGE, "priority")
    failed(run("push", "work", "x", "--delay", "-1"), EXIT_USAGE, "delay")
    failed(run("push", "seq", "x", "--delay", "5"), EXIT_USAGE, "ordered")
    failed(run("push", "work", "x", "--delay", "soon"), EXIT_USAGE)  # click's own check
    assert client.queue("work").size() == 0


def test_dead_replay_purge(run: Any, client: dynoq.Client) -> None:
    q = client.queue("jobs", shards=2, max_retries=0)
    q.push_many([dynoq.Message(i, id=f"j{i}") for i in range(3)])
    for m in q.pop(3):
        assert q.nack(m)  # max_retries 0: straight to the dead-letter set
    assert q.stats().dead == 3
    dead = json.loads(ok(run("dead", "jobs", "--json")))
    assert sorted(m["id"] for m in dead) == ["j0", "j1", "j2"]
    assert "j1" in ok(run("dead", "jobs"))
    assert "replayed 1 message(s)" in ok(run("replay", "jobs", "--id", "j1"))
    assert q.stats().dead == 2 and q.stats().ready == 1
    failed(run("replay", "jobs", "--id", "j1"), EXIT_FAILURE, "not dead letters")
    assert "replayed 1 message(s)" in ok(run("replay", "jobs", "--id", "j2"))
    assert "purged 1 message(s)" in ok(run("purge-dead", "jobs", "--yes"))
    assert "replayed 0 message(s)" in ok(run("replay", "jobs"))
    assert (q.stats().dead, q.stats().ready) == (0, 2)
    assert not q.contains("j0")


def test_bytes_payload_shows_as_base64(run: Any, client: dynoq.Client) -> None:
    client.queue("bin").push(b"\x00\xff", id="b")
    assert json.loads(ok(run("peek", "bin", "--json")))[0]["payload"] == {"$base64": "AP8="}


def test_peek_and_dead_show_any_valid_payload(run: Any, client: dynoq.Client) -> None:
    # bytes keys, bytes values, keys of mixed types, nested: JSON has no bytes keys,
    # so they show as "$base64:..." (and bytes values as {"$base64": ...}).
    payload = {b"k": b"\x00\xff", "n": [b"x", {1: "one", b"\x01": None}], "f": 1.5}
    q = client.queue("any", shards=2)
    q.push(payload, id="p")
    shown = {
        "$base64:aw==": {"$base64": "AP8="},
        "n": [{"$base64": "eA=="}, {"1": "one", "$base64:AQ==": None}],
        "f": 1.5,
    }
    assert json.loads(ok(run("peek", "any", "--json")))[0]["payload"] == shown
    assert "$base64:aw==" in ok(run("peek", "any"))
    [m] = q.pop()
    dead_letter(q, m)
    assert json.loads(ok(run("dead", "any", "--json")))[0]["payload"] == shown
    assert "$base64:aw==" in ok(run("dead", "any"))


def test_peek_and_dead_show_any_stored_record(run: Any, client: dynoq.Client) -> None:
    """Records written raw (any role that writes records can): msgpack extensions,
    nesting deeper than JSON goes, text rich would read as markup, an unreadable record:
    peek and dead show each (table and --json), never a traceback."""
    import msgpack
    from helpers import nested, rewrite_bodies

    q = client.queue("raw", shards=1)
    ids = ["ts", "ext", "deep", "markup", "bad"]
    q.push_many([dynoq.Message(i, id=i) for i in ids])
    rewrite_bodies(
        client,
        q,
        {
            "ts": [{"at": msgpack.Timestamp(5, 1)}],
            "ext": [[msgpack.ExtType(3, b"x")]],
            "deep": [nested(1000)],
            "markup": ["[/b] [bold]"],
            "bad": [1, None, [1]],
        },
    )
    peeked = {m["id"]: m for m in json.loads(ok(run("peek", "raw", "--json")))}
    assert set(peeked) == set(ids)
    assert peeked["ts"]["payload"] == {"at": {"$timestamp": [5, 1]}}
    assert peeked["ext"]["payload"] == [[3, {"$base64": "eA=="}]]
    assert str(peeked["deep"]["payload"]).count("[") > 90  # its first levels, then "..."
    assert "'...'" in str(peeked["deep"]["payload"])
    assert peeked["bad"]["payload"] is None and "headers" in peeked["bad"]["unreadable"]
    table = ok(run("peek", "raw"))
    assert "$timestamp" in table and "[/b] [bold]" in table and "(unreadable: " in table
    got = q.pop(10)  # the unreadable one is dead-lettered, the others delivered
    assert sorted(m.id for m in got) == sorted(ids[:-1])  # type: ignore[type-var]
    for m in got:
        dead_letter(q, m)
    dead = {m["id"]: m for m in json.loads(ok(run("dead", "raw", "--json")))}
    assert dead["bad"]["failure"]["error_type"] == "RecordError"
    assert dead["ts"]["payload"] == {"at": {"$timestamp": [5, 1]}}
    assert "RecordError" in ok(run("dead", "raw"))


def test_json_output_is_strict_json_for_floats_json_has_no_number_for(
    run: Any, client: dynoq.Client
) -> None:
    # Before, `peek --json` printed NaN and Infinity, which no strict JSON parser reads.
    payload = {"nan": float("nan"), "up": [float("inf")], "down": -float("inf"), "f": 1.5}
    q = client.queue("floats", shards=1, max_retries=0)
    q.push(payload, id="p", headers={"h": float("nan")})
    shown = {"nan": "NaN", "up": ["Infinity"], "down": "-Infinity", "f": 1.5}

    def strict(text: str) -> Any:
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in {text}"))

    [peeked] = strict(ok(run("peek", "floats", "--json")))
    assert (peeked["payload"], peeked["headers"]) == (shown, {"h": "NaN"})
    [m] = q.pop()
    dead_letter(q, m)
    assert strict(ok(run("dead", "floats", "--json")))[0]["payload"] == shown


def test_purge_dead_of_nothing_asks_nothing(run: Any, client: dynoq.Client) -> None:
    client.queue("clean", shards=2)
    out = ok(run("purge-dead", "clean"))  # no --yes, no input: it must not prompt
    assert "nothing to purge" in out and "?" not in out
    assert json.loads(ok(run("purge-dead", "clean", "--json"))) == {"queue": "clean", "purged": 0}


def test_a_cluster_url_at_a_single_server_or_a_closed_port(embedded_server: Any) -> None:
    single = f"redis+cluster://{embedded_server.host}:{embedded_server.port}"
    failed(
        CliRunner().invoke(cli, ["--url", single, "stats"]), EXIT_UNREACHABLE, "not a Redis Cluster"
    )
    failed(
        CliRunner().invoke(cli, ["--url", "redis+cluster://127.0.0.1:1", "stats"]),
        EXIT_UNREACHABLE,
        "cannot reach Redis",
    )


def test_bad_arguments_exit_2(run: Any, client: dynoq.Client) -> None:
    client.queue("q")
    failed(run("peek", "q", "-n", "0"), EXIT_USAGE)
    failed(run("frobnicate"), EXIT_USAGE, "No such command")
    failed(run("peek"), EXIT_USAGE, "Missing argument")
    failed(run("sweeper", "--interval", "0"), EXIT_USAGE)
    failed(run("sweeper", "--metrics-port", "70000"), EXIT_USAGE)
    result = CliRunner().invoke(cli, ["--prefix", "a{b", "--url", "memory://x", "stats"])
    failed(result, EXIT_USAGE, "prefix")
    result = CliRunner().invoke(cli, ["--url", "ftp://x", "stats"])
    failed(result, EXIT_USAGE, "unsupported URL scheme")


def test_env_variables_choose_url_and_prefix(url: str, prefix: str, client: dynoq.Client) -> None:
    client.queue("from-env")
    result = CliRunner().invoke(
        cli, ["stats", "--json"], env={"DYNOQ_URL": url, "DYNOQ_PREFIX": prefix}
    )
    assert [r["queue"] for r in json.loads(ok(result))["queues"]] == ["from-env"]


def test_unreachable_server_in_process() -> None:
    result = CliRunner().invoke(cli, ["--url", UNREACHABLE, "stats"])
    failed(result, EXIT_UNREACHABLE, "cannot reach Redis")


def test_demo_calls_dynoq_demo_main(monkeypatch: pytest.MonkeyPatch) -> None:
    # The demo itself (Spark, consumers) is tested in test_spark: here only the wiring.
    import dynoq.cli.demo

    seen: list[str | None] = []

    def fake_main(url: str | None = None, *, as_json: bool = False) -> int:
        seen.append((url, as_json))
        return 0 if url else 1

    monkeypatch.setattr(dynoq.cli.demo, "main", fake_main)
    ok(CliRunner().invoke(cli, ["--url", "redis://h:1/0", "demo"]))
    ok(CliRunner().invoke(cli, ["--url", "redis://h:1/0", "demo", "--json"]))
    result = CliRunner().invoke(cli, ["demo"], env={"DYNOQ_URL": ""})
    assert result.exit_code == 1
    assert seen == [("redis://h:1/0", False), ("redis://h:1/0", True), (None, False)]


def test_demo_json_is_the_report(embedded_server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from dynoq.cli import demo

    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    cfg = demo.DemoConfig(orders=20, cancel_after=0.3, use_spark=False, consumers=2)
    assert demo.main(url, cfg, as_json=True) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)  # stdout is the JSON alone; progress went to stderr
    assert "starting" in err
    assert report["ok"] is True and report["orders"] == 20
    assert report["handled"] == report["events"] and report["out_of_order"] == 0
    assert report["cancelled"] == report["unpaid"] == 4
    assert [p["pushed"] for p in report["produced"]] == [report["events"], 20]


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, Any]]:
    found = []
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found += _commands(command, (*path, name))
        else:
            found.append((" ".join((*path, name)), command))
    return found


def test_every_command_takes_json() -> None:
    """docs/cli.md promises --json on every command: machine-readable output (or, for
    the services, JSON log lines)."""
    missing = [
        name
        for name, command in _commands(cli)
        if not any("--json" in p.opts for p in command.params)
    ]
    assert not missing, missing


def test_help_lists_every_exit_code() -> None:
    text = " ".join(ok(CliRunner().invoke(cli, ["--help"])).split())
    for code, meaning in EXIT_CODES.items():
        assert f"{code} {meaning}" in text, (code, meaning, text)
    used = {c.exit_code for c in _subclasses(CliError)} | {CliError.exit_code}
    assert used <= set(EXIT_CODES), used - set(EXIT_CODES)


def _subclasses(cls: type) -> list[type]:
    return [s for c in cls.__subclasses__() for s in (c, *_subclasses(c))]


def test_push_to_a_missing_queue_says_how_to_create_it(
    run: Any, prefix: str, client: dynoq.Client
) -> None:
    text = failed(run("push", "invoices", "1"), EXIT_FAILURE, "no queue 'invoices'")
    hint = re.search(r"create it with: (dynoq .*? queue create invoices)", text)
    assert hint is not None, text
    assert hint.group(1) == f"dynoq --prefix {prefix} queue create invoices"
    ok(run("queue", "create", "invoices", "--shards", "2"))  # the command it names works
    ok(run("push", "invoices", "1"))
    assert client.queue("invoices").size() == 1


# -- real entry points --------------------------------------------------------------------


def dynoq_cmd(
    *args: str, env: dict[str, str] | None = None, exe: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(exe or [sys.executable, "-m", "dynoq"]), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.slow
def test_module_entry_point_end_to_end(
    real_client: dynoq.Client, real_url: str, prefix: str
) -> None:
    real_client.queue("e2e", shards=4)
    env = {"DYNOQ_URL": real_url, "DYNOQ_PREFIX": prefix}
    pushed = dynoq_cmd("push", "e2e", '{"n": 1}', "--key", "k", env=env)
    assert pushed.returncode == 0, pushed.stderr
    msg = real_client.queue("e2e").get(pushed.stdout.strip())
    assert msg is not None and msg.payload == {"n": 1} and msg.key == "k"
    stats = dynoq_cmd("stats", "--json", env=env)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["queues"][0]["ready"] == 1
    missing = dynoq_cmd("peek", "absent", env=env)
    assert missing.returncode == EXIT_FAILURE and "no queue 'absent'" in missing.stderr
    assert "Traceback" not in missing.stderr


@pytest.mark.slow
def test_unreachable_server_subprocess() -> None:
    done = dynoq_cmd("--url", UNREACHABLE, "stats")
    assert done.returncode == EXIT_UNREACHABLE
    assert "cannot reach Redis" in done.stderr and "Traceback" not in done.stderr
    done = dynoq_cmd("peek", "x", env={"DYNOQ_URL": UNREACHABLE})
    assert done.returncode == EXIT_UNREACHABLE


@pytest.mark.slow
def test_dashboard_json_says_where_it_listens(real_url: str, prefix: str) -> None:
    p = subprocess.Popen(
        [sys.executable, "-m", "dynoq", "--prefix", prefix, "dashboard", "--port", "0", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "DYNOQ_URL": real_url},
    )
    try:
        assert p.stdout is not None
        ready = json.loads(p.stdout.readline())
        assert ready["prefix"] == prefix and ready["allow_actions"] is False
        assert ready["token_required"] is False
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", ready["url"]), ready
        with urllib.request.urlopen(ready["url"], timeout=30) as page:
            assert page.status == 200
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)


@pytest.mark.slow
def test_console_script_help() -> None:
    script = Path(sys.executable).parent / "dynoq"
    if not script.exists():
        found = shutil.which("dynoq")
        if found is None:
            pytest.skip("the dynoq console script is not installed")
        script = Path(found)
    done = dynoq_cmd("--help", exe=[str(script)])
    assert done.returncode == 0, done.stderr
    for command in ("sweeper", "stats", "peek", "dead", "replay", "purge-dead", "push", "demo"):
        assert command in done.stdout
    bad = dynoq_cmd("nope", exe=[str(script)])
    assert bad.returncode == EXIT_USAGE and "Traceback" not in bad.stderr


def test_every_command_speaks_json(run: Any, client: dynoq.Client) -> None:
    created = json.loads(ok(run("queue", "create", "jobs", "--shards", "2", "--json")))
    assert (created["name"], created["shards"], created["kind"]) == ("jobs", 2, "queue")
    assert json.loads(ok(run("queue", "create", "news", "--topic", "--json")))["kind"] == "topic"
    failed(run("queue", "create", "jobs", "--shards", "3"), EXIT_USAGE, "already exists")
    listed = json.loads(ok(run("queues", "--json")))
    assert {(r["name"], r["kind"]) for r in listed["queues"]} == {
        ("jobs", "queue"),
        ("news", "topic"),
    }
    pushed = json.loads(ok(run("push", "jobs", '{"a": 1}', "--id", "p1", "--json")))
    assert pushed == {"queue": "jobs", "id": "p1"}
    assert json.loads(ok(run("peek", "jobs", "--json")))[0]["payload"] == {"a": 1}
    client.queue("jobs").schedule("tick", "t", every=60)
    [sched] = json.loads(ok(run("schedules", "jobs", "--json")))
    assert (sched["id"], sched["every"]) == ("tick", 60)
    [m] = [x for x in client.queue("jobs").pop(10) if x.id == "p1"]
    dead_letter(client.queue("jobs"), m)
    assert json.loads(ok(run("dead", "jobs", "--json")))[0]["id"] == "p1"
    assert json.loads(ok(run("replay", "jobs", "--json")))["replayed"] == 1
    assert json.loads(ok(run("acl", "consumer", "--json")))["role"] == "consumer"
    assert json.loads(ok(run("clear", "jobs", "--yes", "--json")))["cleared"] is True
    assert client.queue("jobs").size() == 0


def test_destructive_commands_ask_first(run: Any, client: dynoq.Client) -> None:
    q = client.queue("precious", shards=1)
    q.push("keep")
    failed(run("clear", "precious", input="n\n"), EXIT_FAILURE, "nothing was changed")
    failed(run("clear", "precious"), EXIT_FAILURE, "Aborted")  # no terminal: no
    assert q.size() == 1
    [m] = q.pop()
    dead_letter(q, m)
    failed(run("purge-dead", "precious", input="no\n"), EXIT_FAILURE, "nothing was changed")
    assert q.stats().dead == 1


def test_prepared_lists_age_and_checks(run: Any, client: dynoq.Client) -> None:
    q = client.queue("txq", shards=2)
    q.prepare("a", id="p-1")
    q.prepare("b", id="p-2", check_after=3600)
    q.push("plain")
    out = ok(run("prepared", "txq"))
    assert "p-1" in out and "p-2" in out and "plain" not in out
    data = json.loads(ok(run("prepared", "txq", "--json")))
    assert data["prepared"] == 2
    assert [m["id"] for m in data["messages"]] == ["p-1", "p-2"]  # the next checked first
    assert all(m["checks"] == 0 and m["age"] >= 0 for m in data["messages"])
    [row] = json.loads(ok(run("stats", "txq", "--json")))["queues"]
    assert (row["prepared"], row["ready"]) == (2, 1)
    q.half("p-1").commit()
    data = json.loads(ok(run("prepared", "txq", "--json")))
    assert [m["id"] for m in data["messages"]] == ["p-2"]


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("0", "0 is not in 1-1000"),
        ("1001", "1001 is not in 1-1000"),
        ("lots", "'lots' is not a count of messages or auto"),
    ],
)
def test_worker_batch_size_is_a_count_or_auto(value: str, needle: str) -> None:
    failed(
        CliRunner().invoke(cli, ["--url", "memory://x", "worker", "mod:fn", "--batch-size", value]),
        EXIT_USAGE,
        needle,
    )


def test_flow_shows_a_workflow_and_each_of_its_calls(run: Any, client: dynoq.Client) -> None:
    tasks = dynoq.Tasks(client, queue="cli-flows")

    @tasks.task(name="double")
    def double(x: int) -> int:
        return 2 * x

    @tasks.task(name="refuse", max_retries=0)
    def refuse(x: int) -> int:
        raise ValueError(f"no {x}")

    done = (double.s(2) | double.s()).delay()
    broken = tasks.chord([double.s(1), refuse.si(7)], double.s()).delay()
    with tasks.worker(idle_wait=0.05, queues=["cli-flows"]):
        assert done.result(timeout=20) == 8
        with pytest.raises(dynoq.TaskFailed):
            broken.result(timeout=20)
        wait_for(lambda: broken.info().ended == 2, what="double(1) recorded too")
    waiting = (double.s(5) | double.s()).delay()
    assert waiting.cancel()
    text = ok(run("flow", done.id))
    assert f"flow {done.id}: succeeded, 2 of 2 calls ended" in text
    assert text.count("succeeded") >= 3 and "double" in text
    report = json.loads(ok(run("flow", broken.id, "--json")))
    assert (report["status"], report["calls"]) == ("failed", 3)
    assert "no 7" in report["failure"]
    assert [m["state"] for m in report["members"]] == ["succeeded", "failed", "pending"]
    assert report["members"][0]["size"] == 1 and report["members"][0]["id"] == f"{broken.id}.2"
    assert json.loads(ok(run("flow", waiting.id, "--json")))["status"] == "cancelled"
    failed(run("flow", "no-such-flow"), EXIT_FAILURE, "unknown")
