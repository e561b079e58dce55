"""The model: the feature spec, Transform's `preprocessing_fn`, the Trainer and the curated
schema; the code a data scientist edits. Imports only `components.compat` and itself."""

# The curated schema (the data contract), in `components/model/schema/`; also the file
# name of the Schema artifact ImportSchema writes.
SCHEMA_FILE = "schema.pbtxt"
