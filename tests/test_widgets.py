"""Every widget's callback works: nbval only sees a widget's saved initial state, so this executes each
notebook that has widgets (quick profile, up to its last widget cell), then, in the same kernel, finds
every ``ipywidgets.interactive`` (what ``interact`` builds too) and sets each control from code to its
minimum, maximum and other values, as a reader would. Each setting must run without error, change the
output (printed text, figures or returned value) for some value of the control, and take < 10 s.

Generic: notebooks are found by their source (``interact``/``interactive``), so new chapters are covered.
"""
import json
import pathlib
import re

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
LIMIT_S = 10.0
# Executed through the project's executor (`tfbook.build.notebooks.execute_notebook`: stalls are detected and the
# notebook reruns in a fresh kernel); a cell that is really slow times out and fails.
CELL_TIMEOUT_S, HARNESS_TIMEOUT_S = 90, 600
pytestmark = pytest.mark.slow

HARNESS = r'''
import contextlib as _cl, hashlib as _hl, io as _io, json as _json, time as _time
import ipywidgets as _w
import matplotlib.pyplot as _plt
from ipywidgets.widgets.widget import _instances as _inst


def _figures_digest():
    digest = []
    for num in _plt.get_fignums():
        buf = _io.BytesIO()
        _plt.figure(num).savefig(buf, format="png", dpi=30)
        digest.append(_hl.sha1(buf.getvalue()).hexdigest())
    _plt.close("all")
    return digest


def _values(ctrl):
    value = ctrl.value
    if isinstance(ctrl, (_w.Checkbox, _w.ToggleButton)):
        return [not value, value]
    if hasattr(ctrl, "options") and not hasattr(ctrl, "min"):
        labels = [o[1] if isinstance(o, tuple) else o for o in ctrl.options]
        return labels[:8] + [value]
    if hasattr(ctrl, "min") and hasattr(ctrl, "max") and not isinstance(value, tuple):
        lo, hi = ctrl.min, ctrl.max
        mid = (lo + hi) // 2 if isinstance(value, int) else (lo + hi) / 2
        return [lo, hi, mid, value]
    if isinstance(value, str):
        return [value[:-1] or value + value, value + value[:1], value]
    return [value]


def _run(w):
    calls = []
    original = w.f

    def wrapped(**kwargs):
        out, start = _io.StringIO(), _time.perf_counter()
        record = {"kwargs": {k: repr(v) for k, v in kwargs.items()}, "error": None}
        show = _plt.show
        shown = []
        _plt.show = lambda *a, **k: shown.extend(_figures_digest())
        try:
            with _cl.redirect_stdout(out):
                result = original(**kwargs)
            record["result"] = repr(result) if result is not None else ""
        except Exception as exc:
            record["error"] = f"{type(exc).__name__}: {exc}"
            result = None
        finally:
            _plt.show = show
        record["seconds"] = _time.perf_counter() - start
        record["output"] = _hl.sha1((out.getvalue() + "|".join(shown + _figures_digest()) + record.get("result", "")).encode()).hexdigest()
        calls.append(record)
        return result

    w.f = wrapped
    report = []
    try:
        for ctrl in w.kwargs_widgets:
            initial, outputs = ctrl.value, set()
            for value in _values(ctrl):
                before = len(calls)
                try:
                    ctrl.value = value
                except Exception as exc:  # a value the control refuses is not a callback error
                    continue
                if len(calls) == before:  # unchanged value or manual mode
                    w.update()
                call = calls[-1]
                outputs.add(call["output"])
                report.append({"control": ctrl._kwarg, "value": repr(value), "error": call["error"],
                               "seconds": call["seconds"]})
            report.append({"control": ctrl._kwarg, "distinct_outputs": len(outputs)})
            ctrl.value = initial
    finally:
        w.f = original
    return report


_found = [w for w in list(_inst.values()) if isinstance(w, _w.interactive)]
print("WIDGETS " + _json.dumps([{"function": getattr(w.f, "__name__", "?"), "report": _run(w)} for w in _found]))
'''


def widget_notebooks() -> list[str]:
    found = []
    for path in sorted((ROOT / "book").rglob("*.ipynb")):
        if ".ipynb_checkpoints" in path.parts:
            continue
        nb = nbformat.read(path, as_version=4)
        if any(c.cell_type == "code" and re.search(r"\binteract(ive)?\(", c.source) for c in nb.cells):
            found.append(str(path.relative_to(ROOT)))
    return found


def execute(nb: nbformat.NotebookNode, folder: pathlib.Path) -> nbformat.NotebookNode:
    """The executed copy of ``nb`` (90 s per ordinary cell, 600 s for the harness cell)."""
    from tfbook.build.notebooks import execute_notebook

    def timeout(cell) -> int:
        return HARNESS_TIMEOUT_S if cell.source == HARNESS else CELL_TIMEOUT_S

    return execute_notebook(nb, folder, path=str(folder), timeout_func=timeout).nb


@pytest.mark.parametrize("name", widget_notebooks())
def test_every_widget_control_works(name, monkeypatch):
    monkeypatch.setenv("TFBOOK_PROFILE", "quick")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    path = ROOT / name
    nb = nbformat.read(path, as_version=4)
    last = max(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and re.search(r"\binteract(ive)?\(", c.source))
    nb.cells = [c for c in nb.cells[: last + 1] if "nbval-skip" not in c.metadata.get("tags", [])]
    nb.cells.append(nbformat.v4.new_code_cell(HARNESS))
    nb = execute(nb, path.parent)
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
    lines = [line for line in text.splitlines() if line.startswith("WIDGETS ")]
    assert lines, f"the harness printed nothing:\n{text[-2000:]}"
    widgets = json.loads(lines[-1][len("WIDGETS "):])
    assert widgets, f"{name} has interact/interactive in its source but no interactive widget was found"
    problems = []
    for widget in widgets:
        for row in widget["report"]:
            where = f"{widget['function']}({row['control']}={row.get('value', '')})"
            if row.get("error"):
                problems.append(f"{where} raised {row['error']}")
            if row.get("seconds", 0) > LIMIT_S:
                problems.append(f"{where} took {row['seconds']:.1f} s > {LIMIT_S} s")
            if row.get("distinct_outputs") == 1:
                problems.append(f"{widget['function']}: changing {row['control']} never changes the output")
    assert not problems, "\n".join(problems)
