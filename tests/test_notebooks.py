"""Every notebook of the book starts with the install cell (URL from _config.yml), hidden and skipped."""
import pathlib
import re
import statistics

import nbformat
import pytest

from tfbook.build import notebooks, repository
from tfbook.build.claims_page import toc_chapters

ROOT = pathlib.Path(__file__).resolve().parent.parent
BOOK = [f for chapter in toc_chapters(ROOT) for f in chapter]


def test_install_cell_installs_from_the_repository_only_once_it_is_public():
    repo = repository.settings()
    public = notebooks.install_cell_source(public=True)
    private = notebooks.install_cell_source(public=False)
    assert f"git+{repo.url}" in public and "pip" in public
    assert "git+" not in private and "pip" not in private and "ModuleNotFoundError" in private
    for source in (public, private):
        assert source.startswith(notebooks.INSTALL_MARK)
        compile(source, "install-cell", "exec")
        exec(compile(source, "install-cell", "exec"), {})  # tfbook is installed here: does nothing
    assert notebooks.install_cell_source() == (public if repo.public else private)
    source = notebooks.install_cell_source()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# t"), nbformat.v4.new_code_cell("x = 1")]
    assert notebooks.ensure_install_cell(nb) and not notebooks.ensure_install_cell(nb)
    assert nb.cells[0].source == source and nb.cells[0].metadata["tags"] == list(notebooks.INSTALL_TAGS)
    nb.cells[0].source = public.replace(repo.url, "https://example.org/old")
    assert notebooks.ensure_install_cell(nb) and nb.cells[0].source == source and len(nb.cells) == 3


def test_repository_switch_is_validated(tmp_path):
    config = tmp_path / "_config.yml"
    config.write_text("repository:\n  url: https://example.org/x\n")
    assert repository.settings(config) == repository.Repository("https://example.org/x", False)
    config.write_text("repository:\n  url: https://example.org/x\n  public: yes please\n")
    with pytest.raises(ValueError, match="repository.public .* must be true or false"):
        repository.settings(config)
    config.write_text("repository:\n  url: git@example.org:x\n")
    with pytest.raises(ValueError, match="repository.url .* must be an https URL"):
        repository.settings(config)
    config.write_text("title: no repository\n")
    assert repository.settings(config) == repository.Repository("", False)
    config.write_text("repository:\n  public: true\n")
    with pytest.raises(ValueError, match="repository.url .* must be an https URL"):
        repository.settings(config)


def test_unpublished_repository_removes_every_button(tmp_path):
    from types import SimpleNamespace

    from tfbook.build.sphinx_repository import hide_unpublished_buttons

    options = {"launch_buttons": {"binderhub_url": "https://mybinder.org", "colab_url": "https://colab",
                                  "thebe": True, "notebook_interface": "jupyterlab"},
               "repository_url": "https://example.org/x", "use_repository_button": True}
    for public, expected in (("false", ""), ("true", "https://mybinder.org")):
        (tmp_path / "_config.yml").write_text(f"repository:\n  url: https://example.org/x\n  public: {public}\n")
        config = SimpleNamespace(html_theme_options=dict(options))
        hide_unpublished_buttons(SimpleNamespace(srcdir=str(tmp_path)), config)
        assert config.html_theme_options["launch_buttons"]["binderhub_url"] == expected
        assert config.html_theme_options["use_repository_button"] is (public == "true")


@pytest.mark.parametrize("name", BOOK)
def test_notebook_starts_with_install_cell(name):
    nb = nbformat.read(ROOT / f"{name}.ipynb", as_version=4)
    cell = nb.cells[0]
    assert notebooks.is_install_cell(cell), "run python -m tfbook.build.notebooks install-cell on it"
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


def test_folding_rule():
    code = nbformat.v4.new_code_cell
    assert notebooks.folds(code("fig, ax = plotting.subplots(1, 2)\nax.plot(x)\nplt.show()"))
    assert notebooks.folds(code("import ipywidgets as widgets\nwidgets.interact(f, n=(1, 9))"))
    assert not notebooks.folds(code("import ipywidgets as widgets\nimport torch"))  # imports stay visible
    assert notebooks.folds(code("claims.show()\nmore.show()  # both tables"))
    assert not notebooks.folds(code("err = model(X) - f(X)\nclaims.check('Lemma 1', 'x', err, 1.0)\nclaims.show()"))
    assert notebooks.folds(code("# Lemma 1\nclaims.check('Lemma 1', 'x',\n             err, 1.0)\nverify.check_query(c, m)\nc.show()"))
    assert not notebooks.folds(code("claims.show()\nx = 1"))
    assert not notebooks.folds(code("for e in errs:\n    claims.check('Lemma 1', 'x', e, 1.0)"))  # a loop stays
    assert not notebooks.folds(nbformat.v4.new_markdown_cell("plt.show()"))
    assert not notebooks.folds(code(notebooks.install_cell_source()))
    nb = nbformat.v4.new_notebook()
    nb.cells = [code("plt.show()"), code("x = 1")]
    nb.cells[1].metadata["tags"] = [notebooks.FOLD_TAG, "nbval-skip"]
    assert notebooks.fold_cells(nb) == 2 and notebooks.fold_cells(nb) == 0
    assert nb.cells[0].metadata["tags"] == [notebooks.FOLD_TAG] and nb.cells[1].metadata["tags"] == ["nbval-skip"]


