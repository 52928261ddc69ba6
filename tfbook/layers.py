"""Explicit-weight layers acting on a token matrix ``H`` of shape (batch, n, D): the core of every chapter.

Tokens are rows (torch convention); papers often write the transposed ``D x n`` form. Nothing here is
trained: every weight is handed in by a construction, and every layer does all of its arithmetic in
``forward``. Each layer has a ``kind`` and a ``name`` (set by the model that holds it):

* `Attention` (kind ``"attn"``, or ``"xattn"`` for cross-attention to a memory): multi-head attention
  ``H + sum_h A_h (X W_V^h.T + b_V^h) W_O^h.T`` with scores ``(H W_Q^h.T + b_Q^h)(X W_K^h.T + b_K^h).T``
  (X = H, a key/value cache, or the memory). Normalisers: ``softmax`` (scores / temperature),
  ``relu`` (relu(scores) / a count: the number of keys seen, or a fixed T), ``hard`` (arg-max, ties
  averaged) and ``linear`` (the scores themselves). Key masks, causal masks, a null key with its own
  value, and windows (query i sees keys i-U..i+U, the boundary masked or circular). Heads are stored
  stacked, (heads, ...), and computed batched.
* `ElementwiseMultiplication` (kind ``"ewml"``): ``h_i + sum_m <Q_m h_i, K_m h_i> V_m h_i``, one token at a time.
* `FeedForward` (kind ``"mlp"``): ``H + relu(H W_1.T + b_1) W_2.T + b_2`` (``residual=False`` drops ``H``).
* `Block` (attention then feed-forward) and `Transformer` (a stack of blocks).
* `perturb`: a context manager that scales or adds noise to the update of selected layers (by name,
  kind or head); mutation tests and robustness experiments use it.
* Two process-wide sabotages, read from the environment at import, for mutation tests of the whole
  book: ``TFBOOK_PERTURB_CORE=eps`` scales every core layer's update by 1 + eps, and
  ``TFBOOK_PERTURB_WEIGHTS=eps`` adds seeded uniform noise of eps * max|w| to every entry of every
  tensor a core layer stores. `sabotage_hits` counts what each has changed. Only the tests read them.

Dense paper-form matrices are built on demand by ``dense()``, never stored. A weight with at least
``SPARSE_MIN_NUMEL`` scalars whose CSR arrays (values, column indices, row pointers) would take at most
``SPARSE_MAX_FRACTION`` of its dense storage is stored as those arrays, for the matrix it multiplies by
(`_SparseWeights`); every accessor still returns it dense.
"""
from __future__ import annotations

import contextlib
import fnmatch
import os
import warnings
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

from tfbook import validate
from tfbook.device import DTYPE

NORMALIZATIONS = ("softmax", "relu", "hard", "linear")
BOUNDARIES = ("masked", "circular")
KINDS = ("attn", "xattn", "ewml", "mlp")
CHUNK_ELEMENTS = 2**20  # score entries (batch x heads x queries x keys) computed at once
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state", category=UserWarning)


def _as_tensor(x, name: str, ndim: int) -> torch.Tensor:
    t = torch.as_tensor(x, dtype=DTYPE) if not isinstance(x, torch.Tensor) else x.to(DTYPE)
    if t.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    return t


def _frozen(t: Optional[torch.Tensor]) -> Optional[nn.Parameter]:
    """``t`` stored as a frozen float64 parameter: the one function through which core layers store tensors
    (weights, biases, null keys and values), and so the place of the ``TFBOOK_PERTURB_WEIGHTS`` sabotage."""
    if t is None:
        return None
    t = t.detach().clone().to(DTYPE)
    return nn.Parameter(t if _WEIGHTS is None else _WEIGHTS(t), requires_grad=False)


# --- the perturbation hooks ------------------------------------------------------------------------

@dataclass
class Perturbation:
    """One active `perturb` context; ``hits`` counts the layer calls it changed."""

    scale: Optional[float]
    add: Optional[float]
    names: Optional[tuple[str, ...]]
    kinds: Optional[tuple[str, ...]]
    heads: Optional[tuple[int, ...]]
    fn: Optional[Callable[[nn.Module, torch.Tensor], torch.Tensor]]
    generator: torch.Generator
    hits: int = 0

    def selects(self, layer: nn.Module) -> bool:
        if self.kinds is not None and layer.kind not in self.kinds:
            return False
        return self.names is None or any(fnmatch.fnmatchcase(layer.name, p) for p in self.names)


