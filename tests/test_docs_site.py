"""The documentation site (mkdocs.yml): built with warnings as errors, holding every page
of docs/, the API reference of every public name of dynoq, dynoq.asyncio and dynoq.spark
and the CLI reference of every command; then served and opened in a real headless
Chromium (Debian's, driven by Playwright): pages render, search finds "ordered", and the
API entry of Queue.push is reached by following links from the home page."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from dashboard_kit import BROWSER_ARGS, chromium

import dynoq
import dynoq.asyncio
import dynoq.spark
from dynoq.cli import cli

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
WAIT_MS = 15_000

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("docs-site")]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    assert "WARNING" not in done.stderr, done.stderr[-6000:]
    return out


def anchors(site: Path, page: str) -> set[str]:
    return set(re.findall(r'id="([^"]+)"', (site / page / "index.html").read_text()))


def test_every_page_of_docs_is_in_the_site(site: Path) -> None:
    for page in PAGES:
        built = site / ("" if page == "index" else page) / "index.html"
        assert built.is_file(), page
        title = (ROOT / "docs" / f"{page}.md").read_text().partition("\n")[0].lstrip("# ")
        assert f">{title}<" in built.read_text().replace("&para;", ""), (page, title)
    for shot in (ROOT / "docs" / "screenshots").glob("*.png"):
        assert (site / "screenshots" / shot.name).read_bytes() == shot.read_bytes()


def test_reference_has_a_page_and_the_home_page_names_every_guide_page(site: Path) -> None:
    # Before, /reference/ was a 404 and the home page named neither message groups nor
    # transactions.
    reference = (site / "reference" / "index.html").read_text()
    for page in ("dynoq", "asyncio", "spark", "cli"):
        assert f'href="{page}/"' in reference, page
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    [guide] = [entry["Guide"] for entry in nav if "Guide" in entry]
    home = (ROOT / "docs" / "index.md").read_text()
    for entry in guide:
        [(title, page)] = entry.items()
        assert f"]({page})" in home, title


# Imported by dynoq.spark on first use (they need pyspark): documented under their module.
LAZY = {
    "DynoqDataSource": "datasource",
    "register": "datasource",
    "queue_dataframe": "datasource",
    "spark_session": "session",
    "stream_stats": "stream",
}


@pytest.mark.parametrize(
    "module,page", [(dynoq, "dynoq"), (dynoq.asyncio, "asyncio"), (dynoq.spark, "spark")]
)
def test_every_public_name_has_an_api_entry(site: Path, module: Any, page: str) -> None:
    found = anchors(site, f"reference/{page}")
    text = (site / "reference" / page / "index.html").read_text()
    assert not re.search(r":(?:meth|func|class|attr|exc):<code>", text)  # roles stripped
    for name in module.__all__:
        where = module.__name__ + (f".{LAZY[name]}" if name in LAZY else "")
        assert f"{where}.{name}" in found, name
    assert "dynoq.Queue.push" in anchors(site, "reference/dynoq")
    assert "dynoq.asyncio.Queue.push" in anchors(site, "reference/asyncio")


def test_every_command_has_a_cli_entry(site: Path) -> None:
    found = anchors(site, "reference/cli")
    for name, command in cli.commands.items():
        assert f"dynoq-{name}" in found, name
        for sub in getattr(command, "commands", {}):
            assert f"dynoq-{name}-{sub}" in found, (name, sub)


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=site))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def page(served: str) -> Iterator[Any]:
    if chromium() is None:
        pytest.skip("no Chromium found: apt-get install chromium (or set DYNOQ_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), headless=True, args=BROWSER_ARGS)
        context = browser.new_context(viewport={"width": 1600, "height": 1000})
        # The site must work offline: a request anywhere else is refused.
        context.route(re.compile(r"^(?!" + re.escape(served) + ").*"), lambda route: route.abort())
        tab = context.new_page()
        tab.set_default_timeout(WAIT_MS)
        yield tab
        browser.close()


def test_every_page_renders(page: Any, served: str) -> None:
    errors: list[str] = []
    outside: set[str] = set()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("response", lambda r: r.status < 400 or errors.append(f"{r.status}: {r.url}"))
    # (a request of ours cut short by the next page's load is not a failure)
    page.on(
        "requestfailed",
        lambda req: (
            (
                req.url.startswith(served)
                and req.failure != "net::ERR_ABORTED"
                and errors.append(f"request failed: {req.url}: {req.failure}")
            )
            or req.url.startswith(served)
            or outside.add(req.url.split("/")[2])
        ),
    )
    for name in [
        *PAGES,
        "reference",
        "reference/dynoq",
        "reference/asyncio",
        "reference/spark",
        "reference/cli",
    ]:
        page.goto(served + ("" if name == "index" else f"{name}/"))
        heading = page.locator("article h1").first
        assert heading.is_visible(), name
        assert heading.inner_text().strip(), name
        assert page.locator("nav.md-nav--primary a").count() >= 20, name
    assert errors == []
    # Only the repository link's star count is asked of anywhere else (and the page
    # renders without it): fonts, scripts and styles are the site's own.
    assert outside <= {"api.github.com"}, outside


def test_search_finds_ordered(page: Any, served: str) -> None:
    page.goto(served)
    search = page.locator("input.md-search__input")
    search.click()
    search.press_sequentially("ordered")
    results = page.locator(".md-search-result__item")
    results.first.wait_for()
    assert results.count() >= 3
    assert "ordered" in page.locator(".md-search-result").inner_text().lower()
    # A result opens its page (or section). Not compared with an href read before the
    # click: the list may be drawn again meanwhile (the search runs in a worker, once a
    # key), and its first result then is another link.
    results.first.locator("a").first.click()
    page.wait_for_function("home => location.href !== home", arg=served)
    assert page.url.startswith(served)
    assert "ordered" in page.locator("article").inner_text().lower()


def test_the_api_entry_of_queue_push_is_reached_from_the_home_page(page: Any, served: str) -> None:
    page.goto(served)
    page.locator("article a", has_text="API reference").first.click()
    page.wait_for_url(served + "reference/dynoq/")
    # the page's table of contents, on the right
    page.locator('a.md-nav__link[href="#dynoq.Queue.push"]').filter(visible=True).click()
    page.wait_for_url(served + "reference/dynoq/#dynoq.Queue.push")
    entry = page.locator('[id="dynoq.Queue.push"]')
    assert entry.is_visible() and entry.bounding_box() is not None
    body = entry.locator("xpath=following-sibling::div[1]")
    assert "push" in (entry.inner_text() + body.inner_text()).lower()
    assert "payload" in body.inner_text()  # the signature and its docstring
