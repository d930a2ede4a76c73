"""The compiled build of the hot modules (store/native.py, scripts/build_native.py): used exactly when it
matches the sources, never half, and the pure-Python modules it is built from still work on their own."""

from __future__ import annotations

import argparse
import ast
import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

import mqctl
from store import native
from tests.support.bounded import read_line
from tests.support.paths import script_module

ROOT = Path(__file__).resolve().parent.parent


def _build_script() -> ModuleType:
    return script_module("scripts/build_native.py")


MODULES: tuple[str, ...] = _build_script().MODULES


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    root, built = tmp_path / "src", tmp_path / "native"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "codec.py").write_text("X = 1\n")
    built.mkdir()
    manifest = {
        "cache_tag": sys.implementation.cache_tag,
        "modules": {"pkg.codec": native.digest(root / "pkg" / "codec.py")},
    }
    (built / native.MANIFEST).write_text(json.dumps(manifest))
    return root, built


def test_a_build_is_fresh_only_while_every_source_hashes_as_compiled(tmp_path: Path) -> None:
    root, built = _tree(tmp_path)
    assert native.fresh(built, root) == {"pkg.codec": native.digest(root / "pkg" / "codec.py")}
    (root / "pkg" / "codec.py").write_text("X = 2\n")  # an edited source: the build would shadow it
    assert native.fresh(built, root) is None


@pytest.mark.parametrize(
    ("section", "key", "file"),
    [
        ("inlined", "pkg.names", "pkg/names.py"),  # its Final constants: compiled code holds their values
        ("sources", "pkg/_fast.c", "pkg/_fast.c"),  # a C extension's source: its module would shadow it
    ],
)
def test_an_edited_source_the_build_hashes_without_compiling_it_as_python_makes_it_stale(
    tmp_path: Path, section: str, key: str, file: str
) -> None:
    root, built = _tree(tmp_path)
    (root / file).write_text("PREFIX: Final = '%RETRY%'\n")
    manifest = json.loads((built / native.MANIFEST).read_text())
    manifest[section] = {key: native.digest(root / file)}
    (built / native.MANIFEST).write_text(json.dumps(manifest))
    listed = native.inlined(built) if section == "inlined" else native.c_sources(built)
    assert native.fresh(built, root) == manifest["modules"] and listed == {key}
    (root / file).write_text("PREFIX: Final = '%R%'\n")
    assert native.fresh(built, root) is None


def test_a_build_for_another_interpreter_or_without_manifest_is_not_used(tmp_path: Path) -> None:
    root, built = _tree(tmp_path)
    manifest = json.loads((built / native.MANIFEST).read_text())
    (built / native.MANIFEST).write_text(json.dumps({**manifest, "cache_tag": "cpython-0"}))
    assert native.fresh(built, root) is None
    (built / native.MANIFEST).write_text("{not json")
    assert native.fresh(built, root) is None
    (built / native.MANIFEST).unlink()
    assert native.fresh(built, root) is None


def test_the_compiled_build_is_in_use_wherever_it_can_be_built() -> None:
    """`make` builds it (mypyc from the `native` extra, the system's C compiler); a stale or failed build
    would silently leave the broker at the pure-Python speed. It was built without a warning: mypyc's
    (code it compiles other than as written) and the C compiler's alike."""
    script = _build_script()
    if importlib.util.find_spec("mypyc") is None or script.why_pure() is not None:
        pytest.skip(f"the broker runs as pure Python here: {script.why_pure() or 'no mypyc'}")
    modules = native.active()
    assert modules is not None, "build/native is missing or stale: run `make native`"
    assert set(modules) == set(MODULES)
    assert json.loads((native.NATIVE_DIR / native.MANIFEST).read_text())["warnings"] == []
    for name in MODULES:
        path = Path(importlib.import_module(name).__file__ or "")
        assert path.is_relative_to(native.NATIVE_DIR) and path.suffix != ".py", name
    script = _build_script()
    assert native.c_sources() == set(script.extensions_to_build().values())
    if script.have_openssl():  # libssl-dev: the ACL check's HMAC is the C one
        from daemon.acl import signature

        assert signature._c_signature is not None and signature.Verifier("k")._verify is not None


