"""The learning algorithms: recurrent PPO (:mod:`.ppo`, with hidden-state refreshing in
:mod:`.refresh`) and recurrent DQN with prioritized sequence replay (:mod:`.drqn`). Each module
registers its learner in :data:`marlgrid.agents.learner.LEARNERS`."""
