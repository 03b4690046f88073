"""SoftCCA (Chang et al. 2018), the contextual loss of teacher–student distillation (Burian 2023, §4.5.2), and
the projection heads that map the two views into one space.

| input  | shape   | what                                                          |
|--------|---------|---------------------------------------------------------------|
| z_s    | [b, p]  | projected student embeddings ``f_S(y)``                       |
| z_c    | [b, p]  | projected contextual-teacher (Paragraph Vector) embeddings    |
| output | [b]     | ``mean_p (z_s − z_c)² + δ·(SDL(z_s) + SDL(z_c))`` per document |

SDL, the stochastic decorrelation loss, pushes the running covariance of a view towards the identity's
off-diagonal zeros: with ``Ẑ = BatchNorm(Z)`` (no affine part) and ``Σ = ẐᵀẐ / (b − 1)``, ``Φ_t = β·Φ_{t−1} + Σ``
(the past detached), ``β̂_t = β·β̂_{t−1} + 1`` and ``SDL = Σ_{i≠j} |Φ_t / β̂_t|_ij / (p² − p)`` (the thesis's code
divides the sum by ``p² − p``). ``Φ`` and ``β̂`` are buffers: checkpointed, resumed, and advanced in training mode
only (in evaluation the step is computed and not stored). On several processes the projections are gathered first,
so every process computes the statistics of the global batch and keeps identical buffers. SDL is one number per
batch, given to every document. The head computes in float32 under mixed precision.
"""

import re

import torch
from torch import nn

from common import cli
from common.io import InputError
from common.distributed import all_gather_with_grad

_BLOCK = re.compile(r"(\d+)(?:\((relu)\))?")


def projection_blocks(spec, flag="projection"):
    """``[(size, relu)]`` of a projection spec, each size at least 1."""
    blocks = []
    for block in spec.split("x") if spec else []:
        m = _BLOCK.fullmatch(block.strip())
        if not m or not cli.WIDTH[1](int(m.group(1))):
            raise InputError(f"{flag} {spec!r}: block {block!r} is not SIZE or SIZE(relu) with a SIZE "
                             f"{cli.WIDTH[0]}")
        blocks.append((int(m.group(1)), bool(m.group(2))))
    return blocks


def projection(spec, in_features):
    """A projection head from a spec such as ``"768(relu)x4096(relu)x2048"``: one ``Linear`` per block (its
    output size), each followed by ReLU where marked. ``""`` is the identity. Returns (module, output size)."""
    if not spec:
        return nn.Identity(), in_features
    blocks = projection_blocks(spec)
    sizes = [in_features] + [size for size, _ in blocks]
    weights = sum(a * b + b for a, b in zip(sizes, sizes[1:]))
    cli.check_memory(weights * 4 * 4, f"projection {spec!r}")  # float32 weights, gradients and AdamW's two moments
    layers = []
    for size, relu in blocks:
        layers.append(nn.Linear(in_features, size))
        if relu:
            layers.append(nn.ReLU())
        in_features = size
    return nn.Sequential(*layers), in_features


class StochasticDecorrelation(nn.Module):
    """SDL of one view with its running covariance ``Φ`` (``running``) and normaliser ``β̂`` (``norm``)."""

    def __init__(self, dim, beta):
        super().__init__()
        self.beta = beta
        self.batch_norm = nn.BatchNorm1d(dim, affine=False)
        self.register_buffer("running", torch.zeros(dim, dim))
        self.register_buffer("norm", torch.zeros(()))

    def forward(self, z):
        z = self.batch_norm(all_gather_with_grad(z))
        sigma = z.T @ z / (len(z) - 1)
        phi = self.beta * self.running.detach() + sigma
        norm = self.beta * self.norm + 1
        if self.training:
            self.running.copy_(phi.detach())
            self.norm.copy_(norm)
        scaled = (phi / norm).abs()
        dim = len(scaled)
        return (scaled.sum() - scaled.diagonal().sum()) / (dim * dim - dim)


class SoftCCA(nn.Module):
    """L2 between the two projections plus δ times both views' SDL, per document."""

    def __init__(self, dim, beta=0.95, delta=0.03):
        super().__init__()
        self.delta = delta
        self.student = StochasticDecorrelation(dim, beta)
        self.teacher = StochasticDecorrelation(dim, beta)

    def forward(self, z_s, z_c):
        device = z_s.device.type
        with torch.autocast(device_type=device, enabled=False):
            z_s, z_c = z_s.float(), z_c.float()
            l2 = (z_s - z_c).pow(2).mean(1)
            return l2 + self.delta * (self.student(z_s) + self.teacher(z_c))
