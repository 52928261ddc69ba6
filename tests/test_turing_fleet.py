"""`tfbook.turing.build_fleet`: G machines' transformers as one direct sum run as each alone (to roundoff)."""
import pytest
import torch

import tfbook.turing as tg
from tfbook.layers import sparse
from tests.numerics import assert_close_scaled


@pytest.fixture(scope="module")
def machines():
    return [tg.random_tm(3, "01", seed) for seed in range(4)]


def test_every_machine_of_the_fleet_runs_as_its_own_transformer(machines):
    T, xs = 14, tg.all_strings("01", 3)
    fleet = tg.build_fleet(machines, T)
    trace = fleet.forward_trace(xs)
    runs = fleet.decode(xs, trace)
    assert fleet.machines == 4 and tuple(trace.F.shape) == (len(xs), 4)
    for g, tm in enumerate(machines):
        alone = tg.build_transformer(tm, T)
        own = alone.forward_trace(xs)
        # other batched products sum in other orders (Intel MKL: 1e-16 apart); values are bits in [-1, 1]
        assert_close_scaled(trace.F[:, g], own.F)
        assert_close_scaled(trace.outputs[..., fleet.layout[f"m{g}"]], own.outputs)
        assert all(r.same_as(tm.run(x, T)) for x, r in zip(xs, runs[g]))
    assert [r.accepted for r in fleet.run("011")] == [tm.run("011", T).accepted for tm in machines]


def test_the_fleet_is_one_call_per_layer_and_stores_each_machine_once(machines):
    fleet = tg.build_fleet(machines, 14)
    alone = [tg.build_transformer(tm, 14) for tm in machines]
    assert fleet.layer_names == alone[0].layer_names
    assert fleet.counted_sizes().embed_dim == sum(m.width for m in alone)
    assert sum(int(torch.count_nonzero(p)) for p in fleet.parameters()) == sum(
        int(torch.count_nonzero(p)) for m in alone for p in m.parameters())


def test_a_quick_profile_fleet_stays_dense(monkeypatch):
    # turing/03's quick profile runs fleets of 5 machines at T = 24: below the sparse thresholds
    fleet = tg.build_fleet([tg.random_tm(3, "01", s) for s in range(5)], 24)
    assert not any(layer._sparse for _, layer in fleet.named_layers())
    assert fleet.counted_sizes().stored < sparse.MODEL_SPARSE_MIN


def test_bad_fleets_are_refused(machines):
    with pytest.raises(ValueError, match="non-empty"):
        tg.build_fleet([], 8)
    with pytest.raises(ValueError, match="one alphabet"):
        tg.build_fleet([machines[0], tg.balanced()], 8)
    with pytest.raises(ValueError, match="T"):
        tg.build_fleet(machines, 0)
    with pytest.raises(ValueError, match="record"):
        tg.build_fleet(machines[:2], 8).forward_trace(["01"], record=True)


def test_the_fleet_computes_each_machines_decision_exactly(machines):
    """F is +1 in an accepting state at T, -1 in a rejecting one and 0 elsewhere, to roundoff (the classifier
    reads the one-hot state): a 1e-3 change of the core shows."""
    T, xs = 14, tg.all_strings("01", 3)
    F = tg.build_fleet(machines, T).forward_trace(xs).F  # (len(xs), machines)

    def decision(tm: tg.TuringMachine, x: str) -> float:
        last = tm.run(x, T).states[-1]
        return 1.0 if last in tm.accept else -1.0 if last in tm.reject else 0.0

    want = torch.tensor([[decision(tm, x) for tm in machines] for x in xs], dtype=F.dtype)
    assert {-1.0, 1.0} <= {float(v) for v in want.flatten()}  # both decisions occur
    torch.testing.assert_close(F, want, rtol=0, atol=1e-12)
