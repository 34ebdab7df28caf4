"""mypy (strict) accepts the package, the documented examples and the
examples directory: the types a user's editor and checker see are the
ones the code has."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")


def test_mypy_accepts_the_package_the_readme_and_the_examples(tmp_path):
    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.skip("mypy is not installed (pip install mypy)")
    documented = []
    for doc in ("README.md", os.path.join("docs", "LIBRARY.md")):
        block = open(os.path.join(ROOT, doc)).read().split("```python\n", 1)[1].split("```", 1)[0]
        example = tmp_path / (os.path.basename(doc).lower().replace(".md", "_example.py"))
        example.write_text(block)
        documented.append(str(example))
    examples = os.path.join(ROOT, "examples", "python")
    files = documented + [os.path.join(examples, f) for f in sorted(os.listdir(examples)) if f.endswith(".py")]
    for what in (["-p", "mballoc"], files):
        r = subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *what],
            capture_output=True,
            text=True,
            cwd=str(tmp_path),
        )
        assert r.returncode == 0, r.stdout + r.stderr