@dataclass
class WeightNoise:
    """The ``TFBOOK_PERTURB_WEIGHTS=eps`` sabotage; ``hits`` counts the stored tensors it changed."""

    eps: float
    generator: torch.Generator
    hits: int = 0

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` plus noise uniform on [-eps max|t|, eps max|t|] in every entry, zeros included.

        A tensor without a non-zero entry (max|t| = 0) is returned unchanged and is not a hit.
        """
        amplitude = self.eps * float(t.abs().max()) if t.numel() else 0.0
        if amplitude == 0:
            return t
        self.hits += 1
        noise = (torch.rand(t.shape, generator=self.generator, dtype=DTYPE) * 2 - 1) * amplitude
        return t + noise.to(t.device)


_ACTIVE: list[Perturbation] = []
PERTURB_ENV = "TFBOOK_PERTURB_CORE"  # e.g. 1e-3: every core layer's update is scaled by 1 + 1e-3 in this process
WEIGHTS_ENV = "TFBOOK_PERTURB_WEIGHTS"  # e.g. 1e-3: noise of 1e-3 * max|w| on every stored entry in this process
_CORE: Optional[Perturbation] = None  # the TFBOOK_PERTURB_CORE sabotage, when set
_WEIGHTS: Optional[WeightNoise] = None  # the TFBOOK_PERTURB_WEIGHTS sabotage, when set


@contextlib.contextmanager
def perturb(scale: Optional[float] = None, add: Optional[float] = None, *, names: Optional[Sequence[str]] = None,
            kinds: Optional[Sequence[str]] = None, heads: Optional[Sequence[int]] = None,
            fn: Optional[Callable[[nn.Module, torch.Tensor], torch.Tensor]] = None,
            seed: int = 0) -> Iterator[Perturbation]:
    """Change the update U of every selected core layer while the context is active.

    A layer is selected when its ``name`` matches one of ``names`` (fnmatch patterns; None = every
    layer) and its ``kind`` is in ``kinds`` (None = every kind). U (output minus input for residual
    layers, the output otherwise) becomes ``scale * U + noise`` with noise uniform on [-add, add]
    (drawn from ``seed``), then ``fn(layer, U)`` if given. With ``heads``, the scale applies only to
    those heads of an attention or EWML layer (the other heads and the noise are unchanged).

    >>> with perturb(scale=0.0, names=["block0.*"]) as p:
    ...     pass
    """
    if scale is not None:
        scale = validate.real("scale", scale)
    if add is not None:
        add = validate.real("add", add, low=0.0)
    if kinds is not None:
        for k in kinds:
            validate.choice("kinds", k, KINDS)
    if heads is not None:
        heads = tuple(validate.positive_int("heads", h, 0) for h in heads)
        if scale is None:
            raise ValueError("heads needs a scale (the factor applied to those heads)")
    if names is not None and isinstance(names, str):
        names = [names]
    gen = torch.Generator().manual_seed(validate.positive_int("seed", seed, 0))
    p = Perturbation(scale, add, None if names is None else tuple(names), None if kinds is None else tuple(kinds),
                     heads, fn, gen)
    _ACTIVE.append(p)
    try:
        yield p
    finally:
        _ACTIVE.remove(p)


def _eps_from_environment(name: str, low: Optional[float] = None) -> Optional[float]:
    """The number in the environment variable ``name`` (None when unset or empty); ValueError on junk."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        return validate.real(name, float(value), low=low)
    except ValueError:
        raise ValueError(f"{name} must be a finite real number{'' if low is None else f' >= {low}'} such as 1e-3, "
                         f"got {value!r}") from None


def _sabotage_from_environment() -> None:
    """Activate the process-wide sabotages set in the environment (read once, at import).

    ``TFBOOK_PERTURB_CORE=eps``: a ``perturb(scale=1 + eps)`` of every core layer.
    ``TFBOOK_PERTURB_WEIGHTS=eps`` (eps >= 0): `WeightNoise` on every tensor `_frozen` stores, drawn
    from a generator seeded with 0, so the noise is the same in every process that builds the same
    layers in the same order. The claims audit (`tfbook.claims_audit`, ``make test-claims``) runs every
    notebook under these and expects every construction claim to fail under at least one.
    """
    global _CORE, _WEIGHTS
    eps = _eps_from_environment(PERTURB_ENV)
    if eps is not None:
        _CORE = Perturbation(1.0 + eps, None, None, None, None, None, torch.Generator().manual_seed(0))
        _ACTIVE.append(_CORE)
    eps = _eps_from_environment(WEIGHTS_ENV, low=0.0)
    if eps is not None:
        _WEIGHTS = WeightNoise(eps, torch.Generator().manual_seed(0))


def sabotage_hits() -> dict[str, int]:
    """What the process-wide sabotages have changed so far, by environment variable: layer calls for
    ``TFBOOK_PERTURB_CORE``, stored tensors for ``TFBOOK_PERTURB_WEIGHTS`` (0 for a sabotage not set).

    A sabotage that is set and hits nothing tests nothing: an audit checks these counts.

    >>> sorted(sabotage_hits())
    ['TFBOOK_PERTURB_CORE', 'TFBOOK_PERTURB_WEIGHTS']
    """
    return {PERTURB_ENV: 0 if _CORE is None else _CORE.hits, WEIGHTS_ENV: 0 if _WEIGHTS is None else _WEIGHTS.hits}


def _head_scale(layer: nn.Module, num_heads: int, device) -> Optional[torch.Tensor]:
    """(heads,) factors for the head-restricted perturbations that select ``layer``, or None."""
    factors = None
    for p in _ACTIVE:
        if p.heads is not None and p.selects(layer):
            factors = torch.ones(num_heads, dtype=DTYPE, device=device) if factors is None else factors
            for h in p.heads:
                if h < num_heads:
                    factors[h] *= p.scale
            p.hits += 1
    return factors


def _perturb_update(layer: nn.Module, update: torch.Tensor) -> torch.Tensor:
    for p in _ACTIVE:
        if not p.selects(layer) or (p.heads is not None and p.add is None and p.fn is None):
            continue
        if p.scale is not None and p.heads is None:
            update = update * p.scale
        if p.add is not None:
            noise = (torch.rand(update.shape, generator=p.generator, dtype=DTYPE) * 2 - 1) * p.add
            update = update + noise.to(update.device, update.dtype)
        if p.fn is not None:
            update = p.fn(layer, update)
        p.hits += 1
    return update


# --- sparse storage behind dense semantics ---------------------------------------------------------

# A weight is stored sparse only with at least this many scalars (every quick-profile and test weight
# has fewer; the Besov transformer's weights at N = 200 atoms have about 4 million) ...
SPARSE_MIN_NUMEL = 2**20
SPARSE_MAX_FRACTION = 0.25  # ... and when its CSR arrays take at most this fraction of the dense storage
_PARTS = ("values", "crow", "col")  # a sparse weight `name` is stored as name_values (a parameter), name_crow, name_col


def _sparse_worthy(numel: int, nonzero: int, rows: int = 0) -> bool:
    """Whether a weight of ``numel`` scalars with ``nonzero`` non-zeros, used as a matrix of ``rows``
    rows, is stored sparse (CSR: ``nonzero`` values and column indices, ``rows + 1`` row pointers)."""
    return numel >= SPARSE_MIN_NUMEL and 2 * nonzero + rows + 1 <= SPARSE_MAX_FRACTION * numel


def weight_from_entries(shape: Sequence[int], entries: Sequence[tuple], device=None) -> torch.Tensor:
    """A weight of ``shape`` from entries ``(index arrays..., values)`` (broadcast together; repeated
    indices add up), on ``device`` (default the CPU).

    Returns a dense tensor (built exactly as ``zeros(shape).index_put_(..., accumulate=True)``), or a
    sparse COO tensor when there are fewer entries than a sparse weight may hold (see `_sparse_worthy`):
    a builder then never materialises the dense matrix, and the layer decides its storage. On ``meta``
    the weight is dense (shapes only, nothing allocated).
    """
    shape = tuple(int(s) for s in shape)
    device = torch.device("cpu" if device is None else device)
    numel = int(np.prod(shape)) if shape else 1
    count = sum(int(np.prod(np.broadcast_shapes(*(np.shape(a) for a in e)))) for e in entries)  # >= non-zeros
    if device.type == "meta":
        return torch.zeros(shape, dtype=DTYPE, device=device)
    if not _sparse_worthy(numel, count) or _WEIGHTS is not None:
        W = torch.zeros(shape, dtype=DTYPE, device=device)
        for *index, values in entries:
            W.index_put_(tuple(torch.as_tensor(i, device=device) for i in index),
                         torch.as_tensor(values, dtype=DTYPE, device=device), accumulate=True)
        return W
    index, values = [torch.zeros(len(shape), 0, dtype=torch.int64)], [torch.zeros(0, dtype=DTYPE)]
    for e in entries:
        e = [np.ascontiguousarray(a).ravel() for a in np.broadcast_arrays(*(np.asarray(a) for a in e))]
        index.append(torch.as_tensor(np.stack(e[:-1]), dtype=torch.int64))
        values.append(torch.as_tensor(e[-1], dtype=DTYPE))
    return torch.sparse_coo_tensor(torch.cat(index, dim=1).to(device), torch.cat(values).to(device), shape,
                                   check_invariants=False).coalesce()


def _matrix_entries(t: torch.Tensor, cols: bool) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int]]:
    """Non-zero (row, col) indices (2, nnz) and values of the 2-D matrix a weight is used as.

    ``cols=False``: (..., c) -> (prod(...), c) (W_1, W_2, stacked W_Q, W_K, W_V); ``cols=True``:
    (h, D, m) -> (D, h m) (a stacked W_O, as `_write_out` uses it).
    """
    t = t.coalesce() if t.layout == torch.sparse_coo else t.to_sparse_coo().coalesce()  # dense or CSR given
    idx, val = t.indices(), t.values()
    keep = val != 0
    idx, val = idx[:, keep], val[keep]
    shape = tuple(t.shape)
    if cols:
        h, D, m = shape
        return torch.stack([idx[1], idx[0] * m + idx[2]]), val, (D, h * m)
    rows = torch.zeros_like(idx[0])
    for axis in range(len(shape) - 1):
        rows = rows * shape[axis] + idx[axis]
    return torch.stack([rows, idx[-1]]), val, (int(np.prod(shape[:-1])), shape[-1])


class _SparseWeights(nn.Module):
    """Core-layer storage: each weight dense (a frozen parameter, as always) or, when large and sparse
    (`_sparse_worthy`), as the CSR arrays of the matrix it multiplies by; every accessor stays dense.

    ``layer.W`` returns the dense weight (for a sparse one a fresh tensor: write back with `set_weight`),
    ``state_dict`` holds dense weights and ``load_state_dict`` takes them, `stored_entries` counts what
    is stored (values plus index entries), and the forward pass multiplies by the CSR matrix.
    """

    def __init__(self):
        super().__init__()
        self._sparse: dict[str, tuple[tuple[int, ...], bool]] = {}  # name -> (dense shape, cols)

    def __getattr__(self, name: str):
        sparse = self.__dict__.get("_sparse")
        if sparse and name in sparse:
            return self._dense_weight(name)
        return super().__getattr__(name)

    def set_weight(self, name: str, t, cols: bool = False) -> None:
        """Store weight ``name`` (dense or sparse ``t``): sparse only when large and sparse, never noised."""
        t = t.to(DTYPE)
        if name in self._sparse:
            del self._sparse[name]
            for part in _PARTS:
                delattr(self, f"{name}_{part}")
        elif name in self._parameters:
            del self._parameters[name]
        if t.layout == torch.strided and (t.device.type == "meta" or t.numel() < SPARSE_MIN_NUMEL
                                          or not _sparse_worthy(t.numel(), int(torch.count_nonzero(t)))):
            setattr(self, name, nn.Parameter(t.detach().clone(), requires_grad=False))
            return
        index, values, size = _matrix_entries(t, cols)
        if not _sparse_worthy(t.numel(), values.numel(), size[0]):
            setattr(self, name, nn.Parameter(t.to_dense().detach().clone(), requires_grad=False))
            return
        csr = torch.sparse_coo_tensor(index, values, size, check_invariants=False).coalesce().to_sparse_csr()
        self._sparse[name] = (tuple(t.shape), cols)
        setattr(self, f"{name}_values", nn.Parameter(csr.values().clone(), requires_grad=False))
        self.register_buffer(f"{name}_crow", csr.crow_indices().clone())
        self.register_buffer(f"{name}_col", csr.col_indices().clone())

    def _store_weight(self, name: str, t: torch.Tensor, cols: bool = False) -> None:
        """Store a constructor's weight: with `WeightNoise` active, noised dense through `_frozen` (so a
        noisy weight is dense); otherwise by `set_weight`'s rule."""
        if _WEIGHTS is not None or (t.layout == torch.strided and t.numel() < SPARSE_MIN_NUMEL):
            setattr(self, name, _frozen(t.to_dense() if t.layout != torch.strided else t))
        else:
            self.set_weight(name, t, cols)

    def _csr(self, name: str) -> torch.Tensor:
        crow, col, values = (getattr(self, f"{name}_{p}") for p in ("crow", "col", "values"))
        shape, cols = self._sparse[name]
        size = (shape[1], shape[0] * shape[2]) if cols else (int(np.prod(shape[:-1])), shape[-1])
        return torch.sparse_csr_tensor(crow, col, values, size, dtype=DTYPE, device=values.device,
                                       check_invariants=False)

    def _dense_weight(self, name: str) -> torch.Tensor:
        shape, cols = self._sparse[name]
        M = self._csr(name)
        if M.device.type == "meta":
            return torch.empty(shape, dtype=DTYPE, device=M.device)
        M = M.to_dense()
        return M.reshape(shape[1], shape[0], shape[2]).permute(1, 0, 2).contiguous() if cols else M.reshape(shape)

    def _shape(self, name: str) -> tuple[int, ...]:
        """The dense shape of weight ``name`` (without building it)."""
        return self._sparse[name][0] if name in self._sparse else tuple(getattr(self, name).shape)

    def _device(self, name: str) -> torch.device:
        return getattr(self, f"{name}_values" if name in self._sparse else name).device

    def _times(self, name: str, X: torch.Tensor) -> torch.Tensor:
        """M @ X for the matrix M of sparse weight ``name`` and a dense X (k, n); shapes only on meta."""
        M = self._csr(name)
        if X.device.type == "meta" or M.device.type == "meta":
            return torch.empty(M.shape[0], X.shape[1], dtype=X.dtype, device=X.device)
        return M @ X

    def _mm(self, name: str, X: torch.Tensor) -> torch.Tensor:
        """W @ X for the (2-D) weight ``name``, stored dense or sparse."""
        return self._times(name, X) if name in self._sparse else getattr(self, name) @ X

    def index_tensors(self) -> list[torch.Tensor]:
        """The index arrays (row pointers and columns) of the sparse weights, in storage order."""
        return [getattr(self, f"{n}_{part}") for n in self._sparse for part in ("crow", "col")]

    def stored_entries(self) -> int:
        """Index entries stored by the sparse weights (their values are parameters, counted as such)."""
        return sum(t.numel() for t in self.index_tensors())

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for name in self._sparse:
            for part in _PARTS:
                destination.pop(prefix + f"{name}_{part}", None)
            destination[prefix + name] = self._dense_weight(name)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        local = dict(state_dict)
        for name, (shape, cols) in list(self._sparse.items()):
            key = prefix + name
            value = local.get(key)
            if value is not None and tuple(value.shape) == shape:
                self.set_weight(name, value, cols)
            if name not in self._sparse:  # now dense: the parent class loads it (again) from `key`
                continue
            local.pop(key, None)
            if value is None:
                missing_keys.append(key)
            elif tuple(value.shape) != shape:
                error_msgs.append(f"size mismatch for {key}: copying a param with shape {tuple(value.shape)}, "
                                  f"the shape in current model is {shape}.")
            local.update({prefix + f"{name}_{p}": getattr(self, f"{name}_{p}") for p in _PARTS})
        super()._load_from_state_dict(local, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)


def stored_entries(layer: nn.Module) -> int:
    """Index entries a core layer stores besides its parameters (0 for a layer stored dense)."""
    return layer.stored_entries() if isinstance(layer, _SparseWeights) else 0


def shared_index_entries(layers: Sequence[nn.Module]) -> int:
    """Index entries stored by ``layers`` together, each index tensor counted once (layers that share
    their storage, like the repeated blocks of a construction, store it once)."""
    tensors = {id(t): t for layer in layers if isinstance(layer, _SparseWeights) for t in layer.index_tensors()}
    return sum(t.numel() for t in tensors.values())


# --- attention -------------------------------------------------------------------------------------

@dataclass
class HeadWeights:
    """One attention head: ``W_Q`` (m_qk, D), ``W_K`` (m_qk, D_kv), ``W_V`` (m_v, D_kv), ``W_O`` (D, m_v), optional biases."""

    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    W_O: torch.Tensor
    b_Q: Optional[torch.Tensor] = None
    b_K: Optional[torch.Tensor] = None
    b_V: Optional[torch.Tensor] = None

    def __post_init__(self) -> None:
        self.W_Q, self.W_K = _as_tensor(self.W_Q, "W_Q", 2), _as_tensor(self.W_K, "W_K", 2)
        self.W_V, self.W_O = _as_tensor(self.W_V, "W_V", 2), _as_tensor(self.W_O, "W_O", 2)
        m_qk, m_v, D_kv = self.W_Q.shape[0], self.W_V.shape[0], self.W_K.shape[1]
        if self.W_K.shape[0] != m_qk:
            raise ValueError(f"W_K must have {m_qk} rows like W_Q, got {tuple(self.W_K.shape)}")
        if self.W_V.shape[1] != D_kv or self.W_O.shape[1] != m_v:
            raise ValueError(f"W_V must be (m_v, {D_kv}) and W_O (D, m_v); got {tuple(self.W_V.shape)}, "
                             f"{tuple(self.W_O.shape)}")
        if self.W_O.shape[0] != self.W_Q.shape[1]:
            raise ValueError(f"W_O must have {self.W_Q.shape[1]} rows (D of W_Q), got {self.W_O.shape[0]}")
        for name, size in (("b_Q", m_qk), ("b_K", m_qk), ("b_V", m_v)):
            value = getattr(self, name)
            if value is not None:
                value = _as_tensor(value, name, 1)
                if value.shape != (size,):
                    raise ValueError(f"{name} must have shape ({size},), got {tuple(value.shape)}")
                setattr(self, name, value)

    @classmethod
    def zeros(cls, D: int, m: int = 1) -> "HeadWeights":
        """A head with all-zero weights (contributes nothing under any normalisation)."""
        return cls(*(torch.zeros(m, D, dtype=DTYPE) for _ in range(3)), torch.zeros(D, m, dtype=DTYPE))


def _stack(tensors: Sequence[Optional[torch.Tensor]], rows: int, cols: Optional[int] = None) -> Optional[torch.Tensor]:
    """Stack per-head matrices (or vectors) zero-padded to ``rows`` (x ``cols``); None if all are None."""
    if all(t is None for t in tensors):
        return None
    out = []
    for t in tensors:
        shape = (rows,) if cols is None else (rows, cols)
        z = torch.zeros(shape, dtype=DTYPE)
        if t is not None:
            z[: t.shape[0], ...] = t if cols is None else torch.nn.functional.pad(t, (0, cols - t.shape[1]))
        out.append(z)
    return torch.stack(out)


class HeadView:
    """Read-only per-head view into a layer's stacked tensors (registers nothing)."""

    def __init__(self, layer: nn.Module, index: int):
        self._layer, self._index = layer, index

    def __getattr__(self, name: str) -> torch.Tensor:
        if name not in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V"):
            raise AttributeError(name)
        stacked = getattr(self._layer, name)
        if stacked is None:  # absent bias: zeros of the right size
            ref = {"b_Q": "W_Q", "b_K": "W_K", "b_V": "W_V"}[name]
            return torch.zeros(self._layer._shape(ref)[1], dtype=DTYPE, device=self._layer._device(ref))
        return stacked[self._index]


def _project(X: torch.Tensor, W: torch.Tensor, b: Optional[torch.Tensor]) -> torch.Tensor:
    """X (B, n, Din), W (h, m, Din), b (h, m) -> (B, h, m, n), as one matrix product over all tokens."""
    h, m, d_in = W.shape
    B, n = X.shape[0], X.shape[1]
    Y = (W.reshape(h * m, d_in) @ X.reshape(B * n, d_in).T).reshape(h, m, B, n)  # (h, m, B, n)
    Y = Y if b is None else Y + b[:, :, None, None]
    return Y.permute(2, 0, 1, 3)  # (B, h, m, n), a view


def _write_out(W_O: torch.Tensor, O: torch.Tensor) -> torch.Tensor:
    """W_O (h, D, m_v) applied to head outputs O (B, h, m_v, n) and summed over heads -> (B, n, D)."""
    h, D, m_v = W_O.shape
    B, n = O.shape[0], O.shape[-1]
    O = O.permute(1, 2, 0, 3).reshape(h * m_v, B * n)  # (h * m_v, B * n)
    return (W_O.permute(1, 0, 2).reshape(D, h * m_v) @ O).reshape(D, B, n).permute(1, 2, 0)  # (B, n, D)


class _StackedLayer(_SparseWeights):
    """Shared storage of stacked head tensors W_Q, W_K (h, m_qk, D_kv), W_V (h, m_v, D_kv), W_O (h, D, m_v)."""

    kind = ""

    def _store(self, W_Q, W_K, W_V, W_O, b_Q, b_K, b_V) -> None:
        W_Q, W_K = _as_tensor(W_Q, "W_Q", 3), _as_tensor(W_K, "W_K", 3)
        W_V, W_O = _as_tensor(W_V, "W_V", 3), _as_tensor(W_O, "W_O", 3)
        h, m_qk, D = W_Q.shape
        D_kv, m_v = W_K.shape[2], W_V.shape[1]
        if h == 0:
            raise ValueError("heads must contain at least one head")
        if W_K.shape[:2] != (h, m_qk):
            raise ValueError(f"W_K must have shape ({h}, {m_qk}, D_kv), got {tuple(W_K.shape)}")
        if W_V.shape != (h, m_v, D_kv):
            raise ValueError(f"W_V must have shape ({h}, m_v, {D_kv}), got {tuple(W_V.shape)}")
        if W_O.shape != (h, D, m_v):
            raise ValueError(f"W_O must have shape ({h}, {D}, {m_v}), got {tuple(W_O.shape)}")
        for name, value, size in (("b_Q", b_Q, m_qk), ("b_K", b_K, m_qk), ("b_V", b_V, m_v)):
            if value is not None and tuple(_as_tensor(value, name, 2).shape) != (h, size):
                raise ValueError(f"{name} must have shape ({h}, {size}), got {tuple(torch.as_tensor(value).shape)}")
        for name, t in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V), ("W_O", W_O)):
            self._store_weight(name, t, cols=name == "W_O")
        self.b_Q, self.b_K, self.b_V = (_frozen(None if b is None else _as_tensor(b, "b", 2)) for b in (b_Q, b_K, b_V))
        self.D, self.D_kv, self.name = D, D_kv, ""

    @property
    def num_heads(self) -> int:
        return self._shape("W_Q")[0]

    @property
    def heads(self) -> list[HeadView]:
        """Per-head views exposing ``W_Q, b_Q, W_K, b_K, W_V, b_V, W_O``."""
        return [HeadView(self, i) for i in range(self.num_heads)]

    @property
    def value_width(self) -> int:
        """Total value width, heads x m_v (the width of the concatenated head outputs)."""
        h, m_v, _ = self._shape("W_V")
        return h * m_v

    def _project(self, X: torch.Tensor, name: str, b: Optional[torch.Tensor]) -> torch.Tensor:
        """`_project` of X (B, n, Din) by the stacked weight ``name`` (h, m, Din) -> (B, h, m, n)."""
        if name not in self._sparse:
            return _project(X, getattr(self, name), b)
        h, m, d_in = self._shape(name)
        B, n = X.shape[0], X.shape[1]
        Y = self._times(name, X.reshape(B * n, d_in).T).reshape(h, m, B, n)  # (h, m, B, n)
        Y = Y if b is None else Y + b[:, :, None, None]
        return Y.permute(2, 0, 1, 3)  # (B, h, m, n)

    def _write_out(self, O: torch.Tensor) -> torch.Tensor:
        """`_write_out` of head outputs O (B, h, m_v, n) through W_O -> (B, n, D)."""
        if "W_O" not in self._sparse:
            return _write_out(self.W_O, O)
        h, D, m_v = self._shape("W_O")
        B, n = O.shape[0], O.shape[-1]
        O = O.permute(1, 2, 0, 3).reshape(h * m_v, B * n)  # (h * m_v, B * n)
        return self._times("W_O", O).reshape(D, B, n).permute(1, 2, 0)  # (B, n, D)

    def _residual(self, H: torch.Tensor, O: torch.Tensor) -> torch.Tensor:
        """H plus the heads' outputs O (B, h, m_v, n) written through W_O, with any active perturbation."""
        if _ACTIVE:
            factors = _head_scale(self, self.num_heads, H.device)
            if factors is not None:
                O = O * factors[:, None, None]
        update = self._write_out(O)  # (B, n, D)
        if _ACTIVE:
            update = _perturb_update(self, update)
        return H + update

    def _dense_qk(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(h, D, D) Q and K with <Q h, K h'> = (W_Q h) . (W_K h') and no biases."""
        if any(b is not None and bool(b.any()) for b in (self.b_Q, self.b_K, self.b_V)):
            raise ValueError("dense() gives the bias-free paper form; this layer has non-zero biases")
        h, m, D = self.W_Q.shape
        if m <= D:
            Q = torch.zeros(h, D, D, dtype=DTYPE, device=self.W_Q.device)
            K = torch.zeros(h, D, self.D_kv, dtype=DTYPE, device=self.W_Q.device)
            Q[:, :m], K[:, :m] = self.W_Q, self.W_K
            return Q, K
        K = torch.eye(D, self.D_kv, dtype=DTYPE, device=self.W_Q.device).expand(h, -1, -1).clone()
        if D != self.D_kv:
            raise ValueError("dense() of a cross-attention layer needs m_qk <= D")
        return self.W_K.transpose(1, 2) @ self.W_Q, K  # <(W_K^T W_Q) h, h'> = (W_Q h) . (W_K h')

    def dense(self) -> dict[str, torch.Tensor]:
        """Paper-form matrices Q, K (h, D, D) and V (h, D, D_kv) with score <Q h_i, K h_j> and value V h_j."""
        Q, K = self._dense_qk()
        return {"Q": Q, "K": K, "V": self.W_O @ self.W_V}


class Attention(_StackedLayer):
    """Residual multi-head attention with stacked heads; see the module docstring.

    ``heads``: a sequence of `HeadWeights` (zero-padded to common sizes), or use `Attention.stacked`.
    ``normalization``: one of `NORMALIZATIONS`. ``temperature`` (softmax): scores are divided by it.
    ``relu_divisor`` (relu): ``"keys"`` divides by the number of keys each query sees (masked keys
    excluded, the null key included), an int T by T. ``causal``: query i sees keys j <= i.
    ``window=U``: query i sees keys j with |i - j| <= U; ``boundary="masked"`` drops keys outside the
    sequence, ``"circular"`` uses keys (i + o) mod m for o in -U..U, counted with multiplicity.
    ``null_key`` (h, m_qk) and ``null_value`` (h, m_v): one extra key, always present, placed first.
    ``cross=True``: kind ``"xattn"``, keys and values come from ``memory`` (B, m, D_kv).
    ``kv=project_memory(memory)`` reuses projected keys and values (a key/value cache).
    """

    def __init__(self, heads: Sequence[HeadWeights], normalization: str = "softmax", *, causal: bool = False,
                 temperature: float = 1.0, relu_divisor: Union[str, int] = "keys", window: Optional[int] = None,
                 boundary: str = "masked", null_key=None, null_value=None, cross: bool = False, name: str = "",
                 _stacked: Optional[tuple] = None):
        super().__init__()
        if _stacked is None:
            heads = list(heads)
            if len(heads) == 0:
                raise ValueError("heads must contain at least one HeadWeights")
            if not all(isinstance(h, HeadWeights) for h in heads):
                raise ValueError("heads must be HeadWeights (or use Attention.stacked for stacked tensors)")
            D, D_kv = heads[0].W_Q.shape[1], heads[0].W_K.shape[1]
            if any(h.W_Q.shape[1] != D or h.W_K.shape[1] != D_kv for h in heads):
                raise ValueError("all heads must act on the same embedding dimensions")
            m_qk = max(h.W_Q.shape[0] for h in heads)
            m_v = max(h.W_V.shape[0] for h in heads)
            _stacked = (_stack([h.W_Q for h in heads], m_qk, D), _stack([h.W_K for h in heads], m_qk, D_kv),
                        _stack([h.W_V for h in heads], m_v, D_kv),
                        torch.stack([nn.functional.pad(h.W_O, (0, m_v - h.W_O.shape[1])) for h in heads]),
                        _stack([h.b_Q for h in heads], m_qk), _stack([h.b_K for h in heads], m_qk),
                        _stack([h.b_V for h in heads], m_v))
        self._store(*_stacked)
        self.normalization = validate.choice("normalization", normalization, NORMALIZATIONS)
        self.temperature = validate.real("temperature", temperature, low=0, low_open=True)
        if relu_divisor != "keys":
            relu_divisor = validate.positive_int("relu_divisor", relu_divisor)
        self.relu_divisor = relu_divisor
        self.causal, self.cross = bool(causal), bool(cross)
        self.window = None if window is None else validate.positive_int("window", window, 0)
        self.boundary = validate.choice("boundary", boundary, BOUNDARIES)
        if self.cross and self.causal:
            raise ValueError("causal must be False for cross-attention (cross=True)")
        if self.cross and self.window is not None:
            raise ValueError("window must be None for cross-attention (cross=True)")
        if (null_key is None) != (null_value is None):
            raise ValueError("null_key and null_value must be given together")
        h, m_qk, m_v = self.num_heads, self._shape("W_Q")[1], self._shape("W_V")[1]
        if null_key is not None:
            null_key, null_value = _as_tensor(null_key, "null_key", 2), _as_tensor(null_value, "null_value", 2)
            if null_key.shape != (h, m_qk) or null_value.shape != (h, m_v):
                raise ValueError(f"null_key must be ({h}, {m_qk}) and null_value ({h}, {m_v}); got "
                                 f"{tuple(null_key.shape)}, {tuple(null_value.shape)}")
        self.null_key, self.null_value = _frozen(null_key), _frozen(null_value)
        self.kind, self.name = ("xattn" if self.cross else "attn"), name
        if not self.cross and self.D_kv != self.D:
            raise ValueError(f"self-attention needs W_K with D = {self.D} columns, got {self.D_kv}")

    @classmethod
    def stacked(cls, W_Q, W_K, W_V, W_O, b_Q=None, b_K=None, b_V=None, normalization: str = "softmax",
                **options) -> "Attention":
        """Attention from stacked tensors W_Q, W_K (h, m_qk, D), W_V (h, m_v, D), W_O (h, D, m_v)."""
        return cls((), normalization, _stacked=(W_Q, W_K, W_V, W_O, b_Q, b_K, b_V), **options)

    # -- masks -------------------------------------------------------------------------------------
    def _counts(self, B: int, n: int, m: int, key_mask: Optional[torch.Tensor], device) -> Optional[torch.Tensor]:
        """(B or 1, 1, n, m) multiplicity of each key for each query (0 = absent), or None if all are 1."""
        counts = None
        offset = 0 if self.cross else m - n  # query i sits at position offset + i
        if not self.cross and offset < 0:
            raise ValueError(f"memory must hold at least the {n} query positions, got {m}")
        i = torch.arange(n, device=device)[:, None] + offset
        j = torch.arange(m, device=device)[None, :]
        if self.causal:
            counts = (j <= i).to(DTYPE)
        if self.window is not None:
            U = self.window
            if self.boundary == "masked":
                w = ((j - i).abs() <= U).to(DTYPE)
            else:
                d = torch.remainder(j - i, m)
                w = (torch.div(U - d, m, rounding_mode="floor") + torch.div(U + d, m, rounding_mode="floor") + 1)
                w = w.clamp(min=0).to(DTYPE)
            counts = w if counts is None else counts * w
        if counts is not None:
            counts = counts[None, None]  # (1, 1, n, m)
        if key_mask is not None:
            if key_mask.shape != (B, m):
                raise ValueError(f"key_mask must have shape ({B}, {m}), got {tuple(key_mask.shape)}")
            km = key_mask.to(device=device, dtype=DTYPE)[:, None, None, :]  # (B, 1, 1, m)
            counts = km if counts is None else counts * km
        if counts is not None and self.null_key is not None:
            ones = torch.ones(*counts.shape[:-1], 1, dtype=DTYPE, device=device)
            counts = torch.cat([ones, counts], dim=-1)
        return counts

    def project_memory(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of ``memory`` (B, m, D_kv) projected once: (Kt (B, h, m_qk, m), Vt (B, h, m_v, m)).

        Pass them back as ``kv=`` to reuse them (an encoder's outputs, or a decoder's growing cache,
        extended one position at a time with ``torch.cat`` or by writing into a buffer).
        """
        if memory.ndim != 3 or memory.shape[-1] != self.D_kv:
            raise ValueError(f"memory must have shape (batch, m, {self.D_kv}), got {tuple(memory.shape)}")
        return self._project(memory, "W_K", self.b_K), self._project(memory, "W_V", self.b_V)

    def _keys_values(self, H: torch.Tensor, memory: Optional[torch.Tensor],
                     kv: Optional[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Projected keys Kt (B, h, m_qk, m) and values Vt (B, h, m_v, m) from H, memory or a given cache."""
        if H.ndim != 3 or H.shape[-1] != self.D:
            raise ValueError(f"H must have shape (batch, n, {self.D}), got {tuple(H.shape)}")
        if memory is not None and kv is not None:
            raise ValueError("give memory or kv, not both")
        if kv is not None:
            Kt, Vt = kv
            h, m_qk, m_v = self.num_heads, self._shape("W_Q")[1], self._shape("W_V")[1]
            if (Kt.ndim != 4 or Kt.shape[:3] != (H.shape[0], h, m_qk) or Vt.shape[:3] != (H.shape[0], h, m_v)
                    or Vt.shape[3] != Kt.shape[3]):
                raise ValueError(f"kv must be (Kt ({H.shape[0]}, {h}, {m_qk}, m), Vt ({H.shape[0]}, {h}, {m_v}, m)) "
                                 "as returned by project_memory")
            return Kt, Vt
        if self.cross and memory is None:
            raise ValueError("memory (or kv) is required for cross-attention")
        if memory is not None and (memory.ndim != 3 or memory.shape[0] != H.shape[0]):
            raise ValueError(f"memory must have shape ({H.shape[0]}, m, {self.D_kv}), got {tuple(memory.shape)}")
        return self.project_memory(H if memory is None else memory)

    def _scores(self, Qt: torch.Tensor, Kt: torch.Tensor, sl: slice) -> torch.Tensor:
        """Qt (B, hc, m_qk, n), Kt (B, hc, m_qk, m) -> scores (B, hc, n, m[+1]), null key first."""
        Q = Qt.transpose(-1, -2)  # (B, hc, n, m_qk)
        # one-dimensional heads: an outer product, much faster than a batched matmul with inner size 1
        S = Q * Kt if Qt.shape[-2] == 1 else Q @ Kt  # (B, hc, n, m)
        if self.null_key is not None:
            s0 = (Qt * self.null_key[sl, :, None]).sum(-2)[..., None]  # (B, hc, n, 1)
            S = torch.cat([s0, S], dim=-1)
        return S

    def _normalize(self, S: torch.Tensor, C: Optional[torch.Tensor]) -> torch.Tensor:
        if self.normalization == "softmax":
            S = S / self.temperature if self.temperature != 1.0 else S
            if C is None:
                return torch.softmax(S, dim=-1)
            present = C > 0
            top = S.masked_fill(~present, float("-inf")).amax(-1, keepdim=True)
            top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
            E = torch.exp((S - top).masked_fill(~present, float("-inf"))) * C
            total = E.sum(-1, keepdim=True)
            return E / torch.where(total > 0, total, torch.ones_like(total))
        if self.normalization == "relu":
            A = S.relu_() if C is None else S.relu_().mul_(C)  # S is a fresh tensor: in place
            if self.relu_divisor != "keys":
                return A.div_(self.relu_divisor)
            if C is None:
                return A.div_(S.shape[-1])
            count = C.sum(-1, keepdim=True)
            return A / torch.where(count > 0, count, torch.ones_like(count))
        if self.normalization == "linear":
            return S if C is None else S * C
        present = torch.ones_like(S, dtype=torch.bool) if C is None else (C > 0).expand_as(S)
        top = S.masked_fill(~present, float("-inf")).amax(-1, keepdim=True)
        A = ((S == top) & present).to(DTYPE)
        A = A if C is None else A * C
        total = A.sum(-1, keepdim=True)
        return A / torch.where(total > 0, total, torch.ones_like(total))

    def _chunks(self, B: int, n: int, m: int) -> list[slice]:
        per = max(1, CHUNK_ELEMENTS // max(1, B * n * m))
        return [slice(s, min(s + per, self.num_heads)) for s in range(0, self.num_heads, per)]

    def _prepare(self, H, memory, key_mask, kv):
        Kt, Vt = self._keys_values(H, memory, kv)
        C = self._counts(H.shape[0], H.shape[1], Kt.shape[-1], key_mask, H.device)
        return self._project(H, "W_Q", self.b_Q), Kt, Vt, C

    def scores(self, H: torch.Tensor, memory: Optional[torch.Tensor] = None,
               key_mask: Optional[torch.Tensor] = None, kv=None) -> torch.Tensor:
        """Raw scores (B, h, n, m), with the null key's column first when there is one."""
        Qt, Kt, _, _ = self._prepare(H, memory, key_mask, kv)
        return self._scores(Qt, Kt, slice(None))

    def attention_weights(self, H: torch.Tensor, memory: Optional[torch.Tensor] = None,
                          key_mask: Optional[torch.Tensor] = None, kv=None) -> torch.Tensor:
        """Normalised attention weights (B, h, n, m), with the null key's column first when there is one."""
        Qt, Kt, _, C = self._prepare(H, memory, key_mask, kv)
        return self._normalize(self._scores(Qt, Kt, slice(None)), C)

    def attention_matrices(self, H: torch.Tensor, memory: Optional[torch.Tensor] = None,
                           key_mask: Optional[torch.Tensor] = None) -> list[torch.Tensor]:
        """Per head, the (B, n, m) attention weights (`attention_weights` split by head)."""
        return list(self.attention_weights(H, memory, key_mask).unbind(1))

    def forward(self, H: torch.Tensor, memory: Optional[torch.Tensor] = None,
                key_mask: Optional[torch.Tensor] = None,
                kv: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
        """H + the attention update; keys/values from H, ``memory``, or a projected cache ``kv``."""
        Qt, Kt, Vt, C = self._prepare(H, memory, key_mask, kv)  # (B, h, m_qk, n), (B, h, m_qk, m), (B, h, m_v, m)
        B, n, m = H.shape[0], H.shape[1], Kt.shape[-1]
        if self.null_key is not None:
            Vt = torch.cat([self.null_value[None, :, :, None].expand(B, -1, -1, 1), Vt], dim=-1)  # (B, h, m_v, 1+m)
        chunks = []
        for sl in self._chunks(B, n, m + (self.null_key is not None)):
            # contiguous (small) chunk inputs keep the large score tensor in the standard layout
            S = self._scores(Qt[:, sl].contiguous(), Kt[:, sl].contiguous(), sl)  # (B, hc, n, m[+1])
            chunks.append(Vt[:, sl].contiguous() @ self._normalize(S, C).transpose(-1, -2))  # (B, hc, m_v, n)
        return self._residual(H, torch.cat(chunks, dim=1))  # head outputs (B, h, m_v, n)

    def extra_repr(self) -> str:
        return (f"name={self.name!r}, kind={self.kind}, heads={self.num_heads}, normalization={self.normalization}, "
                f"causal={self.causal}, window={self.window}")


class ElementwiseMultiplication(_StackedLayer):
    """``h_i + sum_m <W_Q^m h_i + b_Q^m, W_K^m h_i + b_K^m> W_O^m (W_V^m h_i + b_V^m)``: tokens do not mix.

    Stacked tensors W_Q, W_K (h, m_qk, D), W_V (h, m_v, D), W_O (h, D, m_v); kind ``"ewml"``.
    """

    def __init__(self, W_Q, W_K, W_V, W_O, b_Q=None, b_K=None, b_V=None, name: str = ""):
        super().__init__()
        self._store(W_Q, W_K, W_V, W_O, b_Q, b_K, b_V)
        if self.D_kv != self.D:
            raise ValueError(f"W_K must have D = {self.D} columns, got {self.D_kv}")
        self.kind, self.name = "ewml", name

    def gates(self, H: torch.Tensor) -> torch.Tensor:
        """(B, h, n) bilinear gates <Q_m h_i, K_m h_i>."""
        return (self._project(H, "W_Q", self.b_Q) * self._project(H, "W_K", self.b_K)).sum(-2)

    def forward(self, H: torch.Tensor) -> torch.Tensor:
        if H.ndim != 3 or H.shape[-1] != self.D:
            raise ValueError(f"H must have shape (batch, n, {self.D}), got {tuple(H.shape)}")
        return self._residual(H, self.gates(H)[:, :, None, :] * self._project(H, "W_V", self.b_V))  # (B, h, m_v, n)

    def extra_repr(self) -> str:
        return f"name={self.name!r}, kind=ewml, heads={self.num_heads}"


# --- feed-forward ----------------------------------------------------------------------------------

class FeedForward(_SparseWeights):
    """``H + relu(H W_1.T + b_1) W_2.T + b_2`` with ``W_1`` (m, D), ``W_2`` (D_out, m); ``residual=False`` drops ``H``.

    A bias given as None stores no parameter. ``W_1`` and ``W_2`` may be sparse tensors; each is stored
    as `_SparseWeights` decides (sparse only when large and sparse) and always read back dense.
    """

    kind = "mlp"

    def __init__(self, W_1, b_1, W_2, b_2, residual: bool = True, name: str = ""):
        super().__init__()
        W_1, W_2 = _as_tensor(W_1, "W_1", 2), _as_tensor(W_2, "W_2", 2)
        m, D = W_1.shape
        if W_2.shape[1] != m:
            raise ValueError(f"W_2 must have {m} columns (the hidden width of W_1), got {tuple(W_2.shape)}")
        if b_1 is not None:
            b_1 = _as_tensor(b_1, "b_1", 1)
            if b_1.shape != (m,):
                raise ValueError(f"b_1 must have shape ({m},), got {tuple(b_1.shape)}")
        if b_2 is not None:
            b_2 = _as_tensor(b_2, "b_2", 1)
            if b_2.shape != (W_2.shape[0],):
                raise ValueError(f"b_2 must have shape ({W_2.shape[0]},), got {tuple(b_2.shape)}")
        if residual and W_2.shape[0] != D:
            raise ValueError(f"a residual feed-forward layer needs W_2 with {D} rows, got {W_2.shape[0]}")
        self.residual, self.name, self.D = bool(residual), name, D
        self._store_weight("W_1", W_1)
        self.b_1 = _frozen(b_1)
        self._store_weight("W_2", W_2)
        self.b_2 = _frozen(b_2)

    @property
    def hidden_width(self) -> int:
        return self._shape("W_1")[0]

    def dense(self) -> dict[str, torch.Tensor]:
        """The paper-form matrices ``W1`` (m, D) and ``W2`` (D_out, m), with the biases when present."""
        out = {"W1": self.W_1.detach(), "W2": self.W_2.detach()}
        out.update({k: v.detach() for k, v in (("b1", self.b_1), ("b2", self.b_2)) if v is not None})
        return out

    def forward(self, H: torch.Tensor) -> torch.Tensor:
        if H.shape[-1] != self.D:
            raise ValueError(f"H must have last dimension {self.D}, got {tuple(H.shape)}")
        if self._sparse:
            out = self._sparse_update(H)
        else:
            Z = H @ self.W_1.T
            Z = torch.relu(Z if self.b_1 is None else Z + self.b_1)  # (B, n, m)
            out = Z @ self.W_2.T
            out = out if self.b_2 is None else out + self.b_2  # (B, n, D_out)
        if _ACTIVE:
            out = _perturb_update(self, out)
        return H + out if self.residual else out

    def _sparse_update(self, H: torch.Tensor) -> torch.Tensor:
        """The update with tokens as columns: W_2 relu(W_1 X + b_1) + b_2 for X = H.T (D, tokens)."""
        X = H.reshape(-1, self.D).T  # (D, B n)
        Z = self._mm("W_1", X)
        Z = torch.relu(Z if self.b_1 is None else Z + self.b_1[:, None])  # (m, B n)
        out = self._mm("W_2", Z)
        out = out if self.b_2 is None else out + self.b_2[:, None]  # (D_out, B n)
        return out.T.reshape(*H.shape[:-1], out.shape[0])  # (B, n, D_out)

    def runs_on_columns(self, H: torch.Tensor) -> bool:
        """Whether `add_update_to_columns_` can stand for ``forward(H)``: a residual layer with a sparse
        weight and no ``b_2``, no active `perturb`, values (not ``meta``) and no gradient through H."""
        return (bool(self._sparse) and self.residual and self.b_2 is None and not _ACTIVE and H.device.type != "meta"
                and not (H.requires_grad and torch.is_grad_enabled()))

    def add_update_to_columns_(self, Ht: torch.Tensor) -> torch.Tensor:
        """Ht (D, tokens), the transposed state, plus the update, in place; returns Ht.

        Reads only the coordinates W_1 reads and writes only those W_2 writes, so a sparse layer costs
        tokens x (its non-zeros + the coordinates it touches), not tokens x D (`Construction.forward`).
        """
        if "W_1" in self._sparse:
            crow, col, values = (getattr(self, f"W_1_{p}") for p in ("crow", "col", "values"))
            read, local = torch.unique(col, return_inverse=True)  # the coordinates W_1 reads
            W = torch.sparse_csr_tensor(crow, local, values, (crow.numel() - 1, read.numel()), check_invariants=False)
            Z = W @ Ht.index_select(0, read)  # (m, tokens)
        else:
            Z = self.W_1 @ Ht
        Z = (Z if self.b_1 is None else Z.add_(self.b_1[:, None])).relu_()  # Z is fresh: in place, one (m, tokens) copy
        if "W_2" not in self._sparse:
            return Ht.add_(self.W_2 @ Z)
        crow, col, values = (getattr(self, f"W_2_{p}") for p in ("crow", "col", "values"))
        filled = crow[1:] > crow[:-1]
        written = filled.nonzero().squeeze(1)  # the coordinates W_2 writes
        W = torch.sparse_csr_tensor(torch.cat([crow[:1], crow[1:][filled]]), col, values, (written.numel(), Z.shape[0]),
                                    check_invariants=False)
        return Ht.index_add_(0, written, W @ Z)

    def extra_repr(self) -> str:
        return f"name={self.name!r}, kind=mlp, hidden={self.hidden_width}, residual={self.residual}"


# --- blocks ----------------------------------------------------------------------------------------

class Block(nn.Module):
    """A transformer block: optional attention, then optional feed-forward."""

    def __init__(self, attention: Optional[Attention] = None, feed_forward: Optional[FeedForward] = None):
        super().__init__()
        if attention is None and feed_forward is None:
            raise ValueError("a Block needs an attention layer, a feed-forward layer, or both")
        self.attention, self.feed_forward = attention, feed_forward

    def sublayers(self) -> list[nn.Module]:
        return [m for m in (self.attention, self.feed_forward) if m is not None]

    def forward(self, H: torch.Tensor) -> torch.Tensor:
        for layer in self.sublayers():
            H = layer(H)
        return H


class Transformer(nn.Module):
    """A stack of blocks acting on (batch, n, D); ``forward(H, return_all=True)`` returns every state.

    Unnamed sublayers are named ``block{i}.attn`` and ``block{i}.ff``.
    """

    def __init__(self, blocks: Sequence[Block]):
        super().__init__()
        if len(blocks) == 0:
            raise ValueError("blocks must contain at least one Block")
        self.blocks = nn.ModuleList(blocks)
        for i, block in enumerate(self.blocks):
            for layer, suffix in ((block.attention, "attn"), (block.feed_forward, "ff")):
                if layer is not None and not layer.name:
                    layer.name = f"block{i}.{suffix}"

    def named_sublayers(self) -> list[tuple[str, nn.Module]]:
        """(name, layer) for every attention and feed-forward layer, in order."""
        return [(layer.name, layer) for block in self.blocks for layer in block.sublayers()]

    @property
    def depth(self) -> int:
        """Number of blocks."""
        return len(self.blocks)

    @property
    def width(self) -> int:
        """Largest feed-forward hidden width over the blocks."""
        return max((b.feed_forward.hidden_width for b in self.blocks if b.feed_forward is not None), default=0)

    def forward(self, H: torch.Tensor, return_all: bool = False):
        if H.ndim != 3:
            raise ValueError(f"H must have shape (batch, n, D), got {tuple(H.shape)}")
        states = [H]
        for _, layer in self.named_sublayers():
            states.append(layer(states[-1]))
        return states if return_all else states[-1]

    def num_parameters(self) -> int:
        """Number of stored scalars: every dense entry (zeros included), and a sparse weight's values and
        index entries (`stored_entries`)."""
        return sum(p.numel() for p in self.parameters()) + shared_index_entries([l for _, l in self.named_sublayers()])

    def num_nonzero(self) -> int:
        """Number of non-zero scalar weights."""
        return sum(int(torch.count_nonzero(p)) for p in self.parameters())


_sabotage_from_environment()
