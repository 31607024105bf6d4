#!/usr/bin/env bash
# `make compose-test`: docker-compose.yml for real, end to end (docs/containers.md).
#
# engine (Docker, else podman) -> stand-in images -> build -> up --wait -> every service
# healthy -> an OpenAI chat completion on :8000 -> 30 s of Locust (profile `load`) -> the
# cluster's report: 0 blocks lost or corrupted -> faults under a loop of agent turns
# (`dualpath cluster`: decode0 paused 10 s, prefill0 partitioned 10 s, Redis paused 3 s;
# the cluster must recover from each) -> Prometheus (profile `monitoring`) scrapes every
# service -> the `sim` profile's one-shot virtual-time run reports turns and no lost block ->
# down -v leaves no container, network or volume -> real payload paced between two
# containers within 2 % of its rate (pacing-test.sh). Prints each step's wall time. Fails
# loudly (exit 1, the step and why) when anything, the engine included, does not
# work; then it dumps `compose ps` and each service's last logs, and still runs `down -v`.
# Outputs in $COMPOSE_TEST_OUT (out/compose): Locust's CSV/HTML, report.json, targets.json,
# faults/ (the clients' turns, the fault windows, faults.json: what the clients saw).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck source=scripts/containers/engine.sh
source scripts/containers/engine.sh
# shellcheck source=scripts/containers/pacing-test.sh
source scripts/containers/pacing-test.sh

OUT=${COMPOSE_TEST_OUT:-out/compose}
PROJECT=dualpath                                        # docker-compose.yml `name:`
ALL_PROFILES=(--profile load --profile monitoring --profile sim)  # for `down`: every service
API=http://127.0.0.1:8000                               # the scheduler's published port
PROMETHEUS=http://127.0.0.1:9090
UP_TIMEOUT_S=240     # build done; services wait up to 60 s for peers, restarted on failure
LOAD_TIMEOUT_S=150   # Locust: 60 s for its worker at most, 30 s of load, reports
TARGETS_TIMEOUT_S=60 # scrape interval 5 s
PY=${VENV:-.venv}/bin/python
DP=${VENV:-.venv}/bin/dualpath
FAULT_S=10            # how long each node fault is held (wall s; the lease is 3 s)
RECOVER_TIMEOUT_S=60  # after unpause/heal: the node healthy, a turn served, /healthz ok

STEPS=()      # "name seconds" per finished step
CURRENT=""    # the step running now (named in the failure message)
REASON=""     # why it failed, repeated as the last line
PUMP_PID=""
FAULTS=""    # out/compose/faults: the clients' turns, the windows, what they saw
CLIENTS_PID=""  # the loop of agent turns of the faults step
UNDO=()         # the `dualpath cluster` command that ends the fault in force, if any

say() { printf '\n== %s\n' "$*"; }
fail() {
  REASON=$*
  printf '[compose-test] FAILED in step "%s": %s\n' "$CURRENT" "$REASON" >&2
  exit 1
}

# step NAME FUNCTION: run it, record its wall time.
step() {
  local t0=$EPOCHREALTIME
  CURRENT=$1
  say "$1"
  "$2"
  STEPS+=("$1 $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')")
}

compose() { "${COMPOSE[@]}" "$@"; }
# compose_t TIMEOUT_S ARGS...: compose, bounded (a hung engine must not hang CI).
compose_t() {
  local limit=$1
  shift
  timeout "$limit" "${COMPOSE[@]}" "$@"
}

# wait_for TIMEOUT_S WHAT CMD...: poll CMD every 2 s until it succeeds, or fail.
wait_for() {
  local timeout=$1 what=$2 deadline=$((SECONDS + $1))
  shift 2
  until "$@"; do
    ((SECONDS < deadline)) || fail "$what: not within ${timeout} s"
    sleep 2
  done
}

# ---------------------------------------------------------------------------- steps

do_engine() {
  engine_start
  engine_cli version --format '{{.Server.Version}}' 2>/dev/null | sed "s/^/$ENGINE server /" || true
}

do_compose() {
  engine_compose
  echo "compose: ${COMPOSE[*]} ($(compose version --short))"
  # whatever an interrupted earlier run left (it would hold port 8000 or stale state)
  compose_t 180 "${ALL_PROFILES[@]}" down -v --remove-orphans --timeout 20 >/dev/null 2>&1 || true
}

do_build() {
  # One image for every project service: build them one at a time, so the first build fills
  # the cache and the others reuse it (podman's classic builder would run all in parallel).
  if ! COMPOSE_PARALLEL_LIMIT=1 compose_t 1200 build >"$OUT/build.log" 2>&1; then
    tail -n 40 "$OUT/build.log" >&2
    fail "docker compose build failed (last lines above; all in $OUT/build.log)"
  fi
  grep -E '^(Successfully tagged|naming to|writing image)' "$OUT/build.log" | sort -u || true
}

