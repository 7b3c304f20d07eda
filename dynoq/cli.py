"""The ``dynoq`` command line (DESIGN.md §4): sweeper, stats, peek, dead letters, push, demo.

Expected failures print one line on stderr, never a traceback. Exit codes: 0 success,
1 failure (unknown queue, refused operation), 2 bad arguments, 3 Redis unreachable.
"""

from __future__ import annotations

import base64
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import click
import redis

from .client import Client, connect
from .errors import ConnectionFailed, DynoqError, InvalidArgument, InvalidType
from .message import Message, QueueStats
from .queue import Queue
from .sweeper import (
    BACKOFF_CAP,
    CONNECTION_ERRORS,
    DEFAULT_INTERVAL,
    REFRESH_INTERVAL,
    Sweeper,
    existing_queue,
)

EXIT_FAILURE, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3

log = logging.getLogger("dynoq.cli")


class CliError(click.ClickException):
    """An expected failure: click prints ``Error: <message>`` and exits with exit_code."""

    exit_code = EXIT_FAILURE


class UsageFailure(CliError):
    exit_code = EXIT_USAGE


class Unreachable(CliError):
    exit_code = EXIT_UNREACHABLE


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        # The one place where library errors become messages and exit codes.
        try:
            return super().invoke(ctx)
        except CONNECTION_ERRORS as exc:
            where = ctx.obj.url if isinstance(ctx.obj, Env) else "the server"
            raise Unreachable(f"cannot reach Redis at {where}: {exc}") from None
        except (InvalidArgument, InvalidType) as exc:
            raise UsageFailure(str(exc)) from None
        except DynoqError as exc:
            raise CliError(str(exc)) from None
        except redis.RedisError as exc:
            raise CliError(f"Redis error: {exc}") from None


@dataclass
class Env:
    """What every command shares: where to connect, and the connection once made."""

    url: str | None
    prefix: str
    _client: Client | None = field(default=None, repr=False)

    def options(self, *, timeout: float | None = None) -> dict[str, Any]:
        if self.url and urlsplit(self.url).scheme == "memory":
            return {}
        # Fail fast on a dead host instead of hanging in connect().
        return {"socket_connect_timeout": 5.0, "socket_timeout": timeout}

    def client(self) -> Client:
        if self._client is None:
            self._client = connect(self.url, prefix=self.prefix, **self.options(timeout=30.0))
            click.get_current_context().call_on_close(self._client.close)
        return self._client

    def queue(self, name: str) -> Queue:
        """Open a registered queue; never create one by a typo."""
        client = self.client()
        queue = existing_queue(client, name)
        if queue is None:
            known = ", ".join(client.queue_names()) or "none"
            raise CliError(f"no queue {name!r} under prefix {client.prefix!r} (known: {known}); "
                           f"queues are created by opening them in code: "
                           f"client.queue({name!r}, ...)")
        return queue


pass_env = click.make_pass_decorator(Env)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar="DYNOQ_URL", default=None, metavar="URL",
              help="Redis URL [env DYNOQ_URL; default redis://localhost:6379/0].")
@click.option("--prefix", envvar="DYNOQ_PREFIX", default="dq", show_default=True,
              help="Key prefix of the queues [env DYNOQ_PREFIX].")
@click.version_option(package_name="dynoq")
@click.pass_context
def cli(ctx: click.Context, url: str | None, prefix: str) -> None:
    """dynoq: distributed delay queues and ordered queues on Redis.

    Exit codes: 0 ok, 1 failure, 2 bad arguments, 3 Redis unreachable."""
    ctx.obj = Env(url, prefix)


# -- sweeper -----------------------------------------------------------------------------

@cli.command()
@click.option("--interval", type=click.FloatRange(min=0, min_open=True),
              default=DEFAULT_INTERVAL, show_default=True, help="Seconds between passes.")
@click.option("--refresh-interval", type=click.FloatRange(min=0, min_open=True),
              default=REFRESH_INTERVAL, show_default=True,
              help="Seconds between re-reads of the queue registry and member reaping.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics on this port (0 = any free port).")
