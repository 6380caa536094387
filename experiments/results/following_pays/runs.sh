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
source experiments/results/lanes.sh

PY=${PY:-.venv/bin/python}
OUT=${OUT:-runs}
COMMON="torch_threads=1 video=false logger.progress=false"
SMALL="env.settings.size=7 env.settings.max_steps=100"
ALL=1,2,3,4,5

# arm | seeds | overrides
ARMS=(
  "social|$ALL|experiment=hidden_goal_9x9"
  "solo|$ALL|experiment=hidden_goal_9x9_solo"
  "social_aux|$ALL|experiment=hidden_goal_9x9 agent=ppo_lstm_expert_aux"
  "social_7x7|$ALL|experiment=hidden_goal_9x9 $SMALL"
  "solo_7x7|$ALL|experiment=hidden_goal_9x9_solo $SMALL"
)

if [[ $# -eq 0 ]]; then
  echo "usage: bash $0 ARM[:SEEDS] ...  (DRY=1 prints the commands only); arms:" >&2
  for entry in "${ARMS[@]}"; do IFS='|' read -r arm seeds _ <<<"$entry"; echo "  $arm (seeds $seeds)" >&2; done
  exit 2
fi

for request in "$@"; do
  arm=${request%%:*} found=""
  for entry in "${ARMS[@]}"; do
    IFS='|' read -r name seeds args <<<"$entry"
    [[ $name == "$arm" ]] && found=1 && break
  done
  [[ -n $found ]] || { echo "unknown arm '$arm'; run without arguments for the list" >&2; exit 2; }
  [[ $request == *:* ]] && seeds=${request#*:}
  for seed in ${seeds//,/ }; do
    [[ $seed =~ ^[0-9]+$ ]] || { echo "seed '$seed' of arm '$arm' must be a whole number" >&2; exit 2; }
    lane_add "$OUT/following_pays/logs/$arm.seed_$seed.log" \
      "$PY experiments/train.py $args name=following_pays_$arm seed=$seed $COMMON \
hydra.run.dir=$OUT/following_pays/$arm/seed_$seed"
  done
done
lanes_run
