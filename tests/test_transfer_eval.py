"""Zero-shot transfer: the goal_seeker expert, ``evaluate_transfer`` and ``evaluate.py --transfer``.

The saved runs are tiny (a 16-cell-wide network, 32 env steps): these tests check the wiring,
the carried observation settings, the refusals and the table, not what a trained agent scores.
"""

from __future__ import annotations

import csv
import pickle
from pathlib import Path

import numpy as np
import pytest

import marlgrid
from marlgrid.config import AgentConfig, ConfigError
from marlgrid.constants import FORWARD, LEFT, RIGHT
from marlgrid.policies import make_policy, scripted_action
from marlgrid.policies.goal_seeker import GoalSeekerPolicy
from tests.conftest import HandMadeEnv, place

torch = pytest.importorskip("torch")

from marlgrid.agents.algorithms.ppo import PPOConfig  # noqa: E402
from marlgrid.agents.bookkeeping.transfer import (  # noqa: E402
    CONDITIONS,
    _quotas,
    evaluate_transfer,
    partners_from_text,
    summary_rows,
    target_agent_settings,
)
from marlgrid.agents.networks.models import NetworkConfig  # noqa: E402
from marlgrid.agents.training.roles import RoleConfig  # noqa: E402
from marlgrid.agents.training.trainer import (  # noqa: E402
    EnvConfig,
    LoggerConfig,
    TrainConfig,
    train,
)

GC3 = "MarlGrid-GoalCycle-13x13-3Agents-v0"
GC4 = "MarlGrid-GoalCycle-13x13-4Goals-3Agents-v0"
ROOMS, MAZE = "MarlGrid-FourRooms-3Agents-v0", "MarlGrid-Maze-13x13-3Agents-v0"
SMALL = NetworkConfig(hidden_size=16, trunk_sizes=(16,), head_sizes=(8,), conv_channels=(4,))


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


# -- goal_seeker ---------------------------------------------------------------------------------


def test_goal_seeker_is_registered_as_an_expert():
    policy = make_policy("goal_seeker", seed=0, epsilon=0.1)
    assert isinstance(policy, GoalSeekerPolicy) and policy.is_expert
    copy = pickle.loads(pickle.dumps(policy))
    assert isinstance(copy, GoalSeekerPolicy) and copy.epsilon == 0.1


def test_goal_seeker_walks_the_one_shortest_path_of_a_corridor():
    # The only path from (1, 1) to G at (5, 3): down 2, east 2, up 2, east 2, down 2 = 10 moves,
    # with 4 turns (south->east: left, east->north: left, north->east: right, east->south: right).
    rows = [
        "#######",
        "#s#...#",
        "#.#.#.#",
        "#...#G#",
        "#######",
    ]
    env = HandMadeEnv(rows, max_steps=50)
    env.reset(seed=0)
    place(env, 0, 1, 1, 1)  # facing south
    policy = make_policy("goal_seeker")
    taken, reward = [], 0.0
    while env.agents:
        action = scripted_action(policy, env, "agent_0")
        taken.append(action)
        _, rewards, *_ = env.step({"agent_0": action})
        reward += rewards["agent_0"]
    F, L, R = FORWARD, LEFT, RIGHT
    assert taken == [F, F, L, F, F, L, F, F, R, F, F, R, F, F]
    assert reward == 1.0


def test_goal_seeker_takes_the_goal_nearest_by_path_not_by_distance():
    # The goal at (3, 1) is 2 cells away as the crow flies but 10 moves round the wall; the one
    # at (1, 5) is 4 moves straight down: the agent (facing south) walks down.
    rows = [
        "#######",
        "#s#G..#",
        "#.###.#",
        "#.....#",
        "#.#####",
        "#G#####",
        "#######",
    ]
    env = HandMadeEnv(rows, max_steps=50)
    env.reset(seed=0)
    place(env, 0, 1, 1, 1)
    policy = make_policy("goal_seeker")
    steps = 0
    while env.agents:
        env.step({"agent_0": scripted_action(policy, env, "agent_0")})
        steps += 1
    assert steps == 4 and tuple(env.engine.pos[0, 0]) == (1, 5)


