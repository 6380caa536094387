"""Curricula: env rules (penalty, rewards, ...) that change during training, by schedule.

A curriculum maps :class:`~marlgrid.core.rules.Rules` fields to schedules (:class:`ScheduleConfig`):

* ``linear`` / ``step``: ``points`` ``[[step, value], ...]`` in env steps summed over the batch
  (the trainer's ``global_step``, as ``total_timesteps`` counts them). ``linear`` interpolates
  between points, ``step`` holds the value of the last point reached. Before the first point
  the value is the first one, after the last point the last one.
* ``threshold``: ``values[0]`` first; the next value once the mean of ``metric`` (a logged
  metric such as ``charts/episodic_return``) over the last ``window`` iterations that reported
  it has been ``>= threshold`` for ``patience`` iterations in a row. The window then starts
  afresh: each stage is earned under its own rules. Iterations where the metric is missing or
  NaN (no episode ended) change nothing. A metric the run cannot log is refused at start
  (``eval/...`` needs ``eval_every`` > 0 and must be one evaluation logs: ``eval/return``,
  ``eval/return_<agent>``); any other name not logged by the first iteration that could log it
  (one with an update for learner metrics, one with an evaluation for ``eval/`` ones) is
  warned of once, in ``train.log`` and on stdout, naming the closest logged names.

:class:`CurriculumCallback` sets the values on every env of the run between iterations (each
env takes a new value at its next reset: a running episode keeps its rules), adds
``curriculum/<field>`` (the value new episodes started with during the iteration) to every
iteration's metrics, and saves its state with the checkpoints (``state_key`` ``curriculum``),
so a resumed run continues the schedule, threshold stage included. It sets the rules through
the trainer (``trainer.set_rules``), so every env stream plays the same stage, and evaluation
(``eval_every``) and videos play the stage training is at (:attr:`Trainer.rules`), not the
env's defaults.

From the command line a curriculum is a preset (``curriculum=penalty_anneal``) or overrides of
any rule, no ``+`` needed: ``'curriculum.streak_bonus.points=[[0,0.0],[200000,0.5]]'``, or
``curriculum.n_goals.metric=charts/episodic_return curriculum.n_goals.threshold=2
'curriculum.n_goals.values=[2,3]'``.
"""

from __future__ import annotations

import difflib
import math
from bisect import bisect_right
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from marlgrid.agents.training.callbacks import Callback
from marlgrid.agents.training.evaluation import EVAL_PREFIX, EVAL_RETURN, eval_metric_names
from marlgrid.agents.training.view import TrainerView
from marlgrid.config import ConfigError, check_float, check_int
from marlgrid.core.rules import RULE_FIELDS, Rules

MODES = ("linear", "step", "threshold")
#: the trainer's count of a learner's updates in an iteration (``<learner>/`` before it with
#: several learners): logged only in iterations where that learner updated
UPDATES_KEY = "charts/updates"
#: rules whose values are floats: the only ones ``linear`` may interpolate
FLOAT_RULES = tuple(f.name for f in fields(Rules) if isinstance(f.default, float))


@dataclass
class ScheduleConfig:
    """How one rule changes during training (see the module docstring)."""

    mode: str | None = None  # linear | step | threshold; None: threshold with a metric, else linear
    points: list[Any] | None = None  # [[global_step, value], ...], steps increasing (linear, step)
    metric: str | None = None  # logged metric that advances a threshold schedule
    threshold: float | None = None  # advance once the metric's windowed mean is >= this
    values: list[Any] | None = None  # a threshold schedule's stages, in order
    window: int = 1  # iterations the metric is averaged over (threshold)
    patience: int = 1  # iterations in a row at or above the threshold before advancing


def as_schedule(key: str, value: Any) -> ScheduleConfig:
    """``value`` (a :class:`ScheduleConfig` or a mapping of its fields) as a ScheduleConfig."""
    if isinstance(value, ScheduleConfig):
        return value
    if isinstance(value, Mapping):
        allowed = [f.name for f in fields(ScheduleConfig)]
        unknown = sorted(set(value) - set(allowed), key=repr)
        if unknown:
            raise ConfigError(f"{key}: unknown schedule key(s) {unknown}; allowed: {allowed}")
        return ScheduleConfig(**value)
    raise ConfigError(
        f"{key} must be a schedule (a mapping such as {{points: [...]}}), got {value!r}"
    )


