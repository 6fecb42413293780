"""The shape of the code stays as docs/ARCHITECTURE.md draws it: the UI on top of the backend, the backend
free of UI code, the process toolkit at the bottom, and no module importing one that imports it back."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("backend", "app", "cli")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for d in PACKAGES if (ROOT / d).is_dir() for p in (ROOT / d).rglob("*.py")}
MODULES["launch"] = ROOT / "launch.py"


def _runs_as_program(node: ast.AST) -> bool:
    """`if __name__ == "__main__":`, where a process's entry point loads what it needs."""
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and isinstance(test, ast.Compare) and getattr(test.left, "id", "") == "__name__" \
        and any(getattr(c, "value", None) == "__main__" for c in test.comparators)


def _imports(path: Path | str, as_program: bool = True) -> set[str]:
    """Every module it imports, at the top or inside a function (a lazy import is still a dependency), by an
    import statement or by name at run time (`import_module("x")`, or a loop over named modules into it); not
    those only type checkers read (`if TYPE_CHECKING:`). A name computed at run time (a mode's module) is not
    seen. A path, or the source itself. Without as_program, not what runs only when it is the program: a module
    imported is never that, so those imports make no cycle."""
    tree = ast.parse(path.read_text() if isinstance(path, Path) else path)
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING":
            node.body = []
        elif not as_program and _runs_as_program(node):
            node.body = []
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names | _runtime_imports(tree)


def _constant_names(node: ast.AST | None, assigned: dict[str, ast.AST]) -> set[str]:
    """The strings an expression is, when they are written in the module: a literal, a tuple or list of them, or
    a module-level name bound to one."""
    if isinstance(node, ast.Name) and node.id in assigned:
        return _constant_names(assigned[node.id], assigned)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_constant_names(e, assigned) for e in node.elts))
    return set()


def _runtime_imports(tree: ast.Module) -> set[str]:
    assigned = {t.id: node.value for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)}
    loops = {}  # a loop's variable -> what it goes over, for `for module in NAMES: import_module(module)`
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name):
            loops.setdefault(node.target.id, []).append(node.iter)
    names = set()
    for node in ast.walk(tree):
        called = getattr(node, "func", None)
        if isinstance(node, ast.Call) and getattr(called, "id", getattr(called, "attr", "")) == "import_module" \
                and node.args:
            arg = node.args[0]
            for named in loops.get(arg.id, [arg]) if isinstance(arg, ast.Name) else [arg]:
                names |= _constant_names(named, assigned)
    return names


GRAPH = {m: {t for t in _imports(p) if t in MODULES and t != m and t not in PACKAGES}
         for m, p in MODULES.items()}
IMPORTED = {m: {t for t in _imports(p, as_program=False) if t in MODULES and t != m and t not in PACKAGES}
            for m, p in MODULES.items()}  # what importing each module imports


def _offenders(where: str, forbidden) -> list[str]:
    return sorted(f"{m} imports {t}" for m, p in MODULES.items() if m == where or m.startswith(where + ".")
                  for t in _imports(p) if forbidden(t))


def test_imports_by_name_at_run_time_count():
    assert "backend.evals" in _imports('from importlib import import_module\nimport_module("backend.evals")\n')
    assert "backend.sweeps" in _imports('import importlib\ndef f():\n    importlib.import_module("backend.sweeps")\n')
    looped = 'NAMES = ("backend.labeling", "backend.sweeps")\ndef f():\n    for m in NAMES:\n        import_module(m)\n'
    assert {"backend.labeling", "backend.sweeps"} <= _imports(looped)
    assert not _imports("def f(spec):\n    import_module(spec.module)\n")  # computed: a registry's, not seen


def test_backend_never_imports_the_ui():
    assert not _offenders("backend", lambda t: t.split(".")[0] in ("gradio", "app", "cli", "launch"))


