"""Every Redis key and pub/sub channel name dynoq uses (pure: no I/O).

The scheme is injective: a prefix, queue, group or topic name may not contain ':', '{',
'}' or whitespace (``validate.check_name``), so a key splits on ':' into its parts in one
way only, and no choice of names makes two queues, groups or tenants share a key. A
tenant's keys all match ``<prefix>:*`` and no other tenant's do, which is what a Redis ACL
(``~<prefix>:*``) needs.

Every key of one shard carries the hash tag ``{<queue>:<shard>}`` so one Lua script can
touch all of them on Redis Cluster; a queue's consumer-group keys share ``{<queue>}``.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from urllib.parse import quote


def shard_of(routing: str, shards: int) -> int:
    """The stable shard of an id or ordering key (CRC-32, the same on every host)."""
    return zlib.crc32(routing.encode("utf-8")) % shards


# The scores of held debounced copies in an ordered shard's `delayed` start here (2^50 ms,
# lua/lib/debounce.lua's DEBOUNCED): above every retry's due time.
HELD_FROM = 1 << 50


def held_name(msg_id: str) -> bytes:
    """The field in ``msgs`` (and member of ``delayed``) of the debounced copy of an id
    held on an ordered shard (lua/lib/debounce.lua's dname): byte 255 begins no UTF-8
    text, so no message id is one."""
    return b"\xff" + msg_id.encode()


def held_of(member: bytes | str, score: float) -> tuple[str, float] | None:
    """(the id, its due time in ms) when ``member`` of an ordered shard's ``delayed``, at
    ``score``, is a held debounced copy (:func:`held_name`), else None."""
    if isinstance(member, bytes) and member[:1] == b"\xff" and score >= HELD_FROM:
        return member[1:].decode(), score - HELD_FROM
    return None


@dataclass(frozen=True)
class ShardKeys:
    """The keys of one shard of one queue (field names are the names Lua headers use)."""

    delayed: str
    ready: str
    unack: str
    msgs: str
    dlv: str  # id -> "attempts|saved ready score|delivery token"
    dead: str
    seq: str
    done: str  # id -> ack time, for the dedupe window
    lease: str  # "<owner token>.<fence>" of an ordered shard's consumer (SET NX PX)
    fence: str  # the shard's fencing number: grows at every lease takeover
    why: str  # id -> why it failed (lua/lib/why.lua), until acked, removed or purged
    counts: str  # cumulative counts: pushed, acked, retried, expired, dead
    sched: str  # recurring messages whose occurrences land here: id -> definition
    marks: str  # recurring message id -> its latest tick pushed (ms)
    # Transactions (lua/transaction-*.lua): a prepared message's record is in `msgs` and in no
    # state set but `half`, so nothing delivers, peeks or counts it as waiting.
    half: str  # zset prepared id -> when it is next checked, or its check claim ends (ms)
    txs: str  # hash prepared id -> "<checks so far>|<claim token>"
    decided: str  # zset "c:<id>" / "r:<id>" -> when committed / rolled back (kept a day)
    # The epoch of the queue these keys belong to, "<epoch>|<shards>" (lua/epoch-set-1.lua):
    # every script that reads or writes the shard refuses a caller that opened another
    # (lib/refusal.lua gone()). A topic's group queues share their topic shard's.
    epoch: str
    # The queue's job controls, a hash: `paused` -> since when (ms) while the queue is
    # paused (lua/pause-2.lua), read by the scripts that deliver (lua/lib/paused.lua). Not
    # data: clearing the queue keeps it.
    control: str
    # zset id -> deadline (ms) of a message pushed with an expiry, until it is delivered
    # (lua/lib/lapse.lua)
    expiry: str
    # Message groups (ordered="key", lua/lib/keyed.lua): waiting messages chained per key
    # in push order, keys that may deliver by turn, per-key state, per-key fences.
    kwait: str
    kturn: str
    kstate: str
    kfence: str
    # A keyed queue's key_rate_limit (lua/lib/krate.lua): zset key -> its earliest next
    # delivery (ms), and zset key -> when a key that waits with a free slot may deliver
    # again (it rests there instead of having a turn in `kturn`).
    krate: str
    krest: str

    @classmethod
    def of(cls, prefix: str, tag: str, shard: int, sub: str = "") -> ShardKeys:
        base = f"{prefix}:{{{tag}:{shard}}}:"
        own = base + (f"{sub}:" if sub else "")
        keys = {f: own + f for f in cls.__dataclass_fields__}
        if sub:
            keys["epoch"] = topic_epoch(prefix, tag, shard)
        return cls(**keys)

    def data(self) -> list[str]:
        """Every key holding messages or their state (``clear`` deletes them). The lease,
        the fencing number (which must never go back), the counts and the recurring
        messages' definitions stay."""
        return [
            self.delayed,
            self.ready,
            self.unack,
            self.msgs,
            self.dlv,
            self.dead,
            self.seq,
            self.done,
            self.why,
            self.half,
            self.txs,
            self.decided,
            self.expiry,
            self.kwait,
            self.kturn,
            self.kstate,
            self.krest,
        ]


@dataclass(frozen=True)
class QueueKeys:
    """The keys of one queue under one prefix.

    A plain queue's shard keys are ``<prefix>:{<queue>:<shard>}:<field>``. A topic's group
    queue lives under the topic shard's hash tag, so one script can publish to every
    group of a topic shard: ``<prefix>:{<topic>:<shard>}:<group>[:<member>]:<field>``,
    and its ``queue`` name (in its non-shard keys and channels) is
    ``<topic>:<group>[:<member>]``, which no plain queue can have (names hold no ':')."""

    prefix: str
    queue: str
    tag: str = ""  # the shard keys' hash-tag base (default: the queue's name)
    sub: str = ""  # what comes between a shard's tag and each field (group queues)

    def shard(self, shard: int) -> ShardKeys:
        return ShardKeys.of(self.prefix, self.tag or self.queue, shard, self.sub)

    @property
    def meta(self) -> str:
        """Hash of the queue's settings."""
        return f"{self.prefix}:queue:{self.queue}"

    @property
    def wake_channel(self) -> str:
        """Pub/sub channel on which every transition that makes a message deliverable
        wakes blocked pops."""
        return f"{self.prefix}:wake:{self.queue}"

    @property
    def slots(self) -> str:
        """Hash of the max_running slots its consumers hold (lua/slots-2.lua): holder ->
        slots, and `total`."""
        return f"{self.prefix}:slots:{{{self.queue}}}"

    @property
    def slot_leases(self) -> str:
        """Zset of the slots' holders -> when their slots go back (ms)."""
        return f"{self.prefix}:slots:{{{self.queue}}}:leases"

    @property
    def groups(self) -> str:
        """Set of the queue's consumer-group names (the sweeper's reaper walks it)."""
        return f"{self.prefix}:groups:{{{self.queue}}}"

    def group(self, group: str) -> GroupKeys:
        base = f"{self.prefix}:group:{{{self.queue}}}:{group}"
        return GroupKeys(
            members=base,
            ttls=base + ":ttl",
            registry=self.groups,
            claim=f"{self.prefix}:claim:{{{self.queue}}}",
            rate=f"{self.prefix}:rate:{{{self.queue}}}:{group}",
            rate_state=f"{self.prefix}:rate:{{{self.queue}}}:{group}:state",
            channel=f"{self.prefix}:groupwake:{{{self.queue}}}:{group}",
            history=base + ":history",
        )


@dataclass(frozen=True)
class GroupKeys:
    """The keys of one consumer group of one queue (one hash tag: the queue's)."""

    members: str  # zset member -> last heartbeat ms (Redis clock)
    ttls: str  # hash member -> heartbeat lifetime ms
    registry: str  # the queue's set of group names
    claim: str  # the group consuming the queue now (one group at a time)
    rate: str  # the group's rate limit: a log of the last period's grants
    rate_state: str  # and its running total
    channel: str  # pub/sub: a member joined, left or released a shard
    history: str  # list, newest first: "<ms> <json>" per rebalance that changed something


@dataclass(frozen=True)
class RateKeys:
    """A rate limit's keys (lua/rate-take-2.lua's): a consumer group's are its
    :class:`GroupKeys`' ``rate`` and ``rate_state``; a Spark write's are these."""

    rate: str  # a log of the last period's grants
    rate_state: str  # and its running total

    @classmethod
    def spark_write(cls, prefix: str, name: str) -> RateKeys:
        """A Spark write's (or streaming query's) row rate, shared by all its tasks:
        ``<prefix>:rate:{spark:<name>}:write``. A queue name holds no ':', so no
        consumer group's ``<prefix>:rate:{<queue>}:<group>`` is one of these."""
        base = f"{prefix}:rate:{{spark:{name}}}:write"
        return cls(base, base + ":state")

    @classmethod
    def task(cls, prefix: str, queue: str, task: str) -> RateKeys:
        """A task's own rate limit, shared by every worker running it:
        ``<prefix>:rate:{task:<queue>}:<task, percent-encoded>``. A queue name holds no
        ':', so no consumer group's or Spark write's key is one of these, and the
        encoded name holds none either, so no task's state key is another task's log."""
        base = f"{prefix}:rate:{{task:{queue}}}:{member_token(task)}"
        return cls(base, base + ":state")


def result_key(prefix: str, queue: str, shard: int, task_id: str) -> str:
    """A task's kept state and result (a string with a TTL: dynoq.Tasks' keep_result):
    ``<prefix>:result:{<queue>:<shard>}:<id>``. Its hash tag is the shard's, so the ack
    that ends the task and the scripts that read or cancel it reach it on Redis Cluster.
    No other key has "result" after the prefix, and the tag ends at the first '}' (a
    queue name holds none), so the id after it, whatever it holds, names one key."""
    return f"{prefix}:result:{{{queue}:{shard}}}:{task_id}"


def once_key(prefix: str, queue: str, shard: int, msg_id: str) -> str:
    """The marker that a flow's task call was pushed (lua/flow-push-11.lua), kept for
    the flow's lifetime: ``<prefix>:once:{<queue>:<shard>}:<id>``, in the shard's slot
    (as result_key: no other key has "once" after the prefix)."""
    return f"{prefix}:once:{{{queue}:{shard}}}:{msg_id}"


@dataclass(frozen=True)
class FlowKeys:
    """The keys of one flow (dynoq/_core/flows.py), under the hash tag ``{<flow id>}`` so
    one script reads and writes both on Redis Cluster: ``<prefix>:flow:{<id>}:plan``
    (what it runs: paths, calls, entries) and ``<prefix>:flow:{<id>}:state`` (its status,
    ended calls' values, groups' counts, its result). A flow id holds no '}' (flows.py
    makes them), so the tag ends where it should; no other key has "flow" after the
    prefix."""

    plan: str
    flow: str

    @classmethod
    def of(cls, prefix: str, flow_id: str) -> FlowKeys:
        base = f"{prefix}:flow:{{{flow_id}}}:"
        return cls(base + "plan", base + "state")


def flows_key(prefix: str) -> str:
    """How many flows started and ended under a prefix, by outcome (a hash:
    lua/flow-count-1.lua): ``<prefix>:flows``."""
    return f"{prefix}:flows"


def running_flows_key(prefix: str) -> str:
    """The flows running under a prefix, scored by when a sweeper looks at each next (a
    sorted set: lua/flow-track-1.lua): ``<prefix>:flows:running``."""
    return f"{prefix}:flows:running"


def registry_key(prefix: str) -> str:
    """The set of queue names under a prefix (the sweeper walks it)."""
    return f"{prefix}:queues"


def member_token(member: str) -> str:
    """A consumer's instance id as a key part: percent-encoded, so it holds no ':', brace
    or whitespace, and two ids never give one token."""
    return quote(member, safe="")


@dataclass(frozen=True)
class TopicKeys:
    """The keys of one topic under one prefix (its shards carry ``{<topic>:<shard>}``)."""

    prefix: str
    topic: str

    @property
    def meta(self) -> str:
        """Hash of the topic's settings."""
        return f"{self.prefix}:topic:{self.topic}"

    def epoch(self, shard: int) -> str:
        """The topic's epoch in one topic shard (its group queues' shards check it)."""
        return topic_epoch(self.prefix, self.topic, shard)

    def subs(self, shard: int) -> str:
        """Hash of the topic's subscriptions, one copy per shard (in its slot): target
        queue name -> "<group>|<mode>|<tags>", and "~v" -> the subscriptions' version."""
        return f"{self.prefix}:{{{self.topic}:{shard}}}:subs"

    def group_queue(self, group: str, member: str | None = None) -> QueueKeys:
        """The queue of a clustering group, or of one member of a broadcasting group."""
        sub = group if member is None else f"{group}:{member_token(member)}"
        return QueueKeys(self.prefix, f"{self.topic}:{sub}", tag=self.topic, sub=sub)

    def staging(self) -> QueueKeys:
        """Where the topic's prepared (transactional) messages wait for their commit:
        ``<prefix>:{<topic>:<shard>}::tx:<field>``. Its part after the hash tag is empty,
        which no group (names are not empty) gives, so no group queue shares its keys."""
        return QueueKeys(self.prefix, f"{self.topic}::tx", tag=self.topic, sub=":tx")


def topic_epoch(prefix: str, topic: str, shard: int) -> str:
    """A topic shard's epoch key. Its last part is no field of a queue shard (``ShardKeys``),
    so a queue and a topic of one name never share it; group queue keys have more parts."""
    return f"{prefix}:{{{topic}:{shard}}}:topic-epoch"


def topic_registry_key(prefix: str) -> str:
    """The set of topic names under a prefix (the sweeper walks it)."""
    return f"{prefix}:topics"
