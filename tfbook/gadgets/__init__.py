"""Reusable constructions ("gadgets") for every chapter, placed into core layers by a planner.

A gadget is a few layers' worth of ReLU units or attention heads over named slots of the residual
stream (see `tfbook.gadgets.plan`). Build a `Layout` with the input slots, add gadgets to a `Planner`
in the order the recipe computes them, and take ``planner.layers()``: (name, core layer) pairs for a
`tfbook.model.Construction`. The planner puts each gadget at the earliest layer where its inputs are
ready and merges gadgets that share a layer, so no chapter computes layer indices by hand.

Gadgets (``out`` is a slot key or a linear form ``{slot: coefficient}``; every gadget adds to it):

* exact, one layer (`relu`): `identity`, `absolute`, `maximum`, `clip`, `relu_sum`, `interpolant`;
* Yarotsky (`squaring`): `square` (f_{Lk}, error `squaring_error` = 4^-(Lk+1)), `sawtooth` (g_{Lk}),
  `product` (Takeshita and Imaizumi's residual form, error in `product_error_range`), `polarisation_product`
  (the form of Anonymous, 2023, error in `polarisation_error_range`, exactly 0 on the axes);
* attention (`attention`): `uniform_sum` (W_Q = W_K = 0, every token receives the sum over tokens);
* networks (`fnn`): `FNN` (Definition 1 on core layers), `feed_forward_layers` (the same network as named
  core layers for a construction) and `from_fnn` (Lemma 2 of Takeshita and Imaizumi, 2025);
* networks without skip connections, gadget by gadget (`circuit`): `Circuit` with exact `identity`,
  `absolute`, `clip`, `sawtooth`, Yarotsky `square`, `product`, `tree_product` and the trigonometric
  `cos_of_sawtooth`, `TrigFeatures` (Eq. (7) of Takakura and Suzuki, 2023); `Circuit.affine_maps` feeds `FNN`.
"""
from tfbook.gadgets.attention import uniform_sum
from tfbook.gadgets import circuit
from tfbook.gadgets.circuit import Approx, Circuit
from tfbook.gadgets.fnn import FNN, feed_forward_layers, fnn_width, from_fnn
from tfbook.gadgets.plan import (AttnStage, FFStage, Form, Gadget, Head, Placement, Planner, Unit, combine, form,
                                 slot_name)
from tfbook.gadgets.relu import absolute, clip, identity, interpolant, interpolant_coefficients, maximum, relu_sum
from tfbook.gadgets.squaring import (polarisation_error_range, polarisation_product, product, product_error_range,
                                     product_fnn_layers, sawtooth, sawtooth_coefficients, square, square_fnn_layers,
                                     squaring_error)

__all__ = [
    "Approx", "AttnStage", "Circuit", "FFStage", "FNN", "Form", "Gadget", "Head", "Placement", "Planner", "Unit",
    "absolute", "circuit", "clip", "combine", "feed_forward_layers", "fnn_width", "form", "from_fnn", "identity",
    "interpolant", "interpolant_coefficients", "maximum", "polarisation_error_range", "polarisation_product",
    "product", "product_error_range", "product_fnn_layers", "relu_sum", "sawtooth", "sawtooth_coefficients",
    "slot_name", "square", "square_fnn_layers", "squaring_error", "uniform_sum",
]
