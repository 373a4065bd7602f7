# JupyterHub for an interplab workshop room on one machine (docs/teaching/ROOM.md).
#
#     sudo /srv/interplab/venv/bin/jupyterhub -f /srv/interplab/room/jupyterhub_config.py
#
# One server per student, started as the student's own system account (files are isolated by the operating system),
# running the room's Python with interplab; students log in with the system passwords students.sh printed (PAM).
# Each server loads jupyter_server_config.py (next to this file): kernels on private Unix sockets, the notebooks
# copied into ~/interplab-notebooks when the server starts (a notebook already there is kept: it holds the student's
# work), one kernel per student. The embedded model ships in the package; GPT-2, when the teacher put it there, is
# read from a shared read-only Hugging Face cache. Idle servers are stopped by jupyterhub-idle-culler.
#
# Every setting below has a default for the layout ROOM.md describes and an INTERPLAB_ROOM_* variable to change it
# (tests/room/test_room.py runs this very file with other ports and folders).

import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821 - defined by JupyterHub when it loads this file

env = os.environ.get
HERE = Path(__file__).resolve().parent
ROOM = Path(env("INTERPLAB_ROOM_DIR", "/srv/interplab"))  # shared, root-owned, readable by every student
NOTEBOOKS = Path(env("INTERPLAB_ROOM_NOTEBOOKS", str(ROOM / "notebooks")))
HF_CACHE = env("INTERPLAB_ROOM_HF_CACHE", str(ROOM / "hf-home" / "hub"))
PYTHON = env("INTERPLAB_ROOM_PYTHON", sys.executable)  # the students' Python (default: the hub's own environment)
STATE = Path(env("INTERPLAB_ROOM_STATE", "/srv/jupyterhub"))  # the hub's database and cookie secret: root only
MEM_LIMIT = env("INTERPLAB_ROOM_MEM_LIMIT", "3G")
CPU_LIMIT = float(env("INTERPLAB_ROOM_CPU_LIMIT", "1"))
IDLE_TIMEOUT = int(env("INTERPLAB_ROOM_IDLE_TIMEOUT", "3600"))  # longer than the workshop's break
CULL_EVERY = int(env("INTERPLAB_ROOM_CULL_EVERY", "300"))
SSL_CERT, SSL_KEY = env("INTERPLAB_ROOM_SSL_CERT", ""), env("INTERPLAB_ROOM_SSL_KEY", "")  # TLS: see ROOM.md
# the server's DNS name: the hub at https://HOST:PORT, each student's server at https://NAME.HOST:PORT (a wildcard DNS
# record and a wildcard certificate, ROOM.md step 5)
HOST = env("INTERPLAB_ROOM_HOST", "")
# extra command-line options for every student's server (the room test: --LabApp.expose_app_in_browser=True, which a
# student's own ~/.jupyter can no longer set)
SERVER_ARGS = env("INTERPLAB_ROOM_SERVER_ARGS", "").split()
SPAWNER = env("INTERPLAB_ROOM_SPAWNER", "local")  # local: LocalProcessSpawner; systemd: SystemdSpawner (limits)
STUDENTS_GROUP = env("INTERPLAB_ROOM_GROUP", "interplab-students")
TEACHERS_GROUP = env("INTERPLAB_ROOM_TEACHERS", "interplab-teachers")  # students.sh add-teacher
NOTEBOOK_DIR = "interplab-notebooks"

