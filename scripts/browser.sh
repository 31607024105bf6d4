#!/usr/bin/env bash
# Headless Chromium for the live dashboard's browser test
# (tests/runtimes/process/serving/test_serving_dashboard.py, docs/monitoring.md): present
# already, or installed from Debian's `chromium` package (root and apt-get needed, as for
# the container engine in scripts/containers/engine.sh). `make test` runs this first, so the
# README's test command needs nothing installed by hand. Prints the browser's version.
set -euo pipefail

log() { printf '[browser] %s\n' "$*" >&2; }
die() { printf '[browser] FAILED: %s\n' "$*" >&2; exit 1; }

find_browser() { command -v chromium || command -v chromium-browser || true; }

# retry N DELAY CMD...: the package mirror is the only network here; ride out a hiccup.
retry() {
  local n=$1 delay=$2 i
  shift 2
  for ((i = 1; i <= n; i++)); do
    "$@" && return 0
    ((i < n)) && { log "attempt $i of $n failed: $*; again in ${delay} s"; sleep "$delay"; }
  done
  return 1
}

if [[ -z $(find_browser) ]]; then
  fix="install it (apt-get install -y --no-install-recommends chromium) and run make test again"
  [[ $EUID -eq 0 ]] || die "chromium is missing and installing it needs root: $fix"
  command -v apt-get >/dev/null || die "chromium is missing and there is no apt-get: $fix"
  log "apt-get install chromium (the dashboard's browser test needs it)"
  export DEBIAN_FRONTEND=noninteractive
  retry 3 10 apt-get update -qq || die "apt-get update failed 3 times (is the Debian mirror reachable?)"
  retry 3 10 apt-get install -y -qq --no-install-recommends -o Acquire::Retries=3 chromium \
    >/dev/null || die "apt-get install chromium failed 3 times"
fi
browser=$(find_browser)
[[ -n $browser ]] || die "chromium was installed but is not on PATH"
"$browser" --version
