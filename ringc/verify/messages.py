"""The verifier's finding texts, in one place (as mypy's `message_registry.py`).

Each `Message` is a finding kind (`findings.KINDS`), its severity and a `str.format`
template whose fields the check fills: `at` is always `Program.where` of the event, `what`
its description (`races.describe`). A check makes its finding with
`MESSAGE.finding(event=..., **fields)`, so the wording of every finding of every front end
is here, and a change of wording is one edit (tests/test_snapshot.py holds the texts of a
corpus fixed). `tests/test_coverage.py` checks that every kind has a message and every
message a known kind.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from .events import Event
from .findings import Finding, Severity

__all__ = ["Message", "MESSAGES"]


class Message(NamedTuple):
    kind: str                  # the finding kind (`findings.KINDS`)
    template: str              # `str.format` fields, filled by the check
    severity: Severity = Severity.ERROR  # or WARNING: reported, not failing (`--strict` fails on it)
    # Where the remedy is said in the front end's own words (a YAML key, a Pallas call): the
    # template's `{fix}` for each front end (`Program.front`: "yaml", "pallas").
    fixes: Mapping[str, str] | None = None

    def format(self, **fields: Any) -> str:
        return self.template.format(**fields)

    def finding(self, *, event: Event | None = None, related: list[Event] | None = None,
                trace: list[str] | None = None, device: int | None = None, front: str = "yaml",
                **fields: Any) -> Finding:
        if self.fixes is not None:
            fields.setdefault("fix", self.fixes[front])
        return Finding(self.kind, self.format(**fields), self.severity, event, related or [], trace or [], device)


# -- the semaphore machine (`check.run_findings`, `check.byte_findings`) ----------------------
HANG = Message("hang", "hang at {at}: {what}, but only {arrives} can ever arrive; {reason}")
DMA_NOT_WAITED = Message(
    "dma_not_waited", "{what} at {at} is never waited on its {side} side: {sem} on device {label} ends at {value} "
                      "({total} bytes from this copy)")
UNBALANCED = Message(
    "unbalanced", "{sem} on device {label} ends at {value}, not 0: {what} at {at} is never matched by a wait")
BYTE_MISMATCH = Message(
    "byte_mismatch", "{what} at {at} expects {value} bytes, which is no sum of the DMAs on {sem} of device "
                     "{label}: {listed}; {total} bytes in all. A wait takes whatever bytes have arrived, so check "
                     "the size of the descriptor it waits with", Severity.WARNING)

# -- the program's own rules (`check.dtype_findings`, `parallel_findings`, `megacore_findings`)
DTYPE_MISMATCH = Message(
    "dtype_mismatch", "{what} at {at} copies `{src}` ({src_dtype}) into `{dst}` ({dst_dtype}): a DMA moves bytes "
                      "and cannot convert element types (the TPU compiler refuses it); copy into a {src_dtype} "
                      "buffer and `cast` it into the {dst_dtype} one in VMEM")
PARALLEL_DEPENDENCY = Message(
    "parallel_dependency", "{what} at {at} {how} {dep} at {dep_at}, another iteration of the parallel axis {axes}: "
                           "parallel iterations may run in any order, and a v4/v5p chip splits the axis over its "
                           "two TensorCores, so this dependency breaks; make the axis `arbitrary`, or keep what an "
                           "iteration needs inside it")
MEGACORE_DMA = Message(
    "megacore_dma", "{what} at {at} runs on core 1: {fix}", fixes={
        "yaml": "with `megacore: true` only core 0 may issue DMAs and semaphore operations, or both cores of a chip "
                "send (guard it with `when: core == 0`)",
        "pallas": "a v4/v5p chip splits the `parallel` grid axis over its two TensorCores, so both cores run this "
                  "copy to HBM or another device, or this semaphore use, each on its half of the axis; make the axis "
                  "`arbitrary` (one core runs it all), or say which core does it with pl.core_map over "
                  "pltpu.create_tensorcore_mesh"})
MEGACORE_VMEM_OUTPUT = Message(
    "megacore_vmem", "output `{name}` ({line}) lives in VMEM: {fix}", fixes={
        "yaml": "with `megacore: true` each core writes its own VMEM copy back to HBM, and core 1's copy overwrites "
                "the result; leave the output in HBM (drop `space: vmem`)",
        "pallas": "each TensorCore of a chip that splits the `parallel` grid axis writes its own VMEM copy of it "
                  "back to HBM, and one overwrites the other; give it a BlockSpec indexed by that axis, or leave it "
                  "in HBM (memory_space=pl.ANY)"})
MEGACORE_VMEM_COPY = Message(
    "megacore_vmem", "{what} at {at} moves VMEM (`{buffer}`) between chips: with `megacore: true` remote copies go "
                     "HBM to HBM (the tutorial's advice), since VMEM belongs to one core")

# -- the meaning (`check.check_program`) and the data (`check.check_data`) ---------------------
# with no meaning to check (`core.unwritten_findings`): an output nothing fills
UNWRITTEN_OUTPUT = Message(
    "unwritten_output", "output `{name}` ({line}) is never written on {devices}: no copy or store into it carries a "
                        "value from the kernel's inputs or one it makes, so the caller reads whatever the memory held "
                        "(a kernel body not written yet, a store under a condition that never holds, a copy from "
                        "scratch nothing fills)")
# ... and scratch nothing fills, read into an output filled otherwise (`semantics.unwritten_reads`)
UNWRITTEN_READ = Message(
    "unwritten_read", "scratch `{name}` ({line}) is read at {at}, but nothing ever writes it on {devices}, and "
                      "what is read reaches output `{output}`: that output holds whatever the scratch memory held "
                      "(a receive buffer no copy targets, an accumulator never initialised); write the scratch first, "
                      "or read the buffer the data lands in")
WRONG_RESULT = Message("wrong_result", "device {label}: {where} ends as {got}, but {collective} needs {want}{last}")
# the output's shape is not the collective's (`semantics.mismatches`: no device's values are compared)
WRONG_SHAPE = Message("wrong_result", "the output `{where}` has {got}, but {collective} needs {want}")
LAST_WRITE = "; its last write: {what} at {at}"
NOTHING_WRITES = "; nothing writes it"
# a pallas_call whose blocks and scratch alone are over the VMEM it may use (`importer.vmem_findings`)
VMEM_OVERFLOW = Message(
    "vmem_overflow", "pallas_call `{call}` keeps at least {need} in VMEM ({parts}), over the {limit}: the TPU "
                     "compiler refuses it (CompileTimeScopedVmemOom); {fix}")
OUT_OF_BOUNDS = Message("out_of_bounds", "{message} [{sample}: {shown}]")
# a Pallas kernel's ref indexed out of range (`pallas/importer.py`)
OUT_OF_BOUNDS_CLAMPED = Message("out_of_bounds", "device {label}: {message} (the check goes on with the access "
                                                 "clamped into the ref)")

# Mosaic GPU (`pallas/mgpu.py`): SMEM written by the warpgroup's stores, read by the TMA or wgmma
# (the async proxy) with no `plgpu.commit_smem()` between: it may read what was there before.
UNFENCED_SMEM = Message("race", "device {label}: {reader} at line {line} reads `{region}`, which the warpgroup wrote at line "
                                "{wrote} with no plgpu.commit_smem() between: the TMA and wgmma read SMEM through the "
                                "async proxy, which may not see those stores yet (call plgpu.commit_smem() before it)")

# -- races (`races.find_races`) ---------------------------------------------------------------
RACE = Message("race", "race on {memory}: {one}, while {two}. Nothing orders them: {why}")

# -- routes (`placement.route_findings`) --------------------------------------------------------
BAD_TARGET = Message("bad_target", "{what} at {at} targets device {target}, which does not exist for N={n}: "
                                   "is a `% N` missing?")
SELF_TARGET = Message("self_target", "{what} at {at} sends to its own device; {fix}", Severity.WARNING, fixes={
    "yaml": "use a local copy, or say it is meant with `self_copy: true` on the copy",
    "pallas": "use a local copy (pltpu.make_async_copy), or say it is meant by giving lax.axis_index itself as "
              "the device id"})
UNROUTABLE = Message("unroutable", "{what} at {at} sends to {to} at offset {offsets}, which TPU v5e cannot route: a "
                                   "v5e device only sends to power-of-2 offsets from itself (seed 000, \"Routing\")")
NO_WRAPAROUND = Message(
    "no_wraparound", "{what} at {at} sends to {to} around the end of axis {axis}, but {topology} has no wraparound "
                     "there ({reason}): the send is routed over {hops} hops ({path}) and shares those links with the "
                     "other sends. Correct, but slow; --strict makes this an error", Severity.WARNING)
NOT_NEIGHBOUR = Message(
    "not_neighbour", "{what} at {at} goes to {to}, {hops} hops away on {topology} ({path}); it is routed through "
                     "other devices and competes for their links", Severity.WARNING)

# Every message, by name (the coverage test reads it).
MESSAGES: dict[str, Message] = {name: m for name, m in globals().items() if isinstance(m, Message)}
