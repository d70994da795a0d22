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


def with_vmem_limit(text: str, chip, why: str) -> str:
    """`text` with `vmem_limit_mib: ` 3/4 of `chip`'s VMEM before its `params:` line (the
    compiler's default scoped VMEM is a fraction of the chip's; Pallas' vmem_limit_bytes
    raises it), saying `why`."""
    limit = chip.vmem_bytes * 3 // 4 // 2**20
    return text.replace("\nparams:", f"\nvmem_limit_mib: {limit}   # 3/4 of the chip's VMEM ({chip.name}): {why}\nparams:", 1)


# Why a family that sends over every offset along an axis is not generated on v5e (a
# family's optional `unavailable(kind, topo)` says it, and `ringc synth` shows it when no
# family generates the collective).
V5E_OFFSETS = "it sends over offsets of 3 and more along an axis, and v5e routes only powers of 2"

