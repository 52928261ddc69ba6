"""Sphinx extension: no launch or repository buttons while ``repository.public`` is false.

Jupyter Book turns ``launch_buttons`` and ``html.use_repository_button`` of ``_config.yml`` into the
theme's options; this extension reads ``repository.public`` (`tfbook.build.repository.settings`) from the
built book's ``_config.yml`` and, while the repository is not published, clears the Binder and Colab
URLs and turns the repository, issues and edit buttons off, so no page links to a placeholder.
"""
from __future__ import annotations

import pathlib
from typing import Any

from tfbook.build.repository import settings


def hide_unpublished_buttons(app, config) -> None:
    path = pathlib.Path(app.srcdir) / "_config.yml"
    if not path.exists() or settings(path).public:
        return
    options: dict[str, Any] = dict(config.html_theme_options or {})
    launch = dict(options.get("launch_buttons") or {})
    options["launch_buttons"] = {k: ("" if k.endswith("_url") else (False if k == "thebe" else v))
                                 for k, v in launch.items()}
    options.update(use_repository_button=False, use_issues_button=False, use_edit_page_button=False,
                   use_source_button=False, repository_url="")
    config.html_theme_options = options


def setup(app) -> dict[str, Any]:
    app.connect("config-inited", hide_unpublished_buttons)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
