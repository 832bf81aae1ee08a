"""Argument checks shared by the benchmark scripts."""

from __future__ import annotations

import argparse


def at_least_one(ap: argparse.ArgumentParser, args: argparse.Namespace, names, hints=None
                 ) -> None:
    """An argparse error naming the first option of ``names`` (attribute names; an
    unset option, None, is skipped) below 1, with ``hints[name]`` after it if given."""
    for name in names:
        v = getattr(args, name)
        if v is not None and v < 1:
            ap.error(f"--{name.replace('_', '-')}: must be at least 1, got {v}"
                     + (hints or {}).get(name, ""))


def budget_fractions_upto(ap: argparse.ArgumentParser, max_frac: float) -> tuple[float, ...]:
    """The package's budget grid up to ``--max-frac``; an argparse error naming
    ``--max-frac`` (before any work) when that leaves no budget."""
    from jaxeval._simulate import DEFAULT_BUDGET_FRACTIONS

    fracs = tuple(f for f in DEFAULT_BUDGET_FRACTIONS if f <= max_frac + 1e-12)
    if not fracs:
        ap.error(f"--max-frac: {max_frac:g} leaves no budget (the smallest budget fraction "
                 f"is {DEFAULT_BUDGET_FRACTIONS[0]:g})")
    return fracs
