"""Argument checks shared by the benchmark scripts (their counts must be at least 1)."""

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
