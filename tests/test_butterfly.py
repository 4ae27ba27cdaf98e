"""verishard.butterfly on one device: the forms, their dense matrices and
parameter counts, the exact transforms, the Monarch projection against a
brute-force optimum, gradients, and the JAX functions against torch."""
import math

import numpy as np
import pytest
import scipy.linalg
import torch

from verishard.butterfly import BlockButterfly, Butterfly, LayerError, Monarch, Pixelfly
from verishard.butterfly import forms

F64 = torch.float64

LAYERS = [
    lambda i, o: Butterfly(i, o, dtype=F64, seed=1),
    lambda i, o: Butterfly(i, o, nblocks=2, init="orthogonal", dtype=F64, seed=2),
    lambda i, o: BlockButterfly(i, o, block=4, dtype=F64, seed=3),
    lambda i, o: Monarch(i, o, nblocks=4, dtype=F64, seed=4),
    lambda i, o: Monarch(i, o, nblocks=3, dtype=F64, seed=5),
    lambda i, o: Pixelfly(i, o, block=4, factors=2, rank=3, dtype=F64, seed=6),
]
SIZES = [(16, 16), (20, 13), (13, 40), (64, 64)]



@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_from_dense_refuses_non_finite_before_the_svd(bad, monkeypatch):
    W = torch.randn(8, 8, dtype=F64)
    W[3, 5] = bad
    called = []
    monkeypatch.setattr(np.linalg, "svd", lambda *a, **k: called.append(1))   # an inf never comes back from it
    with pytest.raises(LayerError, match=r"non-finite entry .* at \(3, 5\)"):
        Monarch.from_dense(W, nblocks=2)
    with pytest.raises(LayerError, match="non-finite"):
        forms.monarch_project(W.numpy(), forms.MonarchShape.of(8, 8, 2))     # the JAX path's projection too
    assert not called


def test_from_dense_of_a_complex_matrix_keeps_its_imaginary_part():
    m = Monarch(8, 8, nblocks=2, bias=False, dtype=torch.complex128, seed=0)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        m.R.add_(1j * torch.randn(m.R.shape, dtype=F64, generator=g))
        m.L.add_(1j * torch.randn(m.L.shape, dtype=F64, generator=g))
    D = m.to_dense().detach()
    assert D.imag.abs().max() > 0.1
    again = Monarch.from_dense(D, nblocks=2)     # a Monarch matrix is its own projection, complex too
    assert again.R.dtype == torch.complex128
    torch.testing.assert_close(again.to_dense().detach(), D, rtol=0, atol=1e-12)


def test_from_dense_refuses_meta_and_mismatched_devices():
    with pytest.raises(LayerError, match="meta device and holds no values"):
        Monarch.from_dense(torch.empty(8, 8, device="meta"), nblocks=2)
    with pytest.raises(LayerError, match="W is on cpu but bias is on meta"):
        Monarch.from_dense(torch.eye(8), nblocks=2, bias=torch.zeros(8, device="meta"))
    with pytest.raises(LayerError, match=r"bias must be a tensor of shape \(8,\)"):
        Monarch.from_dense(torch.eye(8), nblocks=2, bias=torch.zeros(3))
    lazy = Monarch(8, 8, nblocks=2, device="meta")                 # a layer without values is fine to build
    assert lazy.R.is_meta and lazy(torch.empty(2, 8, device="meta")).shape == (2, 8)
    with pytest.raises(LayerError, match="weights on meta, the input is on cpu"):
        lazy(torch.zeros(2, 8))
    with pytest.raises(LayerError, match="not a torch device"):
        Monarch(8, 8, nblocks=2, device="float32")


@pytest.mark.parametrize("name, dtype", [("float32", torch.float32), ("bfloat16", torch.bfloat16),
                                         ("torch.float64", torch.float64), ("float16", torch.float16)])
def test_dtype_names_are_torch_dtypes(name, dtype):
    for layer in (Monarch(8, 8, nblocks=2, dtype=name, seed=0), Butterfly(8, 8, dtype=name, seed=0),
                  Pixelfly(8, 8, block=2, dtype=name, seed=0)):
        assert {p.dtype for p in layer.parameters()} == {dtype}
    same = Monarch(8, 8, nblocks=2, dtype=dtype, seed=0)
    assert torch.equal(Monarch(8, 8, nblocks=2, dtype=name, seed=0).R, same.R)


@pytest.mark.parametrize("dtype, token", [("float33", "names no torch dtype"), ("int32", "not a floating"),
                                          (torch.bool, "not a floating"), ("Tensor", "names no torch dtype"),
                                          (3, "must be a torch.dtype")])
def test_bad_dtypes_are_one_layer_error(dtype, token):
    with pytest.raises(LayerError, match=token):
        Monarch(8, 8, nblocks=2, dtype=dtype)
    with pytest.raises(LayerError, match=token):
        Butterfly(8, 8, dtype=dtype)


