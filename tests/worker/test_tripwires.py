"""The worker's audit hook, in a fresh interpreter (an audit hook cannot be removed)."""
import json
import subprocess
import sys
import textwrap

from tests.helpers import ROOT

SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    sys.path.insert(0, {root!r})
    from kbench.worker.tripwires import AuditLog
    own, lib, cache = Path({own!r}), Path({lib!r}), Path({cache!r})
    sys.pycache_prefix = str(cache)
    sys.dont_write_bytecode = False
    sys.path.insert(0, str(lib))
    log = AuditLog([str(own)])
    log.install()
    sub = {{}}
    exec(compile((own / "submission.py").read_text(), str(own / "submission.py"), "exec"), sub)
    sub["run"]()
    print(json.dumps(log.take()))
""")


def _events(tmp_path, body: str) -> list[str]:
    own, lib, cache = tmp_path / "sub", tmp_path / "lib", tmp_path / "pycache"
    own.mkdir()
    (lib / "libpkg").mkdir(parents=True)
    (lib / "libpkg" / "__init__.py").write_text("VALUE = 1\n")
    (own / "submission.py").write_text(textwrap.dedent(body))
    script = SCRIPT.format(root=str(ROOT), own=str(own), lib=str(lib), cache=str(cache))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_an_import_writing_its_bytecode_cache_is_not_flagged(tmp_path):
    events = _events(tmp_path, """
        def run():
            import libpkg
            assert libpkg.VALUE == 1
    """)
    assert events == []
    assert list((tmp_path / "pycache").rglob("*.pyc")), "the import did write its cache"


def test_the_submission_writing_a_pyc_name_itself_is_flagged(tmp_path):
    target = tmp_path / "pycache" / "x.cpython-312.pyc"
    events = _events(tmp_path, f"""
        def run():
            import os
            os.makedirs({str(target.parent)!r}, exist_ok=True)
            with open({str(target)!r}, "wb") as f:
                f.write(b"0")
    """)
    assert any("opened" in e and str(target) in e for e in events), events
