"""The pages and their JSON (read-only). Each handler is a plain function: Starlette runs
it in its thread pool, where the sync client's blocking calls belong.

Names and ids travel in the query string (``/queue?q=orders``), never in the path: a
queue name or a message id may hold '/'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.templating import Jinja2Templates

from .._core import inspect
from ..backend import redact
from ..errors import InvalidArgument
from ..queue import Queue
from .auth import Csrf
from .config import DashboardConfig
from .data import LIST, SHARD_PAGE, Reader, stats_row
from .format import relative
from .sampler import Sampler

MAX_SHARDS_IN_OVERVIEW = 64  # per-shard numbers the overview shows per queue
KINDS = {"in_flight": "In flight", "delayed": "Delayed", "dead": "Dead letters"}


@dataclass
class Dash:
    """What every handler shares (on ``app.state.dash``)."""

    config: DashboardConfig
    reader: Reader
    sampler: Sampler
    templates: Jinja2Templates
    csrf: Csrf


def dash_of(request: Request) -> Dash:
    return request.app.state.dash  # type: ignore[no-any-return]


def render(request: Request, template: str, status: int = 200, **context: Any) -> Response:
    d = dash_of(request)
    client = d.reader.client
    now = context.pop("now", None)
    if now is None:
        now = d.reader.server_time()
    context.update(
        base=mount_of(request),
        prefix=client.prefix,
        server=redact(client.url),
        actions=d.config.allow_actions,
        csrf=request.state.csrf,
        now=now,
        rel=lambda at: relative(at, now),
        interval=d.config.interval,
    )
    return d.templates.TemplateResponse(request, template, context, status_code=status)


def mount_of(request: Request) -> str:
    """Where the dashboard is mounted in its host app ("" when served alone): the prefix
    of every link, form action and redirect it makes."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def queue_of(request: Request) -> tuple[str, Queue]:
    """The name the query's ?q= gives and its queue (404 when there is none here)."""
    name = request.query_params.get("q", "")
    q = dash_of(request).reader.queue(name) if name else None
    if q is None:
        raise HTTPException(404, f"no queue {name!r} under this prefix")
    return name, q


def _int(
    request: Request, key: str, default: int | None, low: int = 0, high: int = 2**53
) -> int | None:
    raw = request.query_params.get(key)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgument(f"{key} must be a whole number, got {raw!r}") from None
    if not low <= value <= high:
        raise InvalidArgument(f"{key} must be {low}..{high}, got {value}")
    return value


# -- overview ------------------------------------------------------------------------------


def overview_data(d: Dash) -> dict[str, Any]:
    """The overview's numbers, from the last sample."""
    snap = d.sampler.latest()
    queues: list[dict[str, Any]] = []
    for s in snap.sources.queues:
        st = snap.stats.get(s.name)
        if st is None:
            continue
        shards = [{"shard": sh.shard, **stats_row(sh)} for sh in st.shards[:MAX_SHARDS_IN_OVERVIEW]]
        oldest = [sh.oldest_ready_at for sh in st.shards if sh.oldest_ready_at is not None]
        queues.append(
            {
                "name": s.name,
                "topic": s.topic,
                "group": s.group,
                "mode": s.mode,
                "shards": s.shards,
                "ordered": s.ops.settings.ordered,
                "paused": st.paused,
                "oldest": None if not oldest else round(snap.at - min(oldest), 3),
                "per_shard": shards,
                **stats_row(st),
            }
        )
    totals = {k: sum(int(q[k]) for q in queues) for k in ("ready", "delayed", "in_flight", "dead")}
    return {
        "at": snap.at,
        "error": snap.error,
        "queues": queues,
        "totals": totals,
        "queue_count": snap.sources.queue_count,
        "topic_count": snap.sources.topic_count,
        "left_out": snap.sources.left_out,
        "unreadable": [{"name": n, "why": why} for n, why in snap.sources.unreadable],
    }


