"""What the ``verishard`` command line writes: a standard output that
reports a stream it cannot write, and the one error line on stderr."""

from __future__ import annotations

import os
import sys
import traceback

from ..errors import VerishardError
from .options import EXIT_REJECTED, UsageError

__all__ = ["OPTIONAL_PACKAGES", "OutputLost", "Output", "emit", "missing_package", "output_lost", "report_failure",
           "silence_stdout"]

# The optional packages a command may need, and the extra of pyproject.toml that installs each
# (``verishard partition`` needs the whole ``partition`` extra, whichever of them is missing).
OPTIONAL_PACKAGES = {"matplotlib": "picture", "networkx": "partition", "scipy": "partition", "torch": "torch",
                     "jax": "jax", "jaxlib": "jax", "mpi4py": "mpi"}


class OutputLost(VerishardError):
    """Standard output cannot be written (closed, a full disk): exit 1, one line on stderr."""


def missing_package(e: ModuleNotFoundError, command: str | None) -> UsageError | None:
    """The usage error for an optional package that is not installed (None:
    ``e`` is about another module, a bug).

    >>> print(missing_package(ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib"), "show"))
    verishard show needs matplotlib, which is not installed: pip install 'verishard[picture]'
    >>> missing_package(ModuleNotFoundError("No module named 'verishard._core'", name="verishard._core"), "plan")
    """
    top = (e.name or "").split(".")[0]
    if top not in OPTIONAL_PACKAGES:
        return None
    extra = "partition" if command == "partition" else OPTIONAL_PACKAGES[top]
    return UsageError(f"verishard {command or ''}".rstrip() + f" needs {top}, which is not installed: "
                      f"pip install 'verishard[{extra}]'")


def silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so that the interpreter's last
    flush of what is still buffered does not fail again at exit."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, AttributeError, ValueError):
        pass


def output_lost(why: str) -> int:
    if sys.stdout is not None:
        silence_stdout()
    _say_error(f"{why}; nothing was written")
    return EXIT_REJECTED


def _say_error(msg: str) -> None:
    """The one error line on stderr, if there is a stderr that can still take it."""
    if sys.stderr is not None:
        try:
            print(f"verishard: error: {msg}", file=Output(sys.stderr))
        except (OSError, VerishardError):
            pass


class Output:
    """A text stream whose ``write`` escapes what the stream cannot encode
    (a lone surrogate from a command-line argument echoed back) instead of
    raising ``UnicodeEncodeError``, and reports a stream that cannot be
    written (closed, ``/dev/full``) as :class:`OutputLost`.
    """

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        encoding = getattr(self.stream, "encoding", None) or "utf-8"
        try:
            try:
                return self.stream.write(text)
            except UnicodeEncodeError:
                return self.stream.write(text.encode(encoding, "backslashreplace").decode(encoding))
        except BrokenPipeError:
            raise
        except (OSError, ValueError) as e:   # ValueError: a closed file object
            raise OutputLost(f"cannot write to standard output: {getattr(e, 'strerror', None) or e}") from None

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except (OSError, ValueError) as e:
            raise OutputLost(f"cannot write to standard output: {getattr(e, 'strerror', None) or e}") from None

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def report_failure(e: BaseException, code: int, debug: bool, internal: bool = False) -> int:
    if debug:
        traceback.print_exc()
    msg = " ".join(str(e).split()) or type(e).__name__
    if internal:
        msg = f"internal error: {type(e).__name__}: {msg}" + ("" if debug else " (rerun with --debug)")
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001
        pass
    _say_error(msg)
    return code


def emit(text: str, out) -> None:
    out.write(text if text.endswith("\n") else text + "\n")
