"""The dashboard's only writes: replay dead letters (one, or all) and purge them; pause
and resume a queue; cancel a message.

Each is refused (403) unless the dashboard runs with ``--allow-actions`` and the form
carries the CSRF token of the browser's cookie (auth.Csrf); replaying all and purging
also need the queue's name typed in the confirmation form. After the change, the browser
is sent back (303) to the page it came from, which says what was done.
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..errors import InvalidArgument
from .auth import CSRF_FIELD
from .format import link
from .views import dash_of, mount_of, queue_of

MAX_FORM_IDS = 1000  # ids one replay form may name


async def _checked_form(request: Request) -> FormData:
    d = dash_of(request)
    if not d.config.allow_actions:
        raise HTTPException(403, "actions are off: start the dashboard with --allow-actions")
    form = await request.form(max_files=0, max_fields=MAX_FORM_IDS + 8)
    field = form.get(CSRF_FIELD)
    if not d.csrf.matches(request.state.csrf_cookie, field if isinstance(field, str) else None):
        raise HTTPException(
            403, "the form's CSRF token is missing or stale: reload the page and try again"
        )
    return form


def _confirmed(form: FormData, name: str) -> None:
    if form.get("confirm") != name:
        raise InvalidArgument(f"type the queue's name ({name!r}) to confirm")


async def replay(request: Request) -> Response:
    """Replay the dead letters named by ``id`` fields, or all of them (``all=1``, with the
    queue's name in ``confirm``)."""
    form = await _checked_form(request)
    name, q = await run_in_threadpool(queue_of, request)
    reader = dash_of(request).reader
    ids = [i for i in form.getlist("id") if isinstance(i, str) and i]
    if form.get("all") == "1":
        _confirmed(form, name)
        n = await run_in_threadpool(reader.replay, q, None)
        return _back(request, link("/queue/dead", q=name, done=f"replayed {n} dead letter(s)"))
    if not ids:
        raise InvalidArgument("name the dead letters to replay (id), or replay all")
    n = await run_in_threadpool(reader.replay, q, ids)
    done = (
        f"replayed {n} of {len(ids)} (the others were not dead letters)"
        if n < len(ids)
        else f"replayed {n} dead letter(s)"
    )
    return _back(request, link("/queue/dead", q=name, done=done))


async def purge(request: Request) -> Response:
    """Delete every dead letter of the queue for good (the queue's name in ``confirm``)."""
    form = await _checked_form(request)
    name, q = await run_in_threadpool(queue_of, request)
    _confirmed(form, name)
    n = await run_in_threadpool(dash_of(request).reader.purge, q)
    return _back(request, link("/queue/dead", q=name, done=f"purged {n} dead letter(s)"))


async def pause(request: Request) -> Response:
    """Pause the queue (``on=1``) or resume it (``on=0``)."""
    form = await _checked_form(request)
    on = form.get("on")
    if on not in ("0", "1"):
        raise InvalidArgument("say whether to pause (on=1) or resume (on=0)")
    name, q = await run_in_threadpool(queue_of, request)
    changed = await run_in_threadpool(dash_of(request).reader.pause, q, on == "1")
    state = "paused" if on == "1" else "resumed"
    done = state if changed else f"was {state} already"
    return _back(request, link("/queue", q=name, done=done))


async def cancel(request: Request) -> Response:
    """Cancel the message named by ``id``: off the queue if it waits, asked to stop if it
    runs (q.cancel)."""
    form = await _checked_form(request)
    msg_id = form.get("id")
    if not isinstance(msg_id, str) or not msg_id:
        raise InvalidArgument("name the message to cancel (id)")
    name, q = await run_in_threadpool(queue_of, request)
    done = await run_in_threadpool(dash_of(request).reader.cancel, q, msg_id)
    if not done:
        said = "it neither waits nor runs: nothing was cancelled"
        return _back(request, link("/queue/message", q=name, id=msg_id, done=said))
    return _back(request, link("/queue", q=name, done=f"cancelled {msg_id}"))


def _back(request: Request, url: str) -> Response:
    """See the page again, under the dashboard's mount point."""
    return RedirectResponse(mount_of(request) + url, status_code=303)
