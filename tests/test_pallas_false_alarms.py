"""False alarms and stoppers on everyday Pallas code (issue 31, "Real kernels as published"):
each kernel of tests/pallas_import/ is written the way published code writes it, and each
check still rejects the broken case next to it."""

from pathlib import Path

import pytest

from ringc.pallas import check_module

HERE = Path(__file__).parent / "pallas_import"
SCALED = HERE / "scaled_permute.py"


def _scaled(op, n=3, scale=1.0):
    return check_module(str(SCALED), n, params={"op": op, "scale": scale})


# -- 1. arithmetic on the way out ----------------------------------------------------------
@pytest.mark.parametrize("n", [2, 3, 4])
def test_times_one_is_the_identity(n):
    report = _scaled("mul", n)
    assert report.ok, report.to_text()


@pytest.mark.parametrize("op", ["add0", "cast"])
def test_plus_zero_and_same_dtype_casts_are_the_identity(op):
    report = _scaled(op)
    assert report.ok, report.to_text()


@pytest.mark.parametrize("op, scale, holds", [("mul", 2.0, "2.0*x_ref@2[0:8, 0:128]"),
                                              ("neg", 1.0, "-1.0*x_ref@2[0:8, 0:128]"),
                                              ("tanh", 1.0, "tanh(x_ref)@2[0:8, 0:128]"),
                                              ("bias", 1.0, "b_ref@0[0:8, 0:128] + x_ref@2[0:8, 0:128]")])
def test_a_kernel_that_scales_or_maps_is_not_a_permute(op, scale, holds):
    """Twice a permute, minus a permute, tanh of a permute, a permute plus a bias: each is
    followed exactly and is a wrong_result against ppermute, naming the value it holds."""
    report = _scaled(op, scale=scale)
    assert report.kinds() == {"wrong_result"}, report.to_text()
    assert f"o_ref[0:8, 0:128] ends as {holds}, but ppermute needs x_ref@2[0:8, 0:128]" in report.to_text()


def test_a_stored_constant_is_a_wrong_result_not_a_note():
    report = _scaled("ones")
    assert report.kinds() == {"wrong_result"}, report.to_text()
    assert "ends as the constant 1.0 stored in `o_ref` of device 0" in report.to_text()


@pytest.mark.parametrize("scale, ok", [(1.0, True), (3.0, False)])
def test_scaling_by_a_broadcast_constant_is_scaling(scale, ok):
    report = _scaled("full_mul", scale=scale)
    assert report.ok == ok, report.to_text()
    if not ok:
        assert "ends as 3.0*x_ref@2[0:8, 0:128]" in report.to_text()


def test_a_pointwise_function_commutes_with_the_copy():
    """exp applied by the sender before the DMA or by the receiver after it: the same term."""
    before, after = _scaled("exp_before"), _scaled("exp_after")
    for report in (before, after):
        assert "ends as exp(x_ref)@2[0:8, 0:128]" in report.to_text(), report.to_text()
    assert any(a.startswith("values:") and "pointwise functions followed as uninterpreted (exp)" in a
               for a in after.assumptions), after.assumptions


def test_the_verdict_says_what_it_assumed_of_scaling():
    report = _scaled("mul", scale=2.0)
    assert any(a.startswith("values: scaling by constants followed exactly (2.0*)") for a in report.assumptions)


def test_a_value_ringc_cannot_follow_is_a_note_not_a_finding():
    report = _scaled("square")
    assert report.ok, report.to_text()
    line = next(i for i, t in enumerate(SCALED.read_text().splitlines(), 1) if "scratch[...] * scratch[...]" in t)
    assert any(a.startswith(f"not followed: `mul` of 2 tensors at line {line}") for a in report.assumptions), \
        report.assumptions


# -- 4. a direct store into an output in HBM (memory space ANY) ---------------------------
ANY_OUTPUT = HERE / "any_output_store.py"


