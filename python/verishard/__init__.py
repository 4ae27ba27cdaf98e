"""verishard: verified array redistribution for SPMD programs.

>>> from verishard import Mesh, ArrayType
>>> ArrayType.parse("[3{x}6, 4]", Mesh.parse("x=2,y=3")).local_shape
(3, 4)
"""

__version__ = "0.1.0"   # the one place: pyproject.toml reads it (tool.setuptools.dynamic)

from . import moved as _moved

_moved.install()   # the old module paths (verishard.dtensor, ...) as aliases of the new ones, for one release

from .collectives import AllGather, AllPermute, AllReduce, AllToAll, Collective, DynSlice, ReduceScatter, ToPartial
from .errors import LimitError, MeshError, ParseError, PlanError, ShardingError, VerishardError
from .mesh import Mesh
from .sharding import ArrayType, DimType

__all__ = [
    "__version__",
    "Mesh", "DimType", "ArrayType",
    "Collective", "AllGather", "DynSlice", "AllToAll", "AllPermute", "AllReduce", "ReduceScatter", "ToPartial",
    "VerishardError", "ParseError", "MeshError", "ShardingError", "PlanError", "LimitError",
]

from .plan import Plan, Step, check, plan  # noqa: E402  (needs the types above)

__all__ += ["Plan", "Step", "check", "plan"]

from .runtime import assemble, distribute  # noqa: E402

__all__ += ["distribute", "assemble"]