def typed_schedules(curriculum: Any) -> Any:
    """``curriculum`` with each mapping of :class:`ScheduleConfig` fields as a ScheduleConfig
    (command-line entries and ``config.json`` give mappings); anything else is left for
    :func:`check_curriculum` to refuse, naming it."""
    if not isinstance(curriculum, Mapping):
        return curriculum
    allowed = {f.name for f in fields(ScheduleConfig)}
    return {
        name: ScheduleConfig(**value)
        if isinstance(value, Mapping) and set(value) <= allowed
        else value
        for name, value in curriculum.items()
    }


def check_curriculum(curriculum: Any) -> dict[str, ScheduleConfig]:
    """Every schedule of ``curriculum`` checked; :class:`ConfigError` names the first bad key."""
    if not isinstance(curriculum, Mapping):
        raise ConfigError(f"curriculum must be a mapping of rule -> schedule, got {curriculum!r}")
    out = {}
    for name, value in curriculum.items():
        key = f"curriculum.{name}"
        if name not in RULE_FIELDS:
            raise ConfigError(
                f"{key}: {name!r} is not an env rule; a curriculum schedules these fields of "
                f"marlgrid.core.rules.Rules: {list(RULE_FIELDS)}"
            )
        out[name] = _check_schedule(key, name, as_schedule(key, value))
    return out


def _check_schedule(key: str, name: str, s: ScheduleConfig) -> ScheduleConfig:
    mode = s.mode if s.mode is not None else ("threshold" if s.metric is not None else "linear")
    if mode not in MODES:
        raise ConfigError(f"{key}.mode must be one of {list(MODES)} or null, got {s.mode!r}")
    if mode == "threshold":
        if s.points is not None:
            raise ConfigError(f"{key}.points belongs to modes linear/step, not threshold")
        if not isinstance(s.metric, str) or not s.metric:
            raise ConfigError(
                f"{key}.metric must name a logged metric (e.g. charts/episodic_return), "
                f"got {s.metric!r}"
            )
        if s.threshold is None:
            raise ConfigError(f"{key}.threshold is required with mode threshold")
        check_float(f"{key}.threshold", s.threshold)
        check_int(f"{key}.window", s.window, low=1)
        check_int(f"{key}.patience", s.patience, low=1)
        values = _check_list(f"{key}.values", s.values, 2)
        for i, v in enumerate(values):
            _check_value(f"{key}.values[{i}]", name, v)
        threshold = float(s.threshold)
        return ScheduleConfig("threshold", None, s.metric, threshold, values, s.window, s.patience)
    for extra in ("metric", "threshold", "values"):
        if getattr(s, extra) is not None:
            raise ConfigError(f"{key}.{extra} belongs to mode threshold, not {mode}")
    if mode == "linear" and name not in FLOAT_RULES:
        raise ConfigError(
            f"{key}: linear interpolation needs a float rule ({list(FLOAT_RULES)}); {name} "
            "takes whole values: use mode step or threshold"
        )
    points = _check_list(f"{key}.points", s.points, 1)
    steps = []
    for i, point in enumerate(points):
        if isinstance(point, str) or not isinstance(point, Sequence) or len(point) != 2:
            raise ConfigError(f"{key}.points[{i}] must be a pair [step, value], got {point!r}")
        steps.append(check_int(f"{key}.points[{i}] step", point[0], low=0))
        _check_value(f"{key}.points[{i}] value", name, point[1])
    if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
        raise ConfigError(f"{key}.points must have strictly increasing steps, got {steps}")
    return ScheduleConfig(mode, [list(p) for p in points], window=s.window, patience=s.patience)


def _check_list(key: str, value: Any, minimum: int) -> list[Any]:
    if isinstance(value, str | Mapping) or not isinstance(value, Sequence) or len(value) < minimum:
        raise ConfigError(f"{key} must be a list of {minimum} or more entries, got {value!r}")
    return list(value)


