"""The widget harness: run in a kernel that has executed a notebook, it finds every ``ipywidgets.interactive``
(what ``interact`` builds too) and sets each control from code to its minimum, maximum and other values, as a
reader would, and prints a report; `problems` judges it. Each setting must run without error, change the
output (printed text, figures or returned value) for some value of the control, and take < `LIMIT_S` s.

nbval only sees a widget's saved initial state: ``make nbval`` runs the harness in nbval's own kernel after each
notebook that has widgets (`tests/nbval_plugin.py`, ``TFBOOK_NBVAL_WIDGETS=1``), so a notebook is executed once
for both checks; `tests/test_widgets.py` checks the harness and that every widget notebook gets it.
"""
import json
import re

import nbformat

LIMIT_S = 10.0
TIMEOUT_S = 600
"""How long the harness may take in all."""
PREFIX = "WIDGETS "
INTERACT = re.compile(r"\binteract(ive)?\(")

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


def has_widgets(nb: nbformat.NotebookNode) -> bool:
    """Whether a notebook's code calls ``interact`` or ``interactive`` (so new chapters are covered)."""
    return any(c.cell_type == "code" and INTERACT.search(c.source) for c in nb.cells)


def report(text: str) -> list[dict]:
    """The harness's report from the text it printed; ValueError when it printed none."""
    lines = [line for line in text.splitlines() if line.startswith(PREFIX)]
    if not lines:
        raise ValueError(f"the harness printed no report:\n{text[-2000:]}")
    return json.loads(lines[-1][len(PREFIX):])


def problems(widgets: list[dict]) -> list[str]:
    """What is wrong in a report: no widget, a setting that raised or took >= `LIMIT_S` s, a control whose
    values all gave the same output."""
    if not widgets:
        return ["interact/interactive in the source but no interactive widget was found"]
    found = []
    for widget in widgets:
        for row in widget["report"]:
            where = f"{widget['function']}({row['control']}={row.get('value', '')})"
            if row.get("error"):
                found.append(f"{where} raised {row['error']}")
            if row.get("seconds", 0) > LIMIT_S:
                found.append(f"{where} took {row['seconds']:.1f} s > {LIMIT_S} s")
            if row.get("distinct_outputs") == 1:
                found.append(f"{widget['function']}: changing {row['control']} never changes the output")
    return found
