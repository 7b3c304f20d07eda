"""The reference pages name every option and command, so they cannot fall behind."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import click

import dynoq
from dynoq.cli import cli

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_every_consumer_option_is_documented() -> None:
    page = (DOCS / "consumer.md").read_text()
    for field in dataclasses.fields(dynoq.ConsumerSettings):
        assert f"`{field.name}`" in page, field.name


def test_every_queue_and_topic_setting_is_documented() -> None:
    queue, topics = (DOCS / "queue.md").read_text(), (DOCS / "topics.md").read_text()
    for field in dataclasses.fields(dynoq.QueueSettings):
        assert f"`{field.name}`" in queue, field.name
    for field in dataclasses.fields(dynoq.TopicSettings):
        assert f"`{field.name}`" in topics, field.name


def test_every_public_queue_method_is_documented() -> None:
    page = (DOCS / "queue.md").read_text()
    for name in dir(dynoq.Queue):
        if not name.startswith("_") and callable(getattr(dynoq.Queue, name)):
            assert f"`{name}(" in page or f" {name}(" in page or f"`{name}" in page, name


def test_every_command_is_documented() -> None:
    page = (DOCS / "cli.md").read_text()
    for name in cli.commands:
        assert f"`{name}" in page, name


def _commands(group: click.Group) -> Iterator[click.Command]:
    for command in group.commands.values():
        yield command
        if isinstance(command, click.Group):
            yield from _commands(command)


def test_every_command_option_is_documented() -> None:
    page = (DOCS / "cli.md").read_text()
    for command in [cli, *_commands(cli)]:
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                for opt in [*param.opts, *param.secondary_opts]:
                    if opt not in ("-h", "--help"):
                        assert f"`{opt}" in page or f" {opt} " in page or f"[{opt}" in page, (
                            command.name,
                            opt,
                        )


def test_every_spark_data_source_option_is_documented() -> None:
    from dynoq.spark import datasource

    page = (DOCS / "spark.md").read_text().lower()
    for name in datasource._TARGET | datasource._WRITE | datasource._READ:
        assert f"| `{name}` |" in page, name
