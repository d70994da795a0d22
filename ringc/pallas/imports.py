"""What a kernel file imports besides itself, for `ringc check` on code as published: its
repository's roots on the path, stubs for packages it does not need (`--stub MODULE`), and
one message for a package that is not installed.

- **Roots.** A file inside a repository imports its own package the way the repository does:
  `from pkg.kernels import util`, a relative `from . import tuned_block_sizes`, or a test
  module beside its package importing `pkg`. `Imports.roots` are the file's folder, the
  folder above its package (`__init__.py`) chain, the nearest folder above it with a
  `pyproject.toml`, `setup.py` or `.git`, and each folder above it that holds a package the
  file (or a module beside it, which it may import relatively) imports. A root holding a package that is already imported from elsewhere (a
  checkout of jax, say) goes at the end of `sys.path`, so it does not shadow it. The file
  runs with `__package__` set to its dotted package, so relative imports resolve (and run
  the package's `__init__.py` first, as Python does).
- **Stubs.** `--stub vllm` makes `import vllm`, `import vllm.x.y` and `from vllm.x import y`
  succeed (`--stub vllm.x` stubs `vllm.x` and below, and `vllm` itself only when it is not
  installed): every attribute of a stubbed module, and every attribute, call result and item of
  a stub, is a stub (`Stub`), and a stub called with one function or class is the identity
  (a decorator leaves the function as written). The verdict states each stubbed module;
  calls the file makes into a stub are recorded with their lines (`Imports.calls`), so a
  kernel that fails on a stub's value says which call it was.
- **Missing packages.** A `ModuleNotFoundError` for a package outside the file's repository
  is `missing_import`: the file's line, the package, and both fixes (`pip install PKG`, or
  `--stub PKG`).

The stubs, and the packages first imported from roots that were not on the path before, are
removed from `sys.modules` after the check, so the next file's package of the same name is
its own (a package imported before, and its submodules, stay).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ..errors import ScheduleError

__all__ = ["Imports", "importing", "missing_import", "repo_roots", "package_of"]

_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


def _package_top(folder: Path) -> Path:
    """The topmost folder of the `__init__.py` chain that `folder` is in (itself if none)."""
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        folder = folder.parent
        if not (folder / "__init__.py").is_file():
            return folder
    return folder


def package_of(path: str) -> str | None:
    """The dotted package the file is in (`pkg.kernels` for `.../pkg/kernels/foo.py` when
    both folders have an `__init__.py`), None outside a package."""
    folder = Path(path).resolve().parent
    parts: list[str] = []
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.append(folder.name)
        folder = folder.parent
    return ".".join(reversed(parts)) or None


def _imported_tops(tree: ast.Module) -> list[str]:
    """The top-level names of the file's absolute imports, in order."""
    tops: list[str] = []
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
        for name in names:
            if name.split(".")[0] not in tops:
                tops.append(name.split(".")[0])
    return tops


def repo_roots(tree: ast.Module, path: str) -> list[str]:
    """The folders the file's imports resolve from, as in its repository (module docstring)."""
    here = Path(path).resolve().parent
    roots = [here, _package_top(here)]
    marked = next((d for d in [here, *here.parents] if any((d / m).exists() for m in _MARKERS)), None)
    if marked is not None:
        roots.append(marked)
    tops = _imported_tops(tree)
    for sibling in sorted(here.glob("*.py"))[:50]:  # its package's modules it imports relatively
        if sibling != Path(path).resolve():
            try:
                tops += [t for t in _imported_tops(ast.parse(sibling.read_text())) if t not in tops]
            except (SyntaxError, UnicodeDecodeError, OSError):
                pass
    for top in tops:
        holder = next((d for d in [here, *here.parents]
                       if (d / top).is_dir() or (d / f"{top}.py").is_file()), None)  # namespace packages too
        src = next((d / "src" for d in [here, *here.parents]
                    if (d / "src" / top).is_dir() or (d / "src" / f"{top}.py").is_file()), None)
        # a src layout: the repository's packages under src/ (maxtext's tests), also where the
        # clone itself is named like its package (`git clone .../maxtext`: the folder holding the
        # file, no package, would shadow src/maxtext as a namespace package)
        if src is not None and (holder is None or (here.is_relative_to(holder / top)
                                                   and not (holder / top / "__init__.py").is_file())):
            holder = src
        # A folder inside a package (its `__init__.py`) is no import root: a module there named
        # like a PyPI package (tokamax/_src/jaxtyping.py) is the package's own, imported as
        # `tokamax._src.jaxtyping`, and on the path it would shadow the real one.
        if holder is not None and holder != here and not (holder / "__init__.py").is_file():
            roots.append(holder)
    out: list[str] = []
    for r in roots:
        if str(r) not in out and r != Path(r.anchor):
            out.append(str(r))
    return out


