"""App. G of Wu et al. (2025): in-context regression of random deep ReLU networks by trained transformers.

The paper trains GPT-2-style models (Garg et al. 2022) with softmax and with ReLU attention on prompts
``[x_1, y_1, ..., x_k, y_k, x_{k+1}]`` and reports R^2 against the number of in-context examples. It leaves
the target networks, the optimiser and the ReLU normaliser unspecified; the choices here are stated in
`ExperimentConfig`. These models are *trained* (float32, the paper's own experiment), not constructed.

Baselines, always reported with the trained models: the mean of the context labels (the per-task level,
learnt without any dependence on x), least squares with a bias on the context, the *linear ceiling* (per
task, the least-squares line fitted on 256 fresh draws of that task: no linear predictor does much better)
and the paper's "train a network of the same depth on the prompt" (Adam, ``gd_steps`` full-batch steps,
best step on the query, which is optimistic). A further control is the *x-blind* model
(``ExperimentConfig.x_blind``): the same transformer and training with every x replaced by 0, so that all
it can learn is a rule of the context labels. Besides the pooled R^2 (dominated by between-task variance)
we report two within-task scores: 1 - MSE / E_task[Var(y | task)], and the per-task R^2
1 - E_task[(pred - y)^2 / Var(y | task)] (`task_errors`), which weighs every task alike, so that a few
high-variance tasks do not decide it; the context mean scores about -1/k on both.

`run` trains several seeds, target depths and both attention types at once: the members of one attention
type are stacked along a leading axis and trained together (`train_ensemble`, ``torch.func.vmap``), each
with its own initial weights, data stream and Adam state, as if trained alone. `summary` reduces a run to
per-seed margins over the context mean at one position; `prompt_margins` and `bootstrap_interval` give a
margin averaged over seeds and positions with a paired bootstrap interval over the test prompts.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
from functools import cached_property

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from tfbook import validate
from tfbook.training import untrained

F32 = torch.float32
F64 = torch.float64
ATTENTIONS = ("softmax", "relu")
NAMES = {"softmax": "softmax-TF", "relu": "ReLU-TF"}
BASELINES = ("context mean", "least squares", "linear ceiling", "GD baseline")
# the fields every member of one ensemble shares (the model and its training); seed and targets may differ
SHARED = ("d", "width", "blocks", "heads", "train_points", "test_points", "steps", "lr", "batch", "anneal",
          "x_blind", "positions")
VAR_FLOOR = 1e-3  # tasks whose Var(y | task) is below this fraction of the median are left out of per-task scores


@dataclass(frozen=True)
class ExperimentConfig:
    """Every choice of the experiment (the paper's values where it states them)."""

    d: int = 5  # paper: 20
    target_depth: int = 3  # 3-, 4- or 6-layer targets
    target_width: int = 16  # unspecified in the paper
    train_points: int = 20  # examples per training prompt (paper: 50)
    test_points: int = 30  # examples per test prompt (paper: 75)
    width: int = 32  # paper: 256
    blocks: int = 2  # paper: 12
    heads: int = 2  # paper: 8
    steps: int = 600  # paper: 500k
    lr: float = 2e-3  # unspecified (Garg et al.: 1e-4)
    batch: int = 64  # paper: 64
    test_prompts: int = 400  # paper: 6400
    seed: int = 0
    mixtures: tuple = (0.0, 0.1, 0.3, 0.5)  # omega_2 of the test mixtures
    gd_steps: int = 100
    gd_lr: float = 5e-3
    anneal: bool = True  # the learning rate decays linearly to 0 over the steps (unspecified in the paper)
    x_blind: bool = False  # the control: the model sees every x as 0 (in training and at test)
    positions: bool = True  # learned absolute positions (False: none, the prompt is read by the causal mask alone)

    def __post_init__(self) -> None:
        for name in ("d", "target_depth", "target_width", "train_points", "test_points", "width", "blocks",
                     "heads", "steps", "batch", "test_prompts", "gd_steps"):
            validate.positive_int(name, getattr(self, name))
        validate.positive_int("seed", self.seed, 0)
        for name in ("anneal", "x_blind", "positions"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.width % self.heads:
            raise ValueError(f"width must be a multiple of heads = {self.heads}, got {self.width}")
        if self.test_points < self.train_points:
            raise ValueError(f"test_points must be an int >= train_points = {self.train_points}, "
                             f"got {self.test_points}")
        for name in ("lr", "gd_lr"):
            validate.real(name, getattr(self, name), low=0, low_open=True)
        if not isinstance(self.mixtures, tuple) or not self.mixtures or any(
                not 0 <= validate.real("mixtures entry", w) <= 1 for w in self.mixtures):
            raise ValueError(f"mixtures must be a non-empty tuple of weights in [0, 1], got {self.mixtures!r}")


def sample_tasks(cfg: ExperimentConfig, B: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Random target networks: ReLU hidden layers, linear output, no biases, N(0, 2/fan-in) weights."""
    sizes = [cfg.d] + [cfg.target_width] * (cfg.target_depth - 1) + [1]
    return [torch.randn(B, o, i, generator=generator, dtype=F32) * math.sqrt(2.0 / i) for i, o in zip(sizes, sizes[1:])]


def target(weights: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """y = W_L relu(... relu(W_1 x)) for x (B, n, d) -> (B, n)."""
    h = x
    for j, W in enumerate(weights):
        h = h @ W.transpose(-1, -2)
        if j < len(weights) - 1:
            h = torch.relu(h)
    return h[..., 0]


def sample_x(cfg: ExperimentConfig, B: int, n: int, omega2: float, generator: torch.Generator) -> torch.Tensor:
    """x ~ (1 - omega2) N(-2 1, I) + omega2 N(2 1, I), (B, n, d)."""
    flip = torch.rand(B, n, 1, generator=generator) < omega2
    centre = torch.where(flip, 2.0, -2.0)
    return centre + torch.randn(B, n, cfg.d, generator=generator, dtype=F32)


class CausalAttention(nn.Module):
    """Multi-head causal attention, softmax or ReLU(QK^T/sqrt(d_h))/(number of visible keys)."""

    def __init__(self, width: int, heads: int, kind: str):
        super().__init__()
        self.kind = validate.choice("attention", kind, ATTENTIONS)
        self.heads, self.qkv, self.out = heads, nn.Linear(width, 3 * width), nn.Linear(width, width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        B, T, W = h.shape
        q, k, v = self.qkv(h).reshape(B, T, 3, self.heads, W // self.heads).permute(2, 0, 3, 1, 4)
        s = q @ k.transpose(-1, -2) / math.sqrt(W // self.heads)  # (B, heads, T, T)
        mask = torch.ones(T, T, dtype=torch.bool, device=h.device).tril()
        if self.kind == "softmax":
            a = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
        else:
            a = torch.relu(s) * mask / mask.sum(-1, keepdim=True)
        return self.out((a @ v).transpose(1, 2).reshape(B, T, W))


class ICLTransformer(nn.Module):
    """GPT-2-style pre-LN transformer reading [x_1, y_1, ..., x_k] and predicting y at every x token
    (``x_blind``: every x is read as 0, so only the labels of the context can inform a prediction;
    ``positions=False``: no position vectors, so the order of the tokens reaches the model only through the
    causal mask)."""

    def __init__(self, d: int, width: int, blocks: int, heads: int, attention: str, max_points: int,
                 x_blind: bool = False, positions: bool = True):
        super().__init__()
        self.x_blind = x_blind
        self.read_in = nn.Linear(d + 1, width)
        self.pos = nn.Parameter(torch.randn(2 * max_points, width) * 0.02) if positions else None
        self.blocks = nn.ModuleList()
        for _ in range(blocks):
            self.blocks.append(nn.ModuleDict({
                "ln1": nn.LayerNorm(width), "attn": CausalAttention(width, heads, attention),
                "ln2": nn.LayerNorm(width),
                "mlp": nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))}))
        self.ln = nn.LayerNorm(width)
        self.read_out = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """x (B, n, d), y (B, n) -> predictions (B, n) of y_k from x_1, y_1, ..., x_k."""
        B, n, d = x.shape
        if self.x_blind:
            x = torch.zeros_like(x)
        xs = torch.cat([x, torch.zeros(B, n, 1, dtype=x.dtype, device=x.device)], -1)
        ys = torch.cat([torch.zeros(B, n, d, dtype=x.dtype, device=x.device), y[..., None]], -1)
        tokens = torch.stack([xs, ys], dim=2).reshape(B, 2 * n, d + 1)
        h = self.read_in(tokens)
        if self.pos is not None:
            h = h + self.pos[: 2 * n]
        for blk in self.blocks:
            h = h + blk["attn"](blk["ln1"](h))
            h = h + blk["mlp"](blk["ln2"](h))
        return self.read_out(self.ln(h))[:, ::2, 0]


def _check_members(cfgs: list[ExperimentConfig]) -> list[ExperimentConfig]:
    if not isinstance(cfgs, (list, tuple)) or not cfgs or \
            not all(isinstance(c, ExperimentConfig) for c in cfgs):
        raise ValueError(f"cfgs must be a non-empty list of ExperimentConfig, got {cfgs!r}")
    for name in SHARED:
        if len({getattr(c, name) for c in cfgs}) > 1:
            raise ValueError(f"cfgs must share {name} (members of one ensemble differ only in seed and "
                             f"targets), got {[getattr(c, name) for c in cfgs]}")
    return list(cfgs)


def train_ensemble(cfgs: list[ExperimentConfig], attention: str,
                   device: torch.device = torch.device("cpu")) -> tuple[list[ICLTransformer], dict]:
    """Train one model per config (same architecture and budget, any seeds and target networks) at once.

    Member i starts from the weights ``torch.manual_seed(cfgs[i].seed)`` gives, draws its prompts from its
    own generator (seed + 1) and its own targets, and has its own Adam state: the stacked training is the
    training of each member alone, batched (``vmap``). Returns the models (on ``device``) and a log with
    ``losses`` (one list of ``steps`` training losses per member) and ``seconds``. Under
    ``TFBOOK_UNTRAINED=1`` (`tfbook.training.untrained`) the members keep their initial weights and the log
    holds one loss each, at those weights.
    """
    cfgs = _check_members(cfgs)
    attention = validate.choice("attention", attention, ATTENTIONS)
    c0 = cfgs[0]
    models = []
    for c in cfgs:
        torch.manual_seed(c.seed)
        model = ICLTransformer(c.d, c.width, c.blocks, c.heads, attention, c.test_points + 1, c.x_blind,
                               c.positions)
        models.append(model.to(device))
    params, _ = stack_module_state(models)  # every parameter with a leading member axis
    forward = vmap(lambda p, x, y: functional_call(models[0], p, (x, y)))
    opt = torch.optim.Adam(params.values(), lr=c0.lr)
    decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1 - t / c0.steps if c0.anneal else 1.0)
    gens = [torch.Generator().manual_seed(c.seed + 1) for c in cfgs]
    frozen = untrained("icgd.train_ensemble")
    losses, start = [], time.perf_counter()
    for _ in range(1 if frozen else c0.steps):
        xs, ys = [], []
        for c, gen in zip(cfgs, gens):
            W = sample_tasks(c, c.batch, gen)
            x = sample_x(c, c.batch, c.train_points + 1, 0.0, gen)
            xs.append(x)
            ys.append(target(W, x))
        x, y = torch.stack(xs).to(device), torch.stack(ys).to(device)  # (E, batch, n, d), (E, batch, n)
        loss = ((forward(params, x, y) - y) ** 2).mean((1, 2))  # (E,) each member's own mean loss
        opt.zero_grad()
        loss.sum().backward()
        if not frozen:
            opt.step()
            decay.step()
        losses.append(loss.detach())
    with torch.no_grad():
        for i, m in enumerate(models):
            for name, p in m.named_parameters():
                p.copy_(params[name][i])
    history = torch.stack(losses).cpu().T.tolist()  # (E, steps)
    return models, {"attention": attention, "seconds": time.perf_counter() - start, "losses": history}


def train(cfg: ExperimentConfig, attention: str,
          device: torch.device = torch.device("cpu")) -> tuple[ICLTransformer, dict]:
    """Train on in-distribution prompts (omega2 = 0) with Adam; returns the model (on ``device``) and a log."""
    models, log = train_ensemble([cfg], attention, device)
    return models[0], {**log, "losses": log["losses"][0]}


@dataclass(frozen=True)
class TestSet:
    """Test prompts of one mixture, with fresh draws of every task (its variance and its best line); its
    tensors are read, never written (the task variances are computed once)."""

    omega2: float
    x: torch.Tensor  # (P, n, d)
    y: torch.Tensor  # (P, n)
    fresh_x: torch.Tensor  # (P, 256, d) more inputs of the same tasks
    fresh_y: torch.Tensor  # (P, 256)

    @cached_property
    def within_var(self) -> torch.Tensor:
        """Var(y | task) from the fresh draws, (P,) (computed once: every score divides by it)."""
        return self.fresh_y.var(dim=-1)

    @cached_property
    def scored(self) -> torch.Tensor:
        """(P,) the tasks of the per-task scores: Var(y | task) at least `VAR_FLOOR` times the median."""
        var = self.within_var
        return var >= VAR_FLOOR * var.median()


def test_set(cfg: ExperimentConfig, omega2: float, seed: int, device=None) -> TestSet:
    """``cfg.test_prompts`` prompts of ``test_points + 1`` examples from the mixture ``omega2``.

    Drawn on the CPU (the same prompts on every machine), then moved to ``device`` (default the CPU):
    the baselines and the R^2 of a test set run on its device."""
    gen = torch.Generator().manual_seed(seed)
    W = sample_tasks(cfg, cfg.test_prompts, gen)
    x = sample_x(cfg, cfg.test_prompts, cfg.test_points + 1, omega2, gen)
    fresh_x = sample_x(cfg, cfg.test_prompts, 256, omega2, gen)
    dev = torch.device("cpu") if device is None else torch.device(device)
    parts = (x, target(W, x), fresh_x, target(W, fresh_x))
    return TestSet(omega2, *(t.to(dev) for t in parts))


def r2(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Pooled R^2 at every position: 1 - sum_b (pred - y)^2 / sum_b (y - mean_b y)^2, (n,)."""
    return 1 - ((pred - y) ** 2).sum(0) / ((y - y.mean(0)) ** 2).sum(0)


def r2_within(pred: torch.Tensor, y: torch.Tensor, within_var: torch.Tensor) -> torch.Tensor:
    """1 - MSE / E_task[Var(y | task)] at every position, (n,)."""
    return 1 - ((pred - y) ** 2).mean(0) / within_var.mean()


def task_errors(pred: torch.Tensor, ts: TestSet) -> torch.Tensor:
    """(P', n) squared errors divided by each task's Var(y | task), on the scored tasks (`TestSet.scored`)."""
    if pred.shape != ts.y.shape:
        raise ValueError(f"pred must have the shape of the labels {tuple(ts.y.shape)}, got {tuple(pred.shape)}")
    keep = ts.scored
    return (((pred - ts.y) ** 2)[keep] / ts.within_var[keep, None]).float().cpu()


def r2_task(pred: torch.Tensor, ts: TestSet) -> torch.Tensor:
    """Per-task R^2 at every position, 1 - E_task[(pred - y)^2 / Var(y | task)], (n,)."""
    return 1 - task_errors(pred, ts).mean(0)


def prompt_margins(model_errors, control_errors: torch.Tensor, positions) -> torch.Tensor:
    """(P',) per scored prompt: the control's `task_errors` minus the models', averaged over ``positions``
    and over the models (a list of (P', n), one per seed): a mean of these is a margin in per-task R^2."""
    if isinstance(model_errors, torch.Tensor):
        model_errors = [model_errors]
    positions = [validate.positive_int("positions entry", k, 0) for k in positions]
    n = control_errors.shape[1]
    if not positions or max(positions) >= n:
        raise ValueError(f"positions must be a non-empty list of ints in [0, {n - 1}], got {positions!r}")
    if not model_errors or any(e.shape != control_errors.shape for e in model_errors):
        raise ValueError(f"model_errors must be one or more tensors of shape {tuple(control_errors.shape)}")
    model = torch.stack(list(model_errors))[:, :, positions].mean((0, 2))  # (P',)
    return control_errors[:, positions].mean(1) - model


def bootstrap_interval(values: torch.Tensor, reps: int = 2000, level: float = 0.95,
                       seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high): the mean of ``values`` (P,) and its percentile bootstrap interval over the P
    entries (resampled with replacement ``reps`` times; paired when ``values`` are differences)."""
    reps = validate.positive_int("reps", reps)
    level = validate.real("level", level, 0.0, 1.0, low_open=True, high_open=True)
    values = torch.as_tensor(values, dtype=F64).flatten()
    if values.numel() < 2 or not bool(torch.isfinite(values).all()):
        raise ValueError(f"values must hold at least 2 finite numbers, got {values.numel()}")
    gen = torch.Generator().manual_seed(validate.positive_int("seed", seed, 0))
    idx = torch.randint(values.numel(), (reps, values.numel()), generator=gen)
    means = values[idx].mean(1)  # (reps,)
    tail = (1 - level) / 2
    low, high = torch.quantile(means, torch.tensor([tail, 1 - tail], dtype=F64)).tolist()
    return float(values.mean()), low, high


def context_mean(ts: TestSet) -> torch.Tensor:
    """Predict y_k by the mean of y_1..y_{k-1} (0 for k = 1), (P, n)."""
    csum = torch.cumsum(ts.y, dim=1)
    prev = torch.cat([torch.zeros_like(ts.y[:, :1]), csum[:, :-1]], 1)
    count = torch.arange(ts.y.shape[1], dtype=F32, device=ts.y.device).clamp(min=1)
    return prev / count


def _with_bias(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, torch.ones(*x.shape[:-1], 1, dtype=x.dtype, device=x.device)], -1).to(F64)


def least_squares(ts: TestSet, ridge: float = 1e-3) -> torch.Tensor:
    """Ridge-regularised least squares with a bias on the k - 1 previous examples, (P, n)."""
    P, n, d = ts.x.shape
    X1, Y = _with_bias(ts.x), ts.y.to(F64)
    out = torch.zeros(P, n, dtype=F64, device=ts.x.device)
    for k in range(1, n):
        A = X1[:, :k]
        G = A.transpose(1, 2) @ A + ridge * torch.eye(d + 1, dtype=F64, device=ts.x.device)
        beta = torch.linalg.solve(G, A.transpose(1, 2) @ Y[:, :k, None])
        out[:, k] = (X1[:, k:k + 1] @ beta)[:, 0, 0]
    return out.to(F32)


def linear_ceiling(ts: TestSet) -> torch.Tensor:
    """Per task, the least-squares line with a bias fitted on the task's fresh draws, at every prompt
    input, (P, n): the best any predictor linear in x can do, up to the fit's estimation error."""
    A = _with_bias(ts.fresh_x)  # (P, 256, d + 1)
    beta = torch.linalg.lstsq(A, ts.fresh_y.to(F64)[..., None]).solution  # (P, d + 1, 1)
    return (_with_bias(ts.x) @ beta)[..., 0].to(F32)


def gd_baseline(cfg: ExperimentConfig, ts: TestSet, positions: list[int], seed: int = 0) -> dict[int, torch.Tensor]:
    """The paper's baseline: a fresh network of the target's depth and width, trained on the k examples before
    position k (Adam, ``gd_steps`` full-batch steps); the best step's prediction on the query (optimistic).

    All positions train at once (one network per task and position, contexts padded and masked); the
    initial weights of position k come from ``seed`` and k alone, so a position's result does not depend
    on which other positions are asked for. Runs on the test set's device (initial weights drawn on the CPU)."""
    n, dev = ts.x.shape[1], ts.x.device
    positions = [validate.positive_int("positions entry", k) for k in positions]
    if not positions or any(k >= n for k in positions):
        raise ValueError(f"positions must be a non-empty list of ints in [1, {n - 1}], got {positions!r}")
    P, G, kmax = ts.x.shape[0], len(positions), max(positions)
    sizes = [cfg.d] + [cfg.target_width] * (cfg.target_depth - 1) + [1]
    inits = []
    for k in positions:
        gen = torch.Generator().manual_seed(seed * 100003 + k)
        inits.append([(torch.randn(P, o, i, generator=gen) * math.sqrt(2.0 / i)).to(dev)
                      for i, o in zip(sizes, sizes[1:])])
    Ws = [nn.Parameter(torch.cat(layer)) for layer in zip(*inits)]  # (G P, o, i)
    bs = [nn.Parameter(torch.zeros(G * P, 1, o, device=dev)) for o in sizes[1:]]
    opt = torch.optim.Adam(Ws + bs, lr=cfg.gd_lr)
    ks = torch.tensor(positions, device=dev).repeat_interleave(P)  # (G P,)
    xs, ys = ts.x[:, :kmax].repeat(G, 1, 1), ts.y[:, :kmax].repeat(G, 1)  # (G P, kmax, d), (G P, kmax)
    mask = (torch.arange(kmax, device=dev) < ks[:, None]).to(F32)  # (G P, kmax) the examples before each query
    rows = torch.arange(G * P, device=dev)
    xq, yq = ts.x[rows % P, ks][:, None], ts.y[rows % P, ks]  # (G P, 1, d), (G P,)

    def net(x: torch.Tensor) -> torch.Tensor:
        h = x
        for j, (W, b) in enumerate(zip(Ws, bs)):
            h = h @ W.transpose(-1, -2) + b
            if j < len(Ws) - 1:
                h = torch.relu(h)
        return h[..., 0]

    best_err = torch.full((G,), float("inf"), device=dev)
    best = torch.zeros(G, P, device=dev)
    for _ in range(cfg.gd_steps):
        loss = (((net(xs) - ys) ** 2 * mask).sum(-1) / ks).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            pred = net(xq)[:, 0].reshape(G, P)
            err = ((pred - yq.reshape(G, P)) ** 2).mean(1)  # (G,) each position's query MSE
            better = err < best_err
            best_err = torch.where(better, err, best_err)
            best = torch.where(better[:, None], pred, best)
    return {k: best[g] for g, k in enumerate(positions)}


def _curves(pred: torch.Tensor, ts: TestSet) -> dict:
    return {"r2": r2(pred, ts.y).tolist(), "r2_within": r2_within(pred, ts.y, ts.within_var).tolist(),
            "r2_task": r2_task(pred, ts).tolist()}


def _at_positions(preds: dict[int, torch.Tensor], ts: TestSet) -> dict:
    ks = list(preds)
    col = {k: (preds[k][:, None], ts.y[:, k:k + 1]) for k in ks}  # (P, 1) prediction and label at k
    keep = ts.scored
    task = {k: ((col[k][0] - col[k][1])[keep, 0] ** 2 / ts.within_var[keep]).mean() for k in ks}
    return {"positions": ks, "r2": [float(r2(*col[k])[0]) for k in ks],
            "r2_within": [float(r2_within(*col[k], ts.within_var)[0]) for k in ks],
            "r2_task": [1 - float(task[k]) for k in ks]}


def baseline_predictions(cfg: ExperimentConfig, ts: TestSet, gd_positions: list[int],
                         seed: int = 0) -> dict:
    """The four baselines' predictions on one test set: (P, n) each, the GD baseline's {position: (P,)}."""
    return {"context mean": context_mean(ts), "least squares": least_squares(ts),
            "linear ceiling": linear_ceiling(ts), "GD baseline": gd_baseline(cfg, ts, gd_positions, seed)}


def _baseline_curves(preds: dict, ts: TestSet) -> dict:
    return {name: _at_positions(p, ts) if name == "GD baseline" else _curves(p, ts) for name, p in preds.items()}


def _baseline_errors(preds: dict, ts: TestSet) -> dict:
    gd = preds["GD baseline"]
    gd_full = torch.zeros_like(ts.y)  # (P, n), the GD baseline's positions filled in
    for k, v in gd.items():
        gd_full[:, k] = v
    out = {name: task_errors(p, ts) for name, p in preds.items() if name != "GD baseline"}
    return {**out, "GD baseline": task_errors(gd_full, ts)[:, list(gd)]}


def baselines(cfg: ExperimentConfig, ts: TestSet, gd_positions: list[int], seed: int = 0) -> dict:
    """Pooled and within-task R^2 of the four baselines on one test set (GD baseline at ``gd_positions``)."""
    return _baseline_curves(baseline_predictions(cfg, ts, gd_positions, seed), ts)


def predict(model: ICLTransformer, ts: TestSet, chunk: int = 512) -> torch.Tensor:
    """The model's prediction at every position of every test prompt, on the test set's device, (P, n);
    ``chunk`` prompts at a time (a few hundred keep a CPU's caches warm: 2-3 times faster than all at once)."""
    chunk = validate.positive_int("chunk", chunk)
    dev = next(model.parameters()).device
    with torch.no_grad():
        parts = [model(ts.x[i:i + chunk].to(dev), ts.y[i:i + chunk].to(dev))
                 for i in range(0, ts.x.shape[0], chunk)]
    return torch.cat(parts).to(ts.y.device)


def evaluate(cfg: ExperimentConfig, models: dict[str, ICLTransformer], gd_positions: list[int]) -> dict:
    """Pooled and within-task R^2 per position for every model and baseline and every test mixture."""
    results, dev = {}, next(next(iter(models.values())).parameters()).device  # the models' device
    for i, omega2 in enumerate(cfg.mixtures):
        ts = test_set(cfg, omega2, seed=cfg.seed + 100 + i, device=dev)
        res = {name: _curves(predict(model, ts), ts) for name, model in models.items()}
        results[omega2] = {**res, **baselines(cfg, ts, gd_positions, seed=cfg.seed)}
    return results


def config_dict(cfg: ExperimentConfig) -> dict:
    return asdict(cfg)


def run(cfg: ExperimentConfig, seeds: list[int], target_depths: list[int], gd_positions: list[int],
        attentions: tuple = ATTENTIONS, device: torch.device = torch.device("cpu"),
        blind_seeds: tuple = ()) -> dict:
    """App. G for several training seeds and target depths: per target depth and mixture, the baselines
    and one curve per attention type and seed, on test prompts shared by all seeds.

    ``blind_seeds``: seeds of x-blind controls (``x_blind=True``, otherwise the same training), one per
    attention type and target depth, named ``NAME x-blind`` and scored in distribution only (omega2 = 0).
    Returns ``{"settings": {...}, "seconds": {attention: s}, "curves": {depth: {omega2: {baseline: curves,
    "softmax-TF": [curves per seed], ...}}}, "errors": {depth: {omega2: {name: errors}}}}`` where curves are
    ``{"r2": [n], "r2_within": [n], "r2_task": [n]}`` (the GD baseline's also name their ``positions``) and
    errors the `task_errors` (P', n) on the CPU (a list per seed for the models; the GD baseline's hold its
    positions only). The test prompts of target depth D and the i-th mixture come from seed ``cfg.seed + 1000 D
    + 100 + i``.
    """
    seeds = [validate.positive_int("seeds entry", s, 0) for s in seeds]
    blind = [validate.positive_int("blind_seeds entry", s, 0) for s in blind_seeds]
    depths = [validate.positive_int("target_depths entry", t) for t in target_depths]
    if not seeds or len(set(seeds)) < len(seeds):
        raise ValueError(f"seeds must be a non-empty list of distinct ints >= 0, got {seeds!r}")
    if len(set(blind)) < len(blind):
        raise ValueError(f"blind_seeds must be distinct ints >= 0, got {blind_seeds!r}")
    if blind and 0.0 not in cfg.mixtures:
        raise ValueError(f"blind_seeds need the in-distribution mixture 0.0 in cfg.mixtures, got {cfg.mixtures!r}")
    if not depths or len(set(depths)) < len(depths):
        raise ValueError("target_depths must be a non-empty list of distinct ints >= 1, "
                         f"got {target_depths!r}")
    attentions = tuple(validate.choice("attentions entry", a, ATTENTIONS) for a in attentions)
    curves: dict = {}
    errors: dict = {}
    tests: dict = {}
    for t in depths:
        tcfg = replace(cfg, target_depth=t)
        tests[t] = [test_set(tcfg, w, seed=cfg.seed + 1000 * t + 100 + i, device=device)
                    for i, w in enumerate(cfg.mixtures)]
        curves[t], errors[t] = {}, {}
        for w, ts in zip(cfg.mixtures, tests[t]):
            preds = baseline_predictions(tcfg, ts, gd_positions, seed=cfg.seed)
            curves[t][w], errors[t][w] = _baseline_curves(preds, ts), _baseline_errors(preds, ts)
    seconds = {}
    for attention in attentions:
        seconds[attention] = 0.0
        for group, is_blind in ((seeds, False), (blind, True)):
            if not group:
                continue
            members = [(t, s) for t in depths for s in group]
            cfgs = [replace(cfg, target_depth=t, seed=s, x_blind=is_blind) for t, s in members]
            models, log = train_ensemble(cfgs, attention, device)
            seconds[attention] += log["seconds"]
            name = NAMES[attention] + (" x-blind" if is_blind else "")
            for (t, _), model in zip(members, models):
                for w, ts in zip(cfg.mixtures, tests[t]):
                    if is_blind and w != 0.0:
                        continue  # a control in distribution only, where it is compared
                    pred = predict(model, ts)
                    curves[t][w].setdefault(name, []).append(_curves(pred, ts))
                    errors[t][w].setdefault(name, []).append(task_errors(pred, ts))
    settings = {"config": config_dict(cfg), "seeds": seeds, "blind_seeds": blind, "target_depths": depths,
                "attentions": list(attentions), "device": str(device), "torch": torch.__version__}
    return {"settings": settings, "seconds": seconds, "curves": curves, "errors": errors}


def at(curve: dict, k: int, key: str = "r2_within") -> float:
    """One curve's value at position k (the GD baseline's by its positions: None where it was not run)."""
    if "positions" in curve:
        return curve[key][curve["positions"].index(k)] if k in curve["positions"] else None
    return curve[key][k]


def summary(result: dict, k: int, key: str = "r2_within") -> dict:
    """Per target depth, mixture and attention type at position k: the within-task R^2 (``key``:
    ``"r2_within"`` or ``"r2_task"``) of every seed, its margin over the context mean (difference of
    within-task R^2) and its MSE ratio to the context mean; and the baselines' within-task R^2 and pooled
    R^2."""
    key = validate.choice("key", key, ("r2_within", "r2_task"))
    out: dict = {}
    for t, per_mixture in result["curves"].items():
        out[t] = {}
        for w, res in per_mixture.items():
            cm = at(res["context mean"], k, key)
            row = {name: at(res[name], k, key) for name in BASELINES}
            row.update({f"{name} pooled": at(res[name], k, "r2") for name in BASELINES})
            for name in [*NAMES.values(), *(f"{v} x-blind" for v in NAMES.values())]:
                if name in res:
                    vals = [at(c, k, key) for c in res[name]]
                    row[name] = vals
                    row[f"{name} pooled"] = [at(c, k, "r2") for c in res[name]]
                    row[f"{name} margin"] = [v - cm for v in vals]
                    row[f"{name} ratio"] = [(1 - v) / (1 - cm) for v in vals]  # MSE_TF / MSE_cm
            out[t][w] = row
    return out


def depth_sweep(cfg: ExperimentConfig, depths: list[int], attentions: tuple = ("softmax", "relu"),
                device: torch.device = torch.device("cpu")) -> dict:
    """Fig. 3 of the paper: train one model per depth (number of blocks) and attention with `train`, everything
    else as in ``cfg``, and return in-distribution (omega2 = 0) R^2 against the number of in-context examples.

    Returns ``{"settings": {config, depths, attentions, device, seed, torch}, "curves": {attention: {depth:
    {"r2": [n], "r2_within": [n], "seconds": s, "final_loss": l}}}}`` with n = test_points + 1 positions.
    Every model uses ``cfg.seed``, so the same arguments on the same device give the same curves.
    """
    depths = [validate.positive_int("depths", v) for v in depths]
    if not depths:
        raise ValueError("depths must be a non-empty list of ints >= 1, got []")
    attentions = tuple(validate.choice("attentions", a, ATTENTIONS) for a in attentions)
    ts = test_set(cfg, 0.0, seed=cfg.seed + 100, device=device)  # the in-distribution test set of `evaluate`
    settings = {"config": config_dict(cfg), "depths": depths, "attentions": list(attentions),
                "device": str(device), "seed": cfg.seed, "torch": torch.__version__}
    curves: dict = {}
    for attention in attentions:
        curves[attention] = {}
        for depth in depths:
            model, log = train(replace(cfg, blocks=depth), attention, device)
            with torch.no_grad():
                pred = model(ts.x, ts.y)  # (P, n), on the device
            curves[attention][depth] = {"r2": r2(pred, ts.y).tolist(),
                                        "r2_within": r2_within(pred, ts.y, ts.within_var).tolist(),
                                        "seconds": log["seconds"], "final_loss": log["losses"][-1]}
    return {"settings": settings, "curves": curves}
