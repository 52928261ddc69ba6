"""App. G of Wu et al. (2025): in-context regression of random deep ReLU networks by trained transformers.

The paper trains GPT-2-style models (Garg et al. 2022) with softmax and with ReLU attention on prompts
``[x_1, y_1, ..., x_k, y_k, x_{k+1}]`` and reports R^2 against the number of in-context examples. It leaves
the target networks, the optimiser and the ReLU normaliser unspecified; the choices here are stated in
`ExperimentConfig`. These models are *trained* (float32, the paper's own experiment), not constructed.

Baselines, always reported with the trained models: the mean of the context labels, least squares with a
bias, and the paper's "train a network of the same depth on the prompt" (Adam, 100 full-batch steps, best
epoch on the query, which is optimistic). Besides the pooled R^2 (dominated by between-task variance) we
report a within-task R^2 = 1 - MSE / E_task[Var(y | task)].
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace

import torch
from torch import nn

from tfbook import validate

F32 = torch.float32


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
    steps: int = 600  # paper: 500k (quick profile: about a minute on one CPU core)
    lr: float = 2e-3  # unspecified (Garg et al.: 1e-4)
    batch: int = 64  # paper: 64
    test_prompts: int = 400  # paper: 6400
    seed: int = 0
    mixtures: tuple = (0.0, 0.1, 0.3, 0.5)  # omega_2 of the test mixtures
    gd_steps: int = 100
    gd_lr: float = 5e-3

    def __post_init__(self):
        for name in ("d", "target_depth", "target_width", "train_points", "test_points", "width", "blocks", "heads",
                     "steps", "batch", "test_prompts", "gd_steps"):
            validate.positive_int(name, getattr(self, name))
        validate.positive_int("seed", self.seed, 0)
        if self.width % self.heads:
            raise ValueError(f"width must be a multiple of heads = {self.heads}, got {self.width}")
        for name in ("lr", "gd_lr"):
            validate.real(name, getattr(self, name), low=0, low_open=True)
        if not self.mixtures or any(not 0 <= validate.real("mixtures entry", w) <= 1 for w in self.mixtures):
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
        self.kind = validate.choice("attention", kind, ("softmax", "relu"))
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
    """GPT-2-style pre-LN transformer reading [x_1, y_1, ..., x_k] and predicting y at every x token."""

    def __init__(self, d: int, width: int, blocks: int, heads: int, attention: str, max_points: int):
        super().__init__()
        self.read_in = nn.Linear(d + 1, width)
        self.pos = nn.Parameter(torch.randn(2 * max_points, width) * 0.02)
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
        xs = torch.cat([x, torch.zeros(B, n, 1, dtype=x.dtype, device=x.device)], -1)
        ys = torch.cat([torch.zeros(B, n, d, dtype=x.dtype, device=x.device), y[..., None]], -1)
        tokens = torch.stack([xs, ys], dim=2).reshape(B, 2 * n, d + 1)
        h = self.read_in(tokens) + self.pos[: 2 * n]
        for blk in self.blocks:
            h = h + blk["attn"](blk["ln1"](h))
            h = h + blk["mlp"](blk["ln2"](h))
        return self.read_out(self.ln(h))[:, ::2, 0]


def train(cfg: ExperimentConfig, attention: str,
          device: torch.device = torch.device("cpu")) -> tuple[ICLTransformer, dict]:
    """Train on in-distribution prompts (omega2 = 0) with Adam; returns the model (on ``device``) and a log."""
    torch.manual_seed(cfg.seed)
    model = ICLTransformer(cfg.d, cfg.width, cfg.blocks, cfg.heads, attention, cfg.test_points + 1).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    losses, start = [], time.perf_counter()
    for _ in range(cfg.steps):
        W = sample_tasks(cfg, cfg.batch, gen)
        x = sample_x(cfg, cfg.batch, cfg.train_points + 1, 0.0, gen)
        x, y = x.to(device), target(W, x).to(device)
        loss = ((model(x, y) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, {"attention": attention, "seconds": time.perf_counter() - start, "losses": losses}


@dataclass
class TestSet:
    omega2: float
    x: torch.Tensor  # (P, n, d)
    y: torch.Tensor  # (P, n)
    within_var: torch.Tensor  # (P,) Var(y | task) from fresh draws
    extra: dict = field(default_factory=dict)


def test_set(cfg: ExperimentConfig, omega2: float, seed: int) -> TestSet:
    gen = torch.Generator().manual_seed(seed)
    W = sample_tasks(cfg, cfg.test_prompts, gen)
    x = sample_x(cfg, cfg.test_prompts, cfg.test_points + 1, omega2, gen)
    fresh = target(W, sample_x(cfg, cfg.test_prompts, 256, omega2, gen))
    return TestSet(omega2, x, target(W, x), fresh.var(dim=-1))


def r2(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Pooled R^2 at every position: 1 - sum_b (pred - y)^2 / sum_b (y - mean_b y)^2, (n,)."""
    return 1 - ((pred - y) ** 2).sum(0) / ((y - y.mean(0)) ** 2).sum(0)


def r2_within(pred: torch.Tensor, y: torch.Tensor, within_var: torch.Tensor) -> torch.Tensor:
    """1 - MSE / E_task[Var(y | task)] at every position, (n,)."""
    return 1 - ((pred - y) ** 2).mean(0) / within_var.mean()


