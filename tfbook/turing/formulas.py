"""The paper's size formulas (Wei, Chen & Ma, Lemma B.1 and App. C), in the paper's parameters only.

Each function is registered with `tfbook.claims.paper_formula` (numbers in, never a built model), so a
size claim computes its bound from the parameters: counts and norms of the built models are compared with
these values, never with a recount of the same model.

Circuits (Lemma B.1 with Prop 3.4's corrections):

* ``relu_layers(q)`` = 4q - 2 ReLU layers for q gate layers (the paper's 4q - 6 counts the input layer
  in q and writes q + 1 for our q);
* ``circuit_l1(and_gates, or_gates, not_gates, id_gates, corrected_gates)``: ||theta||_1 of the gadget
  network, 4 per AND, 5 per OR, 3 per NOT, 2 per ID, 9 per corrected gate and 3 for the read-out.

Turing machines (App. C), for |Z| states, |A| symbols and P = ceil(log2(T + 1)) + 1 position bits:

* ``w_tm(Z, A, P)`` = |Z| + 2|A| + 3P + w_scr with w_scr = 2|A| + P + 3;
* ``transformer_layers(P)`` = 2 + 3 + 1 + P + 1 + 2 (Lemmas C.1, C.2, Claims C.4-C.6, Lemma C.8);
* ``max_weight(P)`` = 2P - 1, the largest |theta| (the binary comparison of Lemma C.2);
* ``theorem41_l1_exponent()`` = 2: Theorem 4.1's alpha = O(log^2 T), as the exponent of log T;
* ``tm_l1(Z, A, P, terminal)`` and ``tm_l1_without_correction(Z, A, P, terminal)``: ||theta||_1 of this
  chapter's recipe as an exact polynomial (`l1_closed_form`), the paper's O(.) made explicit.
"""
from __future__ import annotations

from fractions import Fraction

from tfbook import validate
from tfbook.claims import paper_formula


@paper_formula
def relu_layers(q: int) -> int:
    """ReLU layers of the corrected gadget network for q gate layers: 2 per gate layer, 2 per correction."""
    return 4 * validate.positive_int("q", q) - 2


@paper_formula
def circuit_l1(and_gates: int, or_gates: int, not_gates: int, id_gates: int, corrected_gates: int) -> int:
    """||theta||_1 of Lemma B.1's gadgets: AND 4, OR 5, NOT 3, ID 2, 9 per corrected gate, 3 for the read-out."""
    counts = dict(and_gates=and_gates, or_gates=or_gates, not_gates=not_gates, id_gates=id_gates,
                  corrected_gates=corrected_gates)
    for name, v in counts.items():
        validate.positive_int(name, v, 0)
    return 4 * and_gates + 5 * or_gates + 3 * not_gates + 2 * id_gates + 9 * corrected_gates + 3


@paper_formula
def w_tm(Z: int, A: int, P: int) -> int:
    """The paper's w_TM = |Z| + 2|A| + 3 w_pos + w_scr with w_scr = 2|A| + w_pos + 3."""
    return Z + 2 * A + 3 * P + (2 * A + P + 3)


@paper_formula
def transformer_layers(P: int) -> int:
    """Layers of App. C: A1-A2 (Lemma C.1), B1-B3 (Lemma C.2), C0, C1..CP, CD (Claims C.4-C.6), E1-E2 (Lemma C.8)."""
    return 2 + 3 + 1 + validate.positive_int("P", P) + 1 + 2


@paper_formula
def max_weight(P: int) -> int:
    """The largest |theta| of App. C: 2P - 1, the weight of the top bit in Lemma C.2's comparison."""
    return 2 * validate.positive_int("P", P) - 1


@paper_formula
def theorem41_l1_exponent() -> int:
    """Theorem 4.1: alpha = O(log^2 T); the exponent of log T."""
    return 2


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
        C += 9 * w * transformer_layers(P)
    return int(C)


@paper_formula
def tm_l1(Z: int, A: int, P: int, terminal: int) -> int:
    """||theta||_1 of the App. C recipe with its corrections (`l1_closed_form`)."""
    return l1_closed_form(Z, A, P, terminal)


@paper_formula
def tm_l1_without_correction(Z: int, A: int, P: int, terminal: int) -> int:
    """||theta||_1 of the App. C recipe without the correction layers."""
    return l1_closed_form(Z, A, P, terminal, correction=False)
