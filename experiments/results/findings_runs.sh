#!/usr/bin/env bash
# The training runs of the social-learning findings pages (social_r*.md and
# social_hidden_goal_following.md), as their pre-registered plans give them, in two lanes.
#
#   bash experiments/results/findings_runs.sh r1             # every run of a page's plan
#   bash experiments/results/findings_runs.sh r3_social_aux:1,2 r1_penalty_0   # ARM[:SEEDS]
#   DRY=1 bash experiments/results/findings_runs.sh r1 r2    # print the commands only
#   ANALYSE=1 bash experiments/results/findings_runs.sh r1 r2   # evaluate, compare, curves
#   bash experiments/results/findings_runs.sh                # list the pages and arms
#
# Pages: r1 r2 r3 r5 r7 r8 hidden_goal. An arm without :SEEDS runs the seeds its plan gives it.
# Each run has its own directory runs/<page>/<arm>/seed_<k> (the plans' paths): rerunning resumes
# an unfinished run from its newest checkpoint and skips a finished one. Logs:
# runs/<page>/logs/<arm>.seed_<k>.log. Each run is named after its arm (name=<arm>), so
# aggregate.py --group-by name tells the arms apart.
#
# ANALYSE=1 (pages only) plays the plans' evaluations of the runs that are here: experts_eval.py
# in the training env (200 layouts from seed 777, greedy and sampled, beside the experts with
# --partners) into social_<page>_eval.csv; eval_compare.py's t-intervals and the pass rules'
# Welch tests into social_<page>_compare_{t,welch}.csv; aggregate.py's curves into
# social_<page>_<metric>_*.csv; and the plans' frozen evaluations alone (R2, R5, R7) or in the
# transfer envs (R6) into one evaluate.py table per run under social_<page>/. R1's, R3's and R5's
# analyses also export the agents R6 plays to social_r6/agents/ (committed: run directories may
# not survive a session), and R6 plays those files. DRY=1 prints them. The tables go to RESULTS,
# by default $OUT/analysis/results, a fresh copy of experiments/results: the committed tables
# never change unless RESULTS=experiments/results is given, and the script ends by listing the
# tables that differ from them. Every table is merged into the existing one (--merge): the rows
# and curves of the runs evaluated now replace theirs and those of runs no longer here stay, so
# an analysis rerun after a session lost some run directories adds the new runs without
# dropping the old ones. aggregate.py refuses to pool runs of one arm whose configs differ
# beyond the seed (a reduced-budget rerun beside the plan's runs), naming the keys.
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
  "r5_full_bc|r5/full_bc|1|experiment=bc_on_experts $SHORT"
  "r7_mixed|r7/mixed|$ALL|$AUX scale=small $SHORT mixed.solo_fraction=0.75"
  "r7_full_mixed|r7/full_mixed|1|$AUX $SHORT mixed.solo_fraction=0.75"
  "r8_eps_0.3|r8/eps_0.3|$ALL|$AUX scale=small $SHORT roles.agent_1.epsilon=0.3 roles.agent_2.epsilon=0.3"
  "r8_eps_0.6|r8/eps_0.6|$ALL|$AUX scale=small $SHORT roles.agent_1.epsilon=0.6 roles.agent_2.epsilon=0.6"
  "r8_full_eps_0.3|r8/full_eps_0.3|1|$AUX $SHORT roles.agent_1.epsilon=0.3 roles.agent_2.epsilon=0.3"
  "r8_full_eps_0.6|r8/full_eps_0.6|1|$AUX $SHORT roles.agent_1.epsilon=0.6 roles.agent_2.epsilon=0.6"
  "hidden_goal_ppo_lstm_expert|hidden_goal/ppo_lstm_expert|$ALL|experiment=blind_novice_with_experts agent=ppo_lstm_expert $SHORT"
  "hidden_goal_ppo_lstm_expert_aux|hidden_goal/ppo_lstm_expert_aux|$ALL|experiment=blind_novice_with_experts agent=ppo_lstm_expert_aux $SHORT"
  "hidden_goal_ppo_lstm_expert_aux_long|hidden_goal/ppo_lstm_expert_aux_long|1|experiment=blind_novice_with_experts agent=ppo_lstm_expert_aux $LONG"
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
      "$PY experiments/train.py $args name=$arm seed=$seed $COMMON hydra.run.dir=$OUT/$dir/seed_$seed"
  done
}