def _check_value(key: str, name: str, value: Any) -> None:
    """A value the rule ``name`` can take (as :class:`Rules` checks it)."""
    try:
        Rules().replace(**{name: value})
    except ConfigError as exc:
        raise ConfigError(f"{key}: {exc}") from None


class Schedule:
    """One rule's value per trainer iteration; stateful schedules save their state."""

    def value(self, step: int) -> Any:
        """The rule's value once ``step`` env steps are done."""
        raise NotImplementedError

    def observe(self, metrics: Mapping[str, float]) -> bool:
        """Take an iteration's metrics; True when the value moved on."""
        return False

    def values(self) -> list[Any]:
        """Every value the schedule names (the env must be able to hold each)."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass


class PointSchedule(Schedule):
    """Piecewise-linear (``linear``) or piecewise-constant (``step``) in env steps."""

    def __init__(self, points: Sequence[Sequence[Any]], mode: str) -> None:
        self.steps = [int(p[0]) for p in points]
        self.points = [p[1] for p in points]
        self.mode = mode

    def value(self, step: int) -> Any:
        if self.mode == "linear":
            return float(np.interp(step, self.steps, [float(v) for v in self.points]))
        return self.points[max(bisect_right(self.steps, step) - 1, 0)]

    def values(self) -> list[Any]:
        return list(self.points)


class ThresholdSchedule(Schedule):
    """Stages advanced when a metric's windowed mean stays at or above a threshold."""

    def __init__(
        self, metric: str, threshold: float, values: Sequence[Any], window: int, patience: int
    ) -> None:
        self.metric, self.threshold, self.stages = metric, float(threshold), list(values)
        self.window, self.patience = window, patience
        self.stage, self.passes = 0, 0
        self.recent: deque[float] = deque(maxlen=window)

    def value(self, step: int) -> Any:
        return self.stages[self.stage]

    def observe(self, metrics: Mapping[str, float]) -> bool:
        seen = metrics.get(self.metric)
        if self.stage == len(self.stages) - 1 or seen is None or math.isnan(float(seen)):
            return False
        self.recent.append(float(seen))
        full = len(self.recent) == self.window
        self.passes = self.passes + 1 if full and self.mean() >= self.threshold else 0
        if self.passes < self.patience:
            return False
        self.stage += 1
        self.passes = 0
        self.recent.clear()
        return True

    def mean(self) -> float:
        return float(np.mean(self.recent)) if self.recent else math.nan

    def values(self) -> list[Any]:
        return list(self.stages)

    def state_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "passes": self.passes, "recent": list(self.recent)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        stage = int(state["stage"])
        if not 0 <= stage < len(self.stages):
            raise ConfigError(
                f"a saved curriculum stage {stage} does not fit the {len(self.stages)} values"
            )
        self.stage, self.passes = stage, int(state["passes"])
        self.recent = deque((float(v) for v in state["recent"]), maxlen=self.window)


def build_schedule(cfg: ScheduleConfig) -> Schedule:
    """The schedule of a checked config (see :func:`check_curriculum`)."""
    if cfg.mode == "threshold":
        return ThresholdSchedule(cfg.metric, cfg.threshold, cfg.values, cfg.window, cfg.patience)
    return PointSchedule(cfg.points, cfg.mode)


