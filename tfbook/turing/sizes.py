"""Sizes of the Turing-machine transformer against the paper's formulas (Wei, Chen & Ma, App. C).

* `w_tm` (from `tfbook.turing.formulas`): the paper's width w_TM = |Z| + 2|A| + 3 w_pos + w_scr, with its
  scratch groups of sizes (|A|, |A|, w_pos, 3), so w_scr = 2|A| + w_pos + 3.
* `lemma_bounds`: for each transformer layer, the lemma that constructs it and the expression inside its
  O(.) l1 bound (Lemmas C.1, C.2, Claims C.4-C.6, Lemmas C.7, C.8), constants dropped.
* `l1_closed_form` (from `tfbook.turing.formulas`): ||theta||_1 of this chapter's construction as an exact polynomial in P, |Z|, |A| (derived
  from the recipe of `tfbook.turing.transformer.build_transformer`, term by term; asserted against the
  built models in the tests and the notebook).
* `l1_by_layer`: the l1 norm of each built transformer layer (attention, work and correction separately).
"""
from __future__ import annotations

from tfbook.turing.formulas import l1_closed_form, w_tm
from tfbook.turing.transformer import TMTransformer

__all__ = ["l1_by_layer", "l1_closed_form", "lemma_bounds", "w_tm"]


def lemma_bounds(Z: int, A: int, P: int) -> dict[str, tuple[str, int]]:
    """Transformer layer -> (paper reference, the expression of its O(.) l1 bound with constant 1)."""
    out = {"A1": ("Lemma C.1", Z * A + P), "A2": ("Lemma C.1", Z * A + P)}
    out.update({name: ("Lemma C.2", P * (Z + A + P)) for name in ("B1", "B2", "B3")})
    out["C0"] = ("Claim C.4", P)
    out.update({f"C{j}": ("Claim C.5", Z + A + P) for j in range(1, P + 1)})
    out["CD"] = ("Claim C.6, Lemma C.7", (Z + A + P) + (A + P))
    out.update({name: ("Lemma C.8", Z + A + P) for name in ("E1", "E2")})
    return out


def l1_by_layer(model: TMTransformer) -> dict[str, dict[str, float]]:
    """Transformer layer -> {"attention", "work", "correction"} l1 norms of the built layers' parameters theta."""
    out = {name: {"attention": 0.0, "work": 0.0, "correction": 0.0} for name in model.transformer_layers}
    for pname, p in model.theta():
        if not pname.startswith("layers."):
            continue
        core = model.layer_names[int(pname.split(".")[1])]
        layer, part = core.split(".")
        role = {"attn": "attention", "xattn": "attention", "ff": "work", "round": "correction"}[part]
        out[layer][role] += float(p.abs().sum())
    return out