@pytest.mark.parametrize("make, token", [
    (lambda: Monarch(2**30, 2**30, nblocks=2), "Monarch"),
    (lambda: Butterfly(2**40, 2**40), "Butterfly"),
    (lambda: Butterfly(2**4000, 8), "Butterfly"),          # no float overflow in the size arithmetic either
    (lambda: Pixelfly(2**40, 8, block=16), "Pixelfly"),
    (lambda: Pixelfly(64, 64, block=8, rank=2**40), "Pixelfly"),
])
def test_huge_layers_are_refused_before_allocation(make, token, monkeypatch):
    from verishard.errors import LimitError
    from verishard.limits import MAX_LAYER_PARAMETERS
    for init in ("monarch_init", "butterfly_init", "pixelfly_init"):
        monkeypatch.setattr(forms, init, lambda *a, **k: pytest.fail("allocated"))
    with pytest.raises(LimitError, match=f"{token}.*at most 2\\*\\*34 \\(verishard.limits.MAX_LAYER_PARAMETERS\\)"):
        make()
    assert MAX_LAYER_PARAMETERS == 2**34


def test_a_layer_within_the_cap_that_memory_cannot_hold_is_a_limit_error(monkeypatch):
    from verishard.errors import LimitError

    def no_memory(*a, **k):
        raise MemoryError
    monkeypatch.setattr(forms, "monarch_init", no_memory)
    with pytest.raises(LimitError, match="do not fit in this machine's memory"):
        Monarch(64, 64, nblocks=4)

@pytest.mark.parametrize("make", LAYERS)
@pytest.mark.parametrize("io", SIZES)
def test_layer_is_its_dense_matrix(make, io):
    layer = make(*io)
    x = torch.randn(3, 2, io[0], dtype=F64)
    W = layer.to_dense()
    assert W.shape == (io[1], io[0])
    torch.testing.assert_close(layer(x), x @ W.T + layer.bias, rtol=0, atol=1e-12)


