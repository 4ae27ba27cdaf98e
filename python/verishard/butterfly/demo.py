"""The digits MLP: scikit-learn's bundled ``load_digits`` (8 x 8 images, 64
features, 10 classes; no download), an MLP ``64 -> 256 -> 256 -> 10`` whose
hidden-to-hidden layer is dense or structured; the same training budget for
each (Adam, minibatches of 64, a fixed number of epochs).

``python -m verishard.butterfly.demo`` (``make demo``) trains it with a dense
and with a Monarch hidden layer and prints test accuracy and the hidden
layer's parameter count side by side. ``bench/butterfly.py`` uses the same
functions for all four kinds over five seeds.
"""
from __future__ import annotations

import time
from typing import Callable

import torch
from torch import nn

from .modules import Butterfly, Monarch, Pixelfly

__all__ = ["digits", "mlp", "hidden_parameters", "train", "main"]

WIDTH = 256

#: the hidden-to-hidden layer of each kind, at WIDTH
HIDDEN: dict[str, Callable[[], nn.Module]] = {
    "dense": lambda: nn.Linear(WIDTH, WIDTH),
    "butterfly": lambda: Butterfly(WIDTH, WIDTH, nblocks=2),
    "monarch": lambda: Monarch(WIDTH, WIDTH, nblocks=16),
    "pixelfly": lambda: Pixelfly(WIDTH, WIDTH, block=8, factors=3, rank=8),
}


def digits(seed: int = 0) -> tuple[torch.Tensor, ...]:
    """``(x_train, y_train, x_test, y_test)``: a stratified 75/25 split, pixels scaled to [0, 1]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    X, y = load_digits(return_X_y=True)
    xa, xb, ya, yb = train_test_split(X / 16.0, y, test_size=0.25, stratify=y, random_state=seed)
    f = lambda a: torch.as_tensor(a, dtype=torch.float32)  # noqa: E731
    return f(xa), torch.as_tensor(ya), f(xb), torch.as_tensor(yb)


def mlp(kind: str, seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, WIDTH), nn.ReLU(), HIDDEN[kind](), nn.ReLU(), nn.Linear(WIDTH, 10))


def hidden_parameters(model: nn.Sequential) -> int:
    return sum(p.numel() for p in model[2].parameters())


def train(kind: str, seed: int, data: tuple[torch.Tensor, ...], epochs: int = 40, batch: int = 64,
          lr: float = 3e-3) -> dict:
    """Train one model; its test accuracy, hidden-layer parameters and mean training-step time."""
    xa, ya, xb, yb = data
    model = mlp(kind, seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    steps, spent = 0, 0.0
    for _ in range(epochs):
        order = torch.randperm(len(xa), generator=g)
        for k in range(0, len(xa), batch):
            idx = order[k:k + batch]
            t = time.perf_counter()
            opt.zero_grad()
            nn.functional.cross_entropy(model(xa[idx]), ya[idx]).backward()
            opt.step()
            spent += time.perf_counter() - t
            steps += 1
    with torch.no_grad():
        acc = float((model(xb).argmax(-1) == yb).float().mean())
    return dict(kind=kind, seed=seed, accuracy=acc, hidden_parameters=hidden_parameters(model),
                step_seconds=spent / steps)


def main() -> None:
    torch.set_num_threads(1)   # small matrices: threads cost more than they give, more so on a shared machine
    data = digits()
    print(f"digits MLP 64 -> {WIDTH} -> {WIDTH} -> 10, hidden-to-hidden layer dense vs Monarch (nblocks=16), "
          f"40 epochs, seed 0")
    rows = [train(kind, 0, data) for kind in ("dense", "monarch")]
    for r in rows:
        print(f"  {r['kind']:8s} test accuracy {100 * r['accuracy']:.2f}%   hidden layer {r['hidden_parameters']:6d} "
              f"parameters   {1e3 * r['step_seconds']:.2f} ms/step")
    dense, monarch = rows
    print(f"  Monarch: {100 * (1 - monarch['hidden_parameters'] / dense['hidden_parameters']):.1f}% fewer parameters "
          f"in that layer, accuracy {100 * (monarch['accuracy'] - dense['accuracy']):+.2f} points")


if __name__ == "__main__":
    main()
