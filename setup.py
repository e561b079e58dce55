"""Chicago taxi "big tip" TFX pipeline: the `pipeline` and `components` packages."""

import setuptools

setuptools.setup(
    name="taxi-tfx-pipeline",
    version="0.1.0",
    description="Production TFX pipeline for the Chicago taxi big-tip model.",
    # Two stacks (see Makefile and locks/): TFX 1.16 on Python 3.10, TFX 1.21 on Python 3.13.
    python_requires=">=3.10,<3.14",
    packages=setuptools.find_packages(include=["pipeline", "pipeline.*", "components", "components.*"]),
    package_data={"components.model": ["schema/*.pbtxt"], "pipeline.inspect": ["templates/*.j2"]},
    install_requires=[
        'tfx[kfp]==1.16.0; python_version < "3.11"',
        # TF 2.21 no longer brings TensorBoard (`tf.summary` needs it); TFX 1.21 brings kfp
        # only below Python 3.12, and compiling for KFP v2 needs only its PipelineSpec.
        'tfx==1.21.0; python_version >= "3.11"',
        'tensorboard; python_version >= "3.11"',
        'kfp-pipeline-spec>=2.14.6,<2.17; python_version >= "3.11"',
        # The run's HTML page: its template and its plots.
        "jinja2",
        "matplotlib",
    ],
    extras_require={"test": ["pytest", "pytest-timeout", "pytest-randomly", "pytest-xdist", "ruff", "cel-python"]},
    entry_points={"console_scripts": ["taxi-pipeline=pipeline.cli:console_main"]},
)
