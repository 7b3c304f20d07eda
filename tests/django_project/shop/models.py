from django.db import models


class Order(models.Model):
    ref = models.CharField(max_length=50, unique=True)


class Run(models.Model):
    """One row per run of a task that records its runs (exactly-once checks)."""

    task = models.CharField(max_length=50)
    ref = models.CharField(max_length=50)