def overview(request: Request) -> Response:
    d = dash_of(request)
    data = overview_data(d)
    plain = [q for q in data["queues"] if q["topic"] is None]
    topics: dict[str, list[dict[str, Any]]] = {}
    for q in data["queues"]:
        if q["topic"] is not None:
            topics.setdefault(q["topic"], []).append(q)
    return render(
        request, "overview.html", data=data, plain=plain, topics=topics, now=data["at"] or None
    )


def api_overview(request: Request) -> Response:
    d = dash_of(request)
    return JSONResponse({**overview_data(d), "series": d.sampler.series()})


# -- one queue -----------------------------------------------------------------------------


def queue_page(request: Request) -> Response:
    d = dash_of(request)
    name, q = queue_of(request)
    first = _int(request, "shards_from", 0, high=q.settings.shards - 1) or 0
    first -= first % SHARD_PAGE
    stats = q.stats()
    shown = list(range(first, min(first + SHARD_PAGE, q.settings.shards)))
    leases = {s.shard: s for s in d.reader.leases(q, shown)} if _leased(q) else {}
    in_flight, more_in_flight = d.reader.page(q, "in_flight", shard=None)
    delayed, more_delayed = d.reader.page(q, "delayed", shard=None)
    groups, group_count = d.reader.groups(q, members=1, history=1)
    return render(
        request,
        "queue.html",
        name=name,
        q=q,
        stats=stats,
        shards=[stats.shards[i] for i in shown],
        leases=leases,
        first=first,
        shard_page=SHARD_PAGE,
        peek=d.reader.peek(q, LIST),
        in_flight=in_flight,
        more_in_flight=more_in_flight,
        delayed=delayed,
        more_delayed=more_delayed,
        groups=groups,
        group_count=group_count,
        leased=_leased(q),
        keys=d.reader.keys(q) if q.ops.keyed else None,
        key_list=LIST,
        prepared=d.reader.prepared(q) if stats.prepared else [],
        merged=min(q.settings.shards, inspect.MAX_MERGED_SHARDS),
        done=request.query_params.get("done"),
    )


def api_queue(request: Request) -> Response:
    d = dash_of(request)
    name, q = queue_of(request)
    first = _int(request, "shards_from", 0, high=q.settings.shards - 1) or 0
    stats = q.stats()
    return JSONResponse(
        {
            "queue": name,
            **stats_row(stats),
            "per_shard": [
                {"shard": s.shard, **stats_row(s)} for s in stats.shards[first : first + SHARD_PAGE]
            ],
            "series": d.sampler.series(name),
        }
    )


def list_page(request: Request) -> Response:
    """In-flight deliveries or delayed messages: the earliest of all shards, or one shard
    page by page."""
    d = dash_of(request)
    name, q = queue_of(request)
    kind = request.query_params.get("kind", "in_flight")
    if kind not in ("in_flight", "delayed"):
        raise InvalidArgument(f"kind must be in_flight or delayed, got {kind!r}")
    shard, offset, count = _paging(request, q)
    entries, more = d.reader.page(q, kind, shard=shard, offset=offset, count=count)
    return render(
        request,
        "list.html",
        name=name,
        q=q,
        kind=kind,
        title=KINDS[kind],
        entries=entries,
        more=more,
        shard=shard,
        offset=offset,
        count=count,
        merged=min(q.settings.shards, inspect.MAX_MERGED_SHARDS),
    )


def _paging(request: Request, q: Queue) -> tuple[int | None, int, int]:
    shard = _int(request, "shard", None, high=q.settings.shards - 1)
    offset = _int(request, "offset", 0) or 0
    count = _int(request, "count", 50, low=1, high=inspect.MAX_PAGE) or 50
    if shard is None and offset:
        raise InvalidArgument("choose a shard to page further than the first page")
    return shard, offset, count


