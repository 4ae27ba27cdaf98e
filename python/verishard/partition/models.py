"""The models partitioned, written with torch.nn (the PyPI torchvision wheel for torch
2.13 is built against CUDA torch and does not load with the CPU build in .venv).

ResNet-18 and VGG-11 follow torchvision's layer lists (He et al. 2016; Simonyan &
Zisserman 2015); ``width`` scales the channel counts (1.0 is the published network).
The transformer block is pre-norm multi-head self-attention plus an MLP, with
separate q/k/v projections so the fx graph shows their parallel branches.
``RandWire`` builds a CNN on a networkx DAG (Xie et al. 2019): each node sums its
inputs, then ReLU-conv3x3-BN.

>>> import torch
>>> tuple(resnet18(width=0.125)(torch.zeros(1, 3, 32, 32)).shape)
(1, 10)
"""

from __future__ import annotations

import networkx as nx
import torch
import torch.nn as nn

from .graph import OpGraph, PartitionError, from_fx, random_dag


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        self.relu2 = nn.ReLU()

    def forward(self, x):
        y = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        s = x if self.down is None else self.down(x)
        return self.relu2(y + s)


class ResNet18(nn.Module):
    def __init__(self, width: float = 1.0, classes: int = 10):
        super().__init__()
        c = [max(4, int(w * width)) for w in (64, 128, 256, 512)]
        self.stem = nn.Sequential(nn.Conv2d(3, c[0], 7, 2, 3, bias=False), nn.BatchNorm2d(c[0]), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], c[0]
        for i, cout in enumerate(c):
            for j in range(2):
                blocks.append(BasicBlock(cin, cout, 2 if (j == 0 and i > 0) else 1))
                cin = cout
        self.layers = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(self.flat(self.pool(self.layers(self.stem(x)))))


def resnet18(width: float = 1.0, classes: int = 10) -> nn.Module:
    return ResNet18(width, classes).eval()


def vgg11(width: float = 1.0, classes: int = 10) -> nn.Module:
    cfg = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]
    layers, cin = [], 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            cout = max(4, int(v * width))
            layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU()]
            cin = cout
    hidden = max(16, int(4096 * width))
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, hidden), nn.ReLU(),
                         nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes)).eval()


class TransformerBlock(nn.Module):
    def __init__(self, d: int = 256, heads: int = 4, mlp: int = 4):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.fc1, self.act, self.fc2 = nn.Linear(d, mlp * d), nn.GELU(), nn.Linear(mlp * d, d)
        self.scale = self.dh ** -0.5

    def forward(self, x):
        y = self.ln1(x)
        q = self.q(y).unflatten(-1, (self.h, self.dh)).transpose(1, 2)
        k = self.k(y).unflatten(-1, (self.h, self.dh)).transpose(1, 2)
        v = self.v(y).unflatten(-1, (self.h, self.dh)).transpose(1, 2)
        a = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * self.scale, dim=-1)
        z = torch.matmul(a, v).transpose(1, 2).flatten(-2)
        x = x + self.o(z)
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


def transformer_block(d: int = 256, heads: int = 4) -> nn.Module:
    return TransformerBlock(d, heads).eval()


class RandWire(nn.Module):
    """A CNN whose stage is wired by the DAG ``dag`` (nodes: ints plus 'in' and 'out')."""

    def __init__(self, dag: nx.DiGraph, channels: int = 32, classes: int = 10):
        super().__init__()
        self.order = [v for v in nx.lexicographical_topological_sort(dag, key=str) if v not in ("in", "out")]
        self.preds = {v: [p for p in dag.predecessors(v)] for v in self.order}
        self.sinks = [p for p in dag.predecessors("out")]
        self.stem = nn.Conv2d(3, channels, 3, 2, 1)
        self.nodes = nn.ModuleDict({str(v): nn.Sequential(nn.ReLU(), nn.Conv2d(channels, channels, 3, 1, 1),
                                                          nn.BatchNorm2d(channels)) for v in self.order})
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, classes))

    def forward(self, x):
        out = {"in": self.stem(x)}
        for v in self.order:
            ins = [out[p] for p in self.preds[v]]
            s = ins[0]
            for t in ins[1:]:
                s = s + t
            out[v] = self.nodes[str(v)](s)
        s = out[self.sinks[0]]
        for t in self.sinks[1:]:
            s = s + out[t]
        return self.head(s)


def randwire(kind: str = "ws", n: int = 16, seed: int = 0, channels: int = 32, p: float = 0.75) -> nn.Module:
    return RandWire(random_dag(kind, n, seed, p=p), channels).eval()


# name -> (builder, example input builder); sizes are the benchmark's defaults
MODELS = {
    "resnet18": (lambda: resnet18(1.0), lambda batch: torch.randn(batch, 3, 224, 224)),
    "vgg11": (lambda: vgg11(1.0), lambda batch: torch.randn(batch, 3, 224, 224)),
    "transformer": (lambda: transformer_block(768, 12), lambda batch: torch.randn(batch, 512, 768)),
    "randwire-ws": (lambda: randwire("ws", 16, 0, 78), lambda batch: torch.randn(batch, 3, 224, 224)),
    "randwire-er": (lambda: randwire("er", 16, 0, 78, p=0.2), lambda batch: torch.randn(batch, 3, 224, 224)),
    # small versions, for tests, the profiler and the executed case
    "tiny-resnet": (lambda: resnet18(0.125), lambda batch: torch.randn(batch, 3, 32, 32)),
    "tiny-transformer": (lambda: transformer_block(64, 4), lambda batch: torch.randn(batch, 16, 64)),
    "small-randwire": (lambda: randwire("ws", 8, 0, 64), lambda batch: torch.randn(batch, 3, 64, 64)),
    "tiny-randwire": (lambda: randwire("ws", 8, 0, 16), lambda batch: torch.randn(batch, 3, 32, 32)),
}


def model_graph(name: str, batch: int = 8, coarsen: bool = True) -> OpGraph:
    """The fx graph of a named model (``MODELS``), series chains contracted unless ``coarsen=False``.

    >>> g = model_graph("tiny-transformer", batch=2)
    >>> len(g) < len(model_graph("tiny-transformer", batch=2, coarsen=False))
    True
    """
    if name not in MODELS:
        raise PartitionError(f"unknown model {name!r} (known: {', '.join(MODELS)})")
    build, example = MODELS[name]
    torch.manual_seed(0)
    g = from_fx(build(), example(batch), name)
    return g.coarsened() if coarsen else g


__all__ = ["BasicBlock", "ResNet18", "resnet18", "vgg11", "TransformerBlock", "transformer_block", "RandWire",
           "randwire", "MODELS", "model_graph"]