def _shadows(root: str) -> bool:
    """The root holds a package that is already imported from elsewhere (jax in a jax checkout)."""
    try:
        names = os.listdir(root)
    except OSError:
        return False
    for name in names:
        mod = sys.modules.get(name)
        where = getattr(mod, "__file__", None)
        if (mod is not None and where and os.path.isfile(os.path.join(root, name, "__init__.py"))
                and not os.path.abspath(where).startswith(os.path.join(root, name) + os.sep)):
            return True
    return False


class Stub:
    """A stand-in for anything a stubbed module holds: attributes, call results and items
    are stubs too; called with a single function or class it returns it (a decorator)."""

    def __init__(self, name: str, imports: "Imports"):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_imports", imports)

    def __getattr__(self, attr: str) -> "Stub":
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return Stub(f"{self._name}.{attr}", self._imports)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and isinstance(args[0], (types.FunctionType, type)):
            return args[0]
        self._imports.called(self._name)
        return Stub(f"{self._name}()", self._imports)

    def __getitem__(self, key: Any) -> "Stub":
        return Stub(f"{self._name}[...]", self._imports)

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __or__(self, other: Any) -> "Stub":
        return self  # in annotations: `jax.Array | torch.Tensor`

    __ror__ = __or__

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (_StubBase,)  # `class Runner(vllm.Base):` subclasses a plain class

    def __repr__(self) -> str:
        return f"<stub {self._name}>"


class _StubBase:
    def __init__(self, *args: Any, **kwargs: Any):
        pass


class _StubModule(types.ModuleType):
    def __getattr__(self, attr: str) -> Stub:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return Stub(f"{self.__name__}.{attr}", self.__imports__)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, imports: "Imports"):
        self.imports = imports

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        stubbed = any(fullname == m or fullname.startswith(m + ".") for m in self.imports.stubs)
        parent = any(m.startswith(fullname + ".") for m in self.imports.stubs)  # `--stub vllm.distributed`
        if stubbed or (parent and importlib.machinery.PathFinder.find_spec(fullname, path) is None):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__imports__ = self.imports
        self.imports.used.add(spec.name)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


@dataclass
class Imports:
    """One file's import setting (see the module docstring)."""
    path: str
    roots: list[str]
    stubs: tuple[str, ...] = ()
    used: set[str] = field(default_factory=set)          # the stub modules the code imported
    calls: list[tuple[str, str]] = field(default_factory=list)  # (stub called, where: line or file:line)

    def called(self, name: str) -> None:
        """Record a call into a stub, with the line that made it (`file:line`, the file's own
        line number alone)."""
        frame = sys._getframe(2)  # Stub.__call__'s caller
        f = os.path.abspath(frame.f_code.co_filename)
        where = str(frame.f_lineno) if f == os.path.abspath(self.path) else f"{Path(f).name}:{frame.f_lineno}"
        if (name, where) not in self.calls:
            self.calls.append((name, where))

    def assumptions(self) -> list[str]:
        """What every verdict states about the file's imports."""
        out = []
        if self.stubs:
            names = ", ".join(self.stubs)
            unused = [m for m in self.stubs if not any(u == m or u.startswith(m + ".") for u in self.used)]
            out.append(f"stubbed modules: {names} (--stub): code that uses them is not checked"
                       + (f" ({', '.join(unused)} never imported)" if unused else ""))
        if self.calls:
            out.append("stubs called, whose results are stand-ins: " + "; ".join(
                f"{name}() at {_where(line)}" for name, line in self.calls[:6]))
        return out

    def blame(self, error: str = "", since: int = 0, kind: str = "") -> str:
        """For a failure whose message shows a stub's value (`Stub`, `<stub ...>`), or an
        AttributeError, TypeError or ValueError after a stub call in the same statement or
        entry call (axlearn's `@attr.define` class read for its `__qualname__`; ring
        attention unpacking the shape of `einops.rearrange`'s stand-in): the stub call since
        `since` (an index into `calls`) that likely made it ('' if none shows)."""
        shows = "Stub" in error or "<stub " in error
        if not shows and not (kind in ("AttributeError", "TypeError", "ValueError") and self.calls[since:]):
            return ""
        if self.calls[since:]:
            name, line = self.calls[-1]
            return (f"; the code called the stub {name}() at {_where(line)}: its result is a stand-in, so code "
                    "that needs its value cannot be checked with --stub")
        return ("; a value from a stubbed module was used: a stub is a stand-in, so code that needs its value "
                "cannot be checked with --stub")


