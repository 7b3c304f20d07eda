"""The admin step of the least-privilege roles: dynoq's scripts loaded into the script
cache of every node (docs/security.md).

A role calls dynoq's scripts by SHA-1 and may not load them itself (whoever may load a
script may run any code). A script cache is per node and empty after a restart, and a
replica promoted by a failover has its own, so :func:`install` loads what is missing on
every node it can find: the server, every primary and replica of a cluster, the master
and replicas Sentinel knows. :func:`keep` does it again every few seconds, so the
scripts come back by themselves after a restart or a failover.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.cluster import RedisCluster
from redis.sentinel import Sentinel

from .._core.lua import SCRIPTS
from .._core.pool import take_limits
from ..errors import ConnectionFailed, DynoqError, PermissionDenied
from .bounds import bounded, sentinel_options
from .errors import translate
from .runner import Backend, load_source
from .urls import open_backend, sentinel_target, wrap

DEFAULT_KEEP_INTERVAL = 1.0  # seconds between two checks of --keep (one SCRIPT EXISTS a node)


@dataclass(frozen=True)
class Installed:
    """What :func:`install` found and did: ``scripts`` of this version are now on each
    of ``nodes`` (``host:port``); ``loaded`` of them were missing and loaded by this
    call (over every node); ``failed``: the nodes it could not reach, with why."""

    scripts: int
    nodes: tuple[str, ...]
    loaded: int
    failed: dict[str, str] = field(default_factory=dict)


def install(admin: Any, **redis_options: Any) -> Installed:
    """Load every missing script on every node (see the module doc). ``admin``: a URL
    (``redis_options`` go to its redis-py client), a ``dynoq.Client`` (or an asyncio
    one), a Backend or a redis-py client, of a user allowed SCRIPT LOAD and SCRIPT
    EXISTS. Raises PermissionDenied when that user may not, ConnectionFailed when no node
    could be reached."""
    with _backend(admin, redis_options) as backend:
        return install_on(backend)


def install_on(backend: Backend) -> Installed:
    plain = backend.plain
    sources = {(s.plain_sha if plain else s.sha): load_source(s, plain) for s in SCRIPTS.values()}
    shas = sorted(sources)
    done: list[str] = []
    failed: dict[str, str] = {}
    loaded = 0
    with _nodes(backend, failed) as nodes:
        for name, conn in nodes:
            try:
                there = conn.script_exists(*shas)
                for sha, present in zip(shas, there, strict=True):
                    if not present:
                        conn.script_load(sources[sha])
                        loaded += 1
            except redis.RedisError as exc:
                error = translate(exc)
                if isinstance(error, PermissionDenied):
                    raise PermissionDenied(
                        f"installing dynoq's scripts needs a user allowed SCRIPT LOAD and "
                        f"SCRIPT EXISTS (an admin, not a dynoq role): {error}"
                    ) from exc
                failed[name] = str(error)
                continue
            done.append(name)
    if not done:
        raise ConnectionFailed(
            "could not install dynoq's scripts on any node: "
            + "; ".join(f"{n}: {why}" for n, why in failed.items())
        )
    return Installed(len(shas), tuple(done), loaded, failed)


def keep(
    admin: Any,
    stop: threading.Event,
    *,
    interval: float = DEFAULT_KEEP_INTERVAL,
    report: Callable[[Installed | DynoqError], None] = lambda _: None,
    **redis_options: Any,
) -> None:
    """Install, then check every ``interval`` seconds and load again what went missing
    (a restart, a failover, a new node), until ``stop`` is set. Each round's outcome goes
    to ``report``; a round that fails (the server away) is reported and retried, on a
    new connection when this made it. PermissionDenied ends it (this user may not
    install)."""
    while not stop.is_set():
        try:
            with _backend(admin, redis_options) as backend:
                while not stop.is_set():
                    report(install_on(backend))
                    stop.wait(interval)
        except PermissionDenied:
            raise  # not transient: this user may not install (or the password is wrong)
        except DynoqError as exc:
            report(exc)
            stop.wait(interval)


@contextmanager
def _backend(admin: Any, options: dict[str, Any]) -> Iterator[Backend]:
    """A Backend for ``admin``, closed at the end if it was made here."""
    own = True
    if admin is None or isinstance(admin, str):
        backend = open_backend(admin, dict(options))
    elif isinstance(getattr(getattr(admin, "backend", None), "url", None), str) and not isinstance(
        admin.backend, Backend
    ):
        # a dynoq.asyncio.Client: the same server, through a sync connection
        backend = open_backend(admin.backend.url, dict(admin.backend.connect_options))
    else:
        own = False
        backend = (
            admin
            if isinstance(admin, Backend)
            else admin.backend
            if isinstance(getattr(admin, "backend", None), Backend)
            else wrap(admin)
        )  # a redis-py client; InvalidType for anything else
    try:
        yield backend
    finally:
        if own:
            backend.close()


@contextmanager
def _nodes(backend: Backend, failed: dict[str, str]) -> Iterator[list[tuple[str, Any]]]:
    """Every node dynoq's calls may reach, as (host:port, redis client)."""
    client = backend.redis
    if isinstance(client, RedisCluster):
        with _cluster_nodes(client) as nodes:
            yield nodes
    elif urlsplit(backend.url).scheme == "redis+sentinel":
        with _sentinel_nodes(backend, failed) as nodes:
            yield nodes
    else:
        yield [(backend.display_url if backend.plain else _name(client), client)]


