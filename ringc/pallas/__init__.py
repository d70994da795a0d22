"""Check hand-written Pallas TPU kernels as they are (`ringc check kernel.py`, `ringc.check_pallas`).

`importer.py` traces the program and runs the checks, `program.py` turns pallas_calls into
the verifier's events, `interpret.py` holds the rule table per JAX primitive, `compat.py`
the aliases for old Pallas spellings, `script.py` runs scripts and notebooks as published. See docs/pallas-import.md.
"""

from .importer import check_file, check_module, check_pallas, check_script

__all__ = ["check_file", "check_module", "check_pallas", "check_script"]
