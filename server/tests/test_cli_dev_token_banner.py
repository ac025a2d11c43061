"""``dexcli dev --token-file``: the banner says how to pass the token, never the token."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.test_cli_serve import health, spawn, wait_for_file


def test_the_token_banner_says_how_to_pass_the_token(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("banner-s3cret\n")
    address_file = tmp_path / "addr"
    proc = spawn(
        "dev", "--data-dir", str(tmp_path / "data"), "--port", "0",
        "--address-file", str(address_file), "--token-file", str(token_file),
    )  # fmt: skip
    try:
        address = wait_for_file(address_file, proc)
        assert health(address).returncode == 0
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "bearer token required" in out
    assert 'export DEX_TOKEN="$(cat TOKEN_FILE)"' in out
    assert 'credential=dex.FileCredential("TOKEN_FILE")' in out
    assert "ApiKeyCredential" in out
    assert "banner-s3cret" not in out + err
