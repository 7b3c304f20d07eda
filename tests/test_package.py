"""What a package index and a user get: the sdist and the wheel built as a release would be
(`python -m build`, isolated, from the repository's files alone), `twine check`, what each
holds, and the wheel installed into a fresh venv outside the checkout running the README's
quick start. One build for the module (an xdist group: one worker)."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
HOME = PYPROJECT["project"]["urls"]["Homepage"]

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("package"), pytest.mark.timeout(900)]


def run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=800
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def repository_files() -> list[str]:
    """The files a fresh clone has (tracked, or new and not ignored): what a release is
    built from, without the checkout's .venv, build/ or egg-info."""
    out = run("git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", cwd=ROOT)
    return [f for f in out.split("\0") if f and (ROOT / f).is_file()]


class Dists:
    def __init__(self, base: Path) -> None:
        src = base / "src"
        for name in repository_files():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
        build = (sys.executable, "-m", "build", "--outdir")
        # No flag: the sdist, then the wheel built from that sdist (as an index's users and
        # distributions rebuild it); --wheel: the wheel straight from the source tree.
        run(*build, base / "dist", src)
        run(*build, base / "direct", "--wheel", src)
        self.sdist = base / "dist" / f"dynoq-{VERSION}.tar.gz"
        self.wheel = base / "dist" / f"dynoq-{VERSION}-py3-none-any.whl"
        self.direct = base / "direct" / self.wheel.name


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    return Dists(tmp_path_factory.mktemp("package"))


def wheel_files(wheel: Path) -> dict[str, str]:
    """Each file of a wheel and its hash as RECORD states it (RECORD itself excluded)."""
    with zipfile.ZipFile(wheel) as zf:
        record = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
        out = {}
        for line in zf.read(record).decode().splitlines():
            name, digest, _ = line.rsplit(",", 2)
            if name != record:
                data = zf.read(name)
                got = (
                    "sha256="
                    + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                )
                assert got == digest, name
                out[name] = digest
        return out


def metadata(wheel: Path) -> Any:
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read(f"dynoq-{VERSION}.dist-info/METADATA").decode()
    return HeaderParser().parsestr(text)


def test_twine_check_passes(dists: Dists) -> None:
    out = run(sys.executable, "-m", "twine", "check", "--strict", dists.sdist, dists.wheel)
    assert out.count("PASSED") == 2, out


def test_the_sdist_builds_a_wheel_with_the_same_files(dists: Dists) -> None:
    assert wheel_files(dists.wheel) == wheel_files(dists.direct)


def test_the_wheel_holds_the_license_and_every_file_of_the_package(dists: Dists) -> None:
    files = set(wheel_files(dists.wheel))
    with zipfile.ZipFile(dists.wheel) as zf:
        license_text = zf.read(f"dynoq-{VERSION}.dist-info/licenses/LICENSE").decode()
    assert license_text == (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    package = {f for f in repository_files() if f.startswith("dynoq/")}
    assert package, "no package files found"
    assert package <= files, sorted(package - files)  # every script, template, py.typed
    assert not {f for f in files if not f.startswith(("dynoq/", f"dynoq-{VERSION}.dist-info/"))}


def test_the_sdist_holds_the_license_and_changelog_and_no_tests(dists: Dists) -> None:
    with tarfile.open(dists.sdist) as tf:
        names = {n.partition("/")[2] for n in tf.getnames()}
    assert {"LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml"} <= names
    assert "dynoq/lua/push-11.lua" in names
    # tests/ read docs/, examples/ and benchmarks/: they run from a checkout, not from here
    assert not {n for n in names if n.startswith("tests/")}


def test_metadata_is_complete(dists: Dists) -> None:
    meta = metadata(dists.wheel)
    assert meta["Version"] == VERSION
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["License-File"] == "LICENSE"
    assert meta["Author"] == "dynoq developers"
    assert "delay queue" in meta["Keywords"]
    classifiers = meta.get_all("Classifier")
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: 3.10" in classifiers
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert urls["Homepage"] == HOME and urls["Source"] == HOME
    assert set(urls) >= {"Documentation", "Issues", "Changelog"}


LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)")  # [text](target), ![alt](src)
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)  # [name]: target
HTML = re.compile(r"""\b(?:src|href)\s*=\s*["']([^"']+)""", re.I)


def relative_targets(markdown: str) -> list[str]:
    targets = [*LINK.findall(markdown), *REFERENCE.findall(markdown), *HTML.findall(markdown)]
    return [t for t in targets if not re.match(r"https?://", t)]


def test_the_long_description_has_no_relative_link_or_image(dists: Dists) -> None:
    meta = metadata(dists.wheel)
    assert meta["Description-Content-Type"] == "text/markdown"
    body = meta.get_payload()
    assert body.strip() == (ROOT / "README.md").read_text().strip()
    assert "](" in body and "![" in body  # the links and the screenshot are still there
    assert relative_targets(body) == []


def test_relative_targets_are_found() -> None:
    md = (
        "[a](docs/queue.md) ![b](docs/x.png) [c](#install) [d](https://x.org/a)\n"
        '[e]: examples/\n<img src="docs/y.png"> <a href="http://x.org">x</a>'
    )
    assert relative_targets(md) == [
        "docs/queue.md",
        "docs/x.png",
        "#install",
        "examples/",
        "docs/y.png",
    ]


def readme_quick_start() -> str:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    [quick] = [b for b in blocks if b.startswith('"""Quick start')]
    return quick


def test_the_wheel_installs_into_a_fresh_venv_and_runs_the_quick_start(
    dists: Dists, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    # The dependencies come from the configured index (or pip's cache); dynoq from the wheel.
    run(python, "-m", "pip", "install", "-q", f"{dists.wheel}[embedded]")
    work = tmp_path / "work"  # outside the checkout: nothing of it on the path
    work.mkdir()
    (work / "quickstart.py").write_text(readme_quick_start())
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "DYNOQ_URL", "DYNOQ_PREFIX", "VIRTUAL_ENV")
    }
    where = run(
        python, "-c", "import dynoq; print(dynoq.__version__, dynoq.__file__)", cwd=work, env=env
    ).split()
    assert where[0] == VERSION
    assert Path(where[1]).is_relative_to(venv), where
    out = run(python, "quickstart.py", cwd=work, env=env)
    assert "event shipped of order 42" in out, out
    assert out.index("got {'order': 7, 'vip': True}") < out.index("got {'order': 8}"), out
    assert "Usage: dynoq" in run(venv / "bin" / "dynoq", "--help", cwd=work, env=env)
