#!/usr/bin/env bash
# The runs behind experiments/results/drqn.md (DQN vs DRQN, PER vs uniform, soft-Q temperature,
# stored-state staleness, PPO-LSTM vs DRQN in wall-clock time), at the scale stated there.
#
#   bash experiments/results/drqn_runs.sh                 # every line, 3 seeds, 2 jobs at a time
#   JOBS=1 SEEDS="0" bash experiments/results/drqn_runs.sh e8_drqn e8_dqn   # some lines only
#   DRY=1 bash experiments/results/drqn_runs.sh           # print the commands (and write them to
#                                                         # runs/drqn_results/commands.txt) only
#   SEEDS="0 1 2 3 4" bash experiments/results/drqn_runs.sh cl400_soft_dqn cl400_soft_drqn
#   python experiments/results/drqn_plot.py               # figures + drqn_summary.csv
#
# Resumable: every run has its own directory runs/drqn_results/<line>/seed_<k>; rerunning the
# script resumes unfinished runs from their newest checkpoint and skips finished ones (the trainer
# prints "run ... is complete: ...; nothing to do"). Each run's output goes to
# runs/drqn_results/logs/<line>.seed_<k>.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
source experiments/results/lanes.sh

PY=${PY:-.venv/bin/python}
JOBS=${JOBS:-2}
OUT=${OUT:-runs/drqn_results}
SEEDS=${SEEDS:-"0 1 2"}
Q_STEPS=${Q_STEPS:-40000}       # DQN / DRQN runs (Empty-8x8 and Cluttered-11x11)
SOFT_STEPS=${SOFT_STEPS:-30000} # the soft-Q temperature sweep
REFRESH_SEEDS=${REFRESH_SEEDS:-"0 1 2"}  # the stored-state refresh (staleness) line
PPO_STEPS=${PPO_STEPS:-100000}

COMMON="video=false logger.tensorboard=false logger.progress=false checkpoint_every=10"
# Scaled torso shared by every learner (full scale: the presets' conv 32-32 + 128 widths).
SMALL="agent.network.conv_channels=[] agent.network.hidden_size=64"
SMALL="$SMALL agent.network.trunk_sizes=[64] agent.network.head_sizes=[64]"
# Replay learners at this scale: a 50k-step replay, an update every batched step (16 env
# steps), a target copy every 200 gradient steps (full scale: 100k, 4, 500). learning_starts
# 2064 puts the first update on the first step of the third 1024-step iteration, so every
# iteration ends on update 64k: the trainer logs only the last update's metrics of an
# iteration, and a refresh every 64 updates then lands on every row.
Q="$SMALL agent.buffer_size=50000 agent.train_freq=1 agent.target_update_period=200"
Q="$Q agent.learning_starts=2064"
DRQN="agent=drqn $Q agent.seq_len=20 agent.burn_in=10 agent.overlap=10"
DQN="agent=dqn $Q"
PPO="agent=ppo_lstm $SMALL"
E8="env.id=MarlGrid-Empty-8x8-v0 env.settings.max_steps=100"
CL="env.id=MarlGrid-Cluttered-11x11-v0 env.settings.max_steps=100"
# the blog's protocol (drqn.md, "Correction planned"): 400-step episodes, soft-Q for both
CL400="env.id=MarlGrid-Cluttered-11x11-v0 env.settings.max_steps=400"
SOFT="agent.exploration=boltzmann agent.alpha=0.005"
CL400_STEPS=${CL400_STEPS:-100000}

# line name | total_timesteps | overrides   (in priority order: earlier lines run first)
LINES=(
  "e8_drqn|$Q_STEPS|$DRQN $E8"
  # 64 updates per logged iteration: a refresh every 64 updates lands on every row
  "e8_drqn_refresh|$Q_STEPS|$DRQN $E8 agent.refresh_every=64"
  "e8_dqn|$Q_STEPS|$DQN $E8"
  "e8_ppo|$PPO_STEPS|$PPO $E8"
  "cl_dqn|$Q_STEPS|$DQN $CL"
  "cl_drqn|$Q_STEPS|$DRQN $CL"
  "cl_ppo|$PPO_STEPS|$PPO $CL"
  "e8_drqn_uniform|$Q_STEPS|$DRQN $E8 agent.uniform=true"
  "e8_soft_a0.005|$SOFT_STEPS|$DRQN $E8 agent.exploration=boltzmann agent.alpha=0.005"
  "e8_soft_a0.02|$SOFT_STEPS|$DRQN $E8 agent.exploration=boltzmann agent.alpha=0.02"
  "e8_soft_a0.1|$SOFT_STEPS|$DRQN $E8 agent.exploration=boltzmann agent.alpha=0.1"
  # run with SEEDS="0 1 2 3 4" (5 seeds per arm, as the correction's plan says)
  "cl400_soft_dqn|$CL400_STEPS|$DQN $CL400 $SOFT"
  "cl400_soft_drqn|$CL400_STEPS|$DRQN $CL400 $SOFT"
)

want() {  # is line $1 selected on the command line (all lines when none are named)?
  [[ ${#SELECTED[@]} -eq 0 ]] && return 0
  local s
  for s in "${SELECTED[@]}"; do [[ $s == "$1" ]] && return 0; done
  return 1
}

SELECTED=("$@")
for entry in "${LINES[@]}"; do  # line-major: a line's seeds run before the next line's
  IFS='|' read -r name steps args <<<"$entry"
  want "$name" || continue
  seeds=$SEEDS
  [[ $name != *_refresh ]] || seeds=$REFRESH_SEEDS
  for seed in $seeds; do
    lane_add "$OUT/logs/$name.seed_$seed.log" "$PY experiments/train.py name=$name seed=$seed \
total_timesteps=$steps $args $COMMON hydra.run.dir=$OUT/$name/seed_$seed"
  done
done
[[ ${#LANE_CMDS[@]} -gt 0 ]] || { echo "no line matches: $*" >&2; exit 2; }
mkdir -p "$OUT"
lanes_run "$OUT/commands.txt"  # the exact commands, also one per line in commands.txt
