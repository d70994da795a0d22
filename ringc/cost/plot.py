"""`ringc cost --plot`: estimate and bound against size, and the efficiency between them."""

from __future__ import annotations

import io
from typing import Sequence

from .model import Estimate
from ..units import size_text


def require_matplotlib():
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("drawing PNGs needs matplotlib: pip install 'ringc[plot]'") from None
    matplotlib.use("Agg")  # files only; never open a window
    import matplotlib.pyplot as plt
    return plt


def png_bytes(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def sweep_png(estimates: Sequence[Estimate], marked: int | None = None) -> bytes:
    plt = require_matplotlib()
    first = estimates[0]
    sizes = [e.bound.volume for e in estimates]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1.4]})
    top.loglog(sizes, [e.seconds for e in estimates], ":", color="tab:blue", lw=1, alpha=0.6)
    fit = [e for e in estimates if e.fits]
    bad = [e for e in estimates if not e.fits]  # the compiler rejects these: marked, not a point of the curve
    top.loglog([e.bound.volume for e in fit], [e.seconds for e in fit], "o-", color="tab:blue",
               label="estimate (simulated)", gid="fits")
    if bad:
        top.loglog([e.bound.volume for e in bad], [e.seconds for e in bad], "x", ms=8, mew=1.8, color="tab:red",
                   label="does not fit VMEM (the compiler rejects it)", gid="misfit")
    top.loglog(sizes, [e.bound.seconds for e in estimates], "--", color="gray", label="lower bound")
    top.set_ylabel("time (s)")
    top.set_title(f"{first.schedule.name} on {first.hw.placement.topo.spec} "
                  f"(N={first.program.n}, {first.hw.chip.name})")
    top.grid(True, which="both", alpha=0.3)
    top.legend()
    bottom.semilogx([e.bound.volume for e in fit], [100 * e.efficiency for e in fit], "o-", color="tab:green",
                    gid="fits")
    if bad:
        bottom.semilogx([e.bound.volume for e in bad], [100 * e.efficiency for e in bad], "x", color="tab:red",
                        gid="misfit")
    bottom.axhline(95, color="gray", lw=0.8, ls=":")
    bottom.set_ylim(0, 105)
    bottom.set_ylabel("efficiency (%)")
    bottom.set_xlabel("collective size V")
    ticks = sizes[:: max(1, len(sizes) // 8)]
    bottom.set_xticks(ticks, [size_text(s) for s in ticks], rotation=30)
    if marked is not None:
        for ax in (top, bottom):
            ax.axvline(marked, color="tab:red", lw=0.8, alpha=0.6)
    data = png_bytes(fig)
    plt.close(fig)
    return data
