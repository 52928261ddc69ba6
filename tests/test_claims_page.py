"""The every-claim page: built from stored claims records (no execution), placed in sections, and
the stored book/claims.md is what the generator gives."""
import pathlib

import nbformat

from tfbook import claims as cl
from tfbook.build import claims_page

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_stored_page_is_up_to_date():
    assert claims_page.main(["--check"]) == 0, \
        "run `python -m tfbook.build.claims_page` (or make notebooks) and commit book/claims.md"


def _notebook_with_records(path: pathlib.Path) -> None:
    """A stored notebook as IPython leaves it: outputs carry the record, claims the hash of their cell."""
    first = "c.check('Lemma 1', 'x | y', 0.5, 1.0)"
    second = "c.check('Lemma 2', 'noise', 3e-16, 1e-12, roundoff=True)\nc.show()"
    c = cl.Claims("T")
    c.check("Lemma 1", "x | y", 0.5, 1.0, kind="paper", trivial=2.0)
    c.check("Lemma 2", "noise", 3e-16, 1e-12, roundoff=True)
    c.items[0] = cl.Claim(**{**c.items[0].__dict__, "cell": cl.cell_id(first)})
    c.items[1] = cl.Claim(**{**c.items[1].__dict__, "cell": cl.cell_id(second)})
    old = cl.Claims("Old")  # a record stored before claims had a kind (schema 1)
    old.check("Lemma 3", "old", 1.0, 1.0)
    old_record = old.record() | {"schema": 1}
    for claim in old_record["claims"]:
        for key in ("kind", "trivial", "bound_over_trivial", "formula"):
            del claim[key]
    shown = nbformat.v4.new_code_cell(second)
    shown.outputs = [nbformat.v4.new_output("display_data", data=c._repr_mimebundle_()),
                     nbformat.v4.new_output("display_data", data={cl.MIME: old_record, "text/plain": old.table()})]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A chapter about $n$ tokens\n\n## First `step` (Lemma 1)"),
                nbformat.v4.new_code_cell(first),
                nbformat.v4.new_markdown_cell("## Second step"),
                shown]
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)


def test_page_lists_claims_in_their_sections_with_counts(tmp_path):
    _notebook_with_records(tmp_path / "book" / "ch" / "01.ipynb")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/ch/01\n")
    chapters = claims_page.collect(tmp_path)
    assert len(chapters) == 1 and chapters[0].counts() == (3, 3)
    page = claims_page.render(chapters)
    assert "| [A chapter about $n$ tokens](ch/01.ipynb) | 1 | 3 | 3 | 0 |" in page
    # one folded table per section, linked to the section; no section column
    assert ":::{dropdown} First `step` (Lemma 1) (1 claim)" in page
    assert "Checked in [First `step` (Lemma 1)](ch/01.ipynb#first-step-lemma-1)." in page
    assert "| Lemma 1 | x \\| y (trivial scale 2; bound/trivial 0.500) | ✔ yes | - | paper | 0.500 |" in page
    assert ":::{dropdown} Second step (1 claim)" in page
    assert "| Lemma 2 | noise | ✔ yes | - | construction | \\< 1e-12 |" in page
    assert ":::{dropdown} Claims outside a section (1 claim)" in page
    assert "| Lemma 3 | old | ✔ yes | - | construction | 1 |" in page  # no kind stored: the default
    assert "3 claims (2 construction, 1 paper), 3 hold." in page
    assert "| 1 | 3 | 3 | 0 |" in page and "| 2 | 0 | 1 | 0 |" in page and "| - | - | - | - |" in page
    assert page.count("| ✔ yes | - |") == 3
    assert "The claims audit has not run" not in page
    assert claims_page.main([], root=tmp_path) == 0 and claims_page.main(["--check"], root=tmp_path) == 0
    (tmp_path / claims_page.PAGE).write_text("stale")
    assert claims_page.main(["--check"], root=tmp_path) == 1


def test_slugs_follow_myst():
    assert claims_page.slugify(claims_page.heading_text("Step 2: the $k$-fold `compose` map (Lemma 6)")) == \
        "step-2-the--fold-compose-map-lemma-6"
    assert claims_page.slugify(claims_page.heading_text("2. Exact $|x|$ and max")) == "2-exact--and-max"
    assert claims_page._md("2. Exact $|x|$ | y") == "2. Exact $\\vert x\\vert $ \\| y"


