"""Sparse storage behind dense semantics: a large weight whose CSR arrays take at most a quarter of
its dense storage is stored as those arrays (`_SparseWeights`); every accessor still returns it dense.
`weight_from_entries` lets a builder write a weight entry by entry without the dense matrix."""
from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
import torch
from torch import nn

from tfbook.device import DTYPE
from tfbook.layers import hooks
from tfbook.layers.hooks import _frozen

warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state", category=UserWarning)


# A weight is stored sparse only with at least this many scalars (quick-profile weights have at most
# 1.5 M) ...
SPARSE_MIN_NUMEL = 2**21
SPARSE_MAX_FRACTION = 0.25  # ... and when its CSR arrays take at most this fraction of the dense storage
# ... or, whatever its size, in a model whose core weights hold at least this many scalars dense (see
# `compact`; quick-profile models hold at most 13.8 M, each shared storage counted once: turing/03's fleets
# of five machines, pinned by tests/test_turing_fleet.py; colsym/03's full model holds 33.2 M for 61 k
# non-zeros, the Besov transformer at N = 200 atoms 97.6 M)
MODEL_SPARSE_MIN = 2**24
_PARTS = ("values", "crow", "col")  # a sparse weight `name` is stored as name_values (a parameter), name_crow, name_col


def _sparse_worthy(numel: int, nonzero: int, rows: int = 0, min_numel: int | None = None) -> bool:
    """Whether a weight of ``numel`` scalars with ``nonzero`` non-zeros, used as a matrix of ``rows``
    rows, is stored sparse (CSR: ``nonzero`` values and column indices, ``rows + 1`` row pointers):
    at least ``min_numel`` scalars (default `SPARSE_MIN_NUMEL`) and CSR arrays of at most
    `SPARSE_MAX_FRACTION` of them."""
    floor = SPARSE_MIN_NUMEL if min_numel is None else min_numel
    return numel >= floor and 2 * nonzero + rows + 1 <= SPARSE_MAX_FRACTION * numel


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
    if not _sparse_worthy(numel, count) or hooks._WEIGHTS is not None:
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
        hooks._BUILT += 1  # `hooks.core_layers_built`
        self._sparse: dict[str, tuple[tuple[int, ...], bool]] = {}  # name -> (dense shape, cols)
        self._weights: dict[str, bool] = {}  # every weight stored by `_store_weight`: name -> cols

    def __getattr__(self, name: str):
        sparse = self.__dict__.get("_sparse")
        if sparse and name in sparse:
            return self._dense_weight(name)
        return super().__getattr__(name)

    def set_weight(self, name: str, t, cols: bool = False, min_numel: int | None = None) -> None:
        """Store weight ``name`` (dense or sparse ``t``): sparse only when large and sparse
        (`_sparse_worthy` with ``min_numel``), never noised."""
        floor = SPARSE_MIN_NUMEL if min_numel is None else min_numel
        t = t.to(DTYPE)
        if name in self._sparse:
            del self._sparse[name]
            for part in _PARTS:
                delattr(self, f"{name}_{part}")
        elif name in self._parameters:
            del self._parameters[name]
        if t.layout == torch.strided and (t.device.type == "meta" or t.numel() < floor
                                          or not _sparse_worthy(t.numel(), int(torch.count_nonzero(t)), 0, floor)):
            setattr(self, name, nn.Parameter(t.detach().clone(), requires_grad=False))
            return
        index, values, size = _matrix_entries(t, cols)
        if not _sparse_worthy(t.numel(), values.numel(), size[0], floor):
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
        self._weights[name] = cols
        if hooks._WEIGHTS is not None or (t.layout == torch.strided and t.numel() < SPARSE_MIN_NUMEL):
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
                self.set_weight(name, value, cols, min_numel=0)  # stored sparse before: kept so if it fits
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


def compact(layers: Sequence[nn.Module]) -> int:
    """Store sparse, whatever its size, every dense weight of ``layers`` whose CSR arrays take at most
    `SPARSE_MAX_FRACTION` of it, when the weights of ``layers`` would hold at least `MODEL_SPARSE_MIN`
    scalars dense (a construction calls it on its layers once built); return the number re-stored.

    A large model's small weights then stop dominating what it stores (the Besov transformer at
    N = 200 atoms: 97.6 M scalars dense for 87 k non-zeros); quick-profile and test models stay as
    built. Layers on one storage (copies of a layer, as the repeated blocks of a construction) are
    compacted once, together. Nothing is done on ``meta``, or while the weight-noise sabotage is active
    (its weights are noised dense by design).
    """
    if hooks._WEIGHTS is not None:
        return 0
    groups: dict[int, list[_SparseWeights]] = {}  # layers on one storage (copies, as repeated blocks)
    for layer in {id(layer): layer for layer in layers if isinstance(layer, _SparseWeights)}.values():
        groups.setdefault(id(layer._sparse), []).append(layer)
    dense_size = sum(int(np.prod(first._shape(name))) for first, *_ in groups.values() for name in first._weights)
    if dense_size < MODEL_SPARSE_MIN:  # each storage counted once
        return 0
    restored = 0
    for first, *copies in groups.values():
        for name, cols in list(first._weights.items()):
            W = first._parameters.get(name)
            if W is None or W.device.type == "meta":
                continue
            first.set_weight(name, W.detach(), cols, min_numel=0)
            restored += name in first._sparse
        for layer in copies:  # they share the index buffers and the weight table; the values follow
            layer._parameters = dict(first._parameters)
    return restored


def stored_entries(layer: nn.Module) -> int:
    """Index entries a core layer stores besides its parameters (0 for a layer stored dense)."""
    return layer.stored_entries() if isinstance(layer, _SparseWeights) else 0


def shared_index_entries(layers: Sequence[nn.Module]) -> int:
    """Index entries stored by ``layers`` together, each index tensor counted once (layers that share
    their storage, like the repeated blocks of a construction, store it once)."""
    tensors = {id(t): t for layer in layers if isinstance(layer, _SparseWeights) for t in layer.index_tensors()}
    return sum(t.numel() for t in tensors.values())
