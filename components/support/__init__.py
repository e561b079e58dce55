"""Support code the components share: span folders, the serving folder's `models.config`,
the serving probe. May import `components.model` (its serving contract), not the components."""