def dead_page(request: Request) -> Response:
    d = dash_of(request)
    name, q = queue_of(request)
    shard, offset, count = _paging(request, q)
    wanted = request.query_params.get("id", "")
    found = d.reader.find(q, wanted) if wanted else None
    entries, more = d.reader.page(q, "dead", shard=shard, offset=offset, count=count)
    return render(
        request,
        "dead.html",
        name=name,
        q=q,
        entries=entries,
        more=more,
        shard=shard,
        offset=offset,
        count=count,
        wanted=wanted,
        found=found,
        dead_count=q.stats().dead,
        done=request.query_params.get("done"),
        merged=min(q.settings.shards, inspect.MAX_MERGED_SHARDS),
    )


def message_page(request: Request) -> Response:
    d = dash_of(request)
    name, q = queue_of(request)
    msg_id = request.query_params.get("id", "")
    found = d.reader.find(q, msg_id) if msg_id else None
    if found is None:
        raise HTTPException(404, f"no message {msg_id!r} in {name!r}")
    return render(
        request,
        "message.html",
        name=name,
        q=q,
        found=found,
        m=found.message,
        done=request.query_params.get("done"),
    )


def groups_page(request: Request) -> Response:
    d = dash_of(request)
    name, q = queue_of(request)
    groups, total = d.reader.groups(q, members=200, history=50)
    leases = (
        d.reader.leases(q, list(range(min(q.settings.shards, inspect.MAX_PAGE))))
        if _leased(q)
        else []
    )
    held: dict[str, list[int]] = {}
    for lease in leases:
        if lease.holder is not None:
            held.setdefault(lease.holder, []).append(lease.shard)
    return render(
        request,
        "groups.html",
        name=name,
        q=q,
        groups=groups,
        total=total,
        held=held,
        holds=_holds(q, held),
    )


def _leased(q: Queue) -> bool:
    """Consumed under shard leases: an ordered queue, but a keyed one (ordered="key",
    whose consumers take any key and no lease)."""
    return bool(q.settings.ordered) and not q.ops.keyed


def _holds(q: Queue, held: dict[str, list[int]]) -> Any:
    """The shards a member holds: the leases it holds (ordered queues; the lease token
    starts with the member's instance id), else its last recorded assignment."""

    def holds(view: inspect.GroupView, member: str) -> list[int] | None:
        if _leased(q):
            return held.get(member, [])
        last = next((r for r in view.history if r.member == member), None)
        return None if last is None else list(last.shards)

    return holds


def topic_page(request: Request) -> Response:
    d = dash_of(request)
    name = request.query_params.get("t", "")
    t = d.reader.topic(name) if name else None
    if t is None:
        raise HTTPException(404, f"no topic {name!r} under this prefix")
    targets = sorted(t.backend.drive(t.ops.targets()).items())
    shown = targets[:100]
    stats = {target: t.backend.run(t.ops.target_queue(target).stats()) for target, _ in shown}
    return render(
        request,
        "topic.html",
        name=name,
        t=t,
        subs=t.subscriptions(),
        targets=shown,
        target_count=len(targets),
        stats=stats,
    )


def _flow(request: Request) -> dict[str, Any]:
    """The flow the query's ?id= names (404 when it is unknown here)."""
    flow_id = request.query_params.get("id", "")
    found = dash_of(request).reader.flow(flow_id) if flow_id else None
    if found is None:
        raise HTTPException(404, f"no flow {flow_id!r} under this prefix (or it ended long ago)")
    return found


def flow_page(request: Request) -> Response:
    """A workflow: its status, result or failure, and its calls as a tree, live."""
    return render(request, "flow.html", flow=_flow(request))


def api_flow(request: Request) -> Response:
    return JSONResponse(_flow(request))


def confirm_page(request: Request) -> Response:
    """Ask before replaying or purging every dead letter of a queue."""
    d = dash_of(request)
    name, q = queue_of(request)
    action = request.query_params.get("action", "")
    if action not in ("replay", "purge"):
        raise InvalidArgument(f"action must be replay or purge, got {action!r}")
    if not d.config.allow_actions:
        raise HTTPException(403, "actions are off: start the dashboard with --allow-actions")
    return render(request, "confirm.html", name=name, q=q, action=action, dead_count=q.stats().dead)