start_pump() {
  [[ $ENGINE == podman ]] || return 0  # Docker runs healthchecks itself
  scripts/containers/health-pump.sh "$PROJECT" 2 &
  PUMP_PID=$!
}

stop_pump() {
  [[ -n $PUMP_PID ]] || return 0
  kill "$PUMP_PID" 2>/dev/null || true
  wait "$PUMP_PID" 2>/dev/null || true
  PUMP_PID=""
FAULTS=""    # out/compose/faults: the clients' turns, the windows, what they saw
CLIENTS_PID=""  # the loop of agent turns of the faults step
UNDO=()         # the `dualpath cluster` command that ends the fault in force, if any
}

do_up() {
  start_pump
  compose_t $((UP_TIMEOUT_S + 60)) up -d --wait --wait-timeout "$UP_TIMEOUT_S" \
    || fail "docker compose up --wait: services not healthy within ${UP_TIMEOUT_S} s"
}

do_healthy() {
  compose_t 60 ps --format json | "$PY" scripts/containers/checks.py healthy "$(compose config --services)" \
    || fail "some services are not running and healthy (table above)"
}

do_chat() {
  local answer
  answer=$(curl -sS --fail-with-body --max-time 30 "$API/v1/chat/completions" \
    -H 'content-type: application/json' \
    -d '{"model": "ds-27b", "max_tokens": 8,
         "messages": [{"role": "user", "content": "Hello from make compose-test"}]}') \
    || fail "POST $API/v1/chat/completions: ${answer:-no answer}"
  "$PY" scripts/containers/checks.py chat "$answer" 8 || fail "a wrong chat completion"
}

LOCUST_MASTER=""
master_done() { [[ $(timeout 30 "$ENGINE" inspect --format '{{.State.Running}}' "$LOCUST_MASTER") == false ]]; }

do_load() {
  local code
  # --no-recreate: podman 4.3 reports a container's network by name where compose expects
  # its id, so compose would recreate the running cluster (and empty its Redis) on `up`.
  compose_t 120 --profile load up -d --no-recreate locust-master locust-worker \
    || fail "could not start the load profile"
  LOCUST_MASTER=$(compose_t 60 --profile load ps -a -q locust-master)
  [[ -n $LOCUST_MASTER ]] || fail "no locust-master container"
  wait_for "$LOAD_TIMEOUT_S" "the Locust master to finish" master_done
  code=$(engine_cli inspect --format '{{.State.ExitCode}}' "$LOCUST_MASTER")
  # Locust's final table and SLO verdict (it prints the table every few seconds before)
  compose_t 60 --profile load logs --no-log-prefix locust-master | grep -E '^(SLO|POST|EMU) ' \
    | tail -n 6 || true
  rm -rf "$OUT/load"
  compose_t 60 --profile load cp locust-master:/out/load "$OUT/" >/dev/null 2>&1 \
    || fail "could not copy the Locust reports out of locust-master"
  "$PY" scripts/containers/checks.py load "$OUT/load/progress.json" \
    || fail "Locust served no turn ($OUT/load)"
  [[ $code == 0 ]] || fail "the Locust master exited $code: failed turns ($OUT/load/locust_failures.csv)"
}

do_report() {
  local scheduler
  scheduler=$(compose_t 60 ps -q scheduler)
  # Inside the scheduler's container: the services answer only on the compose network.
  # The engine's CLI, not `compose exec`: podman 4.3 leaves the conmon of every exec made
  # through its Docker API running, even after the container is gone.
  local attempt rc
  for attempt in 1 2; do
    rc=0
    timeout 120 "$ENGINE" exec -i "$scheduler" python - <scripts/containers/cluster_report.py \
      >"$OUT/report.json" || rc=$?
    # 3: a service did not answer its Stats RPC in time (a loaded host); the cluster keeps
    # serving, so asking once more is safe. Lost blocks (1) are never retried.
    [[ $rc == 3 && $attempt == 1 ]] || break
    echo "[compose-test] report: a service did not answer; asking again (attempt 2)" >&2
    sleep 5
  done
  [[ $rc == 0 ]] || fail "no cluster report, or it counts lost or corrupted blocks ($OUT/report.json)"
  "$PY" scripts/containers/checks.py report "$OUT/report.json" || fail "blocks lost or corrupted"
}

# ---------------------------------------------------------------------------- faults

now() { printf '%s' "$EPOCHREALTIME"; }

