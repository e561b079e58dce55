"""Pipeline definition, runners and command line of the taxi pipeline."""

import components  # noqa: F401  (sets the Keras switch before TensorFlow loads, see components.compat)
