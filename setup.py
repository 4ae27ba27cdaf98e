"""The wheel holds a compiled module (``verishard/_core*.so``, built by ``build_backend/``), so it is a
platform wheel (``cp311-cp311-linux_x86_64``), not ``py3-none-any``; everything else is in pyproject.toml."""
from setuptools import setup
from setuptools.dist import Distribution


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(distclass=BinaryDistribution)
