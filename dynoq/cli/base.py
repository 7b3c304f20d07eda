"""The command line's base: the ``dynoq`` group, where to connect, and how library
errors become one-line messages and exit codes (0 ok, 1 failure, 2 bad arguments, 3 Redis
unreachable, 4 handler not importable), and how a service waits for Redis at start."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import click

from ..backend import redact
from ..client import Client, connect
from ..errors import ConnectionFailed, DynoqError, InvalidArgument, InvalidType
from ..queue import Queue
from ..retry import backoff

EXIT_FAILURE, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_IMPORT = 1, 2, 3, 4
EXIT_CODES = {
    0: "ok",
    EXIT_FAILURE: "failure",
    EXIT_USAGE: "bad arguments",
    EXIT_UNREACHABLE: "Redis unreachable",
    EXIT_IMPORT: "handler not importable",
}

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
        except ConnectionFailed as exc:
            url = ctx.obj.url if isinstance(ctx.obj, Env) else None
            where = redact(url) if url else "the server"
            raise Unreachable(f"cannot reach Redis at {where}: {exc}") from None
        except (InvalidArgument, InvalidType) as exc:
            raise UsageFailure(str(exc)) from None
        except DynoqError as exc:
            raise CliError(str(exc)) from None


@dataclass
class Env:
    """What every command shares: where to connect, and the connection once made."""

    url: str | None
    prefix: str
    _client: Client | None = field(default=None, repr=False)

    def client(self) -> Client:
        # The library's bounds (connect and command timeouts, the retry window): a dead
        # or half-open host ends in "cannot reach Redis" (exit 3), never a hang.
        if self._client is None:
            self._client = connect(self.url, prefix=self.prefix)
            click.get_current_context().call_on_close(self._client.close)
        return self._client

    def client_when_reachable(
        self, stop: threading.Event, give_up_after: float | None
    ) -> Client | None:
        """Connect, retrying with backoff while the server is unreachable (a service may
        start before Redis does), one warning per failed attempt. None once ``stop`` is
        set; raises Unreachable after ``give_up_after`` seconds (None: never)."""
        started, failures = time.monotonic(), 0
        while not stop.is_set():
            try:
                client = connect(self.url, prefix=self.prefix)  # the library's bounds
            except ConnectionFailed as exc:
                failures += 1
                waited = time.monotonic() - started
                where = redact(self.url) if self.url else "the default server"
                if give_up_after is not None and waited >= give_up_after:
                    raise Unreachable(
                        f"cannot reach Redis at {where} after {failures} "
                        f"attempt(s) in {waited:.1f}s: {exc}"
                    ) from None
                delay = backoff(failures)
                if give_up_after is not None:
                    delay = min(delay, max(give_up_after - waited, 0.0))
                log.warning(
                    "cannot reach Redis at %s (attempt %d, retrying in %.1fs): %s",
                    where,
                    failures,
                    delay,
                    exc,
                )
                stop.wait(delay)
                continue
            if failures:
                log.info("Redis reachable after %d failed attempt(s)", failures)
            self._client = client
            click.get_current_context().call_on_close(client.close)
            return client
        return None

    def queue(self, name: str) -> Queue:
        """Open a registered queue; never create one by a typo."""
        client = self.client()
        queue = client.open_existing(name)
        if queue is None:
            known = ", ".join(client.queue_names()) or "none"
            raise CliError(
                f"no queue {name!r} under prefix {client.prefix!r} (known: {known}); "
                f"create it with: dynoq --prefix {client.prefix} queue create {name} "
                f"[--shards N] [--ordered] ..."
            )
        return queue


pass_env = click.make_pass_decorator(Env)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    envvar="DYNOQ_URL",
    default=None,
    metavar="URL",
    help="Redis URL [env DYNOQ_URL; default redis://localhost:6379/0].",
)
@click.option(
    "--prefix",
    envvar="DYNOQ_PREFIX",
    default="dq",
    show_default=True,
    help="Key prefix of the queues [env DYNOQ_PREFIX].",
)
@click.version_option(package_name="dynoq")
@click.pass_context
def cli(ctx: click.Context, url: str | None, prefix: str) -> None:
    """dynoq: distributed delay queues and ordered queues on Redis.

    Every command takes --json. Exit codes: 0 ok, 1 failure, 2 bad arguments, 3 Redis
    unreachable, 4 handler not importable (worker)."""
    ctx.obj = Env(url, prefix)


# -- shared by the commands --------------------------------------------------------------

JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
YES_OPTION = click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")


def emit(as_json: bool, data: dict[str, Any], text: str) -> None:
    click.echo(json.dumps(data) if as_json else text)


def confirm(yes: bool, question: str) -> None:
    """Ask before a destructive change (unless --yes); a "no" exits 1, changing nothing."""
    if not yes and not click.confirm(question, default=False, err=True):
        raise CliError("nothing was changed")


def per_shard(q: Queue, label: str, step: Callable[[int], int], as_json: bool) -> int:
    """Run ``step`` on every shard of ``q`` with a progress bar (rich, when it is
    installed and stderr is a terminal); returns the sum."""
    shards = range(q.settings.shards)
    try:
        from rich.progress import Progress
    except ImportError:  # the optional `cli` extra
        return sum(step(s) for s in shards)
    with Progress(
        transient=True, disable=as_json or not sys.stderr.isatty(), console=None
    ) as progress:
        task = progress.add_task(label, total=len(shards))
        total = 0
        for s in shards:
            total += step(s)
            progress.advance(task)
    return total


def main(argv: Sequence[str] | None = None) -> None:
    """The console script ``dynoq`` and ``python -m dynoq``."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="dynoq")
