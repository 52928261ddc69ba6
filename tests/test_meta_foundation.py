"""foundation on the meta device: the chapter's small constructions and every reference it compares against.

Meta tensors have shapes and no values, so a function that allocates on the CPU instead of its input's
device fails here without a GPU. The bench construction (Yarotsky squaring, m = 20, forward only) is
covered by tests/test_device.py; this file takes the token-sum head (forward and trace), the |x|/max layer,
a small squaring network through `run_squaring`, and the references `hat`, `sawtooth_closed_form` and
`square_interp_closed_form`.
"""
import torch

from tfbook import foundation as fd
from tests.meta_helpers import on_meta

META = torch.device("meta")
F64 = torch.float64

# Functions that must read values, so cannot run on meta (the notebook runs them on its device), with the
# reason. The builders build on the CPU (from numbers) and are moved with .to(device).
NEEDS_VALUES = {
    "SlotModel.width / num_parameters / counted_sizes": "count non-zero weights and the largest |weight|",
}


def test_token_sum_and_abs_max_runon_meta():
    summer = fd.build_token_sum(3, 8).to(META)
    X = torch.empty(2, 8, 3, dtype=F64, device=META)
    H = summer.embed(x=X)
    trace = summer.trace(H)
    assert on_meta(H, summer(H), summer.read(H, "sum"), *trace.states, *trace.attention.values())
    absmax = fd.build_abs_max().to(META)
    xs = torch.empty(1, 5, dtype=F64, device=META)
    out = absmax(absmax.embed(x=xs, y=xs))
    assert on_meta(out, absmax.read(out, "abs"), absmax.read(out, "max"))
    assert tuple(absmax.read(out, "max").shape) == (1, 5, 1)


def test_squaring_and_references_follow_their_input_to_meta():
    net = fd.build_squaring(4).to(META)
    x = torch.empty(3, 7, dtype=F64, device=META)
    outs = [fd.run_squaring(net, x), fd.hat(x), fd.sawtooth_closed_form(x, 3),
            fd.square_interp_closed_form(x, 3), fd.square_interp_closed_form(x, 0)]
    assert on_meta(*outs)
    assert all(tuple(t.shape) == (3, 7) for t in outs)
