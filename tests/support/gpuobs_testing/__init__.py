"""gpuobs_testing: what the tests and the benchmarks share, installed beside gpuobs (so bench/
imports it as any package): a real gpuobsd subprocess (`daemon`), gpuobs-synth processes
(`synth`), a segment written and drained in this very process (`written`), hand-made launch and
event records (`records`), numpy oracles (`oracles`), a Prometheus server (`prometheus`), the
soak (`soak`), an offline vLLM's environment (`vllm_payload`), a measured process's phases and
result as its parent reads them (`phase_file`). The tests' fixtures are in tests/conftest.py."""
