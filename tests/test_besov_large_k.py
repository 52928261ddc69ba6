"""Tests for tfbook.besov at the largest levels `check_atoms` accepts (k up to 52): the spline layer far from
an atom's support, alone and in a batch."""
from __future__ import annotations

import pytest
import torch

import tfbook.besov as bv
from tfbook.device import DTYPE


@pytest.mark.parametrize("m", [1, 2, 3, 4])
@pytest.mark.parametrize("d", [1, 2, 3])
def test_error_bound_holds_at_the_largest_levels_alone_and_batched(m, d):
    # one coordinate of each sample moved far from its atom (|u| ~ 2^51): the first spline layer wrote
    # relu(u - j)/(m+1) - relu(u - m - 1)/(m+1), whose rounding left the products' scratch dirty
    # (batched |T - g| / error_bound was 1.8e8 for m = 2, d = 1 and 485 for m = 4, d = 3; 0.1 at most now)
    gen = torch.Generator().manual_seed(10 * m + d)
    N, l = 3, 2
    k = torch.full((N, l, d), 52)
    k[0, 1] = 50
    j = torch.randint(-m, 2**50 + 1, (N, l, d), generator=gen)
    c = torch.randn(N, dtype=DTYPE, generator=gen)
    S = bv.support_samples(k, j, m, 4, seed=m)
    far = S.clone()
    far[:, 0, 0] = 0.5 + 0.5 * torch.rand(len(S), dtype=DTYPE, generator=gen)
    X = torch.cat([S, far, torch.rand(4, l, d, dtype=DTYPE, generator=gen)])
    model = bv.build_transformer(k, j, c, m, 20, 60.0)
    g = bv.expansion(X, k, j, c, m)
    assert float(g.abs().max()) > 1e-6  # the samples meet the supports (bound: about 1e-11)
    bound = bv.error_bound(c, l, d, m, 20, 60.0)
    assert float((model(X) - g).abs().max()) <= bound
    alone = torch.cat([model(X[i:i + 1]) for i in range(0, len(X), 3)])
    assert float((alone - g[::3]).abs().max()) <= bound


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_bspline_net_is_exactly_zero_far_from_the_support_up_to_2_to_53(m):
    # bspline_net(4, 2, 16) gave 0.05 at u ~ 2^52 against a bound of 1.1e-6
    gen = torch.Generator().manual_seed(m)
    big = torch.exp2(torch.rand(300, generator=gen, dtype=DTYPE) * 6 + 47)  # 2^47 .. 2^53
    big = torch.cat([big, big.floor() + 0.5, torch.tensor([2.0**53], dtype=DTYPE)])
    u = torch.stack([big, torch.full_like(big, 1.3)], -1)
    net = bv.bspline_net(m, 2, 16)
    assert float(net(torch.cat([u, u.flip(-1)])).abs().max()) == 0.0
    inside = torch.tensor([[1.3, 0.7]], dtype=DTYPE)
    assert abs(float(net(inside) - bv.bspline(inside, m).prod(-1))) <= bv.bspline_net_error(m, 2, 16)
    with pytest.raises(ValueError, match="u must have every entry <= 9007199254740992"):
        net(torch.tensor([[2.0**53 + 2, 0.5]], dtype=DTYPE))
