#!/usr/bin/env bash
# Writes `tpurl plan --out` for every shipped profile and every capacity mode into one
# directory, so a refactoring can prove the plans byte-identical: run it before and after,
# then `diff -r BEFORE AFTER`. A mode whose plan fails is recorded with its exit status and
# error text instead of files, so a crash is part of the comparison too.
set -u
out=${1:?usage: scripts/plan_snapshot.sh OUT_DIR}
tpurl=${TPURL:-.venv/bin/tpurl}
gke=(--set gke.project=demo-project --set gke.region=us-east5 --set gke.zone=us-east5-b
     --set gke.cluster=demo --set gke.bucket=demo-bucket --set gke.authorized_cidr=203.0.113.7/32)
# only a directory this script made (its marker inside) is ever emptied: `plan_snapshot.sh ~`
# must not remove a home directory
marker=.tpurl-plan-snapshot
if [ -e "$out" ] || [ -L "$out" ]; then
  if [ -L "$out" ] || [ ! -f "$out/$marker" ]; then
    echo "error: $out exists and was not made by this script (no $marker in it);" \
         "name a new directory" >&2
    exit 2
  fi
  rm -rf "$out"
fi
mkdir -p "$out" && touch "$out/$marker"
snap() {  # name, profile, extra args...
  local name=$1 profile=$2; shift 2
  "$tpurl" plan "$profile" "$@" --out "$out/$name" >"$out/$name.stdout" 2>"$out/$name.err"
  local rc=$?
  if [ "$rc" -ne 0 ]; then  # a traceback's line numbers move with any edit: keep its verdict
    { echo "exit $rc"; tail -n 1 "$out/$name.err"; } >"$out/$name.failed"
  else  # the output directory is named in the summary line
    sed "s|$out|OUT|g" "$out/$name.err" >"$out/$name.stderr"
  fi
  rm "$out/$name.err"
}
snap rehearsal rehearsal
snap gke-reservation qwen3-30b-a3b-v6e-32 "${gke[@]}" --set gke.reservation=demo-res
price() {  # the profile carries no spot or flex-start price: give one, as a user must
  echo --set "gke.prices.$1.usd_per_chip_hour=1.5" --set "gke.prices.$1.source=https://cloud.google.com/tpu/pricing" \
       --set "gke.prices.$1.as_of=2026-12-01"
}
# shellcheck disable=SC2046
snap gke-flex-start qwen3-30b-a3b-v6e-32 "${gke[@]}" --set gke.capacity=flex-start \
  --set gke.max_run_hours=24 $(price flex-start)
# shellcheck disable=SC2046
snap gke-spot qwen3-30b-a3b-v6e-32 "${gke[@]}" --set gke.capacity=spot $(price spot)
snap gke-on-demand qwen3-30b-a3b-v6e-32 "${gke[@]}" --set gke.capacity=on-demand
ls "$out"  # the marker is a dot file: `diff -r` compares it too, and it is empty
