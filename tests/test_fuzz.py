"""A fuzzer over mutated library schedules and command lines (issue 20).

Schedules: a library schedule with up to three mutations of its data (a key dropped,
duplicated, renamed, or its value replaced by a huge, negative, non-finite, Unicode,
malformed or deeply nested one) and up to two of its text (YAML tags, anchors, aliases
and merge keys, recursive aliases, a "billion laughs" block, lines duplicated, dropped or
re-indented, control characters). Command lines: every command with arguments drawn from
valid, edge and absurd values, and outputs that are new files, directories, devices,
symlinks or the input itself. Runtime data: schedules that read it (`data:`), mutated or not,
checked with fuzzed `--data` specs and data files (valid samples, samples breaking a
constraint, JSON of the wrong shape, text that is not JSON).

The property, for every example: `ringc` ends within its time budget with exit 0, 1 or
2 and no traceback or internal error; the input schedule is untouched; nothing is
written on failure and no temporary file is left behind; and every module `emit` prints
or writes compiles.

Work within the limits must finish within the budget, so the examples run with the
`events` and `grid_points` limits lowered (the limits themselves are what the
regression tests in tests/test_bad_input.py check at their defaults).

Seeds are fixed (`derandomize`). `RINGC_FUZZ_EXAMPLES` sets the number of schedule
examples (default 200; command-line and compile examples scale with it); the `slow`
test runs 3,000 schedule examples.

Record: with `RINGC_FUZZ_EXAMPLES=3000 pytest tests/test_fuzz.py -k "slow or command_lines
or compile"`, 4,575 examples ran (3,000 mutated schedules, 1,500 command lines, 75
compiles; 23 min on a loaded 2-core machine) and none failed. Exit codes seen: mostly 2
(a mutation rarely leaves a valid schedule), 0 and 1 on about a tenth of them. While the
suite was written, the classes it targets were those of issue 20, fixed first.
"""

from __future__ import annotations

import copy
import json
import hashlib
import os
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cli_run import Overtime, run_cli
from conftest import REPO

# every library schedule, the ones that read runtime data (`data:`) included
LIB = {p.stem: p.read_text() for p in sorted((REPO / "schedules").glob("*.yaml"))}
# `ringc synth`'s winners: generated text (params such as lanes, cwin, units; guard
# semaphores that refuse a lane count; 3-D slices of 4,096 chips), drawn by a test of their own
SYNTH = {p.stem: p.read_text() for p in sorted((REPO / "schedules" / "synth").glob("*.yaml"))}
TEXTS = LIB | SYNTH
SMALL_SLICES = {1: ["ring:4", "ring:8"], 2: ["torus:2x2", "torus:4x4", "v5e:2x4"],
                3: ["v5p:2x2x2", "v5p:2x2x4", "torus:2x3x4", "v5p:2x4x4"]}   # (most 3-D winners: 2 cores)
DATA_STEMS = sorted(stem for stem, text in LIB.items() if "\ndata:" in text)
EXAMPLES = int(os.environ.get("RINGC_FUZZ_EXAMPLES", "200"))
BUDGET = 20.0  # seconds per command: far above what any example needs with the limits below
SMALL_LIMITS = ["--limit", "events=60000", "--limit", "grid_points=20000"]

FUZZ = dict(derandomize=True, deadline=None, database=None, print_blob=True,
            suppress_health_check=list(HealthCheck))

# ----------------------------------------------------------------------------- values

