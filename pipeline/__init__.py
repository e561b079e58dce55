"""Pipeline definition, runners and command line of the taxi pipeline."""

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
