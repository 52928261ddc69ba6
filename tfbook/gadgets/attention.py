"""Attention gadgets."""
from __future__ import annotations

from typing import Optional, Sequence

from tfbook import validate
from tfbook.gadgets.plan import AttnStage, Form, Gadget, Head, form


def uniform_sum(reads: Sequence[Form], writes: Sequence[Form], n: int, constant: Optional[Form] = None,
                tag: str = "sum") -> Gadget:
    """One softmax head with W_Q = W_K = 0: every weight is exactly 1/n, so with W_O scaled by n every token
    receives ``writes[r] += sum_j reads[r](token j)``. ``constant`` (a form) is added to every token through
    a value row that reads nothing and has value bias 1 (W_V has that row only to carry the bias b_V)."""
    n = validate.positive_int("n", n)
    if len(reads) != len(writes):
        raise ValueError(f"reads and writes must have equal length, got {len(reads)} and {len(writes)}")
    values = [form(r) for r in reads]
    outputs = [{k: n * v for k, v in form(w).items()} for w in writes]
    bias = None
    if constant is not None:
        values.append({})
        outputs.append(form(constant))
        bias = [0.0] * len(reads) + [1.0]
    head = Head(queries=[], keys=[], values=values, outputs=outputs, value_bias=bias)
    return Gadget(tag, [AttnStage([head], "softmax")])
