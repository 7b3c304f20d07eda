"""Consumer-group membership: heartbeats in Redis, members that stop heartbeating drop out.

Keys (one hash tag per queue, so each script touches one slot on Redis Cluster)::

    <prefix>:group:{<queue>}:<group>        zset  member -> last heartbeat ms (Redis clock)
    <prefix>:group:{<queue>}:<group>:ttl    hash  member -> TTL ms
    <prefix>:groups:{<queue>}               set   the queue's group names
    <prefix>:groupwake:{<queue>}:<group>    pub/sub channel: a member joined, left or
                                            released a shard; everyone rebalances now
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .connection import translate
from .keys import check_name

if TYPE_CHECKING:
    from .client import Client


@dataclass(frozen=True)
class GroupKeys:
    members: str
    ttls: str
    registry: str
    channel: str

    @classmethod
    def of(cls, prefix: str, queue: str, group: str) -> GroupKeys:
        base = f"{prefix}:group:{{{queue}}}:{group}"
        return cls(base, base + ":ttl", groups_key(prefix, queue),
                   f"{prefix}:groupwake:{{{queue}}}:{group}")


def groups_key(prefix: str, queue: str) -> str:
    return f"{prefix}:groups:{{{queue}}}"


class Membership:
    """One member's presence in one group of one queue."""

    def __init__(self, client: Client, queue: str, group: str, member: str,
                 ttl: float) -> None:
        self.client = client
        self.group = check_name(group, "group")
        self.member = member
        self.ttl_ms = max(int(ttl * 1000), 1)
        self.keys = GroupKeys.of(client.prefix, queue, self.group)

    @translate
    def heartbeat(self) -> tuple[bool, list[str]]:
        """Refresh this member; return (membership changed, live members)."""
        k = self.keys
        reply = self.client.scripts.run_raw(
            "group-heartbeat", [k.members, k.ttls, k.registry],
            [self.group, self.member, self.ttl_ms, k.channel])
        members = sorted(m.decode() for m in reply[2:])
        return bool(int(reply[0]) or int(reply[1])), members

    @translate
    def leave(self) -> None:
        k = self.keys
        self.client.scripts.run_raw("group-leave", [k.members, k.ttls],
                                    [self.member, k.channel])

    @translate
    def notify(self) -> None:
        """Ask every member to rebalance now (e.g. a shard's lease was released)."""
        self.client.redis.publish(self.keys.channel, "change")


@translate
def members(client: Client, queue_name: str, group: str) -> list[str]:
    """The members of a group as last recorded (stale ones included until reaped)."""
    key = GroupKeys.of(client.prefix, queue_name, group).members
    return sorted(m.decode() for m in client.redis.zrange(key, 0, -1))


@translate
def reap_stale_members(client: Client, queue_name: str) -> int:
    """Remove members whose heartbeat is older than their TTL, in every group of
    ``queue_name``, and notify each group that lost one; return how many were removed."""
    total = 0
    for raw in client.redis.smembers(groups_key(client.prefix, queue_name)):
        group = raw.decode()
        k = GroupKeys.of(client.prefix, queue_name, group)
        total += int(client.scripts.run_raw("group-reap", [k.members, k.ttls, k.registry],
                                            [group, k.channel]))
    return total
