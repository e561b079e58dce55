"""The model: the feature spec, Transform's `preprocessing_fn`, the Trainer and the curated
schema; the code a data scientist edits. Imports only `components.compat` and itself."""
