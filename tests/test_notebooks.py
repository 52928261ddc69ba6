"""Every notebook of the book starts with the install cell (URL from _config.yml), hidden and skipped."""
import pathlib

import nbformat
import pytest

from tfbook import notebooks
from tfbook.claims_page import toc_chapters

ROOT = pathlib.Path(__file__).resolve().parent.parent
BOOK = [f for chapter in toc_chapters(ROOT) for f in chapter]


def test_install_cell_uses_the_configured_repository():
    url = notebooks.repository_url()
    source = notebooks.install_cell_source()
    assert f"git+{url}" in source and source.startswith(notebooks.INSTALL_MARK)
    compile(source, "install-cell", "exec")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# t"), nbformat.v4.new_code_cell("x = 1")]
    assert notebooks.ensure_install_cell(nb) and not notebooks.ensure_install_cell(nb)
    assert nb.cells[0].source == source and nb.cells[0].metadata["tags"] == list(notebooks.INSTALL_TAGS)
    nb.cells[0].source = source.replace(url, "https://example.org/old")
    assert notebooks.ensure_install_cell(nb) and nb.cells[0].source == source and len(nb.cells) == 3


@pytest.mark.parametrize("name", BOOK)
def test_notebook_starts_with_install_cell(name):
    nb = nbformat.read(ROOT / f"{name}.ipynb", as_version=4)
    cell = nb.cells[0]
    assert notebooks.is_install_cell(cell), "run python -m tfbook.notebooks install-cell on it"
    assert cell.source == notebooks.install_cell_source()
    assert set(notebooks.INSTALL_TAGS) <= set(cell.metadata.get("tags", []))


@pytest.mark.parametrize("name", BOOK)
def test_first_visible_code_cell_describes_the_profile(name):
    nb = nbformat.read(ROOT / f"{name}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code" and not notebooks.is_install_cell(c)]
    assert code and "describe()" in code[0].source, "the first code cell prints tfbook.device.describe()"
    assert "nbval-ignore-output" in code[0].metadata.get("tags", [])


def _markdown_texts():
    for path in sorted((ROOT / "book").rglob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                yield path.relative_to(ROOT), cell.source
    for path in sorted((ROOT / "book").rglob("*.md")):
        yield path.relative_to(ROOT), path.read_text()


def test_every_statement_reference_has_its_text_and_target():
    """The book's statement blocks are unnumbered (the paper's numbers are in their titles), so a bare
    {prf:ref}`label` would print "Lemma " with no number: every reference names its text."""
    import re

    labels, refs = set(), []
    for where, text in _markdown_texts():
        labels.update(re.findall(r":::\{prf:\w+\}[^\n]*\n(?::[a-z]+:[^\n]*\n)*?:label: *(\S+)", text))
        refs += [(where, r) for r in re.findall(r"\{prf:ref\}`([^`]*)`", text)]
    assert refs
    for where, ref in refs:
        match = re.fullmatch(r"(.+\S)\s*<([^>]+)>", ref)
        assert match, f"{where}: {{prf:ref}}`{ref}` has no reference text (write `text <{ref}>`)"
        assert match.group(2) in labels, f"{where}: {{prf:ref}} to an unknown label {match.group(2)}"
