# The pipeline image for Kubeflow Pipelines v2 / Vertex AI, on either stack:
#   docker build -t REGION-docker.pkg.dev/PROJECT/REPO/taxi-pipeline:TAG .      # tfx-1.16
#   docker build --build-arg TFX_VERSION=1.21.0 --build-arg TF_USE_LEGACY_KERAS=0 \
#       -t REGION-docker.pkg.dev/PROJECT/REPO/taxi-pipeline:TAG .             # tfx-1.21
#   taxi-pipeline compile --image REGION-docker.pkg.dev/PROJECT/REPO/taxi-pipeline:TAG ...
# TFX's own image of that version (the TFX executors' entry points), then the stack's lock
# (locks/tfx-<major.minor>.txt), then this package. The lock was made on the stack's
# Python (3.10 for 1.16, 3.13 for 1.21); the build stops, naming both versions, when the
# image's Python is another one rather than install a set of packages never tested
# together. The source stays at /pipeline: the compiled pipeline reads the curated schema
# from /pipeline/components/schema. The Keras switch is in the image's environment, for
# every process of every component, whatever it imports first: 1 (Keras 2) for TFX 1.16,
# 0 (Keras 3) for TFX 1.21; the build stops if it does not match the stack
# (components.compat.LEGACY_KERAS).
ARG TFX_VERSION=1.16.0
FROM gcr.io/tfx-oss-public/tfx:${TFX_VERSION}
ARG TFX_VERSION
ARG TF_USE_LEGACY_KERAS=1
ENV TF_USE_LEGACY_KERAS=${TF_USE_LEGACY_KERAS}

WORKDIR /pipeline
COPY locks ./locks
COPY setup.py pyproject.toml ./
COPY components ./components
COPY pipeline ./pipeline
RUN set -e; \
    stack="tfx-$(echo "${TFX_VERSION}" | cut -d. -f1,2)"; \
    lock="locks/${stack}.txt"; \
    test -f "${lock}" || { echo "no lock for TFX ${TFX_VERSION} (${lock}); the stacks are: $(ls locks)"; exit 1; }; \
    case "${stack}" in tfx-1.16) want=3.10 ;; tfx-1.21) want=3.13 ;; esac; \
    have=$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
    test "${have}" = "${want}" || { echo "${lock} is for Python ${want}; this image has Python ${have}"; exit 1; }; \
    python -m pip install --no-cache-dir -c "${lock}" . \
    && python -c "import components, pipeline.pipeline, tfx; assert tfx.__version__ == '${TFX_VERSION}', tfx.__version__" \
    && python -c "from components import compat; import sys; \
sys.exit(None if compat.LEGACY_KERAS == ('${TF_USE_LEGACY_KERAS}' == '1') else \
'TF_USE_LEGACY_KERAS=${TF_USE_LEGACY_KERAS} does not fit ' + compat.STACK + ': give 1 for tfx-1.16, 0 for tfx-1.21')"
