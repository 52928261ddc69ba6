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
* `direct_sum`: one layer running G attention (or G feed-forward) layers side by side on the direct
  sum of their residual streams, each reading and writing its own block.
* `perturb`: a context manager that scales or adds noise to the update of selected layers (by name,
  kind or head); mutation tests and robustness experiments use it.
* Two process-wide sabotages, read from the environment at import, for mutation tests of the whole
  book: ``TFBOOK_PERTURB_CORE=eps`` scales every core layer's update by 1 + eps, and
  ``TFBOOK_PERTURB_WEIGHTS=eps`` adds seeded uniform noise of eps * max|w| to every entry of every
  tensor a core layer stores. `sabotage_hits` counts what each has changed, `core_layers_built` the core layers
  a process built (none built: no sabotage can change the run). Only the tests and the audit read them.

The package: `common` (kinds, normalisers), `hooks` (`perturb` and the sabotages), `sparse` (sparse
storage and `weight_from_entries`), `attention`, `feedforward`, `blocks` and `direct_sum`. Settings that tests change
live in their module: ``hooks._ACTIVE``, ``hooks._WEIGHTS``, ``sparse.SPARSE_MIN_NUMEL``,
``attention.CHUNK_ELEMENTS``.

Dense paper-form matrices are built on demand by ``dense()``, never stored. A weight with at least
``SPARSE_MIN_NUMEL`` scalars whose CSR arrays (values, column indices, row pointers) would take at most
``SPARSE_MAX_FRACTION`` of its dense storage is stored as those arrays, for the matrix it multiplies by
(`_SparseWeights`); every accessor still returns it dense. In a construction whose weights would hold
at least ``MODEL_SPARSE_MIN`` scalars dense, every weight whose CSR arrays fit that fraction is stored
sparse, whatever its own size (`compact`). Quick-profile models stay below both thresholds.
"""
from tfbook.layers import hooks, sparse
from tfbook.layers.attention import Attention, ElementwiseMultiplication, HeadView, HeadWeights
from tfbook.layers.blocks import Block, Transformer
from tfbook.layers.common import BOUNDARIES, KINDS, NORMALIZATIONS
from tfbook.layers.direct_sum import direct_sum
from tfbook.layers.feedforward import FeedForward
from tfbook.layers.hooks import (PERTURB_ENV, WEIGHTS_ENV, Perturbation, WeightNoise, core_layers_built, perturb,
                                 sabotage_hits)
from tfbook.layers.sparse import compact, shared_index_entries, stored_entries, weight_from_entries

__all__ = ["Attention", "BOUNDARIES", "Block", "ElementwiseMultiplication", "FeedForward", "HeadView",
           "HeadWeights", "KINDS", "NORMALIZATIONS", "PERTURB_ENV", "Perturbation", "Transformer", "WEIGHTS_ENV",
           "WeightNoise", "compact", "core_layers_built", "direct_sum", "hooks", "perturb", "sabotage_hits",
           "shared_index_entries", "sparse", "stored_entries", "weight_from_entries"]
