# The pipeline image for Kubeflow Pipelines v2 / Vertex AI: one stack's lock and this package
# in a virtual environment (/opt/taxi), on a plain Debian base. Every compiled task runs
# `python -m pipeline.cloud.task tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor ...`
# in it (TFX's entry point, through this package's task command): a job compiled by this
# package needs an image of the same package.
#
#   make image                                   # here: both stacks' images (scripts/image)
#   docker build -t REGION-docker.pkg.dev/PROJECT/REPO/taxi-pipeline:tfx-1.21 .
#   docker build --build-arg STACK=tfx-1.16 --build-arg TF_USE_LEGACY_KERAS=1 \
#       --build-arg BASE_IMAGE=docker.io/library/python:3.10-slim-bookworm --build-arg PYTHON=python3.10 \
#       -t .../taxi-pipeline:tfx-1.16 .
#
# BASE_IMAGE: any Debian-like image. A base without the stack's Python gets Debian's
# (python3 of Debian 13 is 3.13, the tfx-1.21 stack's); tfx-1.16 needs a base with Python
# 3.10, which no Debian release has: python:3.10 (Debian 12 with CPython in /usr/local; what
# scripts/image makes here from Debian's packages and the machine's CPython 3.10) or TFX's
# own image of the version (give its Python as PYTHON). The build stops, naming both
# versions, when the Python is not the one the lock was made on, rather than install a set
# of packages never tested together.
# Two stages: the first makes the dependencies' environment (scripts/image-venv: copied
# from the clone's, or installed by pip with compilers and headers, since pyfarmhash builds
# from source on Python 3.13); the image is the base, Python, that environment and this
# package. The dependencies' layers depend only on the lock, setup.py, the pip tools' pins
# and scripts/image-venv (and on whether a clone's environment was mounted, which holds the
# same packages), so an edit of the code or of the test settings rebuilds only the package's layers.
ARG BASE_IMAGE=docker.io/library/debian:trixie-slim

FROM ${BASE_IMAGE} AS dependencies
ARG STACK=tfx-1.21
ARG PYTHON=python3
# A CA bundle for pip where downloads go through a proxy with its own CA (scripts/image
# mounts the machine's); unset, pip's own.
ARG PIP_CERT
# A stack's environment made by scripts/venv with the base's Python, to copy instead of
# installing the lock again (scripts/image mounts the clone's .venv-STACK; scripts/image-venv).
ARG PREBUILT_VENV
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /build
COPY locks/${STACK}.txt lock.txt
COPY locks/pip-tools.txt ./
# setup.py alone: the build runs on the venv's pinned setuptools (--no-build-isolation), so
# pyproject.toml's test and lint settings do not reach these layers.
COPY setup.py scripts/image-venv ./
RUN sh image-venv "${STACK}" "${PYTHON}" "${PREBUILT_VENV}"

FROM ${BASE_IMAGE}
ARG STACK=tfx-1.21
ARG PYTHON=python3
# The Keras switch, for every process of every component whatever it imports first:
# 1 (Keras 2) for tfx-1.16, 0 (Keras 3) for tfx-1.21; checked against the stack below.
ARG TF_USE_LEGACY_KERAS=0
ENV TF_USE_LEGACY_KERAS=${TF_USE_LEGACY_KERAS} PATH=/opt/taxi/bin:${PATH} PYTHONDONTWRITEBYTECODE=1 \
    TAXI_PIPELINE_STACK=${STACK}
RUN if ! command -v "${PYTHON}" >/dev/null 2>&1; then \
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        python3 ca-certificates >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*; \
    fi
COPY --from=dependencies /opt/taxi /opt/taxi
# A base's own entry point (TFX's image has one) would take the tasks' commands as arguments.
ENTRYPOINT []
# This package last, so that a code edit rebuilds only these layers. The compiled pipeline
# reads the curated schema from /pipeline/components/model/schema (pipeline.config.IMAGE_SCHEMA_DIR).
WORKDIR /pipeline
COPY setup.py ./
COPY components ./components
COPY pipeline ./pipeline
RUN pip install --quiet --no-deps --no-build-isolation --no-compile . && rm -rf build *.egg-info \
    && python -m compileall -q /opt/taxi/lib/python*/site-packages/components /opt/taxi/lib/python*/site-packages/pipeline
RUN python -c "from components import compat; import sys; \
sys.exit(None if compat.STACK == '${STACK}' and compat.LEGACY_KERAS == ('${TF_USE_LEGACY_KERAS}' == '1') else \
'TF_USE_LEGACY_KERAS=${TF_USE_LEGACY_KERAS} and STACK=${STACK} do not fit ' + compat.STACK + \
': give 1 for tfx-1.16, 0 for tfx-1.21')"