@pytest.mark.parametrize("name", BOOK)
def test_figure_widget_and_table_cells_are_folded(name):
    nb = nbformat.read(ROOT / f"{name}.ipynb", as_version=4)
    wrong = [i for i, c in enumerate(nb.cells) if notebooks.folds(c) != (notebooks.FOLD_TAG in c.metadata.get("tags", []))]
    assert not wrong, f"cells {wrong} are folded wrongly: python -m tfbook.build.notebooks fold {name}.ipynb"
    removed = [i for i, c in enumerate(nb.cells) if "remove-input" in c.metadata.get("tags", [])]
    assert not removed, f"cells {removed} hide their input entirely: fold them (hide-input) instead"
    if any(notebooks._WIDGETS.search(c.source) for c in nb.cells if c.cell_type == "code"):
        assert any("needs a running kernel" in c.source for c in nb.cells if c.cell_type == "markdown"), \
            "a page with a widget says that its sliders need a running kernel and where the static figure is"


@pytest.mark.parametrize("name", BOOK)
def test_every_executed_claim_is_shown(name):
    """The executor counts the claims a notebook checks (``claims_executed``); the last records its
    tables store, which the claims page reads, must hold as many: none checked and never shown."""
    from tfbook.build.claims_page import stored_records

    nb = nbformat.read(ROOT / f"{name}.ipynb", as_version=4)
    executed = nb.metadata.get("tfbook", {}).get("claims_executed")
    assert isinstance(executed, int), f"{name}: no claims_executed in its metadata: execute it again"
    shown = sum(len(record["claims"]) for record, _ in stored_records(nb))
    assert shown == executed, f"{name}: {executed} claims executed, {shown} in its stored tables"


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
SMALL_FONT = re.compile(r"\b(?:fontsize|labelsize)\s*=\s*(?:[0-9](?:\.\d+)?\b|['\"](?:xx-small|x-small|small)['\"])")


@pytest.mark.parametrize("name", BOOK)
def test_code_and_printed_lines_fit_the_column_and_fonts_are_readable(name):
    """Every code line and printed line within 88 characters (folded or not); no font below 10 pt."""
    nb = nbformat.read(ROOT / f"{name}.ipynb", as_version=4)
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        wide = [line for line in cell.source.splitlines() if len(line) > 88]
        assert not wide, f"{name}, code cell {i}: {len(wide)} lines over 88 characters, e.g. {wide[0]!r}"
        assert not SMALL_FONT.search(cell.source), f"{name}, code cell {i}: a font below 10 pt"
        for out in cell.get("outputs", []):
            if WIDGET_VIEW in out.get("data", {}):
                continue  # the book renders the widget (and its static figure), not its text fallback
            text = out.get("text") or out.get("data", {}).get("text/plain", "")
            wide = [line for line in "".join(text).splitlines() if len(line) > 88]
            assert not wide, f"{name}, code cell {i}: a printed line over 88 characters: {wide[0]!r}"


def test_every_figure_has_a_caption_a_unique_name_and_alt_text():
    """Each cell that draws a figure draws one, captioned, named and described (myst-nb metadata)."""
    names: dict[str, str] = {}
    for name in BOOK:
        nb = nbformat.read(ROOT / f"{name}.ipynb", as_version=4)
        for i, cell in enumerate(nb.cells):
            images = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
            if not images:
                continue
            where = f"{name}, cell {i}"
            assert len(images) == 1, f"{where}: {len(images)} figures in one cell (one caption each)"
            meta = cell.metadata.get("mystnb", {})
            figure, image = meta.get("figure", {}), meta.get("image", {})
            assert len(figure.get("caption", "")) > 20, f"{where}: no caption (metadata mystnb.figure)"
            assert len(image.get("alt", "")) > 20, f"{where}: no alt text (metadata mystnb.image.alt)"
            label = figure.get("name", "")
            assert re.fullmatch(r"fig-[a-z0-9-]+", label), f"{where}: figure name {label!r} is not fig-..."
            assert label not in names, f"{where}: figure name {label} also used in {names.get(label)}"
            names[label] = where


FOLDED = ("hide-input", "hide-cell", "remove-cell", "remove-input")


def _visible_code_lengths(name: str) -> list[int]:
    nb = nbformat.read(ROOT / f"{name}.ipynb", as_version=4)
    return [len(c.source.rstrip("\n").splitlines()) for c in nb.cells
            if c.cell_type == "code" and not set(FOLDED) & set(c.metadata.get("tags", []))]


@pytest.mark.parametrize("name", BOOK)
def test_no_visible_code_cell_is_over_40_lines(name):
    """The code a reader sees builds, runs and plots; checks sit in folded cells of their own."""
    long = [n for n in _visible_code_lengths(name) if n > 40]
    assert not long, f"{name}: visible code cells of {long} lines (at most 40): split them or fold the checks"


def test_visible_code_cells_are_short_across_the_book():
    lengths = [n for name in BOOK for n in _visible_code_lengths(name)]
    assert len(lengths) > 200 and statistics.median(lengths) <= 15, statistics.median(lengths)
