"""Sizes of the Turing-machine transformer against the paper's formulas (Wei, Chen & Ma, App. C).

* `w_tm`: the paper's width w_TM = |Z| + 2|A| + 3 w_pos + w_scr, with its scratch groups of sizes
  (|A|, |A|, w_pos, 3), so w_scr = 2|A| + w_pos + 3.
* `lemma_bounds`: for each transformer layer, the lemma that constructs it and the expression inside its
  O(.) l1 bound (Lemmas C.1, C.2, Claims C.4-C.6, Lemmas C.7, C.8), constants dropped.
* `l1_closed_form`: ||theta||_1 of this chapter's construction as an exact polynomial in P, |Z|, |A| (derived
  from the recipe of `tfbook.turing.transformer.build_transformer`, term by term; asserted against the
  built models in the tests and the notebook).
* `l1_by_layer`: the l1 norm of each built transformer layer (attention, work and correction separately).
"""
from __future__ import annotations

from fractions import Fraction

from tfbook import validate
from tfbook.turing.transformer import TMTransformer, layer_names


def w_tm(Z: int, A: int, P: int) -> int:
    """The paper's w_TM = |Z| + 2|A| + 3 w_pos + w_scr with w_scr = 2|A| + w_pos + 3."""
    return Z + 2 * A + 3 * P + (2 * A + P + 3)


def lemma_bounds(Z: int, A: int, P: int) -> dict[str, tuple[str, int]]:
    """Transformer layer -> (paper reference, the expression of its O(.) l1 bound with constant 1)."""
    out = {"A1": ("Lemma C.1", Z * A + P), "A2": ("Lemma C.1", Z * A + P)}
    out.update({name: ("Lemma C.2", P * (Z + A + P)) for name in ("B1", "B2", "B3")})
    out["C0"] = ("Claim C.4", P)
    out.update({f"C{j}": ("Claim C.5", Z + A + P) for j in range(1, P + 1)})
    out["CD"] = ("Claim C.6, Lemma C.7", (Z + A + P) + (A + P))
    out.update({name: ("Lemma C.8", Z + A + P) for name in ("E1", "E2")})
    return out


def l1_closed_form(Z: int, A: int, P: int, terminal: int, correction: bool = True) -> int:
    """||theta||_1 of the construction for |Z| states (with pre), |A| symbols, P position bits and ``terminal``
    accept/reject states: the sum of the per-layer terms below, E (|A|), h0 (2) and theta_cls (terminal),
    plus 9 w per layer for the corrections (W_2 = [I; I]: 2w, b_2: w, W_3 = [3I, -3I]: 6w)."""
    for name, v in (("Z", Z), ("A", A), ("P", P)):
        validate.positive_int(name, v)
    validate.positive_int("terminal", terminal, 0)
    C = Fraction(0)
    C += 2 * (3 * Z * A + 2 * P)  # A1 pairs (3 per pair) and A2 transitions (3 per entry), keep(pos1, pos2)
    C += (Z + A + 4 * P + Fraction(3 * P * (P - 1), 2)) + (Z + A + 8 * P) + (Z + A + 4 * P)  # B1, B2, B3
    C += (7 * P + 1) + (Z + 3 * A + 4 * P + 3)  # C0: attention, keep(base)
    C += sum((7 * P + 7 * j - 1) + (Z + 3 * A + 4 * P + 2) for j in range(1, P + 1))  # C1..CP
    C += (14 * P + A) + (7 * P + A + 1) + (Z + 3 * A + 3 * P + 3)  # CD: self, encoder, feed-forward
    C += (Z + P + 7 * A + 3) + (Z + P + 2 * A + 1)  # E1, E2
    C += A + 2 + terminal  # E, h0, theta_cls
    if correction:
        w = Z + 4 * A + 6 * P + 5 + Z * A
        C += 9 * w * len(layer_names(P))
    return int(C)


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
