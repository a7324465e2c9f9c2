"""Attack suite, fault class "a secret lands in a file, a message or the process list" (issue 18
item 2, issue 21 item 1).

Before the fix: a password in a study's `storage:` was copied into every results file's metadata,
the stored study's attributes and `dse export` output; passwords holding `/` or given as
`?password=` escaped redaction; redacting the password string everywhere turned "import" into
"im***ort" (password `p`) and so revealed it; the SLURM recipes put the URL in `ps`; the proxy
served anyone who reached its port.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
from attackkit import ROOT, cli, one_line, password_of, server_url, write_study
from hypothesis import given, settings
from hypothesis import strategies as st

from dse.errors import SpecError
from dse.storage.credentials import (
    ENV_VAR,
    has_password,
    read_storage_file,
    redact_text,
    redact_url,
    storage_source,
)

DSE = str(Path(sys.executable).with_name("dse"))


# --------------------------------------------------------------------------- redaction

@pytest.mark.parametrize("url, shown", [
    ("postgresql+psycopg://dse:secret@db:5432/dse", "postgresql+psycopg://dse:***@db:5432/dse"),
    ("postgresql+psycopg://dse:p/a:ss@db/dse", "postgresql+psycopg://dse:***@db/dse"),          # '/' and ':' inside
    ("mysql+pymysql://u:p%40ss%2Fw@db:3306/x", "mysql+pymysql://u:***@db:3306/x"),              # percent-encoded
    ("postgresql://dse@db/dse?password=hunter2", "postgresql://dse@db/dse?password=***"),
    ("postgresql://dse@db/dse?sslmode=require&PASSWORD=hunter2&x=1",
     "postgresql://dse@db/dse?sslmode=require&PASSWORD=***&x=1"),
    ("postgresql://dse:dse@dse/dse", "postgresql://dse:***@dse/dse"),                           # user = password
    ("postgresql://dse:@db/dse", "postgresql://dse:@db/dse"),                                  # empty password
    ("grpc://localhost:13000", "grpc://localhost:13000"),
    ("sqlite:///a:b@c.db", "sqlite:///a:b@c.db"),
    ("journal:/tmp/x:y@z.journal", "journal:/tmp/x:y@z.journal"),
])
def test_redact_url_blanks_the_password_field_only(url, shown):
    assert redact_url(url) == shown
    assert has_password(url) == (shown != url)


def test_short_passwords_and_user_equal_to_password_neither_garble_nor_reveal():
    """Issue 21: with password `p`, "import ... specified ... appropriate" printed as
    "im***ort ... s***ecified": the message garbled and the password shown by the gaps."""
    msg = ('(psycopg.OperationalError) connection to server at "db" failed: FATAL: password authentication '
           'failed for user "p"; import of postgresql+psycopg://p:p@db/p specified, check the appropriate settings')
    assert redact_text(msg) == msg.replace("postgresql+psycopg://p:p@db/p", "postgresql+psycopg://p:***@db/p")
    assert redact_text("user dse: postgresql://dse:dse@h/dse") == "user dse: postgresql://dse:***@h/dse"
    assert redact_text("conninfo host=h password='a b' dbname=p") == "conninfo host=h password=*** dbname=p"


_SAFE = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~"
PASSWORDS = st.text(alphabet=_SAFE + "/:%?#&=!$'()*+,;[]", min_size=1, max_size=24).filter(lambda p: "@" not in p)
WORDS = st.text(alphabet=_SAFE + " ,()\"", max_size=40)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(scheme=st.sampled_from(["postgresql", "postgresql+psycopg", "mysql+pymysql", "sqlite"]),
       user=st.text(alphabet=_SAFE, max_size=10), pw=PASSWORDS, host=st.text(alphabet=_SAFE, min_size=1, max_size=12),
       port=st.one_of(st.none(), st.integers(1, 65535)), db=st.text(alphabet=_SAFE, max_size=10),
       encode=st.booleans(), before=WORDS, after=WORDS)
def test_generated_storage_urls_lose_exactly_their_password(scheme, user, pw, host, port, db, encode, before, after):
    """Any password in the URL's password field (raw with '/', ':', '?', or percent-encoded) is
    replaced by *** and nothing else in the message changes."""
    field = quote(pw, safe="") if encode else pw
    rest = f"{host}{'' if port is None else f':{port}'}/{db}"
    url = f"{scheme}://{user}:{field}@{rest}"
    assert redact_url(url) == f"{scheme}://{user}:***@{rest}"
    assert redact_text(f"{before} {url} {after}") == f"{before} {scheme}://{user}:***@{rest} {after}"
    query = f"{scheme}://{user}@{rest}?sslmode=require&password={quote(pw, safe='')}"
    assert redact_url(query) == f"{scheme}://{user}@{rest}?sslmode=require&password=***"


# --------------------------------------------------------------------------- where a URL comes from

def test_storage_from_the_flag_a_file_or_the_environment(tmp_path, capsys):
    f = tmp_path / "url"
    f.write_text("# the campaign's database\n\npostgresql+psycopg://dse:pw@db/dse\n")
    f.chmod(0o600)
    assert storage_source(None, str(f), env={}) == ("postgresql+psycopg://dse:pw@db/dse", f"--storage-file {f}")
    assert storage_source(None, None, env={ENV_VAR: " journal:/x.journal "}) == ("journal:/x.journal", ENV_VAR)
    assert storage_source("a.journal", None, env={ENV_VAR: "b"}) == ("a.journal", "--storage")
    assert storage_source(None, None, env={}) == (None, "")
    assert capsys.readouterr().err == ""
    f.chmod(0o644)
    read_storage_file(f)
    assert f"note: {f} holds a password and other users may read it: chmod 600 {f}" in capsys.readouterr().err
    with pytest.raises(SpecError, match="either --storage or --storage-file"):
        storage_source("x", str(f), env={})
    for text, why in (("# nothing\n", "holds no storage URL"), (None, "file not found")):
        g = tmp_path / f"g{uuid.uuid4().hex[:6]}"
        if text is not None:
            g.write_text(text)
        with pytest.raises(SpecError, match=why):
            read_storage_file(g)


def test_dse_storage_and_storage_file_reach_run_and_export(tmp_path, shm):
    study = write_study(tmp_path)
    journal = shm / "env.journal"
    code, out, err, _ = cli("run", study, "--quiet", env={ENV_VAR: f"journal:{journal}", "COLUMNS": "400"})
    assert code == 0 and f"storage {journal}" in out.splitlines()[0] and journal.is_file()
    url = tmp_path / "url.txt"
    url.write_text(f"journal:{journal}\n")
    code, out, _, _ = cli("export", "--storage-file", url, "--study", "quickstart", "--out", tmp_path / "e.parquet")
    assert code == 0 and out.startswith(f"{tmp_path / 'e.parquet'} (24 trials")
    line = one_line(*cli("run", study, "--task", "0/2", "--storage-file", url, "--quiet"), want=2)
    assert "array tasks (--task) each run an in-memory study" in line          # issue 18: --task ignored --storage
    code, _, err, _ = cli("run", study, "--task", "0/2", "--quiet", env={ENV_VAR: f"journal:{journal}"})
    assert code == 0 and f"note: {ENV_VAR} is not used" in err


def test_the_slurm_recipes_keep_the_password_out_of_the_command_line():
    """Issue 18: the password sat in `ps` for the workflow the SLURM recipes use."""
    for recipe in sorted((ROOT / "examples" / "slurm").glob("*.sbatch")):
        for line in recipe.read_text().splitlines():
            if line.lstrip().startswith("#") or "dse " not in line:
                continue
            storage = re.findall(r"--storage[= ]+(\S+)", line)
            assert all(s.strip("'\"").startswith("grpc://") for s in storage), (recipe.name, line)
            assert "postgresql" not in line and "mysql" not in line and "PG_URL" not in line, (recipe.name, line)


# --------------------------------------------------------------------------- nothing written holds it

def test_a_password_in_the_study_file_is_in_nothing_dse_writes(tmp_path, shm, recwarn):
    """Issue 18: a study's `storage:` password was copied into every results file's metadata, the
    stored study's attributes (here a journal) and `dse export` output."""
    secret = "S3cr/et%40x"
    study = write_study(tmp_path, **{"storage": f"postgresql+psycopg://dse:{secret}@127.0.0.1:1/dse"})
    journal = shm / "q.journal"
    code, out, err, _ = cli("run", study, "--storage", journal, "--quiet")
    assert code == 0, err
    assert any("storage holds a password" in str(w.message) for w in recwarn)
    assert cli("sweep", study, "--points", 2, "--out", tmp_path / "sw", "--quiet")[0] == 0
    assert cli("run", study, "--task", "0/1", "--quiet")[0] == 0
    assert cli("export", "--storage", journal, "--study", "quickstart", "--out", tmp_path / "e.parquet")[0] == 0
    assert cli("report", tmp_path / "results" / "q.parquet", "--quiet")[0] == 0
    written = [p for p in [*tmp_path.rglob("*"), *shm.rglob("*")] if p.is_file() and p.suffix != ".yaml"]
    assert len(written) > 10
    for p in written:
        data = p.read_bytes()
        assert b"S3cr" not in data and b"et%40x" not in data, p
    assert b"postgresql+psycopg://dse:***@127.0.0.1:1/dse" in (tmp_path / "results" / "q.parquet").read_bytes()
    assert "S3cr" not in out + err


