#!/usr/bin/env bash
# The training runs of the social-learning findings pages (social_r*.md and
# social_hidden_goal_following.md), as their pre-registered plans give them, in two lanes.
#
#   bash experiments/results/findings_runs.sh r1             # every run of a page's plan
#   bash experiments/results/findings_runs.sh r3_social_aux:1,2 r1_penalty_0   # ARM[:SEEDS]
#   DRY=1 bash experiments/results/findings_runs.sh r1 r2    # print the commands only
#   bash experiments/results/findings_runs.sh                # list the pages and arms
#
# Pages: r1 r2 r3 r5 r7 r8 hidden_goal. An arm without :SEEDS runs the seeds its plan gives it.
# Each run has its own directory runs/<page>/<arm>/seed_<k> (the plans' paths): rerunning resumes
# an unfinished run from its newest checkpoint and skips a finished one. Logs:
# runs/<page>/logs/<arm>.seed_<k>.log. Evaluation and tables: the commands on each page.
set -euo pipefail
cd "$(dirname "$0")/../.."
source experiments/results/lanes.sh

PY=${PY:-.venv/bin/python}
OUT=${OUT:-runs}
COMMON="'env.settings.agent.extras=[reward,action]' torch_threads=1 video=false"
COMMON="$COMMON logger.progress=false"
SHORT="total_timesteps=1500000"
LONG="total_timesteps=5000000"
SOLO="experiment=solo_novice agent=ppo_lstm_expert"
SOCIAL="experiment=novice_with_experts agent=ppo_lstm_expert"
AUX="experiment=novice_with_experts agent=ppo_lstm_expert_aux"
ALL=1,2,3,4,5

# arm | page folder/arm folder | seeds | overrides
ARMS=(
  "r1_penalty_1.5|r1/penalty_1.5|$ALL|$SOLO scale=small $SHORT"
  "r1_penalty_0|r1/penalty_0|$ALL|$SOLO scale=small $SHORT env.settings.penalty=0"
  "r1_penalty_1.5_long|r1/penalty_1.5_long|1|$SOLO scale=small $LONG"
  "r1_full_1.5|r1/full_1.5|1|$SOLO $SHORT"
  "r1_full_0|r1/full_0|1|$SOLO $SHORT env.settings.penalty=0"
  "r2_social|r2/social|$ALL|$SOCIAL scale=small $SHORT"
  "r2_social_long|r2/social_long|1|$SOCIAL scale=small $LONG"
  "r2_full|r2/full|1|$SOCIAL $SHORT"
  "r3_social_aux|r3/social_aux|$ALL|$AUX scale=small $SHORT"
  "r3_alone_aux|r3/alone_aux|$ALL|experiment=solo_novice agent=ppo_lstm_expert_aux scale=small $SHORT"
  "r3_social_autoencoder|r3/social_autoencoder|$ALL|$AUX scale=small $SHORT agent.aux_losses.0.options.target=current"
  "r3_social_aux_coef1|r3/social_aux_coef1|1,2,3|$AUX scale=small $SHORT agent.aux_losses.0.coef=1.0"
  "r3_social_aux_coef10|r3/social_aux_coef10|1,2,3|$AUX scale=small $SHORT agent.aux_losses.0.coef=10.0"
  "r3_social_aux_long|r3/social_aux_long|1|$AUX scale=small $LONG"
  "r3_full_social_aux|r3/full_social_aux|1|$AUX $SHORT"
  "r5_bc|r5/bc|$ALL|experiment=bc_on_experts scale=small $SHORT"
  "r7_mixed|r7/mixed|$ALL|$AUX scale=small $SHORT mixed.solo_fraction=0.75"
  "r8_eps_0.3|r8/eps_0.3|$ALL|$AUX scale=small $SHORT roles.agent_1.epsilon=0.3 roles.agent_2.epsilon=0.3"
  "r8_eps_0.6|r8/eps_0.6|$ALL|$AUX scale=small $SHORT roles.agent_1.epsilon=0.6 roles.agent_2.epsilon=0.6"
  "hidden_goal_ppo_lstm_expert|hidden_goal/ppo_lstm_expert|$ALL|experiment=blind_novice_with_experts agent=ppo_lstm_expert $SHORT"
  "hidden_goal_ppo_lstm_expert_aux|hidden_goal/ppo_lstm_expert_aux|$ALL|experiment=blind_novice_with_experts agent=ppo_lstm_expert_aux $SHORT"
)  # fmt: skip

if [[ $# -eq 0 ]]; then
  echo "usage: findings_runs.sh PAGE|ARM[:SEEDS] ...   (DRY=1 prints the commands only)"
  for entry in "${ARMS[@]}"; do IFS='|' read -r arm _ seeds _ <<<"$entry"; echo "  $arm (seeds $seeds)"; done
  exit 2
fi

PAGES=" r1 r2 r3 r5 r7 r8 hidden_goal "

arm_field() {  # arm_field ARM N: field N (1-based) of ARM's entry
  local entry
  for entry in "${ARMS[@]}"; do
    [[ ${entry%%|*} == "$1" ]] && { cut -d'|' -f"$2" <<<"$entry"; return 0; }
  done
  return 1
}

queue() {  # queue ARM SEEDS: one run per seed (SEEDS comma-separated)
  local arm=$1 dir args seed
  dir=$(arm_field "$arm" 2) args=$(arm_field "$arm" 4)
  for seed in ${2//,/ }; do
    [[ $seed =~ ^[0-9]+$ ]] || { echo "seed '$seed' of arm '$arm' must be a whole number" >&2; exit 2; }
    lane_add "$OUT/${dir%%/*}/logs/${dir#*/}.seed_$seed.log" \
      "$PY experiments/train.py $args seed=$seed $COMMON hydra.run.dir=$OUT/$dir/seed_$seed"
  done
}

for item in "$@"; do  # every item checked before anything runs
  if [[ $PAGES != *" $item "* ]] && ! arm_field "${item%%:*}" 1 >/dev/null; then
    echo "unknown page or arm '${item%%:*}'; pages:$PAGES; arms: run the script without arguments" >&2
    exit 2
  fi
done
for item in "$@"; do
  if [[ $PAGES == *" $item "* ]]; then  # a page stands for all its arms, at their seeds
    for entry in "${ARMS[@]}"; do
      name=${entry%%|*}
      [[ $name == "${item}_"* ]] && queue "$name" "$(arm_field "$name" 3)"
    done
  elif [[ $item == *:* ]]; then
    queue "${item%%:*}" "${item#*:}"
  else
    queue "$item" "$(arm_field "$item" 3)"
  fi
done
lanes_run