@click.option("--metrics-addr", default="0.0.0.0", show_default=True,
              help="Address the metrics endpoint listens on.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@pass_env
def sweeper(env: Env, interval: float, refresh_interval: float, metrics_port: int | None,
            metrics_addr: str, log_level: str) -> None:
    """Run the background sweeper until SIGTERM or SIGINT (then exit 0)."""
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    client = _connect_until(env, stop)
    if client is None:
        return
    with client:
        metrics = None
        if metrics_port is not None:
            metrics = _serve_metrics(client, metrics_port, metrics_addr)
        Sweeper(client, interval=interval, refresh_interval=refresh_interval,
                metrics=metrics).run_forever(stop)


def _connect_until(env: Env, stop: threading.Event) -> Client | None:
    """Connect, retrying while the server is unreachable (a sweeper may start first)."""
    failures = 0
    while not stop.is_set():
        try:
            return connect(env.url, prefix=env.prefix, **env.options(timeout=10.0))
        except ConnectionFailed as exc:
            failures += 1
            delay = min(BACKOFF_CAP, 0.1 * 2 ** min(failures, 20))
            if failures == 1 or failures % 10 == 0:
                log.warning("cannot reach Redis (attempt %d, retrying in %.1fs): %s",
                            failures, delay, exc)
            stop.wait(delay)
    return None


def _serve_metrics(client: Client, port: int, addr: str) -> Any:
    try:
        from .metrics import Metrics, start_metrics_server
    except ImportError as exc:
        raise CliError(f"--metrics-port needs the metrics extra (pip install "
                       f"'dynoq[metrics]'): {exc}") from None
    metrics = Metrics()
    try:
        server, _ = start_metrics_server(port, addr=addr, registry=metrics.registry,
                                         client=client)
    except OSError as exc:
        raise CliError(f"cannot serve metrics on {addr}:{port}: {exc}") from None
    log.info("metrics on http://%s:%d/metrics", addr, server.server_port)
    return metrics


# -- inspection --------------------------------------------------------------------------

def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def _stats_json(queue: Queue, stats: QueueStats, now: float) -> dict[str, Any]:
    def age(at: float | None) -> float | None:
        return None if at is None else round(max(0.0, now - at), 3)

    shards = [{"shard": s.shard, "ready": s.ready, "delayed": s.delayed,
               "in_flight": s.unacked, "dead": s.dead,
               "oldest_waiting_age": age(s.oldest_ready_at)} for s in stats.shards]
    ages = [a for a in (r["oldest_waiting_age"] for r in shards) if a is not None]
    return {"queue": queue.name, "ordered": queue.settings.ordered,
            "ready": stats.ready, "delayed": stats.delayed, "in_flight": stats.unacked,
            "dead": stats.dead, "oldest_waiting_age": max(ages) if ages else None,
            "shards": shards}


@cli.command()
@click.argument("queue", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.option("--per-shard/--totals", default=None,
              help="One row per shard [default: per shard when QUEUE is given].")
@pass_env
def stats(env: Env, queue: str | None, as_json: bool, per_shard: bool | None) -> None:
    """Ready, delayed, in-flight and dead messages, and the oldest waiting age."""
    client = env.client()
    queues = [env.queue(queue)] if queue else [
        q for q in (existing_queue(client, n) for n in client.queue_names()) if q is not None]
    sec, usec = client.redis.time()  # ages on the server clock, as the records are
    now = sec + usec / 1e6
    rows = [_stats_json(q, q.stats(), now) for q in queues]
    if as_json:
        click.echo(json.dumps({"prefix": client.prefix, "queues": rows}, indent=2))
        return
    per_shard = bool(queue) if per_shard is None else per_shard
    header = ["queue", "shard", "ready", "delayed", "in flight", "dead", "oldest waiting"]
    table: list[list[str]] = []
    for r in rows:
        for s in r["shards"] if per_shard else []:
            table.append([r["queue"], str(s["shard"]), str(s["ready"]), str(s["delayed"]),
                          str(s["in_flight"]), str(s["dead"]), _age(s["oldest_waiting_age"])])
        table.append([r["queue"], "all" if per_shard else str(len(r["shards"])),
                      str(r["ready"]), str(r["delayed"]), str(r["in_flight"]), str(r["dead"]),
                      _age(r["oldest_waiting_age"])])
    if not per_shard:
        header[1] = "shards"
    _print_table(f"dynoq queues (prefix {client.prefix!r})", header, table)


def _payload_text(payload: Any) -> str:
    return json.dumps(payload, default=_json_default, ensure_ascii=False)


def _json_default(value: object) -> Any:
    if isinstance(value, (bytes, bytearray)):  # JSON has no bytes: base64, marked
        return {"$base64": base64.b64encode(value).decode()}
    raise TypeError(f"cannot show {type(value).__name__} as JSON")


def _message_json(m: Message) -> dict[str, Any]:
    return {"id": m.id, "payload": m.payload, "priority": m.priority, "key": m.key,
            "headers": m.headers, "shard": m.shard, "attempts": m.attempts,
            "deliver_at": m.deliver_at, "enqueued_at": m.enqueued_at}


def _show_messages(title: str, msgs: list[Message], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps([_message_json(m) for m in msgs], default=_json_default,
                              ensure_ascii=False, indent=2))
        return
    rows = [[m.id or "", str(m.shard), str(m.priority), m.key or "", str(m.attempts),
             _payload_text(m.payload)] for m in msgs]
    _print_table(title, ["id", "shard", "priority", "key", "attempts", "payload"], rows)


@cli.command()
@click.argument("queue")
@click.option("-n", "count", type=click.IntRange(min=1), default=10, show_default=True,
              help="How many messages.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_env
def peek(env: Env, queue: str, count: int, as_json: bool) -> None:
    """The next deliverable messages, in delivery order (nothing is claimed)."""
    q = env.queue(queue)
    _show_messages(f"next in {queue!r}", q.peek(count), as_json)


@cli.command()
@click.argument("queue")
@click.option("-n", "count", type=click.IntRange(min=1), default=100, show_default=True,
              help="How many messages.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_env
def dead(env: Env, queue: str, count: int, as_json: bool) -> None:
    """Dead-lettered messages, oldest first."""
    q = env.queue(queue)
    _show_messages(f"dead letters of {queue!r}", q.dead(count), as_json)


# -- changes -----------------------------------------------------------------------------

@cli.command()
@click.argument("queue")
@click.option("--id", "ids", multiple=True, metavar="ID",
              help="Replay only this id (repeatable) [default: every dead letter].")
@pass_env
def replay(env: Env, queue: str, ids: tuple[str, ...]) -> None:
    """Put dead-lettered messages back on the queue, attempts reset."""
    n = env.queue(queue).replay_dead(list(ids) if ids else None)
    click.echo(f"replayed {n} message(s)")
    if ids and n < len(ids):
        raise CliError(f"{len(ids) - n} of the given ids were not dead letters of {queue!r}")


@cli.command("purge-dead")
@click.argument("queue")
@pass_env
def purge_dead(env: Env, queue: str) -> None:
    """Delete every dead-lettered message of QUEUE for good."""
    click.echo(f"purged {env.queue(queue).purge_dead()} message(s)")


@cli.command()
@click.argument("queue")
@click.argument("payload")
@click.option("--delay", type=float, default=0.0, help="Seconds before it is due.")
@click.option("--priority", type=int, default=0, help="0..99, lower first.")
@click.option("--key", default=None, help="Ordering key (ordered queues).")
@click.option("--id", "msg_id", default=None, help="Message id [default: random].")
@pass_env
def push(env: Env, queue: str, payload: str, delay: float, priority: int, key: str | None,
         msg_id: str | None) -> None:
    """Push PAYLOAD (JSON if it parses as JSON, else the string); prints the id."""
    try:
        value: Any = json.loads(payload)
    except ValueError:
        value = payload
    click.echo(env.queue(queue).push(value, id=msg_id, delay=delay, priority=priority,
                                     key=key))


@cli.command()
@pass_env
def demo(env: Env) -> None:
    """Run the end-to-end demo (default: a private embedded server; see dynoq.demo)."""
    from . import demo as demo_module

    code = demo_module.main(env.url)
    if code:
        sys.exit(code)


# -- output ------------------------------------------------------------------------------

def _print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # rich is the optional `cli` extra: plain columns without it
        _plain_table(header, rows, click.echo)
        return
    table = Table(title=title)
    for i, name in enumerate(header):
        numeric = name in ("shard", "shards", "ready", "delayed", "in flight", "dead",
                           "priority", "attempts")
        table.add_column(name, justify="right" if numeric else "left",
                         overflow="fold", no_wrap=i == 0)
    for row in rows:
        table.add_row(*row)
    Console(file=sys.stdout).print(table)


def _plain_table(header: list[str], rows: list[list[str]], echo: Callable[[str], Any]) -> None:
    widths = [max(len(c) for c in col) for col in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def main(argv: Sequence[str] | None = None) -> None:
    """The console script ``dynoq`` and ``python -m dynoq``."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="dynoq")
