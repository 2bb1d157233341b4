"""The package's layers (docs/architecture.md): a module may import its own layer and the layers below,
never one above. Read from the source (every import statement, function-local ones too), so the rule
holds from now on without anyone having to remember it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "platform" / "slm"

# Lowest first. A module's layer is that of its longest matching prefix; a package's config schema
# (``slm.<package>.config``) is in its package's layer, and the job root (``slm.job``), which gathers every
# section, is at the top with the commands that load it. No exception.
LAYERS = [
    ["slm.config", "slm.artifacts", "slm.runtime", "slm.layout", "slm.progress"],
    ["slm.corpus"],
    ["slm.data"],
    ["slm.models"],
    ["slm.methods"],
    ["slm.train"],
    ["slm.tune"],
    ["slm.job", "slm.pipeline", "slm.export", "slm.harness", "slm.cli", "slm.__main__"],
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


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every slm import in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("slm")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("slm"):
            # `from slm import methods` imports the subpackage slm.methods
            names = [f"{node.module}.{a.name}" for a in node.names] if node.module == "slm" else [node.module]
            found += [(node.lineno, n) for n in names]
    return found


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