WEIRD_SCALARS = [
    2**63, 2**63 - 1, -2**63 - 1, 10**30, -(10**30), int("9" * 400), -1, 0, 1, 7, 10**6, 10**9,
    float("nan"), float("inf"), float("-inf"), -0.0, 1.5, 1e308, True, False, None,
    "", " ", "N", "me", "N - 1", "rows // 0", "(me - 1) % N", "rows // 3", "-rows", "me[0]",
    "ｒｏｗｓ", "é", "\u202e", "名前", "\x7f", "a\tb", "x" * 2000, "(" * 300 + "N" + ")" * 300,
    " + ".join(["1"] * 600), "not " * 80 + "N", "-" * 150 + "N", "(" * 70 + "N" + " + 1)" * 70,
    "10**30", "__import__('os').system('true')", "lambda: 0", "x[0:8:2]", "x[", "x[:, :, :, :, :]",
    "out[me, 0:rows + 1]", "out[N]", "scratch[-1]", "min(N)", "max(1, 2, 3)", "1 if me else 0",
    "dma", "regular", "input", "vmem_scratch", "hbm", "float16", "int4", "bfloat16", "psum",
    "True", "None", "def", "class", "build", "jax", "_kernel", "sharded", "2020-01-01",
]
NAMES = ["rows", "cols", "ｒｏｗｓ", "def", "class", "build", "jax", "kernel", "sharded", "_check_shard", "me",
         "N", "left", "1x", "x y", "", "__line__", "é", "n" * 300, "min", "barrier", "_mod", "step", "out",
         "p", "params", "AXIS", "match", "x-1"]


def deep_list(depth: int):
    v: list = []
    for _ in range(depth):
        v = [v]
    return v


PLAUSIBLE = [1, 2, 4, 8, 16, 128, "N", "me", "N - 1", "step", "right", "left", "(me + 1) % N", "rows", "cols",
             "rows // 2", "2 * N", "step % 2", "step == 0", "not step", "x", "out", "out[me]", "out[0]", "x[0:8]",
             [8, 128], ["rows", "cols"], ["N", "rows", "cols"], [], {}, "float32", "bfloat16", "vmem", "left_x"]

values = st.one_of(
    st.sampled_from(PLAUSIBLE),
    st.sampled_from(PLAUSIBLE),
    st.sampled_from(WEIRD_SCALARS),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=12),
    st.builds(deep_list, st.integers(1, 120)),
    st.recursive(st.sampled_from([0, 1, "N", "x", None]),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(NAMES), inner,
                                                                             max_size=3),
                 max_leaves=8),
)


def _paths(data, prefix=()):
    """Every (container path, key) in a YAML data tree."""
    out = []
    if isinstance(data, dict):
        for k, v in data.items():
            out.append(prefix + (k,))
            out += _paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out.append(prefix + (i,))
            out += _paths(v, prefix + (i,))
    return out


def _at(data, path):
    for p in path:
        data = data[p]
    return data


@st.composite
def data_mutation(draw, data):
    paths = _paths(data)
    if not paths:
        return data
    path = draw(st.sampled_from(paths))
    parent, key = _at(data, path[:-1]), path[-1]
    kind = draw(st.sampled_from(["drop", "duplicate", "rename", "replace", "replace", "replace", "misspell"]))
    if kind == "misspell" and isinstance(parent[key], str) and len(parent[key]) > 2:
        word = parent[key]  # a near miss of a valid word: `all_gather` -> `allgather` (a did-you-mean)
        cut = draw(st.integers(1, len(word) - 2))
        parent[key] = word[:cut] + word[cut + 1:]
    elif kind == "misspell":
        parent[key] = draw(values)
    elif kind == "drop":
        del parent[key]
    elif kind == "duplicate":
        if isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        else:
            parent[draw(st.sampled_from(NAMES))] = copy.deepcopy(parent[key])
    elif kind == "rename":
        if isinstance(parent, dict):
            new = draw(st.sampled_from(NAMES) | st.text(min_size=1, max_size=6))
            parent[new] = parent.pop(key)
        else:
            parent[key] = {draw(st.sampled_from(NAMES)): parent[key]}
    else:
        parent[key] = draw(values)
    return data


TAGS = ["!custom ", "!!str ", "!!int ", "!!float ", "!!binary ", "!!python/name:os.system ", "!!set ",
        "!!timestamp ", "!<tag:yaml.org,2002:str> ", "!!map ", "!!seq "]
