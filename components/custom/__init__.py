"""Our custom TFX components (ingest, span window, data gate, serving check, pusher and the
model card it writes) and the Beam functions their workers run. May import
`components.model` and `components.support`."""
