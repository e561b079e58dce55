"""The image tests need the pipeline image (`make image`): `make test-image` builds it and
names it in TAXI_PIPELINE_IMAGE. Without it they are skipped, saying so."""

import os
import shutil

import pytest

IMAGE_ENV = "TAXI_PIPELINE_IMAGE"


@pytest.fixture(scope="session")
def pipeline_image() -> str:
    image = os.environ.get(IMAGE_ENV)
    if not image:
        pytest.skip(f"no pipeline image: run `make test-image`, which builds it and sets {IMAGE_ENV}")
    if not shutil.which("buildah"):
        pytest.skip("buildah is not installed: `make test-image` installs it (Debian's package)")
    return image
