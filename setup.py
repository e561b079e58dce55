"""Chicago taxi "big tip" TFX pipeline: the `pipeline` and `components` packages."""

import setuptools

setuptools.setup(
    name="taxi-tfx-pipeline",
    version="0.1.0",
    description="Production TFX pipeline for the Chicago taxi big-tip model.",
    python_requires=">=3.10,<3.11",
    packages=setuptools.find_packages(include=["pipeline", "pipeline.*", "components", "components.*"]),
    package_data={"components": ["schema/*.pbtxt"]},
    install_requires=["tfx[kfp]==1.16.0"],
    extras_require={"test": ["pytest", "pytest-timeout", "pytest-randomly", "ruff"]},
    entry_points={"console_scripts": ["taxi-pipeline=pipeline.cli:console_main"]},
)
