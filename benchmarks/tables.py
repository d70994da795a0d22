"""How the benchmarks print a table: aligned columns, or a markdown table for the docs."""

from __future__ import annotations

from typing import Sequence


def print_table(head: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool = False) -> None:
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
        return
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
