"""besov on the meta device: small constructions and every reference the notebooks compare against.

Meta tensors have shapes and no values, so a function that allocates on the CPU instead of its input's
device fails here without a GPU. tests/test_device.py covers the bench's B-spline transformer,
`hat_features` and `weierstrass`; this file takes the gadget networks (product, B-spline), the masked
transformer and the references of tfbook.besov.references, grids, gadgets and masked.
"""
import torch

import tfbook.besov as bv
from tfbook.besov import masked as mk
from tfbook.besov.gadgets import product_reference, yarotsky
from tfbook.besov.grids import quantize
from tests.meta_helpers import on_meta

META = torch.device("meta")
F64 = torch.float64

# Functions that must read values, so cannot run on meta (the notebooks run them on their device), with
# the reason.
NEEDS_VALUES = {
    "grids.hat_interpolate / sparse_evaluate": "scipy's RegularGridInterpolator reads the points (host)",
    "grids.aniso_interpolant / sparse_interpolant, masked.masked_atoms": "builders: read f at the nodes",
    "references.check_atoms": "validates atom indices and coefficients by value",
    "masked.MaskedTransformer.forward": "refuses inputs inside the undecided band: reads undecided(X)",
    "masked.masked_reference": "selects each region's rows by a boolean mask (a data-dependent shape)",
    "grids.token_mask": "checks that regions(X) lies in 0..num_regions - 1",
    "estimation.sieve_fit / fit_and_test / least_squares": "sparse least squares with scipy on the host",
    "rates, formulas": "floats only, no tensors",
}


def test_gadget_networks_runon_meta():
    z = torch.empty(9, 2, dtype=F64, device=META)
    assert on_meta(bv.product_net(4, 2.0).to_device(META)(z), bv.bspline_net(2, 2, 4).to_device(META)(z))


def test_references_follow_their_input_to_meta():
    X = torch.empty(5, 3, 1, dtype=F64, device=META)
    k = torch.tensor([[[0], [1], [0]], [[1], [0], [2]]])  # two atoms on the CPU: the reference moves them
    j = torch.tensor([[[0], [1], [-1]], [[1], [0], [3]]])
    c = torch.tensor([0.5, -1.0], dtype=F64)
    x = torch.empty(7, dtype=F64, device=META)
    assert on_meta(bv.bspline(x, 2), bv.bspline(X, 1), bv.expansion(X, k, j, c, 1),
                    product_reference(x, x, 4, 2.0), yarotsky(x, 3))


def test_masked_references_and_network_follow_their_input_to_meta():
    rankings = torch.tensor([[1, 2, 3], [3, 2, 1]])

    def piece(X):
        return (1 + X[:, :, 0]).prod(1)

    model = mk.build_masked_transformer([piece, piece], 1, rankings, 1, 4, 6.0).to_device(META)
    X = torch.empty(6, 3, 1, dtype=F64, device=META)
    assert on_meta(mk.regions(X), mk.keep_mask(X, rankings, 1), model.undecided(X), model.network(X),
                    quantize(X, mk.keep_mask(X, rankings, 1), 2.0))
