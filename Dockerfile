# One image for every role of the testbed: the roles differ only by the `dualpath` subcommand
# (compose `command:`, Kubernetes `args:`). Default: the one-process smoke emulation.
#
# The base is a build argument so that a workstation can pin it by digest (reproducible
# builds; a tag moves when upstream rebuilds it):
#   docker pull python:3.11-slim
#   docker image inspect --format '{{index .RepoDigests 0}}' python:3.11-slim
#   docker build --build-arg BASE_IMAGE=python:3.11-slim@sha256:<digest> -t dualpath-testbed:dev .
# (or `args: {BASE_IMAGE: ...}` under `build:` in docker-compose.yml). Where no registry is
# reachable, scripts/containers/engine.sh makes a local stand-in tagged python:3.11-slim.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MPLCONFIGDIR=/tmp/matplotlib

# The user first: it never changes, so this layer stays cached across dependency bumps.
RUN groupadd --gid 10001 dualpath \
    && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin dualpath \
    && mkdir -p /out \
    && chown dualpath:dualpath /out

WORKDIR /app

# Dependencies next (read from pyproject.toml) so that code edits reuse this, the big layer.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# The package last; the locustfile for `locust -f /app/loadgen/locustfile.py` (compose
# profile `load`): it re-exports the packaged one at a path that does not depend on where
# pip put site-packages.
COPY README.md ./
COPY services ./services
RUN pip install --no-deps . \
    && rm -rf build services/*.egg-info
COPY loadgen/locustfile.py ./loadgen/

USER 10001:10001
WORKDIR /home/dualpath

ENTRYPOINT ["dualpath"]
CMD ["sim", "--preset", "smoke"]
