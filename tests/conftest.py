import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
# pytest-xdist's workers see COLUMNS=80 and LINES=24 in their environment; a user's pipe has neither, and
# the width-dependent tests (table wrapping, the front header) assume what a pipe gives
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)

#: an idealised runtime and device: no fixed costs, efficiency 1, ample compute
IDEAL = {"kernel_launch_us": 0, "step_overhead_us": 0, "spec_overhead_us": 0, "mem_efficiency": 1.0,
         "compute_efficiency": 1.0, "sequence_overhead_us": 0, "request_overhead_us": 0, "link_efficiency": 1.0,
         "roofline_p": 1000, "tree_kernels_per_layer": 0, "draft_step_overhead_us": 0}


@pytest.fixture(scope="session")
def ideal():
    return dict(IDEAL)


@pytest.fixture(scope="session")
def db():
    from dse.catalog.database import load_database
    return load_database()


@pytest.fixture
def shm(tmp_path):
    """A directory for journal files on tmpfs when there is one (the journal fsyncs every
    append: 90 ms per trial on this disk, 20 ms on tmpfs), else tmp_path."""
    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    d = Path(tempfile.mkdtemp(prefix="dse-test-", dir="/dev/shm"))
    yield d
    shutil.rmtree(d, ignore_errors=True)