@pytest.mark.slow  # an interpreter importing every compiled module from its source
def test_with_mqctl_native_0_every_module_runs_from_its_source() -> None:
    code = (
        "import importlib, json, sys\n"
        f"names = {list(MODULES)!r}\n"
        "files = [importlib.import_module(n).__file__ for n in names]\n"
        "from daemon.remoting.command import RemotingCommand\n"
        "from daemon.remoting.frame import decode_frame, encode_command\n"
        "cmd = RemotingCommand.request(310, {'a': 'G', 'b': 'T'}, b'body')\n"
        "back, used = decode_frame(encode_command(cmd))\n"
        "print(json.dumps([files, back.ext_fields, back.body.decode()]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "MQCTL_NATIVE": "0", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    files, ext, body = json.loads(out.stdout)
    assert all(f.endswith(".py") and not Path(f).is_relative_to(native.NATIVE_DIR) for f in files)
    assert (ext, body) == ({"a": "G", "b": "T"}, "body")


def test_a_builds_warnings_are_its_diagnostics_not_its_command_lines() -> None:
    said = """gcc -O3 -Wall -Wno-unknown-warning-option -c store/engine.c -o engine.o
daemon/acl/signature.py:100: warning: Treating generator comprehension as list
store/__native_compiled.c:12:5: warning: unused variable 'x' [-Wunused-variable]
/x/setuptools/_apply_pyprojecttoml.py:82: SetuptoolsDeprecationWarning: `project.license` as a TOML table
build_native: 20 modules compiled, 0 warning(s)"""
    assert _build_script().warnings_in(said) == said.splitlines()[1:4]


@pytest.mark.parametrize("module", MODULES)
def test_compiled_modules_bind_one_exception_type_per_name(module: str) -> None:
    """Compiled, a local holds one type: ``except A as e`` then ``except B as e`` in one function fails
    with TypeError when B is raised (a full disk's OSError came out as a crash this way)."""
    tree = ast.parse(native.source_path(module).read_text())
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            bound: dict[str, set[str]] = {}
            for node in ast.walk(fn):
                if isinstance(node, ast.ExceptHandler) and node.name and node.type is not None:
                    bound.setdefault(node.name, set()).add(ast.unparse(node.type))
            assert all(len(types) == 1 for types in bound.values()), (fn.name, bound)


def _is_dataclass_without_init(node: ast.ClassDef) -> bool:
    return any(
        isinstance(d, ast.Call)
        and ast.unparse(d.func) == "dataclass"
        and any(k.arg == "init" and ast.unparse(k.value) == "False" for k in d.keywords)
        for d in node.decorator_list
    )


@pytest.mark.parametrize("module", MODULES)
def test_hand_written_dataclass_inits_take_exactly_the_fields(module: str) -> None:
    """Compiled dataclasses on the hot path write their ``__init__`` out (``init=False``): the generated
    one runs interpreted, ~0.7 µs a construction. Each must take the fields in order, with the
    dataclass's defaults (None standing for a ``default_factory``), so that it still is that dataclass."""
    tree = ast.parse(native.source_path(module).read_text())
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and _is_dataclass_without_init(n)):
        fields = [
            (s.target.id, s.value)
            for s in cls.body
            if isinstance(s, ast.AnnAssign)
            and isinstance(s.target, ast.Name)
            and not ast.unparse(s.annotation).startswith("ClassVar")
        ]
        init = next(s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__")
        params = [a.arg for a in init.args.args[1:]]
        assert params == [name for name, _ in fields], cls.name
        defaults = [None] * (len(params) - len(init.args.defaults)) + list(init.args.defaults)
        for (name, declared), given in zip(fields, defaults, strict=True):
            if declared is None or given is None:
                assert declared is None and given is None, (cls.name, name)
            elif isinstance(declared, ast.Call) and ast.unparse(declared.func) == "field":
                assert ast.unparse(given) == "None", (cls.name, name)
            else:
                assert ast.unparse(given) == ast.unparse(declared), (cls.name, name)
        assigned = {
            t.attr
            for s in ast.walk(init)
            if isinstance(s, ast.Assign)
            for t in s.targets
            if isinstance(t, ast.Attribute)
        }
        assert assigned == set(params), cls.name


def _declares_final(path: Path) -> bool:
    return any(
        isinstance(node, ast.AnnAssign) and "Final" in ast.unparse(node.annotation)
        for node in ast.walk(ast.parse(path.read_text()))
    )


def test_every_uncompiled_source_whose_constants_compiled_code_inlines_is_hashed() -> None:
    """mypyc writes the values of imported ``Final`` constants into the compiled code: a module that
    declares some and is imported by a compiled one must be in the manifest's ``inlined`` (build_native's
    INLINED), or editing it would leave its old values in force wherever the build runs."""
    inlined = set(_build_script().INLINED)
    imported: set[str] = set()
    for name in MODULES:
        for node in ast.walk(ast.parse(native.source_path(name).read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    ours = {m for m in imported if m.split(".")[0] in ("store", "daemon") and native.source_path(m).exists()}
    needed = {m for m in ours - set(MODULES) if _declares_final(native.source_path(m))}
    assert needed == inlined


def _mqctl_version(env: dict[str, str], cwd: Path = ROOT) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "mqctl", "--version"], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.slow  # CLI processes
def test_mqctl_version_names_the_build_that_runs() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    off = _mqctl_version({**env, "MQCTL_NATIVE": "0"})
    assert off == f"mqctl {mqctl.__version__} (pure Python: MQCTL_NATIVE=0)"
    if native.active() is None:
        pytest.skip("no compiled build here: the other half of this test is the pure one")
    hmac = ", C HMAC" if native.HMAC_SOURCE in native.c_sources() else ""
    assert _mqctl_version(env) == f"mqctl {mqctl.__version__} (compiled: {len(MODULES)} modules{hmac})"


def test_a_start_during_a_build_says_it_runs_pure_python_until_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(native, "active", lambda: None)
    monkeypatch.setattr(native, "LOCK", tmp_path / "native.lock")
    monkeypatch.setattr(native, "NATIVE_DIR", tmp_path / "native")
    monkeypatch.delenv("MQCTL_NATIVE", raising=False)
    assert native.describe_build() == "pure Python"
    with open(native.LOCK, "w") as lock:  # what build_native.py holds while it compiles
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert native.describe_build() == "pure Python: compiling in the background, for the next start"
    native.NATIVE_DIR.mkdir()
    (native.NATIVE_DIR / native.MANIFEST).write_text("{}")  # a build that fresh() refused
    assert native.describe_build() == "pure Python: a source changed since the build was compiled"


@pytest.mark.slow  # a second process holds the lock for a second
def test_a_build_waits_for_the_one_in_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make test` after `make run`: the tests wait for the background build instead of racing it."""
    script = _build_script()
    monkeypatch.setattr(script.native, "LOCK", tmp_path / "native.lock")
    hold = "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, 2); print('held', flush=True); time.sleep(1)"
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(tmp_path / "native.lock")], stdout=subprocess.PIPE, text=True
    )
    assert read_line(holder) == "held\n"
    held = time.monotonic()
    with script._turn():
        assert time.monotonic() - held > 0.5  # the lock came only when the holder let it go
    holder.wait()
    assert "waiting for the build in progress" in capsys.readouterr().err


def test_a_second_background_build_leaves_the_first_at_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make run` again while the last one's build compiles: no second build, and the log stays whole."""
    script = _build_script()
    monkeypatch.setattr(script.native, "LOCK", tmp_path / "native.lock")
    monkeypatch.setattr(script, "LOG", tmp_path / "native.log")
    script.LOG.write_text("compiling\n")
    with open(script.native.LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert script._in_background(argparse.Namespace(force=False, install_deps=True)) == 0
    assert "still compiling in the background" in capsys.readouterr().err
    assert script.LOG.read_text() == "compiling\n"


def _copy(names: tuple[str, ...], dest: Path) -> Path:
    for name in names:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "_native"))
        else:
            shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.mark.slow  # pip builds a wheel
def test_without_a_c_compiler_the_wheel_is_the_pure_package(tmp_path: Path) -> None:
    """As black's: a machine that cannot compile installs the same package as pure Python, without
    fetching mypy to build it. (Building writes into the tree, so the wheel is built from a copy.)"""
    if (
        importlib.util.find_spec("wheel") is None
        and importlib.util.find_spec("setuptools.command.bdist_wheel") is None
    ):
        pytest.skip(
            "no wheel support in this environment's setuptools: pip wheel --no-build-isolation needs it"
        )
    src = _copy(
        (
            "mqctl",
            "daemon",
            "store",
            "scripts",
            "man",
            "completions",
            "setup.py",
            "pyproject.toml",
            "README.md",
            "MANIFEST.in",
        ),
        tmp_path / "src",
    )
    ask = "import build_backend; print(build_backend.get_requires_for_build_wheel())"
    env = {**os.environ, "PYTHONPATH": str(src / "scripts")}
    requires = {
        cc: subprocess.run(
            [sys.executable, "-c", ask],
            cwd=src,
            env={**env, "CC": cc},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for cc in ("/bin/false", os.environ.get("CC", ""))
    }
    assert "mypy" not in requires["/bin/false"]
    if _build_script().why_pure() is None:
        assert "mypy" in requires[os.environ.get("CC", "")]
    out = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(out),
            str(src),
        ],
        env={**os.environ, "CC": "/bin/false"},
        check=True,
        capture_output=True,
    )
    (wheel,) = out.iterdir()
    assert wheel.name == f"mqctl-{mqctl.__version__}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    assert "store/native.py" in names and "daemon/acl/_hmacsha1.c" in names
    assert not [n for n in names if n.endswith(".so") or "_native/" in n]
    # the man pages and completions install under the prefix's share/, where man and the shells look
    data = f"mqctl-{mqctl.__version__}.data/data/share/"
    pages = {p.name for p in (ROOT / "man").glob("*.1")}
    assert {n.removeprefix(data + "man/man1/") for n in names if n.startswith(data + "man/man1/")} == pages
    assert {
        data + "bash-completion/completions/mqctl.bash",
        data + "zsh/site-functions/_mqctl",
        data + "fish/vendor_completions.d/mqctl.fish",
    } <= set(names)


