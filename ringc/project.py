"""`[tool.ringc]` in pyproject.toml: what `ringc check` with no files checks, and how.

```toml
[tool.ringc]
limits = {events = 100_000_000}      # optional: --limit for the whole run

[[tool.ringc.check]]                 # groups, in order: a file takes the first that matches it
files = ["schedules/*_2d*.yaml"]     # globs, relative to this pyproject.toml
topology = "torus:4x4"

[[tool.ringc.check]]
files = ["schedules/*.yaml", "kernels/**/*.py"]
exclude = ["schedules/experimental_*.yaml"]
devices = "2..4"                     # any `ringc check` option: devices, topology, along,
dma_order = "any"                    # dma_order, invocations, data, seed, strict, params,
                                     # entry, tpu, jobs
```

Options given on the command line win over a group's. The file is found from the current
folder upwards (the nearest pyproject.toml with a `[tool.ringc]` table).
"""

from __future__ import annotations

import glob
import os
import tomllib
from pathlib import Path
from typing import Any, Iterator

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ScheduleError
from .verify.order import DmaOrder

__all__ = ["CheckGroup", "Project", "find_pyproject", "load_project"]


class CheckGroup(BaseModel):
    """Files checked with the same options."""
    model_config = ConfigDict(extra="forbid")
    files: list[str] = Field(min_length=1, description="globs relative to pyproject.toml (`**` recurses)")
    exclude: list[str] = Field(default_factory=list, description="globs left out of `files`")
    devices: str | int | None = None
    topology: str | None = None
    along: str | None = None
    dma_order: DmaOrder | None = None
    invocations: int | None = None
    data: str | None = None
    seed: int | None = None
    strict: bool | None = None
    entry: str | None = None
    tpu: str | None = None
    axis: str | None = None
    stub: list[str] | None = None
    jobs: int | None = None
    params: dict[str, int] = Field(default_factory=dict, description="--param k=v for every file of the group")

    def options(self) -> dict[str, Any]:
        """The `ringc check` options this group sets (argparse's names)."""
        out = {k: v for k, v in self.model_dump(exclude={"files", "exclude", "params"}).items() if v is not None}
        if self.params:
            out["param"] = sorted(self.params.items())
        return out


class Project(BaseModel):
    model_config = ConfigDict(extra="forbid")
    check: list[CheckGroup] = Field(min_length=1)
    limits: dict[str, int] = Field(default_factory=dict)
    root: Path = Path(".")

    def jobs(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(path, options) for every file of every group: the first group that matches a file
        gives its options; paths relative to the current folder where they can be."""
        seen: set[str] = set()
        for group in self.check:
            excluded = {os.path.normpath(p) for pattern in group.exclude
                        for p in glob.glob(str(self.root / pattern), recursive=True)}
            for pattern in group.files:
                matches = sorted(glob.glob(str(self.root / pattern), recursive=True))
                if not matches and not any(c in pattern for c in "*?["):
                    raise ScheduleError(f"[tool.ringc] names `{pattern}`, which does not exist",
                                        file=str(self.root / "pyproject.toml"),
                                        fix="correct the path, or remove it from `files`")
                for p in matches:
                    key = os.path.normpath(p)
                    if key in seen or key in excluded or not os.path.isfile(p):
                        continue
                    seen.add(key)
                    rel = os.path.relpath(p)
                    yield (p if rel.startswith("..") else rel), group.options()


def find_pyproject(start: Path | None = None) -> Path | None:
    """The nearest pyproject.toml with a `[tool.ringc]` table, from `start` upwards."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                if "ringc" in tomllib.loads(candidate.read_text()).get("tool", {}):
                    return candidate
            except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError):
                continue
    return None


def load_project(start: Path | None = None) -> Project:
    """The project's `[tool.ringc]`; ScheduleError (exit 2) naming the key when it is wrong,
    or when there is none."""
    path = find_pyproject(start)
    if path is None:
        raise ScheduleError("no files given, and no pyproject.toml with a [tool.ringc] table here or above",
                            fix="name the files to check (ringc check schedules/*.yaml --devices 4), or add "
                                "[[tool.ringc.check]] groups to pyproject.toml (README, 'Where you work')")
    text = path.read_text()
    table = tomllib.loads(text)["tool"]["ringc"]
    try:
        project = Project.model_validate({**table, "root": path.parent})
    except ValidationError as err:
        e = err.errors(include_url=False)[0]
        where = ".".join(str(c) for c in e["loc"])
        line = next((i for i, ln in enumerate(text.splitlines(), 1) if ln.strip().startswith("[tool.ringc")), None)
        raise ScheduleError(f"[tool.ringc] {where}: {e['msg']}", file=str(path), line=line,
                            fix="see README, 'Where you work', for the keys of [tool.ringc]") from None
    return project
