"""Wu, Su, Hu, Song & Liu (ICML 2025): transformers that run gradient descent on a deep network in context.

Public API: `build_transformer` (Theorem 1's (2N+4)L-layer transformer), `ReluSum` and
`interpolant` (Definition 4). The references it is checked against live in `tfbook.icgd.nets`.

The smooth tables (r, r' and the log-cosh loss's tanh) default to M = 256 pieces (64 before the tails
below; the book's pages pass M = 64 where they show the error against M) and continue beyond a cut c
(`construct.table_cut`, set by M alone) with the function's own tails, so their sup error does not grow
with the range R. Every run checks its inputs (x, y, w within x_bound, y_bound, box), the tables' ranges
and, for every activation, |p(N) - y| <= R_u on every token, which the query gate needs.
"""
import torch

from tfbook.icgd.construct import ICGDTransformer, build_transformer
from tfbook.icgd.nets import ACTIVATIONS, LOSSES, NetSpec
from tfbook.icgd.relu_sums import ReluSum, interpolant, ramp

__all__ = ["ACTIVATIONS", "LOSSES", "ICGDTransformer", "NetSpec", "ReluSum", "build_transformer", "interpolant",
           "ramp"]


def _bench_build(device, N: int = 4, K: int = 8, M: int = 128, n: int = 20, L: int = 5, dx: int = 8):
    from tfbook.icgd.verify import random_prompt

    # R = 16: the tables' range; this prompt's largest pre-activation is 9.39 (R = 8 raised, as it must)
    model = build_transformer(dx, 1, K, N, n, L, 0.1, activation="softplus", box=1.0, M=M, R=16.0, device=device)
    X, Y, xq, w0 = random_prompt(model, 4, seed=0)  # on the model's device
    return model, model.embed(X, Y, xq, w0)


def bench_cases() -> dict[str, dict]:
    """The chapter's benchmarked constructions (read by `tfbook.build.bench`); the GPU size only with CUDA."""
    def forward(state):
        return state[0](state[1])

    cases = {"icgd: Theorem 1 transformer (N=4, K=8, M=128, n=20, L=5)":
             {"build": _bench_build, "forward": forward, "units": "prompts", "count": 4}}
    if torch.cuda.is_available():  # 2.8 G dense scalars stored as 9.8 M; a minute per forward on one CPU thread
        cases["icgd: Theorem 1 transformer, GPU size (N=6, K=16, dx=20, M=256, n=20, L=5)"] = {
            "build": lambda device: _bench_build(device, N=6, K=16, M=256, dx=20), "forward": forward,
            "units": "prompts", "count": 4}
    return cases