def _where(line: str) -> str:
    return f"line {line}" if line.isdigit() else line


@contextlib.contextmanager
def importing(path: str, tree: ast.Module | None = None, stubs: tuple[str, ...] = ()) -> Iterator[Imports]:
    """Run the file's imports from its repository's roots, with `stubs` stubbed (see the
    module docstring); afterwards the path and `sys.modules` are as before."""
    if tree is None:
        try:
            tree = ast.parse(Path(path).read_text())
        except (OSError, SyntaxError, ValueError):
            tree = ast.Module([], [])
    imports = Imports(path, repo_roots(tree, path), tuple(stubs))
    finder = _StubFinder(imports)
    before = set(sys.modules)
    on_path = {os.path.abspath(p or os.getcwd()) for p in sys.path}
    added = [r for r in imports.roots if r not in on_path]  # the roots whose modules are forgotten afterwards
    front = [r for r in added if not _shadows(r)]
    back = [r for r in added if r not in front]
    sys.path[:0] = front
    sys.path.extend(back)
    if stubs:
        sys.meta_path.insert(0, finder)
    flags = _absl_flags()
    try:
        yield imports
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        for r in front:
            if r in sys.path:  # the code may have edited the path itself
                sys.path.remove(r)  # the first occurrence: ours, at the front
        for r in back:
            if r in sys.path:
                del sys.path[len(sys.path) - 1 - sys.path[::-1].index(r)]  # the last: ours, at the end
        for name in set(sys.modules) - before:
            mod = sys.modules[name]
            where = getattr(mod, "__file__", None) or ""
            new_package = name.split(".")[0] not in before  # never a submodule of a package imported before
            if isinstance(mod, _StubModule) or (new_package and any(where.startswith(r + os.sep) for r in added)):
                del sys.modules[name]
        _forget_absl_flags(flags, before)
        importlib.invalidate_caches()


def _absl_flags() -> set[str]:
    """The absl flags defined now (none if absl is not imported)."""
    flags = sys.modules.get("absl.flags")
    return set(flags.FLAGS) if flags is not None else set()


def _forget_absl_flags(before: set[str], modules: set[str]) -> None:
    """Forget the absl flags the file's run defined by a call (JAX's test launchers call
    `config_with_absl()`) or from a module now forgotten: ringc runs a file once per N in one
    process, and absl refuses a flag defined twice (DuplicateFlagError at the second N). A
    flag a module defined when the run imported it stays with that module (it is not
    imported again), as do absl's own."""
    flags = sys.modules.get("absl.flags")
    if flags is None:
        return
    for name in set(flags.FLAGS) - before:
        module = flags.FLAGS.find_module_defining_flag(name) or ""
        if not module.startswith("absl.") and (module in modules or module not in sys.modules):
            with contextlib.suppress(Exception):   # (absl's API: a flag it will not forget stays)
                delattr(flags.FLAGS, name)


def _within(imports: Imports, name: str) -> bool:
    """The module would come from the file's own repository (a broken import there is the
    file's own error, not a package to install)."""
    top = name.split(".")[0]
    return any(os.path.isdir(os.path.join(r, top)) or os.path.isfile(os.path.join(r, top + ".py"))
               for r in imports.roots)


