"""The package's layers (docs/architecture.md): a module may import its own layer and the layers below,
never one above; and the rules the docs state beside the layers: models and methods import nothing of
``data/`` (nor of the corpus), no Ray in ``models/``, ``methods/`` or ``corpus/``, and the ground floor
imports Ray only inside the functions that start or ask it (the quick commands never import Ray). Read
from the source (every import statement, function-local ones too), so the rules hold from now on without
anyone having to remember them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "platform" / "slm"

# Lowest first. A module's layer is that of its longest matching prefix; a package's config schema
# (``slm.<package>.config``) is in its package's layer, and the job root (``slm.job``), which gathers every
# section, is at the top with the commands that load it. No exception.
LAYERS = [
    ["slm.config", "slm.artifacts", "slm.runtime", "slm.layout", "slm.progress", "slm.log"],
    ["slm.corpus", "slm.browser"],  # the browser fetches Debian packages as the corpus does
    ["slm.data"],
    ["slm.models"],
    ["slm.methods"],
    ["slm.train"],
    ["slm.records"],  # a sweep's plan and results schema: shared by the running side (tune) and the reading side
    ["slm.tune"],
    ["slm.analysis"],
    ["slm.job", "slm.stages", "slm.pipeline", "slm.export", "slm.harness", "slm.cli", "slm.__main__"],
]


def layer(module: str) -> int | None:
    best = None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (i, len(prefix))
    return None if best is None else best[0]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# Beside the order: layers that must not import a lower one either, and where Ray may be imported.
NOT_IMPORTED = {"slm.models": ["slm.data", "slm.corpus"], "slm.methods": ["slm.data", "slm.corpus"],
                # issue 65: reading a sweep needs none of the running side's internals, only the shared records
                "slm.analysis": ["slm.tune"]}
NO_RAY = ["slm.models", "slm.methods", "slm.corpus"]
RAY_ONLY_IN_FUNCTIONS = LAYERS[0]


def imports(path: Path, package: str = "slm", top_level: bool = False) -> list[tuple[int, str]]:
    """(line, module) of every import of ``package`` in the file; ``top_level``: only those that run when
    the module is imported (not inside a function)."""
    tree = ast.parse(path.read_text(), str(path))
    local = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             for n in ast.walk(f) if n is not f} if top_level else set()
    found = []
    for node in ast.walk(tree):
        if id(node) in local:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if within(a.name, package)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and within(node.module or "", package):
            # `from slm import methods` imports the subpackage slm.methods
            names = [f"{node.module}.{a.name}" for a in node.names] if node.module == package else [node.module]
            found += [(node.lineno, n) for n in names]
    return found


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer():
    assert [module_name(p) for p in SOURCES if layer(module_name(p)) is None and module_name(p) != "slm"] == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: module_name(p))
def test_no_module_imports_a_higher_layer(path: Path):
    mine = layer(module_name(path))
    if mine is None:
        return
    upward = [f"line {line}: {target} (layer {layer(target)} > {mine})" for line, target in imports(path)
              if layer(target) is not None and layer(target) > mine]
    assert upward == [], f"{module_name(path)} imports a higher layer:\n" + "\n".join(upward)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: module_name(p))
def test_the_documented_rules_beside_the_order(path: Path):
    """Models and methods read no data stage (a model can be read, tested and reused alone); the reading side
    (analysis) imports nothing of the running side (tune), only the records both share (``slm.records``); no Ray
    in models, methods or the corpus; the ground floor imports Ray only where a function needs it."""
    name = module_name(path)
    broken = [f"line {line}: {target} ({owner} imports nothing of {banned})"
              for owner, bans in NOT_IMPORTED.items() if within(name, owner)
              for line, target in imports(path) for banned in bans if within(target, banned)]
    if any(within(name, owner) for owner in NO_RAY):
        broken += [f"line {line}: {target} (no Ray in {name})" for line, target in imports(path, "ray")]
    if any(within(name, owner) for owner in RAY_ONLY_IN_FUNCTIONS):
        broken += [f"line {line}: {target} (the ground floor imports Ray inside functions only)"
                   for line, target in imports(path, "ray", top_level=True)]
    assert broken == [], f"{name}:\n" + "\n".join(broken)


def test_the_rules_find_what_they_forbid(tmp_path):
    """The rule checks see an import at any depth, and tell a module-level import from a function's."""
    source = tmp_path / "m.py"
    source.write_text("import ray.data\nfrom slm.data import pack\n\ndef f():\n    import ray\n    from slm import data\n")
    assert imports(source, "ray") == [(1, "ray.data"), (5, "ray")]
    assert imports(source, "ray", top_level=True) == [(1, "ray.data")]
    assert imports(source) == [(2, "slm.data"), (6, "slm.data")]


ABOVE_METHODS = [p for p in SOURCES if (layer(module_name(p)) or 0) > layer("slm.methods")]


@pytest.mark.parametrize("path", ABOVE_METHODS, ids=lambda p: module_name(p))
def test_no_module_above_the_methods_tests_a_method_s_name(path: Path):
    """docs/architecture.md: everything that differs between methods is on the method; nothing outside
    ``slm/methods/`` compares with a method's name (``methods.BASELINE`` and the other constants say which)."""
    from slm import methods

    names = set(methods.names()) | {methods.DISTILLED}
    found = [f"line {node.lineno}: {ast.unparse(node)}" for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Compare)
             and any(isinstance(c, ast.Constant) and c.value in names for c in [node.left, *node.comparators])]
    assert found == [], f"{module_name(path)} tests a method's name:\n" + "\n".join(found)
