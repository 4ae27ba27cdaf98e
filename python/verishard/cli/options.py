"""Option parsing shared by every command group's parser (the modules of
``verishard.cli``, one per command group): the exit codes, the usage error
and the argparse parser that raises it, and the integer option reader. Each
group imports them from here, below all of them."""

from __future__ import annotations

import argparse

from ..errors import ParseError, VerishardError
from ..limits import check_int, parse_int

__all__ = ["int_option", "UsageError", "Parser", "EXIT_OK", "EXIT_REJECTED", "EXIT_USAGE", "EXIT_INTERNAL"]


def int_option(option: str, low: int, high: int):
    """An argparse ``type`` reading ``option`` as a decimal integer in
    ``[low, high]`` (ASCII digits only, at most ``MAX_DIGITS`` of them),
    else one usage error naming the option.

    >>> nranks = int_option("--nranks", 1, 2**20)
    >>> nranks("8")
    8
    >>> nranks(str(2**70))
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: --nranks 1180591620717411303424 is too large (at most 2**20)
    >>> nranks("²")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: --nranks '²' is not an integer
    """
    def read(text: str) -> int:
        try:
            return check_int(parse_int(text, option, ParseError), option, low=low, high=high, error=ParseError)
        except VerishardError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    read.__name__ = option.lstrip("-").replace("-", "_")  # argparse names the type in some messages
    return read


EXIT_OK, EXIT_REJECTED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


class UsageError(VerishardError):
    """A command-line argument is missing or malformed.

    >>> from verishard.cli import build_parser
    >>> build_parser().parse_args(["check"])
    Traceback (most recent call last):
    ...
    verishard.cli.options.UsageError: the following arguments are required: file (see 'verishard check --help')
    """


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (exit code 2)."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")
