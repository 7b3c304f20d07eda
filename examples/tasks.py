"""Tasks: call a function later, on any worker (Celery's ``.delay()``, on dynoq's queues).

    python examples/tasks.py        # a private server, or the one in $DYNOQ_URL

A real deployment runs the worker as a service instead of the ``with`` block below:
``dynoq worker --tasks examples.tasks:tasks`` (from the repository's root).
"""

import os

import dynoq

client = dynoq.connect(os.environ.get("DYNOQ_URL", "embedded://"), prefix="tasks-demo")
tasks = dynoq.Tasks(client, queue="emails")
attempts: dict[str, int] = {}


@tasks.task(name="emails.send", keep_result=60, max_retries=3, retry_delays=(0.1,))
def send_email(to: str, subject: str) -> dict:
    attempts[to] = attempts.get(to, 0) + 1
    if to.endswith("@flaky.example.org") and attempts[to] < 2:
        raise ConnectionError("SMTP server busy")  # retried 0.1 s later
    return {"to": to, "subject": subject, "attempt": attempts[to]}


@tasks.task(name="reports.build", queue="reports", keep_result=60)
def build_report(day: str) -> str:
    return f"report of {day}"


if __name__ == "__main__":
    with client:
        sent = [
            send_email.delay(to, subject="welcome")
            for to in ("ann@example.org", "bob@flaky.example.org", "cy@example.org")
        ]
        report = build_report.apply(("2026-11-24",), id="report-2026-11-24", delay=3600)
        build_report.apply(("2026-11-24",), id="report-2026-11-24")  # sent once: same id
        print("before the worker:", [str(h.status()) for h in sent], report.status())
        cancelled = build_report.apply(("2026-11-25",), delay=3600)
        cancelled.cancel()  # it will never run
        report.reschedule(delay=0)  # due now instead of in an hour

        with tasks.worker(concurrency=4):  # one consumer per queue: emails, reports
            results = [h.result(timeout=30) for h in sent]
            print("report:", report.result(timeout=30))
        print(
            f"sent {len(results)} emails;",
            "retried:",
            [r["to"] for r in results if r["attempt"] > 1],
        )
        print("after:", [str(h.status()) for h in sent], cancelled.status())
        for q in (tasks.queue("emails"), tasks.queue("reports")):
            q.clear()
