"""Sizes and times as people read them: the one place ringc formats bytes and seconds.

    size_text(36864)             '36 KiB'      (whole units when within 5%, else 2 decimals)
    size_text(36864, decimals=1) '36.0 KiB'    (fixed decimals, as memory reports read)
    time_text(4.2e-05)           '42 us'       (3 significant digits)
"""

from __future__ import annotations

__all__ = ["size_text", "time_text"]

_SIZE_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
_TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6))


def size_text(n: float, decimals: int | None = None) -> str:
    """Bytes in the largest binary unit they reach. Without `decimals`: a whole number of
    units when within 0.05 of one, else two decimals; with it, always that many."""
    for unit, scale in _SIZE_UNITS:
        if n >= scale:
            v = n / scale
            if decimals is not None:
                return f"{v:.{decimals}f} {unit}"
            return f"{v:.0f} {unit}" if abs(v - round(v)) < 0.05 else f"{v:.2f} {unit}"
    return f"{int(n)} B"


def time_text(seconds: float) -> str:
    """Seconds in the largest unit (s, ms, us, else ns) they reach, 3 significant digits."""
    for unit, scale in _TIME_UNITS:
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"
