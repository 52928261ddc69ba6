"""The "Run this book" page: ``book/run.md``, how to run the notebooks and how long each one takes.

The times come from each notebook's metadata (``"tfbook": {"quick_seconds", "full_seconds_cpu",
"full_seconds_gpu", "h100_estimate"}``): the quick profile's wall time as last measured by
`tfbook.build.notebooks` on a 2-core CPU, the full profile's expected time on a CPU and on one GPU, and the
H100 time predicted from its counted operations (`tfbook.build.full --count`).
`tfbook.build.claims_page` writes it beside the claims page.
"""
from __future__ import annotations

import pathlib
from typing import Optional

import nbformat

from tfbook.build.repository import Repository

PAGE = "book/run.md"


def _duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    seconds = float(seconds)
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def render(rows: list[tuple[str, str, dict]], repo: Repository) -> str:
    """``rows``: (notebook title, page-relative path, its ``tfbook`` metadata), in book order."""
    launch = ("* **Binder or Colab**: the rocket menu at the top of each page opens the notebook there;\n"
              "  its first (hidden) cell installs tfbook from the repository.") if repo.public else (
              "* **Binder or Colab**: not yet. The repository is not public, so the pages carry no launch\n"
              "  buttons and the notebooks' first (hidden) cell installs nothing; both appear once it is\n"
              "  published.")
    lines = [
        "(run-this-book)=", "# Run this book", "",
        "Every page of this book is a notebook that was executed to produce what you read. To run one",
        "yourself:", "",
        "* **Locally**: in a clone of the repository, `make lab` creates the environment `.venv` (Python,",
        "  a CPU build of torch and the notebook stack) and opens JupyterLab on the book's folder. `make",
        "  test` runs the unit tests and re-executes every notebook against its stored outputs; `make book`",
        "  executes every notebook and builds this HTML book.",
        launch, "",
        "**Profiles.** Each notebook runs a *quick* profile (small sizes, on the CPU; what the tests use)",
        "or a *full* profile (larger sizes). The full profile is the default when a CUDA GPU is present,",
        "and `TFBOOK_PROFILE=full` selects it on a CPU. The first line each notebook prints names the",
        "profile, device and precision it ran with. On a GPU, bounds are still checked in float64 and",
        "TF32 is off; the figures and claims are the same mathematics at larger sizes.",
        "{doc}`The full-profile results <full_results>` list what the full profiles measured where they",
        "have run.", "",
        "**How long each notebook takes.** *Quick*: the wall time last measured on a 2-core CPU, one",
        "thread. *Full*: the expected time on a CPU and on one GPU recorded with the notebook (an",
        "estimate; the times measured where a full profile has run are on the full-profile results page).",
        "*H100*: the time predicted for one NVIDIA H100 from the operations counted in a CPU run of the",
        "full profile (launches, FLOPs and bytes; the model is stated on the full-profile results page).",
        "",
        "| notebook | quick (CPU) | full (CPU) | full (GPU) | full (H100, counted) |", "|:---|---:|---:|---:|---:|",
    ]
    for title, path, meta in rows:
        lines.append(f"| [{title}]({path}) | {_duration(meta.get('quick_seconds'))} | "
                     f"{_duration(meta.get('full_seconds_cpu'))} | {_duration(meta.get('full_seconds_gpu'))} | "
                     f"{_duration((meta.get('h100_estimate') or {}).get('seconds'))} |")
    total = sum(float(m.get("quick_seconds") or 0) for _, _, m in rows)
    lines += ["", f"All {len(rows)} notebooks in the quick profile: about {total / 60:.0f} minutes on one thread."]
    return "\n".join(lines) + "\n"


def collect(root: pathlib.Path, toc: list[list[str]], titles: dict[str, str]) -> list[tuple[str, str, dict]]:
    base = pathlib.PurePosixPath(PAGE).parent
    return [(titles.get(f, f), str(pathlib.PurePosixPath(f).relative_to(base)) + ".ipynb",
             dict(nbformat.read(root / f"{f}.ipynb", as_version=4).metadata.get("tfbook", {})))
            for files in toc for f in files]
