"""No import circles: the import graph of `ringc` is acyclic, and every module imports on
its own, first, in a fresh interpreter state.

The graph counts every import, at module level or deferred inside a function (a deferred
import only hides a circle: `compile.py` <-> `compile_errors.py` and `cost/model.py` <->
`cost/diagnose.py` were such), but not `if TYPE_CHECKING:` ones, which never run. A
package's `__init__` importing its own submodules is not a circle: the package runs first.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "ringc"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level:
        base = base[:len(base) - (level - 1)]
        return ".".join(base + ([target] if target else []))
    return target or ""


def _imports(name: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    is_package = path.name == "__init__.py"

    def visit(nodes):
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue  # never runs
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name.startswith("ringc"))
            elif isinstance(node, ast.ImportFrom):
                mod = _resolve(name, is_package, node.level, node.module)
                if not mod.startswith("ringc"):
                    continue
                for a in node.names:  # `from pkg import submodule` imports the submodule
                    sub = f"{mod}.{a.name}"
                    out.add(sub if sub in MODULES else mod)
            else:
                visit(ast.iter_child_nodes(node))

    visit(tree.body)
    return {m for m in out if m in MODULES and m != name}


def test_module_import_graph_has_no_cycles():
    g = nx.DiGraph()
    for name, path in MODULES.items():
        g.add_node(name)
        g.add_edges_from((name, m) for m in _imports(name, path))
    cycles = list(nx.simple_cycles(g))
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c + [c[0]]) for c in cycles[:5])


def test_every_module_imports_alone():
    """Each module imported first, with no other ringc module loaded before it (`__main__`
    runs the CLI, so it is left out).

    Python runs a package's `__init__` before any of its submodules, so importing `ringc.X`
    first in a fresh interpreter is `import ringc`, then `ringc.X`. The script does the first
    once, then imports each module in a child forked from that state: each sees what a fresh
    interpreter would (none of its siblings' imports), without running `ringc`'s own imports
    again for every module (that was 36 s of the suite)."""
    script = (
        "import importlib, os\n"
        "import ringc\n"
        "failed = []\n"
        f"for name in {sorted(m for m in MODULES if m != 'ringc.__main__')!r}:\n"
        "    r, w = os.pipe()\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        os.close(r)\n"
        "        try:\n"
        "            importlib.import_module(name)\n"
        "            msg = ''\n"
        "        except BaseException as e:\n"
        "            msg = f'{name}: {type(e).__name__}: {e}'\n"
        "        os.write(w, msg.encode()[:60000])\n"
        "        os._exit(0)\n"
        "    os.close(w)\n"
        "    with os.fdopen(r, 'rb') as f:\n"
        "        msg = f.read().decode()\n"
        "    status = os.waitpid(pid, 0)[1]\n"
        "    if msg or status:\n"
        "        failed.append(msg or f'{name}: the child importing it ended with status {status}')\n"
        "print('\\n'.join(failed))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not done.stdout.strip(), done.stdout


def test_no_private_name_is_imported_across_modules():
    """`from ringc.x import _name` hides a dependency on an internal: give it a public name."""
    bad = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("ringc")):
                bad += [f"{name} imports {a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert not bad, bad


def test_every_public_list_names_real_things():
    import importlib
    for name in MODULES:
        if name == "ringc.__main__" or name == "ringc.codegen.runtime":
            continue
        mod = importlib.import_module(name)
        missing = [n for n in getattr(mod, "__all__", []) if not hasattr(mod, n)]
        assert not missing, (name, missing)