def context_mean(ts: TestSet) -> torch.Tensor:
    """Predict y_k by the mean of y_1..y_{k-1} (0 for k = 1), (P, n)."""
    csum = torch.cumsum(ts.y, dim=1)
    prev = torch.cat([torch.zeros_like(ts.y[:, :1]), csum[:, :-1]], 1)
    count = torch.arange(ts.y.shape[1], dtype=F32).clamp(min=1)
    return prev / count


def least_squares(ts: TestSet, ridge: float = 1e-3) -> torch.Tensor:
    """Ridge-regularised least squares with a bias on the k - 1 previous examples, (P, n)."""
    P, n, d = ts.x.shape
    X1 = torch.cat([ts.x, torch.ones(P, n, 1)], -1).double()
    Y = ts.y.double()
    out = torch.zeros(P, n, dtype=torch.float64)
    for k in range(1, n):
        A = X1[:, :k]
        G = A.transpose(1, 2) @ A + ridge * torch.eye(d + 1, dtype=torch.float64)
        beta = torch.linalg.solve(G, A.transpose(1, 2) @ Y[:, :k, None])
        out[:, k] = (X1[:, k:k + 1] @ beta)[:, 0, 0]
    return out.to(F32)


def gd_baseline(cfg: ExperimentConfig, ts: TestSet, positions: list[int], seed: int = 0) -> dict[int, torch.Tensor]:
    """The paper's baseline: a fresh network of the target's depth and width, trained on the k examples before
    position k (Adam, ``gd_steps`` full-batch steps); the best step's prediction on the query (optimistic)."""
    torch.manual_seed(seed)
    P = ts.x.shape[0]
    out = {}
    for k in positions:
        sizes = [cfg.d] + [cfg.target_width] * (cfg.target_depth - 1) + [1]
        Ws = [nn.Parameter(torch.randn(P, o, i) * math.sqrt(2.0 / i)) for i, o in zip(sizes, sizes[1:])]
        bs = [nn.Parameter(torch.zeros(P, 1, o)) for o in sizes[1:]]
        opt = torch.optim.Adam(Ws + bs, lr=cfg.gd_lr)
        xs, ys, xq, yq = ts.x[:, :k], ts.y[:, :k], ts.x[:, k:k + 1], ts.y[:, k]

        def net(x):
            h = x
            for j, (W, b) in enumerate(zip(Ws, bs)):
                h = h @ W.transpose(-1, -2) + b
                if j < len(Ws) - 1:
                    h = torch.relu(h)
            return h[..., 0]

        best_err, best_pred = None, None
        for _ in range(cfg.gd_steps):
            loss = ((net(xs) - ys) ** 2).mean(-1).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                pred = net(xq)[:, 0]
                err = ((pred - yq) ** 2).mean()
                if best_err is None or err < best_err:
                    best_err, best_pred = err, pred.clone()
        out[k] = best_pred
    return out


def evaluate(cfg: ExperimentConfig, models: dict[str, ICLTransformer], gd_positions: list[int]) -> dict:
    """Pooled and within-task R^2 per position for every model and baseline and every test mixture."""
    results = {}
    for i, omega2 in enumerate(cfg.mixtures):
        ts = test_set(cfg, omega2, seed=cfg.seed + 100 + i)
        curves = {}
        with torch.no_grad():
            for name, model in models.items():
                dev = next(model.parameters()).device
                curves[name] = model(ts.x.to(dev), ts.y.to(dev)).cpu()
        curves["context mean"] = context_mean(ts)
        curves["least squares"] = least_squares(ts)
        gd = gd_baseline(cfg, ts, gd_positions, seed=cfg.seed)
        res = {name: {"r2": r2(p, ts.y).tolist(), "r2_within": r2_within(p, ts.y, ts.within_var).tolist()}
               for name, p in curves.items()}
        res["GD baseline"] = {"positions": gd_positions,
                              "r2": [float(r2(gd[k][:, None], ts.y[:, k:k + 1])[0]) for k in gd_positions],
                              "r2_within": [float(r2_within(gd[k][:, None], ts.y[:, k:k + 1], ts.within_var)[0])
                                            for k in gd_positions]}
        results[omega2] = res
    return results


def config_dict(cfg: ExperimentConfig) -> dict:
    return asdict(cfg)


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
    attentions = tuple(validate.choice("attentions", a, ("softmax", "relu")) for a in attentions)
    ts = test_set(cfg, 0.0, seed=cfg.seed + 100)  # the in-distribution test set of `evaluate`
    settings = {"config": config_dict(cfg), "depths": depths, "attentions": list(attentions),
                "device": str(device), "seed": cfg.seed, "torch": torch.__version__}
    curves: dict = {}
    for attention in attentions:
        curves[attention] = {}
        for depth in depths:
            model, log = train(replace(cfg, blocks=depth), attention, device)
            with torch.no_grad():
                pred = model(ts.x.to(device), ts.y.to(device)).cpu()  # (P, n)
            curves[attention][depth] = {"r2": r2(pred, ts.y).tolist(),
                                        "r2_within": r2_within(pred, ts.y, ts.within_var).tolist(),
                                        "seconds": log["seconds"], "final_loss": log["losses"][-1]}
    return {"settings": settings, "curves": curves}
