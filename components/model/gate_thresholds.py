"""Every threshold of the data gate (`DataGate`, components/custom/gate.py): each is set
here or named here with the one file that sets it, so changing one is an edit of one file.

- The label's share of 1s, from one span to the next: `LABEL_DRIFT_THRESHOLD` and
  `LABEL_NOISE_Z` below. The gate compares it itself: TFDV has no comparator that allows
  for the sampling noise of small spans.
- A feature's drift, from one span to the next: its `drift_comparator` in the curated
  schema, components/model/schema/schema.pbtxt (L-infinity for `payment_type` and
  `company`, Jensen-Shannon divergence for the numeric features; a feature without one is
  not checked for drift). They stay in the schema because TFDV reads them from there: the
  gate compares the spans with `tfdv.validate_statistics` on the schema the run imported,
  and the model card tells which features have one. How each was measured:
  docs/data-quality.md#drift-thresholds.
- Anomalies, span by span and split by split: the same schema's constraints (types,
  presence, domains and their `min_domain_mass`, ranges), which ExampleValidator and the
  gate check. There is no count to tune: any anomaly rejects the data.

The schema's `skew_comparator`s are `taxi-pipeline monitor`'s thresholds, not the gate's
(docs/data-quality.md#skew-thresholds-monitor).
"""

# The largest change of the label's share of 1s from one span to the next (the L-infinity
# distance of the two label distributions): 1.3x the largest change between consecutive
# real spans of data/ (docs/data-quality.md#the-label-gate). A label zeroed, inverted or
# recomputed with other units upstream moves it further.
LABEL_DRIFT_THRESHOLD = 0.13
# A label change must also exceed this many standard errors of the difference of two
# binomial shares, so that spans of a few hundred rows do not stop on sampling noise.
LABEL_NOISE_Z = 4.0
