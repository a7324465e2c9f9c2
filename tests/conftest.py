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


#: set by .ci/run's second stage (extras installed, PostgreSQL and MariaDB running): a skip there is a failure
REQUIRE_SERVERS = os.environ.get("DSE_REQUIRE_SERVERS") == "1"


def pytest_configure(config):
    config.addinivalue_line("markers", "servers: needs a database server, an extra (psycopg, pymysql, grpcio, dask) or "
                                       "minutes of CPU; skips with its reason unless there (.ci/run's second stage "
                                       "runs exactly these: pytest -m servers)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Two rules that keep the two CI stages complete: a test that skips must carry the ``servers`` marker
    (else no stage would ever run it), and under DSE_REQUIRE_SERVERS=1 nothing may skip."""
    outcome = yield
    rep = outcome.get_result()
    if not rep.skipped or hasattr(rep, "wasxfail"):
        return
    reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
    if REQUIRE_SERVERS:
        rep.outcome, rep.longrepr = "failed", f"skipped under DSE_REQUIRE_SERVERS=1: {reason}"
    elif item.get_closest_marker("servers") is None:
        rep.outcome, rep.longrepr = "failed", (f"skipped without the servers marker, so no CI stage runs it: {reason} "
                                               "(mark it @pytest.mark.servers)")


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
