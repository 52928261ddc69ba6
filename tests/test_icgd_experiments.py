"""App. G experiment pieces (tfbook.icgd.experiments): the baselines against independent computations,
ensemble training against training alone, the GD baseline's batching, and `run` / `summary` plumbing.

Exempt from the core-sabotage check: App. G trains plain PyTorch models, none built from the core layers.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from tfbook.icgd import experiments as ex

SMALL = dict(d=3, target_width=4, train_points=6, test_points=8, width=16, blocks=1, heads=2, steps=4,
             test_prompts=48, gd_steps=10)


@pytest.mark.parametrize("kwargs, message", [
    ({"d": 0}, "d must be an int >= 1, got 0"),
    ({"target_depth": 0}, "target_depth must be an int >= 1"),
    ({"steps": 2.5}, "steps must be an int >= 1"),
    ({"width": 30, "heads": 4}, "width must be a multiple of heads = 4"),
    ({"train_points": 9, "test_points": 8}, "test_points must be an int >= train_points = 9"),
    ({"lr": 0.0}, "lr must be > 0"),
    ({"gd_lr": float("nan")}, "gd_lr must be a finite real"),
    ({"mixtures": (0.0, 1.5)}, r"mixtures must be a non-empty tuple of weights in \[0, 1\]"),
    ({"mixtures": [0.0]}, "mixtures must be a non-empty tuple"),
    ({"mixtures": ()}, "mixtures must be a non-empty tuple"),
    ({"seed": -1}, "seed must be an int >= 0"),
])
def test_config_is_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ex.ExperimentConfig(**kwargs)


def test_context_mean_scores_about_minus_one_over_k_within_the_task():
    """MSE of the mean of k - 1 iid labels is Var (1 + 1/(k - 1)): within-task R^2 = -1/(k - 1)."""
    cfg = ex.ExperimentConfig(d=3, test_points=10, train_points=10, test_prompts=6000)
    ts = ex.test_set(cfg, 0.0, seed=7)
    r = ex.r2_within(ex.context_mean(ts), ts.y, ts.within_var)
    for k in (3, 6, 10):
        assert abs(float(r[k]) + 1 / k) < 0.06, (k, float(r[k]))
    assert float(ex.r2(ex.context_mean(ts), ts.y)[10]) > 0.5  # pooled R^2 rewards the task level alone


def test_linear_ceiling_against_numpy_and_on_linear_targets():
    cfg = ex.ExperimentConfig(**SMALL)
    ts = ex.test_set(cfg, 0.3, seed=2)
    lin = ex.linear_ceiling(ts)
    A = np.c_[ts.fresh_x[5].double().numpy(), np.ones(256)]
    beta = np.linalg.lstsq(A, ts.fresh_y[5].double().numpy(), rcond=None)[0]
    want = np.c_[ts.x[5].double().numpy(), np.ones(9)] @ beta
    assert np.abs(lin[5].double().numpy() - want).max() < 1e-5 * (1 + np.abs(want).max())
    # one-layer targets are linear: the ceiling is exact, least squares nearly so once k > d + 1
    flat = ex.test_set(replace(cfg, target_depth=1), 0.5, seed=3)
    assert float(ex.r2_within(ex.linear_ceiling(flat), flat.y, flat.within_var).min()) > 1 - 1e-5
    assert float(ex.r2_within(ex.least_squares(flat), flat.y, flat.within_var)[6:].min()) > 0.99
    # deep ReLU targets are not linear: some within-task variance is out of any line's reach
    assert float(ex.r2_within(lin, ts.y, ts.within_var).mean()) < 0.995


def test_ensemble_member_is_the_model_trained_alone():
    cfg = ex.ExperimentConfig(**SMALL)
    cfgs = [replace(cfg, seed=4), replace(cfg, seed=9, target_depth=2)]
    models, log = ex.train_ensemble(cfgs, "softmax")
    assert len(log["losses"]) == 2 and all(len(v) == cfg.steps for v in log["losses"])
    ts = ex.test_set(cfg, 0.0, seed=1)
    for c, model, losses in zip(cfgs, models, log["losses"]):
        alone, alone_log = ex.train(c, "softmax")
        assert np.allclose(losses, alone_log["losses"], rtol=1e-4, atol=1e-6)
        assert torch.allclose(ex.predict(model, ts), ex.predict(alone, ts), rtol=1e-4, atol=1e-4)
    assert not torch.allclose(ex.predict(models[0], ts), ex.predict(models[1], ts), atol=1e-3)


def test_ensemble_members_must_share_the_model():
    cfg = ex.ExperimentConfig(**SMALL)
    with pytest.raises(ValueError, match="cfgs must share width"):
        ex.train_ensemble([cfg, replace(cfg, width=32)], "relu")
    with pytest.raises(ValueError, match="cfgs must be a non-empty list"):
        ex.train_ensemble([], "relu")
    with pytest.raises(ValueError, match="attention must be one of"):
        ex.train_ensemble([cfg], "linear")


def test_gd_baseline_positions_are_independent_and_fit_the_context():
    cfg = ex.ExperimentConfig(**{**SMALL, "gd_steps": 30})
    ts = ex.test_set(cfg, 0.0, seed=5)
    both = ex.gd_baseline(cfg, ts, [3, 7], seed=1)
    alone = ex.gd_baseline(cfg, ts, [3], seed=1)
    # the padded examples beyond position 3 are masked: position 3 does not see that 7 was asked for
    assert torch.allclose(both[3], alone[3], atol=1e-5)
    assert set(both) == {3, 7} and both[7].shape == (48,)
    # on one-layer (linear) targets the trained network learns the line: far below the context mean
    flat_cfg = replace(cfg, target_depth=1, gd_steps=100, gd_lr=5e-2)
    flat = ex.test_set(flat_cfg, 0.0, seed=6)
    gd, cm = ex.gd_baseline(flat_cfg, flat, [7])[7], ex.context_mean(flat)[:, 7]
    assert float(((gd - flat.y[:, 7]) ** 2).mean()) < 0.3 * float(((cm - flat.y[:, 7]) ** 2).mean())
    for bad in ([], [0], [9]):
        with pytest.raises(ValueError, match="positions"):
            ex.gd_baseline(cfg, ts, bad)


def test_run_and_summary():
    cfg = ex.ExperimentConfig(**{**SMALL, "mixtures": (0.0, 0.5)})
    out = ex.run(cfg, seeds=[0, 1], target_depths=[2, 3], gd_positions=[2, 6], attentions=("relu",))
    assert out["settings"]["seeds"] == [0, 1] and out["settings"]["target_depths"] == [2, 3]
    res = out["curves"][3][0.5]
    assert set(res) == set(ex.BASELINES) | {"ReLU-TF"} and len(res["ReLU-TF"]) == 2
    assert res["GD baseline"]["positions"] == [2, 6]
    # seed 1's depth-3 curve is the one `train` gives alone, on the documented test prompts
    model, _ = ex.train(replace(cfg, seed=1, target_depth=3), "relu")
    ts = ex.test_set(replace(cfg, target_depth=3), 0.5, seed=cfg.seed + 3000 + 101)
    mine = ex.r2_within(ex.predict(model, ts), ts.y, ts.within_var)
    assert np.allclose(res["ReLU-TF"][1]["r2_within"], mine.tolist(), atol=1e-4)
    cm = ex.r2_within(ex.context_mean(ts), ts.y, ts.within_var)
    assert res["context mean"]["r2_within"] == cm.tolist()
    s = ex.summary(out, 6)[3][0.5]
    for v, m, r in zip(s["ReLU-TF"], s["ReLU-TF margin"], s["ReLU-TF ratio"]):
        assert math.isclose(m, v - float(cm[6]), abs_tol=1e-6)
        # the ratio is the MSE ratio, computed from squared errors directly
        assert math.isclose(r, (1 - v) / (1 - float(cm[6])), rel_tol=1e-6)
    mse_tf = float(((ex.predict(model, ts)[:, 6] - ts.y[:, 6]) ** 2).mean())
    mse_cm = float(((ex.context_mean(ts)[:, 6] - ts.y[:, 6]) ** 2).mean())
    assert math.isclose(s["ReLU-TF ratio"][1], mse_tf / mse_cm, rel_tol=1e-3)
    assert s["GD baseline"] == res["GD baseline"]["r2_within"][1]
    for kwargs, name in (({"seeds": []}, "seeds"), ({"seeds": [1, 1]}, "seeds"),
                         ({"target_depths": [0]}, "target_depths"), ({"attentions": ("x",)}, "attentions")):
        with pytest.raises(ValueError, match=name):
            ex.run(cfg, **{"seeds": [0], "target_depths": [2], "gd_positions": [2], **kwargs})


def test_quick_profile_baselines_match_the_text():
    """The notebook's quick configuration (book/icgd/07): what its text says of the baselines, which
    involve no trained transformer: the context mean's pooled R^2 is about 0.8 and its per-task R^2 about
    -1/k; a line per task explains about 0.81 of the within-task variance, least squares on the context
    0.42 over k = 5..10, and the GD baseline 0.52 at k = 10."""
    quick = ex.ExperimentConfig(d=3, train_points=10, test_points=15, batch=32, steps=200, lr=3e-3,
                                test_prompts=6000)
    ts = ex.test_set(quick, 0.0, seed=quick.seed + 3000 + 100)  # `run`'s in-distribution prompts, depth 3
    res = ex.baselines(quick, ts, [10])
    window = list(range(5, 11))
    assert 0.7 <= res["context mean"]["r2"][10] <= 0.9
    cm = np.mean([res["context mean"]["r2_task"][k] for k in window])
    assert abs(cm + np.mean([1 / k for k in window])) <= 0.05
    assert 0.76 <= np.mean([res["linear ceiling"]["r2_task"][k] for k in window]) <= 0.86
    assert 0.37 <= np.mean([res["least squares"]["r2_task"][k] for k in window]) <= 0.47
    assert 0.47 <= res["GD baseline"]["r2_task"][0] <= 0.57


def test_per_task_r2_of_the_context_mean_is_minus_one_over_k():
    """Per task, the mean of k iid labels misses the next by Var (1 + 1/k) in expectation: the per-task
    R^2 is -1/k, whatever the task's variance; checked against a numpy computation of the same score."""
    cfg = ex.ExperimentConfig(d=3, test_points=10, train_points=10, test_prompts=6000)
    ts = ex.test_set(cfg, 0.0, seed=7)
    cm = ex.context_mean(ts)
    r = ex.r2_task(cm, ts)
    for k in (3, 6, 10):
        assert abs(float(r[k]) + 1 / k) < 0.06, (k, float(r[k]))
    y, var = ts.y.double().numpy(), ts.fresh_y.double().numpy().var(axis=1, ddof=1)
    want = 1 - np.mean((cm.double().numpy()[:, 6] - y[:, 6]) ** 2 / var)
    assert abs(float(r[6]) - want) < 1e-5
    assert bool(ts.scored.all())  # no task of these targets is nearly constant


