"""Check hand-written Pallas TPU kernels as they are (`ringc check kernel.py`, `ringc.check_pallas`).

`importer.py` traces the program and runs the checks, `program.py` turns pallas_calls into
the verifier's events, `interpret.py` holds the rule table per JAX primitive, `compat.py`
the aliases for old Pallas spellings. See docs/pallas-import.md.
"""

from .importer import check_module, check_pallas

__all__ = ["check_module", "check_pallas"]