def test_the_ui_never_imports_the_cli():
    assert not _offenders("app", lambda t: t.split(".")[0] in ("cli", "launch"))


def test_the_process_toolkit_imports_no_domain():
    assert not _offenders("backend.core", lambda t: t.startswith("backend.") and not t.startswith("backend.core"))


def test_the_mode_registry_is_plain_data():
    assert not _offenders("backend.core.mode_registry", lambda t: t.startswith("backend.") or t in ("torch", "trl"))


def test_no_import_cycles():
    seen, stack, cycles = {}, [], []

    def visit(m):
        seen[m] = "open"
        stack.append(m)
        for t in sorted(IMPORTED[m]):
            if seen.get(t) == "open":
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in seen:
                visit(t)
        stack.pop()
        seen[m] = "done"

    for m in sorted(IMPORTED):
        if m not in seen:
            visit(m)
    assert not cycles, "import cycles: " + "; ".join(cycles)


def test_test_modules_have_names_of_their_own():
    """pytest imports test modules by basename: two test_x.py in different folders break collection of both."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


# The floors, lowest first: a module imports (at the top or inside a function) only its own floor and those below.
LAYERS = (
    ("backend.core", "backend.hub", "backend.reporting"),
    ("backend.models", "backend.metrics_plot"),
    ("backend.rewards", "backend.tools", "backend.ppo", "backend.serving", "backend.gguf_export"),
    ("backend.data", "backend.config"),
    ("backend.modes", "backend.playground"),
    ("backend.doctor",),
    ("backend.runs",),
    ("backend.evals", "backend.sweeps"),
    ("backend.labeling", "backend.export"),
    ("backend.workspace",),  # loads the packages that register with the store: each process's entry point calls it
    ("backend.chat", "backend.monitoring"),
    ("app",),
    ("cli", "launch"),
)
# The imports that still climb, each with why; a new one fails the test below.
CLIMBS = {
    ("backend.models.ref", "backend.runs.store"): "a run:<id> model reference reads the run store",
    ("backend.models.from_run", "backend.runs.store"): "a run's saved model is found through the run store",
    ("backend.modes.generation_eval", "backend.evals.spec"): "evaluation while training uses the Evaluate tab's",
    ("backend.modes.generation_eval", "backend.evals.generate"): "generation and scorers",
    ("backend.modes.generation_eval", "backend.evals.scorers"): "",
    ("backend.modes.rl_common", "backend.runs.gpus"): "vLLM's trainer arguments come with the GPU plan",
    ("backend.ppo.trainer", "backend.modes.fast_generation"): "the own PPO generates as GRPO does",
    # process entry points (`if __name__ == "__main__":`, a package's __main__): each loads the packages that
    # register with the store before it opens one
    ("backend.runs.supervisor", "backend.workspace"): "a run's end dispatches queued evaluations",
    ("backend.runs.worker", "backend.workspace"): "a warm supervisor's run ends as the supervisor's does",
    ("backend.serving.process", "backend.workspace"): "a run:<id> model opens the store",
    ("backend.sweeps.__main__", "backend.workspace"): "the sweep driver's trials are runs",
    ("backend.evals.__main__", "backend.workspace"): "an evaluation's store has the other packages' tables",
    ("backend.labeling.generator", "backend.workspace"): "the label generator's store, likewise",
}


def _floor(module: str) -> int | None:
    for i, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return i
    return None


def test_every_package_has_a_floor():
    assert [m for m in MODULES if m not in PACKAGES and _floor(m) is None] == []


def test_no_module_imports_a_higher_floor():
    climbs = {(m, t) for m, targets in GRAPH.items() for t in targets
              if _floor(t) is not None and _floor(m) is not None and _floor(t) > _floor(m)}
    assert sorted(climbs - set(CLIMBS)) == [], "imports from a lower floor to a higher one (see LAYERS)"
    assert sorted(set(CLIMBS) - climbs) == [], "gone: remove them from CLIMBS"