@contextmanager
def _cluster_nodes(client: Any) -> Iterator[list[tuple[str, Any]]]:
    """Every node of the cluster, replicas included (CLUSTER SLOTS, which redis-py's
    topology comes from, leaves out replicas that are still syncing)."""
    try:
        client.nodes_manager.initialize()  # the topology now: after a failover too
        listed = addresses(client.execute_command("CLUSTER", "NODES"))
    except redis.RedisError as exc:
        raise translate(exc) from exc
    known = {n.name: n for n in client.get_nodes()}
    made: list[Any] = []
    nodes: list[tuple[str, Any]] = []
    manager = client.nodes_manager
    for name in listed:
        if name in known:
            nodes.append((name, client.get_redis_connection(known[name])))
            continue
        host, port = name.rsplit(":", 1)
        conn = manager.create_redis_node(host=host, port=int(port), **manager.connection_kwargs)
        made.append(conn)
        nodes.append((name, conn))
    try:
        yield nodes
    finally:
        for conn in made:
            conn.close()


def addresses(cluster_nodes: Any) -> list[str]:
    """``host:port`` of every node a CLUSTER NODES reply lists and does not hold failed
    (raw text, or redis-py's parsed dict)."""
    if isinstance(cluster_nodes, dict):
        return sorted(a for a, n in cluster_nodes.items() if _alive(str(n.get("flags", ""))))
    text = cluster_nodes.decode() if isinstance(cluster_nodes, bytes) else str(cluster_nodes)
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) > 2 and _alive(parts[2]):
            out.append(parts[1].split("@", 1)[0])
    return sorted(out)


def _alive(flags: str) -> bool:
    return not set(flags.split(",")) & {"fail", "noaddr", "handshake"}


@contextmanager
def _sentinel_nodes(backend: Backend, failed: dict[str, str]) -> Iterator[list[tuple[str, Any]]]:
    options = dict(backend.connect_options)
    hosts, service, _db, sentinel_kwargs = sentinel_target(backend.url, options)
    take_limits(options)  # the replicas' clients below are one-off: no pool limits
    bounded(options)  # but bounded, as every connection dynoq makes, the sentinels' too
    sentinel = Sentinel(
        hosts,  # type: ignore[no-untyped-call]
        sentinel_kwargs=sentinel_options(options, sentinel_kwargs),
    )
    replicas: list[tuple[str, Any]] = []
    try:
        try:
            found = sentinel.discover_slaves(service)  # type: ignore[no-untyped-call]
        except redis.RedisError as exc:
            failed["sentinel"] = str(translate(exc))
            found = []
        replicas = [(f"{h}:{p}", redis.Redis(host=h, port=p, **options)) for h, p in found]
        yield [(f"{service} (master)", backend.redis), *replicas]
    finally:
        for _, r in replicas:
            r.close()
        for s in sentinel.sentinels:
            s.close()


def _name(client: Any) -> str:
    kw = client.connection_pool.connection_kwargs
    if "path" in kw:
        return str(kw["path"])
    return f"{kw.get('host', 'localhost')}:{kw.get('port', 6379)}"
