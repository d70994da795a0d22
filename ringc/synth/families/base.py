"""What every family module shares: the candidate it yields, and library schedules as
templates (`library_text`, `with_params`). The pieces of YAML that the generated families
write alike are in `templates.py`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...cost.rank import library_dir


@dataclass(frozen=True)
class Candidate:
    family: str                 # the generator's FAMILY
    name: str                   # the schedule's `name:`
    text: str                   # the schedule, YAML
    what: str                   # one line: what it is
    params: dict = field(default_factory=dict, hash=False)  # the structural params chosen
    # (YAML, topology): a schedule on another topology whose timed run is this one's (the
    # same events on devices relabeled, every transfer over one link either way), timed in its
    # place against the slice's bound: on a ring it is timed on the translation quotient, where
    # timing every chip of a slice without wraparound would be past ringc's limits.
    priced_as: tuple[str, str] | None = None

    @property
    def label(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.name}" + (f" ({shown})" if shown else "")


def library_text(name: str) -> str:
    return (library_dir() / f"{name}.yaml").read_text()


def with_params(text: str, name: str, params: dict[str, int]) -> str:
    """A library schedule's text renamed to `name`, its `params:` entries in `params` replaced
    (the others kept): the template is the library file itself, so its comments stay."""
    text = re.sub(r"(?m)^name:.*$", f"name: {name}", text, count=1)
    m = re.search(r"(?m)^params:\s*\{(.*)\}\s*$", text)
    if m is None:
        raise ValueError(f"{name}: no one-line `params:` to set")
    old = dict(kv.split(":") for kv in m.group(1).split(","))
    new = {k.strip(): v.strip() for k, v in old.items()}
    new.update({k: str(v) for k, v in params.items()})
    line = "params: {" + ", ".join(f"{k}: {v}" for k, v in new.items()) + "}"
    return text[:m.start()] + line + text[m.end():]


def vmem_limit_mib(chip) -> int:
    """The `vmem_limit_mib` a generated schedule asks for: the whole of a core's VMEM. The
    compiler's default scoped VMEM is a fraction of it, and Pallas' vmem_limit_bytes raises
    it up to the core's VMEM: libtpu compiles 61.9 MiB of scoped VMEM under a limit of 64 MiB
    on v5p, and 120 MiB under 128 MiB on v5e and v6e (`ringc synth` compiles every winner)."""
    return chip.vmem_bytes // 2**20


def with_vmem_limit(text: str, chip, why: str) -> str:
    """`text` with `vmem_limit_mib: ` the core's VMEM (`vmem_limit_mib`) before its `params:`
    line, saying `why`."""
    return text.replace("\nparams:", f"\nvmem_limit_mib: {vmem_limit_mib(chip)}   # the core's VMEM ({chip.name}): {why}\nparams:", 1)


# Why a family that sends over every offset along an axis is not generated on v5e (a
# family's optional `unavailable(kind, topo)` says it, and `ringc synth` shows it when no
# family generates the collective).
V5E_OFFSETS = "it sends over offsets of 3 and more along an axis, and v5e routes only powers of 2"

