#!/usr/bin/env bash
# One command from a fresh clone: install, then run every test (the rehearsal end to end
# included; the first run builds the MaxText venv, a few minutes).
#
# Without arguments the tests run in tiers, quickest first, each its own pytest run so a
# failure stops before the long ones (tests/support/tiers.py marks them): ruff and mypy
# (beside the rehearsal's lane, below), the fast tests (no services), the service-backed
# ones (fake-gcs-server, a Prefect API, dockerd), then the end-to-end modules of tests/e2e
# once each, the rehearsal last; then the coverage of all of them. These run beside the
# fast tier, because they mostly wait while it computes (2 cores):
# - the services tier itself (it waits on the servers it starts), but for its image builds;
# - the `realtime` services modules (leases expiring, Prefect servers and CLIs starting),
#   in three more pytest runs whose output is printed when they end, before the e2e tier;
#   the profile lock's run also takes the services tier's image builds (dockerd);
# - the Debian base image of the flow-image tests (scripts/debian-base-image.sh, mostly
#   downloads), so the e2e tier finds it in the registry. Only a warm-up: the e2e tests call
#   the same script, which builds it there if this did not;
# - the rehearsal's e2e lane (Gemma 3's rehearsal, the rehearsal module, the recipe
#   tutorial, the interrupted CLI), niced: it takes the CPU the first phase leaves idle and
#   needs none of its services. It starts before the linters, which use one core.
# The rest of the e2e tier runs after the first phase, in two more lanes: the modules that
# drive the docs' deployments (tests/e2e/test_flow_image.py, test_prefect_deploy.py: docker
# builds, servers, workers); the Llama rehearsal with the GKE world's modules (the tutorial
# and smoke profiles).
# dockerd and the registry (and Chromium) are installed and started beside the set-up, once
# for the whole run (the pytest runs find them up and leave them up), and stopped at the end
# if this script started them.
# With arguments, they are passed to one pytest run as they are.
set -euo pipefail
cd "$(dirname "$0")/.."
LOGS=.tpurl/test-logs
mkdir -p "$LOGS"
timed() {  # timed NAME CMD...: runs CMD, then says how long it took and the CPU time of
  # it and every process it waited for (user + system; each call runs in a subshell of its
  # own, a fork whose children's times start at zero): the CPU is what lanes share
  local started=$SECONDS rc=0 cpu record="$LOGS/.times.$BASHPID"
  "${@:2}" || rc=$?
  times >"$record"  # a builtin with a redirection: no fork (a pipe would read a subshell's)
  cpu=$(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, t, /[ms]/)
          n += t[1] * 60 + t[2] }; printf "%.0f", n }' "$record")
  rm -f "$record"
  echo "test.sh: $1 took $((SECONDS - started)) s (exit $rc; CPU $cpu s)"
  return "$rc"
}
# Every step says its wall and CPU time, the install and the linters too; each `timed`
# call that is no pipeline runs in a subshell of its own, so its CPU is its own.
install_chromium() {  # headless Chromium for the run-page screenshots of the deployment
  # test (Debian's package)
  if ! command -v chromium >/dev/null && command -v apt-get >/dev/null; then
    apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 \
      || { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
  fi
}
start_docker_services() {  # dockerd + registry for every pytest run (each finds them up and
  # leaves them up; the tests export DOCKER_HOST themselves where they use it,
  # tests/support/docker.py); writes `export DOCKER_HOST=...` (empty: none, the docker tests
  # skip themselves) to $LOGS/.docker-host, and creates $LOGS/.docker-started when this run
  # starts them (the exit trap stops only those)
  local rc=0
  if bash scripts/docker-services.sh status >/dev/null 2>&1; then
    bash scripts/docker-services.sh env >"$LOGS/.docker-host"
    return 0
  fi
  touch "$LOGS/.docker-started"  # before the start: a run stopped mid-start stops them too
  bash scripts/docker-services.sh start >"$LOGS/.docker-host" || rc=$?
  if [ "$rc" = 3 ]; then  # no apt-get to install them
    rm -f "$LOGS/.docker-started"
    : >"$LOGS/.docker-host"
  elif [ "$rc" != 0 ]; then
    return "$rc"
  fi
}
system_packages() {  # one job, as apt takes one lock
  start_docker_services
  install_chromium
}
# A whole run from a clean clone took 8.6 GB at its peak here (the venvs 4.4 GB, hard links
# into uv's cache, 0.9 more in the cache; Docker's images 1.8 on overlay2, 9.3 on vfs; pytest's
# temporaries 2.5): with less free, builds, checkpoints and the Prefect database fail
# together, so say it first.
free_gb=$(df -P -BG . | awk 'NR==2 {print int($4)}')
echo "test.sh: $free_gb GB free where the repository is"
if [ "$free_gb" -lt 20 ]; then
  echo "test.sh: WARNING: under 20 GB free; the e2e tier may fail for want of disk" >&2
fi
lanes=()
whole_run=0  # 1: no arguments, every tier (this run starts dockerd)
stop_all() {  # on any exit: the background jobs this script started, then its dockerd
  for pid in "${lanes[@]}"; do
    kill -INT -- "-$pid" 2>/dev/null || true  # pytest's KeyboardInterrupt runs the teardowns
  done
  # 120 s for those teardowns, then KILL: an interrupted pytest was once seen to hang in its
  # teardown, and an unbounded wait here would hold CI until its own limit
  local waited=0
  for pid in "${lanes[@]}"; do
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 120 ]; do sleep 1; waited=$((waited + 1)); done
    kill -KILL -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ "$whole_run" = 1 ] && [ -e "$LOGS/.docker-started" ]; then
    bash scripts/docker-services.sh stop || true
  fi
}
failure_summary() {  # the end of a failed run's output says what failed and on what machine
  echo "==== test.sh: the run failed; the failing tests (each tier's log is in $LOGS) ===="
  grep -h -E '^(FAILED|ERROR) ' "$LOGS"/*.log 2>/dev/null | cut -c1-600 || true
  echo "---- disk and memory at the end ----"
  df -h . "${UV_CACHE_DIR:-$HOME/.cache/uv}" /tmp 2>/dev/null | awk '!seen[$0]++' || true
  free -m 2>/dev/null || true
}
on_exit() {
  local rc=$?
  stop_all
  if [ "$rc" != 0 ]; then failure_summary; fi
  return "$rc"
}
trap on_exit EXIT
counts_summary() {  # every pytest run's `tpurl-counts:` line (tests/support/ci_rules.py), added up
  awk '$1 == "tpurl-counts:" { for (i = 2; i <= NF; i++) { split($i, kv, "="); n[kv[1]] += kv[2] } }
       END { printf "test.sh: %d test functions passed (%d cases); %d of them are matrices" \
             " of 10+ cases (%d cases), so %d functions checked %d cases one by one\n",
             n["functions"], n["cases"], n["matrices"], n["matrix_cases"],
             n["functions"] - n["matrices"], n["cases"] - n["matrix_cases"] }' "$LOGS"/*.log
}
beside() {  # beside LOG NAME CMD...: `timed NAME CMD` in the background, output to LOG
  # job control for the fork only: the job gets its own process group (stopped as one) and
  # keeps SIGINT (a non-interactive shell's background job would ignore it)
  local log=$1
  shift
  set -m
  timed "$@" >"$log" 2>&1 &
  set +m
  lanes+=($!)
}
gathered=0
gather() {  # gather WHAT PID:LOG...: waits for each lane and prints its log; $gathered is the
  # exit code of a lane that failed (0 if none)
  local what=$1 pair rc
  shift
  gathered=0
  for pair in "$@"; do
    rc=0
    wait "${pair%%:*}" || rc=$?
    echo "---- beside the $what (${pair#*:}) ----"
    cat "${pair#*:}"
    [ "$rc" = 0 ] || gathered=$rc
  done
}

if [ $# -eq 0 ]; then
  whole_run=1
  rm -f "$LOGS"/*.log "$LOGS/.docker-host" "$LOGS/.docker-started"
  # The system packages install and start beside the Python set-up and the linters: on a
  # fresh machine apt's downloads (docker.io, chromium) had run alone before them
  beside "$LOGS/system-packages.log" system-packages system_packages
  system_pid=${lanes[-1]}
fi
(timed setup bash scripts/setup.sh)
export PREFECT_SERVER_ANALYTICS_ENABLED=false
# pytest cuts its summary lines to the terminal width outside CI; a log has no terminal
export COLUMNS="${COLUMNS:-200}"
# Every test process (pytest, the CLIs, servers and children the tests start) may leave the
# bytecode of what it imports in the venv: with PYTHONDONTWRITEBYTECODE set, each of the
# hundreds of processes compiled Prefect, the Kubernetes and Google clients from source again.
unset PYTHONDONTWRITEBYTECODE
if [ -f .venv/uv.env ]; then set -a; . .venv/uv.env; set +a; fi  # uv's sources, for the image stage
# The rehearsal venv's tunix is the post-training image's GitHub commit; where GitHub is not
# reachable (our machines, CI) the image stage takes the wheel built from it from this folder
# (flows/backends/local/tunix_source.py checks its sha256). A user's machine needs neither.
if [ -z "${TPURL_WHEEL_DIR:-}" ] && [ -d ../shared/wheels ]; then
  TPURL_WHEEL_DIR="$(cd ../shared/wheels && pwd)"
  export TPURL_WHEEL_DIR
fi
lint() {  # ruff, then the type checker over flows/ and reference/ ([tool.mypy] in
  # pyproject.toml); its cache (.mypy_cache) makes tests/test_type_check.py, which runs it
  # again under pytest, a re-check of seconds
  (timed ruff .venv/bin/ruff check flows reference tests benchmarks images)
  (timed mypy .venv/bin/mypy)
}
if [ $# -gt 0 ]; then
  install_chromium
  lint
  exec .venv/bin/python -m pytest "$@"
fi

# Each pytest run is measured (pyproject's [tool.coverage.run]: sys.monitoring, a few per
# cent slower); the data of all runs are combined, then the lines per package and the
# functions no test executed are printed (scripts/coverage_report.py).
cov=(.venv/bin/python -m coverage run --parallel-mode -m pytest)
# Priorities (docs/decisions/0018-ci-tiers-and-lanes.md, "Priorities"): every lane is
# CPU-bound on 2 cores, and the first phase's lanes leave CPU idle while they wait on servers
# and real time. The rehearsal's e2e lane, the longest of all, needs no service of the first
# phase (no dockerd): it starts with the first phase, niced, and takes the CPU those lanes
# leave; the deployment and CLI lanes of the second phase run niced further, behind it.
behind=(nice -n 10)
furthest_behind=(nice -n 19)
.venv/bin/python -m coverage erase
# The e2e tier in three lanes. The rehearsal's (the rest of tests/e2e, in the order of
# tests/support/tiers.py: Gemma 3's rehearsal and any new module, the rehearsal module, the
# recipe tutorial, then the interrupted CLI) starts here, beside the first phase and behind it
# (Priorities, above); the other two start after the first phase, as they share dockerd with
# its image tests: the modules that drive the docs' deployments (one flow image built and
# pushed by one `prefect deploy`, process and Kubernetes workers, the announcement retrain on
# a worker), and the Llama rehearsal with the GKE world's modules (the tutorial and smoke
# profiles against the fakes; the Qwen3 dense family's checks read the interrupted CLI's
# last run, the one pipeline of that profile). A clean-clone run on 2 cores (2026-12-07):
# the rehearsal's lane 1099 s from its start (CPU 678 s), the deployment lane 301 s (CPU 163)
# and the CLI lane 203 s (CPU 124) after the first phase's 845 s; all three ended within 30 s
# of each other, and `vmstat` found the cores idle only in the first 30 s and the last 20.
# With the interrupted CLI in the CLI lane (Gemma 3's rehearsal already here, moved from the
# deployment lane, which had ended runs alone), the rehearsal's lane ended 150 s before the
# others (1152 s against 1147 on that machine); with the families and the interrupted CLI in a
# second early lane, the first phase ran 150 s longer and the deployment lane ended the run
# alone (1237 s).
# JAX's compilation cache is shared (docs/decisions/0035-xla-compiles-once-per-program.md):
# two pipelines of one model started together could each compile the same programs while
# none had written them yet, so each model's first pipeline runs before the others of its
# model: the rehearsal module's first run before the announcement's retrain (the deployment
# lane starts after the first phase); the interrupted CLI compiles its profile's
# (rehearsal-qwen3) itself, as no other test runs it. On its own, JAX's cache cold: Qwen3
# dense 100 s, Llama 153 s (the image stage's check included), Gemma 3's programs 318 s; warm,
# 50, 56 and 195 s.
DEPLOY_E2E=(tests/e2e/test_flow_image.py tests/e2e/test_prefect_deploy.py)
CLI_E2E=(tests/e2e/test_rehearsal_families.py tests/e2e/test_flow_gke.py
         tests/e2e/test_flow_smoke.py)
beside "$LOGS/e2e.log" e2e-tier "${behind[@]}" "${cov[@]}" tests/e2e \
  "${DEPLOY_E2E[@]/#/--ignore=}" "${CLI_E2E[@]/#/--ignore=}"
rehearsal_pid=${lanes[-1]}
# The linters after the rehearsal's lane has started: they run on one core for about half a
# minute, and that lane needs neither their verdict nor dockerd (a failure here stops it).
lint
# The system packages' job (above) has installed and started dockerd and the registry
rc=0
wait "$system_pid" || rc=$?
cat "$LOGS/system-packages.log"
[ "$rc" = 0 ] || exit "$rc"
docker_host="$(cat "$LOGS/.docker-host")"
docker_host="${docker_host#export DOCKER_HOST=}"
base_pid=""
if [ -n "$docker_host" ]; then
  registry="${TPURL_REGISTRY_ADDR:-127.0.0.1:5000}"
  beside "$LOGS/debian-base.log" debian-base-warm-up \
    env DOCKER_HOST="$docker_host" bash scripts/debian-base-image.sh "$registry/tpurl-debian-base"
  base_pid=${lanes[-1]}
fi

# The realtime modules in three lanes: the profile lock's (it mostly waits on leases) and the
# others in two, split by their measured durations (each starts a Prefect API or a `tpurl`
# CLI: CPU in bursts, mostly waiting), so none outlasts the fast and services tiers. The
# first of the two names its modules; the second takes every other realtime module, so a new
# one runs there (a listed module that loses its mark runs in the services tier).
# Measured on 2 cores, all five side by side (wall, CPU): fast tier 659 s (235), services
# tier 1019 (380), realtime-b 967 (463), profile lock 487 (140), realtime-a 440 (201). The
# services tier's 1019 s were mostly waits its tests no longer make (`plan --check`'s bucket
# read and the IAM lag: about 410 s); realtime-b's longest module, the benchmarks' quick
# runs, waits about 60 s less. From those figures the lanes that ended first take modules of
# the long ones (each run by its path; the services tier and realtime-b ignore them): the
# profile lock's lane the image-stage modules that build with dockerd, the deploy-server
# module and the worker's run choices (about 150 s, CPU 149), the first realtime lane the
# stand-in rollout's MaxText decode, the notify server's messages (about 110 s, CPU 50 then;
# 24 since their steps and emitters run in the test process) and the run deadline's (about
# 35 s). Estimated: fast 660 s, profile lock 640, realtime-a 590, realtime-b 610, services
# 605; the CPU of all five (about 1400 s) is then what bounds the phase: about 700 s on 2
# cores.
LOCK_TESTS=tests/test_profile_lock.py
LOCK_LANE_MORE=(tests/backends/gke/image tests/test_deploy_server.py
                tests/test_run_choices_on_a_worker.py)
REALTIME_A=(tests/test_heartbeat.py tests/test_kept_api.py tests/test_cli_failures.py
            tests/backends/gke/test_cancel.py tests/run/test_cancel.py
            tests/backends/local/test_standin_rollout.py tests/notifications/test_notify_server.py
            tests/test_run_deadline.py)
beside "$LOGS/realtime-lock.log" profile-lock-lane "${cov[@]}" \
  -m "services and not e2e" "$LOCK_TESTS" "${LOCK_LANE_MORE[@]}"
beside "$LOGS/realtime-a.log" realtime-a-lane "${cov[@]}" -m "services and not e2e" \
  "${REALTIME_A[@]}"
# The second realtime lane is given its modules by path: those that mark themselves
# `realtime`, less the two lanes above. Collecting the whole tree to select them cost it about
# 9 CPU-s (6,267 tests imported, 139 kept).
mapfile -t REALTIME_B < <(grep -rlE --include='test_*.py' 'pytest\.mark\.realtime' tests \
  | grep -vxF -e "$LOCK_TESTS" "${LOCK_LANE_MORE[@]/#/-e}" "${REALTIME_A[@]/#/-e}" | sort)
beside "$LOGS/realtime-b.log" realtime-b-lane "${cov[@]}" -m "realtime and not e2e" \
  "${REALTIME_B[@]}"
realtime_pids=("${lanes[@]: -3}")
# The services tier beside the fast one: the fast tier computes on one core, the services
# tier mostly waits on the servers it starts, so run one after the other they left a core
# idle for most of ten minutes. Its output is printed when it ends, with the realtime lanes'.
beside "$LOGS/services-tier.log" services-tier \
  "${cov[@]}" -m "services and not realtime and not e2e" \
  "${LOCK_LANE_MORE[@]/#/--ignore=}" "${REALTIME_A[@]/#/--ignore=}"
realtime_pids+=("${lanes[-1]}")
fast_rc=0
timed fast-tier "${cov[@]}" -m "not services and not e2e" 2>&1 | tee "$LOGS/fast-tier.log" \
  || fast_rc=$?
gather "fast tier" "${realtime_pids[0]}:$LOGS/realtime-lock.log" \
  "${realtime_pids[1]}:$LOGS/realtime-a.log" "${realtime_pids[2]}:$LOGS/realtime-b.log" \
  "${realtime_pids[3]}:$LOGS/services-tier.log"
failed=$gathered
[ "$fast_rc" = 0 ] || exit "$fast_rc"
[ "$failed" = 0 ] || exit "$failed"
if [ -n "$base_pid" ]; then
  wait "$base_pid" || echo "test.sh: the base image warm-up failed (the e2e tests build it" \
    "themselves): $(tail -n 5 "$LOGS/debian-base.log")"
fi
# The second phase: the deployment and CLI lanes, behind the rehearsal's lane (started with
# the first phase, above); then its output, and theirs.
beside "$LOGS/e2e-deploy.log" e2e-deploy-lane "${furthest_behind[@]}" "${cov[@]}" "${DEPLOY_E2E[@]}"
deploy_pid=${lanes[-1]}
beside "$LOGS/e2e-cli.log" e2e-cli-lane "${furthest_behind[@]}" "${cov[@]}" "${CLI_E2E[@]}"
gather "e2e tier" "$rehearsal_pid:$LOGS/e2e.log" "$deploy_pid:$LOGS/e2e-deploy.log" \
  "${lanes[-1]}:$LOGS/e2e-cli.log"
e2e_rc=$gathered
lanes=()
[ "$e2e_rc" = 0 ] || exit "$e2e_rc"
(timed coverage-report sh -c '.venv/bin/python -m coverage combine -q &&
  .venv/bin/python scripts/coverage_report.py')
counts_summary
# the whole run: this shell's CPU and that of every process it waited for (the lanes, each
# with what it waited for)
times >"$LOGS/.times.total"
echo "test.sh: the whole run took $SECONDS s (CPU $(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) {
  split($i, t, /[ms]/); n += t[1] * 60 + t[2] }; printf "%.0f", n }' "$LOGS/.times.total") s)"
rm -f "$LOGS/.times.total"
