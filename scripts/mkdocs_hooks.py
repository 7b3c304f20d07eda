"""MkDocs hooks of the documentation site (mkdocs.yml).

The docstrings cross-reference in Sphinx's roles (``:meth:`push```), which mkdocstrings
renders as Markdown: the role's name would be printed before the code. Keep the code."""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:meth|func|class|attr|data|exc|mod|obj):(?=<code>)")


def on_page_content(html: str, **_: Any) -> str:
    return _ROLE.sub("", html)
