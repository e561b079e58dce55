"""Fixes to what TFX 1.16 compiles, where it leaves no public switch. One function per fix.

Each has a test (tests/pipeline/test_compiled_fixes.py) that compiles the real pipeline
and checks both that TFX still compiles the thing being fixed and that the fix applies,
so a TFX upgrade that changes either fails loudly instead of silently.
"""

from __future__ import annotations

from typing import Any, Dict

from components import window


def span_window_uncached_in_job(job: Dict[str, Any]) -> Dict[str, Any]:
    """The KFP v2 PipelineJob JSON with the SpanWindow task's cache off.

    A compiled pipeline cannot know the spans of a future run, so the task's parameters
    are the same on every run: Vertex would reuse the first run's window forever. TFX
    1.16 compiles caching only from the pipeline-wide `enable_cache` (`step_builder`
    sets no per-task option).
    """
    tasks = job["pipelineSpec"]["root"]["dag"]["tasks"]
    if window.NODE_ID in tasks:
        tasks[window.NODE_ID]["cachingOptions"] = {"enableCache": False}
    return job


def producer_tasks_named_as_compiled(job: Dict[str, Any]) -> Dict[str, Any]:
    """Points each runtime parameter at the task that produces it.

    TFX 1.16 compiles a parameter taken from another node's output (`.future()[0].value`)
    as coming from task `<node id>_task`, but names that task `<node id>`: no task
    of that name exists, and the run could not resolve the parameter.
    """
    tasks = job["pipelineSpec"]["root"]["dag"]["tasks"]
    for task in tasks.values():
        for parameter in task.get("inputs", {}).get("parameters", {}).values():
            output = parameter.get("taskOutputParameter")
            if output and output["producerTask"] not in tasks and output["producerTask"].endswith("_task"):
                producer = output["producerTask"][: -len("_task")]
                if producer in tasks:
                    output["producerTask"] = producer
    return job
