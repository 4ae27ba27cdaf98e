"""Resident memory of this process (Linux ``/proc/self``), for the benchmarks' peak figures."""

from __future__ import annotations


def rss_kib(field: str = "VmRSS") -> int:
    """A memory field of ``/proc/self/status`` in KiB: ``VmRSS`` now, ``VmHWM`` the peak
    since the last :func:`reset_hwm`."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_hwm() -> bool:
    """Reset ``VmHWM`` to the current RSS (write 5 to ``/proc/self/clear_refs``); False
    where the kernel does not allow it (then ``VmHWM`` is the peak since the start)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def return_freed_memory() -> None:
    """Run this process again with ``MALLOC_MMAP_THRESHOLD_=65536`` unless it is
    set, so that freed tensors go back to the OS and the high-water mark of a
    later call means something (call it first in ``main``)."""
    import os
    import sys
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") is None:
        os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(1 << 16)))