def test_scored_tasks_leave_out_a_constant_task():
    cfg = ex.ExperimentConfig(**SMALL)
    ts = ex.test_set(cfg, 0.0, seed=2)
    before = ts.scored.clone()  # width-4 targets: a few tasks are dead networks already
    assert bool(before[3]) and int(before.sum()) > cfg.test_prompts // 2
    fresh_y = ts.fresh_y.clone()
    fresh_y[3] = 1.5  # a task whose label never varies
    ts = replace(ts, fresh_y=fresh_y)
    assert not bool(ts.scored[3]) and int(ts.scored.sum()) == int(before.sum()) - 1
    errors = ex.task_errors(ex.context_mean(ts), ts)
    assert errors.shape == (int(before.sum()) - 1, cfg.test_points + 1) and bool(torch.isfinite(errors).all())
    with pytest.raises(ValueError, match="pred must have the shape"):
        ex.task_errors(ts.y[:, :3], ts)


def test_prompt_margins_average_positions_and_seeds():
    gen = torch.Generator().manual_seed(0)
    control = torch.rand(50, 6, generator=gen)
    models = [torch.rand(50, 6, generator=gen) for _ in range(3)]
    got = ex.prompt_margins(models, control, [2, 4])
    want = control[:, [2, 4]].mean(1) - sum(m[:, [2, 4]].mean(1) for m in models) / 3
    assert torch.allclose(got, want, atol=1e-6)
    assert torch.allclose(ex.prompt_margins(models[0], control, [1]), control[:, 1] - models[0][:, 1])
    for kwargs, name in (({"positions": []}, "positions"), ({"positions": [6]}, "positions"),
                         ({"model_errors": [torch.zeros(50, 5)]}, "model_errors")):
        with pytest.raises(ValueError, match=name):
            ex.prompt_margins(**{"model_errors": models, "control_errors": control, "positions": [1], **kwargs})


