#!/usr/bin/env bash
# Real payload between two containers, paced by per-link token buckets (issue 11;
# services/dualpath/runtimes/process/serving/pacing_probe.py, docs/links.md "Token buckets"): the probe's
# receiver in one container, its sender in another, on a network of their own. Prints the
# delivered byte rate against the paced one, then a high-VL transfer's delay while low-VL
# flows saturate the same paced link.
#
#   scripts/containers/pacing-test.sh                 # image dualpath-testbed:dev, as built
#   PACING_SOURCE=1 scripts/containers/pacing-test.sh # this tree's services/ over the image's
#
# Needs an engine (Docker, else podman's CLI: no API service is started) and the image
# `make compose-test` builds; compose-test.sh sources this and runs `pacing_run` last.
# Knobs: PACING_RATE_GBPS (0.2), PACING_SECONDS (4; the mixed run 2 s longer),
# PACING_IMAGE, PACING_ATTEMPTS (3).
#
# What fails: the bucket bounds the rate from above, so a run delivering more than the paced
# rate + 2 % is a pacing bug and fails at once. A run below - 2 %, or a high-VL delay over its
# bound (one low frame + 50 ms of host jitter), can also mean a sender starved of CPU on a
# shared host: such a run is repeated, and fails only if no attempt passes.
set -euo pipefail

PACING_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PACING_ROOT=$(cd "$PACING_DIR/../.." && pwd)
PACING_IMAGE=${PACING_IMAGE:-dualpath-testbed:${DUALPATH_TAG:-dev}}
PACING_RATE_GBPS=${PACING_RATE_GBPS:-0.2}
PACING_SECONDS=${PACING_SECONDS:-4}
PACING_ATTEMPTS=${PACING_ATTEMPTS:-3}
PACING_PORT=7070
PACING_TOLERANCE_PCT=2

pacing_log() { printf '[pacing] %s\n' "$*" >&2; }

# The engine: the one compose-test.sh started (ENGINE set), else Docker when it answers,
# else podman's own CLI (it needs no API service to run containers).
pacing_engine() {
  [[ -n ${ENGINE:-} ]] && return 0
  # shellcheck source=scripts/containers/engine.sh
  source "$PACING_DIR/engine.sh"
  if docker_works && ! server_is_podman; then
    ENGINE=docker
  else
    ENGINE=podman
    install_podman
    write_containers_conf
  fi
}

# pacing_container NAME RUN_OPTIONS... -- PROBE_ARGS...: the probe in a container of the
# image, on the test's network (with this tree's services/ when PACING_SOURCE=1).
pacing_container() {
  local name=$1 opts=() src=()
  shift
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  [[ ${PACING_SOURCE:-0} == 1 ]] && src=(-v "$PACING_ROOT/services:/src:ro" -e PYTHONPATH=/src)
  timeout 180 "$ENGINE" run --pull=never --name "$name" --network "$PACING_NET" \
    "${src[@]}" "${opts[@]}" --entrypoint python "$PACING_IMAGE" -m dualpath.runtimes.process.serving.pacing_probe "$@"
}

# One `rm` per container: podman 4.3's `rm -f A B` removes nothing when B does not exist.
pacing_cleanup() {
  local c
  for c in "$PACING_SERVER" "$PACING_SENDER"; do "$ENGINE" rm -f "$c" >/dev/null 2>&1 || true; done
  "$ENGINE" network rm "$PACING_NET" >/dev/null 2>&1 || true
}

pacing_server_up() {
  local deadline=$((SECONDS + 60))
  pacing_container "$PACING_SERVER" -d -- serve --host 0.0.0.0 --port "$PACING_PORT" \
    >/dev/null || { pacing_log "FAILED: could not start the probe server's container"; return 1; }
  until "$ENGINE" logs "$PACING_SERVER" 2>&1 | grep -q 'listening on'; do
    if ((SECONDS >= deadline)) \
      || [[ $("$ENGINE" inspect --format '{{.State.Running}}' "$PACING_SERVER") != true ]]; then
      "$ENGINE" logs "$PACING_SERVER" >&2 || true
      pacing_log "FAILED: the probe server did not start within 60 s (log above; an image" \
        "without runtimes/process/serving/pacing_probe.py? rebuild it, or PACING_SOURCE=1)"
      return 1
    fi
    sleep 0.5
  done
}

# pacing_check WHAT ARGS...: one probe run, repeated while it only shows a starved sender.
pacing_check() {
  local what=$1 attempt rc
  shift
  for ((attempt = 1; attempt <= PACING_ATTEMPTS; attempt++)); do
    rc=0
    "$ENGINE" rm -f "$PACING_SENDER" >/dev/null 2>&1 || true
    pacing_container "$PACING_SENDER" --rm -- send \
      --target "$PACING_SERVER:$PACING_PORT" --rate-gbps "$PACING_RATE_GBPS" \
      --tolerance-pct "$PACING_TOLERANCE_PCT" "$@" || rc=$?
    case $rc in
      0) pacing_log "$what: passed (attempt $attempt)"; return 0 ;;
      1)
        pacing_log "FAILED: $what: delivered more than the paced rate + ${PACING_TOLERANCE_PCT} %"
        return 1
        ;;
      2 | 3) pacing_log "$what: attempt $attempt below the rate or over its bound (starved?)" ;;
      *) pacing_log "FAILED: $what: the probe exited $rc"; return 1 ;;
    esac
  done
  pacing_log "FAILED: $what: no attempt of $PACING_ATTEMPTS within ${PACING_TOLERANCE_PCT} %" \
    "and its bound"
  return 1
}

# (explicit `|| exit 1`: a caller's `pacing_run || fail` turns `set -e` off in here)
pacing_body() {
  trap pacing_cleanup EXIT
  pacing_cleanup
  "$ENGINE" network create "$PACING_NET" >/dev/null \
    || { pacing_log "FAILED: $ENGINE network create $PACING_NET"; exit 1; }
  pacing_server_up || exit 1
  pacing_log "paced at $PACING_RATE_GBPS Gbit/s, $PACING_IMAGE, network $PACING_NET"
  pacing_check "one stream" --seconds "$PACING_SECONDS" || exit 1
  pacing_check "high-VL under low-VL load" --seconds "$((PACING_SECONDS + 2))" --mixed || exit 1
}

# Everything in a subshell: its EXIT trap removes the containers and the network, and a
# failure returns non-zero to the caller (compose-test.sh) instead of exiting it.
pacing_run() {
  PACING_NET=dualpath-pacing-$$ PACING_SERVER=dualpath-pacing-rx-$$ PACING_SENDER=dualpath-pacing-tx-$$
  pacing_engine
  (pacing_body)
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then pacing_run; fi
