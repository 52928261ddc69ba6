"""Sphinx extension: author-year labels for the bibliography, matching the author-year citations.

sphinxcontrib-bibtex cites as "Yarotsky (2017)" (``bibtex_reference_style: author_year``); this
registers the pybtex style ``authoryear`` (``bibtex_default_style``): entries sorted by author,
year and title, labelled "Yarotsky, 2017", "Takeshita and Imaizumi, 2025", "Wei et al., 2022".
An entry without authors (an anonymous submission) is labelled by the first words of its title.
"""
from __future__ import annotations

import codecs
import re

import latexcodec  # noqa: F401  (registers the "ulatex" codec: P{\'e}rez -> Pérez)
from pybtex.plugin import register_plugin
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle


def _last(person) -> str:
    text = " ".join(person.prelast_names + person.last_names)
    return re.sub(r"[{}]", "", codecs.decode(text, "ulatex"))


def label(entry) -> str:
    """``Last, year``, ``Last and Last, year`` or ``Last et al., year``; a short title without authors."""
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    year = entry.fields.get("year", "n.d.")
    if not persons:
        words = re.sub(r"[{}]", "", entry.fields.get("title", entry.key)).split()
        return f"{' '.join(words[:4])}{' ...' if len(words) > 4 else ''}, {year}"
    names = [_last(p) for p in persons]
    who = names[0] if len(names) == 1 else f"{names[0]} and {names[1]}" if len(names) == 2 else f"{names[0]} et al."
    return f"{who}, {year}"


class AuthorYearLabelStyle(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        seen: dict[str, int] = {}
        for entry in sorted_entries:
            text = label(entry)
            seen[text] = seen.get(text, 0) + 1
            yield text if seen[text] == 1 else f"{text}{'abcdefghij'[seen[text] - 1]}"


class AuthorYearStyle(PlainStyle):
    default_label_style = AuthorYearLabelStyle
    default_sorting_style = "author_year_title"


register_plugin("pybtex.style.labels", "authoryear", AuthorYearLabelStyle)
register_plugin("pybtex.style.formatting", "authoryear", AuthorYearStyle)


def setup(app):
    return {"parallel_read_safe": True, "parallel_write_safe": True}