LAUGHS = ('lol0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
          + "".join(f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 9)))


@st.composite
def text_mutation(draw, text):
    lines = text.splitlines()
    if not lines:
        return text
    i = draw(st.integers(0, len(lines) - 1))
    line = lines[i]
    kind = draw(st.sampled_from(["tag", "anchor", "alias", "merge", "recursive", "laughs", "dup_line",
                                 "drop_line", "indent", "control", "swap"]))
    if kind == "tag" and ": " in line:
        k, v = line.split(": ", 1)
        lines[i] = f"{k}: {draw(st.sampled_from(TAGS))}{v}"
    elif kind == "anchor" and ": " in line:
        k, v = line.split(": ", 1)
        lines[i] = f"{k}: &a {v}"
        j = draw(st.integers(0, len(lines) - 1))
        if ": " in lines[j] and j != i:
            k2 = lines[j].split(": ", 1)[0]
            lines[j] = f"{k2}: *a"
    elif kind == "alias" and ": " in line:
        lines[i] = line.split(": ", 1)[0] + ": *undefined"
    elif kind == "merge":
        indent = len(line) - len(line.lstrip())
        lines.insert(i + 1, " " * (indent + 2) + draw(st.sampled_from(["<<: *a", "<<: [*a, *a]", "<<: 3",
                                                                         "<<: {kind: input}"])))
        j = draw(st.integers(0, len(lines) - 1))
        if ": {" in lines[j]:
            k, v = lines[j].split(": ", 1)
            lines[j] = f"{k}: &a {v}"
    elif kind == "recursive":
        lines.append("extra: &r [*r]")
    elif kind == "laughs":
        lines += LAUGHS.splitlines()
    elif kind == "dup_line":
        lines.insert(i, line)
    elif kind == "drop_line":
        del lines[i]
    elif kind == "indent":
        lines[i] = draw(st.sampled_from(["  ", "\t", " "])) + line
    elif kind == "control":
        pos = draw(st.integers(0, len(line)))
        lines[i] = line[:pos] + draw(st.sampled_from(["\x00", "\x1b", "\ufeff", "\u2028", "\r", "é"])) + line[pos:]
    elif kind == "swap":
        j = draw(st.integers(0, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines) + "\n"


@st.composite
def schedules(draw):
    """(library stem, mutated YAML text)."""
    stem = draw(st.sampled_from(sorted(LIB)))
    return stem, draw(schedules_of(stem))


@st.composite
def schedules_of(draw, stem: str):
    """The library schedule `stem`'s YAML text, mutated (sometimes not at all)."""
    text = TEXTS[stem]
    data_edits = draw(st.sampled_from([0, 0, 1, 1, 1, 2, 3]))
    if data_edits:
        data = yaml.safe_load(text)
        for _ in range(data_edits):
            data = draw(data_mutation(data))
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1000)
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):
        text = draw(text_mutation(text))
    return text


# ----------------------------------------------------------------------------- command lines

GOOD = 4  # the first GOOD entries of each list below are valid
DEVICES = ["2", "4", "2..4", "8", "3", "1", "2", "3", "4", "2..4", "8", "0", "-1", "4..2", "1..99999999999999999999", "abc", "１", "4096",
           "99999", " 4", "2..", "..4", "4.0", "1e3", "0x4"]
TOPOLOGIES = ["ring:4", "torus:2x2", "v5e:2x2", "ring:2", "ring", "ring:4", "ring:1", "line:4", "torus:2x2", "mesh:2x2", "v5e:2x2", "v5p:2x2x1", "v4:2x2x2",
              "ring:0", "ring:100000", "torus:100000x100000", "bogus", "v5e:99x99", "torus:2x2x2x2", "ring:-4",
              "ring:４", "torus:2x", "v6e:4x4", ""]
