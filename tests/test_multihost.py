"""Two hosts on one machine: two network namespaces joined by a veth pair,
each running ``torchrun --nnodes 2 --node-rank i --nproc-per-node 2`` with
the first namespace's address as the rendezvous (tests/multihost_job.py).
Each namespace has its own loopback, so anything that assumed one machine
(a store or rendezvous on 127.0.0.1, local ranks taken for global ones,
shared memory between hosts) fails here. The test makes the namespaces and
the link itself, under names of its own, and always removes them; it is
skipped, saying why, where namespaces or the link cannot be made (not
root, no ``ip``, no CAP_NET_ADMIN, no veth)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from multihost_job import NPROCS  # noqa: E402

TIMEOUT_S = 240
PORT = 29400


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def _why_not() -> str | None:
    """Why network namespaces cannot be made here, or None."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are Linux's; this is {sys.platform}"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) to make network namespaces with"
    if os.geteuid() != 0:
        return "making network namespaces needs root (CAP_NET_ADMIN); this test runs as uid " + str(os.geteuid())
    return None


@contextlib.contextmanager
def two_namespaces():
    """Two namespaces joined by a veth pair, 10.x.y.1 and 10.x.y.2 (/24, x
    and y drawn per run), loopbacks up, under names drawn per run; removed
    on the way out whatever happened (deleting a namespace deletes its end
    of the link and the link). Skips the test where they cannot be made."""
    why = _why_not()
    if why:
        pytest.skip(why)
    tag = secrets.token_hex(4)
    names, links = [f"vsmh-{tag}-{i}" for i in range(2)], [f"vsmh{tag}{i}" for i in range(2)]
    net = f"10.{200 + secrets.randbelow(50)}.{secrets.randbelow(250)}"
    made: list[str] = []
    try:
        for ns in names:
            got = _ip("netns", "add", ns, check=False)
            if got.returncode:
                if not made:
                    pytest.skip(f"`ip netns add` is refused here (CAP_NET_ADMIN?): {got.stderr.strip()}")
                raise RuntimeError(got.stderr)
            made.append(ns)
        got = _ip("link", "add", links[0], "type", "veth", "peer", "name", links[1], check=False)
        if got.returncode:
            pytest.skip(f"a veth pair cannot be made here: {got.stderr.strip()}")
        for i, (ns, link) in enumerate(zip(names, links)):
            _ip("link", "set", link, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{net}.{i + 1}/24", "dev", link)
            _ip("-n", ns, "link", "set", link, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield [{"ns": ns, "link": link, "addr": f"{net}.{i + 1}"} for i, (ns, link) in enumerate(zip(names, links))]
    finally:
        for ns in made:
            _ip("netns", "del", ns, check=False)
        for link in links:   # still in this namespace only if moving it failed
            if _ip("link", "show", link, check=False).returncode == 0:
                _ip("link", "del", link, check=False)


@pytest.fixture
def two_hosts():
    with two_namespaces() as hosts:
        yield hosts


def _run_hosts(hosts: list[dict], outdir: str) -> list[subprocess.CompletedProcess]:
    """torchrun in each namespace (gloo binds the namespace's end of the
    link, ``GLOO_SOCKET_IFNAME``, as on hosts whose name does not resolve to
    the interface they share); every process group killed on a timeout."""
    procs = []
    try:
        for i, h in enumerate(hosts):
            env = dict(os.environ, GLOO_SOCKET_IFNAME=h["link"], OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
            cmd = ["ip", "netns", "exec", h["ns"], sys.executable, "-m", "torch.distributed.run",
                   "--nnodes", "2", "--node-rank", str(i), "--nproc-per-node", str(NPROCS // 2),
                   "--master-addr", hosts[0]["addr"], "--master-port", str(PORT), "--max-restarts", "0",
                   os.path.join(HERE, "multihost_job.py"), outdir]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          start_new_session=True))
        try:
            outs = [p.communicate(timeout=TIMEOUT_S)[0] for p in procs]
        except subprocess.TimeoutExpired:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
            tails = "\n".join(f"host {i}:\n{(p.communicate(timeout=30)[0] or '')[-3000:]}" for i, p in enumerate(procs))
            pytest.fail(f"the two hosts' job did not finish in {TIMEOUT_S} s (killed):\n{tails}")
        return [subprocess.CompletedProcess(p.args, p.returncode, out) for p, out in zip(procs, outs)]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)   # torchrun and its workers: the session this test started
                p.wait(timeout=30)


@pytest.fixture
def job(two_hosts, tmp_path):
    done = _run_hosts(two_hosts, str(tmp_path))
    tails = "\n".join(f"host {i} exited {d.returncode}:\n{d.stdout[-3000:]}" for i, d in enumerate(done))
    assert all(d.returncode == 0 for d in done), tails
    ranks = {}
    for r in range(NPROCS):
        with open(tmp_path / f"rank{r}.json") as f:
            ranks[r] = json.load(f)
    crashes = [rec for d in ranks.values() for rec in d["records"] if "error" in rec]
    assert not crashes, crashes[0]
    return two_hosts, ranks


def _case(ranks: dict, case: str) -> list[tuple[int, dict]]:
    return [(r, rec) for r, d in sorted(ranks.items()) for rec in d["records"] if rec["case"] == case]


def test_two_hosts_sync_weights_redistribute_and_save_and_load_a_checkpoint(job):
    """Ranks 0, 1 in the first namespace and 2, 3 in the second (local
    ranks 0, 1 on each), the rendezvous on the first's address:

    - a weight sync from the first host's FSDP shards to the second host's
      tensor-parallel layouts (and onto a (2, 2) mesh whose rows are the
      hosts): every tensor bit for bit with distribute_tensor's shard, every
      rank receiving exactly its lower bound in bytes counted at the
      point-to-point ops, the second host's ranks receiving everything they
      hold (nothing of it was there);
    - redistribute on a (2, 2) mesh whose rows are the hosts and on a
      sub-mesh of one rank per host: bit for bit with DTensor.redistribute;
    - a checkpoint saved from all four ranks and loaded in place onto a
      (2, 2) mesh with other placements: bit for bit, step restored."""
    hosts, ranks = job
    assert [(d["node"], d["local_rank"]) for _, d in sorted(ranks.items())] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert {d["master_addr"] for d in ranks.values()} == {hosts[0]["addr"]}
    assert all(d["world"] == NPROCS for d in ranks.values())
    moved = _case(ranks, "transfer")
    assert len(moved) == NPROCS
    for r, rec in moved:
        assert rec["names"] == (["w2"] if r < 2 else ["embed", "norm", "out", "qkv", "w2"]), (r, rec["names"])
        assert all(rec["same"].values()), (r, rec["same"])
        assert rec["received"] == rec["lower_bound"] and rec["sent"] == rec["schedule_sent"], (r, rec)
        if r >= 2:
            assert rec["received"] > 0
    assert sum(rec["sent"] for _, rec in moved) == sum(rec["received"] for _, rec in moved)
    for r, rec in _case(ranks, "redistribute"):   # the sub-mesh's members only run it
        want = ["(2, 2) over both hosts"] + (["ranks 1 and 2, one per host"] if r in (1, 2) else [])
        assert sorted(rec["same"]) == sorted(want) and all(rec["same"].values()), (r, rec)
    loaded = _case(ranks, "checkpoint")
    assert len(loaded) == NPROCS
    for r, rec in loaded:
        assert rec["in_place"] and rec["step"] == 7 and all(rec["same"].values()), (r, rec)


def test_namespaces_are_removed_even_when_the_test_fails():
    """The namespaces and the link are made (the second namespace reaches the
    first over it) and are gone after a failure inside."""
    class Planted(Exception):
        pass
    with pytest.raises(Planted):
        with two_namespaces() as hosts:
            b = hosts[1]
            got = subprocess.run(["ip", "netns", "exec", b["ns"], sys.executable, "-c",
                                  f"import socket; socket.create_connection(({hosts[0]['addr']!r}, 9), 5)"],
                                 capture_output=True, text=True, timeout=30)
            assert "ConnectionRefusedError" in got.stderr, got.stderr   # reached: nothing listens on port 9
            raise Planted
    listed = _ip("netns", "list").stdout
    assert not any(h["ns"] in listed for h in hosts)
    assert all(_ip("link", "show", h["link"], check=False).returncode != 0 for h in hosts)
