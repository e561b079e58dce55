"""How a candidate that passed every check reaches serving: at once ("auto"), or copied
into the serving folder to await a person's `taxi-pipeline serving approve` ("approval")."""

AUTO, APPROVAL = "auto", "approval"
PROMOTIONS = (AUTO, APPROVAL)
