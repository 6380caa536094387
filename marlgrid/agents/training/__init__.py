"""The training loop: the rollout loop over every role (:mod:`.rollout`), the trainer and its
config (:mod:`.trainer`, :mod:`.train_config`), callbacks (checkpoints, evaluation, videos,
curricula), roles, logging, run directories and checkpoints."""