def test_parameter_counts():
    for n in (256, 1024, 4096):
        k = int(math.log2(n))
        assert Butterfly(n, n, bias=False).num_parameters() == 2 * n * k
        assert Butterfly(n, n, bias=False, nblocks=2).num_parameters() == 4 * n * k
        assert BlockButterfly(n, n, bias=False, block=4).num_parameters() == 2 * n * 4 * (k - 2)
        r = int(math.isqrt(n)) if math.isqrt(n) ** 2 == n else 2 ** (k // 2)
        assert Monarch(n, n, bias=False, nblocks=r).num_parameters() == 2 * n * n // r
    assert Monarch(1024, 1024, bias=False, nblocks=32).num_parameters() == 2 * 1024 * 32   # 2 n sqrt(n)
    # 98.0% compression at n = 1024, at least 98.5% from n = 2048 on
    assert 1 - Butterfly(1024, 1024, bias=False).num_parameters() / 1024 ** 2 > 0.98
    assert 1 - Butterfly(2048, 2048, bias=False).num_parameters() / 2048 ** 2 > 0.985
    p = Pixelfly(256, 256, block=16, factors=4, rank=8, bias=False)
    assert p.num_parameters() == 16 * 5 * 16 * 16 + 2 * 8 * 256
    assert Butterfly(1000, 1000).num_parameters(bias=True) == 2 * 1024 * 10 + 1000


def test_pixelfly_is_flat_butterfly_plus_low_rank():
    p = Pixelfly(64, 64, block=4, factors=3, rank=2, bias=False, dtype=F64, seed=0)
    sparse = p.to_dense() - p.U @ p.V.T
    mask = torch.as_tensor(p.shape.mask(), dtype=torch.bool)
    assert torch.all(sparse[~mask].abs() < 1e-12) and torch.all(sparse[mask].abs() > 1e-9)
    # the union of the first three block-butterfly factor masks (pairs i, i xor 2^j of blocks)
    blocks = np.arange(16)
    expect = (blocks[:, None] == blocks[None, :]) | np.isin(blocks[:, None] ^ blocks[None, :], [1, 2, 4])
    assert np.array_equal(p.shape.mask()[::4, ::4], expect)


def test_hadamard_and_dft_exact_at_1024():
    n = 1024
    H = Butterfly(n, n, bias=False, init="hadamard", dtype=F64).to_dense()
    assert torch.max(torch.abs(H - torch.as_tensor(scipy.linalg.hadamard(n), dtype=F64))) < 1e-6
    f = Butterfly(n, n, bias=False, init="fft", dtype=F64)
    D = f.to_dense()
    assert D.dtype == torch.complex128
    assert torch.max(torch.abs(D - torch.as_tensor(np.fft.fft(np.eye(n), axis=0)))) < 1e-6
    x = torch.randn(5, n, dtype=F64)
    assert torch.max(torch.abs(f(x) - torch.fft.fft(x))) < 1e-9


def _monarch_error(W, R, L, sh):
    M = forms.monarch_apply(forms.TORCH, torch.eye(sh.in_features, dtype=F64), R, L, sh).T
    return torch.sum((M - W) ** 2)


@pytest.mark.parametrize("shape,nblocks", [((6, 10), 2), ((8, 8), 2), ((5, 7), 3), ((9, 4), 3), ((8, 8), 4)])
def test_from_dense_is_frobenius_optimal(shape, nblocks):
    torch.manual_seed(0)
    W = torch.randn(*shape, dtype=F64)
    m = Monarch.from_dense(W, nblocks=nblocks)
    best = float(torch.sum((m.to_dense().detach() - W) ** 2))
    # brute force: LBFGS on (R, L) from many random starts never does better
    found = []
    for seed in range(12):
        g = torch.Generator().manual_seed(seed)
        R = torch.randn(m.R.shape, dtype=F64, generator=g).requires_grad_()
        L = torch.randn(m.L.shape, dtype=F64, generator=g).requires_grad_()
        opt = torch.optim.LBFGS([R, L], max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-14,
                                line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            e = _monarch_error(W, R, L, m.shape)
            e.backward()
            return e
        opt.step(closure)
        found.append(float(_monarch_error(W, R.detach(), L.detach(), m.shape)))
    assert best <= min(found) + 1e-9
    assert min(found) <= best + 1e-6          # and the search reaches it: the bound is tight
    # a Monarch matrix is its own projection
    again = Monarch.from_dense(m.to_dense().detach(), nblocks=nblocks).to_dense()
    torch.testing.assert_close(again, m.to_dense(), rtol=0, atol=1e-12)


def test_from_dense_keeps_bias_and_refuses_bad_input():
    W, b = torch.randn(12, 8, dtype=F64), torch.randn(12, dtype=F64)
    m = Monarch.from_dense(W, nblocks=4, bias=b)
    assert torch.equal(m.bias, b)
    with pytest.raises(LayerError, match="matrix"):
        Monarch.from_dense(torch.randn(3, 4, 5), nblocks=2)
    with pytest.raises(LayerError, match="nblocks"):
        Monarch(8, 8, nblocks=0)
    with pytest.raises(LayerError, match="power of two"):
        Butterfly(12, 12, init="fft")
    with pytest.raises(LayerError, match="unknown init"):
        Butterfly(8, 8, init="dct")
    with pytest.raises(LayerError, match="takes 8 features"):
        Monarch(8, 8)(torch.randn(2, 9))
    from verishard.butterfly import ShardedMonarch
    with pytest.raises(LayerError, match="init_process_group first"):
        ShardedMonarch(8, 8, nblocks=2, device_mesh=None, features="tp")


@pytest.mark.parametrize("make", LAYERS)
def test_gradients(make):
    layer = make(12, 10)
    x = torch.randn(2, 12, dtype=F64, requires_grad=True)
    params = tuple(p for p in layer.parameters())
    assert torch.autograd.gradcheck(lambda x, *ps: torch.func.functional_call(
        layer, dict(zip([n for n, _ in layer.named_parameters()], ps)), (x,)), (x, *params))


def test_drop_in_for_linear():
    net = torch.nn.Sequential(Monarch(64, 32, nblocks=4), torch.nn.ReLU(), Butterfly(32, 10))
    y = net(torch.randn(7, 5, 64))
    assert y.shape == (7, 5, 10)
    y.sum().backward()
    assert all(p.grad is not None for p in net.parameters())


def test_jax_equals_torch():
    jnp = pytest.importorskip("jax.numpy")
    from verishard.butterfly import jax as bj
    x = torch.randn(3, 20, dtype=F64)
    xj = jnp.asarray(x.numpy())

    def close(a, b):
        np.testing.assert_allclose(np.asarray(a), b.detach().numpy(), rtol=0, atol=1e-5)

    for layer in (Butterfly(20, 45, nblocks=2, bias=False, seed=0), BlockButterfly(20, 20, block=2, bias=False, seed=1)):
        close(bj.butterfly(xj, jnp.asarray(layer.twiddle.detach().numpy()), layer.shape), layer(x.float()))
    m = Monarch(20, 13, nblocks=3, bias=False, seed=2)
    close(bj.monarch(xj, *(jnp.asarray(t.detach().numpy()) for t in (m.R, m.L)), m.shape), m(x.float()))
    p = Pixelfly(20, 30, block=4, factors=2, rank=2, bias=False, seed=3)
    close(bj.pixelfly(xj, *(jnp.asarray(t.detach().numpy()) for t in (p.blocks, p.U, p.V)), p.shape), p(x.float()))
    f = Butterfly(16, 16, bias=False, init="fft", dtype=F64)
    close(bj.butterfly(xj[:, :16], jnp.asarray(f.twiddle.detach().numpy()), f.shape, True), f(x[:, :16]))


def test_docs_page_runs():
    import doctest
    import os
    result = doctest.testfile(os.path.join(os.path.dirname(__file__), "..", "docs", "butterfly.md"),
                              module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 10 and result.failed == 0