class CurriculumCallback(Callback):
    """Applies rule schedules to every env of the trainer's batch between iterations.

    ``curriculum`` maps rule names to schedules (configs or mappings, checked here). The
    values reach the envs as pending rules: each env starts its next episode with them.
    """

    state_key = "curriculum"

    def __init__(self, curriculum: Mapping[str, Any]) -> None:
        self.configs = check_curriculum(curriculum)
        self.schedules = {name: build_schedule(c) for name, c in self.configs.items()}
        self.current: dict[str, Any] = {}  # rule -> value set on the envs
        self.unseen = self.threshold_metrics()  # rule -> metric not yet checked against a log

    def threshold_metrics(self) -> dict[str, str]:
        """Rule -> the metric its threshold schedule reads (rules of other modes left out)."""
        return {n: c.metric for n, c in self.configs.items() if c.metric is not None}

    def check(self, trainer: TrainerView) -> None:
        for vec in trainer.stream_envs:
            self.check_env(vec)
        self.check_metrics(trainer.cfg.eval_every, trainer.vec.possible_agents)

    def check_metrics(self, eval_every: int, agents: Sequence[str]) -> None:
        """Refuse threshold metrics the run can never log: ``eval/`` ones without evaluation
        (``eval_every=0``) or that evaluation does not log."""
        logged = eval_metric_names(agents)
        for name, metric in self.threshold_metrics().items():
            if not metric.startswith(EVAL_PREFIX):
                continue
            key = f"curriculum.{name}.metric"
            if not eval_every:
                raise ConfigError(
                    f"{key} {metric!r} is logged only by evaluation, and eval_every is 0 (no "
                    "evaluation): set eval_every=N (every N updates) or another metric"
                )
            if metric not in logged:
                raise ConfigError(f"{key} {metric!r} is not logged; evaluation logs {logged}")

    def warn_unlogged(self, trainer: TrainerView, metrics: Mapping[str, float]) -> None:
        """Say once per rule when its metric is missing from the first iteration that could
        have logged it: one where a learner updated (``charts/updates``), and for ``eval/``
        metrics one with an evaluation."""
        updated = any(k.endswith(UPDATES_KEY) for k in metrics)
        for name, metric in list(self.unseen.items()):
            if metric in metrics:
                del self.unseen[name]
                continue
            if not updated or (metric.startswith(EVAL_PREFIX) and EVAL_RETURN not in metrics):
                continue  # this iteration could not have logged it
            del self.unseen[name]
            close = difflib.get_close_matches(metric, list(metrics), n=3, cutoff=0.6)
            hint = f"; did you mean {close}?" if close else f"; logged: {sorted(metrics)}"
            trainer.say(
                f"warning: curriculum.{name}.metric {metric!r} was not logged in update "
                f"{trainer.iteration}, so the {name} schedule cannot advance until it is{hint}"
            )

    def check_env(self, vec: Any) -> None:
        """Every value of every schedule must fit the env (e.g. ``n_goals`` its layout)."""
        base = vec.next_rules[0]
        for name, schedule in self.schedules.items():
            for value in dict.fromkeys(schedule.values()):
                try:
                    vec.template.check_rules(base.replace(**{name: value}))
                except ConfigError as exc:
                    raise ConfigError(f"curriculum.{name} value {value!r}: {exc}") from None

    def _apply(self, trainer: TrainerView) -> None:
        changes = {}
        for name, schedule in self.schedules.items():
            value = schedule.value(trainer.global_step)
            if name not in self.current or self.current[name] != value:
                changes[name] = value
        if changes:
            trainer.set_rules(**changes)
            self.current.update(changes)

    def on_training_start(self, trainer: TrainerView) -> None:
        self.current = {}
        self._apply(trainer)

    def on_rollout_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        for name in self.schedules:
            value = self.current[name]
            metrics[f"curriculum/{name}"] = math.nan if value is None else float(value)
        if self.unseen:
            self.warn_unlogged(trainer, metrics)
        for name, schedule in self.schedules.items():
            if schedule.observe(metrics):
                trainer.say(
                    f"curriculum: {name} -> {schedule.value(trainer.global_step)!r} after "
                    f"update {trainer.iteration} ({self.configs[name].metric} reached "
                    f"{self.configs[name].threshold:g})"
                )
        self._apply(trainer)

    def values_at(self, step: int) -> dict[str, Any]:
        """Every scheduled rule's value once ``step`` env steps are done."""
        return {name: s.value(step) for name, s in self.schedules.items()}

    def state_dict(self) -> dict[str, Any]:
        return {name: s.state_dict() for name, s in self.schedules.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for name, s in self.schedules.items():
            if name in state:
                s.load_state_dict(state[name])


def checkpoint_rules(curriculum: Mapping[str, Any], payload: Mapping[str, Any]) -> dict[str, Any]:
    """The rules a run's curriculum had reached at a checkpoint (``{}`` without a curriculum):
    what its policies were last trained under, for evaluation and videos."""
    if not curriculum:
        return {}
    callback = CurriculumCallback(curriculum)
    callback.load_state_dict(payload.get("curriculum", {}))
    return callback.values_at(int(payload.get("global_step", 0)))
