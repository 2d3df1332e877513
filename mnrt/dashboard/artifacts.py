"""What one dashboard shows: the artefacts found at PATH (a codegen_dir, a `.mnlb` binary or a
run report), read through mnrt's public readers and kept once read.

Pages ask for what they need; nothing is read before a page asks, so the first page of a
large codegen_dir costs only its small JSON files. Replaying the binary (for kernel costs, the
modelled timeline and the Perfetto trace) happens once, for the first page that needs it.
Every file a page or a download names goes through `resolve`, which refuses anything outside
PATH."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..errors import InvalidArgumentError, MnrtError
from ..format import IDENTIFIER, LightBinary, jsonio
from ..format.files import check_usable, open_regular, parse_json
from ..replay import replay
from ..replay.info import info as binary_info
from . import shapes

T = TypeVar("T")

KINDS = ("codegen_dir", "binary", "report")
# JSON files a codegen_dir holds for other purposes: never taken for a run report or trace.
_COMPILER_JSON = {"report.json", "option.json", "graph.json"}
_SCAN_BYTES = 64 << 20  # larger JSON files are not opened while looking for reports/traces
# What every compile writes into its codegen_dir (compiler/codegen.py, mpmd/codegen.py): a
# folder with none of them is not one (and walking, say, / for its files would never end).
_CODEGEN_FILES = ("report.json", "option.json", "l3ir.txt", "model.mnlb")
# Files a codegen_dir lists at most: a compile writes a few dozen.
_MAX_FILES = 10_000
_LAYOUT_WORDS = ("layout", "slice", "slicing", "plan")
_LAYOUT_SUFFIXES = {".json", ".html", ".htm", ".txt"}


class ArtifactMissingError(InvalidArgumentError):
    """A file the page needs is not there (HTTP 404)."""

    status = 404


class PathRefusedError(InvalidArgumentError):
    """A request named a file outside PATH (HTTP 403)."""

    status = 403


class CorruptArtifactError(InvalidArgumentError):
    """A file is there but cannot be read as what it claims to be (HTTP 422)."""

    status = 422


def _kind(path: Path) -> str:
    """What PATH is, from its contents (not only its name)."""
    if path.is_dir():
        if not any((path / name).exists() for name in _CODEGEN_FILES):
            raise InvalidArgumentError(
                f"{path}: a folder that is not a codegen_dir (it holds none of "
                f"{', '.join(_CODEGEN_FILES)}); give a codegen_dir, a .mnlb light binary or a "
                "run report"
            )
        return "codegen_dir"
    try:  # a FIFO would wait for a writer, /dev/zero never end
        with open_regular(path, "a codegen_dir, a .mnlb light binary or a run report") as f:
            head = f.read(8)
    except MnrtError as e:
        raise ArtifactMissingError(str(e)) from None
    if head[4:8] == IDENTIFIER or path.suffix == ".mnlb":
        return "binary"
    if path.suffix == ".json":
        return "report"
    raise InvalidArgumentError(
        f"{path}: not a codegen_dir, a .mnlb light binary or a run report (.json from "
        "`mnrt run --report`); give one of those"
    )


def _by_parts(file: dict) -> list[str]:
    """A file's place in a listing: by folder, then name (a/b before a.json)."""
    return file["name"].split("/")


def _load_json(path: Path, what: str) -> Any:
    if not path.exists() and not path.is_symlink():
        raise ArtifactMissingError(f"{path}: {what} is missing")
    try:
        with open_regular(path, what) as f:  # not a FIFO, not /dev/zero
            return parse_json(f.read())
    except MnrtError as e:
        raise ArtifactMissingError(f"{path}: cannot read {what} ({e})") from None
    except OSError as e:
        raise ArtifactMissingError(f"{path}: cannot read {what} ({e.strerror or e})") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise CorruptArtifactError(
            f"{path}: {what} is not valid JSON ({e}); write it again (compile or run again)"
        ) from None


def _shaped(doc: Any, shape: shapes.Shape, path: Path, what: str, again: str) -> Any:
    """`doc`, read from `path`, when it has the shape the pages rely on (see shapes.py)."""
    wrong = shapes.mismatch(doc, shape)
    if wrong is not None:
        raise CorruptArtifactError(f"{path}: {what} is not as mnrt writes it ({wrong}); {again}")
    return doc


