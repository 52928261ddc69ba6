"""The book's repository switch, read from ``_config.yml`` (the one place the URL and the switch live).

``repository.url`` names the repository; ``repository.public`` (default ``false``) says whether it is
published. While it is not, no page links to Binder, Colab or the repository (`tfbook.build.sphinx_repository`
removes the buttons) and the notebooks' install cell installs nothing (`tfbook.build.notebooks`). Turned on,
the launch buttons, the repository button and the install-from-repository cell appear as configured.
"""
from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Optional

ROOT = pathlib.Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Repository:
    url: str
    public: bool


def settings(config: Optional[pathlib.Path] = None) -> Repository:
    """``repository.url`` (an https URL, or absent) and ``repository.public`` (a boolean, default false;
    true needs a URL) from ``_config.yml``."""
    import yaml

    path = config or ROOT / "_config.yml"
    section = (yaml.safe_load(path.read_text()) or {}).get("repository", {}) or {}
    url, public = section.get("url", ""), section.get("public", False)
    if not isinstance(public, bool):
        raise ValueError(f"repository.public in {path} must be true or false, got {public!r}")
    if not isinstance(url, str) or not (url.startswith("https://") or (url == "" and not public)):
        raise ValueError(f"repository.url in {path} must be an https URL, got {url!r}")
    return Repository(url.rstrip("/"), public)
