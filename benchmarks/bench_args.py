"""Argument checks shared by the benchmark scripts."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def at_least_one(ap: argparse.ArgumentParser, args: argparse.Namespace, names, hints=None
                 ) -> None:
    """An argparse error naming the first option of ``names`` (attribute names; an
    unset option, None, is skipped; a list option is checked value by value) below 1,
    with ``hints[name]`` after it if given."""
    for name in names:
        v = getattr(args, name)
        for x in v if isinstance(v, (list, tuple)) else [v]:
            if x is not None and x < 1:
                ap.error(f"--{name.replace('_', '-')}: must be at least 1, got {x}"
                         + (hints or {}).get(name, ""))


def at_least_two_arms(ap: argparse.ArgumentParser, Ks, option: str = "--K") -> None:
    """An argparse error naming ``option`` when a K (one value or a list) is below 2:
    identification needs at least two candidates."""
    for K in Ks if isinstance(Ks, (list, tuple)) else [Ks]:
        if K < 2:
            ap.error(f"{option}: must be at least 2 (candidates to tell apart), got {K}")


def prepare_outputs(ap: argparse.ArgumentParser, args: argparse.Namespace, names,
                    append=()) -> None:
    """Make the output paths of ``names`` (attribute names; an unset option is skipped)
    ready before any work: the missing folder is created, a folder that cannot be
    written is an argparse error naming the option (``jaxeval._data.cannot_write``),
    and an existing file is announced on stderr: it will be replaced, or appended to for
    the options in ``append``."""
    from jaxeval._data import cannot_write

    for name in names:
        path = getattr(args, name, None)
        if not path:
            continue
        opt = f"--{name.replace('_', '-')}"
        p = Path(path)
        if p.is_dir():
            ap.error(f"{opt}: {path} is a folder, not a file")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            ap.error(f"{opt}: cannot create the folder {str(p.parent)!r} "
                     f"({e.strerror or e})")
        why = cannot_write(p.parent)
        if why:
            ap.error(f"{opt}: cannot write into {str(p.parent)!r} ({why})")
        if p.exists():
            if name in append:
                print(f"{opt}: appending to the existing file {path}", file=sys.stderr)
            else:
                print(f"{opt}: {path} exists and will be replaced", file=sys.stderr)


def short_error(e: BaseException) -> str:
    """``Type: reason`` of an exception, in one short line (a decoding error's reason,
    not its repr with the bytes it could not decode)."""
    if isinstance(e, UnicodeDecodeError):
        reason = f"not {e.encoding} text (byte {e.object[e.start:e.start + 1]!r} at {e.start})"
    else:
        reason = " ".join(str(e).split())
    if len(reason) > 160:
        reason = reason[:157] + "..."
    return f"{type(e).__name__}: {reason}" if reason else type(e).__name__


def budget_fractions_upto(ap: argparse.ArgumentParser, max_frac: float) -> tuple[float, ...]:
    """The package's budget grid up to ``--max-frac``; an argparse error naming
    ``--max-frac`` (before any work) when that leaves no budget."""
    from jaxeval._simulate import DEFAULT_BUDGET_FRACTIONS

    fracs = tuple(f for f in DEFAULT_BUDGET_FRACTIONS if f <= max_frac + 1e-12)
    if not fracs:
        ap.error(f"--max-frac: {max_frac:g} leaves no budget (the smallest budget fraction "
                 f"is {DEFAULT_BUDGET_FRACTIONS[0]:g})")
    return fracs
