"""The Lua scripts, one file per transition under ``dynoq/lua/``, and how they are called.

Each file's header is its contract (KEYS, ARGV, returns, and the shared pieces under
``lua/lib/`` it uses, which are put in front of it at load). Here we only name, per script,
which keys of a shard it takes, in KEYS order. redis-py's ``Script`` computes the SHA
locally, sends EVALSHA and reloads the script on NOSCRIPT (also inside pipelines).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.commands.core import Script

from .keys import ShardKeys

# script name -> the ShardKeys fields it takes as KEYS, in order
SHARD_SCRIPTS: dict[str, tuple[str, ...]] = {
    "push": ("delayed", "ready", "unack", "msgs", "dlv", "dead", "seq", "done"),
    "pop": ("delayed", "ready", "unack", "msgs", "dlv", "dead", "seq", "lease"),
    "ack": ("unack", "msgs", "dlv", "done", "lease"),
    "nack": ("delayed", "unack", "dlv", "dead", "lease"),
    "extend": ("unack", "dlv", "lease"),
    "reschedule": ("delayed", "ready", "msgs", "dlv"),
    "remove": ("delayed", "ready", "unack", "msgs", "dlv", "dead"),
    "requeue": ("unack", "delayed", "dlv", "dead", "lease"),
    "replay": ("dead", "delayed", "dlv", "msgs"),
    "purge-dead": ("dead", "msgs", "dlv"),
    "peek": ("ready", "delayed", "msgs", "dlv"),
    "stats": ("ready", "delayed", "unack", "dead", "msgs"),
    "lease-renew": ("lease",),
    "lease-release": ("lease",),
    "promote": ("delayed", "ready", "msgs", "dlv", "seq"),
    "trim": ("done",),
}
# Scripts whose KEYS are not one shard's: open (queue metadata), due (groups of
# unack, delayed, done for a batch of shards; file named for one group).
OTHER_SCRIPTS = {"open": 1, "due": 3,
                 # consumer groups (dynoq.group): one group's keys share a hash tag
                 "group-heartbeat": 3, "group-leave": 2, "group-reap": 3}

# Small integer codes the scripts return for refusals.
FENCED = -1


def _read(path: str) -> str:
    return (resources.files("dynoq") / "lua" / path).read_text("utf-8")


def source(name: str, numkeys: int) -> str:
    """A script's text, after the shared pieces its header names ("uses: lib/x.lua")."""
    text = _read(f"{name}-{numkeys}.lua")
    header = text.split("]]", 1)[0]
    libs = [_read(lib) for lib in re.findall(r"uses: (lib/[\w-]+\.lua)", header)]
    return "\n".join([*libs, text])


@dataclass
class Scripts:
    """The scripts registered on one redis client (SHA computed once, loaded lazily)."""

    by_name: dict[str, Script]

    @classmethod
    def register(cls, redis: Any) -> Scripts:
        names = {**{n: len(k) for n, k in SHARD_SCRIPTS.items()}, **OTHER_SCRIPTS}
        return cls({n: redis.register_script(source(n, k)) for n, k in names.items()})

    def run(self, name: str, keys: ShardKeys, args: list[Any], client: Any = None) -> Any:
        """Run a shard script with its keys taken from ``keys``."""
        return self.by_name[name](
            keys=[getattr(keys, f) for f in SHARD_SCRIPTS[name]], args=args, client=client
        )

    def run_raw(self, name: str, keys: list[str], args: list[Any]) -> Any:
        return self.by_name[name](keys=keys, args=args)