@pytest.mark.parametrize("env_id", ["MarlGrid-FourRooms-v0", ROOMS, "MarlGrid-Maze-13x13-v0", MAZE])
def test_goal_seeker_reaches_the_goal_on_fresh_layouts(env_id):
    vec = marlgrid.make_vec(env_id, 16)
    policy = make_policy("goal_seeker", 0)
    vec.reset(seed=7)
    reached, lengths = [], []
    while len(reached) < 64:
        actions = np.stack([policy.scripted_actions(vec.engine, k) for k in range(vec.num_agents)])
        _, _, _, _, infos = vec.step(actions.T)
        if "_episode" in infos:
            done = infos["_episode"]
            reached += list((infos["episode"]["r"][done] > 0).all(axis=1))
            lengths += list(infos["episode"]["l"][done])
    limit = vec.template.max_steps
    assert np.mean(reached) >= 0.95
    assert np.mean(np.array(lengths) < limit) >= 0.95


def test_goal_seeker_plays_the_oracle_in_a_goal_cycle_and_refuses_a_goal_less_map():
    vec = marlgrid.make_vec(GC4, 4)
    vec.reset(seed=1)
    seeker, oracle = make_policy("goal_seeker"), make_policy("oracle")
    for _ in range(40):
        actions = np.stack([seeker.scripted_actions(vec.engine, k) for k in range(3)], axis=1)
        for k in range(3):
            assert np.array_equal(actions[:, k], oracle.scripted_actions(vec.engine, k))
        vec.step(actions)
    env = HandMadeEnv(["#####", "#s..#", "#####"])
    env.reset(seed=0)
    with pytest.raises(ValueError, match="goal_seeker needs a goal object in every env"):
        scripted_action(make_policy("goal_seeker"), env, "agent_0")


# -- carried settings and tables (no run needed) -------------------------------------------------


def test_target_agents_get_the_trained_settings():
    trained = [
        AgentConfig(view_size=5, extras=("reward",), color="red"),
        AgentConfig(view_size=7, color="prestige"),
    ]
    out = target_agent_settings(trained, 0, 0, 3, {"spawn_delay": 2}, ROOMS)
    assert [a.view_size for a in out] == [5, 7, 5]
    assert out[0].extras == ("reward",) and out[2].extras == ("reward",)
    assert [a.color for a in out] == ["red", "prestige", "purple"]  # agent 2: its index colour
    assert all(a.spawn_delay == 2 for a in out)  # a setting that is not carried applies to all
    # The saved agent as agent_1 of the target: its settings move with it.
    assert target_agent_settings(trained, 0, 1, 2, None, ROOMS)[1].view_size == 5
    with pytest.raises(ConfigError, match=r"agent\.view_size: .* asked for 7 .* view_size=5"):
        target_agent_settings(trained, 0, 0, 1, {"view_size": 7}, ROOMS)
    target_agent_settings(trained, 0, 0, 1, {"view_size": 5, "extras": ["reward"]}, ROOMS)


def test_partners_from_text():
    assert partners_from_text(GC4, "none") == {}
    assert partners_from_text(GC4, "oracle") == {"agent_1": "oracle", "agent_2": "oracle"}
    assert partners_from_text(ROOMS, "goal_seeker,random") == {
        "agent_1": "goal_seeker",
        "agent_2": "random",
    }
    assert partners_from_text(ROOMS, "random", role="agent_1") == {
        "agent_0": "random",
        "agent_2": "random",
    }
    with pytest.raises(ConfigError, match=r"partners \['bogus'\] are not scripted policies"):
        partners_from_text(ROOMS, "oracle,bogus")
    with pytest.raises(ConfigError, match="has one agent"):
        partners_from_text("MarlGrid-FourRooms-v0", "goal_seeker")
    # goal-cycle partners in an env without tiles, and more partners than the env has slots
    with pytest.raises(ConfigError, match=r"partners \['oracle'\] play goal-cycle tiles"):
        partners_from_text(ROOMS, "oracle")
    with pytest.raises(ConfigError, match=r"partners \['discoverer'\] play goal-cycle tiles"):
        partners_from_text(ROOMS, "discoverer,goal_seeker")
    with pytest.raises(ConfigError, match="names 3 partners, but .* has 3 agents"):
        partners_from_text(GC4, "oracle,oracle,oracle")


def test_summary_rows_give_the_mean_and_student_t_interval():
    # [1, 2, 3]: mean 2, sd 1, t(0.975, 2 dof) = 4.302653 -> 2 +- 4.302653 / sqrt(3) = 2 +- 2.4841
    rows = summary_rows(
        {"return": np.array([1.0, 2.0, 3.0]), "social/x": np.array([np.nan, 4.0, 4.0])},
        {"condition": "c"},
    )
    first, second = rows
    assert (first["metric"], first["n"], first["mean"]) == ("return", 3, 2.0)
    assert first["low"] == pytest.approx(-0.4841, abs=1e-4)
    assert first["high"] == pytest.approx(4.4841, abs=1e-4)
    assert (second["n"], second["mean"], second["low"], second["high"]) == (2, 4.0, 4.0, 4.0)
    assert list(_quotas(10, 4)) == [3, 3, 2, 2] and list(_quotas(3, 3)) == [1, 1, 1]


