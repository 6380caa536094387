"""Scripted policies: the registry and every scripted policy of the library.

``make_policy(name)`` builds any registered policy (:mod:`.scripted` holds the registry, the base
class, path finding and the goal-cycle players ``random``, ``oracle`` and ``discoverer``); the
others live one family per module: :mod:`.follower`, :mod:`.goal_seeker`, :mod:`.baselines`
(``reward_blind``, ``play_safe``) and :mod:`.hallway_ends` (``cue_reader``, ``cue_blind``).
"""

from marlgrid.policies.scripted import (
    POLICIES,
    CycleKnowledge,
    DiscovererPolicy,
    OraclePolicy,
    RandomPolicy,
    ScriptedPolicy,
    act,
    make_policy,
    navigate,
    path_lengths,
    policy_class,
    register_policy,
    scripted_action,
)

__all__ = [
    "POLICIES",
    "CycleKnowledge",
    "DiscovererPolicy",
    "OraclePolicy",
    "RandomPolicy",
    "ScriptedPolicy",
    "act",
    "make_policy",
    "navigate",
    "path_lengths",
    "policy_class",
    "register_policy",
    "scripted_action",
]
