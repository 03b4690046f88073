"""The layout the code holds itself to: no import cycle within common/, imports inside functions included."""

import ast
import glob
import os

from conftest import ROOT


def import_cycles(root, package="common"):
    """The modules of ``package`` under ``root`` that import one another round a cycle, as sorted groups (the
    strongly connected components of more than one module); every ``import`` statement counts, wherever it stands
    in the file."""
    paths = glob.glob(os.path.join(root, package, "**", "*.py"), recursive=True)
    modules = {os.path.relpath(p, root)[:-3].replace(os.sep, ".").removesuffix(".__init__"): p for p in paths}
    edges = {}
    for module, path in modules.items():
        own = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        found = set()
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = own.split(".")[:len(own.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                found.update([base] + [f"{base}.{alias.name}" for alias in node.names])
        edges[module] = {name for name in found if name in modules and name != module}

    def reachable(start):
        seen, todo = set(), [start]
        while todo:
            for target in edges[todo.pop()] - seen:
                seen.add(target)
                todo.append(target)
        return seen
    reach = {module: reachable(module) for module in modules}
    groups = {tuple(sorted({m} | {n for n in reach[m] if m in reach[n]})) for m in modules if m in reach[m]}
    return sorted(list(group) for group in groups)


def test_an_import_inside_a_function_closes_a_cycle_as_one_at_the_top_does(tmp_path):
    package = tmp_path / "common"
    (package / "train").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "io.py").write_text("import json\n")
    (package / "train" / "__init__.py").write_text("")
    (package / "train" / "run.py").write_text("from common.train import loop\nfrom common import io\n")
    (package / "train" / "loop.py").write_text("def read():\n    from .run import RESULT\n")
    assert import_cycles(tmp_path) == [["common.train.loop", "common.train.run"]]


def test_common_has_no_import_cycle():
    assert import_cycles(ROOT) == []
