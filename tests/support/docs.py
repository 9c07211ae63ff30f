"""The code of the docs, for the tests that run it as written."""

from __future__ import annotations

import re

from .processes import ROOT


def section_code(title: str, page: str = "integrations.md") -> str:
    """The first python block of the ``## title`` section of docs/``page``."""
    text = (ROOT / "docs" / page).read_text()
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, f"no python example under ## {title} in {page}"
    return match[1]
