"""A picture of a placement: the operator graph in layers, each node coloured by its device
(a sharded node striped with its group's colours) and labelled with its operator's name,
drawn with networkx and matplotlib."""

from __future__ import annotations

from pathlib import Path

import networkx as nx

from .graph import PartitionError


def draw(pb, assign: dict, path: str, title: str = "") -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in (".png", ".svg", ".pdf"):
        raise PartitionError(f"--picture must end in .png, .svg or .pdf, not {path!r}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    g = pb.g
    for layer, nodes in enumerate(nx.topological_generations(g)):
        for v in nodes:
            g.nodes[v]["_layer"] = layer
    pos = nx.multipartite_layout(g, subset_key="_layer", align="horizontal", scale=1.0)
    for v in g:
        pos[v] = (pos[v][0], -pos[v][1])
        del g.nodes[v]["_layer"]
    cmap = plt.get_cmap("tab10")
    colour = {d: cmap(i % 10) for i, d in enumerate(pb.pf.devices)}
    width = max(6.0, 0.45 * max(len(l) for l in nx.topological_generations(g)) + 4)
    height = max(4.0, 0.5 * len(list(nx.topological_generations(g))) + 2)
    fig, ax = plt.subplots(figsize=(min(width, 30), min(height, 40)))
    nx.draw_networkx_edges(g, pos, ax=ax, arrowsize=8, edge_color="#999999", node_size=260)
    kinds = {}
    for v in g:
        o = pb.opts[v][assign[v]]
        kinds.setdefault(o.kind, []).append(v)
        nx.draw_networkx_nodes(g, pos, nodelist=[v], ax=ax, node_size=260, node_color=[colour[o.devs[0]]],
                               edgecolors=[colour[o.devs[-1]]] if o.kind != "dev" else "black",
                               linewidths=3.0 if o.kind != "dev" else 0.5,
                               node_shape={"dev": "o", "dp": "s", "mp": "D"}[o.kind])
    # each operator's name beside its node (long names shortened: the graph JSON has them whole)
    labels = {v: (str(v) if len(str(v)) <= 18 else str(v)[:16] + "..") for v in g}
    nx.draw_networkx_labels(g, {v: (x + 0.03, y) for v, (x, y) in pos.items()}, labels, ax=ax,
                            font_size=6, horizontalalignment="left")
    handles = [Patch(color=colour[d], label=d) for d in pb.pf.devices
               if any(d in pb.opts[v][assign[v]].devs for v in g)]
    marks = {"dev": "circle: one device", "dp": "square: data parallel (fill, rim: group)",
             "mp": "diamond: model parallel (fill, rim: group)"}
    handles += [Patch(color="white", label=marks[k]) for k in ("dev", "dp", "mp") if k in kinds]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.axis("off")
    fig.tight_layout()
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # SVG text stays text (operator names searchable)
        fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


__all__ = ["draw"]
