"""Imports run one way, with no exception, lazy imports inside functions included:

    foundation <- nn <- models <- {data, training, inference} <- tasks <- compiling <- programs

Each layer is a folder of jaxtrans (foundation: the modules at jaxtrans's root and
workdirs/), read off the path of a module; the one exception is the thin entry modules at
the root that keep the names of ``python -m jaxtrans.NAME`` (ENTRY_MODULES, programs).
data, training and inference are siblings: none imports another.
Inside data, the task-data folders (translation/, bert/, ner/, qa/) never import one
another; all may use tokenizers/ and the shared modules at data's root, and tokenizers/
imports no task-data folder.
"""

import ast
import os

from paths import REPO

PACKAGE = os.path.join(REPO, "jaxtrans")

# The layer of each folder of jaxtrans, and its rank in the order; ROOT: the modules at
# jaxtrans's root (errors, vocab, config_sections, compilation_cache).
ROOT = ""
LAYERS = {
    ROOT: ("foundation", 0),
    "workdirs": ("foundation", 0),
    "nn": ("nn", 1),
    "models": ("models", 2),
    "data": ("data", 3),
    "training": ("training", 3),
    "inference": ("inference", 3),
    "tasks": ("tasks", 4),
    "compiling": ("compiling", 5),
    "programs": ("programs", 6),
}
# The root modules that are program names (python -m jaxtrans.NAME), each a thin entry into
# jaxtrans/programs/ (test_entry_modules_only_call_their_program).
ENTRY_MODULES = ("compile", "export", "plot", "prepare")
# The largest module allowed, and the modules allowed more, with the reason (none now).
MAX_LINES = 400
LONG_MODULES: dict[str, str] = {}


def modules() -> list[str]:
    """Paths of every .py file of the package, relative to the repository."""
    found = []
    for root, _, files in os.walk(PACKAGE):
        found += [os.path.relpath(os.path.join(root, f), REPO) for f in files if f.endswith(".py")]
    return sorted(found)


def module_name(path: str) -> str:
    parts = path[: -len(".py")].split(os.sep)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(name: str, source: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, module) of every jaxtrans import in the source of module ``name``, wherever
    it is written (at the top, or lazily inside a function)."""
    package = name if is_package else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from jaxtrans import tasks` imports the package jaxtrans.tasks.
            names = [f"{target}.{alias.name}" for alias in node.names]
            found += [(node.lineno, n) for n in (names if target == "jaxtrans" else [target])]
    return [(line, module) for line, module in found if module.split(".")[0] == "jaxtrans"]


def layer_of(module: str) -> tuple[str, int] | None:
    """The layer of a module of jaxtrans: that of its folder, read off its dotted name (a
    root module's: ROOT's, or programs for an entry module); None for the package itself
    and for a folder that LAYERS does not place."""
    parts = module.split(".")
    if len(parts) < 2:
        return None
    if os.path.isdir(os.path.join(PACKAGE, parts[1])):
        return LAYERS.get(parts[1])
    return LAYERS["programs"] if parts[1] in ENTRY_MODULES else LAYERS[ROOT]


def violations(path: str, name: str, source: str) -> list[str]:
    """The imports of one module that run against the layer order."""
    own = layer_of(name)
    if own is None:
        return []
    wrong = []
    for line, target in imported_modules(name, source, path.endswith("__init__.py")):
        other = layer_of(target)
        if other is not None and other[0] != own[0] and other[1] >= own[1]:
            wrong.append(f"{path}:{line} ({own[0]}) imports {target} ({other[0]})")
    return wrong


# The folders of jaxtrans/data that hold one kind of data each.
TASK_DATA = ("translation", "bert", "ner", "qa")


def data_folder(module: str) -> str | None:
    """The folder of jaxtrans.data a module is in (``tokenizers``, a TASK_DATA name), or
    None for data's shared root modules and modules outside data."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "data" and parts[2] in (*TASK_DATA, "tokenizers"):
        return parts[2]
    return None


def data_violations(path: str, name: str, source: str) -> list[str]:
    """Imports of one data module that cross between task-data folders, or from
    tokenizers/ into one."""
    own = data_folder(name)
    if own is None:
        return []
    wrong = []
    for line, target in imported_modules(name, source, path.endswith("__init__.py")):
        other = data_folder(target)
        if other in TASK_DATA and other != own:
            wrong.append(f"{path}:{line} (data/{own}) imports {target} (data/{other})")
    return wrong


def test_every_module_of_the_package_has_a_layer():
    unplaced = [
        p for p in modules() if module_name(p) != "jaxtrans" and not layer_of(module_name(p))
    ]
    assert not unplaced, f"add their folders to LAYERS: {unplaced}"


