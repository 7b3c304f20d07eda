"""The outbox: one row per task enqueued inside a database transaction, written in that
transaction. The row exists if and only if the transaction committed, so the worker's
checker can settle a prepared message its producer left undecided (it died between the
commit and the send)."""

from __future__ import annotations

from django.db import models


class Outbox(models.Model):
    # The task's result id: the prepared message's id in Redis.
    id = models.CharField(primary_key=True, max_length=64)
    queue = models.CharField(max_length=200)
    created = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        db_table = "dynoq_outbox"

    def __str__(self) -> str:
        return f"{self.queue}/{self.id}"
