"""Engine backends: sim (CPU, deterministic), vllm (in-process AsyncLLM), triton."""