SCRIPTS=experiments/results  # the analysis scripts and the committed tables
# Where ANALYSE=1 writes: by default a copy of the committed results folder outside it (the
# committed tables are never changed by accident); RESULTS=experiments/results updates them.
RESULTS=${RESULTS:-$OUT/analysis/results}
EVAL="--episodes 200 --seed 777"
# alone on the canonical map (13x13 / 250 steps: the full-scale seeds), and on 7x7 / 100 steps
ALONE_FULL="--transfer MarlGrid-GoalCycle-13x13-v0 --partners none --episodes 200 --greedy --seed 777"
ALONE="$ALONE_FULL --target-setting size=7 --target-setting max_steps=100"
GC4="--transfer MarlGrid-GoalCycle-13x13-4Goals-3Agents-v0 --partners oracle --partners none"
GC4="$GC4 --target-setting size=7 --target-setting max_steps=100 --episodes 200 --greedy --seed 777"
SUITE="--conditions social_transfer --episodes 200 --greedy --seed 777"
AGENTS=$RESULTS/social_r6/agents  # R6's frozen agents: R1's, R3's and R5's final policies
EXPERTS="experiments/experts/goal_cycle_7x7_3agents_expert_seed0.pt"
EXPERTS="$EXPERTS experiments/experts/goal_cycle_7x7_3agents_expert_seed1.pt"

step() {  # step COMMAND...: print it, and run it unless DRY
  echo "$*"
  [[ -n ${DRY:-} ]] || OMP_NUM_THREADS=1 eval "$*"
}

here() {  # here FOLDER...: the run directories under $OUT/<FOLDER> that exist, one per line
  run_dirs "${@/#/$OUT/}"
}

finished() {  # finished FOLDER...: the run directories under $OUT/<FOLDER> whose training ended
  local runs
  mapfile -t runs < <(here "$@")
  complete_runs "${runs[@]}"
}

