"""The `ringc` command line: check, emit, run, compile, schema.

Exit codes: 0 success, 1 a check or run failed, 2 bad input (the message names the file,
the line and the fix), 3 an internal error (a bug in ringc, to be reported). Bad input
never prints a traceback; set RINGC_DEBUG=1 to see one for an internal error. Every
argument is range-checked while it is parsed, against the limits of `ringc.limits`
(raised with `--limit NAME=VALUE`, read before the other arguments).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from . import limits, progress, topology
from .output import FORMATS, Output, ringc_version
from .errors import ScheduleError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
# `--tpu`'s generations, the default first, as `ringc.pallas.tpu.GENERATIONS` has them (a test
# holds the two together; importing that module here would import jax at every start).
TPU_CHOICES = "v5e|v5p|v4|v6e|v7x"


def _integer(text: str, what: str) -> int:
    """An integer argument, read without Python's slow path for thousands of digits."""
    t = text.strip().replace("_", "")
    if not t.lstrip("+-").isascii() or not t.lstrip("+-").isdigit():
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    if len(t.lstrip("+-")) > 30:
        raise argparse.ArgumentTypeError(f"{text[:20]!r}...: an integer outside the 64-bit range")
    value = int(t)
    if not limits.INT64_MIN <= value <= limits.INT64_MAX:
        raise argparse.ArgumentTypeError(f"{text!r}: an integer outside the 64-bit range")
    return value


def _within(name: str, amount: int, what: str) -> None:
    """An argument past a limit (`ringc.limits`): refused while parsing, before any work."""
    try:
        limits.check(name, amount, what)
    except ScheduleError as e:
        raise argparse.ArgumentTypeError(f"{e.message} ({e.fix})") from None


def _devices(text: str) -> range:
    """`8` or `2..8` (inclusive), at most the `devices` limit."""
    lo_text, sep, hi_text = text.partition("..")
    lo = _integer(lo_text, "N or A..B (e.g. 4 or 2..8)")  # its message names the form and the text
    hi = _integer(hi_text, "N or A..B (e.g. 4 or 2..8)") if sep else lo
    if lo < 1 or hi < lo:
        raise argparse.ArgumentTypeError(f"device counts must satisfy 1 <= A <= B, got {text!r}")
    _within("devices", hi, "the device count")
    return range(lo, hi + 1)


def _positive(text: str) -> int:
    value = _integer(text, "a positive integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _device_count(text: str) -> int:
    value = _positive(text)
    _within("devices", value, "the device count")
    return value


def _invocations(text: str) -> int:
    value = _positive(text)
    _within("invocations", value, "--invocations")
    return value


def _seed(text: str) -> int:
    value = _integer(text, "a seed between 0 and 2**32 - 1")
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"expected a seed between 0 and 2**32 - 1, got {text!r}")
    return value


