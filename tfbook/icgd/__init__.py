"""Wu, Su, Hu, Song & Liu (ICML 2025): transformers that run gradient descent on a deep network in context.

Public API: `build_transformer` (Theorem 1's (2N+4)L-layer transformer), `ReluSum` and
`interpolant` (Definition 4). The references it is checked against live in `tfbook.icgd.nets`.
"""
from tfbook.icgd.construct import ICGDTransformer, build_transformer
from tfbook.icgd.nets import ACTIVATIONS, LOSSES, NetSpec
from tfbook.icgd.relu_sums import ReluSum, interpolant, ramp

__all__ = ["ACTIVATIONS", "LOSSES", "ICGDTransformer", "NetSpec", "ReluSum", "build_transformer", "interpolant",
           "ramp"]