SIZES = ["4KiB", "64MiB", "1GiB", "1.5MB", "1", "0", "-1", "1e9", "9" * 400, "2000TiB", "1.5MB", "abc", "1GiB"]
SWEEPS = ["4KiB..64KiB", "1..4", "64KiB..4KiB", "1..9999999TiB", "x..y"]
DURATIONS = ["1us", "0", "500ns", "0.5ms", "nan", "inf", "-1us", "1e-6", "2s", "1e400", "abc", "0.5ms"]
PARAM_VALUES = ["8", "16", "32", "128", "256", "0", "-8", "7", "1" * 31, str(2**63), str(2**62), str(2**40), "10**30", "x", "", "1e3",
                "256", "1_024"]
DATA = ["random:2", "{DATA}", "random:1", "{DATA}", "random:3", "random:0", "random:-1", "random:x", "random:",
        "random:" + "9" * 30, "random:2000", "missing.json", "{OUT}", "", "random:1.5"]
SEEDS = ["0", "7", "-1", "x", "9" * 30, ""]
LIMITS = ["data_samples=1", "expr_depth=1000", "invocations=2", "devices=2", "devices=0", "events=10", "nonsense=3", "yaml_nodes=5",
          "grid_points=x"]


def _param(stem: str):
    names = sorted(yaml.safe_load(TEXTS[stem]).get("params", {})) + ["nope", "ｒｏｗｓ", ""]
    return st.builds(lambda k, v: f"{k}={v}", st.sampled_from(names),
                     st.sampled_from(PARAM_VALUES[:GOOD]) | st.sampled_from(PARAM_VALUES))


@st.composite
def command_lines(draw, stem: str, command: str):
    """The arguments after the file: `{OUT}` stands for the output path chosen later."""
    flags: list[str] = []

    def maybe(p=0.5):  # False first: hypothesis leans towards the first choice
        k = round(20 * p)
        return draw(st.sampled_from([False] * (20 - k) + [True] * k))

    def pick(values):  # the first few values are plausible: mostly those, sometimes the rest
        return draw(st.sampled_from(values[:GOOD] if maybe(0.75) else values))

    if command == "check":
        flags += ["--devices", pick(DEVICES)] if maybe(0.85) else []
        if maybe(0.3):
            flags += ["--topology", pick(TOPOLOGIES)]
        if maybe(0.2):
            flags += ["--invocations", draw(st.sampled_from(["1", "2", "3", "0", "100000", "x"]))]
        for flag in ("--explain", "--strict"):
            if maybe(0.2):
                flags.append(flag)
        if maybe(0.2):
            flags += ["--format", draw(st.sampled_from(["json", "text", "xml", "sarif", "github"]))]
        if maybe(0.1):
            flags.append("-q")
        if maybe(0.1):
            flags += ["--show", "{OUT}"]
        if maybe(0.5 if stem in DATA_STEMS else 0.03):
            flags += ["--data", pick(DATA)]
            if maybe(0.3):
                flags += ["--seed", pick(SEEDS)]
        if maybe(0.05):
            flags += ["--arg", draw(st.sampled_from(["x=float32[8*N,128]@x", "x=float99[8]", "x[8]", "x=int8[N//0]",
                                                     "length=int32[]@=32", "length=int32[]@x=32"]))]
        if maybe(0.03):  # a Python kernel's meaning and hardware: refused on a schedule, or an unknown name
            flags += [draw(st.sampled_from(["--collective", "--gpu", "--test", "--skip-test"])),
                      draw(st.sampled_from(["psum", "h100", "gather", "*small"]))]
    elif command == "emit":
        if maybe(0.6):
            flags += ["-o", "{OUT}"]
        if maybe(0.5):  # emit even what fails `check`: the emitter sees every mutant
            flags.append("--unchecked")
        if maybe(0.3):  # the Mosaic GPU target: emitted, or refused in one message; or an unknown target
            flags += ["--target", draw(st.sampled_from(["mgpu", "mgpu", "tpu", "gpu"]))]
    elif command == "cost":
        flags += ["--topology", pick(TOPOLOGIES)] if maybe(0.9) else []
        if maybe(0.3):
            flags += ["--bytes", pick(SIZES)]
        elif maybe(0.1):
            flags += ["--sweep", draw(st.sampled_from(SWEEPS))]
        for flag in ("--hop-latency", "--dma-overhead"):
            if maybe(0.2):
                flags.append(f"{flag}={pick(DURATIONS)}")
        if maybe(0.2):
            flags += ["--format", draw(st.sampled_from(["json", "text"]))]
        if maybe(0.1):
            flags += ["--chip", draw(st.sampled_from(["v4", "v5e", "tpu9"]))]
    elif command == "show":
        flags += ["--devices", pick(DEVICES)] if maybe(0.8) else []
        if maybe(0.2):
            flags += ["--topology", pick(TOPOLOGIES)]
        if maybe(0.3):
            flags += ["--format", draw(st.sampled_from(["md", "mermaid"]))]
        if maybe(0.2):
            flags += ["--diagram", draw(st.sampled_from(["gantt", "ring", "state", "memory", "pie"]))]
        if maybe(0.2):
            flags += ["--bytes", pick(SIZES)]
        if maybe(0.3):
            flags += ["-o", "{OUT}"]
    elif command == "compile":
        flags += ["--target", draw(st.sampled_from(["v5e:2x2", "v5e:1x1", "v5e:1000x1000", "tpu:2x2", "v5e:2x2x2",
                                                    "h100"]))]
    if command != "schema":
        for _ in range(draw(st.integers(0, 2))):
            flags += ["--param", draw(_param(stem))]
        if maybe(0.1):
            flags += ["--limit", draw(st.sampled_from(LIMITS))]
        if command in ("check", "cost", "show") and maybe(0.1):
            flags += ["--along", draw(st.sampled_from(["x", "y", "x,y", "q", ""]))]
    return flags