@pytest.mark.servers
@pytest.mark.parametrize("form", ["plain", "percent", "query"])
def test_a_shared_study_on_postgresql_writes_its_password_nowhere(tmp_path, form):
    """Every URL form against a real server: results, exported file, stdout and stderr hold neither
    the password nor its percent-encoding."""
    url = server_url()
    pw = password_of(url)
    head, _, rest = url.partition("://")
    user = rest.split(":", 1)[0]
    host = rest.split("@", 1)[1]
    encoded = quote(pw, safe="").replace("a", "%61")          # the same password, percent-encoded
    given = {"plain": url, "percent": f"{head}://{user}:{encoded}@{host}",
             "query": f"{head}://{user}@{host}?password={pw}"}[form]
    name = f"sec-{uuid.uuid4().hex[:8]}"
    study = write_study(tmp_path, **{"name": name, "search.n_trials": 8})
    code, out, err, exc = cli("run", study, "--storage", given, "--quiet")
    assert code == 0, (err, exc)
    assert cli("export", "--study", name, "--out", tmp_path / "e.parquet", env={ENV_VAR: given})[0] == 0
    for text in (out, err, *(p.read_bytes().decode("latin-1") for p in tmp_path.rglob("*.parquet"))):
        assert pw not in text and encoded not in text


