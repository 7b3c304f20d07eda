"""What a keyed push (ordered="key", lua/kpush-14.lua) costs the server, guarantee by
guarantee, against the raw message-group push of benchmarks/raw_groups.py, in one run.

    python -m benchmarks.bench_keyed_push [--url redis://...] [--keys 10000] [--per-key 10]
                                          [--batch 100] [--repeats 5]
                                          [--cases batch,single,hot,client]

Every variant pushes the same messages (--keys x --per-key, in rounds of one message a
key, 100-byte payloads; the body each carries is the msgpack dynoq's client sends) into a
fresh keyed queue of one shard, with EVALSHA of its script text (kpush's KEYS and fixed
ARGV as push_many sends them: mode "ensure" for the ids it made, the same work as "push"
for new ids; dedupe window 0, the default):
  raw groups    raw_groups.PUSH (HSET msgs, HSET owner, RPUSH to the key's list, a turn
                in `ready` for a key whose list was empty and that is not busy)
  kpush         dynoq's kpush as shipped (dynoq._core.lua's source, loaded here)
  - <step>      kpush with that step's guarantee taken out, alone ("alone") and on top of
                every step above it ("ladder"): each a copy of the shipped text edited
                here (STEPS: exact replacements, each asserted to match once), never
                dynoq/lua. Each must still be a push: after each run the messages are
                checked where the layout keeps them (msgs, the chain or the per-key lists,
                a turn for every key) and, while the record and the chain are kept,
                dynoq's own pop must find each key's first message.
Cases:
  batch   --batch messages a call (push_many's calls), --keys x --per-key
  single  one message a call, the same messages, pipelined 100 calls a round trip (the
          server's cost of a call, not its socket reads): the ladder only
  hot     one key x (--keys x --per-key / 10) messages, --batch a call: the ladder only
  client  this process's CPU a push: dynoq's push_many (Message -> record, args) against
          the raw push's (an id each, args), --batch a call; and one message a call
          (q.push against one EVALSHA), unpipelined, --single-n messages
Server time: bench_server.measure (the server main thread's CPU, INFO cpu; "in scripts"
is what INFO commandstats gives EVALSHA), in µs a message. Variants run in a shuffled
order each round; figures are medians of --repeats rounds with their range; a saving is
the median of the per-round differences (paired within a round).
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

import dynoq
from benchmarks.bench_server import measure
from benchmarks.common import drop_prefix, median, parser, server_url, server_version, table
from benchmarks.raw_groups import PUSH as RAW_PUSH
from benchmarks.raw_groups import RawGroups
from dynoq._core import codec
from dynoq._core.codec import new_id
from dynoq._core.lua import script

SHIPPED = script("kpush").source
PIPELINE = 100  # single pushes: calls a round trip

# A per-key list in the variants that keep no chain: named from kwait (one hash slot).
LIST_PUSH = """  local holding = {}
  for _, key in ipairs(order) do  -- [bench] a list per key, no links
    local s, mine = st[key], by[key]
    redis.call('RPUSH', kwait .. ':' .. key, unpack(mine))
    holding[key] = s[2] > 0
    if s[2] <= 0 then s[4] = mine[1] end
    s[2] = s[2] + #mine
    s[5] = mine[#mine]
  end
"""
LIST_ONLY = """  local ready = {}  -- [bench] no key state: a turn when the list was empty, as raw
  for _, key in ipairs(order) do
    local mine = by[key]
    if redis.call('RPUSH', kwait .. ':' .. key, unpack(mine)) == #mine
      and redis.call('HEXISTS', K.kstate, key) == 0 then
      ready[#ready + 1] = key
    end
  end
  if #ready > 0 then
    local base = redis.call('INCRBY', K.seq, #ready) - #ready
    local z = {}
    for i, key in ipairs(ready) do
      z[#z + 1] = base + i
      z[#z + 1] = key
    end
    redis.call('ZADD', K.kturn, 'NX', unpack(z))
  end
end
"""


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` (exactly once in the text) by ``new``; with ``until``, the span
    from ``old`` through ``until`` (each once, in that order)."""

    old: str
    new: str
    until: str = ""

    def apply(self, text: str) -> str:
        assert text.count(self.old) == 1, f"{self.old!r}: {text.count(self.old)} matches"
        if not self.until:
            return text.replace(self.old, self.new)
        assert text.count(self.until) == 1, f"{self.until!r}: {text.count(self.until)} matches"
        start = text.index(self.old)
        end = text.index(self.until, start) + len(self.until)
        assert end > start + len(self.old) - 1, f"{self.until!r} before {self.old!r}"
        return text[:start] + self.new + text[end:]


@dataclass(frozen=True)
class Step:
    name: str
    guarantee: str  # what taking it out gives up
    edits: tuple[Edit, ...]
    alone: bool = True  # can be taken out of the shipped script alone
    readable: bool = True  # dynoq's pop still reads what the push wrote
    chain: bool = True  # the messages still wait in kwait's chains (else per-key lists)


# kpush's steps in the order the ladder takes them out: per call first, then per message.
STEPS: tuple[Step, ...] = (
    Step(
        "wake",
        "a consumer waiting on an idle shard is woken at once (EXISTS kturn, PUBLISH)",
        (
            Edit("local idle = redis.call('EXISTS', kturn) == 0", "local idle = false"),
            Edit("if wake then redis.call('PUBLISH', ARGV[4], '1') end\n", ""),
        ),
    ),
    Step(
        "pushed count",
        "stats() counts pushed messages (HINCRBY counts)",
        (Edit("if pushed > 0 then redis.call('HINCRBY', KEYS[12], 'pushed', pushed) end\n", ""),),
    ),
    Step(
        "epoch",
        "a push into a queue deleted or made anew is refused, GONE (GET epoch)",
        (
            Edit(
                "local refused = gone(KEYS[13], ARGV[1])\nif refused then return refused end\n", ""
            ),
        ),
    ),
    Step(
        "bounds",
        "a call carrying more than dynoq sends is refused before any write (int, fits)",
        (
            Edit(
                "local window, conc = int(ARGV[3], 0, MAX_MS)",
                "local window, conc = tonumber(ARGV[3]), tonumber(ARGV[5])\n",
                until="  return BOUNDS\nend\n",
            ),
        ),
    ),
    Step(
        "reply per message",
        "the caller learns which messages went in (ensure), not only how many",
        (Edit("\nreturn out", "\nreturn pushed"),),
    ),
    Step(
        "one copy per id",
        "a push replaces a stored message of the same id, and a call's repeated id goes "
        "in once (first_ids, HMGET msgs)",
        (
            Edit(
                "local ids, at = first_ids(items, from, 3, out)",
                "local ids, at = {}, {}  -- [bench] every message, none looked up\n"
                "  for i = 1, n do ids[i] = items[from + 3 * (i - 1)]; at[i] = i; out[i] = 0 end",
            ),
            Edit("local old = bulk_read('HMGET', msgs, ids)", "local old = {}"),
        ),
    ),
    Step(
        "enqueue time",
        "a record holds when it was pushed, by the server's clock (TIME, base 36)",
        (
            Edit("now_ms(), ARGV", "0, ARGV"),
            Edit("local enq = stamp(now)", "local enq = '0'"),
        ),
    ),
    Step(
        "seq",
        "a message's place in its key, for one given back (expired, retried) to go back "
        "before the later ones (INCRBY seq, a base-36 seq a message)",
        (
            Edit("local base = redis.call('INCRBY', seq, n) - n", "local base = 0"),
            Edit(
                "local seqs = kseqs(base + 1)",
                "local seqs = function() return 'a1' end  -- [bench] one seq for all",
            ),
        ),
    ),
    Step(
        "record header",
        "a message's key and seq read from its id alone (the record's '<enq>,0,0,K<len>:"
        "<key><seq>' header; raw keeps an owner hash instead)",
        (
            Edit(
                "recs[#recs + 1] = places[i + 3] .. ',0,0,K' .. kprefix(key) .. places[i + 4]"
                " .. places[i + 2]",
                "recs[#recs + 1] = places[i + 2]",
            ),
        ),
        readable=False,
    ),
    Step(
        "chain links",
        "each waiting message linked to its neighbours in kwait: any one removed (remove, "
        "replace, dead-letter) or put back at its place in O(1); a list per key instead",
        (
            Edit(
                "  local tails, after = {}, {}",
                LIST_PUSH,
                until="  bulk('HSET', kwait, links)\n",
            ),
        ),
        readable=False,
        chain=False,
    ),
    Step(
        "key state",
        "each key's in-flight and waiting counts and its chain's ends (kstate read, "
        "parsed, packed, written back): key_concurrency > 1, O(1) reports per key; "
        "a busy check (HEXISTS, as raw) instead",
        (
            Edit(
                "  local st = kload(K, order)\n",
                LIST_ONLY,
                until="  kstore(K, order, st, conc, holding)\nend\n",
            ),
        ),
        alone=False,
        readable=False,
        chain=False,
    ),
)


def variant(steps: Sequence[Step]) -> str:
    """The shipped kpush text with ``steps`` taken out, in order."""
    text = SHIPPED
    for step in steps:
        for edit in step.edits:
            text = edit.apply(text)
    return text


@dataclass(frozen=True)
class Variant:
    label: str
    kind: str  # "raw", "kpush", "alone", "ladder"
    source: str
    readable: bool = True
    chain: bool = True
    step: Step | None = None


def variants() -> list[Variant]:
    out = [
        Variant("raw groups push", "raw", RAW_PUSH),
        Variant("kpush as shipped", "kpush", SHIPPED),
    ]
    for i, step in enumerate(STEPS):
        done = STEPS[: i + 1]
        out.append(
            Variant(
                f"- {step.name} (ladder)",
                "ladder",
                variant(done),
                all(s.readable for s in done),
                all(s.chain for s in done),
                step,
            )
        )
        if step.alone and i > 0:  # the first step alone is its ladder row
            out.append(
                Variant(
                    f"- {step.name} alone",
                    "alone",
                    variant([step]),
                    step.readable,
                    step.chain,
                    step,
                )
            )
    return out


@dataclass
class Corpus:
    """The messages of a case, in push order: (id, key, body, payload)."""

    keys: int
    per_key: int
    items: list[tuple[str, str, bytes, bytes]] = field(default_factory=list)

    @classmethod
    def make(cls, keys: int, per_key: int) -> Corpus:
        c = cls(keys, per_key)
        pad = os.urandom(47).hex().encode()
        for i in range(per_key):
            for k in range(keys):
                payload = b"%05d|" % i + pad  # 100 bytes, its place in its key first
                o = codec.prepare(
                    dynoq.Message(payload, key=f"key-{k}"), ordered="key", limit=1 << 20
                )
                c.items.append((o.id, o.routing, o.body, payload))
        return c

    @property
    def n(self) -> int:
        return len(self.items)


class Target:
    """A fresh keyed queue of one shard (its epoch stored) and what a variant writes."""

    def __init__(self, url: str) -> None:
        self.prefix = f"bkp-{uuid.uuid4().hex[:8]}"
        self.client = dynoq.connect(url, prefix=self.prefix)
        self.q = self.client.queue("g", shards=1, ordered="key")
        # dynoq's own KEYS and fixed ARGV, in the mode push_many gives ids it made
        # ("ensure": a call resent after a dropped connection replaces nothing)
        made = codec.prepare(dynoq.Message(b"", key="k"), ordered="key", limit=1 << 20)
        empty = self.q.ops.push_call(self.q.ops.mode_of(made), 0, [])
        self.keys: list[str] = list(empty.keys)
        self.fixed: list[Any] = list(empty.args)
        self.raw = RawGroups(self.client.redis, f"{self.prefix}-raw")

    def drop(self) -> None:
        drop_prefix(self.client.redis, self.prefix + ":")
        self.raw.drop()
        self.client.close()


def calls(v: Variant, t: Target, corpus: Corpus, batch: int) -> list[tuple[list[str], list[Any]]]:
    """The (KEYS, ARGV) of each call pushing ``corpus`` ``batch`` messages a call."""
    out = []
    for i in range(0, corpus.n, batch):
        part = corpus.items[i : i + batch]
        if v.kind == "raw":
            out.append((t.raw.keys[:3], [x for m in part for x in (m[1], m[0], m[2])]))
        else:
            out.append((t.keys, t.fixed + [x for m in part for x in m[:3]]))
    return out


def check(v: Variant, t: Target, corpus: Corpus) -> None:
    """The messages are where the variant's layout keeps them (AssertionError if not)."""
    r = t.client.redis
    msgs, kwait, kturn, kstate = t.keys[:4]
    if v.kind == "raw":
        msgs, kturn = t.raw.keys[0], t.raw.keys[1]
    assert r.hlen(msgs) == corpus.n, (v.label, "msgs", r.hlen(msgs))
    assert r.zcard(kturn) == corpus.keys, (v.label, "turns", r.zcard(kturn))
    if v.kind == "raw":
        owner = t.raw.keys[2]
        lists = [f"{owner}:k:key-{k}" for k in (0, corpus.keys - 1)]
    elif v.chain:
        assert r.hlen(kwait) == corpus.n, (v.label, "links", r.hlen(kwait))
        assert r.hlen(kstate) == corpus.keys, (v.label, "key states", r.hlen(kstate))
        lists = []
    else:
        lists = [f"{kwait}:key-{k}" for k in (0, corpus.keys - 1)]
    for name in lists:
        assert r.llen(name) == corpus.per_key, (v.label, name, r.llen(name))
    if v.readable and v.kind != "raw":
        got = t.q.pop(min(100, corpus.keys))
        assert len(got) == min(100, corpus.keys), (v.label, "popped", len(got))
        assert len({m.key for m in got}) == len(got), (v.label, "one head a key")
        assert all(m.payload[:6] == b"00000|" for m in got), (v.label, "each key's first")


def run_variant(
    r: redis.Redis, url: str, v: Variant, corpus: Corpus, batch: int, pipelined: bool
) -> tuple[float, float, float, float]:
    """Server µs, script µs, client µs, wall µs a message of pushing ``corpus``."""
    t = Target(url)
    try:
        sha = r.script_load(v.source)
        work = calls(v, t, corpus, batch)
        if pipelined:

            def go() -> None:
                for i in range(0, len(work), PIPELINE):
                    p = r.pipeline(transaction=False)
                    for keys, args in work[i : i + PIPELINE]:
                        p.evalsha(sha, len(keys), *keys, *args)
                    p.execute()
        else:

            def go() -> None:
                for keys, args in work:
                    r.evalsha(sha, len(keys), *keys, *args)

        got = measure(r, corpus.n, go)
        check(v, t, corpus)
        return got
    finally:
        t.drop()


def client_side(
    r: redis.Redis, url: str, corpus: Corpus, batch: int, single_n: int
) -> dict[str, tuple[float, ...]]:
    """Server and this process's CPU a push through dynoq's client and the raw one's."""
    out: dict[str, tuple[float, ...]] = {}
    msgs = [dynoq.Message(m[3], key=m[1]) for m in corpus.items]
    pairs = [(m[1], m[3]) for m in corpus.items]
    t = Target(url)
    try:
        out["dynoq push_many"] = measure(
            r,
            corpus.n,
            lambda: [t.q.push_many(msgs[i : i + batch]) for i in range(0, corpus.n, batch)],
        )
        assert r.hlen(t.keys[0]) == corpus.n
        push = t.raw._push

        def raw_many() -> None:
            for i in range(0, corpus.n, batch):
                push(
                    keys=t.raw.keys[:3],
                    args=[x for k, p in pairs[i : i + batch] for x in (k, new_id(), p)],
                )

        out["raw push, batched"] = measure(r, corpus.n, raw_many)
        assert r.hlen(t.raw.keys[0]) == corpus.n
    finally:
        t.drop()
    t = Target(url)
    try:
        few = pairs[:single_n]
        out["dynoq push (one a call)"] = measure(
            r, len(few), lambda: [t.q.push(p, key=k) for k, p in few]
        )
        push = t.raw._push
        out["raw push (one a call)"] = measure(
            r, len(few), lambda: [push(keys=t.raw.keys[:3], args=[k, new_id(), p]) for k, p in few]
        )
        assert r.hlen(t.raw.keys[0]) == len(few)
    finally:
        t.drop()
    return out


@dataclass
class Results:
    """Per case, per variant label: one (server, scripts, client, wall) a round."""

    version: str = ""
    cases: dict[str, dict[str, list[tuple[float, ...]]]] = field(default_factory=dict)
    variants: dict[str, Variant] = field(default_factory=dict)


CASES = ("batch", "single", "hot", "client")


def run(
    url: str,
    keys: int,
    per_key: int,
    batch: int = 100,
    repeats: int = 5,
    cases: Sequence[str] = CASES,
    single_n: int = 5000,
    seed: int = 1,
) -> Results:
    res = Results()
    vs = variants()
    res.variants = {v.label: v for v in vs}
    ladder = [v for v in vs if v.kind != "alone"]
    r = redis.Redis.from_url(url)
    res.version = server_version(r)
    big = Corpus.make(keys, per_key)
    hot = Corpus.make(1, max(1, keys * per_key // 10))
    rng = random.Random(seed)
    plan: list[tuple[str, Corpus, list[Variant], int, bool]] = []
    for case in cases:
        if case == "batch":
            plan.append((case, big, vs, batch, False))
        elif case == "single":
            plan.append((case, big, ladder, 1, True))
        elif case == "hot":
            plan.append((case, hot, ladder, batch, False))
    try:
        for _ in range(repeats):
            for case, corpus, chosen, size, pipelined in plan:
                got = res.cases.setdefault(case, {})
                for v in rng.sample(chosen, len(chosen)):
                    got.setdefault(v.label, []).append(
                        run_variant(r, url, v, corpus, size, pipelined)
                    )
            if "client" in cases:
                got = res.cases.setdefault("client", {})
                for label, value in client_side(r, url, big, batch, single_n).items():
                    got.setdefault(label, []).append(value)
    finally:
        r.close()
    return res


def _spread(xs: list[float]) -> str:
    return f"{min(xs):.2f}-{max(xs):.2f}"


def ladder_table(res: Results, case: str, column: int = 0) -> list[tuple[str, ...]]:
    """Rows: variant | server µs a push (median, range) | saving (median of the rounds'
    differences from the rung above, or from the shipped script for "alone") | share of
    the gap kpush - raw | µs in scripts (commandstats)."""
    got = res.cases[case]
    rounds = len(got["kpush as shipped"])

    def at(label: str, i: int) -> float:
        return got[label][i][column]

    gap = [at("kpush as shipped", i) - at("raw groups push", i) for i in range(rounds)]
    g = median(gap)
    rows: list[tuple[str, ...]] = [
        ("variant", "server µs a push", "range", "saving (µs)", "share of gap", "in scripts")
    ]

    def row(label: str, saving: list[float] | None) -> None:
        xs = [x[column] for x in got[label]]
        scripts = median([x[1] for x in got[label]])
        s = "" if saving is None else f"{median(saving):+.2f}"
        share = "" if saving is None or not g else f"{100 * median(saving) / g:.0f} %"
        rows.append((label, f"{median(xs):.2f}", _spread(xs), s, share, f"{scripts:.2f}"))

    row("raw groups push", None)
    row("kpush as shipped", None)
    prev = "kpush as shipped"
    for step in STEPS:
        label = f"- {step.name} (ladder)"
        if label not in got:
            continue
        row(label, [at(prev, i) - at(label, i) for i in range(rounds)])
        prev = label
    rest = [at(prev, i) - at("raw groups push", i) for i in range(rounds)]
    rows.append(
        (
            "left: last rung - raw",
            "",
            "",
            f"{median(rest):+.2f}",
            f"{100 * median(rest) / g:.0f} %" if g else "",
            "",
        )
    )
    rows.append(("gap: kpush - raw", "", _spread(gap), f"{g:+.2f}", "100 %", ""))
    for step in STEPS[1:]:
        label = f"- {step.name} alone"
        if label in got:
            row(label, [at("kpush as shipped", i) - at(label, i) for i in range(rounds)])
    return rows


def client_table(res: Results) -> list[tuple[str, ...]]:
    got = res.cases["client"]
    rows: list[tuple[str, ...]] = [
        ("push", "client µs a push", "range", "server µs a push", "range")
    ]
    for label, xs in got.items():
        c, s = [x[2] for x in xs], [x[0] for x in xs]
        rows.append((label, f"{median(c):.2f}", _spread(c), f"{median(s):.2f}", _spread(s)))
    return rows


def report(res: Results, keys: int, per_key: int, batch: int, repeats: int) -> str:
    out = [
        f"server {res.version}, medians of {repeats} rounds (µs a message; saving: the "
        "median of the per-round differences)"
    ]
    titles = {
        "batch": f"batched: {keys:,} keys x {per_key} messages, {batch} a call",
        "single": f"single: {keys:,} keys x {per_key} messages, one a call "
        f"({PIPELINE} calls a round trip)",
        "hot": f"one key: {max(1, keys * per_key // 10):,} messages, {batch} a call",
    }
    for case, title in titles.items():
        if case in res.cases:
            out += ["", title, table(ladder_table(res, case))]
    out += ["", "steps (what taking each out gives up):"]
    out += [f"  {step.name}: {step.guarantee}" for step in STEPS]
    if "client" in res.cases:
        out += [
            "",
            f"client side: {batch} a call, and one a call unpipelined",
            table(client_table(res)),
        ]
    return "\n".join(out)


def main() -> None:
    p = parser(__doc__ or "")
    p.set_defaults(repeats=5)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--per-key", type=int, default=10)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--single-n", type=int, default=5000)
    p.add_argument("--cases", default=",".join(CASES))
    args = p.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    assert set(cases) <= set(CASES), f"cases: {CASES}"
    with server_url(args.url) as url:
        res = run(url, args.keys, args.per_key, args.batch, args.repeats, cases, args.single_n)
    print(report(res, args.keys, args.per_key, args.batch, args.repeats))


if __name__ == "__main__":
    main()
