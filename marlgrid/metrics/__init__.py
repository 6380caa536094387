"""Behaviour metrics of episodes: the goal-cycle social metrics (:mod:`.social`) and the
following measures with their time-shifted controls (:mod:`.following`)."""