@pytest.mark.parametrize("n", [2, 3])
def test_a_store_into_an_any_output_is_a_direct_write_to_hbm(n):
    report = check_module(str(ANY_OUTPUT), n)
    assert report.ok, report.to_text()
    assert any("a store of `o_ref` in HBM (memory space ANY)" in a and "direct write to HBM" in a
               for a in report.assumptions), report.assumptions


def test_a_direct_store_into_hbm_before_the_receive_is_still_a_race():
    report = check_module(str(ANY_OUTPUT), 3, params={"early": 1})
    assert "race" in report.kinds(), report.to_text()
    line = next(i for i, t in enumerate(ANY_OUTPUT.read_text().splitlines(), 1) if t.strip() == "o_ref[...] = scratch[...]")
    assert any(int(f.event.line) == line for f in report.findings if f.kind == "race")


# -- 5. an access out of range is a finding, and the check goes on --------------------------
GATHER = HERE / "prefetch_gather.py"


def _line(path, text):
    lines = [i for i, t in enumerate(path.read_text().splitlines(), 1) if t.strip().startswith(text)]
    assert len(lines) == 1, (text, lines)
    return lines[0]


@pytest.mark.parametrize("neg", [0, 1])
def test_negative_ids_masked_with_pl_when_do_not_stop_the_check(neg):
    report = check_module(str(GATHER), 3, params={"neg": neg})
    assert report.ok, report.to_text()


def test_an_index_out_of_range_is_an_out_of_bounds_finding_naming_its_smem_read():
    report = check_module(str(GATHER), 3, params={"bad": 1})
    assert report.kinds() == {"out_of_bounds"}, report.to_text()
    (f,) = report.findings
    assert int(f.event.line) == _line(GATHER, "copy.start()")  # the DMA that reads out of range
    read = _line(GATHER, "idx = ids_ref[i]")
    assert f"slice 8:9 of `x_ref` dimension 0 is out of range [0, 8); the index is 8, read from `ids_ref[2]` " \
           f"at line {read}" in f.message
    assert f"prefetch_gather.py:{int(f.event.line)}: error: [out_of_bounds]" in report.to_text()


def test_the_check_goes_on_past_an_access_out_of_range():
    report = check_module(str(GATHER), 3, params={"bad": 1, "nowait": 1})
    assert {"out_of_bounds", "dma_not_waited"} <= report.kinds(), report.to_text()


# -- 2. make_inputs that needs concrete values runs for real ---------------------------------
CONCRETE = HERE / "concrete_inputs.py"


def test_make_inputs_calling_int_on_random_values_runs_concretely():
    report = check_module(str(CONCRETE), 3)
    assert report.ok, report.to_text()
    assert any(a.startswith("make_inputs ran concretely on 3 CPU devices") and "ConcretizationTypeError" in a
               for a in report.assumptions), report.assumptions


def test_a_race_behind_concrete_make_inputs_is_still_found():
    report = check_module(str(CONCRETE), 3, params={"late": 1})
    assert "race" in report.kinds(), report.to_text()


# -- 3. an entry race behind build() and in a test module ----------------------------------
# A test module's identical calls are checked once; the key that said "identical" left out the
# compiler params, so a kernel that skips Mosaic's device barrier (an entry race) was taken for
# a copy of the same kernel with the barrier, called at the same line, and never checked.
ENTRY = HERE / "entry_race.py"
ENTRY_TESTS = HERE / "entry_race_unittest.py"


@pytest.mark.parametrize("n", [3, 4])
@pytest.mark.parametrize("invocations", [1, 2])
def test_an_entry_race_is_found_behind_build_as_in_a_test_module(n, invocations):
    from ringc.pallas import check_file
    by_test = {r.title.split(":")[0].split(".")[-1]: r for r in check_file(str(ENTRY_TESTS), n, invocations=invocations)}
    cases = {"test_signal_right": {"right": 1}, "test_signal_left": {"right": 0},
             "test_signal_right_double": {"right": 1, "double": 1},
             "test_device_barrier": {"right": 1, "sync": "device"}, "test_skip_barrier": {"right": 1, "sync": "skip"}}
    for test, params in cases.items():
        module = check_module(str(ENTRY), n, params=params, invocations=invocations)
        racy = params["right"] == 1 and not (params.get("double") and n == 3) and params.get("sync") != "device"
        assert ("race" in module.kinds()) == racy, (test, module.to_text())
        assert ("race" in by_test[test].kinds()) == racy, (test, by_test[test].to_text())
    copy = _line(ENTRY, "copy.start()")
    racy = check_module(str(ENTRY), n, params={"right": 1, "gridspec": 1}, invocations=invocations)
    assert any(f.kind == "race" and int(f.event.line) == copy for f in racy.findings), racy.to_text()


