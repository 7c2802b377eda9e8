"""The ERNIE production profile: the flags we promise, each one known to vLLM's engine arguments."""

from __future__ import annotations

import os
import re
import subprocess

from tests.conftest import REPO

PROFILE = REPO / "deploy" / "vllm-ernie.sh"
VLLM = REPO / ".venv-vllm" / "lib" / "python3.11" / "site-packages" / "vllm"


def _command(**env: str) -> list[str]:
    out = subprocess.run(["bash", str(PROFILE)], env={**os.environ, "VLLM_PYTHON": "echo", **env},
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def test_profile_serves_ernie_fp8_with_prefix_caching() -> None:
    command = _command()
    assert command[:3] == ["-m", "vllm.entrypoints.openai.api_server", "baidu/ERNIE-4.5-0.3B-PT"]
    flags = {arg: command[i + 1] if i + 1 < len(command) and not command[i + 1].startswith("--") else ""
             for i, arg in enumerate(command) if arg.startswith("--")}
    assert flags["--quantization"] == "fp8"
    assert "--enable-prefix-caching" in command
    assert int(flags["--max-model-len"]) >= 4096
    assert int(flags["--max-num-seqs"]) > 0
    assert 0 < float(flags["--gpu-memory-utilization"]) < 1
    assert "--api-key" not in command
    assert _command(VLLM_API_KEY="s3cret")[-2:] == ["--api-key", "s3cret"]


def test_every_flag_is_a_vllm_server_argument() -> None:
    # Engine flags are EngineArgs fields, server flags fields of the frontend's dataclass: `name: type = ...`.
    files = [VLLM / "engine" / "arg_utils.py", *sorted((VLLM / "entrypoints").rglob("cli_args.py"))]
    source = "\n".join(path.read_text() for path in files)
    flags = [arg for arg in _command(VLLM_API_KEY="k") if arg.startswith("--")]
    assert len(flags) >= 10
    for flag in flags:
        field = flag[2:].replace("-", "_")
        assert re.search(rf"^\s+{field}: ", source, re.MULTILINE) or flag in source, flag