OUTPUTS = ["new", "new", "new", "new", "new", "symlink", "dir", "input", "devnull", "symlink", "missing_dir"]


# ----------------------------------------------------------------------------- data files

@st.composite
def data_files(draw):
    """The text of a `--data FILE.json`: well-formed samples (valid or breaking a constraint),
    JSON of the wrong shape, or text that is not JSON at all."""
    n = draw(st.sampled_from([2, 2, 3, 4, 1, 0]))
    per_device = st.lists(st.sampled_from([0, 0, 1, 2, 3, 8, 9, -1, 2**70, 1.5, True, None, "1"]), min_size=n, max_size=n)
    sample = st.fixed_dictionaries({"send_sizes": st.lists(per_device, min_size=n, max_size=n)},
                                   optional={"input_offsets": st.lists(per_device, min_size=n, max_size=n),
                                             "sizes": st.just([[0] * n] * n)})
    kind = draw(st.sampled_from(["one", "many", "one", "many", "json", "text"]))
    if kind == "one":
        return json.dumps(draw(sample), indent=1)
    if kind == "many":
        return json.dumps({"samples": draw(st.lists(sample, max_size=4))}, indent=1)
    if kind == "json":
        return json.dumps(draw(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                                            lambda c: st.lists(c, max_size=3) | st.dictionaries(
                                                st.sampled_from(["send_sizes", "samples", "x"]), c, max_size=3),
                                            max_leaves=12)))
    return draw(st.sampled_from(["", "{", "[" * 100_000, '{"send_sizes": [[1, 1], [1, 1]], "send_sizes": []}',
                                 "\ufeff{}", "\x00\xff", '{"samples": []}', "nan"]))


# ----------------------------------------------------------------------------- the property

