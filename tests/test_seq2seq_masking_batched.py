"""Section 6's speed-ups keep the experiment's meaning: the CLS-only last layer of `TinyViT` is the
encoder's CLS row, seeds trained together as one batched model are the seeds trained apart (and do
not see each other), one batched predict call per step in `global_greedy_mask` is the per-candidate loop,
and `masking_studies` is `masking_study` seed by seed. The controls: the coloured motif images carry no
motif information in their brightness, the untrained twin is the model's initial weights (and the whole
study under ``TFBOOK_UNTRAINED=1`` leaves nothing between the model and its twin), the scored images are
fixed whatever the model.

Exempt from the core-sabotage check: `TinyViT` is a trained PyTorch model, not built from the core layers.
"""
from __future__ import annotations

import copy

import pytest
import torch

from tfbook import device
from tfbook.seq2seq.masking import (TinyViT, global_greedy_mask, make_coloured_motif_dataset, make_motif_dataset,
                                    train_classifier, train_classifiers)
from tfbook.seq2seq.masking_controls import intensity_order, masking_studies, masking_study
from tests.numerics import assert_close_scaled


def _vit(seed: int, depth: int = 1, classes: int = 3) -> TinyViT:
    torch.manual_seed(seed)
    return TinyViT(2, 3, 3, classes, dim=16, depth=depth, heads=4, mlp=24)


def _encoder_logits(m: TinyViT, X: torch.Tensor) -> torch.Tensor:
    """The plain definition: every token through torch's encoder, the head on the CLS row."""
    T = m.embed(X.transpose(1, 2).float()) + m.pe
    T = torch.cat([m.cls.expand(T.shape[0], -1, -1), T], dim=1)
    return m.head(m.encoder(T)[:, 0])


@pytest.mark.parametrize("depth", [1, 2])
def test_cls_only_last_layer_is_the_encoders_cls_row_with_its_gradient(depth):
    m = _vit(0, depth)
    with torch.no_grad():  # move off the initialisation (zero CLS, small biases) so every term matters
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    X = torch.rand(7, 2, 9, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([0, 1, 2, 0, 1, 2, 0])
    for mode in (m.train, m.eval):
        mode()
        assert torch.allclose(m.logits(X), _encoder_logits(m, X), rtol=0, atol=2e-5)
    m.train()
    ours = torch.autograd.grad(torch.nn.functional.cross_entropy(m.logits(X), y), list(m.parameters()))
    ref = torch.autograd.grad(torch.nn.functional.cross_entropy(_encoder_logits(m, X), y), list(m.parameters()))
    for (name, _), a, b in zip(m.named_parameters(), ours, ref):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), name


def _data(n: int = 48):
    gen = torch.Generator().manual_seed(2)
    y = torch.randint(3, (n,), generator=gen)
    X = 0.2 * torch.rand(n, 2, 9, generator=gen)
    X[torch.arange(n), 0, 3 * y] += 1.0  # the class is the bright token of channel 0
    return X, y


def test_seeds_trained_together_are_the_seeds_trained_apart():
    X, y = _data()
    seeds = [0, 4]
    apart = [_vit(s) for s in seeds]
    together = [copy.deepcopy(m) for m in apart]
    losses_apart = [train_classifier(m, X, y, epochs=3, batch=16, seed=s) for m, s in zip(apart, seeds)]
    losses_together = train_classifiers(together, X, y, 3, seeds, batch=16)
    assert torch.allclose(torch.tensor(losses_together), torch.tensor(losses_apart), rtol=0, atol=1e-5)
    for a, b in zip(apart, together):
        for (name, p), q in zip(a.named_parameters(), b.parameters()):
            assert torch.allclose(p, q, rtol=0, atol=1e-4), name
    assert not torch.allclose(together[0].head[1].weight, apart[1].head[1].weight, atol=1e-2)


def test_a_seed_does_not_see_its_batch_mates():
    X, y = _data()
    first = [_vit(0), _vit(1)]
    other = [copy.deepcopy(first[0]), _vit(9)]
    train_classifiers(first, X, y, 2, [0, 1], batch=16)
    train_classifiers(other, X, y, 2, [0, 9], batch=16)
    for p, q in zip(first[0].parameters(), other[0].parameters()):
        assert torch.allclose(p, q, rtol=0, atol=1e-6)
    assert not torch.allclose(first[1].head[1].weight, other[1].head[1].weight, atol=1e-3)


