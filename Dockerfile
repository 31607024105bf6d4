# One image for every role of the testbed: the roles differ only by the `dualpath` subcommand
# (compose `command:`, Kubernetes `args:`). Default: the one-process smoke emulation.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MPLCONFIGDIR=/tmp/matplotlib

WORKDIR /app

# Dependencies first (read from pyproject.toml) so that code edits reuse this layer.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

COPY README.md ./
COPY services ./services
RUN pip install --no-deps . \
    && rm -rf build services/*.egg-info

RUN groupadd --gid 10001 dualpath \
    && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin dualpath \
    && mkdir -p /out \
    && chown dualpath:dualpath /out

USER 10001:10001
WORKDIR /home/dualpath

ENTRYPOINT ["dualpath"]
CMD ["sim", "--preset", "smoke"]
