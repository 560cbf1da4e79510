"""The local Ray instance the Ray tests share (``tests/test_ray.py``,
``tests/test_ray_pack.py``): a test module imports the fixture (``from _ray_cluster import
ray_cluster  # noqa: F401``) and its tests that need the cluster take ``local_ray``, the
fixture's name (another name than the import's, so that the argument redefines nothing)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module", name="local_ray")
def ray_cluster(tmp_path_factory):
    """A local Ray instance (2 CPUs, a 256 MiB object store, no dashboard, workers' logs
    kept off the driver's output), shut down after the module that uses it. The module
    runs in an empty folder, the driver too: Ray puts the driver's working directory first
    on its workers' ``sys.path``, and from the checkout they would import the source tree
    instead of the installed fastuq (``fastuq.ray`` refuses to start there)."""
    import ray
    import ray.data

    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("ray-cwd"))  # for the whole module: the driver too
    try:
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=256 << 20,
                 log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        yield
    finally:
        ray.shutdown()
        os.chdir(cwd)