# -- 6. scalar-prefetch operands computed by the jitted code before the kernel ----------------
GROUPED = HERE / "grouped_offsets.py"


@pytest.mark.parametrize("overflow", ["0", "1"])
def test_prefetch_values_computed_before_the_shard_map_are_followed(monkeypatch, overflow):
    """`starts = cumsum(bincount(ids)) - sizes` inside the jitted function, before the
    shard_map: computed from the ids the script passed, so the kernel's DMA starts are known;
    an overflowing start is an out_of_bounds finding naming the SMEM read."""
    from ringc.pallas import check_file
    monkeypatch.setenv("GROUPED_OVERFLOW", overflow)
    (report,) = check_file(str(GROUPED), 3)
    assert "not known before the run" not in report.to_text()
    if overflow == "0":
        assert report.ok, report.to_text()
    else:
        assert report.kinds() == {"out_of_bounds"}, report.to_text()
        assert "the index is 64, read from `starts_ref[7]`" in report.findings[0].message


# -- 1 (scripts). a lax reference with elementwise functions names their meaning -------------
POINTWISE = HERE / "pointwise_script.py"


@pytest.mark.parametrize("reference, ok, needs", [("after", True, None), ("before", True, None),
                                                  ("plain", False, "x_ref@2[0:8, 0:128]"),
                                                  ("twice", False, "2.0*x_ref@2[0:8, 0:128]")])
def test_a_reference_with_pointwise_functions_is_the_collective_of_them(monkeypatch, reference, ok, needs):
    """The kernel stores tanh of what it received: `tanh(ppermute(x))` and `ppermute(tanh(x))`
    both mean that (elementwise functions commute with moving data); `ppermute(x)` and
    `ppermute(2 * x)` do not."""
    from ringc.pallas import check_file
    monkeypatch.setenv("POINTWISE_REFERENCE", reference)
    (report,) = check_file(str(POINTWISE), 3)
    assert report.ok == ok, report.to_text()
    if ok:
        assert any("meaning: ppermute by 1 of tanh applied to the input" in a for a in report.assumptions)
    else:
        assert report.kinds() == {"wrong_result"}
        assert f"ends as tanh(x_ref)@2[0:8, 0:128], but ppermute needs {needs}" in report.to_text()


@pytest.mark.parametrize("body, fns", [
    (lambda x, lax, jnp: lax.psum(2.0 * x, "x"), ("2.0*",)),
    (lambda x, lax, jnp: lax.psum(jnp.tanh(x), "x"), ("tanh",)),
    (lambda x, lax, jnp: 0.5 * lax.psum(x, "x"), ("0.5*",)),
    (lambda x, lax, jnp: jnp.tanh(lax.psum(x, "x")), None),   # tanh of a sum: no sum of tanh's
    (lambda x, lax, jnp: jnp.exp(lax.all_gather(x, "x")), ("exp",)),
    (lambda x, lax, jnp: lax.psum(x * 1.0 + 0.0, "x"), ()),
])
def test_reference_pointwise_functions_around_a_collective(body, fns):
    import jax
    import jax.numpy as jnp
    from jax import lax

    from ringc.pallas.interpret import reference_pointwise
    from ringc.pallas.jaxprs import walk_eqns
    from ringc.pallas.script import lax_collectives
    mesh = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    f = jax.shard_map(lambda x: body(x, lax, jnp), mesh=mesh, in_specs=jax.P("x"), out_specs=jax.P(), check_vma=False)
    eqns = list(walk_eqns(jax.make_jaxpr(f)(jnp.ones((16, 128), jnp.float32)).jaxpr))
    (coll,) = [e for e in eqns if e.primitive.name in lax_collectives()]
    assert reference_pointwise(eqns, coll) == fns


