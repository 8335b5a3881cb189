"""The docs keep up with the code: every setting is documented, every doc the README links
to exists, the CHANGELOG names the version being built."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tocsin import __version__
from tocsin.config import Settings

ROOT = Path(__file__).resolve().parent.parent


def test_every_setting_is_in_the_configuration_doc() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    missing = [f"TOCSIN_{name.upper()}" for name in Settings.model_fields
               if f"`TOCSIN_{name.upper()}`" not in text]
    assert missing == [], f"docs/configuration.md lacks {missing}"


def test_the_readme_links_only_to_docs_that_exist() -> None:
    links = re.findall(r"\]\((docs/[^)#]+)", (ROOT / "README.md").read_text())
    assert links and [link for link in links if not (ROOT / link).exists()] == []


def test_the_changelog_starts_with_this_version() -> None:
    """pyproject.toml, ``tocsin.__version__`` and the CHANGELOG's newest entry agree."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    newest = re.search(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert newest is not None and newest.group(1) == project == __version__
