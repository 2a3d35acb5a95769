"""lancedb imported without its REST catalog client's API modules (lance_import)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from crow.memory.lance_import import _reexports


def test_lancedb_loads_without_the_rest_client_and_still_works(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        from crow.memory.lance_import import lancedb
        db = lancedb().connect({str(tmp_path)!r})
        table = db.create_table("t", data=[{{"id": 1, "vector": [0.1, 0.2]}}])
        assert table.search([0.1, 0.2]).limit(1).to_list()[0]["id"] == 1
        print(sorted(m for m in sys.modules if m.startswith("lance_namespace_urllib3_client.api")))
        if sys.version_info < (3, 12):  # overrides as LanceDB takes it on 3.12, then restored
            import overrides, typing_extensions, lancedb.db
            assert lancedb.db.override is typing_extensions.override
            assert overrides.override is not typing_extensions.override
            assert overrides.EnforceOverrides.__module__.startswith("overrides")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"  # eagerly, all nine API modules were imported


def test_a_package_init_with_code_is_left_alone(tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text('"""doc"""\nfrom a.b import C, D as E\nVERSION = "1"\n')
    assert _reexports(plain) == ({"C": ("a.b", "C"), "E": ("a.b", "D")}, {"VERSION": "1"})
    code = tmp_path / "code.py"
    code.write_text("from a.b import C\nC.setup()\n")
    assert _reexports(code) is None
    star = tmp_path / "star.py"
    star.write_text("from a.b import *\n")
    assert _reexports(star) is None
