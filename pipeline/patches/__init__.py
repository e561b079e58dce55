"""Library patches: every change this project makes to a library's internals, one module
per library (a patch to a library lives in that library's module, nowhere else)."""