evaluate() {  # evaluate PAGE [experts_eval options]: the page's finished runs in their training env
  local page=$1 runs
  shift
  mapfile -t runs < <(finished "${ARM_DIRS[@]/#/$page/}")
  [[ ${#runs[@]} -gt 0 ]] || { echo "no runs of $page under $OUT/$page" >&2; return 0; }
  step "$PY $SCRIPTS/experts_eval.py ${runs[*]} $EVAL $* \
--csv $RESULTS/social_${page}_eval.csv --merge"
}

frozen() {  # frozen PAGE TAG OPTIONS FOLDER...: evaluate.py OPTIONS per finished run, one
  # table each
  local page=$1 tag=$2 options=$3
  shift 3
  play "$page" "$tag" "$options" $(finished "$@")
}

play() {  # play PAGE TAG OPTIONS RUN_OR_FILE...: evaluate.py OPTIONS on each, one table each,
  # named after the run (<page>/<arm>/seed_<k> -> <page>_<arm>_seed_<k>) or the file (NAME.pt)
  local page=$1 tag=$2 options=$3 agent name
  shift 3
  for agent in "$@"; do
    name=${agent#"$OUT"/} name=${name##*/agents/} name=${name##*/experts/}
    name=${name%.pt}
    step "$PY experiments/evaluate.py $agent $options --table $RESULTS/social_$page/${name//\//_}_$tag.csv"
  done
}

keep() {  # keep FOLDER...: export each finished run's policy for R6 to social_r6/agents/ (run
  # directories may not survive a session; the files play as the runs did)
  local run name
  for run in $(finished "$@"); do
    name=${run#"$OUT"/}
    step "$PY experiments/export_expert.py $run $AGENTS/${name//\//_}.pt --overwrite --note 'R6 agent: $name'"
  done
}

metric_curves() {  # metric_curves PAGE "METRIC..." "OPTIONS" FOLDER...: aggregate.py curves
  # of each metric over the folders that hold runs, into social_<page>_<metric's last part>_*;
  # BORROW="PAGE2 CONDITION" also draws CONDITION from PAGE2's committed curves of the metric
  local page=$1 metrics=$2 options=$3 metric folder folders=() borrow
  shift 3
  for folder in "$@"; do [[ -n $(here "$folder") ]] && folders+=("$OUT/$folder"); done
  [[ ${#folders[@]} -gt 0 ]] || return 0
  for metric in $metrics; do
    borrow=${BORROW:+--borrow $RESULTS/social_${BORROW%% *}_${metric##*/} ${BORROW#* } }
    step "$PY experiments/aggregate.py ${folders[*]} --group-by name --metric $metric --last 20 \
${options:+$options }--include-unfinished --merge $borrow--out $RESULTS/social_${page}_${metric##*/}"
    # the CSVs and the figure stay; aggregate's own page would sit beside the result pages
    step "rm -f $RESULTS/social_${page}_${metric##*/}.md"
  done
}

curves() {  # curves PAGE FOLDER...: return, correct and wrong entries against env steps (the
  # return of every episode: R7's mixed runs also log charts/{social,solo}/episodic_return)
  local page=$1
  shift
  metric_curves "$page" "charts/episodic_return social/rewards_agent_0 social/penalties_agent_0" \
    "--smooth 5" "$@"
}

following() {  # following PAGE FOLDER...: the novice's following measures against env steps
  local page=$1
  shift
  metric_curves "$page" "social/repeat_expert_excess_agent_0 social/follow_expert_agent_0" "" "$@"
}

compare() {  # compare PAGE CSVS WELCH...: t-intervals of return, correct and wrong entries; Welch
  local page=$1 csvs=$2 csv
  shift 2
  for csv in $csvs; do  # a page compared with another waits for the other's evaluation
    [[ -f $csv || -n ${DRY:-} ]] || { echo "skipped social_${page}_compare: no $csv" >&2; return 0; }
  done
  step "$PY $SCRIPTS/eval_compare.py $csvs --metric return --metric rewards --metric penalties $* \
--out $RESULTS/social_${page}_compare"
}

analyse() {  # analyse PAGE: the evaluations its plan names, of the runs that are here
  local page=$1 entry zero
  ARM_DIRS=()
  for entry in "${ARMS[@]}"; do
    [[ ${entry%%|*} == "${page}_"* ]] && ARM_DIRS+=("$(cut -d'|' -f2 <<<"$entry" | cut -d/ -f2)")
  done
  local r1=$RESULTS/social_r1_eval.csv r2=$RESULTS/social_r2_eval.csv
  local r3=$RESULTS/social_r3_eval.csv
  case $page in
    r1)
      evaluate r1
      zero=$(here r1/penalty_0 | tr '\n' ' ')  # the penalty-0 learners, played at 1.5
      [[ -z $zero ]] || step "$PY $SCRIPTS/experts_eval.py $zero$EVAL --rule penalty=1.5 \
--csv $RESULTS/social_r1_eval_penalty0_at_1.5.csv --merge"
      [[ -z $zero ]] || step "$PY $SCRIPTS/eval_compare.py $RESULTS/social_r1_eval_penalty0_at_1.5.csv \
--metric return --metric rewards --metric penalties --out $RESULTS/social_r1_penalty0_at_1.5"
      compare r1 "$r1" --welch r1/penalty_0 r1/penalty_1.5
      curves r1 r1/penalty_1.5 r1/penalty_0
      keep r1/penalty_1.5 ;;
    r2)
      evaluate r2 --partners
      frozen r2 alone "$ALONE" r2/social
      compare r2 "$r1 $r2" --welch r2/social r1/penalty_1.5
      curves r2 r2/social r1/penalty_1.5 r2/social_long
      following r2 r2/social r2/social_long ;;
    r3)
      evaluate r3 --partners
      compare r3 "$r2 $r3" --welch r3/social_aux r2/social --welch r3/social_aux r3/alone_aux \
        --welch r3/social_aux r3/social_autoencoder
      curves r3 r3/social_aux r2/social r3/alone_aux r3/social_autoencoder r3/social_aux_long
      following r3 r3/social_aux r3/social_autoencoder r3/social_aux_long
      metric_curves r3 "losses/next_view losses/next_view/cell_accuracy" "--smooth 5" \
        r3/social_aux r3/alone_aux r3/social_autoencoder r3/social_aux_coef1 r3/social_aux_coef10
      aux=$(finished r3/social_aux r3/alone_aux r3/social_autoencoder r3/social_aux_coef1 \
        r3/social_aux_coef10 | tr '\n' ' ')  # the cell accuracy's trivial predictors
      [[ -z $aux ]] || step "$PY $SCRIPTS/view_chance.py $aux--steps 10000 \
--csv $RESULTS/social_r3_view_chance.csv --merge"
      step "$PY $SCRIPTS/derived_tables.py --dir $RESULTS"
      # the coefficient sweep (E) beside A (coefficient 3): return and cell accuracy
      metric_curves r3_sweep "episodic_return losses/next_view/cell_accuracy" "--smooth 5" \
        r3/social_aux r3/social_aux_coef1 r3/social_aux_coef10
      keep r3/social_aux r3/alone_aux ;;
    r5)
      evaluate r5 --partners
      frozen r5 alone "$ALONE" r5/bc
      frozen r5 alone_full "$ALONE_FULL" r5/full_bc
      # R3's arm A alone, from its kept agents (its run directories need not be here)
      play r5 alone "$ALONE" "$AGENTS"/r3_social_aux_seed_*.pt
      compare r5 "$r3 $RESULTS/social_r5_eval.csv" --welch r3/social_aux r5/bc
      step "$PY $SCRIPTS/derived_tables.py --dir $RESULTS"  # social_r5_settings.csv: both settings, Welch
      curves r5 r5/bc
      metric_curves r5 "losses/bc_accuracy" "--smooth 5" r5/bc
      keep r5/bc ;;
    r7)  # beside R3's arm C (alone + next view): its kept agents and committed curves, so its
      # run directories need not be here
      frozen r7 alone "$ALONE" r7/mixed
      frozen r7 alone_full "$ALONE_FULL" r7/full_mixed
      play r7 alone "$ALONE" "$AGENTS"/r3_alone_aux_seed_*.pt
      BORROW="r3 name=r3_alone_aux" curves r7 r7/mixed
      # the plan's second reading: the mixed runs' training return beside the experts and without
      metric_curves r7_social "charts/social/episodic_return" "--smooth 5" r7/mixed
      metric_curves r7_solo "charts/solo/episodic_return" "--smooth 5" r7/mixed
      step "$PY $SCRIPTS/derived_tables.py --dir $RESULTS" ;;  # social_r7_alone.csv, social_r7_training.csv
    r8)
      evaluate r8 --partners
      compare r8 "$r3 $RESULTS/social_r8_eval.csv" --welch r8/eps_0.3 r3/alone_aux \
        --welch r8/eps_0.6 r3/alone_aux
      BORROW="r3 name=r3_alone_aux" curves r8 r8/eps_0.3 r8/eps_0.6
      # the plan's second rule: the novice's training return against its two experts' in the
      # same runs (the mean of the last 20 logged values each)
      metric_curves r8 "social/return_agent_0 social/return_agent_1 social/return_agent_2" "" \
        r8/eps_0.3 r8/eps_0.6
      step "$PY $SCRIPTS/derived_tables.py --dir $RESULTS" ;;  # social_r8_vs_experts.csv
    hidden_goal)
      evaluate hidden_goal --partners
      compare hidden_goal "$RESULTS/social_hidden_goal_eval.csv" \
        --welch hidden_goal/ppo_lstm_expert_aux hidden_goal/ppo_lstm_expert
      local arms=(hidden_goal/ppo_lstm_expert hidden_goal/ppo_lstm_expert_aux
        hidden_goal/ppo_lstm_expert_aux_long)
      curves hidden_goal "${arms[@]}"
      following hidden_goal "${arms[@]}"
      # where the novice is: its distance to the nearest expert and whether one is in view (the
      # chance table's random novice and follower give the same two measures)
      metric_curves hidden_goal "social/expert_distance_agent_0 social/expert_in_view_agent_0" "" \
        "${arms[@]}"
      step "$PY $SCRIPTS/derived_tables.py --dir $RESULTS" ;;  # social_hidden_goal_following.csv: the pass rule
    r6)  # R1's, R3's and R5's agents (kept by their pages' analyses) and the library's two
      # 3-tile experts of the expert recipe, frozen in the transfer envs
      play r6 gc4 "$GC4" "$AGENTS"/*.pt $EXPERTS
      play r6 suite "$SUITE" "$AGENTS"/*.pt $EXPERTS
      step "$PY $SCRIPTS/derived_tables.py --dir $RESULTS"  # social_r6_transfer*.csv
      step "$PY $SCRIPTS/r6_plot.py --table $RESULTS/social_r6_transfer_t.csv --baselines $RESULTS/social_r6_baselines.csv --out $RESULTS/social_r6_transfer.png" ;;  # social_r6_transfer.png
  esac
}

if [[ -n ${ANALYSE:-} ]]; then
  for item in "$@"; do
    [[ $PAGES == *" $item "* || $item == r6 ]] || { echo "ANALYSE takes pages:$PAGES r6" >&2; exit 2; }
  done
  copy=""
  if [[ $(realpath -m "$RESULTS") != $(realpath "$SCRIPTS") ]]; then
    copy=1
    echo "analysis into $RESULTS (a copy of $SCRIPTS; the committed tables stay as they are)"
    [[ -n ${DRY:-} ]] || { mkdir -p "$RESULTS" && cp -a "$SCRIPTS/." "$RESULTS/"; }
  fi
  for item in "$@"; do analyse "$item"; done
  if [[ -n $copy && -z ${DRY:-} ]]; then
    echo "tables that differ from the committed ones (RESULTS=$SCRIPTS to write those):"
    diff -rq "$SCRIPTS" "$RESULTS" | grep -v "^Only in $SCRIPTS" || echo "  none"
  fi
  exit 0
fi

for item in "$@"; do  # every item checked before anything runs
  if [[ $PAGES != *" $item "* ]] && ! arm_field "${item%%:*}" 1 >/dev/null; then
    echo "unknown page or arm '${item%%:*}'; pages:$PAGES; arms: run the script without arguments" >&2
    exit 2
  fi
  if [[ $item == *:* ]]; then
    IFS=, read -ra seeds <<<"${item#*:}"
    for seed in "${seeds[@]}"; do
      [[ $seed =~ ^[0-9]+$ ]] || { echo "seed '$seed' of arm '${item%%:*}' must be a whole number" >&2; exit 2; }
    done
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
