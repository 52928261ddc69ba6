"""Comparisons of float results computed by two code paths, with a tolerance scaled to the computation.

Two code paths (batched and alone, sparse and dense, a fleet and one machine, a network and a closed
form) may sum the same products in other orders: on another CPU, BLAS kernel or `MKL_CBWR` setting
their results differ in the last bits. Tests compare such results with `assert_close_scaled`, never
with `torch.equal`; ``factor * eps * scale`` stays about 1e-14 relative, far below a 1e-3 sabotage.
"""
from typing import Optional, Union

import torch

Number = Union[int, float]


def assert_close_scaled(a: Union[torch.Tensor, Number], b: Union[torch.Tensor, Number], *, factor: float = 64,
                        scale: Optional[float] = None) -> None:
    """Assert ``|a - b| <= factor * eps * scale`` elementwise, eps the machine epsilon of ``a``'s dtype.

    ``scale`` is the magnitude of the computation (e.g. the largest |input| x |weight| sum, or the sum
    itself for torch's cascaded sum of non-negative terms; a long sequential Python sum needs a larger
    ``factor``); by default the largest |value| of ``a`` and ``b`` (at least 1). Tensors must agree in
    shape, dtype and device; Python numbers are taken as float64.

    >>> f64 = torch.float64
    >>> assert_close_scaled(torch.tensor([0.1 + 0.2], dtype=f64), torch.tensor([0.3], dtype=f64))
    >>> assert_close_scaled(sum([0.1] * 10), 1)
    >>> assert_close_scaled(1.0, 1.001)  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    AssertionError: Scalars are not close!
    """
    a, b = (t if isinstance(t, torch.Tensor) else torch.as_tensor(t, dtype=torch.float64) for t in (a, b))
    dtype = a.dtype if a.is_floating_point() else torch.float64
    if scale is None:
        scale = max([1.0] + [float(t.detach().abs().max()) for t in (a, b) if t.numel()])
    atol = factor * torch.finfo(dtype).eps * float(scale)
    torch.testing.assert_close(a, b, rtol=0, atol=atol)
