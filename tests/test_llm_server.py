"""How `rag llm` starts vLLM on CPU: the weights' type follows the CPU, the reserved cores follow the machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag.components.cpu import cpu_flags
from rag.config import Settings
from rag.tools.llm_server import llm_dtype, vllm_command, vllm_environment

CPUINFO = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu avx2\n"


def test_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    assert cpu_flags(tmp_path / "cpuinfo") == {"fpu", "sse2", "avx2", "avx512f", "avx512_bf16"}
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_auto_dtype_is_bfloat16_only_with_native_bf16() -> None:
    assert llm_dtype("auto", frozenset({"avx2", "avx512_bf16"})) == "bfloat16"
    assert llm_dtype("auto", frozenset({"avx2", "amx_bf16"})) == "bfloat16"
    assert llm_dtype("auto", frozenset({"avx2", "avx512f"})) == "float32"
    assert llm_dtype("bfloat16", frozenset({"avx2"})) == "bfloat16"


def test_the_command_carries_the_chosen_dtype() -> None:
    command = vllm_command(Settings(llm_base_url="http://127.0.0.1:8011/v1", llm_dtype="float32"))
    assert command[command.index("--dtype") + 1] == "float32"


def test_the_command_streams_several_tokens_to_a_chunk() -> None:
    command = vllm_command(Settings(llm_base_url="http://127.0.0.1:8011/v1", llm_stream_interval=6))
    assert command[command.index("--stream-interval") + 1] == "6"
    assert Settings().llm_stream_interval == 4


def test_reserved_cores_follow_the_machine_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(llm_base_url="http://127.0.0.1:8011/v1")
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert vllm_environment(settings)["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert vllm_environment(settings)["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1"
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "2")
    assert vllm_environment(settings)["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "2"