def test_bootstrap_interval_has_the_normal_width():
    """For n iid values the 95% percentile interval of the mean is about mean +- 1.96 sd / sqrt(n)."""
    values = torch.randn(4000, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 2 + 0.3
    mean, low, high = ex.bootstrap_interval(values, reps=4000, seed=3)
    half = 1.96 * float(values.std()) / math.sqrt(len(values))
    assert low < mean < high and math.isclose(mean, float(values.mean()))
    assert math.isclose((high - low) / 2, half, rel_tol=0.1), ((high - low) / 2, half)
    assert abs((high + low) / 2 - mean) < 0.2 * half
    for bad, name in (({"values": torch.ones(1)}, "values"), ({"values": torch.tensor([1.0, math.nan])}, "values"),
                      ({"level": 1.0}, "level"), ({"reps": 0}, "reps")):
        with pytest.raises(ValueError, match=name):
            ex.bootstrap_interval(**{"values": values, **bad})


def test_an_x_blind_model_cannot_read_x():
    cfg = ex.ExperimentConfig(**SMALL, x_blind=True)
    model, _ = ex.train(cfg, "relu")
    seeing, _ = ex.train(replace(cfg, x_blind=False), "relu")
    ts = ex.test_set(cfg, 0.0, seed=1)
    moved = replace(ts, x=ts.x + 3.0)
    assert torch.allclose(ex.predict(model, ts), ex.predict(model, moved), atol=1e-6)
    assert not torch.allclose(ex.predict(seeing, ts), ex.predict(seeing, moved), atol=1e-3)
    with pytest.raises(ValueError, match="x_blind must be True or False"):
        ex.ExperimentConfig(x_blind=1)
    with pytest.raises(ValueError, match="cfgs must share x_blind"):
        ex.train_ensemble([cfg, replace(cfg, x_blind=False)], "relu")


def test_predict_in_chunks_is_predict_at_once():
    cfg = ex.ExperimentConfig(**SMALL)
    model, _ = ex.train(cfg, "softmax")
    ts = ex.test_set(cfg, 0.1, seed=4)
    assert torch.allclose(ex.predict(model, ts, chunk=7), ex.predict(model, ts, chunk=1000), atol=1e-5)
    with pytest.raises(ValueError, match="chunk"):
        ex.predict(model, ts, chunk=0)


def test_run_keeps_per_task_errors_and_blind_controls():
    cfg = ex.ExperimentConfig(**{**SMALL, "mixtures": (0.0, 0.5)})
    out = ex.run(cfg, seeds=[0, 1], target_depths=[2], gd_positions=[3, 6], attentions=("softmax",),
                 blind_seeds=[5])
    assert out["settings"]["blind_seeds"] == [5]
    errs, curves = out["errors"][2][0.5], out["curves"][2][0.5]
    assert len(errs["softmax-TF"]) == 2 and "softmax-TF x-blind" not in errs  # a control in distribution only
    assert len(out["errors"][2][0.0]["softmax-TF x-blind"]) == 1
    assert errs["GD baseline"].shape == (48, 2) and errs["context mean"].shape == (48, 9)
    # the stored errors give the stored curves, and the blind member is the blind model trained alone
    assert np.allclose(1 - errs["softmax-TF"][1].mean(0).numpy(), curves["softmax-TF"][1]["r2_task"], atol=1e-5)
    assert np.allclose(1 - errs["GD baseline"].mean(0).numpy(), curves["GD baseline"]["r2_task"], atol=1e-5)
    blind, _ = ex.train(replace(cfg, seed=5, target_depth=2, x_blind=True), "softmax")
    ts = ex.test_set(replace(cfg, target_depth=2), 0.0, seed=cfg.seed + 2000 + 100)
    assert torch.allclose(ex.task_errors(ex.predict(blind, ts), ts), out["errors"][2][0.0]["softmax-TF x-blind"][0],
                          rtol=1e-3, atol=1e-4)
    with pytest.raises(ValueError, match="blind_seeds"):
        ex.run(cfg, seeds=[0], target_depths=[2], gd_positions=[3], blind_seeds=[1, 1])
    with pytest.raises(ValueError, match="blind_seeds need the in-distribution mixture"):
        ex.run(replace(cfg, mixtures=(0.5,)), seeds=[0], target_depths=[2], gd_positions=[3], blind_seeds=[1])


def test_a_model_without_positions_reads_the_context_as_a_set():
    """positions=False: no position vectors; with one block the last prediction sees the earlier (x, y) pairs
    as a set (the causal mask is all that orders them), so permuting them changes nothing; with positions
    it does."""
    torch.manual_seed(0)
    x, y = torch.randn(4, 6, 3), torch.randn(4, 6)
    perm = torch.tensor([3, 0, 4, 1, 2, 5])  # the last pair stays last
    for attention in ex.ATTENTIONS:
        for positions in (False, True):
            torch.manual_seed(1)
            model = ex.ICLTransformer(3, 8, 1, 2, attention, 6, positions=positions)
            assert (model.pos is None) == (not positions)
            with torch.no_grad():
                change = float((model(x[:, perm], y[:, perm])[:, -1] - model(x, y)[:, -1]).abs().max())
            assert (change < 1e-5) == (not positions), (attention, positions, change)
    with pytest.raises(ValueError, match="positions must be True or False"):
        ex.ExperimentConfig(positions=0)
    cfg = ex.ExperimentConfig(**SMALL)
    with pytest.raises(ValueError, match="cfgs must share positions"):
        ex.train_ensemble([cfg, replace(cfg, positions=False)], "relu")
