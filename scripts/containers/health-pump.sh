#!/usr/bin/env bash
# Runs the healthchecks of a compose project's containers under podman, until killed.
#
# podman runs healthchecks from systemd timers; without systemd (this machine) a container
# stays "starting" forever, so `depends_on: condition: service_healthy` and `up --wait`
# never release. `podman healthcheck run` does one check and records it like a timer would.
# Every PERIOD_S seconds this checks each running container of the project that has a
# healthcheck and whose own interval has passed since its last check here.
#
#   scripts/containers/health-pump.sh PROJECT [PERIOD_S]     (needs CONTAINERS_CONF as the
#                                                             podman service has it)
set -euo pipefail

project=${1:?usage: health-pump.sh PROJECT [PERIOD_S]}
period=${2:-2}
declare -A last interval

# The container's healthcheck interval in whole seconds (at least PERIOD_S).
interval_of() {
  local s
  s=$(podman inspect --format '{{.Config.Healthcheck.Interval.Seconds}}' "$1" 2>/dev/null || true)
  s=${s%%.*}
  [[ $s =~ ^[0-9]+$ ]] && ((s > period)) && echo "$s" || echo "$period"
}

# SIGTERM (compose-test.sh's stop): end the checks in flight too, and exit now
trap 'kill $(jobs -p) 2>/dev/null; exit 0' TERM

while :; do
  # health=... selects only containers that have a healthcheck (several values: any of them)
  for id in $(podman ps -q --filter "label=com.docker.compose.project=$project" \
    --filter health=starting --filter health=healthy --filter health=unhealthy 2>/dev/null); do
    [[ -n ${interval[$id]:-} ]] || interval[$id]=$(interval_of "$id")
    if ((SECONDS - ${last[$id]:--999} >= interval[$id])); then
      last[$id]=$SECONDS
      # a failing check is a result, not an error of the pump; each in the background so a
      # slow one (up to its timeout) does not hold up the others
      timeout 60 podman healthcheck run "$id" >/dev/null 2>&1 &
    fi
  done
  wait
  sleep "$period" &
  wait $!  # (a trap runs during `wait`, not during a foreground sleep)
done
