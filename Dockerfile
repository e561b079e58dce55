# The pipeline image for Kubeflow Pipelines v2 / Vertex AI:
#   docker build -t REGION-docker.pkg.dev/PROJECT/REPO/taxi-pipeline:TAG .
#   taxi-pipeline compile --image REGION-docker.pkg.dev/PROJECT/REPO/taxi-pipeline:TAG ...
# TFX's own 1.16 image (Python 3.10, the TFX executors' entry points), then the same
# lock as every other install, then this package. The source stays at /pipeline: the
# compiled pipeline reads the curated schema from /pipeline/components/schema.
FROM gcr.io/tfx-oss-public/tfx:1.16.0

ENV TF_USE_LEGACY_KERAS=1
WORKDIR /pipeline
COPY constraints.txt setup.py pyproject.toml ./
COPY components ./components
COPY pipeline ./pipeline
RUN python -m pip install --no-cache-dir -c constraints.txt . \
    && python -c "import components, pipeline.pipeline, tfx; assert tfx.__version__ == '1.16.0'"
