"""Beam, for every command: the options it is given (`options`) and its services, a
target's and this machine's own (`services`). Imports `components` only (where a set of
options runs Beam's work is `components.support.beam_place`, which the components read
too); the definition at the top (`pipeline.config`) and every concern below it import it.
The worker processes of a local run start as `pipeline.run.beam_worker`, which needs the
library patches and the run's way of ending a process."""