def _topology(text: str) -> str:
    try:
        topology.parse(text, 1 if topology.sized_by_devices(text) else None)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _mesh_shape(text: str) -> tuple[int, ...]:
    parts = text.lower().split("x")
    if not all(p.isascii() and p.isdigit() and len(p) < 19 and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected a mesh shape like 2x4, got {text!r}")
    shape = tuple(int(p) for p in parts)
    _within("devices", math.prod(shape), f"the mesh {text}'s device count")
    return shape


def _param(text: str) -> tuple[str, Any]:
    """`k=v`: an integer; for a Python kernel's entry function also a word (`mode=one_shot`;
    `true` and `false` are booleans, `None` is None), a float, or a Python literal dict, list or
    tuple (`blockwise_kwargs={'query_chunk_size': 128}`), which a YAML schedule refuses (`_load`)."""
    import ast
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected name=integer, got {text!r}")
    try:
        return name.strip(), _integer(value, "an integer")
    except argparse.ArgumentTypeError as e:
        word = value.strip()
        if word in ("None", "none"):
            return name.strip(), None
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", word):
            return name.strip(), {"true": True, "false": False}.get(word.lower(), word)
        if word[:1] in ("{", "[", "(") or re.fullmatch(r"[-+]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][-+]?\d+)", word):
            try:
                return name.strip(), ast.literal_eval(word)
            except (ValueError, SyntaxError, MemoryError, RecursionError) as bad:
                raise argparse.ArgumentTypeError(f"--param {text!r}: not a Python literal ({bad})") from None
        raise argparse.ArgumentTypeError(f"expected name=integer, got {text!r}: {e}") from None


def _target(text: str) -> str:
    from .compile import EXAMPLE_TARGETS, TARGET_SYNTAX
    from .compile.gpu import GPU_TARGETS
    if text in GPU_TARGETS:  # a Mosaic GPU kernel file compiled for this GPU (--devices N of them)
        return text
    m = TARGET_SYNTAX.match(text)
    if not m or not text.isascii():
        raise argparse.ArgumentTypeError(f"expected GENERATION:TOPOLOGY such as {', '.join(EXAMPLE_TARGETS)}, "
                                         f"or a GPU ({', '.join(GPU_TARGETS)}), got {text!r}")
    dims = m["shape"].split("x")
    _within("devices", math.prod(int(d) if len(d) < 19 else 10**19 for d in dims),
            f"the target {text}'s chip count")
    return text


def _limit(text: str) -> tuple[str, int]:
    try:
        return limits.parse_override(text)
    except ScheduleError as e:
        raise argparse.ArgumentTypeError(f"{e.message} ({e.fix})") from None


def _add_limit(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--limit", type=_limit, action="append", default=[], metavar="NAME=VALUE",
                    help="raise (or lower) one of ringc's input limits for this run; README.md lists them")


def _limit_overrides(argv: list[str]) -> dict[str, int]:
    """The `--limit` values, read before the full parse: argument types check limits."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--limit", action="append", default=[])
    known, _ = pre.parse_known_args([a for a in argv if a != "--"])
    out = {}
    for text in known.limit:
        name, value = limits.parse_override(text)
        out[name] = value
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ringc", description="Verify ring schedules and emit Pallas TPU kernels.")
    p.add_argument("--version", action="version", version=f"ringc {ringc_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    def add_params(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--param", type=_param, action="append", default=[], metavar="K=V",
                        help="override a schedule parameter, or pass a keyword to a Python kernel's entry function: "
                             "an integer, a word, None, a float or a Python literal (repeatable)")
        _add_limit(sp)

    c = sub.add_parser("check", help="verify schedules for one or more device counts")
    c.add_argument("files", nargs="*", metavar="FILE",
                   help="schedules (.yaml) and Pallas code (.py, .md, .ipynb); none: the files and options of "
                        "[tool.ringc] in the nearest pyproject.toml (see README, 'Where you work')")
    c.add_argument("--devices", type=_devices, metavar="N|A..B",
                   help="devices on the ring (required with the default `--topology ring`; with a sized "
                        "topology, optional and its total device count)")
    c.add_argument("--topology", type=_topology, default=topology.DEFAULT,
                   help="ring (default), ring:N, line:N, torus:AxB[xC], mesh:AxB[xC] (no wraparound), or a TPU "
                        "slice: v4:AxBxC, v5p:AxBxC, v5e:AxB, v6e:AxB (wraparound per generation), or h100:N (N <= 8 GPUs "
                        "of an HGX H100 node, all-to-all through NVSwitch)")
    c.add_argument("--along", metavar="AXES",
                   help="topology axes the schedule's axes run along, e.g. y or x,y (default: axes of the same "
                        "name, else the first ones; the axes that have chips where one of those has a single "
                        "chip: x,z on v5p:2x1x2)")
    c.add_argument("--strict", action="store_true", help="treat warnings (e.g. a missing wraparound) as failures")
    c.add_argument("--invocations", type=_invocations, default=1, metavar="K",
                   help="check K back-to-back calls of the kernel (barrier reuse)")
    c.add_argument("--format", choices=FORMATS, default="text",
                   help="text (default); json: one document for the run; sarif: SARIF 2.1.0 (GitHub code "
                        "scanning); github: GitHub Actions annotations")
    c.add_argument("-q", "--quiet", action="store_true", help="print only what failed, and the closing summary")
    c.add_argument("--explain", action="store_true", help="print a concrete interleaving for each finding")
    from .verify.order import DmaOrder
    c.add_argument("--dma-order", choices=tuple(DmaOrder), default=DmaOrder.ANY.value,
                   help="DMA ordering model: `any` (default, safe: DMAs on one link may land out of order) or "
                        "`in-order` (per source/destination pair FIFO); see docs/verification.md")
    c.add_argument("--test", metavar="PATTERN", action="append", help="a test module: run only the tests whose name "
                   "contains PATTERN (or matches it as a glob, e.g. 'AllGather*test_small'); repeatable (a test any of "
                   "them names runs); the others are not run, and the verdicts say so")
    c.add_argument("--skip-test", metavar="PATTERN", action="append", help="a test module: do not run the tests "
                   "whose name contains PATTERN (or matches it as a glob), e.g. one that allocates more than the "
                   "machine has; repeatable, and with --test")
    c.add_argument("--entry", metavar="NAME", help="a Python module of functions: the function to call (default: "
                   "every public one taking an axis name): a global function taking a mesh, a per-shard launcher (run "
                   "under shard_map) or a factory of closures; see docs/pallas-import.md")
    c.add_argument("--arg", metavar="NAME=DTYPE[DIMS]@SPEC[=VALUE]", action="append", default=[], type=_array_arg,
                   help="an array argument of --entry, e.g. x=float32[8*N,128]@x (dims in N; SPEC: the "
                        "PartitionSpec's axis names, empty for unsharded, e.g. @,x); =VALUE gives its global values "
                        "(default zeros): a numpy expression in N, e.g. 'sizes=int32[2*N]@=np.full(2*N, 8)', or a "
                        ".npy file")
    c.add_argument("--tpu", metavar=TPU_CHOICES,
                   help="a Python kernel or script: the TPU generation its devices answer as while ringc runs its "
                        "code (device_kind, coords, get_tpu_info; default v5e); see docs/pallas-import.md")
    c.add_argument("--collective", metavar="KIND",
                   help="a Python kernel or script: the lax collective a kernel call means, when no later lax call "
                        "on its input names it (e.g. all_gather, psum_scatter, psum; see the README table)")
    c.add_argument("--gpu", metavar="h100",
                   help="a Python Mosaic GPU kernel or script: the GPU its devices answer as while ringc runs its code "
                        "(core_count, compute_capability; default h100 when the file imports "
                        "jax.experimental.pallas.mosaic_gpu); see docs/pallas-import.md (Mosaic GPU)")
    c.add_argument("--axis", metavar="NAME", help="a Python module of functions: the mesh axis the collective runs "
                   "along (default: the default of the function's axis_name parameter, else x)")
    c.add_argument("--mesh", metavar="NAME=SIZE,...", type=_mesh_axes_arg,
                   help="a Python module of functions: the mesh's axes, sizes in N, e.g. data=1,model=N "
                        "(default: the ring axis alone)")
    c.add_argument("--stub", metavar="MODULE", action="append", default=[],
                   help="a Python file: make `import MODULE` (and its submodules) succeed with a stub, for a "
                        "package the kernel does not need (repeatable); the verdict states it")
    c.add_argument("--show", metavar="OUT.png",
                   help="draw the findings of the first failing verdict on the simulated timeline: the first in "
                        "OUT.png, finding K in OUT-K.png (K as --explain and --format json number them, from 1)")
    c.add_argument("--show-finding", type=_positive, metavar="K",
                   help="with --show: draw only finding K of the verdict, in OUT.png")
    c.add_argument("--data", metavar="random:K|FILE.json",
                   help="a schedule with runtime data (`data:`): check K samples drawn from its declared "
                        "constraints, or the samples of a JSON file; a verdict rests on these samples only")
    c.add_argument("--seed", type=_seed, default=0, help="the seed of --data random:K (default 0)")
    c.add_argument("--jobs", type=_positive, metavar="J",
                   help="processes a large check may use (default: 2 on a machine of 2 cores or more; 1 runs "
                        "everything in this process); see docs/verification.md")
    add_params(c)

    e = sub.add_parser("emit", help="write the Pallas TPU kernel module for a schedule")
    e.add_argument("file", metavar="FILE", help="the schedule (.yaml)")
    e.add_argument("-o", "--output", metavar="OUT.py", help="write here instead of stdout")
    e.add_argument("--devices", type=_devices, metavar="N|A..B",
                   help="device counts to check at before emitting (default: rings of 2, 3, 4; tori "
                        "2x..x2 and 3x2..x2 for a schedule over several axes)")
    e.add_argument("--unchecked", action="store_true",
                   help="emit without checking first (a schedule that fails `ringc check`, on purpose)")
    e.add_argument("--target", choices=("tpu", "mgpu"), default="tpu",
                   help="tpu (default): a Pallas TPU module; mgpu: a Pallas Mosaic GPU module for Hopper GPUs "
                        "(README: From a schedule to a Mosaic GPU kernel)")
    add_params(e)

    r = sub.add_parser("run", help="run the emitted kernel in TPU interpret mode against lax")
    r.add_argument("file", metavar="FILE", help="the schedule (.yaml)")
    r.add_argument("--devices", type=_devices, metavar="N|A..B", help="ring sizes (or give --mesh)")
    r.add_argument("--mesh", type=_mesh_shape, metavar="AxB[xC]",
                   help="run on a multi-axis mesh of this shape (needed for a schedule over several axes)")
    r.add_argument("--along", metavar="AXES", help="mesh axes the schedule's axes run along, e.g. y")
    r.add_argument("--seed", type=_seed, default=0, help="seed of the random inputs (and runtime data sample)")
    r.add_argument("--target", choices=("tpu-interpret", "mgpu"), default="tpu-interpret",
                   help="tpu-interpret (default): TPU interpret mode on CPU devices; mgpu: the Mosaic GPU module on "
                        "this machine's Hopper GPUs (on one: its block-local parts; on --devices N: the collective)")
    add_params(r)

    k = sub.add_parser("compile", help="compile the emitted kernel with the real TPU compiler, or a Mosaic GPU "
                                       "kernel file for H100 (no TPU or GPU needed)")
    k.add_argument("files", nargs="+", metavar="FILE",
                   help="schedules (.yaml) for TPU targets; Python Mosaic GPU kernel files (.py) for --target h100")
    k.add_argument("--target", type=_target, action="append", required=True, metavar="GEN:TOPOLOGY|h100",
                   help="TPU slice to compile for, e.g. v5e:2x2, v5p:2x2x1, v4:2x2x1, v6e:2x2 (repeatable); "
                        "the ring runs over all its devices. h100: a Python Mosaic GPU file for --devices H100s "
                        '(needs pip install "ringc[gpu]"); docs/compile.md (H100)')
    k.add_argument("--devices", type=_device_count, metavar="N",
                   help="--target h100: the GPUs the file's kernels run on (default 8, an HGX H100 board)")
    k.add_argument("--lower-only", action="store_true",
                   help="--target h100: lower to StableHLO for CUDA and report each kernel's shared memory, without "
                        "compiling (needs no CUDA plugin)")
    k.add_argument("--entry", metavar="NAME", help="--target h100, a module of functions: the function to call, as "
                   "for ringc check (docs/pallas-import.md)")
    k.add_argument("--arg", metavar="NAME=DTYPE[DIMS]@SPEC[=VALUE]", action="append", default=[], type=_array_arg,
                   help="--target h100: an array argument of --entry, as for ringc check, e.g. x=float32[8*N,128]@x")
    k.add_argument("--stub", metavar="MODULE", action="append", default=[],
                   help="--target h100: stub `import MODULE` for a package the kernel does not need, as for "
                        "ringc check")
    k.add_argument("--format", choices=("text", "json"), default="text", help="json: one document for the run")
    k.add_argument("--verbose", action="store_true", help="also print the compiler's own message on failure")
    add_params(k)

    _add_limit(sub.add_parser("schema", help="print the schedule format's JSON Schema"))
    _cost_parser(sub, add_params)
    _tune_parser(sub, add_params)
    _show_parser(sub, add_params)
    _synth_parser(sub)
    return p


def _array_arg(text: str):
    from .pallas.entries import parse_arg
    try:
        return parse_arg(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _mesh_axes_arg(text: str):
    from .pallas.entries import parse_mesh
    try:
        return parse_mesh(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _load(path: str, params: list[tuple[str, int]]):
    from .ir.loader import load
    if path.endswith(".py"):  # (`check` and `compile --target h100` route Python files before this)
        raise ScheduleError("a Python file, where this command takes a schedule (.yaml)", file=path,
                            fix="check a hand-written Pallas TPU kernel with `ringc check FILE.py`, compile a "
                                "Mosaic GPU one with `ringc compile --target h100 FILE.py`; `emit`, `run`, `show`, "
                                "`cost` and `tune` work on YAML schedules")
    for name, value in params:
        if type(value) is not int:
            raise ScheduleError(f"--param {name}={value}: a schedule's parameters are integers", file=path,
                                fix=f"pass --param {name}=INTEGER")
    return load(path, dict(params))


def _check_kernel(args: argparse.Namespace, path: str):
    """`ringc check kernel.py`: a hand-written Pallas module (see docs/pallas-import.md); its
    reports, one by one. Over a range (`--devices 2..5`) a size that is refused yields its
    ScheduleError, naming the N, in place of its reports, and the next size is checked."""
    from .run import ensure_host_devices
    from .pallas.asked import default_devices
    ring = topology.sized_by_devices(args.topology)
    sizes, defaulted = args.devices, None   # defaulted: (N, why) where --devices is not given on the default ring
    if ring and sizes is None:
        defaulted = default_devices(path)
        sizes = [defaulted[0]]
    try:  # a sized topology without --devices: a script runs on the slice's devices
        size = 1 if sizes else topology.parse(args.topology).size
    except ValueError:
        size = 1
    ensure_host_devices(max(sizes or [size]))  # scalar-prefetch inputs are sampled on CPU devices
    from .pallas import check_file
    from .verify.core import apply_strict
    sizes = sizes or [None]
    for n in sizes:
        try:  # (a script's verdicts come as each kernel call is checked: printed then, not at the end)
            for report in check_file(path, n, invocations=args.invocations, params=dict(args.param),
                                     topology=None if ring else args.topology, along=args.along,
                                     dma_order=args.dma_order, entry=args.entry, args=args.arg, tpu=args.tpu,
                                     axis=args.axis, mesh=args.mesh, stubs=tuple(args.stub),
                                     collective=getattr(args, "collective", None),
                                     tests=tuple(args.test) if getattr(args, "test", None) else None,
                                     skip_tests=tuple(getattr(args, "skip_test", None) or ()),
                                     iterate=True):
                if defaulted and getattr(report, "assumptions", None) is not None:
                    report.assumptions.insert(0, f"--devices {n}, not given: {defaulted[1]}")
                yield apply_strict(report, args.strict)
        except ScheduleError as e:
            if len(sizes) == 1:
                raise
            yield _at_size(e, n)  # a range: this size refused, the next still checked


def _at_size(e: ScheduleError, n: int) -> ScheduleError:
    """A refusal of one size of a `--devices A..B` range, its message naming the N."""
    named = copy.copy(e)
    named.message = f"N={n}: {e.message}"
    named.args = (named.message,)
    return named


def cmd_check(args: argparse.Namespace) -> int:
    """Every file gets its verdicts (a bad one is reported and the next one checked); the
    exit code is the worst (`ringc.output`). No files: the project's `[tool.ringc]`."""
    out = Output(args.format, "check", quiet=args.quiet, explain=args.explain)
    jobs = [(path, args) for path in args.files] if args.files else _project_jobs(args)
    shown = None  # (schedule, report) to draw with --show: the first that fails, else the first
    refused = False
    if args.show and args.data:
        raise ScheduleError("--show draws one timed run; with --data every sample is its own run, so it is not "
                            "drawn", file=jobs[0][0], fix="drop --show, or --data")
    if getattr(args, "collective", None) is not None:
        from .collectives import COLLECTIVES
        if args.collective not in COLLECTIVES:
            raise ScheduleError(f"--collective {args.collective}: not a collective ringc knows", file=jobs[0][0],
                                fix=f"one of {', '.join(sorted(COLLECTIVES))}")
    if getattr(args, "gpu", None) is not None:
        from .pallas.tpu import GPUS
        if args.gpu not in GPUS:
            raise ScheduleError(f"--gpu {args.gpu}: ringc answers as {', '.join(GPUS)}", file=jobs[0][0],
                                fix="pass --gpu h100")
        if args.tpu is not None:
            raise ScheduleError("--tpu and --gpu both name the hardware the devices answer as", file=jobs[0][0],
                                fix="pass one of them")
        args.tpu = args.gpu
    if args.tpu is not None:  # checked here, not by argparse, to say it in one line
        from .pallas.tpu import generation
        try:
            generation(args.tpu)
        except ValueError as e:
            raise ScheduleError(f"--tpu {args.tpu}: {e}", file=jobs[0][0]) from None
    if args.show:
        _output_path(args.show, *(path for path, _ in jobs))  # refused before the work
    elif args.show_finding is not None:
        raise ScheduleError("--show-finding K chooses the finding --show draws", file=jobs[0][0] if jobs else
                            "<command line>", fix="add --show OUT.png")
    with progress.bar(len(jobs), "checking", unit="file") as bar:  # ringc/progress.py
        for path, job in jobs:
            bar.describe(f"checking {path}")
            try:
                if path.endswith((".py", ".md", ".ipynb")):
                    for report in _check_kernel(job, path):
                        with bar.paused():
                            if isinstance(report, ScheduleError):  # one size of a range, refused
                                refused = True
                                out.refused(report)
                            else:
                                out.report(report)
                    continue
                for sched, report in _check_schedule(job, path):
                    with bar.paused():
                        out.report(report)
                    if shown is None or (shown[1].ok and not report.ok):
                        shown = (sched, report)
            except ScheduleError as e:
                refused = True
                with bar.paused():
                    out.refused(e)
            finally:
                bar.update()
    if args.show and refused:  # bad input writes nothing: no picture of the part that ran
        print("ringc: --show: nothing drawn: bad input was refused (above); fix it and run again",
              file=sys.stderr)
    elif args.show and shown:
        _show_finding(args, *shown)
    elif args.show:
        print("ringc: --show: nothing drawn: it draws a schedule's (.yaml) timed run, and no schedule was checked; "
              "a Pallas kernel's findings show their run with --explain", file=sys.stderr)
    return out.close()


def _check_schedule(args: argparse.Namespace, path: str):
    """(schedule, report) for each size of one schedule file."""
    from .verify.check import check
    if args.entry or args.arg or args.axis or args.mesh or args.stub:
        raise ScheduleError("--entry, --arg, --axis, --mesh and --stub say how to call and import a Python "
                            "file; a schedule has nothing of that", file=path,
                            fix="drop them (a schedule's sizes are --param k=v)")
    if getattr(args, "gpu", None):
        raise ScheduleError("--gpu names the GPU a Python kernel's code asks about; a schedule asks nothing",
                            file=path, fix="drop --gpu (an H100 node for a schedule is --topology h100:8)")
    if args.tpu:
        raise ScheduleError("--tpu names the TPU a Python kernel's code asks about; a schedule asks nothing",
                            file=path, fix="drop --tpu (a schedule's slice is --topology, e.g. v5p:2x2x2)")
    for flag in ("test", "skip_test"):
        if getattr(args, flag, None):
            name = "--" + flag.replace("_", "-")
            raise ScheduleError(f"{name} names the tests of a Python test module to run; a schedule has none",
                                file=path, fix=f"drop {name}")
    if getattr(args, "collective", None):
        raise ScheduleError("--collective names a Python kernel's meaning; a schedule states its own",
                            file=path, fix="drop --collective (the schedule's `collective:` is what it checks)")
    sched = _load(path, args.param)
    if args.devices is None and topology.sized_by_devices(args.topology):
        raise ScheduleError("--devices is required with the default topology `ring`", file=path,
                            fix="pass --devices N, or a sized topology such as --topology torus:4x4")
    for n in args.devices or [None]:
        data, how = _data_samples(args, sched, n)
        yield sched, check(sched, n, topology=args.topology, invocations=args.invocations, along=args.along,
                           strict=args.strict, dma_order=args.dma_order, data=data, data_how=how, jobs=args.jobs)


def _project_jobs(args: argparse.Namespace) -> list[tuple[str, argparse.Namespace]]:
    """`ringc check` with no files: each file of `[tool.ringc]` with its group's options
    (`ringc.project`); options given on the command line apply to every file."""
    from .project import load_project
    project = load_project()
    pyproject = str(project.root / "pyproject.toml")
    for name, value in project.limits.items():
        try:
            limits.apply(*limits.parse_override(f"{name}={value}"))
        except ScheduleError as e:
            raise ScheduleError(f"[tool.ringc] limits: {e.message}", file=pyproject, fix=e.fix) from None
    defaults = vars(_parser().parse_args(["check"]))
    given = {k for k, v in vars(args).items() if v != defaults.get(k, v)}
    parsers = {"devices": lambda v: _devices(str(v)), "topology": _topology,
               "invocations": lambda v: _invocations(str(v)), "seed": lambda v: _seed(str(v))}
    jobs = []
    for path, options in project.jobs():
        job = argparse.Namespace(**vars(args))
        for key, value in options.items():
            if key in given:
                continue
            try:
                setattr(job, key, parsers.get(key, lambda v: v)(value))
            except argparse.ArgumentTypeError as e:
                raise ScheduleError(f"[tool.ringc] {key} = {value!r}: {e}", file=pyproject,
                                    fix="see `ringc check --help` for the option's values") from None
        jobs.append((path, job))
    if not jobs:
        raise ScheduleError("[tool.ringc] matches no file", file=pyproject, fix="check the globs in `files`")
    return jobs


def _data_samples(args: argparse.Namespace, sched, n: int | None) -> tuple[list | None, str]:
    """The runtime data samples `--data` gives for N devices (None without `--data`)."""
    if args.data is None:
        return None, ""
    if not sched.data:
        raise ScheduleError(f"`{sched.name}` declares no runtime data, so --data has nothing to give",
                            file=sched.file, fix="drop --data")
    from .testing import samples_for
    from .verify.check import resolve_topology
    placement = resolve_topology(sched, n, args.topology, args.along)
    try:
        return samples_for(args.data, sched, math.prod(placement.sizes.values()), args.seed, placement.sizes)
    except ScheduleError as e:
        if not e.file:  # a bad --data spec: name the schedule it was given for, like every flag error
            e.file = sched.file
        raise


def _write_atomically(path: str, text: str | bytes) -> None:
    """Write all or nothing: a failed write leaves no partial file behind. `path` is a
    checked `_output_path`: a regular file or absent, symlinks already followed. The
    temporary file sits next to it under a fixed prefix (never the schedule's name) and
    replaces it in one rename; a replaced file keeps its permissions."""
    target = Path(path)
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask  # mkstemp's 0600 would surprise: behave like open()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".ringc-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _output_path(path: str, *inputs: str) -> str:
    """Where `-o` (or --plot, --show) writes, checked before any work: through a symlink
    to its target (the link stays), and only to a regular file or a new one, never to a
    directory, a device, or one of the input schedules."""
    file = inputs[0] if inputs else None
    real = Path(os.path.realpath(path))
    if real.is_dir() or path.endswith(os.sep):
        raise ScheduleError(f"output {path!r} is a directory", file=file, fix="give a file name, e.g. -o out/kernel.py")
    if not real.parent.is_dir():
        raise ScheduleError(f"output directory {str(real.parent)!r} does not exist",
                            file=file, fix="create it first or choose another output path")
    if real.exists():
        if not real.is_file():
            raise ScheduleError(f"output {path!r} is not a regular file (a device, pipe or socket)", file=file,
                                fix="write to a regular file; to print, leave out -o")
        for given in inputs:
            if os.path.exists(given) and os.path.samefile(given, real):
                raise ScheduleError(f"output {path!r} is the input schedule {given!r}", file=file,
                                    fix="choose another output path: writing there would replace the schedule")
    return str(real)


def cmd_emit(args: argparse.Namespace) -> int:
    from .codegen import emit, emit_mgpu
    out = _output_path(args.output, args.file) if args.output else None
    sched = _load(args.file, args.param)
    if args.target == "mgpu":
        from .codegen.mgpu import refuse_early
        refuse_early(sched)  # what the GPU target cannot express, before checking
    checked = None
    if not args.unchecked:
        from .jaxapi import check_before_emit, refusal
        reports, refused, checked = check_before_emit(sched, args.devices)
        for e in refused:
            print(f"note: not checked there: {e.message}", file=sys.stderr)
        if not all(r.ok for r in reports):
            err = refusal(sched, reports)
            print(str(err), file=sys.stderr)
            return EXIT_FAILED
    text = (emit_mgpu if args.target == "mgpu" else emit)(sched, checked)
    if out:
        _write_atomically(out, text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    import math
    if args.target == "mgpu":
        return _run_mgpu(args)
    from .run import ensure_host_devices
    if (args.devices is None) == (args.mesh is None):
        raise ScheduleError("give either --devices (a ring) or --mesh (a multi-axis mesh)", file=args.file,
                            fix="e.g. --devices 2..8, or --mesh 2x4")
    sizes = args.devices or [math.prod(args.mesh)]
    limits.check("run_devices", max(sizes), "the devices to run in interpret mode", file=args.file,
                 fix="verify large rings with `ringc check`; run small ones")
    ensure_host_devices(max(sizes))
    from .run import mesh_layout, run_schedule
    from .verify.core import run_findings
    from .verify.simulate import maximal_run
    from .verify.unroll import traced_indices, unroll
    sched = _load(args.file, args.param)
    ok = True
    for n in sizes:
        # Interpret mode cannot detect a deadlock: it would block forever. Refuse first.
        shape = args.mesh or (n,)
        axis_sizes = mesh_layout(sched, shape, args.along)[1]
        traced_indices(sched, axis_sizes)   # a static slice past its buffer fails the kernel's trace
        data = None
        if sched.data:  # runtime data: the sample run_schedule draws too (ringc.testing.heaviest_sample)
            from .data import sample_text
            from .testing import heaviest_sample
            data = heaviest_sample(sched, n, args.seed, axis_sizes)
            print(f"{args.file} N={n}: runtime data (seed {args.seed}): "
                  + sample_text(data, [k for k, d in sched.data.items() if d.source is None]))
        program = unroll(sched, sizes=axis_sizes, data=data)
        hangs = [f for f in run_findings(program, maximal_run(program)) if f.kind == "hang"]
        if hangs:
            print(f"{args.file} N={n}: not run, it would hang (see `ringc check`):\n  "
                  + hangs[0].to_text(program))
            ok = False
            continue
        res = run_schedule(sched, n, params=dict(args.param), seed=args.seed, mesh_shape=shape, along=args.along,
                           data=data)
        races = {None: "not checked", False: "no races", True: "RACES FOUND"}[res.races_found]
        status = "ok" if res.ok else "FAILED"
        where = f" on a {'x'.join(map(str, shape))} mesh" if args.mesh else ""
        print(f"{args.file} N={program.n}{where}: {status}  max|kernel - lax| = {res.max_abs_err:.3g} "
              f"(tolerance {res.tolerance:.3g})  race detector: {races}  time {res.seconds:.2f}s")
        ok &= res.ok
    return EXIT_OK if ok else EXIT_FAILED


def _run_mgpu(args: argparse.Namespace) -> int:
    """`ringc run FILE --target mgpu`: the schedule's Mosaic GPU module on this machine's Hopper
    GPUs. One GPU runs the module's block-local parts for their values (`mgpu_selftest`); a
    collective needs N GPUs, and runs against lax where there are as many."""
    from .compile.gpu import hopper_gpus
    gpus = hopper_gpus()
    count = len(gpus)
    fix = ("check the schedule with `ringc check`, and compile its Mosaic GPU module with `ringc emit --target mgpu "
           "-o k.py` and `ringc compile k.py --target h100`")
    if count == 0:
        raise ScheduleError("ringc run --target mgpu runs the Mosaic GPU module on Hopper GPUs; this machine has 0",
                            file=args.file, fix=fix)
    if args.mesh is not None:
        raise ScheduleError("--mesh: the Mosaic GPU module runs on a one-axis mesh of GPUs", file=args.file,
                            fix="give --devices N")
    from .codegen.mgpu_selftest import run_parts
    from .jaxapi import import_kernel
    from .run import run_schedule_gpu
    sched = _load(args.file, args.param)
    module = import_kernel(sched, target="mgpu")  # refuses in one line what the GPU target cannot express
    ok = True
    print(f"{args.file}: the module's block-local parts on {gpus[0].device_kind} (GPU 0):")
    for part in run_parts(module):
        print(f"  {part.name}: {'ok' if part.ok else 'WRONG'}  {part.detail}")
        ok &= part.ok
    for n in args.devices or ([count] if count >= 2 else []):
        if n > count:
            print(f"{args.file} N={n}: not run: it needs {n} Hopper GPUs, this machine has {count} "
                  f"(`ringc check` proves it at any N)")
            ok = False
            continue
        try:
            res = run_schedule_gpu(sched, gpus[:n], params=dict(args.param), seed=args.seed)
        except Exception as e:  # the GPU runtime's refusal (e.g. no NVSHMEM in this jaxlib): one line
            print(f"{args.file} N={n} on {n} GPUs: not run: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            ok = False
            continue
        print(f"{args.file} N={n} on {n} GPUs: {'ok' if res.ok else 'FAILED'}  max|kernel - lax| = "
              f"{res.max_abs_err:.3g} (tolerance {res.tolerance:.3g})  time {res.seconds:.4f}s")
        ok &= res.ok
    return EXIT_OK if ok else EXIT_FAILED


def _compile_inputs(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The TPU targets and the GPU targets of `ringc compile`, each refused in one line
    where the files cannot take it: a schedule compiles for a TPU slice, a Python Mosaic GPU
    kernel file for a GPU."""
    from .compile.gpu import GPU_TARGETS
    gpu = [t for t in args.target if t in GPU_TARGETS]
    tpu = [t for t in args.target if t not in GPU_TARGETS]
    python = [f for f in args.files if f.endswith((".py", ".md", ".ipynb"))]  # as `ringc check` tells them
    yaml_ = [f for f in args.files if f not in python]
    if python and tpu:
        raise ScheduleError(f"a Python file compiles for a GPU (--target {', '.join(GPU_TARGETS)}); "
                            f"{', '.join(tpu)} is a TPU slice, for schedules (.yaml)", file=python[0],
                            fix="pass --target h100 (a Pallas TPU kernel file is checked with ringc check)")
    if yaml_ and gpu:
        raise ScheduleError("a schedule compiles for TPU slices; for a GPU, emit its Mosaic GPU module first",
                            file=yaml_[0],
                            fix=f"ringc emit {yaml_[0]} --target mgpu -o kernel.py, then ringc compile kernel.py "
                                "--target h100; or pass a TPU target such as --target v5e:2x2")
    if not python and (args.devices or args.lower_only or args.entry or args.arg or args.stub):
        raise ScheduleError("--devices, --lower-only, --entry, --arg and --stub are for Python Mosaic GPU kernel "
                            "files (--target h100); a schedule's devices are its target's",
                            file=args.files[0], fix="drop them (a schedule's sizes are --param k=v)")
    return tpu, gpu


def cmd_compile(args: argparse.Namespace) -> int:
    from .compile import LIBTPU_FIX, LIBTPU_MISSING, libtpu_available, quiet_libtpu
    tpu_targets, gpu_targets = _compile_inputs(args)
    if gpu_targets:
        return _compile_gpu(args, gpu_targets)
    if not libtpu_available():  # one message for the run, not one per file and target
        raise ScheduleError(LIBTPU_MISSING, file=args.files[0], fix=LIBTPU_FIX)
    if "jax" not in sys.modules:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")  # compile-only devices need no backend
    quiet_libtpu()
    from .compile import compile_for
    def one(path: str) -> Any:
        sched = _load(path, args.param)
        return (compile_for(sched, target) for target in tpu_targets)
    return _compile_files(args, one)


def _compile_files(args: argparse.Namespace, compile_one: Any) -> int:
    """Every file gets its results (`compile_one(path)`, an iterable of compile results); a bad
    one is reported and the next compiled; the exit code and JSON document of them all."""
    from .output import document
    results, errors = [], []
    for path in args.files:
        try:
            for res in compile_one(path):
                results.append(res)
                if args.format == "text":
                    print(res.to_text(verbose=args.verbose))
        except ScheduleError as e:
            errors.append(e)
            if args.format == "text":
                print(str(e), file=sys.stderr)
    code = EXIT_BAD_INPUT if errors else EXIT_OK if all(r.ok for r in results) else EXIT_FAILED
    if args.format == "json":
        print(json.dumps(document("compile", code, [r.to_json(verbose=args.verbose) for r in results], errors),
                         indent=1))
    return code


def _compile_gpu(args: argparse.Namespace, targets: list[str]) -> int:
    """`ringc compile FILE.py --target h100`: each kernel call of each file lowered for CUDA
    and compiled for sm_90a (`ringc.compile.gpu`)."""
    from .compile import gpu
    from .run import ensure_host_devices
    n = args.devices or gpu.DEFAULT_DEVICES
    ensure_host_devices(n)  # the file's code runs on N CPU devices that answer as H100s
    with gpu.quiet_plugin():
        import jax  # the CUDA plugin's start-up notes (no driver here) are not ringc's
        jax.devices()  # the backends start here, quietly
    if not args.lower_only and not gpu.gpu_available():  # one message for the run
        raise ScheduleError(gpu.GPU_MISSING, file=args.files[0], fix=gpu.GPU_FIX + "; or pass --lower-only")
    def one(path: str) -> Any:
        if not os.path.isfile(path):
            raise ScheduleError("no such file", file=path)
        for target in targets:
            yield from gpu.compile_file(path, n, target=target, compile=not args.lower_only, entry=args.entry,
                                        args=args.arg, params=dict(args.param), stubs=tuple(args.stub))
    return _compile_files(args, one)


def cmd_schema(args: argparse.Namespace) -> int:
    from .ir.schema import Schedule
    print(json.dumps(Schedule.model_json_schema(), indent=2))
    return EXIT_OK

# --- ringc cost ---------------------------------------------------------------------------

def _size(text: str) -> int:
    from .cost.sizing import parse_size
    try:
        value = parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    _within("size_bytes", value, "the collective size")
    return value


def _sweep(text: str) -> list[int]:
    from .cost.sizing import parse_sweep
    try:
        sizes = parse_sweep(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    _within("size_bytes", sizes[-1], "the sweep's largest size")
    return sizes


MAX_DURATION = 1.0  # seconds: a per-hop latency or DMA issue cost past this is a typo


def _duration(text: str) -> float:
    """`1us`, `500ns`, `0.002ms`, `1e-6` (seconds): finite, from 0 to 1 s (`nan` would make
    every comparison false, and the timed run would call a correct schedule a hang)."""
    units = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
    t = text.strip()
    unit = next((u for u in ("ms", "us", "ns", "s") if t.endswith(u)), "")
    try:
        value = float(t[: len(t) - len(unit)]) * units.get(unit, 1.0)
    except ValueError:
        value = math.nan
    if not 0 <= value <= MAX_DURATION:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"expected a finite duration from 0 to {MAX_DURATION:g}s like 1us or "
                                         f"500ns, got {text!r}")
    return value


def _tune_parser(sub, add_params) -> None:
    from .cost.chips import CHIPS
    c = sub.add_parser("tune", help="choose a schedule's params with the cost model (and the TPU compiler)",
                       description="Price every combination of --param-range at --bytes on --topology, drop "
                                   "what the TPU compiler rejects, verify the best (ringc/cost/tune.py).")
    c.add_argument("file", metavar="FILE", help="the schedule (.yaml)")
    c.add_argument("--topology", required=True, metavar="SPEC", help="ring:16, v5e:4x4, v5p:4x4x4, ...")
    c.add_argument("--bytes", type=_size, required=True, metavar="SIZE", help="collective size V (e.g. 256MiB)")
    c.add_argument("--param-range", action="append", default=[], metavar="NAME=A..B",
                   help="a parameter to sweep: chunks=1..16 (every integer) or chunks=1,2,4; repeatable")
    c.add_argument("--along", metavar="AXES", help="topology axes the schedule's axes run along, e.g. y")
    c.add_argument("--chip", choices=sorted(CHIPS), help="chip figures (default: the topology's generation)")
    c.add_argument("--no-compile", action="store_true", help="do not compile the choices with libtpu")
    c.add_argument("--format", choices=("text", "json"), default="text", help="json: one document")
    add_params(c)


def cmd_tune(args: argparse.Namespace) -> int:
    from .cost import hardware
    from .cost.tune import parse_range, tune
    sched = _load(args.file, args.param)
    try:
        ranges = dict(parse_range(r) for r in args.param_range)
        hw = hardware(args.topology, sched, along=args.along, chip=args.chip)
    except ValueError as e:
        raise ScheduleError(str(e), file=args.file, fix="see `ringc tune --help`") from None
    if not ranges:
        raise ScheduleError("nothing to tune", file=args.file, fix="add --param-range NAME=A..B, e.g. chunks=1..16")
    result = tune(sched, hw, args.bytes, ranges, compile=not args.no_compile)
    code = EXIT_OK if result.best else EXIT_FAILED
    if args.format == "json":
        from .output import document
        print(json.dumps(document("tune", code, [result.to_json()], []), indent=1))
    else:
        print(result.to_text())
    return code


def _cost_parser(sub, add_params) -> None:
    from .cost.chips import CHIPS
    c = sub.add_parser("cost", help="estimate a schedule's time on a TPU topology or an H100 node, against the "
                                    "lower bound",
                       description="Time the unrolled schedule on a model of the ICI network, or of NVLink through "
                                   "NVSwitch on h100:N (see docs/cost-model.md), and compare it with the "
                                   "collective's lower bound.")
    c.add_argument("file", metavar="FILE", nargs="?", help="the schedule (or use --collective)")
    c.add_argument("--topology", required=True, metavar="SPEC",
                   help="ring:16, v5e:4x4, v5p:4x4x4, torus:8x8, h100:8, ...")
    c.add_argument("--collective", metavar="KIND", help="rank every library schedule of this collective (psum, "
                                                        "all_gather, ...) at each --sweep size, instead of FILE")
    c.add_argument("--library", metavar="DIR", help="the schedules --collective ranks (default: the library)")
    c.add_argument("--along", metavar="AXES", help="topology axes the schedule's axes run along, e.g. y "
                                                   "(default: as `ringc check`)")
    c.add_argument("--chip", choices=sorted(CHIPS), help="chip figures (default: the topology's generation, else v5e)")
    c.add_argument("--bytes", type=_size, metavar="SIZE",
                   help="collective size V (e.g. 64MiB); sets the schedule's row/column params")
    c.add_argument("--sweep", type=_sweep, metavar="A..B", help="price every power-of-two size from A to B")
    c.add_argument("--format", choices=("text", "json"), default="text", help="json: one document")
    c.add_argument("--plot", metavar="OUT.png", help="draw estimate, bound and efficiency against size")
    _add_timing_options(c)
    add_params(c)


def _add_timing_options(c: argparse.ArgumentParser) -> None:
    """The cost model's two timing constants a user may change (`cost`, `synth`)."""
    from .cost.chips import CHIPS
    def defaults(field: str) -> str:
        return ", ".join(f"{name} {getattr(c, field) * 1e6:g}us" for name, c in CHIPS.items())
    c.add_argument("--hop-latency", type=_duration, default=None, metavar="T",
                   help=f"per-hop latency (ICI link, or NVLink through the switch; default the chip's: "
                        f"{defaults('hop_latency')})")
    c.add_argument("--dma-overhead", type=_duration, default=None, metavar="T",
                   help=f"core time to issue one DMA (default the chip's: {defaults('dma_overhead')})")


def cmd_cost(args: argparse.Namespace) -> int:
    from .cost import CostError, estimate, hardware
    from .cost.sizing import parse_sweep
    if args.collective:
        return _cmd_rank(args)
    if not args.file:
        raise ScheduleError("`ringc cost` needs a schedule FILE, or --collective KIND to rank the library",
                            file="<command line>", fix="e.g. ringc cost --collective psum --topology ring:16 "
                                                       "--sweep 4KiB..1GiB")
    sched = _load(args.file, args.param)
    try:
        hw = hardware(args.topology, sched, along=args.along, chip=args.chip, hop_latency=args.hop_latency,
                      dma_overhead=args.dma_overhead)
    except ValueError as e:
        raise ScheduleError(str(e), file=args.file, fix="see `ringc cost --help`") from None
    plot = _output_path(args.plot, args.file) if args.plot else None
    sizes = args.sweep or [args.bytes]
    try:
        with progress.bar(len(sizes), f"pricing {sched.name}", unit="size") as bar:
            estimates = []
            for b in sizes:
                estimates.append(estimate(sched, hw, nbytes=b))
                bar.update()
        if plot and not args.sweep:  # a plot is a curve: sweep the default range around the point
            curve = [estimate(sched, hw, nbytes=b) for b in parse_sweep("4KiB..1GiB")]
        else:
            curve = estimates
    except CostError as e:
        print(str(e), file=sys.stderr)
        return EXIT_FAILED
    if args.format == "json":  # one document: an estimate per size
        from .output import document
        print(json.dumps(document("cost", EXIT_OK, [e.to_json() for e in estimates], []), indent=1))
    elif args.sweep:
        print(_sweep_table(estimates))
    else:
        print(estimates[0].to_text())
    if plot:
        from .cost.plot import sweep_png
        try:
            data = sweep_png(curve, marked=None if args.sweep else estimates[0].bound.volume)
        except RuntimeError as e:
            raise ScheduleError(str(e), file=args.file, fix="install the plot extra") from None
        _write_atomically(plot, data)
        print(f"wrote {plot}", file=sys.stderr)
    return EXIT_OK


def _cmd_rank(args: argparse.Namespace) -> int:
    """`ringc cost --collective KIND`: ringc/cost/rank.py."""
    from .cost.rank import rank, ranking_png
    from .cost.sizing import parse_sweep
    where = args.file or "<command line>"
    if args.file or args.param:
        raise ScheduleError("--collective ranks the library: give no FILE and no --param", file=where,
                            fix="drop FILE, or drop --collective to price one schedule")
    try:
        ranking = rank(args.collective, args.topology, args.sweep or [args.bytes or parse_sweep("4KiB..1GiB")[0]],
                       library=Path(args.library) if args.library else None, along=args.along, chip=args.chip,
                       hop_latency=args.hop_latency, dma_overhead=args.dma_overhead)
    except ValueError as e:
        raise ScheduleError(str(e), file=where, fix="see `ringc cost --help`") from None
    if args.format == "json":
        from .output import document
        print(json.dumps(document("cost", EXIT_OK, [ranking.to_json()], []), indent=1))
    else:
        print(ranking.to_text())
    if args.plot:
        out = _output_path(args.plot, args.library or "schedules")
        try:
            _write_atomically(out, ranking_png(ranking))
        except RuntimeError as e:
            raise ScheduleError(str(e), file=where, fix="install the plot extra") from None
        print(f"wrote {out}", file=sys.stderr)
    return EXIT_OK


def _sweep_table(estimates) -> str:
    from .units import size_text, time_text
    from .cost.timeline import resource_text
    first = estimates[0]
    rows = [first.header().rsplit(";", 1)[0],
            f"  {'V':>9}  {'estimate':>10}  {'bound':>10}  {'efficiency':>10}  {'binding':<10} bottleneck"]
    for e in estimates:
        bn = e.bottleneck
        where = f"{resource_text(bn[0])} ({bn[1]:.0%})" if bn else "-"
        rows.append(f"  {size_text(e.bound.volume):>9}  {time_text(e.seconds):>10}  {time_text(e.bound.seconds):>10}  "
                    f"{e.efficiency:>10.1%}  {e.bound.binding:<10} {where}")
    return "\n".join(rows)


# --- ringc synth ----------------------------------------------------------------------------

def _synth_parser(sub) -> None:
    from .cost.chips import CHIPS
    c = sub.add_parser("synth", help="search schedule families for the fastest verified schedule of a collective",
                       description="Price every candidate of ringc/synth/families/ on the cost model at each size, "
                                   "keep the latency-bandwidth frontier, check the winner on the slice (and "
                                   "compile it where libtpu is installed) and write it as a YAML schedule.")
    c.add_argument("collective", metavar="COLLECTIVE", help="psum, all_gather, psum_scatter or all_to_all (or all_reduce, ...)")
    c.add_argument("--topology", required=True, metavar="SPEC", help="ring:16, torus:4x4, v5e:16x16, v5p:4x4x4, ...")
    size = c.add_mutually_exclusive_group(required=True)
    size.add_argument("--bytes", type=_size, metavar="SIZE", help="collective size V (e.g. 256MiB)")
    size.add_argument("--sweep", type=_sweep, metavar="A..B", help="every power-of-two size from A to B")
    c.add_argument("-o", "--output", metavar="OUT.yaml",
                   help="write the winner (several winners of a sweep: the largest size's here, each other "
                        "next to it as OUT_<size>.yaml)")
    c.add_argument("--chip", choices=sorted(CHIPS), help="chip figures (default: the topology's generation, else v5e)")
    c.add_argument("--no-compile", action="store_true", help="do not compile the winners with libtpu")
    c.add_argument("--format", choices=("text", "json"), default="text", help="json: one document")
    _add_timing_options(c)
    _add_limit(c)


def cmd_synth(args: argparse.Namespace) -> int:
    """`ringc synth`: ringc/synth/."""
    from .synth import synth
    from .units import size_text
    where = "<command line>"
    out = _output_path(args.output) if args.output else None
    try:
        result = synth(args.collective, args.topology, args.sweep or [args.bytes], compile=not args.no_compile,
                       chip=args.chip, hop_latency=args.hop_latency, dma_overhead=args.dma_overhead)
    except ValueError as e:
        raise ScheduleError(str(e), file=where, fix="see `ringc synth --help`") from None
    written = []
    if out and result.winners():
        last = result.choices[-1].winner or result.winners()[-1]
        stem = Path(out)
        for p in result.winners():
            if p is last:
                path = out
            else:
                first = next(c.size for c in result.choices if c.winner is p)
                path = str(stem.with_name(f"{stem.stem}_{size_text(first).replace(' ', '')}{stem.suffix or '.yaml'}"))
            _write_atomically(path, result.yaml_of(p))
            written.append(path)
    code = EXIT_OK if result.ok else EXIT_FAILED
    if args.format == "json":
        from .output import document
        report = {**result.to_json(), "written": written}
        print(json.dumps(document("synth", code, [report], []), indent=1))
    else:
        print(result.to_text())
        for path in written:  # as the user named the output: relative to here if they gave it so
            print(f"wrote {path if os.path.isabs(args.output) else os.path.relpath(path)}", file=sys.stderr)
    return code


# --- ringc show, and check --show ------------------------------------------------------------

def _show_parser(sub, add_params) -> None:
    from .show import DIAGRAMS
    c = sub.add_parser("show", help="draw a schedule: timeline, ring, state machine, slot table (mermaid, md, png)",
                       description="Pictures of a schedule from the cost model's timed run of its unrolled events.")
    c.add_argument("file", metavar="FILE", help="the schedule (.yaml)")
    c.add_argument("--devices", type=_device_count, metavar="N", help="device count (default: from --topology)")
    c.add_argument("--topology", metavar="SPEC", help="default ring:N")
    c.add_argument("--along", metavar="AXES", help="topology axes the schedule's axes run along (as `check`)")
    c.add_argument("--format", choices=("mermaid", "png", "md"), default="md", help="md: a whole document (default); mermaid: one diagram; png: a timeline")
    c.add_argument("--diagram", choices=DIAGRAMS, default="gantt", help="which diagram for --format mermaid")
    c.add_argument("--bytes", type=_size, metavar="SIZE", help="collective size for the timeline (default: params)")
    c.add_argument("-o", "--output", metavar="OUT", help="write here instead of stdout (required for png)")
    add_params(c)


def _timed(sched, topology: str, along: str | None, n: int | None):
    from .cost import hardware
    try:
        return hardware(topology, sched, along=along, n=n)
    except ValueError as e:
        raise ScheduleError(str(e), file=sched.file, fix="pass --devices N and/or --topology SPEC") from None


def cmd_show(args: argparse.Namespace) -> int:
    from .cost import CostError, estimate
    from .show import diagram, document, timeline_png
    sched = _load(args.file, args.param)
    if args.devices is None and args.topology is None:
        raise ScheduleError("`ringc show` needs --devices N (or a sized --topology)", file=args.file,
                            fix="e.g. --devices 4")
    if args.format == "png" and not args.output:
        raise ScheduleError("--format png writes a file: give -o OUT.png", file=args.file, fix="add -o timeline.png")
    out = _output_path(args.output, args.file) if args.output else None
    hw = _timed(sched, args.topology or topology.DEFAULT, args.along, args.devices)
    try:
        e = estimate(sched, hw, nbytes=args.bytes, every_device=True)  # a timeline of every device
    except CostError as err:
        print(f"{err}\n  (`ringc check --show OUT.png` draws where it goes wrong)", file=sys.stderr)
        return EXIT_FAILED
    try:
        data = {"md": lambda: document(e), "mermaid": lambda: diagram(e, args.diagram) + "\n",
                "png": lambda: timeline_png(e)}[args.format]()
    except RuntimeError as err:  # matplotlib missing
        raise ScheduleError(str(err), file=args.file, fix="install the plot extra") from None
    if out:
        _write_atomically(out, data)
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(data)
    return EXIT_OK


MAX_SHOWN = 20  # `check --show` draws at most this many findings (`--show-finding K` any other)


def _show_finding(args: argparse.Namespace, sched, report) -> None:
    """`check --show OUT.png`: the timed run of the checked program, each finding marked on
    a copy of it (OUT.png, OUT-K.png), or the one `--show-finding K` chooses."""
    from .cost.model import memory_of
    from .cost.timeline import simulate
    from .show.png import timeline_png
    from .verify.symmetric.program import SymmetricProgram
    out = _output_path(args.show, *args.files)
    program = report.program
    numbered = list(enumerate(report.findings, 1))
    drawable = [(k, f) for k, f in numbered if f.event is not None or f.kind == "hang"]
    if args.show_finding is not None:
        k = args.show_finding
        if k > len(numbered):
            raise ScheduleError(f"--show-finding {k}: the verdict drawn has {len(numbered)} finding(s)",
                                file=sched.file, fix=f"choose K from 1 to {len(numbered)}" if numbered
                                else "drop --show-finding: the check found nothing")
        if all(k != j for j, _ in drawable):
            raise ScheduleError(f"--show-finding {k}: finding {k} ([{numbered[k - 1][1].kind}]) has no event on "
                                "the timeline to draw", file=sched.file,
                                fix="choose another K (--explain numbers them in order)")
        drawable = [(j, f) for j, f in drawable if j == k]
    if isinstance(program, SymmetricProgram):  # a clean quotient check kept device 0's events only
        from .verify.unroll import unroll
        program = unroll(sched, sizes=program.axis_sizes, invocations=args.invocations)
    hw = _timed(sched, args.topology, args.along, program.n)
    machine = simulate(program, hw, memory_of(sched))
    pictures = []  # (path, title, finding)
    for i, (k, finding) in enumerate(drawable[:MAX_SHOWN]):
        path = out if i == 0 else _output_path(_numbered(out, k), *args.files)
        where = f" at line {finding.event.line}" if finding.event is not None else ""
        pictures.append((path, f"{sched.name} N={program.n}: finding {k} of {len(numbered)}: "
                               f"[{finding.kind}]{where}", finding))
    if not pictures:
        pictures.append((out, f"{sched.name} N={program.n}: no finding", None))
    for path, title, finding in pictures:
        try:
            data = timeline_png(machine, title, finding)
        except RuntimeError as err:
            raise ScheduleError(str(err), file=sched.file, fix="install the plot extra") from None
        _write_atomically(path, data)
        print(f"wrote {path}" + (f" ({title.split(': ', 1)[1]})" if finding else ""), file=sys.stderr)
    if len(drawable) > MAX_SHOWN:
        print(f"  ({len(drawable) - MAX_SHOWN} more findings not drawn: --show-finding K draws finding K)",
              file=sys.stderr)


def _numbered(path: str, k: int) -> str:
    """OUT.png -> OUT-K.png"""
    p = Path(path)
    return str(p.with_name(f"{p.stem}-{k}{p.suffix}"))


def console() -> int:
    """The `ringc` command: `main`, and where a limit stopped the checked file's own code, the
    process ends at once once its output is out, not waiting at exit for the work that code
    left in flight on the CPU devices (a tutorial's matmul of 8192 x 8192 arrays held the
    process for minutes after its message)."""
    limits.END_PROCESS_WHEN_BLOCKED = True
    code = main()
    if limits.STOPPED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        overrides = _limit_overrides(argv)
    except ScheduleError as e:
        print(f"ringc: error: {e.message}\n  fix: {e.fix}", file=sys.stderr)
        return EXIT_BAD_INPUT
    with limits.overridden(overrides):
        return _main(argv)


class _ClosedPipeGuard:
    """stdout for one command: when the reader goes away (`ringc check ... | head`), the rest
    of the output goes to /dev/null and the command finishes with its own exit code (a
    failing check piped into `head` still exits 1 under `set -o pipefail`)."""

    def __init__(self, stream):
        self.stream = stream
        self.closed_by_reader = False

    def _reader_gone(self) -> None:
        self.closed_by_reader = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.stream.fileno())
        os.close(devnull)

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._reader_gone()

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


@contextlib.contextmanager
def _guarded_stdout():
    try:
        sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # captured (tests, notebooks): nothing to guard
        yield
        return
    real, sys.stdout = sys.stdout, _ClosedPipeGuard(sys.stdout)
    try:
        yield
    finally:
        guard, sys.stdout = sys.stdout, real
        if isinstance(guard, _ClosedPipeGuard):
            guard.flush()


def _main(argv: list[str]) -> int:
    if not argv:  # bare `ringc`: what it can do
        _parser().print_help()
        return EXIT_OK
    args = _parser().parse_args(argv)  # bad arguments: argparse's usage message, exit 2
    handler = {"check": cmd_check, "emit": cmd_emit, "run": cmd_run, "compile": cmd_compile,
               "schema": cmd_schema, "cost": cmd_cost, "show": cmd_show, "tune": cmd_tune,
               "synth": cmd_synth}[args.command]
    try:
        with _guarded_stdout(), progress.enabled_for_command(not getattr(args, "quiet", False)):
            return handler(args)
    except ScheduleError as e:
        print(str(e), file=sys.stderr)
        if getattr(args, "format", None) in ("json", "sarif"):  # a document on stdout, as for any run
            out = Output(args.format, args.command)
            out.errors.append(e)
            out.close()
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # stderr's reader gone too: the conventional exit of a closed pipe
        return 128 + 13
    except Exception as e:  # an internal error: short message, traceback only on request
        if os.environ.get("RINGC_DEBUG"):
            raise
        print(f"ringc: internal error: {type(e).__name__}: {e}\n  (set RINGC_DEBUG=1 for the traceback, "
              "and please report it)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
