"""Logged serving traffic, as `monitor` and the shadow check read it: the formats of its
files (`components.support.request_logs` reads each), "auto" to tell each file's from its
first record, and the largest fraction of malformed records the traffic is still judged
with."""

REQUEST_FORMATS = ("examples", "prediction-logs", "json")
AUTO_FORMAT = "auto"
MAX_MALFORMED = 0.01
