"""The layout the code holds itself to: no import cycle within common/, and no import against the folder order
docs/pipeline.md states, imports inside functions included."""

import ast
import glob
import os
import re

from conftest import ROOT


def module_imports(root, package="common"):
    """Every module of ``package`` under ``root`` (dotted name → the ``(line, module)`` of each module of the package
    it imports, wherever the ``import`` statement stands in the file: ``from X import Y`` imports X.Y where Y is a
    module, else X)."""
    paths = {os.path.relpath(p, root)[:-3].replace(os.sep, ".").removesuffix(".__init__"): p
             for p in glob.glob(os.path.join(root, package, "**", "*.py"), recursive=True)}
    imports = {}
    for module, path in paths.items():
        own = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        found = set()
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update((node.lineno, alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = own.split(".")[:len(own.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                found.update((node.lineno, f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else base)
                             for alias in node.names)
        imports[module] = sorted((line, name) for line, name in found if name in paths)
    return imports


def import_cycles(root, package="common"):
    """The modules of ``package`` under ``root`` that import one another round a cycle, as sorted groups (the
    strongly connected components of more than one module)."""
    imports = module_imports(root, package)
    edges = {module: {name for _, name in found if name in imports and name != module}
             for module, found in imports.items()}

    def reachable(start):
        seen, todo = set(), [start]
        while todo:
            for target in edges[todo.pop()] - seen:
                seen.add(target)
                todo.append(target)
        return seen
    reach = {module: reachable(module) for module in imports}
    groups = {tuple(sorted({m} | {n for n in reach[m] if m in reach[n]})) for m in imports if m in reach[m]}
    return sorted(list(group) for group in groups)


def stated_order(path=os.path.join(ROOT, "docs", "pipeline.md")):
    """The folders of common/ in the order docs/pipeline.md states them (`` `models` ← `data` ← … ``): each imports
    only those on its left."""
    with open(path, encoding="utf-8") as f:
        chain = re.search(r"`\w+`(?:\s+←\s+`\w+`)+", f.read())
    return re.findall(r"`(\w+)`", chain.group(0))


def imports_against_order(root, order, package="common"):
    """Each import in ``package`` under ``root`` against ``order``, as sorted ``(module, line, imported module)``: a
    folder of ``order`` importing one on its right, or a module outside those folders (common/'s own modules and
    packages such as ``outdir/``, which every folder may import) importing any of them."""
    rank = {folder: i for i, folder in enumerate(order)}
    imports = module_imports(root, package)

    def folder(name):
        parts = name.split(".")
        return parts[1] if len(parts) > 1 and parts[0] == package and parts[1] in rank else None

    against = set()
    for module, found in imports.items():
        home = folder(module)
        for line, name in found:
            if folder(name) is None or folder(name) == home:
                continue
            if home is None or rank[folder(name)] > rank[home]:
                against.add((module, line, name))
    return sorted(against)


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


def test_the_stated_order_is_read_from_the_docs():
    assert stated_order() == ["models", "extract", "data", "distill", "eval", "train"]


def test_an_import_against_the_order_is_found_inside_a_function_and_from_common_s_own_modules(tmp_path):
    package = tmp_path / "common"
    for folder in ("models", "eval", "train", "outdir"):
        (package / folder).mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "io.py").write_text("def read():\n    from common.models import encoder\n")
    (package / "outdir" / "folders.py").write_text("from common import io\nfrom common.train import loop\n")
    (package / "models" / "encoder.py").write_text("from common import io\nfrom common.outdir import folders\n")
    (package / "eval" / "embedding.py").write_text("from common.models import encoder\n\n\n"
                                                   "def launched():\n    from ..train.loop import SIZE\n")
    (package / "train" / "loop.py").write_text("from common.eval import embedding\nfrom . import steps\n")
    (package / "train" / "steps.py").write_text("import common.eval.embedding\n")
    assert imports_against_order(tmp_path, ["models", "eval", "train"]) == [
        ("common.eval.embedding", 5, "common.train.loop"), ("common.io", 2, "common.models.encoder"),
        ("common.outdir.folders", 2, "common.train.loop")]


def test_common_imports_only_along_the_stated_order():
    assert imports_against_order(ROOT, stated_order()) == []
