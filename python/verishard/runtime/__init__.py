"""Runtime: distribute/assemble numpy arrays and execute checked plans.

- :func:`distribute`, :func:`assemble`: layout, for every kind of type (even;
  uneven with ``layout="padded"``, the default, or ``"chunked"``; partial,
  canonical or with ``rng=`` random); :func:`local_block`, :func:`box`: one
  device's block of an even type, from the verified block function
  (``core.block_starts``).
- :func:`simulate`: every device in one process, with per-step traffic and
  memory, checked against the verified rules (every kind of type, the same
  ``layout=``).
- :mod:`verishard.runtime.mpi`: one MPI rank per device (mpi4py over Open MPI);
  imported on demand, since importing it initialises MPI.
- :class:`Backend`, :func:`execute`: the interface a new backend implements
  (four collectives) and the shared executor that drives it.
- :func:`run_mpi_demo`: the ``make demo`` job, launched with ``mpirun``.
"""

from .backend import (AxisGroup, Backend, Donated, RedistributionError, RuntimeCheckError, execute,
                      naive_plan, validate_plan)
from .launch import LaunchResult, mpirun, run_mpi_demo
from .layout import LayoutError, assemble, box, boxes, distribute, local_block, represented, split_partial
from .simulator import SimBackend, SimResult, SimStep, simulate

__all__ = [
    "distribute", "assemble", "local_block", "box", "boxes", "LayoutError", "split_partial", "represented",
    "Backend", "AxisGroup", "Donated", "execute", "validate_plan", "naive_plan",
    "RedistributionError", "RuntimeCheckError",
    "simulate", "SimBackend", "SimResult", "SimStep",
    "mpirun", "run_mpi_demo", "LaunchResult",
]