_COMPILE_AGAIN = "compile with codegen_dir= again"
_RUN_AGAIN = "write it again with `mnrt run FILE --report report.json`"
_PROFILE_AGAIN = "write it again with `mnrt run FILE --profile trace.json`"


class Artifacts:
    """The artefacts at `path`, and at `other` (a second binary to compare with)."""

    def __init__(self, path: str | Path, other: str | Path | None = None) -> None:
        self.path = Path(path)
        check_usable(self.path)
        if not self.path.exists():
            raise ArtifactMissingError(
                f"{self.path}: no such file or directory; give a codegen_dir, a .mnlb binary "
                "or a run report"
            )
        self.kind = _kind(self.path)
        self.root = (self.path if self.kind == "codegen_dir" else self.path.parent).resolve()
        self.other = Artifacts(other) if other is not None else None
        if self.other is not None and self.other.binary_path is None:
            raise InvalidArgumentError(
                f"{other}: holds no light binary to compare with; give a .mnlb or a codegen_dir"
            )
        self._lock = threading.Lock()
        self._making: dict[str, threading.Lock] = {}
        self._cache: dict[str, Any] = {}

    # --- files ----------------------------------------------------------------------------
    def resolve(self, name: str) -> Path:
        """The file `name` (relative to PATH) names, refusing absolute paths, `..` and links
        that lead out of PATH; a file PATH serves that file only."""
        parts = name.replace("\\", "/").split("/")
        if not name or name.startswith(("/", "\\")) or ".." in parts or ":" in parts[0]:
            raise PathRefusedError(f"{name!r}: only files under {self.path} are served")
        target = (self.root / name).resolve()
        allowed = (
            target.is_relative_to(self.root)
            if self.kind == "codegen_dir"
            else target == self.path.resolve()
        )
        if not allowed:
            raise PathRefusedError(f"{name!r}: only files under {self.path} are served")
        if not target.is_file():
            raise ArtifactMissingError(f"{name}: no such file under {self.path}")
        return target

    def files(self) -> list[dict]:
        """Every file under PATH (name relative to it, bytes), sorted by name."""
        return self.cached("files", self._files)

    def _files(self) -> list[dict]:
        if self.kind != "codegen_dir":
            return [{"name": self.path.name, "bytes": self.path.stat().st_size}]
        out = []
        # os.walk: a folder it cannot read is skipped, and links are not followed.
        for folder, dirs, names in os.walk(self.root):
            dirs.sort()
            for name in names:
                p = Path(folder) / name
                try:
                    st = p.lstat()
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    out.append({"name": p.relative_to(self.root).as_posix(), "bytes": st.st_size})
                    if len(out) == _MAX_FILES:
                        return sorted(out, key=_by_parts)
        return sorted(out, key=_by_parts)

    def cached(self, key: str, make: Callable[[], T]) -> T:
        """`make()`'s value, made once per key even when pages ask on several threads; a
        slow one (the replay) holds up only the pages that need it."""
        with self._lock:
            if key in self._cache:
                return self._cache[key]
            lock = self._making.setdefault(key, threading.Lock())
        with lock:
            with self._lock:
                if key in self._cache:
                    return self._cache[key]
            value = make()
            with self._lock:
                self._cache[key] = value
            return value

    def _json_files(self) -> list[tuple[str, Any]]:
        """Small JSON files of a codegen_dir other than the compiler's own, parsed (files
        that do not parse are left out: they are somebody else's)."""

        def scan() -> list[tuple[str, Any]]:
            found = []
            for f in self.files():
                if not f["name"].endswith(".json") or f["name"] in _COMPILER_JSON:
                    continue
                if f["bytes"] > _SCAN_BYTES:
                    continue
                try:
                    found.append((f["name"], parse_json((self.root / f["name"]).read_bytes())))
                except (OSError, ValueError, UnicodeDecodeError):
                    continue
            return found

        return self.cached("json_files", scan) if self.kind == "codegen_dir" else []

    # --- compile artefacts -------------------------------------------------------------------
    @property
    def compile_report(self) -> dict | None:
        """report.json of a codegen_dir (None for a binary or a run report)."""
        if self.kind != "codegen_dir":
            return None

        def load() -> dict:
            path = self.root / "report.json"
            doc = _load_json(path, "the compile report (report.json)")
            if not isinstance(doc, dict) or not isinstance(doc.get("phases"), list):
                raise CorruptArtifactError(
                    f"{path}: not a compile report (no phases); {_COMPILE_AGAIN}"
                )
            return _shaped(doc, shapes.COMPILE_REPORT, path, "the compile report", _COMPILE_AGAIN)

        return self.cached("compile_report", load)

    @property
    def options(self) -> dict | None:
        """option.json of a codegen_dir (the resolved compile options)."""
        if self.kind != "codegen_dir":
            return None
        path = self.root / "option.json"
        if not path.exists():
            return (self.compile_report or {}).get("options")
        return self.cached("options", lambda: _load_json(path, "option.json"))

    @property
    def graph(self) -> dict | None:
        """graph.json of a codegen_dir: the graph as compiled (nodes with ops, operands and
        attributes)."""
        path = self.root / "graph.json"
        if self.kind != "codegen_dir" or not path.exists():
            return None

        def load() -> Any:
            doc = _load_json(path, "graph.json")
            return _shaped(doc, shapes.GRAPH, path, "the compiled graph", _COMPILE_AGAIN)

        return self.cached("graph", load)

    @property
    def onnx_files(self) -> list[str]:
        return [f["name"] for f in self.files() if f["name"].endswith(".onnx")]

    @property
    def layout_files(self) -> list[dict]:
        """Files whose names speak of layouts, plans or time slices (the mapping work
        writes them), with their parsed JSON where they are JSON."""
        out = []
        for f in self.files() if self.kind == "codegen_dir" else []:
            p = Path(f["name"])
            if p.suffix not in _LAYOUT_SUFFIXES or f["name"] in _COMPILER_JSON:
                continue
            if any(word in p.stem.lower() for word in _LAYOUT_WORDS):
                out.append(f)
        return out

    # --- run report and profile ---------------------------------------------------------------
    @property
    def run_report(self) -> dict | None:
        """The run report at PATH, or the first one in a codegen_dir (`--report` JSON)."""
        if self.kind == "report":

            def load() -> dict:
                doc = _load_json(self.path, "the run report")
                if not isinstance(doc, dict) or "verdict" not in doc:
                    raise CorruptArtifactError(
                        f"{self.path}: not a run report (no verdict); write one with "
                        "`mnrt run FILE --report report.json`"
                    )
                return _shaped(doc, shapes.RUN_REPORT, self.path, "the run report", _RUN_AGAIN)

            return self.cached("run_report", load)
        for name, doc in self._json_files():
            if isinstance(doc, dict) and "verdict" in doc and "checks" in doc:
                return _shaped(doc, shapes.RUN_REPORT, self.root / name, "a run report", _RUN_AGAIN)
        return None

    @property
    def binary_path(self) -> Path | None:
        """The light binary shown: PATH, the codegen_dir's model.mnlb, or the binary a run
        report names when it is still there."""
        if self.kind == "binary":
            return self.path
        if self.kind == "codegen_dir":
            path = self.root / "model.mnlb"
            return path if path.exists() else None
        named = self.run_report.get("binary")
        if isinstance(named, str) and Path(named).is_file():
            return Path(named)
        return None

    @property
    def binary(self) -> LightBinary:
        path = self.binary_path
        if path is None:
            raise ArtifactMissingError(f"{self.path}: holds no light binary (model.mnlb)")
        return self.cached("binary", lambda: LightBinary.load(path))

    @property
    def info(self) -> dict:
        """`mnrt info --json` of the binary."""
        return self.cached("info", lambda: binary_info(self.binary))

    @property
    def dump(self) -> dict:
        """`mnrt dump --json` of the binary."""
        return self.cached("dump", lambda: jsonio.describe(self.binary))

    @property
    def replayed(self) -> Replayed:
        """The binary replayed once, verified and profiled (the first page that needs
        kernel costs or the timeline pays for it)."""
        return self.cached("replayed", lambda: Replayed.of(self.binary))

    @property
    def trace(self) -> dict:
        """The Perfetto trace: a profile in the codegen_dir, else that of a replay."""
        for name, doc in self._json_files():
            if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
                return _shaped(doc, shapes.TRACE, self.root / name, "a trace", _PROFILE_AGAIN)
        return self.replayed.trace


class Replayed:
    """One verified, profiled replay of a binary: the report, its modelled timeline and trace."""

    def __init__(self, report: Any) -> None:
        self.report = report.to_dict()
        self.timeline = report.timeline
        self.trace = report.profile.to_trace()

    @classmethod
    def of(cls, binary: LightBinary) -> Replayed:
        return cls(replay(binary, profile=True))
