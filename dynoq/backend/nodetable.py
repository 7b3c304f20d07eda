"""A sync Redis Cluster client's node table, kept whole through dropped connections.

redis-py before 7.4 (sync) pops a node from ``startup_nodes`` when a connection to it
drops, and after a refresh ``startup_nodes`` is the very dict of ``nodes_cache``: the
node vanishes from the table while the slot map still routes to it, so a command sent to
every primary (SCRIPT LOAD) misses it, and once every node has dropped no refresh can
start. redis-py 7.4 and later keep the two apart themselves; there this changes nothing.
"""

from __future__ import annotations

from typing import Any


def keep_nodes(manager: Any) -> None:
    """Make every refresh of ``manager`` (a sync NodesManager) leave ``startup_nodes`` a
    dict of its own, with the nodes first known put back into it before it starts."""
    if getattr(manager, "_dynoq_kept", False):
        return
    refresh = manager.initialize
    seeds = {**manager.startup_nodes, **manager.nodes_cache}

    def apart() -> None:
        if manager.startup_nodes is manager.nodes_cache:
            manager.startup_nodes = dict(manager.nodes_cache)

    def initialize(*args: Any, **kwargs: Any) -> Any:
        for name, node in seeds.items():
            manager.startup_nodes.setdefault(name, node)
        try:
            return refresh(*args, **kwargs)
        finally:
            apart()

    apart()
    manager.initialize = initialize
    manager._dynoq_kept = True
