"""The learning algorithms: recurrent PPO (:mod:`.ppo`, with hidden-state refreshing in
:mod:`.refresh`), recurrent DQN with prioritized sequence replay (:mod:`.drqn`) and behaviour
cloning of other agents (:mod:`.bc`, its imitation math in :mod:`.imitation`, also PPO's
``imitation`` loss term). Each module registers its learner in
:data:`marlgrid.agents.learner.LEARNERS`."""
