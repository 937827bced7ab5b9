"""The package's layers (docs/architecture.md): each sub-package imports only
those above it, and no module imports one that imports it back."""
import ast
from pathlib import Path

import mpips

ROOT = Path(mpips.__file__).parent
# in order: a layer may import the ones before it, and the settings
LAYERS = ["paradigms", "training", "io", "runtime", "analysis", "experiments"]
SETTINGS = {"config", "validate", "settings", "heterogeneity", "node_links", "__version__"}


def _imports():
    """{module: modules of mpips it imports (at any depth of its code)}."""
    modules = {".".join(p.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__"): p
               for p in ROOT.rglob("*.py")}
    out = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(parts + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    found.add(full if full in modules else target)
        out[name] = found & set(modules)
    return out


def test_each_layer_imports_only_the_layers_above_it():
    wrong = []
    for module, imported in _imports().items():
        layer = module.split(".")[1] if module.count(".") else ""
        if layer not in LAYERS:
            continue   # the entry points (cli, api, config) may import any layer
        allowed = set(LAYERS[:LAYERS.index(layer) + 1]) | SETTINGS | {""}
        wrong += [f"{module} imports {m}" for m in imported
                  if (m.split(".")[1] if m.count(".") else "") not in allowed]
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_circle():
    graph = _imports()
    circles = []

    def visit(module, path):
        for m in graph.get(module, ()):
            if m in path:
                circles.append(" -> ".join(path[path.index(m):] + [m]))
            elif len(path) < 12:
                visit(m, path + [m])

    for module in graph:
        visit(module, [module])
    assert not circles, "\n".join(sorted(set(circles))[:10])


def test_the_configuration_imports_only_the_settings_and_the_paradigms():
    """The settings every layer reads import no layer but the paradigms (whose
    options they hold): config.py imported training/emulation once, while
    training/data.py imported config, an arrow both ways between them."""
    graph = _imports()
    for module in ("mpips.config", "mpips.settings", "mpips.heterogeneity", "mpips.node_links", "mpips.validate"):
        layers = {m.split(".")[1] for m in graph[module] if m.count(".")}
        assert layers <= SETTINGS | {"paradigms"}, (module, layers)
