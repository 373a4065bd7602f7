"""The command line: a headless sweep as JSON equals the same sweep through the API; the headless demo runs; the lab
server asks for a token and prints the URL of the server it started; every option has help; loading is quiet and an
unreachable hub fails fast."""

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import torch
from _processes import read_url

import interplab as ilab

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "interplab", *args], capture_output=True, text=True, env=ENV,
                          cwd=ROOT, timeout=300)


def test_sweep_json_matches_the_api():
    out = run_cli("sweep", "--json", "--site", "z", "--by", "layer,head")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    lab = ilab.Lab.load("ioi-tiny")
    from interplab.__main__ import CLEAN, CORRUPT

    res = lab.patch_sweep(CLEAN, CORRUPT, "z", ("layer", "head"), ilab.logit_diff(" Mary", " John"), progress=False)
    assert data["by"] == ["layer", "head"] and data["site"] == "z"
    assert "Loading weights" not in out.stderr and "\r" not in out.stderr  # stdout is JSON, stderr stays clean
    assert torch.allclose(torch.tensor(data["values"]), res.values, atol=1e-5)


def test_headless_lab_prints_the_ioi_result():
    out = run_cli("lab", "--headless")
    assert out.returncode == 0, out.stderr
    assert "1 = clean behaviour" in out.stdout and "layer |" in out.stdout
    assert "Loading weights" not in out.stderr


def test_bad_input_is_one_clear_line():
    out = run_cli("sweep", "--json", "--answer", " Marylebone Street")
    assert out.returncode == 2
    assert out.stderr.startswith("error:") and len(out.stderr.strip().splitlines()) == 1
    last = out.stderr.strip()
    assert last.startswith("error:") and "single" in last and "Traceback" not in out.stderr