# ---- the hub -----------------------------------------------------------------------------------------------------
c.JupyterHub.ip = env("INTERPLAB_ROOM_IP", "")  # all interfaces: the students' browsers come from the room's network
c.JupyterHub.port = int(env("INTERPLAB_ROOM_PORT", "8000"))
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(env("INTERPLAB_ROOM_HUB_PORT", "8081"))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{env('INTERPLAB_ROOM_PROXY_API_PORT', '8001')}"
c.ConfigurableHTTPProxy.command = [env("INTERPLAB_ROOM_PROXY", "configurable-http-proxy")]
c.ConfigurableHTTPProxy.pid_file = str(STATE / "jupyterhub-proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.JupyterHub.allow_named_servers = False  # one server per student
c.JupyterHub.cleanup_servers = True  # stopping the hub stops the students' servers
# 25 students log in within a minute: each server imports torch (a few CPU-seconds each), so allow time
c.JupyterHub.concurrent_spawn_limit = int(env("INTERPLAB_ROOM_CONCURRENT_SPAWNS", "30"))
# One origin per student: a student's server serves whatever the student's code makes it serve, to anyone who opens
# the link (a page with no login). On the hub's own origin such a page could read the hub's cookies and ask the hub
# for the visitor's tokens (the teacher's: admin); on NAME.HOST the browser keeps it out of the hub's pages.
if not HOST:
    raise ValueError("INTERPLAB_ROOM_HOST is not set: the room serves each student from a name of their own, "
                     "NAME.HOST (ROOM.md step 5: a wildcard DNS name and certificate); set it to the server's name")
c.JupyterHub.subdomain_host = f"https://{HOST}" + (f":{c.JupyterHub.port}" if SSL_CERT else "")
# a login lasts a workshop day; the tokens the room issues too (the API's, and the OAuth tokens in server cookies)
c.JupyterHub.cookie_max_age_days = 1
c.JupyterHub.token_expires_in_max_seconds = 24 * 3600
if SSL_CERT or SSL_KEY:  # the students type system passwords into the login form: TLS, unless a TLS proxy is in front
    c.JupyterHub.ssl_cert, c.JupyterHub.ssl_key = SSL_CERT, SSL_KEY

# ---- who may log in: the system accounts students.sh made (its group), with the passwords it printed ------------
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.allowed_groups = {STUDENTS_GROUP, TEACHERS_GROUP}
admins = env("INTERPLAB_ROOM_ADMINS", "")  # e.g. "teacher": an account made by `students.sh add-teacher teacher`
c.Authenticator.admin_users = {a for a in admins.split(",") if a}

# ---- each student's server ---------------------------------------------------------------------------------------
if SPAWNER == "systemd":  # jupyterhub-systemdspawner: systemd enforces mem_limit and cpu_limit (not run here)
    c.JupyterHub.spawner_class = "systemdspawner.SystemdSpawner"
    c.SystemdSpawner.unit_name_template = "jupyter-{USERNAME}"
    c.SystemdSpawner.isolate_tmp = True  # a private /tmp per student, removed with the unit
else:  # enforces nothing by itself: the limits below only reach the server as MEM_LIMIT / CPU_LIMIT
    c.JupyterHub.spawner_class = "localprocess"
# -P: not the server's working directory (the student's home) on its import path; -s: no user site-packages (the
# venv has none either). The server is the room's, not the student's: the kernel is where their code runs.
c.Spawner.cmd = [PYTHON, "-P", "-s", "-m", "jupyterhub.singleuser"]
# no ~/.jupyter config and no ~/.local/share/jupyter extensions or kernels: a student's config could load a server
# extension that serves pages with no login, or run code in the server at its start
c.Spawner.disable_user_config = True
# private kernel sockets, the notebooks, one kernel per student: done by the server itself, as the student
c.Spawner.args = [f"--config={HERE / 'jupyter_server_config.py'}", *SERVER_ARGS]
c.Spawner.notebook_dir = "~"
c.Spawner.default_url = f"/lab/tree/{NOTEBOOK_DIR}/01_ioi_patching.ipynb"
c.Spawner.mem_limit = MEM_LIMIT
c.Spawner.cpu_limit = CPU_LIMIT
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 120
c.Spawner.environment = {
    "HF_HUB_OFFLINE": "1",  # the room's models are on disk: no student waits on the network
    "HF_HUB_CACHE": HF_CACHE,  # GPT-2 for the optional cells, shared and read-only
    "TOKENIZERS_PARALLELISM": "false",
    "INTERPLAB_ROOM_NOTEBOOKS": str(NOTEBOOKS),  # copied into ~/interplab-notebooks by jupyter_server_config.py
    # torch's threads per kernel = the student's CPU share: 25 kernels x all cores would thrash the machine
    "OMP_NUM_THREADS": str(max(1, round(CPU_LIMIT))),
    "MKL_NUM_THREADS": str(max(1, round(CPU_LIMIT))),
}

# ---- idle culling ------------------------------------------------------------------------------------------------
# A running server reports its activity to the hub every 5 minutes (JupyterHub's default, hub_activity_interval), and
# the hub writes it every 5 minutes (last_activity_interval): a timeout under 10 minutes culls students who work.
if IDLE_TIMEOUT < 600:
    raise ValueError(f"INTERPLAB_ROOM_IDLE_TIMEOUT={IDLE_TIMEOUT}: under 600 s the culler stops the servers of "
                     "students who are working (activity reaches the hub every 5 minutes); use 600 or more")
c.JupyterHub.services = [{
    "name": "idle-culler",
    "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={IDLE_TIMEOUT}",
                f"--cull-every={CULL_EVERY}"],
}]
c.JupyterHub.load_roles = [{
    "name": "idle-culler",
    "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
    "services": ["idle-culler"],
}]

# ---- students.sh remove: the hub forgets a removed account -------------------------------------------------------
# The service room-accounts may delete users (their tokens, servers and logins); its token and the hub's API address
# are written into the state folder (root's only), where students.sh reads them (ROOM.md's reset removes them).
if STATE.is_dir():
    import secrets

    token_file = STATE / "room-accounts.token"
    if not token_file.exists():
        token_file.touch(mode=0o600)
        token_file.write_text(secrets.token_hex(32))
    accounts_token = token_file.read_text().strip()
    (STATE / "room-accounts.url").write_text(f"http://{c.JupyterHub.hub_ip}:{c.JupyterHub.hub_port}/hub/api\n")
    c.JupyterHub.services.append({"name": "room-accounts", "api_token": accounts_token})
    c.JupyterHub.load_roles.append({"name": "room-accounts", "scopes": ["admin:users"], "services": ["room-accounts"]})
