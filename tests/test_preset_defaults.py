"""Presets (``conf/``) hold only what differs from what they extend.

A key restating the value it would have anyway (its schema dataclass's default, the value of
the preset it inherits, or of the presets composed before it) hides which settings a preset
really chooses, and keeps a stale copy when the default changes. For every preset of the groups
below, each key is checked in the compositions the preset takes part in: the preset's own keys
are blanked (its defaults list kept) and the key must then compose to another value in at least
one of them. A few keys are stated on purpose (:data:`NAMING`, :data:`STATED`).

Not checked: ``roles/`` (each entry states who plays an agent, defaults included, as a table)
and ``curriculum/`` (a schedule's ``mode`` would compose to ``None``, not to its meaning). The
env settings of ``env/`` are not compared with the registered env's settings: they are part of
a run's checkpoint identity as given.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("hydra")
yaml = pytest.importorskip("yaml")

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

#: keys that name what a preset is, kept even where they equal the schema default (in presets
#: that extend the schema itself): an env preset names its env, an agent preset its memory core
NAMING = {"env": {"env.id"}, "agent": {"agent.network.memory"}}
#: preset file -> keys it states on purpose although they compose to the same value without it
STATED = {
    # the variable the refresh_on / refresh_off pair compares (ppo_lstm_fast's value too)
    "experiment/refresh_on.yaml": {"agent.refresh_interval"},
    # the small expert run's anneal, half its 400k steps (penalty_anneal's 200k by coincidence)
    "scale/anneal/small.yaml": {"curriculum.penalty.points"},
}

EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
MISSING = object()


def _names(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def _read(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def _package(conf: Path, rel: str) -> str:
    """Where a preset's keys land in the composed config (``""``: at the top)."""
    text = (conf / rel).read_text(encoding="utf-8")
    if any(line.strip() == "# @package _global_" for line in text.splitlines()):
        return ""
    return rel.rpartition("/")[0].replace("/", ".")