def test_page_shows_the_claims_audit(tmp_path):
    _notebook_with_records(tmp_path / "book" / "ch" / "01.ipynb")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/ch/01\n")
    chapters = claims_page.collect(tmp_path)
    nb = chapters[0].notebooks[0]
    claims = [row[2] for row in nb.rows]
    entry = {"code_hash": nb.code_hash, "claims": [
        {"cell": c["cell"], "ref": c["ref"], "statement": c["statement"], "occurrence": 0,
         "kind": c.get("kind", "construction"), "broken_by": broken, "not_reached": stopped}
        for c, broken, stopped in zip(claims, ([], ["zero", "eps"], []), ([], ["eps"], []))]}
    entry["claims"].pop()  # Lemma 3: not in the audit
    audit = {"notebooks": {"book/ch/01.ipynb": entry}}
    page = claims_page.render(chapters, audit=audit)
    assert "| 1 | 1 | 0 | 0 |" in page  # Lemma 2 broken by zero and eps
    assert "| Lemma 2 | noise | ✔ yes | zero, eps† | construction | \\< 1e-12 | \\<= 1e-12 | - |" in page
    assert page.count("| ✔ yes | none |") == 1 and page.count("| ✔ yes | - |") == 1
    entry["code_hash"] = "another"
    page = claims_page.render(chapters, audit=audit)
    assert "The claims audit has not run on this notebook's current code." in page and "| none |" not in page


def test_statement_index_lists_titled_blocks_with_their_labels(tmp_path):
    from tfbook.build import statements_page

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(
        "# Ch\n\n```{prf:lemma} Product of $N$ terms (Lemma 4)\n:label: ch-lem4\n\nText.\n```\n\n"
        "```{prf:proof}\nNo statement.\n```\n\n:::{prf:theorem} Unlabelled\nText.\n:::\n\n"
        ":::{prf:theorem} Main (Theorem 1)\n:class: dropdown\n:label: ch-thm1\n\nText.\n:::")]
    path = tmp_path / "book" / "ch" / "01.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    found = statements_page.read_statements(path)
    assert found == [statements_page.Statement("lemma", "Product of $N$ terms (Lemma 4)", "ch-lem4"),
                     statements_page.Statement("theorem", "Main (Theorem 1)", "ch-thm1")]
    page = statements_page.render(statements_page.collect(tmp_path, [["book/ch/01"]], {"book/ch/01": "Ch"}))
    assert "| {prf:ref}`Product of N terms (Lemma 4) <ch-lem4>` | lemma | [Ch](ch/01.ipynb) |" in page
    assert "The 2 theorems" in page and "Unlabelled" not in page


def test_run_page_lists_every_notebook_with_its_recorded_times(tmp_path):
    from tfbook.build import repository, run_page

    nb = nbformat.v4.new_notebook()
    nb.metadata["tfbook"] = {"quick_seconds": 42, "full_seconds_cpu": 600, "full_seconds_gpu": 90,
                             "h100_estimate": {"seconds": 7.4}}
    path = tmp_path / "book" / "ch" / "01.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    second = nbformat.v4.new_notebook()
    second.metadata["tfbook"] = {"quick_seconds": 3}
    nbformat.write(second, path.parent / "02.ipynb")
    rows = run_page.collect(tmp_path, [["book/ch/01", "book/ch/02"]], {"book/ch/01": "Ch"})
    private = run_page.render(rows, repository.Repository("https://example.org/x", False))
    assert "| [Ch](ch/01.ipynb) | 42 s | 10 min | 90 s | 7 s |" in private
    assert "| [book/ch/02](ch/02.ipynb) | 3 s | - | - | - |" in private  # nothing counted: no estimate
    assert "Binder or Colab**: not yet" in private
    public = run_page.render(rows, repository.Repository("https://example.org/x", True))
    assert "not yet" not in public and "rocket menu" in public


def test_claim_references_link_to_the_statement_block_they_name(tmp_path):
    path = tmp_path / "book" / "ch" / "01.ipynb"
    _notebook_with_records(path)
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell(
        ":::{prf:definition} Constants of Lemma 1\n:label: ch-const\n\nText.\n:::\n\n"
        ":::{prf:lemma} Product (Lemma 1)\n:label: ch-lem1\n\nText.\n:::"))
    nbformat.write(nb, path)
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/ch/01\n")
    chapters = claims_page.collect(tmp_path)
    assert chapters[0].labels == {("lemma", "1"): "ch-lem1"}
    page = claims_page.render(chapters)
    assert "| {prf:ref}`Lemma 1 <ch-lem1>` | x \\| y" in page  # the block named in its parenthesis
    assert "| Lemma 2 | noise |" in page  # no block: plain text
    assert claims_page.statement_key("Thm 4.2 (construction)", start=True) == [("theorem", "4.2")]
    assert claims_page.statement_key("see Thm 4.2", start=True) == []


def test_page_counts_every_claim_the_notebooks_executed():
    """The page's total equals the claims the executor counted while running the notebooks."""
    import re

    executed = 0
    for files in claims_page.toc_chapters(ROOT):
        for f in files:
            nb = nbformat.read(ROOT / f"{f}.ipynb", as_version=4)
            executed += nb.metadata.get("tfbook", {}).get("claims_executed", 0)
    page = (ROOT / claims_page.PAGE).read_text(encoding="utf-8")
    total = re.search(r"^\| \*\*all chapters\*\* \| (\d+) \| (\d+) \|", page, re.M)
    assert total and int(total.group(2)) == executed, f"page total {total and total.group(2)}, executed {executed}"
