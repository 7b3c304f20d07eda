"""The key scheme is injective: no choice of prefix, queue or group names makes two
tenants, queues or groups share a key (a property test), and names that could are refused."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import dynoq
from dynoq._core import validate
from dynoq._core.keys import QueueKeys, RateKeys, registry_key

# Names built from separators, the words of the key scheme and a few characters: what a
# collision needs (e.g. group "g" and group "g:ttl", prefix "a:queue" and queue "queue:b").
TOKENS = [
    "a",
    "b",
    "g",
    ":",
    "{",
    "}",
    "0",
    "1",
    ".",
    " ",
    "ttl",
    "queue",
    "queues",
    "group",
    "groups",
    "wake",
    "groupwake",
    "ready",
    "msgs",
    "rate",
    "state",
    "task",
    "%3A",
]
NAME = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=4).map("".join)


def _valid(name: str) -> bool:
    try:
        validate.check_name(name, "name")
    except dynoq.InvalidArgument:
        return False
    return True


def _roles(prefix: str, queue: str, group: str) -> dict[str, tuple[object, ...]]:
    """Every key and channel of a (prefix, queue, group), with what it stands for."""
    q = QueueKeys(prefix, queue)
    out: dict[str, tuple[object, ...]] = {}
    for shard in range(3):
        keys = q.shard(shard)
        for f in dataclasses.fields(keys):
            out[getattr(keys, f.name)] = ("shard", prefix, queue, shard, f.name)
    g = q.group(group)
    task = RateKeys.task(prefix, queue, group)  # the third name as a task's too
    roles: list[tuple[str, tuple[object, ...]]] = [
        (g.rate, ("rate", prefix, queue, group)),
        (g.rate_state, ("rate_state", prefix, queue, group)),
        (task.rate, ("task rate", prefix, queue, group)),
        (task.rate_state, ("task rate_state", prefix, queue, group)),
        (q.meta, ("meta", prefix, queue)),
        (q.groups, ("groups", prefix, queue)),
        (registry_key(prefix), ("registry", prefix)),
        (g.members, ("members", prefix, queue, group)),
        (g.ttls, ("ttls", prefix, queue, group)),
        (q.wake_channel, ("wake", prefix, queue)),
        (g.channel, ("groupwake", prefix, queue, group)),
    ]
    for key, role in roles:
        assert key not in out, f"{key!r} stands for two things"
        out[key] = role
    return out


def _check(p1: str, q1: str, g1: str, p2: str, q2: str, g2: str) -> None:
    if not all(_valid(n) for n in (p1, q1, g1, p2, q2, g2)):
        return  # refused names are checked below
    a, b = _roles(p1, q1, g1), _roles(p2, q2, g2)
    assert all(k.startswith(p1 + ":") for k in a)  # an ACL of ~<prefix>:* covers them all
    for key in a.keys() & b.keys():  # a shared key stands for the same thing in both
        assert a[key] == b[key], (key, a[key], b[key])


@settings(max_examples=300, deadline=None)
@example("a", "b", "g", "a", "b", "g:ttl")  # once: a group's TTL hash was another's members
@example("a:queue", "b", "g", "a", "queue:b", "g")  # once: nested prefixes shared keys
@given(NAME, NAME, NAME, NAME, NAME, NAME)
def test_different_names_never_share_a_key(
    p1: str, q1: str, g1: str, p2: str, q2: str, g2: str
) -> None:
    _check(p1, q1, g1, p2, q2, g2)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), min_size=3, max_size=9), st.data())
def test_one_string_split_two_ways_never_shares_a_key(
    tokens: list[str], data: st.DataObject
) -> None:
    """Collisions come from one run of characters read as different names: split the
    same tokens into (prefix, queue, group) in two ways."""

    def split() -> tuple[str, str, str]:
        i = data.draw(st.integers(1, len(tokens) - 2))
        j = data.draw(st.integers(i + 1, len(tokens) - 1))
        return "".join(tokens[:i]), "".join(tokens[i:j]), "".join(tokens[j:])

    _check(*split(), *split())


@pytest.mark.parametrize(
    "bad", ["a:b", "g:ttl", "x{1}", "with space", "nl\n", "", "a" * 201, "tab\t", "\x00"]
)
def test_names_that_could_collide_are_refused(client: dynoq.Client, bad: str) -> None:
    with pytest.raises(dynoq.InvalidArgument):
        client.queue(bad)
    with pytest.raises(dynoq.InvalidArgument):
        client.consumer(client.queue("fine"), lambda m: None, group=bad)
    with pytest.raises(dynoq.InvalidArgument):
        dynoq.connect("memory://names", prefix=bad)
    assert client.queue_names() == ["fine"]


def test_nested_names_of_the_old_trial_are_refused() -> None:
    # prefix "a:b" + queue "c" and prefix "a" + queue "b:c" once shared keys
    with pytest.raises(dynoq.InvalidArgument):
        dynoq.connect("memory://nested", prefix="a:b")
    with dynoq.connect("memory://nested", prefix="a") as c, pytest.raises(dynoq.InvalidArgument):
        c.queue("b:c")


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=12), st.text(min_size=1, max_size=12))
@example("t", "t:state")  # a name ending like another's state key
def test_two_task_names_never_share_a_rate_key(t1: str, t2: str) -> None:
    # A task's name is any text (':' and braces too): its rate keys hold it encoded.
    a, b = RateKeys.task("p", "q", t1), RateKeys.task("p", "q", t2)
    keys_a, keys_b = {a.rate, a.rate_state}, {b.rate, b.rate_state}
    assert len(keys_a) == 2
    assert (keys_a & keys_b == set()) == (t1 != t2)
    assert all(k.startswith("p:rate:{task:q}:") and k.count("{") == 1 for k in keys_a)