def _leaves(node: dict[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    """``(dotted path, value)`` of every leaf: a value that is not a non-empty mapping."""
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            yield from _leaves(value, path)
        else:
            yield path, value


def _keys(conf: Path, rel: str) -> set[str]:
    """The dotted paths, in the composed config, of a preset's own keys (not its defaults)."""
    data = {k: v for k, v in _read(conf / rel).items() if k != "defaults"}
    return {path for path, _ in _leaves(data, _package(conf, rel))}


def _get(node: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def _extends_a_preset(conf: Path, rel: str) -> bool:
    """Its defaults list names another option of its group (not only the schema)."""
    entries = _read(conf / rel).get("defaults", [])
    return any(isinstance(e, str) and e != "_self_" and not e.endswith("_schema") for e in entries)


class Composer:
    """Composes ``train`` from a copy of ``conf/`` whose preset files can be blanked."""

    def __init__(self, conf: Path) -> None:
        self.conf = conf
        self.cache: dict[tuple[str, ...], dict[str, Any]] = {}

    def compose(self, overrides: list[str], blank: tuple[str, ...] = ()) -> dict[str, Any]:
        key = (*overrides, "|", *blank)
        if key not in self.cache:
            saved = {rel: (self.conf / rel).read_text(encoding="utf-8") for rel in blank}
            try:
                for rel, text in saved.items():
                    (self.conf / rel).write_text(_blanked(text), encoding="utf-8")
                cfg = compose("train", overrides=overrides)
            finally:
                for rel, text in saved.items():
                    (self.conf / rel).write_text(text, encoding="utf-8")
            self.cache[key] = OmegaConf.to_container(cfg, resolve=False)
        return self.cache[key]

    def restated(self, rel: str, contexts: list[list[str]]) -> list[str]:
        """The keys of preset ``rel`` that compose to the same value without it in every one of
        ``contexts`` (override lists that compose it)."""
        return self.restated_together([(overrides, (rel,)) for overrides in contexts])[rel]

    def restated_together(
        self, cases: list[tuple[list[str], tuple[str, ...]]]
    ) -> dict[str, list[str]]:
        """:meth:`restated` of several presets at once: each case is an override list and the
        presets it composes (of different groups: their keys never overlap), blanked together.
        """
        keys: dict[str, set[str]] = {}
        for overrides, rels in cases:
            for rel in rels:
                if rel not in keys:
                    keys[rel] = _keys(self.conf, rel) - STATED.get(rel, set())
                    if not _extends_a_preset(self.conf, rel):
                        keys[rel] -= NAMING.get(rel.split("/")[0], set())
            if not any(keys[rel] for rel in rels):
                continue
            full, blank = self.compose(overrides), self.compose(overrides, rels)
            for rel in rels:
                keys[rel] = {k for k in keys[rel] if _same(full, blank, k)}
        return {rel: sorted(found) for rel, found in keys.items()}


def _same(full: dict[str, Any], blank: dict[str, Any], path: str) -> bool:
    value = _get(blank, path)
    return value is not MISSING and _get(full, path) == value


def _blanked(text: str) -> str:
    """A preset's text with its own keys removed: its package line and defaults list kept."""
    defaults = (yaml.safe_load(text) or {}).get("defaults")
    return _with_header(text, {} if defaults is None else {"defaults": defaults})


def _with_header(text: str, data: dict[str, Any]) -> str:
    """``data`` as a preset's text, with the package line of ``text`` (if any)."""
    header = [line for line in text.splitlines() if line.startswith("# @package")]
    return "\n".join([*header, yaml.safe_dump(data, sort_keys=False)])


def _merge(node: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(node)
    for key, value in changes.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merge(out[key], value) if both else value
    return out


def _edit(path: Path, changes: dict[str, Any]) -> None:
    """Set ``changes`` (nested) in the preset file ``path``."""
    text = path.read_text(encoding="utf-8")
    path.write_text(_with_header(text, _merge(yaml.safe_load(text) or {}, changes)))


@pytest.fixture(scope="module")
def composer(tmp_path_factory) -> Iterator[Composer]:
    import experiments.train  # noqa: F401  (registers the schemas)

    conf = tmp_path_factory.mktemp("presets") / "conf"
    shutil.copytree(CONF, conf)
    with initialize_config_dir(str(conf), version_base="1.3"):
        yield Composer(conf)


def _fail_on(found: dict[str, list[str]]) -> None:
    found = {rel: keys for rel, keys in found.items() if keys}
    assert not found, "presets restate the value a key has without them (remove the keys): " + (
        "; ".join(f"conf/{rel}: {', '.join(keys)}" for rel, keys in sorted(found.items()))
    )


#: groups of the default run whose presets are checked against the schema (and their parents)
GROUPS = ("agent", "env", "run", "logger")


@pytest.fixture(scope="module")
def group_findings(composer) -> dict[str, list[str]]:
    """Restated keys of every preset of :data:`GROUPS`, one preset of each group per
    composition (``agent=a env=e run=r logger=l``) to compose less."""
    names = {group: _names(group) for group in GROUPS}
    cases = []
    for i in range(max(map(len, names.values()))):
        picks = {group: options[i % len(options)] for group, options in names.items()}
        overrides = [f"{group}={name}" for group, name in picks.items()]
        cases.append((overrides, tuple(f"{g}/{n}.yaml" for g, n in picks.items())))
    return composer.restated_together(cases)


@pytest.mark.parametrize("group", GROUPS)
def test_group_presets_restate_no_default(group_findings, group):
    _fail_on({rel: keys for rel, keys in group_findings.items() if rel.startswith(f"{group}/")})


def test_experiment_presets_restate_nothing_they_compose_anyway(composer):
    contexts = {e: [[f"experiment={e}"], [f"experiment={e}", "scale=small"]] for e in EXPERIMENTS}
    _fail_on({f"experiment/{e}.yaml": composer.restated(f"experiment/{e}.yaml", contexts[e])
              for e in EXPERIMENTS})  # fmt: skip


def test_scale_presets_restate_nothing_they_compose_anyway(composer):
    found = {}
    for path in sorted((CONF / "scale").rglob("*.yaml")):
        rel = path.relative_to(CONF).as_posix()
        sub, scale = path.parent.relative_to(CONF / "scale").as_posix(), path.stem
        users = [  # the experiments that load this file (every one loads scale/<scale>)
            e
            for e in EXPERIMENTS
            if sub == "." or f"/scale/{sub}:" in (CONF / "experiment" / f"{e}.yaml").read_text()
        ]
        assert users, f"no experiment loads conf/{rel}"
        found[rel] = composer.restated(rel, [[f"experiment={e}", f"scale={scale}"] for e in users])
    _fail_on(found)


def test_the_check_finds_a_restated_default_and_a_restated_parent_value(composer):
    parent = composer.conf / "agent" / "ppo_lstm.yaml"
    child = composer.conf / "agent" / "ppo_gru.yaml"
    saved = parent.read_text(), child.read_text()
    try:
        _edit(parent, {"gae_lambda": 0.95, "network": {"head_sizes": [64]}})  # PPOConfig's
        _edit(child, {"num_steps": 64})  # ppo_lstm's value
        composer.cache.clear()
        found = composer.restated("agent/ppo_lstm.yaml", [["agent=ppo_lstm"]])
        assert found == ["agent.gae_lambda", "agent.network.head_sizes"]
        assert composer.restated("agent/ppo_gru.yaml", [["agent=ppo_gru"]]) == ["agent.num_steps"]
    finally:
        parent.write_text(saved[0])
        child.write_text(saved[1])
        composer.cache.clear()


@pytest.mark.parametrize("child", ["ppo_lstm_fast", "ppo_gru", "ppo_mlp"])
def test_ppo_lstm_variants_inherit_ppo_lstm(composer, child):
    """A change of ppo_lstm reaches the presets that extend it (those that set no value of
    their own)."""
    assert "ppo_lstm" in _read(CONF / "agent" / f"{child}.yaml")["defaults"]
    parent = composer.conf / "agent" / "ppo_lstm.yaml"
    saved = parent.read_text()
    try:
        _edit(parent, {"ent_coef": 0.125, "network": {"head_sizes": [7]}})
        composer.cache.clear()
        agent = composer.compose([f"agent={child}"])["agent"]
        assert agent["ent_coef"] == 0.125 and agent["network"]["head_sizes"] == [7]
    finally:
        parent.write_text(saved)
        composer.cache.clear()