def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_example(stem: str, text: str, command: str, flags: list[str], output: str, data: str = "{}",
                suffix: str = ".yaml") -> None:
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        d = Path(tmp)
        src = d / f"{stem}{suffix}"
        src.write_bytes(text.encode("utf-8", "surrogatepass"))
        real = d / "real.py"
        real.write_text("keep me\n")
        (d / "link.py").symlink_to("real.py")
        (d / "subdir").mkdir()
        (d / "data.json").write_bytes(data.encode("utf-8", "surrogatepass"))
        out = {"new": d / "out.py", "dir": d / "subdir", "input": src, "devnull": Path("/dev/null"),
               "symlink": d / "link.py", "missing_dir": d / "nowhere" / "out.py"}[output]
        before = _digest(src)
        argv = [command] + ([] if command == "schema" else [str(src)])
        argv += [str(out) if f == "{OUT}" else str(d / "data.json") if f == "{DATA}" else f for f in flags]
        if command != "schema":
            argv += SMALL_LIMITS
        try:
            o = run_cli(argv, budget=BUDGET)
        except Overtime as e:
            raise AssertionError(f"{e}\n--- schedule ---\n{text[:3000]}") from None
        context = f"{o}\n--- schedule ---\n{text[:3000]}"
        event(f"{command}: exit {o.code}")
        assert o.code in (0, 1, 2), context
        assert "Traceback" not in o.err + o.out and "internal error" not in o.err, context
        assert _digest(src) == before, f"the input schedule was modified\n{context}"
        leftovers = [p.name for p in d.rglob(".ringc-*")]
        assert not leftovers, f"temporary files left: {leftovers}\n{context}"
        assert (d / "link.py").is_symlink(), context
        wrote = "-o" in argv or "--show" in argv
        if o.code == 2 or not wrote:  # bad input writes nothing at all
            assert not (d / "out.py").exists() and real.read_text() == "keep me\n", context
            assert list((d / "subdir").iterdir()) == [], context
        if command == "emit" and o.code == 0:
            source = (real if output == "symlink" else out).read_text() if wrote else o.out
            compile(source, "<emitted>", "exec")  # a SyntaxError fails the example


COMMANDS = ["check", "check", "emit", "emit", "cost", "show", "schema"]


@st.composite
def examples(draw, commands=COMMANDS):
    stem, text = draw(schedules())
    command = draw(st.sampled_from(commands))
    flags = draw(command_lines(stem, command))
    output = draw(st.sampled_from(OUTPUTS))
    # now and then the file is named like a Python kernel, which only `check` reads as one
    suffix = draw(st.sampled_from([".yaml"] * 7 + [".py"])) if command in ("emit", "cost", "show") else ".yaml"
    return stem, text, command, flags, output, draw(data_files()), suffix


@settings(max_examples=EXAMPLES, **FUZZ)
@given(examples())
def test_mutated_schedules_never_crash_hang_or_damage_files(example):
    run_example(*example)


