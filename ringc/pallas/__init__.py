"""Check hand-written Pallas TPU kernels as they are (`ringc check kernel.py`, `ringc.check_pallas`).

`importer.py` traces the program and runs the checks, `program.py` turns pallas_calls into
the verifier's events, `primitives.py` holds the one table of JAX primitives (rules from `interpret.py` inside the
kernels and `importer.py` around them), `compat.py`
the aliases for old Pallas spellings, `script.py` runs scripts and notebooks as published. See docs/pallas-import.md.
"""

__all__ = ["check_file", "check_module", "check_pallas", "check_script"]


def __getattr__(name: str):
    """The entry points, imported on first use: `import ringc.pallas.pytests` (the pytest
    plugin's marker) must not import jax through the importer."""
    if name in __all__:
        from . import importer
        return getattr(importer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
