"""The ERNIE production profile: the flags we promise, each one known to vLLM's engine arguments."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.conftest import REPO

PROFILE = REPO / "deploy" / "vllm-ernie.sh"
VLLM = REPO / ".venv-vllm" / "lib" / "python3.11" / "site-packages" / "vllm"


def _run(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(PROFILE)], env={**os.environ, "VLLM_PYTHON": "echo", **env},
                          capture_output=True, text=True)


def _command(**env: str) -> list[str]:
    run = _run(**{"VLLM_API_KEY": "k", **env})
    assert run.returncode == 0, run.stderr
    return run.stdout.split()


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
    assert flags["--stream-interval"] == "4"
    assert "--api-key" not in command and "k" not in command


def test_the_key_goes_by_environment_and_a_network_host_needs_one(tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\necho "key=$VLLM_API_KEY"\n')
    python.chmod(0o755)
    assert _run(VLLM_PYTHON=str(python), VLLM_API_KEY="s3cret").stdout.strip() == "key=s3cret"
    refused = _run(VLLM_API_KEY="")
    assert refused.returncode == 2 and "set VLLM_API_KEY" in refused.stderr and not refused.stdout
    assert _run(VLLM_API_KEY="", HOST="127.0.0.1").returncode == 0


def test_every_flag_is_a_vllm_server_argument() -> None:
    # Engine flags are EngineArgs fields, server flags fields of the frontend's dataclass: `name: type = ...`.
    files = [VLLM / "engine" / "arg_utils.py", *sorted((VLLM / "entrypoints").rglob("cli_args.py"))]
    source = "\n".join(path.read_text() for path in files)
    flags = [arg for arg in _command(VLLM_API_KEY="k") if arg.startswith("--")]
    assert len(flags) >= 9
    for flag in flags:
        field = flag[2:].replace("-", "_")
        assert re.search(rf"^\s+{field}: ", source, re.MULTILINE) or flag in source, flag
