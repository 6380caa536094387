"""The package's tree shows its architecture: front doors and vocabulary at the top, one role
per subpackage, old module paths still importable."""

from __future__ import annotations

import ast
import importlib
import sys
import warnings
from pathlib import Path

import pytest

import marlgrid
from marlgrid._moved import MOVED
from marlgrid.policies import POLICIES, ScriptedPolicy, policy_class

ROOT = Path(__file__).resolve().parents[1]


def test_the_top_level_holds_ten_modules_at_most():
    modules = sorted(p.name for p in (ROOT / "marlgrid").glob("*.py"))
    assert len(modules) <= 10, modules


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_registered_scripted_policy_lives_in_the_policies_package(name):
    cls = policy_class(name)
    assert issubclass(cls, ScriptedPolicy)
    assert cls.__module__.startswith("marlgrid.policies."), (name, cls.__module__)


def test_no_script_in_experiments_edits_sys_path():
    edits = []
    for path in sorted((ROOT / "experiments").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr == "path"
                    and isinstance(node.value, ast.Name) and node.value.id == "sys"):  # fmt: skip
                edits.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not edits, edits


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_module_path_imports_the_same_module_with_a_warning(old, new, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        alias = importlib.import_module(old)
    assert alias is importlib.import_module(new)
    assert alias.__name__ == alias.__spec__.name == new
    assert any(new in str(w.message) and w.category is DeprecationWarning for w in caught)


def test_the_package_imports_no_moved_path_itself():
    olds = tuple(MOVED)
    offenders = []
    for path in sorted((ROOT / "marlgrid").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n in olds]
    assert not offenders, offenders
    assert marlgrid.__version__


def test_a_scripted_policy_is_no_expert_unless_it_declares_it():
    class Wanderer(ScriptedPolicy):
        pass

    assert Wanderer.is_expert is False
    experts = {name for name in POLICIES if policy_class(name).is_expert}
    assert experts == {"oracle", "discoverer", "goal_seeker"}


def test_the_kernels_get_the_engines_arrays_by_name():
    """Each field of the kernels' records is the engine's array of that name (no position to
    swap): the step record's and the view record's."""
    vec = marlgrid.make_vec("MarlGrid-GoalCycle-13x13-3Agents-v0", num_envs=2)
    engine = vec.engine
    aliases = {"scratch_b": "_scratch_b", "scratch_i": "_scratch_i", "envs": "all_envs",
               "out": "sym", "opaque": "_opaque"}  # fmt: skip
    for record in (engine._step_arrays, engine._view_arrays):
        for name, array in record._asdict().items():
            assert array is getattr(engine, aliases.get(name, name)), name


def test_every_package_folder_is_a_package_a_wheel_would_ship():
    """``packages = find:`` ships only folders with an ``__init__.py``: every folder of the
    package holding modules has one, and none is under an ignored name such as ``runs/``."""
    import subprocess

    from setuptools import find_packages

    found = set(find_packages(str(ROOT), include=["marlgrid", "marlgrid.*"]))
    modules = [p for p in (ROOT / "marlgrid").rglob("*.py") if "__pycache__" not in p.parts]
    folders = {".".join(p.parent.relative_to(ROOT).parts) for p in modules}
    assert folders <= found, sorted(folders - found)
    inits = [str(p.relative_to(ROOT)) for p in (ROOT / "marlgrid").rglob("__init__.py")]
    ignored = subprocess.run(["git", "check-ignore", *inits], cwd=ROOT, capture_output=True,
                             text=True).stdout.split()  # fmt: skip
    assert not ignored, ignored
