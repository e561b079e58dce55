"""Making data: `data/` from the CSV in the tfx wheel, or synthetic spans of any size. Uses
only the definition."""