stop_clients() {
  [[ -n $CLIENTS_PID ]] || return 0
  kill -TERM "$CLIENTS_PID" 2>/dev/null || true
  wait "$CLIENTS_PID" 2>/dev/null || true  # (their turns in flight end within 30 s)
  CLIENTS_PID=""
}

# recovered SERVICE SINCE: the node running, healthy and connected, a turn that started
# after SINCE served, and the scheduler's /healthz ok with no node lost.
recovered() {
  "$DP" cluster status --json 2>/dev/null | "$PY" scripts/containers/checks.py node "$1" 2>/dev/null \
    && "$PY" scripts/containers/checks.py served-since "$FAULTS/clients.jsonl" "$2" 2>/dev/null \
    && curl -sf --max-time 5 "$API/healthz" | "$PY" scripts/containers/checks.py healthz 2>/dev/null
}

# hold NAME SERVICE START_CMD END_CMD...: start the fault, hold it FAULT_S s, end it. Its
# window goes to windows.tsv: when the start command was run, when it returned (the fault
# is in force), when the end command was run; the end command's output to $ENDED.
ENDED=""
hold() {
  local name=$1 service=$2 start=$3 since t0 t1
  shift 3
  since=$(now)
  "$DP" cluster "$start" "$service" || fail "dualpath cluster $start $service failed"
  UNDO=("$@" "$service")
  t0=$(now)
  sleep "$FAULT_S"
  t1=$(now)
  ENDED=$("$DP" cluster "$@" "$service") || fail "dualpath cluster $* $service failed: $ENDED"
  UNDO=()
  echo "$ENDED"
  printf '%s\t%s\t%s\t%s\n' "$name" "$since" "$t0" "$t1" >>"$FAULTS/windows.tsv"
  local r0=$SECONDS
  wait_for "$RECOVER_TIMEOUT_S" "$service healthy, a turn served and /healthz ok after the $name" \
    recovered "$service" "$t1"
  echo "  recovered: $service healthy, a turn served, /healthz ok ($((SECONDS - r0)) s after)"
}

do_faults() {
  FAULTS=$OUT/faults
  rm -rf "$FAULTS"
  mkdir -p "$FAULTS"
  : >"$FAULTS/windows.tsv"
  "$PY" -m dualpath.deploy.containers.clients --url "$API" --clients 4 --duration 600 \
    --out "$FAULTS/clients.jsonl" >"$FAULTS/clients.log" 2>&1 &
  CLIENTS_PID=$!
  wait_for 30 "the clients' first turn" recovered decode0 "$(now)"
  "$DP" cluster status

  # A hung decode node. Past its 3 s lease it fences itself as it resumes (exit 75) and
  # compose's `restart: on-failure` starts it again (`unpause` watches for that, and would
  # start it itself if the engine did not).
  hold "pause decode0" decode0 pause unpause --watch 10
  [[ $ENDED == *"started it again"* || $ENDED == *"started here"* ]] \
    || fail "decode0 was paused ${FAULT_S} s (lease 3 s) but did not fence itself and restart: $ENDED"
  engine_cli logs "$(compose_t 60 ps -q decode0)" >"$FAULTS/decode0.log" 2>&1 || true
  grep -m1 'exits (code 75)' "$FAULTS/decode0.log" \
    || fail "decode0 restarted, but its log does not say it fenced itself (exit 75; $FAULTS/decode0.log)"

  # A partitioned prefill node: off the project's network, then back with its address and
  # its DNS alias (the service name), which peers must resolve again.
  hold "partition prefill0" prefill0 partition heal
  timeout 60 "$ENGINE" exec "$(compose_t 60 ps -q scheduler)" python -c \
    "import socket; print('  prefill0 resolves to', socket.gethostbyname('prefill0'), 'in the scheduler')" \
    || fail "prefill0 does not resolve in the scheduler's container after heal"

  # Redis stopped for 3 s, through the fault schedule (`--fault` grammar, emulated s at the
  # cluster's dilation, 1 in docker-compose.yml)
  local t1
  "$DP" cluster faults --fault redis-drop@0+3 --json >"$FAULTS/schedule.json" \
    || fail "dualpath cluster faults --fault redis-drop@0+3 failed ($FAULTS/schedule.json)"
  t1=$(now)
  wait_for "$RECOVER_TIMEOUT_S" "a turn served and /healthz ok after redis-drop" recovered redis "$t1"

  stop_clients
  "$PY" scripts/containers/checks.py faults "$FAULTS/clients.jsonl" "$FAULTS/windows.tsv" \
    "$RECOVER_TIMEOUT_S" "$FAULTS/schedule.json" || fail "the cluster did not recover ($FAULTS)"
}