@pytest.mark.servers
def test_a_password_given_as_a_url_with_slash_or_query_stays_out_of_errors(tmp_path):
    # without the driver the URL is refused as bad input (exit 2) before any connection is tried
    pytest.importorskip("psycopg", reason="the PostgreSQL driver is an extra: pip install '.[postgres]'")
    study = write_study(tmp_path)
    for url in ("postgresql+psycopg://dse:p/a%2Fss@127.0.0.1:1/dse", "postgresql+psycopg://dse@127.0.0.1:1/dse?password=hunter2"):
        code, out, err, exc = cli("run", study, "--storage", url, "--quiet")
        line = one_line(code, out, err, exc, want=1)
        assert "p/a" not in err and "hunter2" not in err and "ss@" not in err
        assert "cannot open this database" in line


@pytest.mark.servers
def test_pgpass_is_read_by_the_driver_with_no_password_on_the_command_line(tmp_path):
    """The driver's own password file (libpq's ~/.pgpass, here PGPASSFILE): `ps` shows no password."""
    url = server_url()
    pw = password_of(url)
    head, _, rest = url.partition("://")
    user, host = rest.split(":", 1)[0], rest.split("@", 1)[1]
    hostname, port_db = host.split(":", 1)
    port = port_db.split("/")[0]
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"{hostname}:{port}:*:{user}:{pw}\n")
    passfile.chmod(0o600)
    study = write_study(tmp_path, **{"name": f"pgpass-{uuid.uuid4().hex[:8]}", "search.n_trials": 8})
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSE_TEST")} | {"PGPASSFILE": str(passfile)}
    proc = subprocess.Popen([DSE, "run", str(study), "--storage", f"{head}://{user}@{host}", "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert pw.encode() not in cmdline and pw not in out + err


# --------------------------------------------------------------------------- the proxy's trust boundary

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.servers
def test_the_proxy_refuses_a_non_loopback_bind_unless_asked(tmp_path):
    """Issue 18: anyone who reached storage-proxy's port could delete a study."""
    pytest.importorskip("grpc")
    line = one_line(*cli("storage-proxy", "--storage", f"sqlite:///{tmp_path / 'p.db'}", "--host", "0.0.0.0",
                         "--port", _free_port()), want=2)
    assert line.startswith("error: --host = '0.0.0.0': is not a loopback address, and the proxy has no "
                           "authentication: anyone who can reach this port can read, change and delete every study")
    assert "--allow-remote" in line
    assert not (tmp_path / "p.db").exists()


@pytest.mark.servers
def test_the_proxy_says_it_has_no_authentication_when_it_starts(tmp_path):
    pytest.importorskip("grpc")
    port = _free_port()
    proc = subprocess.Popen([DSE, "storage-proxy", "--port", str(port)], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, ENV_VAR: f"sqlite:///{tmp_path / 'p.db'}"})
    try:
        first = proc.stderr.readline()
        second = proc.stderr.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=60)[1]
    assert first.startswith(f"dse storage-proxy: serving sqlite:///{tmp_path / 'p.db'} at grpc://localhost:{port}")
    assert second == ("dse storage-proxy: no authentication: anyone who can reach this port can read, change and "
                      "delete every study in the database\n")
    assert "stopped by SIGTERM" in rest and proc.returncode == 0
