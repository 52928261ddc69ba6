"""icgd on the meta device: a small construction and every reference the notebooks compare against.

Meta tensors have shapes and no values, so a function that allocates on the CPU instead of its input's
device fails here without a GPU. The bench construction (Theorem 1's transformer, softplus, squared loss)
is covered by tests/test_device.py; this file takes another small one (ReLU ramp, log-cosh loss) and the
references of tfbook.icgd.nets, relu_sums, softmax_univ, verify and experiments.
"""
from dataclasses import replace

import torch

from tfbook.icgd import experiments as ex
from tfbook.icgd import nets, paper_forms, verify
from tfbook.icgd.construct import build_transformer
from tfbook.icgd.relu_sums import interpolant, ramp
from tfbook.icgd.softmax_univ import embed, quant, quantization_ff
from tests.meta_helpers import on_meta

META = torch.device("meta")
F64 = torch.float64

# Functions that must read values, so cannot run on meta (the notebooks run them on their device), with
# the reason.
NEEDS_VALUES = {
    "relu_sums.sup_error": "returns a float: the largest error on a grid",
    "relu_sums.interpolant / tailed_interpolant / ramp": "builders: read g at the knots (on the CPU, then .to)",
    "construct.build_transformer (tables, a-priori R)": "builds on the CPU from values; device= moves the result",
    "verify.random_prompt": "draws on the CPU generator (live=True reads the gradient's norm)",
    "verify.slot_errors / contract / query_leak / w_movement / theta_norms / lipschitz_estimate":
        "return floats: maxima of errors or norms",
    "verify.check_query / check_state_contract / check_permutation": "claims: compare floats",
    "bounds.constants / table_errors": "return floats: measured constants",
    "construct.ICGDTransformer.check_ranges": "reads the recorded ranges (skipped on meta by design)",
    "experiments.train_ensemble / train / run / depth_sweep / evaluate / summary":
        "training loops and summaries: losses and R^2 read back as floats",
    "experiments.linear_ceiling": "torch.linalg.lstsq has no meta kernel",
}


def test_a_small_construction_runson_meta():
    model = build_transformer(2, 1, 3, 2, 4, 2, 0.5, activation="relu", loss="logcosh", delta=0.1,
                              device=META)
    X, Y, xq, w0 = verify.random_prompt(model, B=2, seed=0)  # drawn on the CPU, moved to meta
    assert on_meta(X, Y, xq, w0, model.r_hat.a, model.dr_hat.c, model.u_hat.a)
    H = model.embed(X, Y, xq, w0)
    assert on_meta(H, model(H), model.run(X, Y, xq, w0), model.preactivations(H, 1), model.residuals(H))
    assert on_meta(model.read_w(model(H)), model.r_hat(H[..., 0]))
    assert on_meta(*(paper_forms.paper_layer(layer, H) for layer in model.layers[:model.block_size]))


def test_net_references_follow_their_input_to_meta():
    spec = nets.NetSpec(dx=3, dy=2, K=4, N=3)
    w = torch.empty(2, spec.D_N, dtype=F64, device=META)
    X = torch.empty(2, 5, 3, dtype=F64, device=META)
    Y = torch.empty(2, 5, 2, dtype=F64, device=META)
    for act in nets.ACTIVATIONS:
        a = nets.activation(act)
        assert on_meta(a.r(X), a.dr(X), a.ddr(X), nets.forward(spec, w, X, act))
        for loss in nets.LOSSES:
            parts = nets.explicit_gradient(spec, w, X, Y, act, loss)
            assert on_meta(parts.p, parts.dr, parts.u, parts.s, parts.A, parts.grad)
            assert on_meta(nets.loss(spec, w, X, Y, act, loss), nets.loss_value(loss, X[..., :2], Y),
                            nets.loss_derivative(loss, X[..., :2], Y))
            assert on_meta(nets.autograd_gradient(spec, w, X, Y, act, loss),
                            nets.projected_gd(spec, w, X, Y, act, loss, 0.1, 2, 1.0))


def test_verify_references_follow_the_model_to_meta():
    model = build_transformer(2, 1, 3, 2, 4, 2, 0.5, activation="sigmoid", M=8, device=META)
    X, Y, xq, w0 = verify.random_prompt(model, B=2, seed=0)
    ws = model.run(X, Y, xq, w0)
    bad = verify.drop_query_gate(model)
    assert on_meta(verify.reference_gd(model, X, Y, w0), verify.per_step_errors(model, ws, X, Y),
                    verify.step_relative_errors(model, ws, X, Y), bad(model.embed(X, Y, xq, w0)))


def test_relu_sums_and_quantiser_follow_their_input_to_meta():
    t = torch.empty(7, dtype=F64, device=META)
    for rs in (interpolant(torch.tanh, 3.0, 8), ramp(0.25)):
        rs.to(META)
        assert on_meta(rs(t), rs.l1_norms(), rs.a, rs.c)
    z = torch.empty(2, 5, 3, dtype=F64, device=META)
    ff = quantization_ff(3, 4, 1.0, 1e-3).to(META)
    assert on_meta(embed(z), ff(embed(z)), quant(z, 4, 1.0))


def test_experiment_references_follow_the_test_set_to_meta():
    cfg = ex.ExperimentConfig(d=2, train_points=4, test_points=6, width=8, blocks=1, heads=2, batch=4,
                              steps=1, test_prompts=5, gd_steps=2)
    ts = ex.test_set(cfg, 0.3, seed=0, device=META)
    assert on_meta(ts.x, ts.y, ts.fresh_x, ts.fresh_y, ts.within_var)
    torch.manual_seed(0)
    model = ex.ICLTransformer(cfg.d, cfg.width, cfg.blocks, cfg.heads, "relu", cfg.test_points + 1).to(META)
    pred = ex.predict(model, ts)
    W = [w.to(META) for w in ex.sample_tasks(cfg, 5, torch.Generator().manual_seed(1))]
    assert on_meta(pred, ex.r2(pred, ts.y), ex.r2_within(pred, ts.y, ts.within_var), ex.target(W, ts.x),
                    ex.context_mean(ts), ex.least_squares(ts))
    assert on_meta(list(ex.gd_baseline(replace(cfg, target_depth=2), ts, [2, 4]).values()))