def test_global_greedy_mask_is_the_per_candidate_search():
    W = torch.randn(3, 2 * 6, dtype=torch.float64, generator=torch.Generator().manual_seed(3))

    def predict(X: torch.Tensor) -> torch.Tensor:
        return torch.softmax(X.reshape(X.shape[0], -1).double() @ W.T, dim=-1)

    X = torch.rand(4, 2, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    labels = torch.tensor([0, 2, 1, 2])
    order, probs = global_greedy_mask(predict, X, labels, steps=5, mask_value=0.5)
    current, left, expected = X.clone(), list(range(6)), [float(predict(X)[torch.arange(4), labels].mean())]
    for t in range(5):  # the definition: one predict call per candidate token
        scores = []
        for c in left:
            trial = current.clone()
            trial[:, :, c] = 0.5
            scores.append(float(predict(trial)[torch.arange(4), labels].mean()))
        best = max(range(len(left)), key=lambda i: (scores[i], -i))
        assert int(order[t]) == left[best]
        current[:, :, left.pop(best)] = 0.5
        expected.append(scores[best])
    # one batched call against one call per candidate: other shapes, other summation orders of the logits
    assert_close_scaled(probs, torch.tensor(expected, dtype=torch.float64), scale=float(W.abs().sum(1).max()))


def test_masking_studies_is_masking_study_seed_by_seed():
    X, y = _data(60)
    kw = dict(model_kw=dict(dim=16, depth=1, heads=4, mlp=24), batch=16)
    both = masking_studies(X, y, slice(0, 48), slice(48, 60), [0, 3], 4, 4, 5, (3, 3), **kw)
    alone = masking_study(X, y, slice(0, 48), slice(48, 60), 3, 4, 4, 5, (3, 3), **kw)
    r = both[1]
    assert r["images"] == alone["images"] >= 1 and r["accuracy"] == alone["accuracy"]
    assert torch.equal(r["order"], alone["order"])  # integers: greedy gaps >= 8e-6 (relative), weights 6e-8 apart here
    for key in ("curve_greedy", "curve_rival", "curve_random", "curve_faint"):
        assert abs(r[key] - alone[key]).max() < 1e-4, key
    assert next(r["model"].parameters()).device == device.default_device()
    p = r["predict"](r["inputs"])
    assert p.dtype == torch.float64 and p.device.type == "cpu"
    assert torch.allclose(p.sum(1), torch.ones(len(p), dtype=torch.float64), atol=1e-6)


def test_batched_training_rejects_bad_seeds():
    X, y = _data()
    with pytest.raises(ValueError, match="seeds must give one seed per model"):
        train_classifiers([_vit(0), _vit(1)], X, y, 1, [0])
    with pytest.raises(ValueError, match="seed must be an int >= 0"):
        train_classifiers([_vit(0)], X, y, 1, [-1])
    with pytest.raises(ValueError, match="seeds must be a sequence"):
        masking_studies(X, y, slice(0, 40), slice(40, 48), 3, 2, 1, 2, (3, 3))
    with pytest.raises(ValueError, match="seeds must hold at least one seed"):
        masking_studies(X, y, slice(0, 40), slice(40, 48), [], 2, 1, 2, (3, 3))


def test_coloured_motif_images_are_what_they_say():
    X, labels, motif = make_coloured_motif_dataset(300, 8, seed=4, distractors=2, specks=3)
    assert X.shape == (300, 8, 64) and labels.shape == (300,) and motif.shape == (300, 4)
    lit = X > 0
    assert torch.equal(lit.sum(1), torch.ones(300, 64, dtype=torch.long))  # one colour per token
    value = X.sum(1)  # (n, N): the lit channel's intensity
    assert float(value.min()) >= 0.5 and float(value.max()) <= 1.0
    colour = X.argmax(1)  # (n, N)
    for b in range(300):
        m = motif[b]
        r, q = divmod(int(m[0]), 8)
        assert m.tolist() == [8 * r + q, 8 * r + q + 1, 8 * r + q + 8, 8 * r + q + 9]  # a 2x2 block
        assert (colour[b, m] == labels[b]).all()
        # motif, 2 half-motifs and 3 specks in class colours, the rest in background colours
        assert int((colour[b] < 4).sum()) == 4 + 2 * 2 + 3
    assert torch.equal(X, make_coloured_motif_dataset(300, 8, seed=4, distractors=2, specks=3)[0])
    assert not torch.equal(X, make_coloured_motif_dataset(300, 8, seed=5, distractors=2, specks=3)[0])
    assert set(labels.tolist()) == {0, 1, 2, 3}


def test_brightness_carries_no_motif_information():
    X, labels, motif = make_coloured_motif_dataset(4000, 8, seed=0)
    value = X.sum(1)  # (n, N)
    in_motif = torch.zeros_like(value, dtype=torch.bool)
    in_motif[torch.arange(4000)[:, None], motif] = True
    background = X[:, 4:].sum(1) > 0
    grid = torch.linspace(0.5, 1.0, 11)
    for tokens in (value[in_motif], value[background], value[~in_motif & ~background]):
        cdf = (tokens[:, None] <= grid).double().mean(0)  # the law U[0.5, 1], whatever the role
        assert float((cdf - (grid - 0.5) / 0.5).abs().max()) < 0.02
    # so the 8 brightest tokens keep >= 3 motif tokens about as often as 8 random ones (0.005) ...
    kept = torch.argsort(-value, dim=1, stable=True)[:, :8]
    hits = (kept[:, :, None] == motif[:, None, :]).sum((1, 2))
    assert float((hits >= 3).double().mean()) < 0.015
    # ... where on make_motif_dataset's images, whose motif is brighter, they always do
    Xo, _, mo = make_motif_dataset(200, 8, seed=0)
    faint = intensity_order(Xo, 56)  # the complement: the 8 brightest kept
    kept_o = [set(range(64)) - set(o.tolist()) for o in faint]
    assert all(len(k & set(m.tolist())) == 4 for k, m in zip(kept_o, mo))


@pytest.mark.parametrize("kw, match", [
    (dict(n=0), "n must be an int >= 1"),
    (dict(n=2, grid=2), "grid must be an int >= 3"),
    (dict(n=2, seed=-1), "seed must be an int >= 0"),
    (dict(n=2, distractors=-1), "distractors must be an int >= 0"),
    (dict(n=2, specks=1.5), "specks must be an int >= 0"),
    (dict(n=2, grid=4, distractors=2, specks=1), "distractors and specks must leave half"),
])
def test_coloured_motif_dataset_rejects_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        make_coloured_motif_dataset(**kw)


def _motif_study(seeds, epochs=3):
    X, y, motif = make_coloured_motif_dataset(80, 4, seed=1, distractors=1, specks=0)
    kw = dict(motif=motif, model_kw=dict(dim=16, depth=1, heads=4, mlp=24), batch=16)
    return X, y, motif, masking_studies(X, y, slice(0, 64), slice(64, 80), seeds, 5, epochs, 12, (4, 4), **kw)


def test_the_untrained_twin_is_the_initial_model_and_the_scored_images_are_fixed():
    X, y, motif, runs = _motif_study([0, 2])
    for seed, r in zip([0, 2], runs):
        torch.manual_seed(seed)
        initial = TinyViT(8, 4, 4, 4, dim=16, depth=1, heads=4, mlp=24)
        for (name, p), q, t in zip(initial.named_parameters(), r["twin"].parameters(), r["model"].parameters()):
            assert torch.equal(p, q.cpu()), name
        assert not torch.equal(initial.head[1].weight, r["model"].head[1].weight.cpu())
        assert torch.equal(r["inputs"], X[64:69]) and torch.equal(r["labels"], y[64:69])
        assert torch.equal(r["motif_tokens"], motif[64:69])
        masked = r["inputs"].clone()
        masked[:, :, r["fixed_order"]] = 0.0  # one mask for every scored image
        p_fixed = r["predict"](masked)[torch.arange(5), r["labels"]]
        assert abs(float(p_fixed.mean()) - r["p_fixed"]) < 1e-6
    # the model-free rules give the same numbers whatever the seed
    for key in ("motif3_faint", "jaccard_faint_within", "jaccard_faint_across"):
        assert runs[0][key] == runs[1][key] or (runs[0][key] != runs[0][key] and runs[1][key] != runs[1][key]), key


def test_untrained_hook_leaves_nothing_between_the_model_and_its_twin(monkeypatch):
    monkeypatch.setenv("TFBOOK_UNTRAINED", "1")
    _, _, _, (r,) = _motif_study([3])
    for p, q in zip(r["model"].parameters(), r["twin"].parameters()):
        assert torch.equal(p, q)
    assert r["accuracy"] == r["accuracy_twin"] and r["p_greedy"] == r["p_twin"]
    assert r["motif3_greedy"] == r["motif3_twin"]
    # identical weights: the same path
    assert torch.equal(torch.as_tensor(r["curve_greedy"]), torch.as_tensor(r["curve_twin"]))
