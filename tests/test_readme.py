"""The README's Python blocks run, in order, in one namespace (as a reader pasting them
into a session would), from a temporary directory."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 4
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__readme__"}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"README.md block {i + 1}", "exec"), namespace)
        except Exception as exc:            # say which block failed
            raise AssertionError(f"README block {i + 1} failed:\n{block}") from exc
    assert "clf" in namespace and "reg" in namespace
