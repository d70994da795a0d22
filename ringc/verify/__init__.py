"""The verifier: unroll → simulate → order → races → symbolic data flow."""

from .check import check, check_program
from .findings import KINDS, Finding, Report
from .unroll import unroll

__all__ = ["check", "check_program", "unroll", "Finding", "Report", "KINDS"]
