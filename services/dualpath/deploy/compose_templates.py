"""The fixed text of the generated compose files (`dualpath.deploy.compose` fills it in).

str.format templates: `{{` and `}}` are literal braces (compose's `${VAR:-default}`). Each
comment here lands in docker-compose.yml, where it tells a reader why the setting is so.
"""

from __future__ import annotations

ANCHORS = """name: dualpath

x-dualpath: &dualpath
  image: dualpath-testbed:${{DUALPATH_TAG:-dev}}
  build:
    context: {root}
    dockerfile: Dockerfile
  init: true
  environment:
    PYTHONUNBUFFERED: "1"
{mount}
# One service process of the cluster. Every service waits for all peers of run `compose` to
# register in Redis and exits if that takes longer than 60 s: `on-failure` retries it.
# depends_on names only redis on purpose: a service turns healthy only once ALL peers are up,
# so waiting for a peer's health would deadlock the start.
x-serve: &serve
  <<: *dualpath
  environment:
    PYTHONUNBUFFERED: "1"
    # Through the environment, not argv (`ps` would show it). The health service and
    # /healthz, /livez stay open for the healthchecks; the API on :8000 is open by design.
    DUALPATH_TOKEN: ${{DUALPATH_TOKEN:-dualpath-compose-local-token}}
  restart: on-failure
  depends_on:
    redis:
      condition: service_healthy
  # SIGTERM: health NOT_SERVING, deregister, 5 s for in-flight RPCs; then compose SIGKILLs.
  stop_grace_period: 15s

services:
  redis:
    image: redis:7
    # A password: Debian's and the official image's protected mode then accept clients
    # from other containers, and only those holding it.
    command: ["redis-server", "--save", "", "--appendonly", "no",
              "--requirepass", "${{DUALPATH_REDIS_PASSWORD:-dualpath-local}}"]
    environment:
      REDISCLI_AUTH: ${{DUALPATH_REDIS_PASSWORD:-dualpath-local}}  # for the healthcheck
    restart: unless-stopped
    healthcheck:
      test: ["CMD", "redis-cli", "ping"]
      interval: 2s
      timeout: 2s
      retries: 15
      start_period: 2s
"""

STORAGE = """
  # Arguments every cluster service shares: the same scenario, Redis and run id. `--host` is
  # the service's own DNS name: it binds there (its address on the compose network) and
  # registers HOST:PORT in Redis, which is how peers reach it. Without `--epoch` the first
  # service stores the run's epoch in Redis; containers share the host kernel's monotonic
  # clock, so emulated timestamps compare across them.
  storage:
    <<: *serve
    command: ["serve", "storage", "--preset", {p},
              "--redis-url", "{redis_url}",
              "--run-id", "compose", "--host", "storage", "--grpc-port", "50051",
              "--admin-port", "9100"]
    healthcheck: &probe
      test: ["CMD", "python", "-m", "dualpath.probe", "--grpc", "storage:50051"]
      interval: 5s
      timeout: 4s
      retries: 3
      # NOT_SERVING until every peer registered; failures before this do not count.
      start_period: 90s
"""

NODE = """
  {role}{i}:
    <<: *serve
    command: ["serve", "{role}", "--node", "{i}", "--preset", {p},
              "--redis-url", "{redis_url}",
              "--run-id", "compose", "--host", "{role}{i}",
              "--grpc-port", "50051", "--admin-port", "9100"]
    healthcheck:
      <<: *probe
      test: ["CMD", "python", "-m", "dualpath.probe", "--grpc", "{role}{i}:50051"]
"""

SCHEDULER = """
  scheduler:
    <<: *serve
    # The scheduler serves /healthz, /metrics and /v1/... on --http-port (no admin port).
    command: ["serve", "scheduler", "--preset", {p},
              "--redis-url", "{redis_url}",
              "--run-id", "compose", "--host", "scheduler", "--grpc-port", "50051",
              "--http-port", "8000"]
    ports:
      - "8000:8000"
    healthcheck:
      <<: *probe
      test: ["CMD", "python", "-m", "dualpath.probe", "--grpc", "scheduler:50051"]
"""

