# Sourced by vllm.sh and saelens.sh: an environment of their own under build/, with the CPU torch scripts/setup.sh
# pins, built again only when pyproject.toml or the calling script changed (FORCE=1 rebuilds).
#   side_venv_stale VENV SCRIPT   true when VENV must be (re)built
#   side_venv_start VENV          a fresh VENV with pip and the pinned CPU torch
#   side_venv_done VENV SCRIPT    mark VENV built for this pyproject.toml and SCRIPT
PY=${PYTHON:-python3}

side_venv_stamp() {  # python script
  cat pyproject.toml "$2" | "$1" -c 'import hashlib, sys
print(hashlib.sha256(sys.stdin.buffer.read() + sys.version.encode()).hexdigest())'
}

side_venv_stale() {
  [ -n "${FORCE:-}" ] || [ ! -x "$1/bin/python" ] || [ ! -f "$1/.interplab-setup" ] \
    || [ "$(cat "$1/.interplab-setup")" != "$(side_venv_stamp "$1/bin/python" "$2")" ]
}

side_venv_start() {
  rm -rf "$1"
  "$PY" -m venv "$1"
  "$1/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$1/bin/python" -m pip install -q "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu --retries 1
}

side_venv_done() {
  side_venv_stamp "$1/bin/python" "$2" > "$1/.interplab-setup"
}