# ---- the lab server: a token by default, the URL of the server actually started ---------------------------------


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_lab_asks_for_a_token_and_prints_the_server_it_started(tmp_path):
    busy = socket.socket()  # the requested port is taken: the lab must say which port it really serves on
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    env = {**ENV, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_CONFIG_DIR": str(tmp_path / "config")}
    env.pop("JUPYTER_TOKEN", None)
    proc = subprocess.Popen([sys.executable, "-m", "interplab", "lab", "--no-browser", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
                            cwd=tmp_path, env=env, start_new_session=True)
    try:
        url, _ = read_url(proc, time.monotonic() + 120)
        parts = urllib.parse.urlsplit(url)
        token = urllib.parse.parse_qs(parts.query).get("token", [""])[0]
        assert len(token) >= 24, f"no token in the printed URL: {url}"
        assert parts.port != port, "the printed port is the busy one, not the server's"
        base = f"http://{parts.netloc}"
        assert _status(f"{base}/api/kernels") == 403
        assert _status(f"{base}/api/kernels?token={token}") == 200
        assert _status(url) == 200
        with urllib.request.urlopen(f"{base}/api/contents?token={token}", timeout=10) as r:
            names = {item["name"] for item in json.load(r)["content"]}
        assert "01_ioi_patching.ipynb" in names and not names & {"build.py", "sources", "__pycache__"}, names
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert token not in ps, "the token is on a command line, which every local user can read"
    finally:
        busy.close()
        proc.terminate()  # passed on to Jupyter
        try:
            proc.wait(30)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def test_no_token_only_by_an_explicit_flag_with_a_warning(capsys):
    from interplab import __main__ as cli

    parse = cli.build_parser().parse_args
    fresh = {cli.auth_token(parse(["lab"]), 8888) for _ in range(3)}
    assert len(fresh) == 3 and all(len(t) >= 24 for t in fresh)  # a fresh random token each launch
    assert "WARNING" not in capsys.readouterr().err
    assert cli.auth_token(parse(["lab", "--token", "workshop-secret"]), 8888) == "workshop-secret"
    assert cli.auth_token(parse(["lab", "--no-token"]), 8888) == ""
    assert "authentication is OFF" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse(["lab", "--token", ""])  # an empty token is not a way to turn authentication off
    with pytest.raises(SystemExit):
        parse(["lab", "--token", "x", "--no-token"])
    cmd, env = cli.server_command(parse(["lab"]), 8890, "s3cret-token", ROOT / "notebooks")
    assert env["JUPYTER_TOKEN"] == "s3cret-token" and not any("s3cret-token" in c for c in cmd)
    assert "--ServerApp.port_retries=0" in cmd and "--port=8890" in cmd
    cmd, env = cli.server_command(parse(["lab", "--no-token"]), 8890, "", ROOT / "notebooks")
    assert "--IdentityProvider.token=" in cmd and env["JUPYTER_TOKEN"] == ""


# ---- --help: every command and option explains itself, with examples ---------------------------------------------

def test_every_command_and_option_has_help_and_examples():
    from interplab.__main__ import build_parser

    ap = build_parser()
    commands = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    assert set(commands.choices) == {"lab", "sweep", "bench", "export", "check"}
    assert all(c.help for c in commands._choices_actions)
    for name, parser in [("interplab", ap), *commands.choices.items()]:
        assert "examples:" in (parser.epilog or ""), f"{name} --help shows no example"
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert action.help and action.help != argparse.SUPPRESS, f"{name}: {action.option_strings or action.dest}"
        assert "examples:" in parser.format_help() and parser.format_help().startswith("usage: interplab")
    out = subprocess.run([sys.executable, "-m", "interplab", "sweep", "--help"], capture_output=True, text=True,
                         env=ENV, cwd=ROOT, timeout=120)
    assert out.returncode == 0 and "examples:" in out.stdout and "--direction {denoise,noise}" in out.stdout


# ---- quiet loading: no weight-loading bars, none left half drawn in scripts; no hub retries offline ----------------

def test_sweep_in_a_script_draws_no_progress_bars():
    out = run_cli("sweep", "--by", "layer")
    assert out.returncode == 0, out.stderr
    assert "1 = clean behaviour" in out.stdout
    assert "\r" not in out.stderr and "Loading weights" not in out.stderr and "patch sweep" not in out.stderr


def test_load_shows_no_weight_loading_bar_unless_asked(capsys):
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    before = (hf_logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled())
    ilab.Lab.load("ioi-tiny")
    err = capsys.readouterr().err
    assert "Loading weights" not in err and "%|" not in err
    assert (hf_logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled()) == before  # restored
    ilab.Lab.load("ioi-tiny", progress=True)
    assert (hf_logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled()) == before


def test_an_uncached_hub_id_without_network_fails_fast_and_says_what_to_do(tmp_path):
    # No HF_HUB_OFFLINE, an empty cache and a hub that cannot be reached (a closed local port, whatever the network).
    env = {k: v for k, v in ENV.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
           and not k.lower().endswith("_proxy")}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT="http://127.0.0.1:9")
    code = (
        "import time\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer  # imported first: only the load is timed\n"
        "import interplab as ilab\n"
        "t = time.monotonic()\n"
        "try:\n"
        "    ilab.Lab.load('openai-community/gpt2')\n"
        "except ilab.LoadError as e:\n"
        "    print(round(time.monotonic() - t, 2))\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    seconds, message = out.stdout.split("\n", 1)
    assert float(seconds) < 2.0, f"took {seconds} s: {message}"
    assert "local directory" in message and "Lab.load('/path/to/gpt2')" in message


def test_check_says_ready_after_checking_the_sweep_against_its_invariant():
    out = run_cli("check")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[-1].startswith("ready")
    assert not any(line.startswith("FAIL") for line in lines)
    sweep = next(line for line in lines if "IOI sweep" in line)
    assert re.search(r"restores 1\.0000 \(must be 1\)", sweep), sweep
    assert f"torch {torch.__version__}" in out.stdout


def test_check_fails_with_the_reason_and_the_fix(tmp_path):
    out = run_cli("check", "--model", str(tmp_path / "no-such-model"))
    assert out.returncode == 1
    assert "FAIL  model" in out.stdout and "no-such-model" in out.stdout
    assert out.stdout.splitlines()[-1].startswith("not ready: model failed")


def test_the_lab_polls_its_own_server_past_any_proxy(monkeypatch):
    """`interplab lab` waits for its server over loopback: a proxy from the environment (which cannot reach this
    machine's loopback) must not be used, or the lab sits out its whole timeout before printing the URL."""
    import http.server

    from interplab.__main__ import _wait_until_serving

    class Status(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = self.path == "/api/status" and self.headers.get("Authorization") == "token t0k"
            self.send_response(200 if ok else 403)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Status)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    bogus = "http://127.0.0.1:9"  # a closed port: anything sent through this "proxy" fails
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(key, bogus)
    for key in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(key, raising=False)

    class Running:
        def poll(self):
            return None

    try:
        t0 = time.monotonic()
        assert _wait_until_serving(Running(), "127.0.0.1", server.server_address[1], "t0k", timeout=10)
        assert time.monotonic() - t0 < 5
        assert not _wait_until_serving(Running(), "127.0.0.1", server.server_address[1], "wrong", timeout=1)
    finally:
        server.shutdown()


def test_a_plain_sweep_prints_a_labelled_table():
    out = run_cli("sweep", "--by", "layer,pos")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    lab = ilab.Lab.load("ioi-tiny")
    from interplab.__main__ import CLEAN, CORRUPT

    res = lab.patch_sweep(CLEAN, CORRUPT, "resid_pre", ("layer", "pos"), ilab.logit_diff(" Mary", " John"),
                          progress=False)
    header = next(i for i, line in enumerate(lines) if line.startswith("layer"))
    assert "tensor(" not in out.stdout and all(c in lines[header] for c in res.cells.col_labels(short=True))
    rows = lines[header + 1:header + 1 + lab.n_layers]
    for layer, row in enumerate(rows):
        cells = row.split()
        assert cells[0] == f"L{layer}" and len(cells) == 1 + len(lab.to_str_tokens(CLEAN))
        assert [float(c) for c in cells[1:]] == pytest.approx(res.values[layer].tolist(), abs=5e-4)


def test_only_the_embedded_model_or_a_folder_turns_the_hub_off(monkeypatch, tmp_path):
    from interplab.__main__ import offline_unless_hub

    for model, off in (("gpt2", False), ("openai-community/gpt2", False), ("ioi-tiny", True), (str(tmp_path), True)):
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        offline_unless_hub(model)
        assert (os.environ.get("HF_HUB_OFFLINE") == "1") == off, model


def test_check_without_jupyterlab_is_ready_for_the_jupyter_you_have(monkeypatch, capsys):
    """The plain install (for VS Code, Colab, an existing Jupyter) has no JupyterLab: a note, not 'not ready'."""
    import interplab.__main__ as cli

    monkeypatch.setattr(cli, "missing_lab_modules", lambda: ["jupyterlab"])
    rc = cli.main(["check"])
    out = capsys.readouterr().out
    assert rc == 0 and out.splitlines()[-1].startswith("ready"), out
    assert "note  jupyterlab: not installed" in out and "FAIL" not in out
