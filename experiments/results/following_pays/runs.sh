#!/usr/bin/env bash
# The training runs of the following-pays page (README.md here), as its plan gives them, in two
# lanes (experiments/results/lanes.sh).
#
#   bash experiments/results/following_pays/runs.sh social:1,2 solo    # ARM[:SEEDS] ...
#   DRY=1 bash experiments/results/following_pays/runs.sh social       # print the commands only
#   bash experiments/results/following_pays/runs.sh                    # list the arms
#
# Each run has its own directory $OUT/following_pays/<arm>/seed_<k>: rerunning resumes an
# unfinished run from its newest checkpoint and skips a finished one. Logs:
# $OUT/following_pays/logs/<arm>.seed_<k>.log.
set -euo pipefail
cd "$(dirname "$0")/../../.."
source experiments/results/lanes.sh  # also PY and OUT defaults

COMMON="torch_threads=1 video=false logger.progress=false"
SMALL="env.settings.size=7 env.settings.max_steps=100"
ALL=1,2,3,4,5
# from the social arm's final policy of the same seed (kept by analyse.py), the penalty raised
# linearly from 0.5 to 1.5 over 2M env steps, then held to 5M
TO_1_5="init_from=experiments/results/following_pays/kept/social/seed_@SEED@/agent.pt"
TO_1_5="$TO_1_5 curriculum=penalty_anneal 'curriculum.penalty.points=[[0,0.5],[2000000,1.5]]'"
TO_1_5="$TO_1_5 total_timesteps=5000000"
RL_EXPERTS="roles=novice_with_trained_experts"
RL_EXPERTS="$RL_EXPERTS 'roles.agent_1.checkpoint=\"experiments/experts/goal_cycle_7x7_3agents_expert_seed0.pt\"'"
RL_EXPERTS="$RL_EXPERTS 'roles.agent_2.checkpoint=\"experiments/experts/goal_cycle_7x7_3agents_expert_seed1.pt\"'"

# arm | seeds | overrides
ARMS=(
  "social|$ALL|experiment=hidden_goal_9x9"
  "solo|$ALL|experiment=hidden_goal_9x9_solo"
  "social_aux|$ALL|experiment=hidden_goal_9x9 agent=ppo_lstm_expert_aux"
  "social_7x7|$ALL|experiment=hidden_goal_9x9 $SMALL"
  "solo_7x7|$ALL|experiment=hidden_goal_9x9_solo $SMALL"
  "social_7x7_rl|$ALL|experiment=hidden_goal_9x9 $SMALL $RL_EXPERTS"
  "social_to_1.5|$ALL|experiment=hidden_goal_9x9 $TO_1_5"
  "social_p1.5|$ALL|experiment=hidden_goal_9x9 env.settings.penalty=1.5"
)

study_queue following_pays "$@"