# Import names whose PyPI distribution has another name: `pip install attr` installs an
# unrelated package, `pip install zmq` an old shim.
PIP_NAMES = {"attr": "attrs", "zmq": "pyzmq", "yaml": "pyyaml", "sklearn": "scikit-learn",
             "skimage": "scikit-image", "cv2": "opencv-python", "PIL": "pillow", "bs4": "beautifulsoup4",
             "dateutil": "python-dateutil", "dotenv": "python-dotenv", "jwt": "PyJWT", "Crypto": "pycryptodome",
             "OpenSSL": "pyOpenSSL", "serial": "pyserial", "fitz": "PyMuPDF", "docx": "python-docx",
             "google.protobuf": "protobuf", "absl": "absl-py", "tensorflow_datasets": "tensorflow-datasets",
             "orbax": "orbax-checkpoint", "grain": "grain", "jax_triton": "jax-triton", "git": "GitPython"}


def pip_name(module: str) -> str:
    """The package `pip install` takes for an import name (`attr` -> `attrs`)."""
    return PIP_NAMES.get(module, module)


class MissingImport(ScheduleError):
    """A package the file needs is not installed (`missing_import`): the first thing to fix,
    before any other refusal of the same run."""


def missing_import(e: BaseException, path: str, imports: Imports | None = None,
                   line: int | None = None) -> ScheduleError | None:
    """The one message for a package the file needs that is not installed (None when `e` is
    not that: another error, or a module of the file's own repository)."""
    if not isinstance(e, ModuleNotFoundError) or not e.name:
        return None
    if imports is not None and _within(imports, e.name):
        return None
    top = e.name.split(".")[0]
    if line is None:
        line = _file_line(e, path)
    via = _first_other_file(e, path)
    through = f" (through {via})" if via else ""
    tops = [top] + [t for t in _also_missing(e, imports) if t != top]
    also = f"; it also imports {', '.join(f'`{t}`' for t in tops[1:])}, not installed either" if tops[1:] else ""
    elsewhere = _chain_missing([path] + ([_last_file(e)] if _last_file(e) else []), imports, tops)
    if elsewhere:
        also += ("; the modules it imports in turn import " + ", ".join(f"`{t}` ({where})" for t, where in elsewhere)
                 + ", not installed either")
        tops += [t for t, _ in elsewhere]
    return MissingImport(f"the file imports `{top}`{through}, which is not installed{also}", file=path, line=line,
                         fix=f"pip install {' '.join(pip_name(t) for t in tops)}, or pass {' '.join(f'--stub {t}' for t in tops)} if the "
                             "kernel does not need " + ("it" if len(tops) == 1 else "them"))


def _also_missing(e: BaseException, imports: Imports | None) -> list[str]:
    """The other top-level packages the importing file (the traceback's last file outside
    importlib) imports that are not installed either: one message names them all, so a
    user adds every `--stub` at once instead of one per run."""
    import importlib.util
    last = _last_file(e)
    if last is None:
        return []
    try:
        tops = _imported_tops(ast.parse(Path(last).read_text()))
    except (SyntaxError, UnicodeDecodeError, OSError):
        return []
    out = []
    for t in tops:
        if t in sys.modules or (imports is not None and (_within(imports, t) or t in imports.stubs)):
            continue
        try:
            if importlib.util.find_spec(t) is None:
                out.append(t)
        except (ImportError, ValueError):
            out.append(t)
    return out


_CHAIN_FILES = 2000  # the most of the repository's own modules followed for imports (`_chain_missing`)