@pytest.mark.slow  # CLI processes
def test_an_installed_build_runs_until_an_installed_source_is_edited(tmp_path: Path) -> None:
    """A wheel puts the build in store/_native beside the sources it was compiled from, its manifest
    without mtimes (an install sets its own): a source edited in site-packages makes it pure Python."""
    if native.active() is None:
        pytest.skip("no compiled build here to install")
    site = _copy(("mqctl", "daemon", "store"), tmp_path / "site")
    shutil.copytree(native.NATIVE_DIR, site / "store" / "_native")
    manifest = json.loads((site / "store" / "_native" / native.MANIFEST).read_text())
    del manifest["stamps"]
    (site / "store" / "_native" / native.MANIFEST).write_text(json.dumps(manifest))
    env = {**os.environ, "PYTHONPATH": str(site)}
    hmac = ", C HMAC" if native.HMAC_SOURCE in native.c_sources() else ""
    assert _mqctl_version(env, tmp_path).endswith(f"(compiled: {len(MODULES)} modules{hmac})")
    with (site / "store" / "engine.py").open("a") as f:
        f.write("\n")
    assert _mqctl_version(env, tmp_path).endswith(
        "(pure Python: a source changed since the build was compiled)"
    )


@pytest.mark.parametrize(
    ("path", "cls", "first"),
    [
        ("daemon/broker/processors/send.py", "QueueSlot", ["checked", "writable", "retry", "multi_tag"]),
        ("store/consumequeue.py", "QueueHandle", ["topic", "queue_id", "cq", "generation"]),
        ("store/consumequeue.py", "ConsumeQueue", ["next_offset", "_last", "max_physic_offset", "dirty"]),
        ("store/mapped_file.py", "MappedFile", ["wrote_position", "prepared_position", "flushed_position"]),
    ],
)
def test_what_a_send_reads_leads_its_compiled_objects(path: str, cls: str, first: list[str]) -> None:
    """Compiled, a class's fields sit in the object in the order its body declares them (then as
    ``__init__`` first assigns them): a send to one of thousands of queues reads each of these objects
    cold, so the fields it reads come first, together (FileMapping declares ``mm`` last, just before
    MappedFile's positions)."""
    tree = ast.parse((ROOT / path).read_text())
    (body,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == cls]
    declared = [
        node.target.id
        for node in body.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    ]
    assert declared[: len(first)] == first
    if cls == "MappedFile":
        (base,) = [
            node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "FileMapping"
        ]
        names = [
            n.target.id for n in base.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
        ]
        assert names[-1] == "mm"


def test_the_manifest_hashes_the_sources_before_they_are_compiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A source edited while a build compiles must leave that build stale: hashed after compiling, the
    manifest would claim the edited source and the old compiled code would run as if it matched."""
    import mypyc.build

    script = _build_script()
    order: list[str] = []

    def digest(path: Path) -> str:
        order.append("hash")
        return "0" * 64

    def compiling(*args: object, **kwargs: object) -> list[object]:
        order.append("compile")
        raise ValueError("stop here: only the order is under test")

    monkeypatch.setattr(script.native, "digest", digest)
    monkeypatch.setattr(mypyc.build, "mypycify", compiling)
    with pytest.raises(RuntimeError, match="stop here"):
        script.build(tmp_path / "native", tmp_path / "work", {})
    assert order[-1] == "compile" and order.count("compile") == 1
    assert order[0] == "hash"
