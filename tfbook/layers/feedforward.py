"""The feed-forward layer ``H + relu(H W_1.T + b_1) W_2.T + b_2``, dense or sparse."""
from __future__ import annotations

import torch

from tfbook.layers import hooks
from tfbook.layers.common import _as_tensor
from tfbook.layers.hooks import _frozen, _perturb_update
from tfbook.layers.sparse import _SparseWeights


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
            # tokens as rows of one matrix: the products `H @ W.T` would fold to, without their reshapes
            X = H.view(-1, self.D) if H.is_contiguous() else H  # (B n, D) or (B, n, D)
            Z = X @ self.W_1.T
            Z = torch.relu(Z if self.b_1 is None else Z + self.b_1)  # (B n, m) or (B, n, m)
            out = Z @ self.W_2.T
            out = out if self.b_2 is None else out + self.b_2  # (B n, D_out) or (B, n, D_out)
            out = out.view(*H.shape[:-1], out.shape[-1])  # (B, n, D_out)
        if hooks._ACTIVE:
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
        return (bool(self._sparse) and self.residual and self.b_2 is None and not hooks._ACTIVE
                and H.device.type != "meta" and not (H.requires_grad and torch.is_grad_enabled()))

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
