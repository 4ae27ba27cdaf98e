"""JAX for a test module that needs 8 devices (conftest.py asks XLA for 8
CPU devices before anything imports JAX), or the whole module skipped."""
import pytest


def jax_or_skip(n: int = 8):
    jax = pytest.importorskip("jax")
    if len(jax.devices()) < n:  # pragma: no cover
        pytest.skip(f"needs {n} JAX devices (XLA_FLAGS set before JAX was imported)", allow_module_level=True)
    return jax
