"""The `ringc` command line: check, emit, run, compile, schema.

Exit codes: 0 success, 1 a check or run failed, 2 bad input (the message names the file,
the line and the fix). Bad input never prints a traceback; set RINGC_DEBUG=1 to see one
for an internal error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from .ir.errors import ScheduleError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3


def _devices(text: str) -> list[int]:
    """`8` or `2..8` (inclusive)."""
    try:
        if ".." in text:
            lo, hi = (int(p) for p in text.split("..", 1))
        else:
            lo = hi = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or A..B, got {text!r}") from None
    if lo < 1 or hi < lo:
        raise argparse.ArgumentTypeError(f"device counts must satisfy 1 <= A <= B, got {text!r}")
    return list(range(lo, hi + 1))


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _topology(text: str) -> str:
    from . import topology
    try:
        topology.parse(text, 1 if text.strip() == "ring" else None)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _mesh_shape(text: str) -> tuple[int, ...]:
    parts = text.lower().split("x")
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected a mesh shape like 2x4, got {text!r}")
    return tuple(int(p) for p in parts)


def _param(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    try:
        if not sep or not name:
            raise ValueError
        return name.strip(), int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected name=integer, got {text!r}") from None


def _target(text: str) -> str:
    from .compile import EXAMPLE_TARGETS, TARGET_SYNTAX
    if not TARGET_SYNTAX.match(text):
        raise argparse.ArgumentTypeError(f"expected GENERATION:TOPOLOGY such as {', '.join(EXAMPLE_TARGETS)}, "
                                         f"got {text!r}")
    return text


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ringc", description="Verify ring schedules and emit Pallas TPU kernels.")
    sub = p.add_subparsers(dest="command", required=True)

    def add_params(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--param", type=_param, action="append", default=[], metavar="K=V",
                        help="override a schedule parameter (repeatable)")

    c = sub.add_parser("check", help="verify schedules for one or more device counts")
    c.add_argument("files", nargs="+", metavar="FILE")
    c.add_argument("--devices", type=_devices, metavar="N|A..B",
                   help="devices on the ring (required with the default `--topology ring`; with a sized "
                        "topology, optional and its total device count)")
    c.add_argument("--topology", type=_topology, default="ring",
                   help="ring (default), ring:N, line:N, torus:AxB[xC], mesh:AxB[xC] (no wraparound), or a TPU "
                        "slice: v4:AxBxC, v5p:AxBxC, v5e:AxB, v6e:AxB (wraparound per generation)")
    c.add_argument("--along", metavar="AXES",
                   help="topology axes the schedule's axes run along, e.g. y or x,y (default: axes of the same "
                        "name, else the first ones)")
    c.add_argument("--strict", action="store_true", help="treat warnings (e.g. a missing wraparound) as failures")
    c.add_argument("--invocations", type=_positive, default=1, metavar="K",
                   help="check K back-to-back calls of the kernel (barrier reuse)")
    c.add_argument("--format", choices=("text", "json"), default="text")
    c.add_argument("--explain", action="store_true", help="print a concrete interleaving for each finding")
    add_params(c)

    e = sub.add_parser("emit", help="write the Pallas TPU kernel module for a schedule")
    e.add_argument("file", metavar="FILE")
    e.add_argument("-o", "--output", metavar="OUT.py", help="write here instead of stdout")
    add_params(e)

    r = sub.add_parser("run", help="run the emitted kernel in TPU interpret mode against lax")
    r.add_argument("file", metavar="FILE")
    r.add_argument("--devices", type=_devices, metavar="N|A..B", help="ring sizes (or give --mesh)")
    r.add_argument("--mesh", type=_mesh_shape, metavar="AxB[xC]",
                   help="run on a multi-axis mesh of this shape (needed for a schedule over several axes)")
    r.add_argument("--along", metavar="AXES", help="mesh axes the schedule's axes run along, e.g. y")
    r.add_argument("--seed", type=int, default=0)
    add_params(r)

    k = sub.add_parser("compile", help="compile the emitted kernel with the real TPU compiler (no TPU needed)")
    k.add_argument("files", nargs="+", metavar="FILE")
    k.add_argument("--target", type=_target, action="append", required=True, metavar="GEN:TOPOLOGY",
                   help="TPU slice to compile for, e.g. v5e:2x2, v5p:2x2x1, v4:2x2x1, v6e:2x2 (repeatable); "
                        "the ring runs over all its devices")
    k.add_argument("--format", choices=("text", "json"), default="text")
    k.add_argument("--verbose", action="store_true", help="also print the compiler's own message on failure")
    add_params(k)

    sub.add_parser("schema", help="print the schedule format's JSON Schema")
    return p


def _load(path: str, params: list[tuple[str, int]]):
    from .ir.loader import load
    return load(path, dict(params))


def cmd_check(args: argparse.Namespace) -> int:
    from .verify import check
    ok = True
    for path in args.files:
        sched = _load(path, args.param)
        if args.devices is None and args.topology.strip() == "ring":
            raise ScheduleError("--devices is required with the default topology `ring`", file=path,
                                fix="pass --devices N, or a sized topology such as --topology torus:4x4")
        for n in args.devices or [None]:
            report = check(sched, n, topology=args.topology, invocations=args.invocations, along=args.along,
                           strict=args.strict)
            ok &= report.ok
            if args.format == "json":
                print(json.dumps(report.to_json()))
            else:
                print(report.to_text(explain=args.explain))
    return EXIT_OK if ok else EXIT_FAILED


def _write_atomically(path: str, text: str) -> None:
    """Write all or nothing: a failed emit leaves no partial file behind."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent or ".", prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would surprise: behave like open()
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cmd_emit(args: argparse.Namespace) -> int:
    from .codegen import emit
    sched = _load(args.file, args.param)
    text = emit(sched)
    if args.output:
        if not Path(args.output).parent.exists():
            raise ScheduleError(f"output directory {str(Path(args.output).parent)!r} does not exist",
                                file=args.file, fix="create it first or choose another -o path")
        _write_atomically(args.output, text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    import math
    from .run import ensure_host_devices
    if (args.devices is None) == (args.mesh is None):
        raise ScheduleError("give either --devices (a ring) or --mesh (a multi-axis mesh)", file=args.file,
                            fix="e.g. --devices 2..8, or --mesh 2x4")
    sizes = args.devices or [math.prod(args.mesh)]
    ensure_host_devices(max(sizes))
    from .run import mesh_layout, run_schedule
    from .verify.check import run_findings
    from .verify.simulate import maximal_run
    from .verify.unroll import unroll
    sched = _load(args.file, args.param)
    ok = True
    for n in sizes:
        # Interpret mode cannot detect a deadlock: it would block forever. Refuse first.
        shape = args.mesh or (n,)
        program = unroll(sched, sizes=mesh_layout(sched, shape, args.along)[1])
        hangs = [f for f in run_findings(program, maximal_run(program)) if f.kind == "hang"]
        if hangs:
            print(f"{args.file} N={n}: not run, it would hang (see `ringc check`):\n  "
                  + hangs[0].to_text(program))
            ok = False
            continue
        res = run_schedule(sched, n, params=dict(args.param), seed=args.seed, mesh_shape=shape, along=args.along)
        races = {None: "not checked", False: "no races", True: "RACES FOUND"}[res.races_found]
        status = "ok" if res.ok else "FAILED"
        where = f" on a {'x'.join(map(str, shape))} mesh" if args.mesh else ""
        print(f"{args.file} N={program.n}{where}: {status}  max|kernel - lax| = {res.max_abs_err:.3g} "
              f"(tolerance {res.tolerance:.3g})  race detector: {races}  time {res.seconds:.2f}s")
        ok &= res.ok
    return EXIT_OK if ok else EXIT_FAILED


def cmd_compile(args: argparse.Namespace) -> int:
    from .compile import quiet_libtpu
    if "jax" not in sys.modules:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")  # compile-only devices need no backend
    quiet_libtpu()
    from .compile import compile_for
    ok = True
    for path in args.files:
        sched = _load(path, args.param)
        for target in args.target:
            res = compile_for(sched, target)
            ok &= res.ok
            if args.format == "json":
                print(json.dumps(res.to_json(verbose=args.verbose)))
            else:
                print(res.to_text(verbose=args.verbose))
    return EXIT_OK if ok else EXIT_FAILED


def cmd_schema(args: argparse.Namespace) -> int:
    from .ir.schema import Schedule
    print(json.dumps(Schedule.model_json_schema(), indent=2))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handler = {"check": cmd_check, "emit": cmd_emit, "run": cmd_run, "compile": cmd_compile,
               "schema": cmd_schema}[args.command]
    try:
        return handler(args)
    except ScheduleError as e:
        print(str(e), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `ringc check ... | head`
        sys.stderr.close()
        return EXIT_OK
    except Exception as e:  # an internal error: short message, traceback only on request
        if os.environ.get("RINGC_DEBUG"):
            raise
        print(f"ringc: internal error: {type(e).__name__}: {e}\n  (set RINGC_DEBUG=1 for the traceback, "
              "and please report it)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