def test_social_transfer_lists_the_pairings_of_the_issue():
    pairs = {(c.target, tuple(sorted(c.partners.items()))) for c in CONDITIONS["social_transfer"]}
    two = ("agent_1", "agent_2")
    assert pairs == {
        (GC4, tuple((a, "oracle") for a in two)),
        (GC4, ()),
        (ROOMS, tuple((a, "goal_seeker") for a in two)),
        (ROOMS, ()),
        (MAZE, tuple((a, "goal_seeker") for a in two)),
        (MAZE, ()),
    }


# -- saved runs in other envs --------------------------------------------------------------------


def _train(path: Path, agent_settings: dict) -> Path:
    experts = {a: RoleConfig(kind="scripted", policy="oracle") for a in ("agent_1", "agent_2")}
    settings = {"size": 7, "max_steps": 12, "agent": agent_settings}
    ppo = PPOConfig(network=SMALL, num_steps=8, chunk_len=4, num_minibatches=2, update_epochs=1)
    cfg = TrainConfig(
        env=EnvConfig(GC3, num_envs=2, settings=settings),
        agent=ppo,
        roles={"agent_0": RoleConfig(), **experts},
        total_timesteps=32,
        video=False,
        logger=LoggerConfig(tensorboard=False, progress=False),
    )  # fmt: skip
    train(cfg, path)
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A novice beside two oracles trained with view 5 and the reward extra; one with the
    position extra (its range is the 7x7 map's)."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("transfer_runs")
    return {
        "reward": _train(root / "reward", {"view_size": 5, "extras": ["reward"]}),
        "position": _train(root / "position", {"extras": ["position"]}),
    }


def _by_metric(rows: list[dict]) -> dict[str, dict]:
    return {r["metric"]: r for r in rows}


def test_a_saved_agent_plays_four_rooms_beside_goal_seekers(runs):
    rows = evaluate_transfer(
        runs["reward"], ROOMS, partners=partners_from_text(ROOMS, "goal_seeker"), episodes=6,
        seed=3, num_envs=4,
    )  # fmt: skip
    got = _by_metric(rows)
    assert all(r["n"] == 6 for m, r in got.items() if "follow" not in m)
    assert got["return"]["mean"] == pytest.approx(got["rewards"]["mean"] + got["penalties"]["mean"])
    assert got["penalties"]["mean"] == 0.0  # FourRooms never penalises
    assert 0 < got["length"]["mean"] <= 100 and got["length"]["high"] <= 100 + 1e-9
    # Both partners are experts: the expert metrics equal the other-agent ones.
    assert got["social/expert_distance"]["mean"] == got["social/other_distance"]["mean"]
    assert "social/follow_expert" not in got  # no goal-cycle tiles
    row = rows[0]
    assert (row["target"], row["partners"], row["role"], row["greedy"]) == (
        ROOMS, "agent_1=goal_seeker, agent_2=goal_seeker", "agent_0", True
    )  # fmt: skip


def test_alone_is_the_same_map_with_only_the_saved_agent(runs):
    rows = evaluate_transfer(runs["reward"], GC4, episodes=2, seed=0, num_envs=2)
    got = _by_metric(rows)
    assert rows[0]["partners"] == "alone" and got["length"]["mean"] == 250.0
    assert not any("other" in m or "expert" in m for m in got)
    # 4 tiles beside oracles: the oracles are experts, random partners are not.
    rows = evaluate_transfer(
        runs["reward"], GC4, partners={"agent_1": "random", "agent_2": "random"}, episodes=2,
        num_envs=2,
    )  # fmt: skip
    got = _by_metric(rows)
    assert "social/other_in_view" in got and "social/expert_in_view" not in got


def test_sampled_transfer_is_reproducible(runs):
    kwargs = {"episodes": 3, "seed": 5, "greedy": False, "num_envs": 3}
    a = evaluate_transfer(runs["reward"], "MarlGrid-FourRooms-v0", **kwargs)
    b = evaluate_transfer(runs["reward"], "MarlGrid-FourRooms-v0", **kwargs)
    assert [r["mean"] for r in a] == [r["mean"] for r in b] and a[0]["greedy"] is False


def test_settings_that_cannot_fit_are_refused_by_name(runs):
    with pytest.raises(ConfigError, match=r"extras: observation entry 'position'.*map size"):
        evaluate_transfer(runs["position"], ROOMS, episodes=1)
    with pytest.raises(ConfigError, match=r"agent\.view_size: .* asked for 7 .* view_size=5"):
        evaluate_transfer(runs["reward"], ROOMS, {"agent": {"view_size": 7}}, episodes=1)
    with pytest.raises(ConfigError, match=r"agent\.extras: .* \(\) .*=\('reward',\)"):
        evaluate_transfer(runs["reward"], ROOMS, {"agent": {"extras": []}}, episodes=1)
    with pytest.raises(ConfigError, match="'popgym:RepeatPreviousEasy' is not a marlgrid env"):
        evaluate_transfer(runs["reward"], "popgym:RepeatPreviousEasy", episodes=1)
    with pytest.raises(ConfigError, match="target setting 'n_agents'"):
        evaluate_transfer(runs["reward"], ROOMS, {"n_agents": 3}, episodes=1)
    with pytest.raises(ConfigError, match="partner agent_1: unknown policy 'bogus'"):
        evaluate_transfer(runs["reward"], ROOMS, partners={"agent_1": "bogus"}, episodes=1)
    with pytest.raises(ConfigError, match="must be the agents"):
        evaluate_transfer(runs["reward"], ROOMS, partners={"agent_2": "oracle"}, episodes=1)
    with pytest.raises(ConfigError, match="source_agent must be a trained agent"):
        evaluate_transfer(runs["reward"], ROOMS, episodes=1, source_agent="agent_1")
    # The same run fits the 7x7 map it trained on, position extra and all.
    rows = evaluate_transfer(runs["position"], GC3, {"size": 7}, episodes=1, num_envs=1)
    assert rows[0]["n"] == 1


def test_the_evaluate_command_runs_transfer_and_writes_the_table(runs, tmp_path, capsys):
    from experiments.evaluate import main

    table = tmp_path / "out.csv"
    main([
        str(runs["reward"]), "--transfer", ROOMS, "--partners", "goal_seeker", "--partners",
        "none", "--episodes", "2", "--num-envs", "2", "--greedy", "--table", str(table),
        "--table", str(tmp_path / "out.md"),
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert "| condition | map | metric | mean | 95% CI | n |" in printed
    with table.open() as f:
        rows = list(csv.DictReader(f))
    conditions = {r["condition"] for r in rows}
    assert conditions == {f"{ROOMS}/goal_seeker", f"{ROOMS}/none"}
    # the map played and the one the run trained on, as the table records them
    assert {r["map"] for r in rows} == {"19x19, 100 steps"}
    assert all(r["trained_map"] and r["trained_map"] != r["map"] for r in rows)
    assert "(trained: " in printed
    assert {r["n"] for r in rows if r["metric"] == "return"} == {"2"}
    assert (tmp_path / "out.md").read_text().startswith("| condition |")
    with pytest.raises(SystemExit, match=r"error: .*'position'.*map size"):
        main([str(runs["position"]), "--transfer", ROOMS, "--episodes", "1"])
    with pytest.raises(SystemExit, match=r"--table files must end in \.csv or \.md"):
        main([str(runs["reward"]), "--transfer", ROOMS, "--table", str(tmp_path / "x.txt")])


@pytest.mark.slow
def test_the_social_transfer_conditions_run_from_the_command_line(runs, tmp_path, capsys):
    from experiments.evaluate import main

    table = tmp_path / "suite.csv"
    main([str(runs["reward"]), "--conditions", "social_transfer", "--episodes", "1",
          "--num-envs", "1", "--table", str(table)])  # fmt: skip
    with table.open() as f:
        rows = list(csv.DictReader(f))
    names = [c.name for c in CONDITIONS["social_transfer"]]
    assert list(dict.fromkeys(r["condition"] for r in rows)) == names
    lengths = {r["condition"]: float(r["mean"]) for r in rows if r["metric"] == "length"}
    assert lengths["goal_cycle_4/alone"] == 250.0 and lengths["maze/alone"] <= 4 * 13 * 13


def test_long_evaluations_have_a_progress_bar_shown_on_terminals_only():
    from marlgrid.agents.bookkeeping.logger import evaluation_bar

    bar = evaluation_bar("transfer conditions", 7, unit="condition")
    assert bar.total == 7
    assert bar.disable  # pytest's captured stderr is no terminal: CI logs stay clean
    bar.close()