@settings(max_examples=max(EXAMPLES // 2, 10), **FUZZ)
@given(st.sampled_from(sorted(LIB)).flatmap(
    lambda stem: st.tuples(st.just(stem), st.sampled_from(COMMANDS)).flatmap(
        lambda sc: st.tuples(st.just(sc[0]), st.just(sc[1]), command_lines(sc[0], sc[1]),
                             st.sampled_from(OUTPUTS), data_files()))))
def test_command_lines_never_crash_hang_or_damage_files(example):
    """The library's own (valid) schedules under fuzzed command lines (and data files)."""
    stem, command, flags, output, data = example
    run_example(stem, LIB[stem], command, flags, output, data)


@settings(max_examples=max(EXAMPLES // 8, 10), **FUZZ)
@given(st.sampled_from(sorted(SYNTH)).flatmap(
    lambda stem: st.tuples(st.just(stem), st.just(SYNTH[stem]) | schedules_of(stem), st.sampled_from(COMMANDS)).flatmap(
        lambda sc: st.tuples(st.just(sc[0]), st.just(sc[1]), st.just(sc[2]), command_lines(sc[0], sc[2]),
                             st.sampled_from(OUTPUTS), data_files(), st.integers(0, 5)))))
def test_synthesized_schedules_never_crash_hang_or_damage_files(example):
    """`ringc synth`'s winners, as written or mutated, under fuzzed command lines: their
    params (`--param lanes=4` on a held plane, odd rows, a part's units) get one message.
    Where the line names no slice, one of the schedule's own rank (most are 3-D)."""
    stem, text, command, flags, output, data, pick = example
    if command in ("check", "cost", "show") and "--topology" not in flags:   # (in place of --devices)
        axes = len(yaml.safe_load(SYNTH[stem]).get("axes", [])) or 1
        if "--devices" in flags:
            at = flags.index("--devices")
            flags = flags[:at] + flags[at + 2:]
        flags = flags + ["--topology", SMALL_SLICES[axes][pick % len(SMALL_SLICES[axes])]]
    run_example(stem, text, command, flags, output, data)


@settings(max_examples=max(EXAMPLES // 4, 10), **FUZZ)
@given(st.sampled_from(DATA_STEMS).flatmap(lambda stem: st.tuples(
    st.just(stem), st.just(LIB[stem]) | schedules_of(stem), command_lines(stem, "check"),
    st.sampled_from(DATA), st.sampled_from(["2", "3", "2..4"]), data_files())))
def test_runtime_data_never_crashes_or_hangs(example):
    """Schedules that read runtime data (mutated or not) checked with fuzzed `--data`: random:K
    and data files that are valid, break a constraint, have the wrong shape or are no JSON."""
    stem, text, flags, spec, devices, data = example
    if "--data" not in flags:
        flags = flags + ["--data", spec]
    if "--devices" not in flags:
        flags = flags + ["--devices", devices]
    run_example(stem, text, "check", flags, "new", data)


@settings(max_examples=max(EXAMPLES // 40, 3), **FUZZ)
@given(examples(commands=["compile"]))
def test_compile_never_crashes_or_hangs(example):
    pytest.importorskip("libtpu")
    run_example(*example)


@pytest.mark.slow
@settings(max_examples=3000, **FUZZ)
@given(examples())
def test_mutated_schedules_slow(example):
    run_example(*example)


# `ringc synth` takes no file: its input is the collective, the slice and the sizes. Small
# slices only among the valid ones (a search on a large slice takes minutes by design); the
# rest are absurd, degenerate (one chip, an axis of one) or malformed.
SYNTH_TOPOLOGIES = ["ring:4", "torus:2x2", "v5e:2x2", "v5p:2x2x1", "v5p:2x1x2", "line:4", "v5e:1x1", "ring:1",
                    "ring:0", "ring", "bogus", "torus:2x", "v5e:99x99", "ring:100000", ""]
SYNTH_COLLECTIVES = ["psum", "all_gather", "psum_scatter", "all_to_all", "ppermute", "psum_scater", "", "ＰＳＵＭ"]


@settings(max_examples=max(EXAMPLES // 10, 10), **FUZZ)
@given(st.sampled_from(SYNTH_COLLECTIVES), st.sampled_from(SYNTH_TOPOLOGIES),
       st.sampled_from([["--bytes", s] for s in ["4KiB", "64KiB", "1MiB", "0", "-1", "abc", "9" * 400]]
                       + [["--sweep", s] for s in SWEEPS] + [[]]),
       st.sampled_from([[], ["--format", "json"], ["--format", "xml"], ["--hop-latency", "nan"]]))
def test_synth_command_lines_never_crash_or_hang(collective, topology, size, extra):
    """Exit 0, 1 or 2 within the budget, no traceback, nothing written: a search that finds a
    verified winner, one that finds none, or one line of bad input (one chip among them)."""
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        out = Path(tmp) / "s.yaml"
        argv = ["synth", collective, "--topology", topology, *size, *extra, "--no-compile"]
        o = run_cli(argv + ["-o", str(out)], budget=BUDGET)
        event(f"synth: exit {o.code}")
        assert o.code in (0, 1, 2), o
        assert "Traceback" not in o.err + o.out and "internal error" not in o.err, o
        if o.code == 2:   # bad input writes nothing
            assert not any(Path(tmp).iterdir()), o


# -- Python kernels as published, mutated ------------------------------------------------------
# `ringc check FILE.py` runs the user's own code: a kernel file of tests/pallas_import/ with one
# edit (a line dropped, duplicated or renamed into another name of the file, an integer
# changed, a start and a wait swapped, a direction flipped) must still end in verdicts or one
# message: exit 0, 1 or 2, never a traceback or an internal error, within its budget (a grid
# of 10**6 points stops at the lowered `grid_points` limit, with its message).
# (and the styles of the published files: kernels over a chip's TensorCores, real and serving
# code, a Markdown design note whose blocks ringc runs)
KERNELS = {p.name: p.read_text() for p in sorted([*(REPO / "tests" / "pallas_import").glob("*.py"),
                                                   *(REPO / "tests" / "pallas_import").glob("*_style/*.py"),
                                                   *(REPO / "tests" / "pallas_import" / "cores").glob("*.py"),
                                                   *(REPO / "tests" / "pallas_import").glob("real_style/*.md")])
           if p.stat().st_size < 12_000}
SWAPS = [(".start()", ".wait()"), ("wait_recv", "wait_send"), ("+ 1", "- 1"), ("right", "left")]
INTEGERS = [0, 1, 2, 3, 7, 9, 100, 10**6, -1]


@st.composite
def mutated_kernels(draw):
    import re
    name = draw(st.sampled_from(sorted(KERNELS)))
    lines = KERNELS[name].splitlines()
    body = [i for i, ln in enumerate(lines)
            if ln.strip() and not ln.lstrip().startswith(("#", '"""', "import", "from"))]
    i = draw(st.sampled_from(body))
    kind = draw(st.sampled_from(["drop", "dup", "int", "swap", "name"]))
    if kind == "drop":
        del lines[i]
    elif kind == "dup":
        lines.insert(i, lines[i])
    elif kind == "int":
        found = list(re.finditer(r"\b\d+\b", lines[i]))
        if found:
            m = draw(st.sampled_from(found))
            lines[i] = lines[i][:m.start()] + str(draw(st.sampled_from(INTEGERS))) + lines[i][m.end():]
    elif kind == "swap":
        a, b = draw(st.sampled_from(SWAPS))
        lines[i] = lines[i].replace(a, b, 1)
    else:
        words = re.findall(r"\b[a-z_][a-z_0-9]{2,}\b", lines[i])
        names = sorted(set(re.findall(r"\b[a-z_][a-z_0-9]{2,}\b", "\n".join(lines[j] for j in body))))
        if words:
            w = draw(st.sampled_from(words))
            lines[i] = re.sub(rf"\b{w}\b", draw(st.sampled_from(names)), lines[i], count=1)
    return name, kind, "\n".join(lines) + "\n"


def run_kernel_example(example) -> None:
    name, kind, text = example
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text(text)
        try:   # (the limits lowered as for the schedules: work within them ends within the budget)
            o = run_cli(["check", str(path), "--devices", "2", *SMALL_LIMITS], budget=BUDGET * 3)
        except Overtime as e:
            raise AssertionError(f"{e}\n--- {kind} of {name} ---\n{text[:3000]}") from None
        event(f"{kind}: exit {o.code}")
        context = f"{o}\n--- {kind} of {name} ---\n{text[:3000]}"
        assert o.code in (0, 1, 2), context
        assert "Traceback" not in o.err + o.out and "internal error" not in o.err + o.out, context


@settings(max_examples=max(EXAMPLES // 40, 5), **FUZZ)
@given(mutated_kernels())
def test_mutated_python_kernels_end_in_verdicts_or_one_message(example):
    run_kernel_example(example)


@pytest.mark.slow
@settings(max_examples=300, **FUZZ)
@given(mutated_kernels())
def test_mutated_python_kernels_slow(example):
    run_kernel_example(example)
