"""Platforms: devices (a kind with speeds per op class, memory), links (alpha, beta), groups.

A platform is a JSON object (see ``docs/partition.md``); shipped profiles are
``cpu+2gpu``, ``4x-cpu+2gpu`` and ``local-2cpu`` (this package's ``platforms/``).
A node's time on a device is its measured time for the device's kind when the
profiler gave one, else ``launch * kernels + sum(work[c] / speed[c])`` where
``speed[c] = peak_flops * efficiency[c]`` for conv/matmul and
``mem_bw * efficiency[c]`` for elementwise/other (work in bytes touched).

>>> p = load_platform("cpu+2gpu")
>>> p.devices, p.host, p.link("cpu", "t4")
(('cpu', 'v100', 't4'), 'cpu', (1e-05, 15750000000.0))
>>> load_platform("cpu+3gpu")
Traceback (most recent call last):
...
verishard.partition.graph.PartitionError: unknown platform 'cpu+3gpu' (shipped: 4x-cpu+2gpu, cpu+2gpu, local-2cpu; or a path to a JSON file)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from .graph import OP_CLASSES, PartitionError

PLATFORM_DIR = Path(__file__).with_name("platforms")
_TOP = {"name", "description", "sources", "host", "kinds", "devices", "default_link", "links", "groups"}
_KIND = {"peak_flops", "mem_bw", "launch", "efficiency", "speed"}
_DEVICE = {"name", "kind", "memory"}
_LINK = {"between", "alpha", "beta"}


def shipped() -> list[str]:
    return sorted(p.stem for p in PLATFORM_DIR.glob("*.json"))


@dataclass
class Platform:
    name: str
    devices: tuple[str, ...]
    kind: dict[str, str]
    speed: dict[str, dict[str, float]]          # kind -> class -> units/s
    launch: dict[str, float]                    # kind -> s per kernel
    memory: dict[str, float]                    # device -> bytes
    links: dict[frozenset, tuple[float, float]]
    default_link: tuple[float, float]
    groups: tuple[tuple[str, ...], ...]
    host: str
    doc: dict = field(default_factory=dict)

    def link(self, a: str, b: str) -> tuple[float, float]:
        """(alpha seconds, beta bytes/s) between two devices (0, inf on the same device)."""
        if a == b:
            return 0.0, math.inf
        return self.links.get(frozenset((a, b)), self.default_link)

    def node_time(self, attrs: dict, device: str) -> float:
        k = self.kind[device]
        t = attrs.get("time", {})
        if k in t:
            return float(t[k])
        sp = self.speed[k]
        return self.launch[k] * attrs["kernels"] + sum(w / sp[c] for c, w in attrs["work"].items() if w)

    def with_links(self, alpha: float, beta: float) -> "Platform":
        """The same platform with every link set to (alpha, beta) (the measured local link)."""
        return Platform(self.name, self.devices, self.kind, self.speed, self.launch, self.memory, {},
                        (alpha, beta), self.groups, self.host, self.doc)

    def to_json(self) -> dict:
        return self.doc


def _num(v, what: str, positive: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise PartitionError(f"{what} must be a finite number {'> 0' if positive else '>= 0'}, not {v!r}")
    return float(v)


def _keys(obj, allowed: set, what: str) -> None:
    if not isinstance(obj, dict):
        raise PartitionError(f"{what} must be a JSON object")
    extra = set(obj) - allowed
    if extra:
        raise PartitionError(f"unknown key {sorted(extra)[0]!r} in {what} (known: {', '.join(sorted(allowed))})")


def platform_from_json(doc: dict) -> Platform:
    """Validate a platform document and build the :class:`Platform`.

    >>> platform_from_json({"devices": [{"name": "a", "kind": "k", "memory": 1}], "kinds": {"k": {"speeed": 1}}})
    Traceback (most recent call last):
    ...
    verishard.partition.graph.PartitionError: unknown key 'speeed' in kind 'k' (known: efficiency, launch, mem_bw, peak_flops, speed)
    """
    _keys(doc, _TOP, "the platform")
    for key in ("devices", "kinds"):
        if key not in doc:
            raise PartitionError(f"the platform has no {key!r}")
    speed, launch = {}, {}
    for k, kd in doc["kinds"].items():
        _keys(kd, _KIND, f"kind {k!r}")
        if "speed" in kd:
            sp = kd["speed"]
            _keys(sp, set(OP_CLASSES), f"speed of kind {k!r}")
            missing = [c for c in OP_CLASSES if c not in sp]
            if missing:
                raise PartitionError(f"speed of kind {k!r} lacks op class {missing[0]!r}")
            speed[k] = {c: _num(sp[c], f"speed {c} of kind {k!r}", True) for c in OP_CLASSES}
        else:
            for key in ("peak_flops", "mem_bw"):
                if key not in kd:
                    raise PartitionError(f"kind {k!r} needs 'speed' or 'peak_flops' and 'mem_bw'")
            eff = kd.get("efficiency", {})
            _keys(eff, set(OP_CLASSES), f"efficiency of kind {k!r}")
            e = {c: _num(eff.get(c, 1.0), f"efficiency {c} of kind {k!r}", True) for c in OP_CLASSES}
            pf, bw = _num(kd["peak_flops"], f"peak_flops of kind {k!r}", True), _num(kd["mem_bw"], f"mem_bw of kind {k!r}", True)
            speed[k] = {c: (pf if c in ("conv", "matmul") else bw) * e[c] for c in OP_CLASSES}
        launch[k] = _num(kd.get("launch", 0.0), f"launch of kind {k!r}")
    devices, kind, memory = [], {}, {}
    for d in doc["devices"]:
        _keys(d, _DEVICE, "a device")
        if "name" not in d or "kind" not in d:
            raise PartitionError("every device needs a 'name' and a 'kind'")
        n = d["name"]
        if n in kind:
            raise PartitionError(f"device {n!r} is listed twice")
        if d["kind"] not in speed:
            raise PartitionError(f"device {n!r} has unknown kind {d['kind']!r} (kinds: {', '.join(speed)})")
        devices.append(n)
        kind[n] = d["kind"]
        memory[n] = _num(d.get("memory", math.inf), f"memory of device {n!r}") if d.get("memory") is not None else math.inf
    if not devices:
        raise PartitionError("the platform has no devices")
    dl = doc.get("default_link", {"alpha": 0.0, "beta": math.inf})
    _keys(dl, {"alpha", "beta"}, "default_link")
    default = (_num(dl.get("alpha", 0.0), "default_link alpha"), _num(dl.get("beta", math.inf), "default_link beta", True))
    links = {}
    for ln in doc.get("links", []):
        _keys(ln, _LINK, "a link")
        pair = ln.get("between")
        if not (isinstance(pair, list) and len(pair) == 2 and all(p in kind for p in pair) and pair[0] != pair[1]):
            raise PartitionError(f"link 'between' must name two different devices of the platform, not {pair!r}")
        links[frozenset(pair)] = (_num(ln["alpha"], f"alpha of link {pair}"), _num(ln["beta"], f"beta of link {pair}", True))
    groups = []
    for g in doc.get("groups", []):
        if not (isinstance(g, list) and len(g) >= 2 and all(x in kind for x in g) and len(set(g)) == len(g)):
            raise PartitionError(f"a group must list two or more different devices of the platform, not {g!r}")
        groups.append(tuple(g))
    host = doc.get("host", devices[0])
    if host not in kind:
        raise PartitionError(f"host {host!r} is not a device of the platform")
    return Platform(doc.get("name", "platform"), tuple(devices), kind, speed, launch, memory, links, default,
                    tuple(groups), host, doc)


def load_platform(name_or_path: str) -> Platform:
    """A shipped profile by name, or a platform JSON file by path."""
    path = PLATFORM_DIR / f"{name_or_path}.json"
    if not path.exists():
        path = Path(name_or_path)
        if not (path.suffix == ".json" and path.exists()):
            raise PartitionError(f"unknown platform {name_or_path!r} (shipped: {', '.join(shipped())}; "
                                 f"or a path to a JSON file)")
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise PartitionError(f"{path.name}: not JSON: {e}") from None
    return platform_from_json(doc)


__all__ = ["PLATFORM_DIR", "shipped", "Platform", "platform_from_json", "load_platform"]
