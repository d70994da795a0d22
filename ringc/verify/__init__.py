"""The verifier: unroll → simulate → order → races → symbolic data flow."""

from .findings import KINDS, Finding, Report

# `check` and `unroll` are functions of the submodules of the same name
# (`from ringc.verify.check import check`): the package does not rebind those names, so
# `import ringc.verify.check as m` is the module.
__all__ = ["Finding", "Report", "KINDS"]