BLOCKS = HERE / "prefetch_blocks.py"


def test_a_blockspec_without_memory_space_is_a_vmem_window():
    """`pl.BlockSpec((8, 128), index_map)` with no memory space: blocks pipelined into VMEM
    (Mosaic's default), not the array accessed in HBM."""
    report = check_module(str(BLOCKS), 3)
    assert report.ok, report.to_text()
    assert not any("in HBM" in a for a in report.assumptions), report.assumptions


def test_a_block_index_out_of_range_from_scalar_prefetch_is_out_of_bounds():
    report = check_module(str(BLOCKS), 3, params={"bad": 1})
    assert report.kinds() == {"out_of_bounds"}, report.to_text()
    (f,) = report.findings
    assert int(f.event.line) == _line(BLOCKS, "in_specs=")   # the index map's lambda: where the fix goes
    assert "block index 4 of `x_ref` dimension 0 selects 32:40, outside [0, 32); the index is 4, read from " \
           f"`ids_ref[2]` at line {_line(BLOCKS, 'in_specs=')}" in f.message


def test_a_mesh_coordinate_past_the_axis_is_named_in_bad_target(tmp_path):
    """`semaphore_signal(bar, device_id=d)` for d up to 7 on a mesh of 4 (a MESH id, x = d):
    the finding names the coordinate asked, `x=4`, not the internal sentinel (-5)."""
    from ringc.pallas import check_file
    path = tmp_path / "too_far.py"
    path.write_text(
        "import functools\nimport jax\nimport jax.numpy as jnp\nfrom jax.experimental import pallas as pl\n"
        "from jax.experimental.pallas import tpu as pltpu\n\n"
        "mesh = jax.make_mesh((jax.device_count(),), ('x',), axis_types=(jax.sharding.AxisType.Auto,))\n\n\n"
        "def kernel(x_ref, o_ref):\n"
        "    bar = pltpu.get_barrier_semaphore()\n"
        "    for d in range(8):\n"
        "        pltpu.semaphore_signal(bar, device_id=d)\n"
        "    pltpu.semaphore_wait(bar, jax.lax.axis_size('x'))\n"
        "    o_ref[...] = x_ref[...]\n\n\n"
        "@jax.jit\n"
        "@functools.partial(jax.shard_map, mesh=mesh, in_specs=jax.P('x'), out_specs=jax.P('x'), check_vma=False)\n"
        "def f(x):\n"
        "    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),\n"
        "                          compiler_params=pltpu.CompilerParams(collective_id=0))(x)\n\n\n"
        "y = f(jnp.zeros((8 * jax.device_count(), 128), jnp.float32))\n")
    (report,) = check_file(str(path), 4)
    bad = [f for f in report.findings if f.kind == "bad_target"]
    assert bad and "targets device x=4, which does not exist for N=4" in bad[0].message, report.to_text()


def test_an_event_in_another_file_is_located_with_its_file():
    """Sweep 13: a race in JAX's collective matmul named a TMA load of its helper module as
    "(line 223)", a line of the user's file that is a `lax` reference. Every event location
    of a finding names its file where it is not the program's (the test module's race is
    in `entry_race.py`, which it imports), and the JSON's related events carry their file."""
    from ringc.pallas import check_file
    report = next(r for r in check_file(str(ENTRY_TESTS), 3) if "race" in r.kinds())
    race = next(f for f in report.findings if f.kind == "race")
    text = race.to_text(report.program)
    line = int(race.event.line)
    where = text.split(": ", 1)[0]
    assert where.endswith(f"entry_race.py:{line}") and f"(entry_race.py:{line})" in text, text
    assert f"(line {line})" not in text, text
    related = race.to_json(report.program)["related"]
    assert related and all(r["file"] and isinstance(r["line"], int) for r in related), related
