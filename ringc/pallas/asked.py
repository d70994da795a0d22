"""What a Python file says of the devices it runs on, read from its text without importing
jax (the CLI asks before it sets the CPU device count, which must come before jax starts)."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["DEFAULT_DEVICES", "default_devices", "device_count_asked"]


def device_count_asked(path: str) -> tuple[int, int, str] | None:
    """The device count a file asks JAX for (`XLA_FLAGS=--xla_force_host_platform_device_count=8`,
    set in the file before jax starts, as google-deepmind/simply's multi-device tests do) or
    compares `jax.device_count()` with (`if jax.device_count() != 8: self.skipTest(...)`,
    tpu-inference's collective tests): the count, its line and the text; None when the file
    says neither with a number."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return None
    forced = re.compile(r"xla_force_host_platform_device_count=(\d+)")
    for k, text in enumerate(lines, 1):
        m = forced.search(text)
        if m and not text.lstrip().startswith("#"):
            return int(m.group(1)), k, m.group(0)
    pattern = re.compile(r"(?:device_count|local_device_count)\(\)\s*(?:!=|==|<=|>=|<|>)\s*(\d+)"
                         r"|(\d+)\s*(?:!=|==|<=|>=|<|>)\s*(?:jax\.)?(?:local_)?device_count\(\)")
    for k, text in enumerate(lines, 1):
        m = pattern.search(text.split("#", 1)[0])   # (code, not a comment about it)
        if m:
            return int(m.group(1) or m.group(2)), k, m.group(0)
    return None


DEFAULT_DEVICES = 4   # the CPU devices a Python file runs on without --devices (`default_devices`)


def default_devices(path: str) -> tuple[int, str]:
    """The devices `ringc check FILE.py` runs the file on when --devices is not given, and
    why: the count the file compares `jax.device_count()` with where it asks for one exactly
    (`!= 8`, `== 8`: a test that skips itself otherwise) or at least (`< 8`: that many, at
    least DEFAULT_DEVICES), else DEFAULT_DEVICES."""
    asked = device_count_asked(path)
    if asked is None:
        return DEFAULT_DEVICES, (f"ringc's default for a Python file ({DEFAULT_DEVICES}); --devices N or A..B "
                                 "checks others")
    count, line, text = asked
    if text.startswith("xla_force"):
        return max(count, 2), (f"the file asks JAX for {count} CPU devices (`{text}`, line {line}); "
                               "--devices N or A..B checks others")
    # `!= 8`, `== 8`: exactly that many; `< 8`, `<= 7`: a test that skips below, so at least
    # that many (and DEFAULT_DEVICES); `> 1`, `>= 2`: one that skips above (JAX's single-device
    # pipeline tests), so at most that many
    op = re.search(r"[!=<>]=?", text.replace("()", "")).group(0)
    if not text.startswith(("device_count", "local_device_count")):   # `8 > jax.device_count()`: read it turned round
        op = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op)
    n = {"!=": count, "==": count, "<": max(count, DEFAULT_DEVICES), "<=": max(count + 1, DEFAULT_DEVICES),
         ">": count, ">=": count - 1}[op]
    return max(n, 1), (f"the file compares the device count with {count} (`{text}`, line {line}); "
                       "--devices N or A..B checks others")
