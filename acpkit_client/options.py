"""Command-line value types shared by ``acpkit-client`` (the terminal UI) and ``ask``."""

from __future__ import annotations

import argparse

__all__ = ["seconds"]


def seconds(text: str) -> float:
    """An ``argparse`` type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text!r}")
    return value