def test_every_folder_named_in_layers_exists():
    folders = {name for name in LAYERS if name != ROOT}
    missing = sorted(f for f in folders if not os.path.isdir(os.path.join(PACKAGE, f)))
    assert not missing, f"LAYERS names folders that are not there: {missing}"


def test_entry_modules_only_call_their_program():
    # python -m jaxtrans.NAME keeps its name; the program is jaxtrans/programs/NAME.py.
    for name in ENTRY_MODULES:
        with open(os.path.join(PACKAGE, f"{name}.py"), encoding="utf-8") as f:
            source = f.read()
        imported = [module for _, module in imported_modules(f"jaxtrans.{name}", source)]
        assert imported == [f"jaxtrans.programs.{name}"], f"jaxtrans/{name}.py: {imported}"
        assert len(source.splitlines()) <= 12, f"jaxtrans/{name}.py is more than an entry"


def test_layers_are_read_off_the_folders():
    assert layer_of("jaxtrans.errors") == ("foundation", 0)
    assert layer_of("jaxtrans.workdirs.checkpoints") == ("foundation", 0)
    assert layer_of("jaxtrans.compiling.compile_report") == ("compiling", 5)
    assert layer_of("jaxtrans.export") == ("programs", 6)
    assert layer_of("jaxtrans.tasks") == ("tasks", 4)  # from jaxtrans import tasks
    assert layer_of("jaxtrans") is None
    # The folders' order holds: a task may not compile ahead, nor a checkpoint train.
    into = "from jaxtrans.compiling import compiled_programs\n"
    assert violations("tasks/p.py", "jaxtrans.tasks.p", into)
    assert violations("workdirs/p.py", "jaxtrans.workdirs.p", "import jaxtrans.training.loop\n")
    assert violations("compiling/p.py", "jaxtrans.compiling.p", "from jaxtrans import export\n")


def test_imports_never_run_back_up_the_layers():
    wrong = []
    for path in modules():
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            wrong += violations(path, module_name(path), f.read())
    assert not wrong, "imports against the layer order:\n" + "\n".join(wrong)


def test_task_data_folders_never_import_one_another():
    wrong = []
    for path in modules():
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            wrong += data_violations(path, module_name(path), f.read())
    assert not wrong, "imports between the folders of jaxtrans/data:\n" + "\n".join(wrong)


def test_the_data_rule_catches_crossings_and_allows_shared_modules():
    crossing = "from jaxtrans.data.ner import conll\n"
    assert data_violations("data/qa/p.py", "jaxtrans.data.qa.p", crossing) == [
        "data/qa/p.py:1 (data/qa) imports jaxtrans.data.ner (data/ner)"
    ]
    into = "def f():\n    from jaxtrans.data.translation.sources import x\n"
    assert data_violations("data/tokenizers/p.py", "jaxtrans.data.tokenizers.p", into)
    shared = (
        "from jaxtrans.data import reserved_pieces\nfrom jaxtrans.data.tokenizers import words\n"
        "from jaxtrans.data.iterators import x\nfrom jaxtrans.data.bert import glue\n"
    )
    assert data_violations("data/bert/p.py", "jaxtrans.data.bert.p", shared) == []


def test_no_two_modules_of_the_package_share_a_file_name():
    # demo.py is the one name each task-data folder gives its built-in corpus; an entry
    # module at the root is named for its program (jaxtrans/export.py: programs/export.py).
    entries = {os.path.join("jaxtrans", f"{name}.py") for name in ENTRY_MODULES}
    by_name: dict[str, list[str]] = {}
    for path in set(modules()) - entries:
        name = os.path.basename(path)
        if name not in ("__init__.py", "demo.py"):
            by_name.setdefault(name, []).append(path)
    twice = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not twice, f"rename one of each: {twice}"


def test_the_import_walk_catches_lazy_imports_and_sibling_imports():
    # training lazily importing a task; nn importing models; inference importing data.
    lazy = "def f():\n    from jaxtrans.tasks import translation\n    import jaxtrans.models\n"
    assert violations("training/probe.py", "jaxtrans.training.probe", lazy) == [
        "training/probe.py:2 (training) imports jaxtrans.tasks (tasks)"
    ]
    assert violations("nn/probe.py", "jaxtrans.nn.probe", "from jaxtrans import models\n")
    assert violations("inference/p.py", "jaxtrans.inference.p", "from ..data import vocab\n")
    # Within a package, and downwards, is allowed.
    allowed = "from jaxtrans.tasks import base\nfrom jaxtrans.training.step import x\n"
    assert violations("tasks/probe.py", "jaxtrans.tasks.probe", allowed) == []


def test_no_module_is_over_400_lines_but_the_named_exceptions():
    long = {}
    for path in modules():
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            count = sum(1 for _ in f)
        if count > MAX_LINES and path not in LONG_MODULES:
            long[path] = count
    assert not long, f"split these modules by concern: {long}"