# ---------------------------------------------------------------------------- monitoring, down

targets_up() {
  curl -sS --fail --max-time 5 "$PROMETHEUS/api/v1/targets?state=active" >"$OUT/targets.json" \
    2>/dev/null && "$PY" scripts/containers/checks.py targets "$OUT/targets.json" monitoring/prometheus.yml
}

do_monitoring() {
  compose_t 150 --profile monitoring up -d --no-recreate --wait --wait-timeout 90 prometheus \
    || fail "Prometheus did not turn healthy within 90 s"
  wait_for "$TARGETS_TIMEOUT_S" "every Prometheus target up ($PROMETHEUS/targets)" targets_up
}

# The `sim` profile: the whole cluster in one container on virtual time, its report in the
# `reports` volume (read back through the same one-shot service).
do_sim() {
  compose_t 300 --profile sim run --rm -T sim >"$OUT/sim.log" 2>&1 \
    || fail "the sim profile's run failed (log: $OUT/sim.log)"
  compose_t 60 --profile sim run --rm -T --entrypoint cat sim /out/report.json \
    >"$OUT/sim-report.json" || fail "could not read the sim profile's report from its volume"
  "$PY" scripts/containers/checks.py sim-report "$OUT/sim-report.json" \
    || fail "the sim profile's report failed its check"
}

leftovers() {
  local kind
  for kind in "ps -a" "network ls" "volume ls"; do
    # shellcheck disable=SC2086  # $kind is two words on purpose
    engine_cli $kind -q --filter "label=com.docker.compose.project=$PROJECT" 2>/dev/null \
      | sed "s/^/$kind: /"
  done
}

do_down() {
  compose_t 180 "${ALL_PROFILES[@]}" down -v --remove-orphans --timeout 20 \
    || fail "docker compose down -v failed"
  stop_pump
  local left
  left=$(leftovers)
  [[ -z $left ]] || fail "down -v left these behind:"$'\n'"$left"
  echo "  no container, network or volume of project $PROJECT remains"
}

# After `down`: the cluster's containers no longer compete with the probe for the CPU.
do_pacing() {
  pacing_run || fail "real payload paced between two containers: the check above failed"
}

# ---------------------------------------------------------------------------- failure, exit

dump_diagnostics() {
  local svc
  echo "---- docker compose ps -a" >&2
  compose_t 60 "${ALL_PROFILES[@]}" ps -a >&2 || true
  for svc in $(compose "${ALL_PROFILES[@]}" config --services 2>/dev/null); do
    echo "---- last logs of $svc" >&2
    compose_t 60 "${ALL_PROFILES[@]}" logs --no-color --tail 40 "$svc" >&2 2>&1 || true
  done
}

print_times() {
  local s total=0
  printf '\n%-12s %8s\n' step "wall s"
  for s in "${STEPS[@]}"; do
    printf '%-12s %8s\n' "${s% *}" "${s##* }"
    total=$(awk -v a="$total" -v b="${s##* }" 'BEGIN { printf "%.1f", a + b }')
  done
  printf '%-12s %8s\n' total "$total"
}

on_exit() {
  local rc=$?
  trap - EXIT
  set +e
  stop_clients
  if ((${#UNDO[@]} > 0)); then  # a paused container would hold up `down`
    timeout 60 "$DP" cluster "${UNDO[@]}" >&2 || true
  fi
  if ((rc != 0)) && ((${#COMPOSE[@]} > 0)) && [[ -n ${DOCKER_HOST:-} || $ENGINE == docker ]]; then
    dump_diagnostics
    echo "---- docker compose down -v (cleanup after the failure)" >&2
    compose_t 180 "${ALL_PROFILES[@]}" down -v --remove-orphans --timeout 20 >&2
    leftovers >&2
  fi
  stop_pump
  engine_down
  print_times
  if ((rc != 0)); then
    echo "[compose-test] FAILED (exit $rc) in step \"$CURRENT\"${REASON:+: $REASON}" >&2
  else
    echo "[compose-test] passed: $OUT"
  fi
  exit "$rc"
}

main() {
  trap on_exit EXIT
  trap 'exit 143' TERM  # a timeout's SIGTERM: exit through on_exit (down -v, stop the engine)
  trap 'exit 130' INT
  mkdir -p "$OUT"
  step engine do_engine
  step images engine_images
  step compose do_compose
  step build do_build
  step up do_up
  step healthy do_healthy
  step chat do_chat
  step load do_load
  step report do_report
  step faults do_faults
  step monitoring do_monitoring
  step sim do_sim
  step down do_down
  step pacing do_pacing
}

main "$@"
