#!/usr/bin/env bash
# The training runs of the refresh-on-the-goal-cycle page (README.md here), as its plan gives
# them, in two lanes (experiments/results/lanes.sh).
#
#   bash experiments/results/refresh_goal_cycle/runs.sh refresh_2:1,2 refresh_off   # ARM[:SEEDS]
#   DRY=1 bash experiments/results/refresh_goal_cycle/runs.sh refresh_2              # print only
#   bash experiments/results/refresh_goal_cycle/runs.sh                              # the arms
#
# Each run has its own directory $OUT/refresh_goal_cycle/<arm>/seed_<k>: rerunning resumes an
# unfinished run from its newest checkpoint and skips a finished one.
set -euo pipefail
cd "$(dirname "$0")/../../.."
source experiments/results/lanes.sh  # also PY and OUT defaults

COMMON="agent.log_batch_kl=true torch_threads=1 video=false logger.progress=false"
SOLO="experiment=solo_novice agent=ppo_lstm_expert scale=small total_timesteps=1500000"
SOLO="$SOLO env.settings.penalty=0 'env.settings.agent.extras=[reward,action]' env.num_envs=16"
ALL=1,2,3,4,5

# arm | seeds | overrides
ARMS=(
  "refresh_2|$ALL|$SOLO agent.refresh_interval=2"
  "refresh_off|$ALL|$SOLO agent.refresh_interval=0"
  "recipe_refresh_off|$ALL|experiment=goal_cycle_expert scale=small agent.refresh_interval=0"
)

study_queue refresh_goal_cycle "$@"