JOBS = """
  sim:
    <<: *dualpath
    profiles: [sim]
    command: ["sim", "--preset", {p}, "--out", "/out/report.json"]
    restart: "no"  # one-shot: exits when the report is written
    volumes:
      - reports:/out{sim_mount}

  prometheus:
    image: prom/prometheus:v2.55.1
    profiles: [monitoring]
    # --storage.tsdb.path: the official image's own default CMD has it (this command
    # replaces that CMD); other builds default elsewhere (Debian's: /var/lib/prometheus).
    command: ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus",
              "--storage.tsdb.retention.time=2d"]
    restart: unless-stopped
    ports:
      - "9090:9090"
    volumes:
      # generated with this file: its targets are this file's services
      - ./monitoring/prometheus.yml:/etc/prometheus/prometheus.yml:ro
    healthcheck:
      # the image is busybox-based: wget, no curl
      test: ["CMD", "wget", "-q", "-O", "/dev/null", "http://localhost:9090/-/ready"]
      interval: 5s
      timeout: 3s
      retries: 5
      start_period: 10s

  # Profile `load`: Locust master + worker from the project image (docs/loadgen.md). The
  # master draws the Poisson arrivals (--aps: sessions per emulated second) of the cluster's
  # scenario (--preset) and hands each session to a worker, which replays its turns against
  # the API; --speedup is the cluster's (serve's default 1). After --run-time the master
  # stops the test, writes its reports into /out/load (read them with `docker compose cp`)
  # and exits: non-zero when a turn failed. The worker exits with its master.
  locust-master:
    <<: *dualpath
    profiles: [load]
    entrypoint: ["locust"]
    command: ["-f", "/app/loadgen/locustfile.py", "--master", "--headless",
              "--expect-workers", "1", "--expect-workers-max-wait", "60",
              "--host", "http://scheduler:8000", "--run-time", "30s",
              "--preset", {p}, "--aps", "0.5", "--speedup", "1",
              "--csv", "/out/load/locust", "--html", "/out/load/locust.html",
              "--slo-json", "/out/load/slo.json", "--progress-file", "/out/load/progress.json"]
    restart: "no"  # one-shot: exits after --run-time
    depends_on:
      scheduler:
        condition: service_healthy

  locust-worker:
    <<: *dualpath
    profiles: [load]
    entrypoint: ["locust"]
    command: ["-f", "/app/loadgen/locustfile.py", "--worker", "--master-host", "locust-master"]
    restart: "no"  # exits when its master quits
    depends_on: [locust-master]

  grafana:
    image: grafana/grafana:11.4.0
    profiles: [grafana]
    depends_on:
      prometheus:
        condition: service_healthy
    restart: unless-stopped
    environment:
      GF_AUTH_ANONYMOUS_ENABLED: "true"
      GF_AUTH_ANONYMOUS_ORG_ROLE: Viewer
      GF_SECURITY_ADMIN_PASSWORD: ${{GRAFANA_ADMIN_PASSWORD:-dualpath-local}}
      GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH: /etc/grafana/dashboards/dualpath.json
      GF_ANALYTICS_REPORTING_ENABLED: "false"
      GF_ANALYTICS_CHECK_FOR_UPDATES: "false"
      GF_ANALYTICS_CHECK_FOR_PLUGIN_UPDATES: "false"
      GF_PLUGINS_PREINSTALL_DISABLED: "true"
    ports:
      - "3000:3000"
    volumes:
      - {root}/monitoring/grafana/provisioning:/etc/grafana/provisioning:ro
      - {root}/monitoring/grafana/dashboards:/etc/grafana/dashboards:ro
    healthcheck:
      test: ["CMD", "wget", "-q", "-O", "/dev/null", "http://localhost:3000/api/health"]
      interval: 5s
      timeout: 3s
      retries: 10
      start_period: 30s

volumes:
  reports: {{}}
"""

PROMETHEUS = """global:
  scrape_interval: 5s
  evaluation_interval: 15s

scrape_configs:
  - job_name: dualpath
    # /metrics needs the run's shared token (docs/services.md, Security); this is the compose
    # default DUALPATH_TOKEN: change both together.
    authorization:
      type: Bearer
      credentials: dualpath-compose-local-token
    static_configs:
"""

# The header's part that is the same for every scenario (`{names}`: the node services).
USAGE = """
Default (`docker compose up`): the microservice runtime, one container per process of
`dualpath up`: redis, storage, {names} and scheduler
(OpenAI-compatible API on http://localhost:8000). Profiles add:
  sim         one-shot job: the whole emulated cluster in one process on a virtual clock
              (`dualpath sim`), writing its report into the `reports` volume, then exiting;
  monitoring  Prometheus on http://localhost:9090 scraping every service's /metrics;
  grafana     Grafana on http://localhost:3000 with the provisioned DualPath dashboard
              (monitoring/grafana/; use with `--profile monitoring`). Its image comes from a
              registry only: `make compose-test` cannot make it offline, so it is not run
              there (docs/monitoring.md);
  load        Locust's distributed mode: a headless master (30 s of Poisson agent sessions
              against the scheduler's API, then it exits) and one worker.

  docker compose build
  docker compose up -d                                     # cluster (see `docker compose ps`)
  docker compose --profile monitoring up -d                # + Prometheus
  docker compose --profile load up -d locust-master locust-worker   # + 30 s of load
  docker compose cp locust-master:/out/load out/           # its CSV, HTML, slo.json
  docker compose run --rm sim                              # this scenario, virtual time
  docker compose run --rm sim sim --preset paper-ds27b-1p1d --out /out/report.json
  docker compose run --rm -T --entrypoint cat sim /out/report.json > report.json
On podman 4.3 (no Docker engine; `make compose-test`, docs/containers.md) a second `up`
against a running cluster needs --no-recreate, or compose recreates it, Redis included.

Secrets (docs/deployment.md "Security"): the services bind their compose DNS names, not
loopback, so they require a shared token on every gRPC call and on /metrics, and Redis
requires a password. Both have defaults for a local run ON ONE BOX ONLY; anywhere else set
your own before `up` (letters, digits, `-` and `_`: the password goes into a URL):
  export DUALPATH_TOKEN=$(openssl rand -hex 32) DUALPATH_REDIS_PASSWORD=$(openssl rand -hex 16)
"""