def _module_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is imported, in source order: at module level and in
    its `if` and `with` blocks, not in functions, classes, `if TYPE_CHECKING:` or a `try` that
    handles errors (an optional import stays optional)."""
    def walk(body):
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield node
            elif isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    yield from walk(node.body)
                yield from walk(node.orelse)
            elif isinstance(node, ast.With):
                yield from walk(node.body)
            elif isinstance(node, ast.Try) and not node.handlers:
                yield from walk(node.body)
                yield from walk(node.finalbody)
    yield from walk(tree.body)


def _local_files(roots: list[Path], dotted: str) -> list[Path] | None:
    """The repository's files that importing `dotted` runs (each package's `__init__.py` on
    the way, then the module), from the first root holding its top package; None when no root
    holds it (an installed or missing package)."""
    parts = dotted.split(".")
    for root in roots:
        if not ((root / parts[0]).is_dir() or (root / f"{parts[0]}.py").is_file()):
            continue
        files, folder = [], root
        for k, part in enumerate(parts):
            if (folder / part / "__init__.py").is_file():
                files.append(folder / part / "__init__.py")
            elif (folder / f"{part}.py").is_file():
                files.append(folder / f"{part}.py")
                break
            elif not (folder / part).is_dir():
                break                                   # a name inside the module, not a module
            folder = folder / part
        return files
    return None


def _chain_missing(start: list[str], imports: Imports | None, known: list[str]) -> list[tuple[str, str]]:
    """The packages not installed that the file's own import chain imports, each with the first
    place that does (`file:line`): every module of the repository the file imports, and every
    one those import, followed as Python would import them (`_module_imports`). One message
    names what the next runs would stop on, one per run, and no package the file never
    imports (a benchmark's `import kernel`, a server's dependencies elsewhere in the
    repository)."""
    import importlib.util
    roots = [Path(r) for r in imports.roots] if imports is not None else []
    seen: set[Path] = set()
    found: dict[str, str] = {}
    stack: list[Path] = []
    for f in reversed(start):   # importing a module of a package runs its packages' `__init__.py` first
        f = Path(f).resolve()
        stack.append(f)
        folder = f.parent
        while (folder / "__init__.py").is_file() and folder.parent != folder:
            stack.append(folder / "__init__.py")
            folder = folder.parent
    while stack and len(seen) < _CHAIN_FILES:
        f = stack.pop()
        if f in seen:
            continue
        seen.add(f)
        try:
            tree = ast.parse(f.read_text())
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
            continue
        nxt: list[Path] = []
        for node in _module_imports(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = f.parent
                for _ in range(node.level - 1):
                    base = base.parent
                mods = [base / Path(*node.module.split("."))] if node.module else [base]
                for m in list(mods):
                    mods += [m / a.name for a in node.names]
                for m in mods:
                    nxt += [m / "__init__.py"] if (m / "__init__.py").is_file() else \
                        [m.with_suffix(".py")] if m.with_suffix(".py").is_file() else []
                continue
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] + [f"{node.module}.{a.name}" for a in node.names])
            for name in names:
                beside = [] if (f.parent / "__init__.py").is_file() else [f.parent]  # a script's own folder
                local = _local_files(beside + roots, name)
                if local is not None:
                    nxt += local
                    continue
                t = name.split(".")[0]
                if t in found or t in known or t in sys.modules or (imports is not None and t in imports.stubs):
                    continue
                try:
                    installed = importlib.util.find_spec(t) is not None
                except (ImportError, ValueError):
                    installed = False
                if not installed:
                    found[t] = f"{_shown(f)}:{node.lineno}"
        stack += reversed(nxt)
    return list(found.items())


def _shown(f: Path) -> str:
    """A file as its import path shows it: from its top package's folder."""
    return str(f.relative_to(_package_top(f.parent)))


def _last_file(e: BaseException) -> str | None:
    """The traceback's last Python file outside importlib: the file whose import failed."""
    tb, last = e.__traceback__, None
    while tb is not None:
        f = tb.tb_frame.f_code.co_filename
        if "importlib" not in f and not f.startswith("<") and f.endswith(".py"):
            last = f
        tb = tb.tb_next
    return last


def _file_line(e: BaseException, path: str) -> int | None:
    target, tb, line = os.path.abspath(path), e.__traceback__, None
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == target:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _first_other_file(e: BaseException, path: str) -> str | None:
    """The last file of the traceback, outside importlib, when it is not `path`: the package
    `__init__.py` whose import failed."""
    target, tb, last = os.path.abspath(path), e.__traceback__, None
    while tb is not None:
        f = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if f == target:
            last = None
        elif "importlib" not in f and not f.startswith("<"):
            last = f"{Path(f).parent.name}/{Path(f).name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return last
