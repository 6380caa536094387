"""The training loop: the rollout loop over every role (:mod:`.rollout`), the trainer and its
config (:mod:`.trainer`, :mod:`.train_config`), callbacks (checkpoints, evaluation, videos,
curricula), roles, streams, mixing and warm starts. Run bookkeeping (run directories,
checkpoints, saved runs, the logger) lives in :mod:`marlgrid.agents.bookkeeping`."""
